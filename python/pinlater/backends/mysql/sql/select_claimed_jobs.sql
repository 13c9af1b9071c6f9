-- The jobs that dequeue_jobs.sql just claimed, found through the claim_descriptor index.
-- {table}: the priority's jobs table. %s: claim descriptor.
-- Returns: local_id, body, attempts_allowed, attempts_remaining, created_at, updated_at,
-- run_after. The caller puts the rows in claim order, by (run_after, local_id): an ORDER BY
-- here would cost the server a sort of the rows and a second read of each by its position
-- (the rows hold a BLOB, so the sort keeps row positions only).
SELECT local_id, body, attempts_allowed, attempts_remaining, created_at, updated_at, run_after
  FROM {table}
 WHERE claim_descriptor = %s AND state = 1
