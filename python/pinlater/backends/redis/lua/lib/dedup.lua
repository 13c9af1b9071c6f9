-- dedup: the dedup records of a queue, shared by enqueue_keyed_jobs.lua and gc_dedup_keys.lua
-- of both layouts and by lua_migrate/dedup_records.lua (scripts that say `--@include dedup` get
-- this file pasted in). The same in both layouts (keys.py: pld_{S}_{Q}.k, .i, .g;
-- keys_compact.py: plc:{S:Q}:dk, :di, :dg, :dr); how a holder's state is read is each layout's
-- lib/dedup_state.lua.
--
--   records  (.k, hash)        field: the dedup key, value: '{priority}:{id}:{held_until_ms}'
--   ids      (.i, hash)        field: the holder's id, value: its dedup key
--   gc set   (.g, sorted set)  member: the holder's id, score: when the GC looks at it next (ms)
--   runs     (.r, sorted set)  member: a run of ids '{first}-{last}' (or one id), score: as .g
-- In the original layout (and for compact jobs of builds before records kept their key), a
-- record is written in the records and ids hash and has a gc entry (its own, or a run that
-- includes it); it is taken over by a new holder (the old one's id entry goes) or forgotten by
-- the GC once its job is gone (its record and id entry go; its gc entry too, unless a run holds
-- it). In the compact layout a job's record (lib/records.lua, dk) names its key, so the enqueue
-- writes the key's record alone: no id entry, no gc entry. The job forgets it when it ends
-- (forget_keys, in every script that ends a job), or, if its window is still open then, leaves
-- a deferred entry '@{value}:{key}' in the runs, which the GC forgets when due if the record
-- still holds that value. So the records hash holds the keys of live jobs and open windows, not
-- of every job kept for its GC TTL.
-- An enqueue writes one runs entry per run of the records it wrote with one held-until, not a gc
-- entry each: '{first}-{last}' stands for the ids first..last, of which those the ids hash
-- names with a record that names them back are the run's records (the others were never
-- keyed, or were taken over or forgotten since). A sorted set member costs Redis about a
-- hundred bytes and a skiplist insert; a run of a batch's keys costs one. The gc set keeps the
-- entries of builds before runs, and those a migration merges. Runs have a key of their own: a
-- server of an earlier build reads only the gc set, where a run would look like a stray id.

local GC_RUN_MAX = 1000  -- ids per run: what one look at a run may read

