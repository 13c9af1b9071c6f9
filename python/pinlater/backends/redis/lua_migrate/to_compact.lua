--[[ to_compact: move a batch of one queue's jobs from the original layout (keys.py) to the
compact one (keys_compact.py, lib/records.lua), in one atomic call.

Each call reads up to ARGV[3] jobs (fewer once their bodies reach ARGV[4] bytes) from the
queue's sets, writes them to the compact layout and deletes them from the original one, so a
crash between two calls loses and duplicates nothing, and calling again just continues. The
call that finds the queue's sets empty finishes the queue: the name and what is left of the
hold structures leave the original layout. The counter (plj) stays, as the original layout
keeps it after a queue's deletion, raised to the compact one: a queue created again in the
original layout (by a server still running there) goes on from there, never from 1. A queue no
longer named in the original (already moved, or deleted) is not touched, except for its counter.

Every call first raises the compact counter (field id of the records hash) to the original's
(plj), so ids are never handed out twice, and for a queue still named in the original it
registers the name in the compact layout (field c of the records hash and the names sorted set,
in ms; an existing c is kept).

A job is never written over a record the compact layout already holds (ids handed out twice,
by servers writing both layouts at once): the call stops before writing the batch that holds
such a job, returns 3 and the job's id, and leaves both copies where they are.

With ARGV[6] = 'counter' the call only raises the counter: it returns 2 for a queue not named
in the original, 4 (and moves nothing) for one that is.

Jobs keep their priority, state, score and fields: scores and ca/ua go from seconds to integer
ms (records.lua's to_ms). PENDING jobs all go to the compact PENDING sets (p{p}:s0), never to
the ready lists (p{p}:r, lua_compact/lib/ready.lua): a PENDING job may always sit in the set,
which is what the compact scripts do with any job whose run after is not its enqueue's now, and
the lists' order (score, id) could not be kept by a batch of any scores appended to a list that
the compact layout may already hold. So a moved PENDING job costs a set member (about 100
bytes more than a list entry) until it is dequeued; jobs enqueued afterwards go to the lists. A held job (broker hold) stays held, with its expiry and holder; one
whose expiry or holder is missing goes to PENDING instead (it could never lapse). A member whose
hash is gone, or lacks bd or al (evicted remains), is removed with its remains and counted.

KEYS[1]     the original's queue names sorted set (pln_{S})
KEYS[2]     the original's id counter (plj_{S}_{Q})
KEYS[3]     the compact queue names sorted set (plc:{S}:q)
KEYS[4]     the compact records hash (plc:{S:Q}:j), with the queue's fields c and id
KEYS[5..]   14 per priority: the original's s0 s1 s2 s3 _h _x _o (plq_{S}_{Q}.p{p}_s0 ..), then
            the compact s0 s1 s2 s3 h x o (plc:{S:Q}:p{p}:s0 ..)
KEYS[5+14n..] keys deleted outright when the queue is finished (the legacy _r sets)
ARGV[1]     queue name
ARGV[2]     the original's job hash key prefix (plh_{S}_{Q}.)
ARGV[3]     the most jobs to move in this call
ARGV[4]     body bytes after which the call moves no further job (it moves at least one)
ARGV[5]     number of priorities passed, n
ARGV[6]     'move', or 'counter' to only raise the counter (see above)

Returns {done (0: more to move; 1: the queue is finished; 2: it is not named in the original,
nothing moved; 3: a job is in both layouts, see above; 4: 'counter' call of a queue named in the
original), moved PENDING, moved IN_PROGRESS, moved SUCCEEDED, moved FAILED, of the PENDING ones
still held, held ones put back in PENDING, evicted remains dropped, orphan records dropped
(always 0 here), tombstones dropped (always 0 here), the id found in both layouts (0 if none)}.
]]
--@include records
--@include holds
local src_names, src_counter, dst_names, records = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local FIRST = 5  -- KEYS index of the first priority's keys
local queue, hash_prefix = ARGV[1], ARGV[2]
local left, byte_budget, n = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local counter_only = ARGV[6] == 'counter'
local out = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}

local counter = tonumber(redis.call('GET', src_counter) or 0) or 0
if counter > (tonumber(redis.call('HGET', records, 'id') or 0) or 0) then
  redis.call('HSET', records, 'id', string.format('%d', counter))
end
local created = redis.call('ZSCORE', src_names, queue)
if not created then
  out[1] = 2
  return out
