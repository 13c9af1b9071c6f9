--[[ oldest_ready: the lowest score up to now of each of many PENDING sets and ready lists (the
run after of each queue's and priority's oldest ready job), for /metrics' queue ages.

As lua/oldest_ready.lua, except that ARGV[1], in seconds, is converted to the sets' millisecond
scores and the answers are seconds again, and ready lists are read too (ARGV[2]): a list's first
PENDING job within its first 64 entries (tombstones skipped; a list whose first 64 are all
tombstones answers nil until a dequeue clears them). The waiting sets of ordered groups are not
passed: their jobs are not handed out. In a Redis Cluster one call may only carry the keys of one
queue (one slot).

KEYS[1]     the first PENDING set (plc:{S:Q}:p{p}:s0) or ready list (plc:{S:Q}:p{p}:r), and so on
            to KEYS[n], each ready list followed by its queue's records hash (plc:{S:Q}:j); a
            missing key is empty
ARGV[1]     now, seconds: the highest score that is ready (ZRANGEBYSCORE syntax)
ARGV[2]     optional: one letter per key, 'z' for a sorted set, 'r' for a ready list, 'j' for the
            records hash after it (none: every key is a sorted set)

Returns one value per key in KEYS order, records hashes left out: the lowest score of a PENDING
job if it is at most now (seconds, text), else nil.
]]
--@include records
--@include ready
local now = bound_ms(ARGV[1])
local kinds = ARGV[2] or ''
local out = {}
for i, key in ipairs(KEYS) do
  local kind = string.sub(kinds, i, i)
  if kind == 'r' then
    local found = false
    local reader = ready_reader(key, KEYS[i + 1], true, 64)
    for _ = 1, 64 do
      local e = reader.take()
      if not e or ready_place(e.score, '-inf', now) > 0 then
        break
      end
      if e.state == 'job' or e.state == 'gone' then
        found = to_seconds(e.score)
        break
      end
    end
    out[#out + 1] = found
  elseif kind ~= 'j' then
    local first = redis.call('ZRANGEBYSCORE', key, '-inf', now, 'WITHSCORES', 'LIMIT', 0, 1)
    out[#out + 1] = first[2] and to_seconds(first[2]) or false
  end
end
return out
