-- insert: the insert of new PENDING jobs in the compact layout, shared by enqueue_jobs.lua and
-- enqueue_keyed_jobs.lua (scripts that say `--@include insert` get this file pasted in, after
-- records, sets and ready).
--
-- `slots` lists, per job in order, where its five ARGV values start (ARGV[a] .. ARGV[a + 4]):
-- the KEYS index of its PENDING set, body, attempts allowed, run after (seconds as float) and
-- custom status (already truncated). Ids come from the field `id` of the queue's meta hash (one
-- HINCRBY for the batch), so they are consecutive and in the order of `slots`; the records of
-- the batch go in with one HSET (per chunk of 1000), each PENDING set gets one ZADD, scored by
-- run after in ms. With READY_LISTS, a job whose run after is `now` goes to the ready list of its
-- priority, KEYS[k + ready_offset] for the PENDING set KEYS[k] (one RPUSH per list), unless the
-- list's last score is after now (another server's clock ahead) or its id would break the text
-- order of the list's last run (ready.lua's ready_room): then to the PENDING set.
-- `now` is in ms. `place`, when given, is called as place(a, id, k, run_after, job, id as a
-- number) for each job before anything is written, and answers whether the job goes to its
-- PENDING set (a job of an ordered group may wait instead: lib/groups.lua puts it there, and
-- sets job.gr and job.gq).
-- `first`, when given, is the first id, already taken from the counter (a uniform call that fell
-- back here). Returns the ids (numbers), in order, and the same as text.

-- On unless PINLATER_READY_LISTS=0 (scripts.py), which sends every job to its PENDING set.
local READY_LISTS = false