end
if counter_only then
  out[1] = 4
  return out
end
redis.call('HSETNX', records, 'c', string.format('%d', to_ms(created)))
redis.call('ZADD', dst_names, 'NX', redis.call('HGET', records, 'c'), queue)

local function int_or_zero(text)
  return tonumber(text or 0) or 0
end

local function ms_or_zero(text)
  if text and tonumber(text) then
    return to_ms(text)
  end
  return 0
end

local bytes = 0
local collision = false  -- the id of a job the compact layout already holds
-- Move up to `left` members of one original set (`state` 0..3, or 4 for the held set).
local function move_some(base, state)
  local src, dst = KEYS[base + state], KEYS[base + 7 + state]
  local page = redis.call('ZRANGE', src, 0, math.min(left, 1000) - 1, 'WITHSCORES')
  if #page == 0 then
    return false
  end
  local taken, hash_keys, present, jobs, scored = {}, {}, {}, {}, {}
  local held, expiries, holders, unheld = {}, {}, {}, {}
  for i = 1, #page, 2 do
    if bytes >= byte_budget and #taken > 0 then
      break
    end
    local id, score = page[i], page[i + 1]
    local hash_key = hash_prefix .. id
    taken[#taken + 1] = id
    hash_keys[#hash_keys + 1] = hash_key
    local f = redis.call('HMGET', hash_key, 'bd', 'al', 'ar', 'ca', 'ua', 'cs', 'cd', 'ex')
    if not f[1] or not f[2] then
      out[8] = out[8] + 1
    else
      jobs[id] = {bd = f[1], al = int_or_zero(f[2]), ar = int_or_zero(f[3]), ca = ms_or_zero(f[4]),
                  ua = ms_or_zero(f[5]), cs = f[6] or '', cd = f[7] or false, ex = f[8] and tonumber(f[8])}
      present[#present + 1] = id
      bytes = bytes + #f[1]
      local ms = string.format('%d', to_ms(score))
      local expiry, holder = false, false
      if state == 4 then
        expiry = redis.call('ZSCORE', KEYS[base + 5], id)
        holder = redis.call('HGET', KEYS[base + 6], id)
      end
      if state < 4 then
        scored[#scored + 1] = ms
        scored[#scored + 1] = id
        out[2 + state] = out[2 + state] + 1
      elseif expiry and holder then
        held[#held + 1] = ms
        held[#held + 1] = id
        expiries[#expiries + 1] = string.format('%d', to_ms(expiry))
        expiries[#expiries + 1] = id
        holders[#holders + 1] = id
        holders[#holders + 1] = holder
        out[2] = out[2] + 1
        out[6] = out[6] + 1
      else
        unheld[#unheld + 1] = ms
        unheld[#unheld + 1] = id
        out[2] = out[2] + 1
        out[7] = out[7] + 1
      end
    end
  end
  -- Nothing is written over a record the compact layout holds: stop before any write.
  for i = 1, #present, 1000 do
    local found = redis.call('HMGET', records, unpack(present, i, math.min(i + 999, #present)))
    for j = 1, #found do
      if found[j] then
        collision = present[i + j - 1]
        return false
      end
    end
  end
  -- Everything read: now the writes, which cannot fail half-way.
  write_records(records, present, jobs)
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
  for i = 1, #hash_keys, 1000 do
    redis.call('DEL', unpack(hash_keys, i, math.min(i + 999, #hash_keys)))
  end
  left = left - #taken
  return true
end

for p = 0, n - 1 do
  local base = FIRST + 14 * p
  for state = 0, 4 do
    while not collision and left > 0 and bytes < byte_budget and move_some(base, state) do
    end
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
end
if remaining == 0 then
  local last = tonumber(redis.call('HGET', records, 'id') or 0) or 0
  if last > counter then  -- the original's counter stays, never below the compact one
    redis.call('SET', src_counter, string.format('%d', last))
  end
  local gone = {}
  for p = 0, n - 1 do
    local base = FIRST + 14 * p
    gone[#gone + 1] = KEYS[base + 5]
    gone[#gone + 1] = KEYS[base + 6]
  end
  for k = FIRST + 14 * n, #KEYS do
    gone[#gone + 1] = KEYS[k]
  end
  redis.call('DEL', unpack(gone))
  redis.call('ZREM', src_names, queue)
  out[1] = 1
end
return out
