--[[ queue_counts: the members of many sorted sets, in all and those scored up to now (ZCARD,
then ZCOUNT where the set is not empty), for the job counts of every queue of a shard in few
round trips.

As lua/queue_counts.lua, except that ARGV[1], in seconds, is converted to the sets' millisecond
scores, and ready lists are counted too (ARGV[2]). In a Redis Cluster one call may only carry the keys of one queue (one slot).

KEYS[1]     the first set to count, and so on to KEYS[n]: state sets (plc:{S:Q}:p{p}:s{s}),
            held sets (plc:{S:Q}:p{p}:h) and ready lists (plc:{S:Q}:p{p}:r), each ready list
            followed by its queue's records hash (plc:{S:Q}:j, whose field t{p} it needs), in
            any order; a missing key counts as empty
ARGV[1]     now, seconds: the highest score counted as ready (ZRANGEBYSCORE syntax)
ARGV[2]     optional: one letter per key, 'z' for a sorted set, 'r' for a ready list, 'j' for the
            records hash after it (none: every key is a sorted set)

Returns a flat array, two numbers per key in KEYS order, records hashes left out: its members
(a ready list's PENDING jobs, lib/ready.lua), then those scored <= now.
]]
--@include records
--@include ready
local now = bound_ms(ARGV[1])
local kinds = ARGV[2] or ''
local out = {}
for i, key in ipairs(KEYS) do
  local kind = string.sub(kinds, i, i)
  if kind == 'r' then
    local total = ready_count(key, KEYS[i + 1], '-inf', '+inf')
    out[#out + 1] = total
    out[#out + 1] = ready_count(key, KEYS[i + 1], '-inf', now)
  elseif kind ~= 'j' then
    local total = redis.call('ZCARD', key)
    local ready = 0
    if total > 0 then
      ready = redis.call('ZCOUNT', key, '-inf', now)
    end
    out[#out + 1] = total
    out[#out + 1] = ready
  end
end
return out
