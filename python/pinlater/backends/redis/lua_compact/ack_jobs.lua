--[[ ack_jobs: apply a batch of success and failure acks, of any priorities, in one call.

As lua/ack_jobs.lua, in the compact layout. Only a job in its priority's IN_PROGRESS set changes;
any other ack is a no-op (clients resend acks they think were lost; an id acked twice in one
call changes once, as the original's ZREM per ack does). Success: to SUCCEEDED scored by now.
Failure with more than one attempt remaining: to PENDING scored by its retry time, one attempt
less, claim removed. Failure with one or none left: to FAILED scored by now, none remaining (the
claim is kept for lookups). Every acked job gets ua = now and the status appended to cs, cut to
ARGV[3] UTF-8 characters, except that a success's record may keep its ua (the common path below
leaves the record of a success that appends no status as it is): a SUCCEEDED job's updated
time is its score (lib/records.lua). A member whose record is missing (evicted) is removed and
counted.

A job of an ordered group that finishes (success, or failure with none left) leaves its group,
whose oldest waiting jobs move up (lib/groups.lua); one retried stays active and first. A job
with a dedup key that finishes forgets it (lib/dedup.lua, forget_keys).

Batched: one ZADD NX per IN_PROGRESS set for membership (ZMSCORE where it finds a job that is
not there: ack_common below, then lib/claimed.lua again if ack_common gives up), one HMGET of
the records, one HSET of the changed ones, and one ZREM / ZADD per set touched (each per chunk
of 1000). Successes that append no status, in a queue with no unfinished job of a group, with
an expiry or with a dedup key, read no record (ack_common's plain_queue).

Cancel and expiry, as lua/ack_jobs.lua: a failure of a cancelled job (ar 0) ends it FAILED with
"cancelled" appended; a failure whose retry time is at or after the job's expiry (ex) ends it
FAILED with "expired" appended (the expired count one up). A job with an expiry that finishes
leaves the expiry index.

KEYS[1]     the queue's records hash (plc:{S:Q}:j), with its fields c and id
KEYS[2]     expiry index (plc:{S:Q}:xe)
KEYS[3]     expired count (plc:{S:Q}:xn)
KEYS[4..n]  four sorted sets per acked priority, in state order: PENDING, IN_PROGRESS,
            SUCCEEDED, FAILED (plc:{S:Q}:p{p}:s0 .. :s3)
ARGV[1]     queue name
ARGV[2]     the records hash (plc:{S:Q}:j)
ARGV[3]     custom status limit, in characters
ARGV[4]     now, seconds as float
ARGV[5]     number of acks, n
then 5 per ack:
  ARGV[i]   index into KEYS of the PENDING set of the job's priority (the other three follow)
  ARGV[i+1] local id
  ARGV[i+2] 's' for success, 'f' for failure
  ARGV[i+3] status to append
  ARGV[i+4] retry time for a failure, seconds as float (now + retry delay)
A uniform call (ARGV[5] 'u' then n, 1 <= n <= RECORD_CHUNK): successes of one priority that
append no status (the usual batch; the server sends one where the acks allow it): ARGV[6] is the
KEYS index of their PENDING set, then one argument a job, its local id; the tail follows at
ARGV[7 + n]. One argument a job, not five: each costs Redis hundreds of instructions. Where the
common path gives up, the call is expanded to five values an ack (retry time: now, which a
success never reads) for the general loop.
after the KEYS above, last before the tail's: the dedup records and runs (plc:{S:Q}:dk, :dr;
keys_compact.dedup_end_keys): a job that ends forgets its dedup key (lib/dedup.lua, forget_keys)
then, optionally, the rules and group keys at the end of ARGV and KEYS (lib/groups.lua's tail):
without them no job of a group may be acked here.

Returns {changed, evicted}, or -1 if the queue does not exist.
]]
-- What every function below reads as ARGV: the call's own, or a uniform call's expansion to five
-- values an ack, once it falls back to the general loop.
local ARGV = ARGV
--@include records
--@include sets
--@include cut_chars
--@include ended
--@include claimed
--@include groups
--@include dedup
local meta_key, expiry_index_key, expired_count_key = KEYS[1], KEYS[2], KEYS[3]
local records_key, status_limit = ARGV[2], tonumber(ARGV[3])
local now = to_ms(ARGV[4])
local UNIFORM = string.byte(ARGV[5], 1) == 117  -- 'u'
local n = tonumber(UNIFORM and string.sub(ARGV[5], 2) or ARGV[5])
if redis.call('HEXISTS', meta_key, 'c') == 0 then
  return -1
end
local rules = rules_tail(UNIFORM and 6 + n or 5 + 5 * n)
local dedup_records_key, dedup_runs_key = dedup_end_keys(rules)

-- Whether the common ack may leave its jobs' records unread: no status to append (`appends`, one
-- per acked job) and none of the keys exists that an unfinished job of a group, with a dedup
-- key or with an expiry keeps (EXISTS of the group counts ga, where every unfinished job's
-- group has its field; the dedup records dk, where every unfinished job's key has its record;
-- the expiry index xe, which a success leaves: expire_jobs drops the entry of a job IN_PROGRESS
-- when it is due, and then a success has nothing of its expiry to undo; Redis drops each key
-- once emptied). A success then changes nothing in a record (its updated time is its score) and
-- reads nothing from it: the queue's acks skip a hash lookup and a record unpacked per job,
-- about 5% of Redis' CPU per plain job. What the general loop would do otherwise and this does
-- not: count an IN_PROGRESS job whose record is missing (not Redis' eviction, which takes the
-- whole records hash, but a field deleted by hand) as evicted at its ack; here it goes to
-- SUCCEEDED, and the reader that meets it there counts it.
local function plain_queue(appends)
  if not rules then
    return false
  end
  for i = 1, #appends do
    if appends[i] ~= '' then
      return false
    end
  end
  return redis.call('EXISTS', rules.active, expiry_index_key, dedup_records_key) == 0
