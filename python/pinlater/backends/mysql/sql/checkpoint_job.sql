-- Checkpoint one IN_PROGRESS job whose claim still contains the caller's source (a stale
-- checkpoint from a worker whose claim timed out and was taken again changes nothing).
-- NULL parameters keep the column: body, attempts, prepended status.
-- A cancelled job (attempts_remaining 0: cancel_in_progress_jobs.sql) keeps 0 (the attempts
-- given set attempts_allowed only), and one moved to PENDING ends FAILED instead, the cancel
-- word after its status (base.ended_status). The CASEs read attempts_remaining before it is
-- assigned (single-table UPDATE assigns left to right).
-- {table}: the priority's jobs table.
-- %s: move to PENDING (1 or 0), state (0 to move to PENDING, else 1), run_after, updated_at (now),
--     new body; move (1 or 0), status to prepend, the cancel word, status to prepend, the limit
--     less the word and a space, the cancel word; status to prepend (twice), custom status
--     limit; attempts allowed, attempts remaining (the same value), clear claim (1 or 0),
--     local_id, source.
UPDATE {table}
   SET state = CASE WHEN %s = 1 AND attempts_remaining = 0 THEN 3 ELSE %s END,
       run_after = %s,
       updated_at = %s,
       body = COALESCE(%s, body),
       custom_status = CASE
         WHEN attempts_remaining = 0 AND %s = 1 THEN
              CASE WHEN CONCAT(COALESCE(%s, ''), COALESCE(custom_status, '')) = '' THEN %s
                   ELSE CONCAT(SUBSTRING(CONCAT(COALESCE(%s, ''), COALESCE(custom_status, '')), 1, %s), ' ', %s)
              END
         WHEN %s IS NULL THEN custom_status
         ELSE SUBSTRING(CONCAT(%s, COALESCE(custom_status, '')), 1, %s) END,
       attempts_allowed = COALESCE(%s, attempts_allowed),
       attempts_remaining = CASE WHEN attempts_remaining = 0 THEN 0 ELSE COALESCE(%s, attempts_remaining) END,
       claim_descriptor = CASE WHEN %s = 1 THEN NULL ELSE claim_descriptor END
 WHERE local_id = %s AND state = 1 AND LOCATE(%s, claim_descriptor) > 0