-- insert_jobs without `place`: the common enqueue, with as few Lua operations per job as it
-- takes (each costs Redis' Lua dozens of instructions, a table or a C call thousands): no table
-- per job, records from new_record (lib/records.lua), score texts kept by run after text, one
-- HSET (per chunk), one ZADD per PENDING set (last member first, as set_writes does) and, with
-- READY_LISTS, one RPUSH per ready list. Whether a priority's list
-- takes the batch's jobs due now is decided once, at its first such job (ready.lua's
-- ready_room, for a batch whose ids all have one number of digits: insert_jobs sees to that):
-- all of them, or none (to the set).
local function insert_plain(records_key, now, slots, first, ready_offset)
  local ids, names, fields = {}, {}, {}
  local scores, members = {}, {}  -- run after (seconds text) -> score text; KEYS index -> pairs
  local due = {}  -- run after (seconds text) -> whether it is now, with ready lists
  local lists = {}  -- KEYS index -> names for its ready list, or false
  for j = 1, #slots do
    local a = slots[j]
    local id = first + j - 1
    local name = string.format('%d', id)
    ids[j], names[j] = id, name
    local run_after = ARGV[a + 3]
    local k = ARGV[a]
    local list = false
    if READY_LISTS then
      local is_due = due[run_after]
      if is_due == nil then
        is_due = to_ms(run_after) == now
        due[run_after] = is_due
      end
      if is_due then
        list = lists[k]
        if list == nil then
          local ready_key = KEYS[tonumber(k) + ready_offset]
          list = ready_room(ready_key, records_key, now, {name}) == 1 and {}
          lists[k] = list
        end
      end
    end
    fields[2 * j - 1], fields[2 * j] = name, new_record(ARGV[a + 1], ARGV[a + 2], ARGV[a + 4], now)
    if list then
      list[#list + 1] = name
    else
      local score = scores[run_after]
      if not score then
        score = score_arg(to_ms(run_after))
        scores[run_after] = score
      end
      local m = members[k]
      if not m then
        m = {}
        members[k] = m
      end
      m[#m + 1] = score
      m[#m + 1] = name
    end
  end
  for i = 1, #fields, 2 * RECORD_CHUNK do
    redis.call('HSET', records_key, unpack(fields, i, math.min(i + 2 * RECORD_CHUNK - 1, #fields)))
  end
  for k, set_pairs in pairs(members) do
    zadd_pairs(KEYS[tonumber(k)], set_pairs)
  end
  for k, list in pairs(lists) do
    if list then
      ready_append(KEYS[tonumber(k) + ready_offset], records_key, now, list)
    end
  end
  return ids, names
end

-- A uniform call's insert (enqueue_jobs.lua): `n` jobs that share the KEYS index of their PENDING
-- set, attempts allowed, run after and status (ARGV[s] .. ARGV[s + 3]), job j's body at
-- ARGV[s + 3 + j], ids from `first` on, none gaining a digit where ready lists are on (the caller
-- sees to it). What insert_plain does for such a batch, with a record's concatenation and four
-- table entries a job (its id, its name, its field and record): the batch goes to its ready list
-- whole (ready_room) or to its PENDING set.
local function insert_uniform(records_key, now, s, n, first, ready_offset)
  local k, attempts, run_after, cs = ARGV[s], ARGV[s + 1], ARGV[s + 2], ARGV[s + 3]
  local ids, names, fields = {}, {}, {}
  local first_name = string.format('%d', first)
  local ready_key = KEYS[tonumber(k) + ready_offset]
  local listed = READY_LISTS and to_ms(run_after) == now and ready_room(ready_key, records_key, now, {first_name}) == 1
  for j = 1, n do
    local id = first + j - 1
    local name = j == 1 and first_name or string.format('%d', id)
    ids[j], names[j] = id, name
    fields[2 * j - 1], fields[2 * j] = name, new_record(ARGV[s + 3 + j], attempts, cs, now)
  end
  for i = 1, #fields, 2 * RECORD_CHUNK do
    redis.call('HSET', records_key, unpack(fields, i, math.min(i + 2 * RECORD_CHUNK - 1, #fields)))
  end
  if listed then
    ready_append(ready_key, records_key, now, names)
  else
    zadd_all(KEYS[tonumber(k)], to_ms(run_after), names)
  end
  return ids, names
end

-- Whether ids first .. last may go through the common paths: ready lists off, or all of one
-- number of digits (a list's run keeps its text order).
local function one_width(first, last)
  return not READY_LISTS or #string.format('%d', first) == #string.format('%d', last)
end

local function insert_jobs(counter_key, records_key, now, slots, ready_offset, place, first)
  local ids = {}
  local n = #slots
  if n == 0 then
    return ids
  end
  first = first or redis.call('HINCRBY', counter_key, 'id', n) - n + 1
  -- the common path, unless an id of the batch gains a digit (its ready lists' runs would break
  -- their text order part way: the general loop below takes the prefix that keeps it)
  if not place and one_width(first, first + n - 1) then
    return insert_plain(records_key, now, slots, first, ready_offset)
  end
  local names, jobs = {}, {}
  local writes = set_writes()
  local ready, ready_order = {}, {}  -- per PENDING set index: the ids for its ready list
  for j = 1, n do
    local a = slots[j]
    local id = string.format('%d', first + j - 1)
    local attempts = tonumber(ARGV[a + 2])
    names[j] = id
    jobs[id] = {bd = ARGV[a + 1], al = attempts, ar = attempts, ca = now, ua = now, cs = ARGV[a + 4], cd = false}
    local k, run_after = tonumber(ARGV[a]), to_ms(ARGV[a + 3])
    if place and not place(a, id, k, run_after, jobs[id], first + j - 1) then
      -- waiting in its group: placed by `place`
    elseif READY_LISTS and run_after == now and not jobs[id].gr and not jobs[id].ex then
      if not ready[k] then
        ready[k] = {}
        ready_order[#ready_order + 1] = k
      end
      local r = ready[k]
      r[#r + 1] = id
    else
      writes.add(k, run_after, id)
    end
    ids[j] = first + j - 1
  end
  -- the list takes a prefix of its ids (ready.lua's ready_room); the rest go to the PENDING set
  local rooms = {}
  for i, k in ipairs(ready_order) do
    local list = ready[k]
    rooms[i] = ready_room(KEYS[k + ready_offset], records_key, now, list)
    for r = rooms[i] + 1, #list do
      writes.add(k, now, list[r])
    end
  end
  write_records(records_key, names, jobs)
  for i, k in ipairs(ready_order) do
    ready_append(KEYS[k + ready_offset], records_key, now, ready[k], rooms[i])
  end
  writes.flush()
  return ids, names
end
