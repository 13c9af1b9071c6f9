--[[ enqueue_keyed_jobs: as lua/enqueue_keyed_jobs.lua, in the compact layout.

Insert each job as enqueue_jobs.lua does, unless a job holds its dedup key
(ShardStore.enqueue_keyed_jobs), all in one call: two servers enqueueing one key at once make
one job. A key is held by the job its record names (lua/lib/dedup.lua) while now < the record's
held-until (that job's enqueue time plus its window) or while the job is PENDING or IN_PROGRESS
(lib/dedup_state.lua: its record is there and it is in neither final set). A held key answers
its holder and changes nothing. A key not held is taken: the job is inserted (lib/insert.lua,
one HINCRBY for all the jobs inserted), its record keeps its key (dk, lib/records.lua) and the
key's record names it; an old holder's id and gc entries (builds before dk) go. The job forgets
its key when it ends (forget_keys). The keys of one call are distinct (the caller collapses
repeats).

A job may have a dedup key, an ordered group, or both (ARGV[i+7]). A job of a group joins it as
lib/groups.lua says (active at once if its group has room and nothing waits, else waiting), in
the order of the call; its record keeps the group (gr) and its place (gq: its id).

A uniform call (below) of keyed jobs with no expiry whose keys have no record (new keys: the usual
batch) takes the leanest pass (enqueue_fresh); a call with no expiry otherwise takes a common
path first (enqueue_common: one pass, no table per job; a held key answers its holder there too);
any other, or one whose record names a priority beyond the keys passed, falls back to the general
loop before writing anything.

KEYS[1]     the queue's records hash (plc:{S:Q}:j), with its fields c and id
KEYS[2]     the id counter: the same hash (field `id`)
KEYS[3..5]  the dedup records, ids hash and gc set (plc:{S:Q}:dk, :di, :dg; this build writes
            only the records, and drops an old holder's id and gc entries)
KEYS[6]     the expiry index (plc:{S:Q}:xe)
KEYS[7..]   four per priority 1..m: PENDING, SUCCEEDED and FAILED sets and the ready list
            (plc:{S:Q}:p{p}:s0, :s2, :s3, :r): priority p's start at 7 + 4 * (p - 1)
KEYS[7 + 4m] the dedup runs (plc:{S:Q}:dr, lua/lib/dedup.lua)
ARGV[1]     queue name
ARGV[2]     the records hash (plc:{S:Q}:j)
ARGV[3]     now, seconds as float (ca and ua)
ARGV[4]     number of jobs, n; or 'u' then n: a uniform call (below)
ARGV[5]     now, ms
ARGV[6]     m, the priorities whose keys are in KEYS
then 10 per job, in order:
  ARGV[i]   index into KEYS of the job's PENDING set (its priority's first key)
  ARGV[i+1] body (bd)
  ARGV[i+2] attempts allowed (al, and ar)
  ARGV[i+3] run after, seconds as float (the score)
  ARGV[i+4] custom status, already truncated (cs)
  ARGV[i+5] dedup key ('' if none)
  ARGV[i+6] window, ms
  ARGV[i+7] 'k' if the job has a dedup key, 'g' if a group, 'kg' if both
  ARGV[i+8] its group ('' if none)
  ARGV[i+9] its expiry, ms ('' if none): kept in its record (ex), and the job in the expiry
            index; such a job never goes to a ready list
then the rules and group keys at the end of ARGV and KEYS (lib/groups.lua's tail).

A uniform call (ARGV[4] 'u' then n): jobs that share every value but their body, dedup key and
group, none with an expiry (dedup.enqueue_keyed_call sends one where the jobs allow it, at most
RECORD_CHUNK of them, so that the common path takes it): ARGV[7] to ARGV[16]
are the ten values of a job as above with those three '' (ARGV[7 + i] holds what ARGV[a + i]
holds for every job), then 3 per job: body, dedup key, group; its tail follows at
ARGV[17 + 3n]. Each argument costs Redis about 700 instructions, so a batch of one kind sends
three a job, not ten. A uniform call the common path gives up on is expanded to ten values a
job for the general loop (expand_uniform).

Returns 3 values per job, in order: priority, local id, 1 if the key was held (the holder's
priority and id) else 0 (the new job's); or -1 if the queue does not exist; or {-2, p} (nothing
changed) if a record names a holder of a priority p > m: the caller calls again with m >= p.
]]
-- What every function below reads as ARGV: the call's own, or a uniform call's expansion to ten
-- values a job, once it falls back to the general loop (expand_uniform).
local ARGV = ARGV
--@include records
--@include sets
--@include ready
--@include insert
--@include dedup
--@include dedup_state
--@include dedup_calls
--@include groups
local meta_key, counter_key = KEYS[1], KEYS[2]
local records_key, ids_key, gc_key = KEYS[3], KEYS[4], KEYS[5]
local jobs, now = ARGV[2], to_ms(ARGV[3])
local UNIFORM = string.byte(ARGV[4], 1) == 117  -- 'u'
local n = tonumber(UNIFORM and string.sub(ARGV[4], 2) or ARGV[4])
local now_ms, m = tonumber(ARGV[5]), tonumber(ARGV[6])
if redis.call('HEXISTS', meta_key, 'c') == 0 then
  return -1
end
local INSERT_READY_OFFSET = 3  -- a group's ready list, from its PENDING set
local STRIDE = 10
-- Job j's values (from 1): its shared ones at ARGV[7 + SHARED_STEP * (j - 1) + i] as above (i
-- from 0), its body, dedup key and group at ARGV[FIRST_OWN + OWN_STEP * (j - 1)] plus BODY, KEY
-- and GROUP: in a call of ten values a job the same places, in a uniform call its three.
local SHARED_STEP, FIRST_OWN, OWN_STEP, BODY, KEY, GROUP = STRIDE, 7, STRIDE, 1, 5, 8
if UNIFORM then
  SHARED_STEP, FIRST_OWN, OWN_STEP, BODY, KEY, GROUP = 0, 17, 3, 0, 1, 2
end
local rules = rules_tail(UNIFORM and 16 + 3 * n or 6 + STRIDE * n)
local expiry_index_key = KEYS[6]
local runs_key = KEYS[7 + DEDUP_GROUP * m]

-- A job's flags (ARGV[a + 7]) are '', 'k', 'g' or 'kg' exactly: compared, not searched (a C
-- call costs Redis' Lua thousands of instructions a job).
local function keyed(a)
  local flags = ARGV[a + 7]
  return flags == 'k' or flags == 'kg'
end

local function grouped(a)
  local flags = ARGV[a + 7]
  return flags == 'g' or flags == 'kg'
end

-- A job of a group joins it (insert_jobs' `place`); the others go to their PENDING set. A job
-- with a dedup key keeps it in its record.
local function place(a, id, k, run_after, job, id_number)
  if keyed(a) then
    job.dk = ARGV[a + 5]
  end
  if ARGV[a + 9] ~= '' then
    job.ex = tonumber(ARGV[a + 9])
    redis.call('ZADD', expiry_index_key, ARGV[a + 9], id)
  end
  if not grouped(a) then
    return true
  end
  local group = ARGV[a + 8]
  job.gr, job.gq = group, id_number
  local p = (k - 7) / DEDUP_GROUP + 1
  return join_group(rules, group, job, id, p, run_after, now)
end

-- The groups' counts are read for the whole call at once and written at its end (lib/groups.lua).
begin_batch(rules)

-- How the call's jobs of a group join it, from one read of their groups' counts (HMGET of ga): a
-- group with no unfinished job that one job of the call joins is joined at once (the set
-- returned, group -> true: join_simple, no batch state); with `heads` (a table), a group with
-- active jobs and none waiting, as many as its concurrency or more, that one job of the call
-- joins is named there (group -> its active jobs): that job waits, as its head (the caller
-- writes its counts, with no batch state for its group, and adds it to the batch's waits); the
-- others' counts go to the batch. Jobs j with held[j] are not inserted and join nothing. nil if
-- the call has no rules tail.
local function join_plan(held, heads)
  if not rules then
    return nil
  end
  local times, names = {}, {}
  for j = 1, n do
    if grouped(7 + SHARED_STEP * (j - 1)) and not held[j] then
      local group = ARGV[FIRST_OWN + OWN_STEP * (j - 1) + GROUP]
      local seen = times[group]
      times[group] = (seen or 0) + 1
      if not seen then
        names[#names + 1] = group
      end
    end
  end
  local counts = #names > 0 and redis.call('HMGET', rules.active, unpack(names)) or {}
  local simple = {}
  for i = 1, #names do
    local group = names[i]
    local value = counts[i]
    if not value and times[group] == 1 and rules.conc >= 1 then
      simple[group] = true
    elseif heads and value and times[group] == 1 and not string.find(value, ':', 1, true)
      and count_number(value) >= rules.conc then
      heads[group] = count_number(value)
    else
      adopt_counts(rules, group, counts[i])
    end
  end
  return simple
end

-- The usual keyed call: uniform (one priority, run after, attempts, status and window), every job
-- with a dedup key and none with an expiry, and no key with a record (new keys). enqueue_common's
-- work in one pass whose per-job part is what each job needs of its own (its id's text, its
-- record and its key's record, its group's join): the call's shared values are read once, its
-- record's shared bytes made once, the key records' shared text too. nil, before anything is
-- written, where it does not apply (then enqueue_common, which reads the keys again).
local function enqueue_fresh()
  local flags = ARGV[14]
  if not UNIFORM or n > RECORD_CHUNK or ARGV[16] ~= '' or (flags ~= 'k' and flags ~= 'kg') then
    return nil
  end
  local keys = {}
  for j = 1, n do
    keys[j] = ARGV[15 + 3 * j]  -- job j's own values start at ARGV[14 + 3 * j]: body, key, group
  end
  local values = redis.call('HMGET', records_key, unpack(keys))
  for i = 1, n do
    if values[i] then
      return nil
    end
  end
  local any_group = flags == 'kg'
  local heads = {}  -- a group whose job of the call waits as its head -> its active jobs
  local simple = any_group and join_plan({}, heads)
  if any_group and not simple then
    return nil  -- no rules: the general loop answers the error
  end
  local k = ARGV[7]
  local kn = tonumber(k)
  local priority = (kn - 7) / DEDUP_GROUP + 1
  local head_counts = {}  -- the heads' counts in ga: group, 'a:1:<head>'
  if next(heads) then
    waiting_of(rules, priority)  -- a priority beyond the keys passed fails here, as join_group
  end
  local score = to_ms(ARGV[10])
  local next_id = redis.call('HINCRBY', counter_key, 'id', n) - n + 1
  -- the jobs go to the ready list if due now (a job of a group only if it joins it at once), as
  -- enqueue_common decides: whether the list takes them is asked (ready_room) of the first such
  -- job, then nil: not asked yet
  local ready_key = KEYS[kn + INSERT_READY_OFFSET]
  local listed = false
  if READY_LISTS and score == now and #string.format('%d', next_id) == #string.format('%d', next_id + n - 1) then
    listed = nil
  end
  local tail = new_tail(ARGV[9], ARGV[11], now)
  local held_tail = ':' .. string.format('%d', now_ms + tonumber(ARGV[13]))
  local held_head = string.format('%d', priority) .. ':'
  local out, fields, holders, names, members, joined = {}, {}, {}, {}, {}, {}
  local job = {}  -- join_group's view of each job in turn (its place)
  for j = 1, n do
    local own = 14 + 3 * j
    local id = next_id + j - 1
    local name = string.format('%d', id)
    local key = ARGV[own + 1]
    local pending, group = true, nil
    if any_group then
      group = ARGV[own + 2]
      local active = heads[group]
      if simple[group] then
        joined[#joined + 1] = group
      elseif active then  -- as join_group leaves it: waiting, the group's head (gq: its id)
        local c = #head_counts
        head_counts[c + 1], head_counts[c + 2] = group, format_counts(active, 1, fifo_suffix(id, name, priority))
        -- to the batch's waits as join_group adds (inline: a script's main function holds 200
        -- locals at most, and the scripts that include groups.lua are near it)
        local adds = rules.waiting_adds[priority]
        if not adds then
          adds = {}
          rules.waiting_adds[priority] = adds
        end
        adds[#adds + 1], adds[#adds + 2] = score, name
        pending = false
      else
        job.gq = id
        pending = join_group(rules, group, job, name, priority, score, now)
        if pending then
          pending = 'set'  -- active, not its group's lone job: the PENDING set, not the list
        end
      end
    end
    fields[2 * j - 1], fields[2 * j] = name, new_keyed_record_tailed(ARGV[own], tail, group, id, key)
    holders[2 * j - 1], holders[2 * j] = key, held_head .. name .. held_tail
    if pending == true and listed == nil then
      listed = ready_room(ready_key, jobs, now, {name}) == 1
    end
    if pending == true and listed then
      names[#names + 1] = name
    elseif pending then
      members[#members + 1], members[#members + 2] = score, name
    end
    out[3 * j - 2], out[3 * j - 1], out[3 * j] = priority, id, 0
  end
  redis.call('HSET', jobs, unpack(fields))
  if #members > 0 then
    zadd_pairs(KEYS[kn], members)
  end
  if #names > 0 then
    ready_append(ready_key, jobs, now, names)
  end
  holders[2 * n + 1], holders[2 * n + 2] = DEDUP_PIN, DEDUP_PIN_VALUE  -- (lib/dedup.lua)
  redis.call('HSET', records_key, unpack(holders))
  if #head_counts > 0 then
    local waits = #head_counts / 2
    head_counts[#head_counts + 1], head_counts[#head_counts + 2] = GA_PIN, GA_PIN_VALUE
    redis.call('HSET', rules.active, unpack(head_counts))
    count_blocked(rules, waits)  -- each group starts having a job waiting
    rules.saved = true  -- a group's state changed: flush_groups sweeps the refills, as after join_group
  end
  join_simple(rules, joined, now)
  return out
end
-- The common call, in one pass with no table per job: no job has an expiry, and no record names
-- a priority beyond the keys passed (else nil, before anything is written: enqueue_dedup's
-- general loop then does it). A job whose key is held answers its holder; the others are
-- inserted: a job's group joins as join_group says, its record is new_record's,
-- new_grouped_record's or new_keyed_record's, its key's record goes in with holders
-- (lib/dedup.lua); a job due now goes to its ready list (lib/ready.lua) if it has no group or
-- joins one at once with nothing else of it (an active job is PENDING wherever it waits: the
-- dequeue's group rate and a delete read list jobs' groups as the set's).
local function enqueue_common(any_group)
  if n > RECORD_CHUNK then
    return nil
  end
  local keys, key_job = {}, {}
  for j = 1, n do
    local a = 7 + SHARED_STEP * (j - 1)
    if ARGV[a + 9] ~= '' then
      return nil
    end
    if keyed(a) then
      keys[#keys + 1] = ARGV[FIRST_OWN + OWN_STEP * (j - 1) + KEY]
      key_job[#keys] = j
    end
  end
  -- A key held answers its holder, and its job is not inserted; a key recorded but not held is
  -- taken, its old holder's id and gc entries dropped (as enqueue_dedup does).
  local held, old, taken = {}, {}, n
  if #keys > 0 then
    local values = redis.call('HMGET', records_key, unpack(keys))
    for i = 1, #keys do
      local value = values[i]
      if value then
        local p, id, until_ms = parse_holder(value)
        if p > m then
          return nil  -- the general loop answers that the caller must pass more priorities
        end
        if now_ms < until_ms or job_active(jobs, 7 + DEDUP_GROUP * (p - 1), id) then
          held[key_job[i]] = {p, tonumber(id)}
          taken = taken - 1
        else
          old[#old + 1] = id
        end
      end
    end
  end
  local simple = any_group and join_plan(held)
  if any_group and not simple then
    return nil  -- no rules: the general loop answers the error
  end
  local joined = {}
  for _, id in ipairs(old) do
    redis.call('HDEL', ids_key, id)
    redis.call('ZREM', gc_key, id)
  end
  local out, fields, members, scores, priorities = {}, {}, {}, {}, {}
  if taken == 0 then
    for j = 1, n do
      out[3 * j - 2], out[3 * j - 1], out[3 * j] = held[j][1], held[j][2], 1
    end
    return out
  end
  local next_id = redis.call('HINCRBY', counter_key, 'id', taken) - taken + 1
  local holders = #keys > n - taken and new_holders(records_key, nil, runs_key)
  -- a job due now of no group, or the one job of a group it joins at once (simple: active, the
  -- group's only one), goes to its priority's ready list, as insert_plain decides (all of a
  -- priority's or none), unless an id of the call gains a digit (then every job to its set)
  local listing = READY_LISTS and #string.format('%d', next_id) == #string.format('%d', next_id + taken - 1)
  local lists = {}  -- KEYS index -> names for its ready list, or false
  local job = {}  -- join_group's view of each job in turn (its place)
  for j = 1, n do
    local holder = held[j]
    if holder then
      out[3 * j - 2], out[3 * j - 1], out[3 * j] = holder[1], holder[2], 1
    else
      local a, own = 7 + SHARED_STEP * (j - 1), FIRST_OWN + OWN_STEP * (j - 1)
      local id = next_id
      next_id = next_id + 1
      local name = string.format('%d', id)
      local k = ARGV[a]
      local priority = priorities[k]
      if not priority then
        priority = (tonumber(k) - 7) / DEDUP_GROUP + 1
        priorities[k] = priority
      end
      local run_after = ARGV[a + 3]
      local score = scores[run_after]
      if not score then
        score = to_ms(run_after)
        scores[run_after] = score
      end
      local flags = ARGV[a + 7]
      local pending, group = true, nil
      if any_group and (flags == 'g' or flags == 'kg') then
        group = ARGV[own + GROUP]
        if simple[group] then
          joined[#joined + 1] = group
        else
          job.gq = id
          pending = join_group(rules, group, job, name, priority, score, now)
        end
      end
      local record, body = nil, ARGV[own + BODY]
      if flags == 'k' or flags == 'kg' then
        record = new_keyed_record(body, ARGV[a + 2], ARGV[a + 4], now, group, id, ARGV[own + KEY])
      elseif group then
        record = new_grouped_record(body, ARGV[a + 2], ARGV[a + 4], now, group, id)
      else
        record = new_record(body, ARGV[a + 2], ARGV[a + 4], now)
      end
      local listed = false
      if pending and listing and (not group or simple[group]) and score == now then
        listed = lists[k]
        if listed == nil then
          listed = ready_room(KEYS[tonumber(k) + INSERT_READY_OFFSET], jobs, now, {name}) == 1 and {}
          lists[k] = listed
        end
      end
      if listed then
        listed[#listed + 1] = name
      elseif pending then
        local list = members[k]
        if not list then
          list = {}
          members[k] = list
        end
        list[#list + 1], list[#list + 2] = score, name
      end
      if flags == 'k' or flags == 'kg' then
        holders.take(ARGV[own + KEY], priority, name, id, ARGV[a + 6], now_ms)
      end
      out[3 * j - 2], out[3 * j - 1], out[3 * j] = priority, id, 0
      fields[#fields + 1], fields[#fields + 2] = name, record
    end
  end
  redis.call('HSET', jobs, unpack(fields))
  for k, set_pairs in pairs(members) do
    zadd_pairs(KEYS[tonumber(k)], set_pairs)
  end
  for k, list in pairs(lists) do
    if list then
      ready_append(KEYS[tonumber(k) + INSERT_READY_OFFSET], jobs, now, list)
    end
  end
  if holders then
    holders.write()
  end
  join_simple(rules, joined, now)
  return out
end

local any_group = false
for j = 0, n - 1 do
  if grouped(7 + SHARED_STEP * j) then
    any_group = true
    break
  end
end
-- A uniform call as the general loop reads a call: ten values a job, the tail after them.
local function expand_uniform()
  local t = {ARGV[1], ARGV[2], ARGV[3], string.format('%d', n), ARGV[5], ARGV[6]}
  for j = 0, n - 1 do
    local own = 17 + 3 * j
    local a = #t
    t[a + 1], t[a + 2], t[a + 3], t[a + 4], t[a + 5] = ARGV[7], ARGV[own], ARGV[9], ARGV[10], ARGV[11]
    t[a + 6], t[a + 7], t[a + 8], t[a + 9], t[a + 10] = ARGV[own + 1], ARGV[13], ARGV[14], ARGV[own + 2], ARGV[16]
  end
  for i = 17 + 3 * n, #ARGV do
    t[#t + 1] = ARGV[i]
  end
  return t
end

local out = enqueue_fresh() or enqueue_common(any_group)
if not out then
  if UNIFORM then
    ARGV = expand_uniform()
  end
  if rules then
    local groups = {}
    for j = 0, n - 1 do
      local a = 7 + STRIDE * j
      if grouped(a) then
        groups[#groups + 1] = ARGV[a + 8]
      end
    end
    prefetch_groups(rules, groups)
  end
  out = enqueue_dedup(counter_key, records_key, ids_key, gc_key, runs_key, jobs, now, now_ms, n, m, 7, INSERT_READY_OFFSET,
    STRIDE, keyed, place, nil, true)
end
flush_groups(rules, now)
return out
