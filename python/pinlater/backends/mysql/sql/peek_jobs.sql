-- A dry-run dequeue: the jobs dequeue_jobs.sql would claim, changing nothing.
-- {table}: the priority's jobs table. %s: now, limit.
-- Returns: local_id, body, attempts_allowed, attempts_remaining, created_at, updated_at.
SELECT local_id, body, attempts_allowed, attempts_remaining, created_at, updated_at
  FROM {table}
 WHERE state = 0 AND run_after <= %s
 ORDER BY run_after, local_id
 LIMIT %s
