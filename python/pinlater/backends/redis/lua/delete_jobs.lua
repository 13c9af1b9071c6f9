--[[ delete_jobs: delete up to ARGV[5] jobs of one set within a score range (lowest first), or
exactly the listed ids that are still in the set (the store's body-regex path picks them).

KEYS[1]  queue names sorted set (pln_{shard})
KEYS[2]  the sorted set to delete from (plq_{shard}_{queue}.p{p}_s{s})
ARGV[1]  queue name
ARGV[2]  job hash key prefix (plh_{shard}_{queue}.)
ARGV[3]  lowest score (ZRANGEBYSCORE syntax: '-inf', '(x' or 'x')
ARGV[4]  highest score (same syntax)
ARGV[5]  limit
ARGV[6..] local ids to delete instead of a range (optional)

Returns how many jobs were deleted, or -1 if the queue does not exist.
]]
local names_key, set_key = KEYS[1], KEYS[2]
local queue, hash_prefix, low, high, limit = ARGV[1], ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5])
if not redis.call('ZSCORE', names_key, queue) then
  return -1
end
local deleted = 0
if #ARGV > 5 then
  for i = 6, #ARGV do
    if deleted >= limit then
      break
    end
    if redis.call('ZREM', set_key, ARGV[i]) == 1 then
      redis.call('DEL', hash_prefix .. ARGV[i])
      deleted = deleted + 1
    end
  end
  return deleted
end
if limit <= 0 then
  return 0
end
local ids = redis.call('ZRANGEBYSCORE', set_key, low, high, 'LIMIT', 0, limit)
for _, id in ipairs(ids) do
  redis.call('ZREM', set_key, id)
  redis.call('DEL', hash_prefix .. id)
end
return #ids
