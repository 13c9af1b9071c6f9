--[[ to_original: move a batch of one queue's jobs from the compact layout
(keys_compact.py, lib/records.lua) back to the original one (keys.py), in one atomic call.

The mirror of to_compact.lua: up to ARGV[3] jobs (fewer once their bodies reach ARGV[4] bytes)
are read from the compact sets and records, written as the original's sets and job hashes and
deleted from the compact layout, so a crash between calls loses and duplicates nothing and
calling again continues. The call that finds the queue's sets and ready lists empty finishes
it: the name leaves the compact layout, with what is left of its hold structures and any record
no set or list names (an orphan, invisible to every script: dropped and counted). The records
hash stays with its field id alone, raised to the original's counter, as compact delete_queue
leaves it: a queue created again in the compact layout (by a server still running there) goes
on from there, never from 1. A queue whose records hash has no field c (already moved, or
deleted) is not touched, except for its counter.

Every call first raises the original's counter (plj) to the compact one (field id), and
for a queue that exists in the compact layout it registers the name in the original's names
sorted set (score: c in seconds) unless it is there; a name in the compact names set whose
records hash has no c is removed (a crash between create_queue's two writes left it).

Scores and ca/ua go from integer ms to seconds text (records.lua's to_seconds, which a float
parser reads back as ms / 1000 exactly); al and ar as integers; cs as it is (always written, as
our enqueue writes it); cd only when the record has one. A SUCCEEDED job's ua is its score (its
record's may be its claim time: lua_compact/lib/records.lua). Held jobs stay held, as in
to_compact.

A job is never written over a job hash the original layout already holds (ids handed out
twice, by servers writing both layouts at once): the call stops before writing the batch that
holds such a job, returns 3 and the job's id, and leaves both copies where they are.

With ARGV[6] = 'counter' the call only raises the counter: it returns 2 for a queue whose
records hash has no c, 4 (and moves nothing) for one that has it.

Ready lists (lua_compact/lib/ready.lua): the PENDING jobs a compact queue holds in its ready
lists move too, after the priority's sets, from the list's head, so in list order: each to the
original's PENDING set, scored by its marker (its run after, which is the record's ca). A
tombstone (a job deleted or cancelled in place) is dropped with its record, as the compact
scripts drop it at the list's head, and not counted; an id without a record is an evicted job
(counted). Each entry taken counts against ARGV[3], and the list keeps its invariants between
calls (a marker at its head, t{p} counting its markers and tombstones; the field leaves once the
count is 0). A call whose reader passes ready.lua's READY_SKIP_BUDGET of tombstones and evicted
entries stops there.

KEYS[1]     the compact queue names sorted set (plc:{S}:q)
KEYS[2]     the compact records hash (plc:{S:Q}:j), with the queue's fields c, id and t{p}
KEYS[3]     the original's queue names sorted set (pln_{S})
KEYS[4]     the original's id counter (plj_{S}_{Q})
KEYS[5..]   14 per priority: the compact s0 s1 s2 s3 h x o (plc:{S:Q}:p{p}:s0 ..), then the
            original's s0 s1 s2 s3 _h _x _o (plq_{S}_{Q}.p{p}_s0 ..)
KEYS[5+14n..] the compact ready lists, one per priority in the same order (plc:{S:Q}:p{p}:r)
KEYS[5+15n..] the compact groups' active and blocked counts (plc:{S:Q}:ga, :gb), then the waiting
            sets, one per priority in the same order (plc:{S:Q}:p{p}:w): while any exists (jobs of
            groups made by a compact server during a forced move), the queue is not finished,
            its records kept, and the call returns 5
ARGV[1]     queue name
ARGV[2]     the original's job hash key prefix (plh_{S}_{Q}.)
ARGV[3]     the most jobs (ready list entries: jobs, tombstones, evicted ids) to move in this call
ARGV[4]     body bytes after which the call moves no further job (it moves at least one)
ARGV[5]     number of priorities passed, n
ARGV[6]     'move', or 'counter' to only raise the counter (see above)

Returns {done (0: more to move; 1: the queue is finished; 2: its records hash has no c, nothing
moved; 3: a job is in both layouts, see above; 4: 'counter' call of a queue that has c), moved
PENDING, moved IN_PROGRESS, moved SUCCEEDED, moved FAILED, of the PENDING ones still held, held
ones put back in PENDING, evicted remains (members without a record) dropped, orphan records
dropped, tombstones of ready lists dropped, the id found in both layouts (0 if none)}.
]]
--@include records
--@include holds
--@include ready
local src_names, records, dst_names, dst_counter = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local FIRST = 5  -- KEYS index of the first priority's keys
local queue, hash_prefix = ARGV[1], ARGV[2]
local left, byte_budget, n = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local counter_only = ARGV[6] == 'counter'
local out = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}

local counter = tonumber(redis.call('HGET', records, 'id') or 0) or 0
if counter > (tonumber(redis.call('GET', dst_counter) or 0) or 0) then
  redis.call('SET', dst_counter, string.format('%d', counter))