end

-- The common ack, with as few Lua operations per job as it takes (each costs Redis' Lua dozens
-- of instructions, a table or a C call thousands): successes alone, all of one priority, a
-- record rewritten (from its items, without a table) only where a status is appended: a
-- SUCCEEDED job's updated time is its score (lib/records.lua), so the rest keep their records
-- as they are; a job of an ordered group leaves it as below. It does what the general loop
-- below would, and gives up before changing anything (nil; it may have added ids to IN_PROGRESS
-- and taken them out again: in_progress_of) wherever that loop has more to do: a failure, a second
-- priority, more than RECORD_CHUNK acks, or an acked job whose record is missing or has an
-- expiry. In a plain queue (plain_queue) it reads no record at all.
local function ack_common()
  if n == 0 or n > RECORD_CHUNK then
    return nil
  end
  local k_text = ARGV[6]
  local ids, appends, seen = {}, {}, {}
  if UNIFORM then
    for j = 7, 6 + n do
      local id = ARGV[j]
      if not seen[id] then  -- acked twice in one call: it changes once
        seen[id] = true
        ids[#ids + 1] = id
        appends[#ids] = ''
      end
    end
  else
    for j = 0, n - 1 do
      local a = 6 + 5 * j
      if ARGV[a] ~= k_text or ARGV[a + 2] ~= 's' then
        return nil
      end
      local id = ARGV[a + 1]
      if not seen[id] then  -- acked twice in one call: it changes once
        seen[id] = true
        ids[#ids + 1] = id
        appends[#ids] = ARGV[a + 3]
      end
    end
  end
  local k = tonumber(k_text)
  local plain = plain_queue(appends)
  local found = in_progress_of(KEYS[k + 1], ids)  -- (lib/claimed.lua: not by ZMSCORE alone)
  local acked, added = ids, appends
  if found ~= true then
    acked, added = {}, {}
    for i = 1, #ids do
      if found[ids[i]] then
        acked[#acked + 1] = ids[i]
        added[#acked] = appends[i]
      end
    end
  end
  if #acked == 0 then
    return {0, 0}
  end
  if plain then  -- no record to read: out of IN_PROGRESS, into SUCCEEDED
    zrem_all(KEYS[k + 1], acked)
    zadd_all(KEYS[k + 2], now, acked)
    return {#acked, 0}
  end
  local records = redis.call('HMGET', records_key, unpack(acked))
  local fields, left, ended_ids, ended_keys, ended_cas = {}, {}, {}, {}, {}
  for i = 1, #acked do
    local record = records[i]
    if not record or record == TOMBSTONE then
      return nil
    end
    local bd, al, ar, ca, _, cs, cd, gr, gq, ex, dk = record_items(record)
    if ex then
      return nil
    end
    left[#left + 1] = gr
    if dk then
      local e = #ended_keys + 1
      ended_ids[e], ended_keys[e], ended_cas[e] = acked[i], dk, ca
    end
    if added[i] ~= '' or #cs > status_limit then  -- else the record stays: its ua is read from its score
      cs = cut_chars(cs .. added[i], status_limit)
      fields[#fields + 1], fields[#fields + 2] = acked[i], record_of(bd, al, ar, ca, now, cs, cd, gr, gq, nil, dk)
    end
  end
  if #left > 0 and not rules then
    return nil  -- the general loop answers the error
  end
  if #fields > 0 then
    redis.call('HSET', records_key, unpack(fields))
  end
  zrem_all(KEYS[k + 1], acked)
  zadd_all(KEYS[k + 2], now, acked)
  if #left > 0 then
    leave_groups(rules, left, now)
  end
  if #ended_keys > 0 then  -- all of one priority, named in its PENDING set's key
    local priority = string.match(KEYS[k], ':p(%d+):s0$')
    forget_keys(dedup_records_key, dedup_runs_key, ended_ids, ended_keys, ended_cas, now, priority)
  end
  return {#acked, 0}
end
local common = ack_common()
if common then
  return common
end
if UNIFORM then  -- five values an ack for the loop below, the tail after them
  local t = {ARGV[1], ARGV[2], ARGV[3], ARGV[4], string.format('%d', n)}
  for j = 7, 6 + n do
    local a = #t
    t[a + 1], t[a + 2], t[a + 3], t[a + 4], t[a + 5] = ARGV[6], ARGV[j], 's', '', ARGV[4]
  end
  for i = 7 + n, #ARGV do
    t[#t + 1] = ARGV[i]
  end
  ARGV = t
end

local member, jobs = claimed_jobs(records_key, 6, 5, n)
local left = {}  -- the groups an active job left, in order (one entry per job)
local ended = new_ended()  -- the jobs that finished with a dedup key

local writes = set_writes()
local changed, evicted, acked = 0, 0, {}
for j = 0, n - 1 do
  local a = 6 + 5 * j
  local k = tonumber(ARGV[a])  -- PENDING; IN_PROGRESS, SUCCEEDED and FAILED follow
  local id, kind, append, retry_at = ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4]
  if member[k][id] then
    member[k][id] = nil
    writes.remove(k + 1, id)
    local job = jobs[id]
    if not job then
      evicted = evicted + 1
    else
      job.cs = cut_chars(job.cs .. append, status_limit)
      job.ua = now
      local finished = true
      if kind == 's' then
        writes.add(k + 2, now, id)
        left[#left + 1] = job.gr
      elseif job.ar > 1 and not expired_at(job.ex, to_ms(retry_at)) then
        job.ar = job.ar - 1
        job.cd = false
        writes.add(k, to_ms(retry_at), id)
        finished = false
      else
        if job.ar == 0 then
          job.cs = ended_status(job.cs, CANCELLED, status_limit)
        elseif job.ar > 1 then
          job.cs = ended_status(job.cs, EXPIRED, status_limit)
          redis.call('INCR', expired_count_key)
        end
        job.ar = 0
        writes.add(k + 3, now, id)
        left[#left + 1] = job.gr
      end
      if finished and job.ex then
        redis.call('ZREM', expiry_index_key, id)
      end
      if finished and job.dk then
        ended.add(id, job.dk, job.ca)
      end
      acked[#acked + 1] = id
      changed = changed + 1
    end
  end
end
if #left > 0 and not rules then  -- before any write: Redis keeps a failed script's writes
  return redis.error_reply('ERR a job of an ordered group acked without the group keys')
end
write_records(records_key, acked, jobs)
writes.flush()
if #left > 0 then
  leave_groups(rules, left, now)
end
ended.forget(dedup_records_key, dedup_runs_key, now)
return {changed, evicted}
