-- The records (no body) of some jobs of one priority, by local id: a body-filtered scan's matches
-- (body_filtered.py), read in the transaction that listed them.
-- {table}: the priority's jobs table; {ids}: the local ids.
-- Returns: as scan_jobs.sql.
SELECT local_id, state, attempts_allowed, attempts_remaining, custom_status, created_at,
       run_after, updated_at, claim_descriptor, expire_at
  FROM {table}
 WHERE local_id IN ({ids})