end
local created = redis.call('HGET', records, 'c')
if not created then
  redis.call('ZREM', src_names, queue)  -- a name without c is no queue (a crash in create_queue)
  out[1] = 2
  return out
end
if counter_only then
  out[1] = 4
  return out
end
redis.call('ZADD', dst_names, 'NX', to_seconds(tonumber(created)), queue)

local bytes = 0
local collision = false  -- the id of a job the original layout already holds

-- The first of `ids` whose job hash (`hash_keys`, in the same order) exists, or false.
local function held_already(hash_keys, ids)
  for i = 1, #hash_keys, 1000 do
    local last = math.min(i + 999, #hash_keys)
    if redis.call('EXISTS', unpack(hash_keys, i, last)) > 0 then
      for j = i, last do
        if redis.call('EXISTS', hash_keys[j]) == 1 then
          return ids[j]
        end
      end
    end
  end
  return false
end

-- The dedup keys of jobs moved (keyed: id, key, ...) into the compact ids hash and gc set, which
-- move with the dedup records (see above).
local function keep_keys(keyed)
  if #keyed == 0 then
    return
  end
  local base = string.sub(records, 1, -2)
  local due = {}
  for i = 1, #keyed, 2 do
    due[#due + 1], due[#due + 2] = 0, keyed[i]
  end
  for i = 1, #keyed, 2000 do
    redis.call('HSET', base .. 'di', unpack(keyed, i, math.min(i + 1999, #keyed)))
    redis.call('ZADD', base .. 'dg', unpack(due, i, math.min(i + 1999, #due)))
  end
end

-- Move up to `left` members of one compact set (`state` 0..3, or 4 for the held set).
local function move_some(base, state)
  local src, dst = KEYS[base + state], KEYS[base + 7 + state]
  local page = redis.call('ZRANGE', src, 0, math.min(left, 1000) - 1, 'WITHSCORES')
  if #page == 0 then
    return false
  end
  local taken, hash_keys, fields, scored, written = {}, {}, {}, {}, {}
  local held, expiries, holders, unheld, keyed = {}, {}, {}, {}, {}
  for i = 1, #page, 2 do
    if bytes >= byte_budget and #taken > 0 then
      break
    end
    local id, score = page[i], page[i + 1]
    taken[#taken + 1] = id
    local job = read_records(records, {id})[id]  -- one at a time, so the byte budget holds
    if not job then
      out[8] = out[8] + 1
    else
      bytes = bytes + #job.bd
      local hash_key = hash_prefix .. id
      hash_keys[#hash_keys + 1] = hash_key
      written[#written + 1] = id
      local f = {'bd', job.bd, 'al', string.format('%d', job.al), 'ar', string.format('%d', job.ar),
                 'ca', to_seconds(job.ca), 'ua', to_seconds(state == 2 and score or job.ua), 'cs', job.cs}
      if job.cd then
        f[#f + 1] = 'cd'
        f[#f + 1] = job.cd
      end
      if job.ex then
        f[#f + 1] = 'ex'
        f[#f + 1] = string.format('%d', job.ex)
      end
      if job.dk then
        keyed[#keyed + 1], keyed[#keyed + 2] = id, job.dk
      end
      fields[#fields + 1] = f
      local seconds = to_seconds(tonumber(score))
      local expiry, holder = false, false
      if state == 4 then
        expiry = redis.call('ZSCORE', KEYS[base + 5], id)
        holder = redis.call('HGET', KEYS[base + 6], id)
      end
      if state < 4 then
        scored[#scored + 1] = seconds
        scored[#scored + 1] = id
        out[2 + state] = out[2 + state] + 1
      elseif expiry and holder then
        held[#held + 1] = seconds
        held[#held + 1] = id
        expiries[#expiries + 1] = to_seconds(tonumber(expiry))
        expiries[#expiries + 1] = id
        holders[#holders + 1] = id
        holders[#holders + 1] = holder
        out[2] = out[2] + 1
        out[6] = out[6] + 1
      else
        unheld[#unheld + 1] = seconds
        unheld[#unheld + 1] = id
        out[2] = out[2] + 1
        out[7] = out[7] + 1
      end
    end
  end
  -- Nothing is written over a job hash the original layout holds: stop before any write.
  collision = held_already(hash_keys, written)
  if collision then
    return false
  end
  -- Everything read: now the writes, which cannot fail half-way.
  for i = 1, #hash_keys, 1000 do
    redis.call('DEL', unpack(hash_keys, i, math.min(i + 999, #hash_keys)))
  end
  for i, hash_key in ipairs(hash_keys) do
    redis.call('HSET', hash_key, unpack(fields[i]))
  end
  zadd_pairs(dst, scored)
  zadd_pairs(KEYS[base + 7 + 4], held)
  zadd_pairs(KEYS[base + 7 + 5], expiries)
  for i = 1, #holders, 2000 do
    redis.call('HSET', KEYS[base + 7 + 6], unpack(holders, i, math.min(i + 1999, #holders)))
  end
  zadd_pairs(KEYS[base + 7], unheld)
  if state == 4 then
    drop_holds(src, KEYS[base + 5], KEYS[base + 6], taken)
  else
    zrem_all(src, taken)
  end
  delete_records(records, taken)
  keep_keys(keyed)
  left = left - #taken
  return true
end

-- Move up to `left` entries from the head of one priority's ready list (in list order, so in
-- (score, id) order) to the original's PENDING set `dst`. The reader reads one entry (and its
-- record) at a time, so the byte budget holds as in move_some.
local function move_ready(ready_key, dst)
  if redis.call('EXISTS', ready_key) == 0 then
    return
  end
  local reader = ready_reader(ready_key, records, true, 1)
  local taken, hash_keys, fields, scored, keyed = {}, {}, {}, {}, {}
  local tombstones = 0
  while left > 0 and bytes < byte_budget do
    local e = reader.take()
    if not e then
      break
    end
    left = left - 1
    if e.state == 'job' then
      local job = e.job
      taken[#taken + 1] = e.id
      bytes = bytes + #job.bd
      hash_keys[#hash_keys + 1] = hash_prefix .. e.id
      local f = {'bd', job.bd, 'al', string.format('%d', job.al), 'ar', string.format('%d', job.ar),
                 'ca', to_seconds(job.ca), 'ua', to_seconds(job.ua), 'cs', job.cs}
      if job.cd then
        f[#f + 1] = 'cd'
        f[#f + 1] = job.cd
      end
      if job.ex then
        f[#f + 1] = 'ex'
        f[#f + 1] = string.format('%d', job.ex)
      end
      if job.dk then
        keyed[#keyed + 1], keyed[#keyed + 2] = e.id, job.dk
      end
      fields[#fields + 1] = f
      scored[#scored + 1] = to_seconds(e.score or job.ca)  -- a list whose head lost its marker: ca
      scored[#scored + 1] = e.id
      out[2] = out[2] + 1
    elseif e.state == 'gone' then
      out[8] = out[8] + 1
    else  -- a tombstone: finish() deletes its record
      tombstones = tombstones + 1
    end
  end
  collision = held_already(hash_keys, taken)
  if collision then
    return  -- nothing written: the reader only read
  end
  out[10] = out[10] + tombstones
  for i = 1, #hash_keys, 1000 do
    redis.call('DEL', unpack(hash_keys, i, math.min(i + 999, #hash_keys)))
  end
  for i, hash_key in ipairs(hash_keys) do
    redis.call('HSET', hash_key, unpack(fields[i]))
  end
  zadd_pairs(dst, scored)
  reader.finish()
  delete_records(records, taken)
  keep_keys(keyed)
  if reader.cut then
    left = 0  -- READY_SKIP_BUDGET spent: the next call goes on
  end
end

for p = 0, n - 1 do
  local base = FIRST + 14 * p
  for state = 0, 4 do
    while not collision and left > 0 and bytes < byte_budget and move_some(base, state) do
    end
  end
  if not collision and left > 0 and bytes < byte_budget then
    move_ready(KEYS[FIRST + 14 * n + p], KEYS[base + 7])
  end
end
if collision then
  out[1] = 3
  out[11] = tonumber(collision)
  return out
end

local remaining = 0
for p = 0, n - 1 do
  local base = FIRST + 14 * p
  for state = 0, 4 do
    remaining = remaining + redis.call('ZCARD', KEYS[base + state])
  end
  remaining = remaining + redis.call('LLEN', KEYS[FIRST + 14 * n + p])
end
if remaining == 0 then
  -- Jobs of ordered groups (which no original key can hold) that a compact server made during
  -- a forced move: their records stay, and the run stops (GROUPED) before the queue is finished.
  local group_keys = {}
  for i = FIRST + 15 * n, FIRST + 16 * n + 1 do
    group_keys[#group_keys + 1] = KEYS[i]
  end
  if redis.call('EXISTS', unpack(group_keys)) > 0 then
    out[1] = 5
    return out
  end
  -- Whatever field is left but c, id and the lists' counters t{p} is a record no set names.
  local own = redis.call('HEXISTS', records, 'c') + redis.call('HEXISTS', records, 'id')
  for p = 0, n - 1 do
    own = own + redis.call('HEXISTS', records, extra_field(KEYS[FIRST + 14 * n + p]))
  end
  out[9] = redis.call('HLEN', records) - own
  local gone = {records}
  for p = 0, n - 1 do
    local base = FIRST + 14 * p
    gone[#gone + 1] = KEYS[base + 5]
    gone[#gone + 1] = KEYS[base + 6]
  end
  redis.call('DEL', unpack(gone))
  -- The counter stays (as compact delete_queue keeps it), never below the original's.
  local last = math.max(counter, tonumber(redis.call('GET', dst_counter) or 0) or 0)
  if last > 0 then
    redis.call('HSET', records, 'id', string.format('%d', last))
  end
  redis.call('ZREM', src_names, queue)
  out[1] = 1
end
return out
