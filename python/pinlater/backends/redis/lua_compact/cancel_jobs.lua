--[[ cancel_jobs: as lua/cancel_jobs.lua, in the compact layout (ShardStore.cancel_jobs).

A PENDING job (in its PENDING set, in its ready list, held by the dequeue broker, or waiting in
its ordered group) ends FAILED scored by now: ar 0, claim cleared, ua = now, "cancelled"
appended to cs (lib/ended.lua), out of the expiry index; it leaves its group as a final failure
does (an active one lets the group's next job move up, a waiting one leaves the group's FIFO)
and forgets its dedup key (lib/dedup.lua, forget_keys). A job of a ready list (lib/ready.lua) is
cancelled in place: found there by halving, its entry becomes a tombstone. An IN_PROGRESS job
with attempts remaining gets ar 0 and nothing else. Anything else (finished, an IN_PROGRESS job
already cancelled, missing or evicted) is left alone and not counted. The jobs are handled one
after the other, each read as the ones before left it (a cancel that moves a group's next job up
may cancel that one next).

KEYS[1]     the queue's records hash (plc:{S:Q}:j), with its fields c and id
KEYS[2]     expiry index (plc:{S:Q}:xe)
KEYS[3..n]  eight per priority named: PENDING, IN_PROGRESS and FAILED sets, held set, hold
            expiry set, holders hash, waiting set, ready list (plc:{S:Q}:p{p}:s0, :s1, :s3, :h,
            :x, :o, :w, :r)
ARGV[1]     queue name
ARGV[2]     the records hash (plc:{S:Q}:j)
ARGV[3]     custom status limit, in characters
ARGV[4]     now, seconds as float
ARGV[5]     number of jobs, n
then 3 per job:
  ARGV[i]   index into KEYS of the PENDING set of the job's priority (the other seven follow)
  ARGV[i+1] local id
  ARGV[i+2] its priority
after the KEYS above, last before the tail's: the dedup records and runs (plc:{S:Q}:dk, :dr;
keys_compact.dedup_end_keys): a job that ends forgets its dedup key (lib/dedup.lua, forget_keys)
then the rules and group keys at the end of ARGV and KEYS (lib/groups.lua's tail).

Returns how many jobs changed, or -1 if the queue does not exist.
]]
--@include records
--@include sets
--@include holds
--@include groups
--@include cut_chars
--@include ended
--@include dedup
--@include ready
local meta_key, expiry_index_key = KEYS[1], KEYS[2]
local records_key, status_limit = ARGV[2], tonumber(ARGV[3])
local now, n = to_ms(ARGV[4]), tonumber(ARGV[5])
if redis.call('HEXISTS', meta_key, 'c') == 0 then
  return -1
end
local rules = rules_tail(5 + 3 * n)
local dedup_records_key, dedup_runs_key = dedup_end_keys(rules)
local changed = 0
for j = 0, n - 1 do
  local a = 6 + 3 * j
  local k, id, p = tonumber(ARGV[a]), ARGV[a + 1], tonumber(ARGV[a + 2])
  local job = read_records(records_key, {id})[id]
  if job then
    local pending = redis.call('ZSCORE', KEYS[k], id)
    local held = not pending and redis.call('ZSCORE', KEYS[k + 3], id)
    local waiting = not pending and not held and redis.call('ZSCORE', KEYS[k + 6], id)
    -- in no set, with no claim: in the ready list if a search by halving finds it, and then
    -- cancelled in place (its entry a tombstone from now on: lib/ready.lua's ready_cancel)
    local listed = not pending and not held and not waiting and job.cd == false
      and ready_cancel(KEYS[k + 7], records_key, id)
    if (pending or held or waiting) and job.gr and not rules then
      return redis.error_reply('ERR a job of an ordered group cancelled without the group keys')
    end
    if listed or pending or held or waiting then
      if pending then
        redis.call('ZREM', KEYS[k], id)
      elseif held then
        drop_holds(KEYS[k + 3], KEYS[k + 4], KEYS[k + 5], {id})
      else
        redis.call('ZREM', KEYS[k + 6], id)
      end
      redis.call('ZADD', KEYS[k + 2], now, id)
      job.ar, job.cd, job.ua = 0, false, now
      job.cs = ended_status(job.cs, CANCELLED, status_limit)
      redis.call('HSET', records_key, id, pack_record(job))
      if job.ex then
        redis.call('ZREM', expiry_index_key, id)
      end
      if job.gr and waiting then
        drop_waiting(rules, job.gr, job, id, p, now)
      elseif job.gr then
        leave_group(rules, job.gr, now)
      end
      if job.dk then
        forget_keys(dedup_records_key, dedup_runs_key, {id}, {job.dk}, {job.ca}, now)
      end
      changed = changed + 1
    elseif job.ar > 0 and redis.call('ZSCORE', KEYS[k + 1], id) then
      job.ar = 0
      redis.call('HSET', records_key, id, pack_record(job))
      changed = changed + 1
    end
  end
end
return changed
