-- The monitor's claim timeout, for the jobs select_timed_out_jobs.sql picked (and locked): fail
-- without a retry delay, like ack_failed_jobs.sql (attempts_remaining is assigned last for the
-- same reason): with attempts left back to PENDING, run_after now; else FAILED, and a cancelled
-- job (attempts_remaining 0) with the cancel word appended (base.ended_status). Jobs past their
-- expiry were expired first (resurrect_expire_jobs.sql).
-- {table}: the priority's jobs table. {ids}: one %s per local id.
-- %s: run_after for retries (now), the cancel word, the limit less the word and a space, the
--     cancel word, updated_at (now), then the ids.
UPDATE {table}
   SET state = CASE WHEN attempts_remaining > 1 THEN 0 ELSE 3 END,
       run_after = CASE WHEN attempts_remaining > 1 THEN %s ELSE run_after END,
       claim_descriptor = CASE WHEN attempts_remaining > 1 THEN NULL ELSE claim_descriptor END,
       custom_status = CASE
         WHEN attempts_remaining <> 0 THEN custom_status
         WHEN COALESCE(custom_status, '') = '' THEN %s
         ELSE CONCAT(SUBSTRING(custom_status, 1, %s), ' ', %s) END,
       updated_at = %s,
       attempts_remaining = GREATEST(attempts_remaining - 1, 0)
 WHERE state = 1 AND local_id IN ({ids})
