-- dedup: the dedup records of a compact queue (keys_compact.py: plc:{S:Q}:dk, :di, :dg), shared
-- by enqueue_dedup_jobs.lua and gc_dedup_keys.lua (scripts that say `--@include dedup` get this
-- file pasted in). As lua/lib/dedup.lua, with the same contents (a migration renames the keys),
-- but for how a job's state is read.
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

-- Whether job `id` is PENDING (ready, later, in a ready list or held by a broker) or
-- IN_PROGRESS: its record is there and no tombstone (not deleted, collected or evicted), and it
-- is in neither final set of its priority.
local function job_active(records_key, succeeded_key, failed_key, id)
  if redis.call('HSTRLEN', records_key, id) == 0 then
    return false
  end
  return not redis.call('ZSCORE', succeeded_key, id) and not redis.call('ZSCORE', failed_key, id)
end

-- Forget the record of `key` held by `id` in all three structures.
local function forget_record(records_key, ids_key, gc_key, key, id)
  redis.call('HDEL', records_key, key)
  redis.call('HDEL', ids_key, id)
  redis.call('ZREM', gc_key, id)
end

-- When the GC looks again at a record whose job is still active: as long after now as the
-- record has waited already (at least a second, at most an hour), so a long-lived job costs
-- a number of looks that grows with the log of its life.
local function next_look(now_ms, last_look_ms)
  return now_ms + math.min(math.max(now_ms - last_look_ms, 1000), 3600000)
end
