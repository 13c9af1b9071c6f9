-- A dry-run dequeue: the jobs dequeue_jobs.sql would claim, changing nothing.
-- {table}: the priority's jobs table. %s: now, now (ms, expiry), limit.
-- Returns: local_id, body, attempts_allowed, attempts_remaining, created_at, updated_at.
SELECT local_id, body, attempts_allowed, attempts_remaining, created_at, updated_at
  FROM {table}
 WHERE state = 0 AND run_after <= %s
   AND (expire_at IS NULL OR expire_at > %s)
 ORDER BY run_after, local_id
 LIMIT %s
