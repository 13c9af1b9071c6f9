--[[ dedup_records: move one queue's dedup records (lua/lib/dedup.lua) from one layout's keys
to the other's (pinlater migrate-layout, once the queue's jobs are moved).

Both layouts keep the same four structures with the same contents (keys.py, keys_compact.py),
so when the destination has none of them, each is renamed (O(1)). If the destination already
holds records of the queue (servers wrote both layouts), they are merged: for a dedup key in
both, the record of the later holder (the higher id: ids are handed out in order) is kept, and
the other holder's id and gc entries dropped. A merge reads at most ARGV[1] ids of the source's
gc entries and runs per call (a million in one call would stall Redis for seconds), in the
order of the source's gc set, then of its runs, each record moved whole (it leaves the source
as it reaches the destination, where its gc entry is its own id); the caller calls again until
none is left.

KEYS[1]  the source's records (pld_{S}_{Q}.k, or plc:{S:Q}:dk)
KEYS[2]  the source's ids hash (pld_{S}_{Q}.i, or plc:{S:Q}:di)
KEYS[3]  the source's gc set (pld_{S}_{Q}.g, or plc:{S:Q}:dg)
KEYS[4]  the source's runs (pld_{S}_{Q}.r, or plc:{S:Q}:dr)
KEYS[5..8]  the destination's, in the same order
The compact records hash's pin (lib/dedup.lua, DEDUP_PIN) is no record: it is not counted or
merged (a rename moves it, harmless in the original layout).
ARGV[1]  the most ids to read in this call

Returns {how many records the destination gained, how many gc entries and runs the source has
left}.
]]
--@include dedup
local from_records, from_ids, from_gc, from_runs = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local to_records, to_ids, to_gc = KEYS[5], KEYS[6], KEYS[7]
local budget = tonumber(ARGV[1])
if redis.call('EXISTS', to_records, to_ids, to_gc, KEYS[8]) == 0 then
  local n = redis.call('HLEN', from_records) - redis.call('HEXISTS', from_records, DEDUP_PIN)
  for i = 1, 4 do
    if redis.call('EXISTS', KEYS[i]) == 1 then
      redis.call('RENAME', KEYS[i], KEYS[i + 4])
    end
  end
  return {n, 0}
end
local gained = 0

-- Merge the source's record of `key` (value `value`) into the destination, then drop it and its
-- id and gc entries from the source.
local function merge(key, value)
  local _, id, until_ms = parse_holder(value)
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
    redis.call('HSET', to_records, key, value)
    redis.call('HSET', to_ids, id, key)
    redis.call('ZADD', to_gc, redis.call('ZSCORE', from_gc, id) or until_ms, id)
    if not theirs then
      gained = gained + 1
    end
  end
  redis.call('HDEL', from_records, key)
  redis.call('HDEL', from_ids, id)
  redis.call('ZREM', from_gc, id)
end

-- A batch by the source's gc set, then its runs (every record has an entry in one of them, of
-- its id or of a run of ids that includes it: lib/dedup.lua), in their order, deterministic as
-- scripts must be on Redis < 5; at most `budget` ids (a run counts its ids; the first entry is
-- read whole).
local read = 0
for _, set in ipairs({from_gc, from_runs}) do
  for _, member in ipairs(redis.call('ZRANGE', set, 0, budget - 1)) do
    local ids = gc_entry_ids(member)
    if read > 0 and read + #ids > budget then
      break
    end
    read = read + #ids
    for _, id in ipairs(ids) do
      local key = redis.call('HGET', from_ids, id)
      local value = key and redis.call('HGET', from_records, key)
      if value and select(2, parse_holder(value)) == id then
        merge(key, value)
      elseif key then  -- an id entry no record names back
        redis.call('HDEL', from_ids, id)
      end
    end
    redis.call('ZREM', set, member)
  end
end
local left = redis.call('ZCARD', from_gc) + redis.call('ZCARD', from_runs)
if left == 0 then
  -- records without a gc entry (none, unless written by hand) go in this last call
  local flat = redis.call('HGETALL', from_records)
  for i = 1, #flat, 2 do
    if flat[i] ~= DEDUP_PIN then
      merge(flat[i], flat[i + 1])
    end
  end
  redis.call('DEL', from_records, from_ids, from_gc, from_runs)
end
return {gained, left}
