-- The jobs that dequeue_jobs.sql just claimed, found through the claim_descriptor index.
-- {table}: the priority's jobs table. %s: claim descriptor.
-- Returns: local_id, body, attempts_allowed, attempts_remaining, created_at, updated_at.
SELECT local_id, body, attempts_allowed, attempts_remaining, created_at, updated_at
  FROM {table}
 WHERE claim_descriptor = %s AND state = 1
 ORDER BY run_after, local_id
