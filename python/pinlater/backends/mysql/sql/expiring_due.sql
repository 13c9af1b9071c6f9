-- The queue's index rows due (expire_at <= now), soonest first: expire_jobs' candidates.
-- {table}: the queue's expiring table. %s: now (ms), limit.
-- Returns: expire_at, priority, local_id.
SELECT expire_at, priority, local_id FROM {table}
 WHERE expire_at <= %s
 ORDER BY expire_at, priority, local_id
 LIMIT %s
