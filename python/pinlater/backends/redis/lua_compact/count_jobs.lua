--[[ count_jobs: how many members of one set have a score in a range (ZCOUNT, O(log n)); for
PENDING, with the jobs the dequeue broker holds (lib/holds.lua), which are PENDING too.

As lua/count_jobs.lua, except: KEYS[1] is the queue's records hash (the queue exists while it has
field `c`), and the bounds, given in seconds, are converted to the sets' millisecond scores.

KEYS[1]  the queue's records hash (plc:{S:Q}:j), with its fields c and id
KEYS[2]  the sorted set to count (plc:{S:Q}:p{p}:s{s})
KEYS[3]  optional: the held set to count with it (plc:{S:Q}:p{p}:h)
KEYS[4]  optional, with KEYS[3]: the ready list to count with them (plc:{S:Q}:p{p}:r; its
         PENDING jobs by their scores, lib/ready.lua)
KEYS[5]  optional, with them: the waiting set to count with them (plc:{S:Q}:p{p}:w: jobs of
         ordered groups waiting behind the active ones, PENDING too; lib/groups.lua)
ARGV[1]  queue name
ARGV[2]  lowest score, seconds (ZRANGEBYSCORE syntax: '-inf', '(x' or 'x')
ARGV[3]  highest score (same syntax)

Returns the count, or -1 if the queue does not exist.
]]
--@include records
--@include ready
local meta_key, set_key = KEYS[1], KEYS[2]
local low, high = bound_ms(ARGV[2]), bound_ms(ARGV[3])
if redis.call('HEXISTS', meta_key, 'c') == 0 then
  return -1
end
local count = redis.call('ZCOUNT', set_key, low, high)
if KEYS[3] then
  count = count + redis.call('ZCOUNT', KEYS[3], low, high)
end
if KEYS[4] then
  count = count + ready_count(KEYS[4], meta_key, low, high)
end
if KEYS[5] then
  count = count + redis.call('ZCOUNT', KEYS[5], low, high)
end
return count
