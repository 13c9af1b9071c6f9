--[[ retry_failed_jobs: move up to ARGV[5] FAILED jobs of one priority back to PENDING.

Oldest failures first. Each moved job gets ar = ARGV[3] (al is left as it was, as the original
did), its claim removed, ua = now, and a PENDING score of ARGV[4]. A member whose hash is gone
(evicted) is removed and counted, not moved.

KEYS[1]  queue names sorted set (pln_{shard})
KEYS[2]  PENDING sorted set (plq_{shard}_{queue}.p{p}_s0)
KEYS[3]  FAILED sorted set (plq_{shard}_{queue}.p{p}_s3)
KEYS[4]  expiry index (pld_{shard}_{queue}.e, keys.py)
ARGV[1]  queue name
ARGV[2]  job hash key prefix (plh_{shard}_{queue}.)
ARGV[3]  attempts remaining to set
ARGV[4]  run after, seconds as float
ARGV[5]  limit
ARGV[6]  now, seconds as float

Hash fields: bd al ar ua cd ex (keys.JobField).
A moved job loses its expiry (ex, and its entry in the expiry index, if any): an operator who
puts a job back wants it run.

Returns {moved, evicted}, or -1 if the queue does not exist.
]]
--@include holds
local names_key, pending_key, failed_key = KEYS[1], KEYS[2], KEYS[3]
local queue, hash_prefix, attempts, run_after = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local limit, now = tonumber(ARGV[5]), ARGV[6]
if not redis.call('ZSCORE', names_key, queue) then
  return -1
end
if limit <= 0 then
  return {0, 0}
end
local ids = redis.call('ZRANGE', failed_key, 0, limit - 1)
local moved, evicted, cleared = 0, 0, {}
if #ids > 0 then
  redis.call('ZREMRANGEBYRANK', failed_key, 0, #ids - 1)
end
for _, id in ipairs(ids) do
  local hash_key = hash_prefix .. id
  local job = redis.call('HMGET', hash_key, 'bd', 'al')
  if not job[1] or not job[2] then
    redis.call('DEL', hash_key)
    evicted = evicted + 1
  else
    redis.call('ZADD', pending_key, run_after, id)
    redis.call('HDEL', hash_key, 'cd', 'ex')
    redis.call('HSET', hash_key, 'ar', attempts, 'ua', now)
    cleared[#cleared + 1] = id
    moved = moved + 1
  end
end
zrem_all(KEYS[4], cleared)
return {moved, evicted}
