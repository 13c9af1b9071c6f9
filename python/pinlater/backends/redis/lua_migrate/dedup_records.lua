--[[ dedup_records: move one queue's dedup records (lua/lib/dedup.lua) from one layout's keys
to the other's, in one atomic call (pinlater migrate-layout, once the queue's jobs are moved).

Both layouts keep the same three structures with the same contents (keys.py, keys_compact.py),
so a structure the destination lacks is renamed (O(1)). If the destination already holds
records of the queue (servers wrote both layouts), they are merged: for a dedup key in both, the
record of the later holder (the higher id: ids are handed out in order) is kept, and the other
holder's id and gc entries dropped. A merge reads the whole source in this call: it only
happens to a shard served in both layouts at once.

KEYS[1]  the source's records (pld_{S}_{Q}.k, or plc:{S:Q}:dk)
KEYS[2]  the source's ids hash (pld_{S}_{Q}.i, or plc:{S:Q}:di)
KEYS[3]  the source's gc set (pld_{S}_{Q}.g, or plc:{S:Q}:dg)
KEYS[4..6]  the destination's, in the same order

Returns how many records the destination gained.
]]
--@include dedup
local from_records, from_ids, from_gc = KEYS[1], KEYS[2], KEYS[3]
local to_records, to_ids, to_gc = KEYS[4], KEYS[5], KEYS[6]
local n = redis.call('HLEN', from_records)
if redis.call('EXISTS', to_records, to_ids, to_gc) == 0 then
  for i = 1, 3 do
    if redis.call('EXISTS', KEYS[i]) == 1 then
      redis.call('RENAME', KEYS[i], KEYS[i + 3])
    end
  end
  return n
end
local gained = 0
local flat = redis.call('HGETALL', from_records)
for i = 1, #flat, 2 do
  local key, value = flat[i], flat[i + 1]
  local _, id = parse_holder(value)
  local theirs = redis.call('HGET', to_records, key)
  local keep = true
  if theirs then
    local _, their_id = parse_holder(theirs)
    if tonumber(their_id) >= tonumber(id) then
      keep = false
    else
      redis.call('HDEL', to_ids, their_id)
      redis.call('ZREM', to_gc, their_id)
    end
  end
  if keep then
    local _, _, until_ms = parse_holder(value)
    redis.call('HSET', to_records, key, value)
    redis.call('HSET', to_ids, id, key)
    redis.call('ZADD', to_gc, redis.call('ZSCORE', from_gc, id) or until_ms, id)
    if not theirs then
      gained = gained + 1
    end
  end
end
redis.call('DEL', from_records, from_ids, from_gc)
return gained
