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

-- Forget the record of `key` held by `id` in all three structures.
local function forget_record(records_key, ids_key, gc_key, key, id)
  redis.call('HDEL', records_key, key)
  redis.call('HDEL', ids_key, id)
  redis.call('ZREM', gc_key, id)
end

-- Records to write in all three structures at once (holders.add, then holders.write): one
-- variadic HSET or ZADD per structure and chunk of 1000, not one per record. The texts of a
-- batch's priorities and held-until times are made once each (they repeat: one now, a few
-- windows), not once per record.
local function new_holders(records_key, ids_key, gc_key)
  local by_key, by_id, by_time, n = {}, {}, {}, 0
  local priority_texts, until_texts = {}, {}
  local holders = {}
  -- The key `key` held by job `id` (text) of `priority` until `until_ms`.
  function holders.add(key, priority, id, until_ms)
    local p, held = priority_texts[priority], until_texts[until_ms]
    if not p then
      p = string.format('%d', priority)
      priority_texts[priority] = p
    end
    if not held then
      held = string.format('%d', until_ms)
      until_texts[until_ms] = held
    end
    by_key[2 * n + 1], by_key[2 * n + 2] = key, p .. ':' .. id .. ':' .. held  -- as parse_holder reads it
    by_id[2 * n + 1], by_id[2 * n + 2] = id, key
    by_time[2 * n + 1], by_time[2 * n + 2] = held, id
    n = n + 1
  end
  -- The key `key` taken by job `id` (text) of `priority` at `now_ms` for `window` ms (ARGV
  -- text): held until now_ms + window, each window's sum made once.
  local until_of = {}
  function holders.take(key, priority, id, window, now_ms)
    local until_ms = until_of[window]
    if not until_ms then
      until_ms = now_ms + tonumber(window)
      until_of[window] = until_ms
    end
    holders.add(key, priority, id, until_ms)
  end
  function holders.write()
    for i = 1, 2 * n, 2000 do
      local last = math.min(i + 1999, 2 * n)
      redis.call('HSET', records_key, unpack(by_key, i, last))
      redis.call('HSET', ids_key, unpack(by_id, i, last))
      redis.call('ZADD', gc_key, unpack(by_time, i, last))
    end
  end
  return holders
end

-- When the GC looks again at a record whose job is still active: as long after now as the
-- record has waited already (at least a second, at most an hour), so a long-lived job costs
-- a number of looks that grows with the log of its life.
local function next_look(now_ms, last_look_ms)
  return now_ms + math.min(math.max(now_ms - last_look_ms, 1000), 3600000)
end
