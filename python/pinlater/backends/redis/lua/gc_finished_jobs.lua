--[[ gc_finished_jobs: delete up to ARGV[4] jobs of a final state that finished before ARGV[3].

Oldest first (SUCCEEDED / FAILED score < ARGV[3]); each job's hash goes with it.

KEYS[1]  queue names sorted set (pln_{shard})
KEYS[2]  SUCCEEDED or FAILED sorted set (plq_{shard}_{queue}.p{p}_s2 or _s3)
ARGV[1]  queue name
ARGV[2]  job hash key prefix (plh_{shard}_{queue}.)
ARGV[3]  finished before, seconds as float (exclusive)
ARGV[4]  limit

Returns how many jobs were deleted, or -1 if the queue does not exist.
]]
local names_key, set_key = KEYS[1], KEYS[2]
local queue, hash_prefix, before, limit = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
if not redis.call('ZSCORE', names_key, queue) then
  return -1
end
if limit <= 0 then
  return 0
end
local ids = redis.call('ZRANGEBYSCORE', set_key, '-inf', '(' .. before, 'LIMIT', 0, limit)
if #ids > 0 then
  redis.call('ZREMRANGEBYRANK', set_key, 0, #ids - 1)
end
for _, id in ipairs(ids) do
  redis.call('DEL', hash_prefix .. id)
end
return #ids
