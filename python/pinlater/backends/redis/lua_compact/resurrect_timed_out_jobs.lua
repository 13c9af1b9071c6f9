--[[ resurrect_timed_out_jobs: treat up to ARGV[4] jobs claimed before ARGV[3] as failed with
no retry delay (the monitor's claim timeout).

As lua/resurrect_timed_out_jobs.lua, in the compact layout, with one HMGET and one HSET of
records and one ZADD per target set for the batch. Oldest claims first (IN_PROGRESS score <
ARGV[3], in ms). With more than one attempt remaining: to PENDING scored by now, one attempt
less, claim removed. Otherwise: to FAILED scored by now, none remaining. ua = now. A member whose
record is missing (evicted) is removed and counted. Holds of the dequeue broker that lapsed by
ARGV[5] go back to PENDING first (lib/holds.lua): the monitor is what returns the holds of a
server that crashed when nothing else touches the queue.

KEYS[1]  the queue's records hash (plc:{S:Q}:j), with its fields c and id
KEYS[2]  PENDING sorted set (plc:{S:Q}:p{p}:s0)
KEYS[3]  IN_PROGRESS sorted set (plc:{S:Q}:p{p}:s1)
KEYS[4]  FAILED sorted set (plc:{S:Q}:p{p}:s3)
KEYS[5]  held sorted set (plc:{S:Q}:p{p}:h)
KEYS[6]  hold expiry sorted set (plc:{S:Q}:p{p}:x)
KEYS[7]  holders hash (plc:{S:Q}:p{p}:o)
KEYS[8]  expiry index (plc:{S:Q}:xe)
KEYS[9]  expired count (plc:{S:Q}:xn)
ARGV[1]  queue name
ARGV[2]  the records hash (plc:{S:Q}:j)
ARGV[3]  claimed before, seconds as float (exclusive)
ARGV[4]  limit
ARGV[5]  now, seconds as float
after the KEYS above, last before the tail's: the dedup records and runs (plc:{S:Q}:dk, :dr;
keys_compact.dedup_end_keys): a job that ends forgets its dedup key (lib/dedup.lua, forget_keys)
then the rules and group keys at the end of ARGV and KEYS (lib/groups.lua's tail): a job of an
ordered group that fails for good leaves its group, whose oldest waiting jobs move up; one with
a dedup key forgets it (lib/dedup.lua, forget_keys).

A cancelled job (ar 0) ends FAILED with "cancelled" appended; one with attempts left whose
expiry (ex) is at or before now ends FAILED with "expired" appended (the expired count one up),
as lua/resurrect_timed_out_jobs.lua.

Returns {changed, evicted, failed} (failed: of the changed, those that ended FAILED), or -1 if the
queue does not exist.
]]
--@include records
--@include sets
--@include holds
--@include groups
--@include cut_chars
--@include ended
--@include dedup
local expiry_index_key, expired_count_key = KEYS[8], KEYS[9]
local meta_key, pending_key, in_progress_key, failed_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local records_key, before = ARGV[2], bound_ms('(' .. ARGV[3])
local limit, now = tonumber(ARGV[4]), to_ms(ARGV[5])
if redis.call('HEXISTS', meta_key, 'c') == 0 then
  return -1
end
local rules = rules_tail(5)
local dedup_records_key, dedup_runs_key = dedup_end_keys(rules)
sweep_lapsed(pending_key, KEYS[5], KEYS[6], KEYS[7], now)
if limit <= 0 then
  return {0, 0, 0}
end
local ids = redis.call('ZRANGEBYSCORE', in_progress_key, '-inf', before, 'LIMIT', 0, limit)
if #ids > 0 then
  redis.call('ZREMRANGEBYRANK', in_progress_key, 0, #ids - 1)
end
local jobs = read_records(records_key, ids)
local changed, retried, failed, left, ended = {}, {}, {}, {}, new_ended()
for _, id in ipairs(ids) do
  local job = jobs[id]
  if job then
    if job.ar > 1 and not expired_at(job.ex, now) then
      job.ar, job.cd = job.ar - 1, false
      retried[#retried + 1] = id
    else
      if job.ar == 0 then
        job.cs = ended_status(job.cs, CANCELLED, CUSTOM_STATUS_LIMIT)
      elseif job.ar > 1 then
        job.cs = ended_status(job.cs, EXPIRED, CUSTOM_STATUS_LIMIT)
        redis.call('INCR', expired_count_key)
      end
      if job.ex then
        redis.call('ZREM', expiry_index_key, id)
      end
      job.ar = 0
      failed[#failed + 1] = id
      left[#left + 1] = job.gr
      if job.dk then
        ended.add(id, job.dk, job.ca)
      end
    end
    job.ua = now
    changed[#changed + 1] = id
  end
end
write_records(records_key, changed, jobs)
zadd_all(pending_key, now, retried)
zadd_all(failed_key, now, failed)
for _, group in ipairs(left) do
  leave_group(rules, group, now)
end
ended.forget(dedup_records_key, dedup_runs_key, now)
return {#changed, #ids - #changed, #failed}
