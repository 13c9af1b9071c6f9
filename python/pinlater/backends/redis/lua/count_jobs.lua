--[[ count_jobs: how many members of one set have a score in a range (ZCOUNT, O(log n)); for
PENDING, with the jobs the dequeue broker holds (lib/holds.lua), which are PENDING too.

KEYS[1]  queue names sorted set (pln_{shard})
KEYS[2]  the sorted set to count (plq_{shard}_{queue}.p{p}_s{s})
KEYS[3]  optional: the held set to count with it (plq_{shard}_{queue}.p{p}_h)
ARGV[1]  queue name
ARGV[2]  lowest score (ZRANGEBYSCORE syntax: '-inf', '(x' or 'x')
ARGV[3]  highest score (same syntax)

Returns the count, or -1 if the queue does not exist.
]]
local names_key, set_key = KEYS[1], KEYS[2]
local queue, low, high = ARGV[1], ARGV[2], ARGV[3]
if not redis.call('ZSCORE', names_key, queue) then
  return -1
end
local count = redis.call('ZCOUNT', set_key, low, high)
if KEYS[3] then
  count = count + redis.call('ZCOUNT', KEYS[3], low, high)
end
return count
