-- dedup: the dedup records of a queue, shared by enqueue_keyed_jobs.lua and gc_dedup_keys.lua
-- of both layouts and by lua_migrate/dedup_records.lua (scripts that say `--@include dedup` get
-- this file pasted in). The same in both layouts (keys.py: pld_{S}_{Q}.k, .i, .g;
-- keys_compact.py: plc:{S:Q}:dk, :di, :dg); how a holder's state is read is each layout's
-- lib/dedup_state.lua.
--
--   records  (.k, hash)        field: the dedup key, value: '{priority}:{id}:{held_until_ms}'
--   ids      (.i, hash)        field: the holder's id, value: its dedup key
--   gc set   (.g, sorted set)  member: the holder's id, score: when the GC looks at it next (ms)
-- The three always name the same records: a record is written, taken over by a new holder, or
-- forgotten in all three at once.

-- A record's value as (priority, id, held until ms).
local function parse_holder(value)
  local p, id, until_ms = string.match(value, '^(%d+):(%d+):(-?%d+)$')
  return tonumber(p), id, tonumber(until_ms)
end

local function holder_value(priority, id, until_ms)
  return string.format('%d:%s:%d', priority, id, until_ms)
end

-- Forget the record of `key` held by `id` in all three structures.
local function forget_record(records_key, ids_key, gc_key, key, id)
  redis.call('HDEL', records_key, key)
  redis.call('HDEL', ids_key, id)
  redis.call('ZREM', gc_key, id)
end

-- Record `holders` (a list of {key, priority, id (text), held until ms}) in all three
-- structures: one variadic HSET or ZADD per structure and chunk, not one per record.
local function record_holders(records_key, ids_key, gc_key, holders)
  for i = 1, #holders, 1000 do
    local by_key, by_id, by_time = {}, {}, {}
    for h = i, math.min(i + 999, #holders) do
      local key, priority, id, until_ms = unpack(holders[h])
      by_key[#by_key + 1], by_key[#by_key + 2] = key, holder_value(priority, id, until_ms)
      by_id[#by_id + 1], by_id[#by_id + 2] = id, key
      by_time[#by_time + 1], by_time[#by_time + 2] = string.format('%d', until_ms), id
    end
    redis.call('HSET', records_key, unpack(by_key))
    redis.call('HSET', ids_key, unpack(by_id))
    redis.call('ZADD', gc_key, unpack(by_time))
  end
end

-- When the GC looks again at a record whose job is still active: as long after now as the
-- record has waited already (at least a second, at most an hour), so a long-lived job costs
-- a number of looks that grows with the log of its life.
local function next_look(now_ms, last_look_ms)
  return now_ms + math.min(math.max(now_ms - last_look_ms, 1000), 3600000)
end
