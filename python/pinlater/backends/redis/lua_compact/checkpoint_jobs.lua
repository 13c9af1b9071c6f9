--[[ checkpoint_jobs: apply a batch of checkpoints, each guarded by state and claim.

As lua/checkpoint_jobs.lua, in the compact layout. A checkpoint applies only while the job is in
its priority's IN_PROGRESS set and its claim (cd) contains the source as a plain substring
(string.find with plain = true: no character of the source is a pattern). Then, as asked: the
body is replaced, attempts allowed and remaining are both set, a status is prepended to cs (cut
to ARGV[4] UTF-8 characters). With move-to-pending the job goes to PENDING scored by its
run-after time and loses its claim; otherwise it stays IN_PROGRESS re-scored by its run-after
time (the request's, else now), which extends the claim, as the original's checkpoint did. ua =
that time either way (now for a cancelled job that ends FAILED). A member whose record is missing (evicted) is removed and
counted. The checkpoints apply in order, as the original's one by one (a job checkpointed twice
in one call gets both unless the first moved it to PENDING).

Batched: one ZADD NX per IN_PROGRESS set for membership (ZMSCORE where it finds a job that is
not there: lib/claimed.lua), one HMGET of the records, one HSET of the changed ones, and one
ZREM / ZADD per set touched (each per chunk of 1000).

A cancelled job (ar 0) keeps ar 0 (attempts to allow set al only), and a move to PENDING ends
it FAILED with "cancelled" appended (it leaves its group and forgets its dedup key as a final
failure does); a job with an
expiry moved to PENDING is put back in the expiry index (as lua/checkpoint_jobs.lua).

KEYS[1]     the queue's records hash (plc:{S:Q}:j), with its fields c and id
KEYS[2]     expiry index (plc:{S:Q}:xe)
KEYS[3..n]  four sorted sets per priority involved, in state order: PENDING, IN_PROGRESS,
            SUCCEEDED, FAILED (plc:{S:Q}:p{p}:s0 .. :s3)
ARGV[1]     queue name
ARGV[2]     the records hash (plc:{S:Q}:j)
ARGV[3]     source that must appear in the claim
ARGV[4]     custom status limit, in characters
ARGV[5]     now, seconds as float
ARGV[6]     number of checkpoints, n
then 9 per checkpoint:
  ARGV[i]   index into KEYS of the PENDING set of the job's priority (the other three follow)
  ARGV[i+1] local id
  ARGV[i+2] '1' to move to PENDING, else '0'
  ARGV[i+3] run after, seconds as float (used with move-to-pending)
  ARGV[i+4] '1' if a new body follows, else '0'
  ARGV[i+5] new body
  ARGV[i+6] attempts to allow, or '' to keep them
  ARGV[i+7] '1' if a status to prepend follows, else '0'
  ARGV[i+8] status to prepend

after the KEYS above, last before the tail's: the dedup records and runs (plc:{S:Q}:dk, :dr;
keys_compact.dedup_end_keys): a job that ends forgets its dedup key (lib/dedup.lua, forget_keys)
then the rules and group keys at the end of ARGV and KEYS (lib/groups.lua's tail).

Returns {changed, evicted}, or -1 if the queue does not exist.
]]
--@include records
--@include sets
--@include cut_chars
--@include ended
--@include claimed
--@include groups
--@include dedup
local meta_key, expiry_index_key = KEYS[1], KEYS[2]
local records_key, source = ARGV[2], ARGV[3]
local status_limit, now, n = tonumber(ARGV[4]), to_ms(ARGV[5]), tonumber(ARGV[6])
if redis.call('HEXISTS', meta_key, 'c') == 0 then
  return -1
end

local member, jobs = claimed_jobs(records_key, 7, 9, n)

-- Where each job touched ends up, per PENDING set index k: fate[k][id] = true (stays in
-- IN_PROGRESS, re-scored by claimed_at), a run-after score in ms (moved to PENDING), or false (evicted).
local fate, touched = {}, {}
local function settle(k, id, where)
  fate[k] = fate[k] or {}
  if fate[k][id] == nil then
    touched[#touched + 1] = {k, id}
  end
  fate[k][id] = where
end
local changed, evicted, written, seen = 0, 0, {}, {}
local claimed_at = {}  -- 'k:id' -> the IN_PROGRESS score of a job that stays (its run after given, or now)
local ended = new_ended()  -- the cancelled jobs that ended with a dedup key
local left = {}  -- the groups a cancelled job left
-- The expiry index's changes, written after the error check below (Redis keeps the writes a
-- script made before it returns an error): ids that leave it, and (score, id) pairs back in it.
local unexpired, reexpired = {}, {}
for j = 0, n - 1 do
  local a = 7 + 9 * j
  local k = tonumber(ARGV[a])
  local id = ARGV[a + 1]
  if member[k][id] then
    local job = jobs[id]
    if not job then
      member[k][id] = nil
      settle(k, id, false)
      evicted = evicted + 1
    elseif job.cd and string.find(job.cd, source, 1, true) then
      if ARGV[a + 4] == '1' then
        job.bd = ARGV[a + 5]
      end
      local cancelled = job.ar == 0
      if ARGV[a + 6] ~= '' then
        job.al = tonumber(ARGV[a + 6])
        if not cancelled then
          job.ar = job.al
        end
      end
      if ARGV[a + 7] == '1' then
        job.cs = cut_chars(ARGV[a + 8] .. job.cs, status_limit)
      end
      if ARGV[a + 2] == '1' and cancelled then
        member[k][id] = nil
        settle(k, id, 'failed')
        job.cs = ended_status(job.cs, CANCELLED, status_limit)
        if job.gr then
          left[#left + 1] = job.gr
        end
        if job.dk then
          ended.add(id, job.dk, job.ca)
        end
        if job.ex then
          unexpired[#unexpired + 1] = id
        end
      elseif ARGV[a + 2] == '1' then
        if job.ex then
          reexpired[#reexpired + 1], reexpired[#reexpired + 2] = job.ex, id
        end
        member[k][id] = nil
        settle(k, id, to_ms(ARGV[a + 3]))
        job.cd = false
      else
        settle(k, id, true)
        claimed_at[k .. ':' .. id] = to_ms(ARGV[a + 3])
      end
      job.ua = ARGV[a + 2] == '1' and cancelled and now or to_ms(ARGV[a + 3])
      if not seen[id] then
        seen[id] = true
        written[#written + 1] = id
      end
      changed = changed + 1
    end
  end
end
local rules = rules_tail(6 + 9 * n)
local dedup_records_key, dedup_runs_key = dedup_end_keys(rules)
if #left > 0 and not rules then  -- before any write: Redis keeps a failed script's writes
  return redis.error_reply('ERR a job of an ordered group ended without the group keys')
end
write_records(records_key, written, jobs)
ended.forget(dedup_records_key, dedup_runs_key, now)
zrem_all(expiry_index_key, unexpired)
zadd_pairs(expiry_index_key, reexpired)

local writes = set_writes()
for _, t in ipairs(touched) do
  local k, id = t[1], t[2]
  local where = fate[k][id]
  if where == true then
    writes.add(k + 1, claimed_at[k .. ':' .. id], id)
  elseif where == 'failed' then
    writes.remove(k + 1, id)
    writes.add(k + 3, now, id)
  elseif where then
    writes.remove(k + 1, id)
    writes.add(k, where, id)
  elseif where == false then
    writes.remove(k + 1, id)
  end
end
writes.flush()
if #left > 0 then
  leave_groups(rules, left, now)
end
return {changed, evicted}