-- The compact records hash is kept a hash table, never a listpack: it holds only the keys of live
-- jobs and open windows, often fewer than hash-max-listpack-entries (512 by default), and in a
-- listpack every HMGET, HSET and HDEL of a key scans the whole list (tens of thousands of
-- instructions a job, measured). A write of records also writes the pin, a field that is never
-- a dedup key (keys are UTF-8; the byte 0xff never is) whose value is longer than
-- hash-max-listpack-value (64 by default), which turns the hash into a table for good
-- (keys_compact.DEDUP_PIN; the same trick as lua_compact/lib/groups.lua's ga). It stays while
-- the queue does; readers of the whole hash skip it.
local DEDUP_PIN, DEDUP_PIN_VALUE = '\255', string.rep('.', 65)

-- The ids a gc entry stands for, as text, and the first as a number if the entry is a run.
local function gc_entry_ids(member)
  local first, last = string.match(member, '^(%d+)-(%d+)$')
  if not first then
    return {member}, nil
  end
  local ids = {}
  first = tonumber(first)
  for id = first, tonumber(last) do
    ids[#ids + 1] = string.format('%d', id)
  end
  return ids, first
end

-- The gc entry of the ids first..last (numbers): a run, or the id alone.
local function gc_entry(first, last)
  if first == last then
    return string.format('%d', first)
  end
  return string.format('%d-%d', first, last)
end

-- A record's value as (priority, id, held until ms).
local function parse_holder(value)
  local p, id, until_ms = string.match(value, '^(%d+):(%d+):(-?%d+)$')
  return tonumber(p), id, tonumber(until_ms)
end

-- Records to write at once (holders.take, then holders.write): one variadic HSET per hash and
-- chunk of 1000, not one per record, and one runs entry per run. The texts of a
-- batch's priorities and held-until times are made once each (they repeat: one now, a few
-- windows), not once per record.
-- `ids_key` nil: the records alone (the compact layout, whose job records name their keys).
local function new_holders(records_key, ids_key, runs_key)
  local by_key, by_id, n = {}, {}, 0
  local priority_texts, held_texts = {}, {}  -- per priority; per window (ARGV text)
  local runs, run_order = {}, {}  -- per held-until text: its current run {first, last, text}; all runs
  local holders = {}
  -- The key `key` taken by job `id` (text; `number`, the same as a number: ids ascend within a
  -- call) of `priority` at `now_ms` for `window` ms (ARGV text): held until now_ms + window.
  function holders.take(key, priority, id, number, window, now_ms)
    local p, held = priority_texts[priority], held_texts[window]
    if not p then
      p = string.format('%d', priority)
      priority_texts[priority] = p
    end
    if not held then
      held = string.format('%d', now_ms + tonumber(window))
      held_texts[window] = held
    end
    by_key[2 * n + 1], by_key[2 * n + 2] = key, p .. ':' .. id .. ':' .. held  -- as parse_holder reads it
    n = n + 1
    if not ids_key then
      return
    end
    by_id[2 * n - 1], by_id[2 * n] = id, key
    local run = runs[held]
    if run and number - run[1] < GC_RUN_MAX then
      run[2] = number
    else
      run = {number, number, held}
      runs[held] = run
      run_order[#run_order + 1] = run
    end
  end
  function holders.write()
    if not ids_key and n > 0 then  -- the compact layout: the records hash stays a table (DEDUP_PIN)
      by_key[2 * n + 1], by_key[2 * n + 2] = DEDUP_PIN, DEDUP_PIN_VALUE
      n = n + 1
    end
    for i = 1, 2 * n, 2000 do
      local last = math.min(i + 1999, 2 * n)
      redis.call('HSET', records_key, unpack(by_key, i, last))
      if ids_key then
        redis.call('HSET', ids_key, unpack(by_id, i, last))
      end
    end
    local entries = {}
    for i, run in ipairs(run_order) do
      entries[2 * i - 1], entries[2 * i] = run[3], gc_entry(run[1], run[2])
    end
    for i = 1, #entries, 2000 do
      redis.call('ZADD', runs_key, unpack(entries, i, math.min(i + 1999, #entries)))
    end
  end
  return holders
end

-- When the GC looks again at a record whose job still exists, its held-until passed: as long
-- after now as it has been since then (at least a second, at most an hour), so a long-lived job
-- costs a number of looks that grows with the log of its life.
local function next_look(now_ms, until_ms)
  return now_ms + math.min(math.max(now_ms - until_ms, 1000), 3600000)
end

-- A deferred entry of the runs: the record `value` of `key`, to forget when due if it still holds.
local function deferred_entry(value, key)
  return '@' .. value .. ':' .. key
end

-- The record value and key of a deferred entry, or nil for any other entry.
local function parse_deferred(member)
  if string.byte(member, 1) ~= 64 then  -- '@'
    return nil
  end
  return string.match(member, '^@(%d+:%d+:%-?%d+):(.*)$')
end

-- The dedup records and runs (plc:{S:Q}:dk, :dr), which a compact script that ends jobs is
-- passed last before its rules tail (keys_compact.dedup_end_keys), given the tail's rules (nil
-- if it has none).
local function dedup_end_keys(rules)
  local last = rules and rules.base - 1 or #KEYS
  return KEYS[last - 1], KEYS[last]
end

-- Jobs that ended (or were deleted) with a dedup key (compact layout): ids[i], its record's
-- key keys[i] and created time cas[i]; `priority`, if all are of one, its text. A key whose
-- record (in `records_key`) names the job is forgotten if its held-until has passed (`now_ms`),
-- else left a deferred entry due then (in `runs_key`); a key another job holds or took since is
-- left alone. A record '{priority}:{id}:{ca}' names the job with no window (held until its
-- enqueue): forgotten without parsing the record (a pattern match and two numbers cost Redis'
-- Lua about 4,000 instructions a job).
local function forget_keys(records_key, runs_key, ids, keys, cas, now_ms, priority)
  if #keys == 0 then
    return
  end
  local ca_texts = {}
  local gone, later = {}, {}
  for c = 1, #keys, 1000 do
    local last = math.min(c + 999, #keys)
    local values = redis.call('HMGET', records_key, unpack(keys, c, last))
    for i = c, last do
      local value = values[i - c + 1]
      if value then
        local id, ca = ids[i], cas[i]
        local ca_text = ca_texts[ca]
        if not ca_text then
          ca_text = string.format('%d', ca)
          ca_texts[ca] = ca_text
        end
        local unwindowed
        if priority then
          unwindowed = value == priority .. ':' .. id .. ':' .. ca_text
        else
          local tail = ':' .. id .. ':' .. ca_text
          unwindowed = string.sub(value, -#tail) == tail
        end
        if unwindowed then
          gone[#gone + 1] = keys[i]
        else
          local _, holder, until_ms = parse_holder(value)
          if holder ~= id then  -- another job's
          elseif until_ms <= now_ms then
            gone[#gone + 1] = keys[i]
          else
            later[#later + 1], later[#later + 2] = until_ms, deferred_entry(value, keys[i])
          end
        end
      end
    end
  end
  for i = 1, #gone, 1000 do
    redis.call('HDEL', records_key, unpack(gone, i, math.min(i + 999, #gone)))
  end
  for i = 1, #later, 2000 do
    redis.call('ZADD', runs_key, unpack(later, i, math.min(i + 1999, #later)))
  end
end

-- The jobs a script ends with a dedup key, collected for forget_keys (ended.add(id, key, ca),
-- then ended.forget(records_key, runs_key, now_ms)).
local function new_ended()
  local ids, keys, cas = {}, {}, {}
  local ended = {}
  function ended.add(id, key, ca)
    local n = #keys + 1
    ids[n], keys[n], cas[n] = id, key, ca
  end
  function ended.forget(records_key, runs_key, now_ms)
    forget_keys(records_key, runs_key, ids, keys, cas, now_ms)
  end
  return ended
end

-- Jobs put back to PENDING after they ended (retry_failed_jobs.lua), each with its dedup key as
-- in forget_keys, of priority `priority`: each takes its key again where no record names it
-- (held while it is active: held-until 0). A record that still names it (its window was open
-- when it ended) stays as it is, window and all, and the deferred entry its end left in
-- `runs_key` goes, so that the GC does not forget the key while the job runs again. A key
-- another job holds or took since stays with it: the job put back runs with its key unheld, and
-- forgets nothing when it ends (forget_keys reads whom the record names).
local function retake_keys(records_key, runs_key, taken, priority)
  if #taken == 0 then
    return
  end
  local keys = {}
  for i = 2, #taken, 2 do
    keys[#keys + 1] = taken[i]
  end
  local held = string.format('%d', priority)
  for c = 1, #keys, 1000 do
    local last = math.min(c + 999, #keys)
    local values = redis.call('HMGET', records_key, unpack(keys, c, last))
    local writes = {DEDUP_PIN, DEDUP_PIN_VALUE}
    for i = c, last do
      local value, id = values[i - c + 1], taken[2 * i - 1]
      if not value then
        writes[#writes + 1], writes[#writes + 2] = keys[i], held .. ':' .. id .. ':0'
      elseif select(2, parse_holder(value)) == id then
        redis.call('ZREM', runs_key, deferred_entry(value, keys[i]))
      end
    end
    if #writes > 2 then
      redis.call('HSET', records_key, unpack(writes))
    end
  end
end
