--[[ queue_counts: the members of many sorted sets, in all and those scored up to now (ZCARD,
then ZCOUNT where the set is not empty), for the job counts of every queue of a shard in few
round trips.

As lua/queue_counts.lua, except that ARGV[1], in seconds, is converted to the sets' millisecond
scores. In a Redis Cluster one call may only carry the keys of one queue (one slot).

KEYS[1]     the first set to count, and so on to KEYS[n]: state sets (plc:{S:Q}:p{p}:s{s})
            and held sets (plc:{S:Q}:p{p}:h), in any order; a missing key counts as empty
ARGV[1]     now, seconds: the highest score counted as ready (ZRANGEBYSCORE syntax)

Returns a flat array, two numbers per key in KEYS order: its members, then those scored <= now.
]]
--@include records
local now = bound_ms(ARGV[1])
local out = {}
for i, key in ipairs(KEYS) do
  local total = redis.call('ZCARD', key)
  local ready = 0
  if total > 0 then
    ready = redis.call('ZCOUNT', key, '-inf', now)
  end
  out[2 * i - 1] = total
  out[2 * i] = ready
end
return out
