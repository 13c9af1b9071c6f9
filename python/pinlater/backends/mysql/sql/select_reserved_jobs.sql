-- The jobs held under a live reservation, found through the claim_descriptor index.
-- {table}: the priority's jobs table. %s: reservation, now.
-- Returns: local_id, body, attempts_allowed, attempts_remaining, created_at, updated_at.
SELECT local_id, body, attempts_allowed, attempts_remaining, created_at, updated_at
  FROM {table}
 WHERE claim_descriptor = %s AND state = 0 AND updated_at > %s
 ORDER BY run_after, local_id
