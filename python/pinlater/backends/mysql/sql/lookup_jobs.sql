-- Jobs of one priority by local id.
-- {table}: the priority's jobs table. {ids}: one %s per local id.
-- %s: include the body (1 or 0), then the ids.
-- Returns: local_id, state, attempts_allowed, attempts_remaining, custom_status, created_at,
-- run_after, updated_at, claim_descriptor, expire_at, body (NULL unless asked for).
SELECT local_id, state, attempts_allowed, attempts_remaining, custom_status, created_at,
       run_after, updated_at, claim_descriptor, expire_at, CASE WHEN %s = 1 THEN body END
  FROM {table}
 WHERE local_id IN ({ids})
