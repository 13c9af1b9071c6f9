--[[ schedules: move the shard's schedules (lua/lib/schedules.lua) from one layout's keys to the
other's (pinlater migrate-layout, once the queues are moved).

Both layouts keep the same three structures with the same contents (keys.py schedule_keys,
keys_compact.py compact_schedule_keys), so a structure the destination lacks is renamed (O(1)).
If the destination already holds schedules (servers wrote both layouts), the source's are added
to them, a schedule in both taking the source's row (the layout the shard was served in); then
the source's keys go.
Schedules are few (an operator's list): one call moves them all.

KEYS[1]  the source's definitions hash (pls_{S}.d, or plc:{S}:sd)
KEYS[2]  the source's due set (pls_{S}.n, or plc:{S}:sn)
KEYS[3]  the source's index (pls_{S}.i, or plc:{S}:si)
KEYS[4..6]  the destination's, in the same order

Returns how many schedules the destination gained (a row replaced is not one).
]]
local from_rows, from_due, from_index = KEYS[1], KEYS[2], KEYS[3]
local to_rows, to_due, to_index = KEYS[4], KEYS[5], KEYS[6]
if redis.call('EXISTS', to_rows, to_due, to_index) == 0 then
  local n = redis.call('HLEN', from_rows)
  for i = 1, 3 do
    if redis.call('EXISTS', KEYS[i]) == 1 then
      redis.call('RENAME', KEYS[i], KEYS[i + 3])
    end
  end
  return n
end
local gained = 0
local rows = redis.call('HGETALL', from_rows)
for i = 1, #rows, 2 do
  local field = rows[i]
  gained = gained + redis.call('HSET', to_rows, field, rows[i + 1])
  redis.call('ZADD', to_index, 0, field)
  local due = redis.call('ZSCORE', from_due, field)
  if due then
    redis.call('ZADD', to_due, due, field)
  else
    redis.call('ZREM', to_due, field)  -- paused in the source
  end
end
redis.call('DEL', from_rows, from_due, from_index)
return gained
