-- expiry: how the compact dequeue and reserve scripts expire the PENDING jobs they meet past
-- their expiry (scripts that say `--@include expiry` get this file pasted in, after records,
-- sets, groups, cut_chars, ended and dedup). See "Expiry" in ShardStore.enqueue_keyed_jobs.

-- How far a job of an ordered group met expired by a call without the group keys (a dequeue
-- or reserve of a queue with no rule for them: rules.py sends none) is put out of the way: its
-- score moves this long after now, so no dequeue meets it again before expire_jobs (which has
-- the keys) ends it and moves the group's next job up.
local EXPIRED_ASIDE_MS = 60000

-- End job `id` (its record `job`, PENDING, out of its PENDING set by the caller when this
-- answers true): FAILED scored by now, ar 0, claim cleared, ua now, "expired" appended, out of
-- the expiry index, the expired count one up, out of its group (the next one moves up), its
-- dedup key forgotten (forget_keys). A job of
-- a group without `rules` (the group keys) is moved aside instead (answers false).
local function expire_met(rules, records_key, pending_key, failed_key, index_key, count_key, id, job, now)
  if job.gr and not rules then
    redis.call('ZADD', pending_key, now + EXPIRED_ASIDE_MS, id)
    return false
  end
  job.ar, job.ua, job.cd = 0, now, false
  job.cs = ended_status(job.cs, EXPIRED, CUSTOM_STATUS_LIMIT)
  redis.call('HSET', records_key, id, pack_record(job))
  redis.call('ZADD', failed_key, now, id)
  redis.call('ZREM', index_key, id)
  redis.call('INCR', count_key)
  if job.gr then
    leave_group(rules, job.gr, now)
  end
  if job.dk then
    local dedup_records_key, dedup_runs_key = dedup_end_keys(rules)
    forget_keys(dedup_records_key, dedup_runs_key, {id}, {job.dk}, {job.ca}, now)
  end
  return true
end
