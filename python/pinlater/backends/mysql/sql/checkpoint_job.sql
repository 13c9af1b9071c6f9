-- Checkpoint one IN_PROGRESS job whose claim still contains the caller's source (a stale
-- checkpoint from a worker whose claim timed out and was taken again changes nothing).
-- NULL parameters keep the column: body, attempts, prepended status.
-- {table}: the priority's jobs table.
-- %s: state (0 to move to PENDING, else 1), run_after, updated_at (now), new body,
--     attempts allowed, attempts remaining (the same value), status to prepend (twice),
--     custom status limit, clear claim (1 or 0), local_id, source.
UPDATE {table}
   SET state = %s,
       run_after = %s,
       updated_at = %s,
       body = COALESCE(%s, body),
       attempts_allowed = COALESCE(%s, attempts_allowed),
       attempts_remaining = COALESCE(%s, attempts_remaining),
       custom_status = CASE WHEN %s IS NULL THEN custom_status
                            ELSE SUBSTRING(CONCAT(%s, COALESCE(custom_status, '')), 1, %s) END,
       claim_descriptor = CASE WHEN %s = 1 THEN NULL ELSE claim_descriptor END
 WHERE local_id = %s AND state = 1 AND LOCATE(%s, claim_descriptor) > 0
