-- Fail IN_PROGRESS jobs: with attempts left (> 1) back to PENDING at a new run_after with the
-- claim cleared, else FAILED with none left. One statement per (priority, appended status,
-- retry delay) group. Jobs no longer IN_PROGRESS are left alone. A cancelled job
-- (attempts_remaining 0: cancel_in_progress_jobs.sql) ends FAILED with the cancel word after its
-- appended status (base.ended_status). A retry past the job's expiry was expired before this
-- statement, in its transaction (ack_expire_jobs.sql).
-- Single-table UPDATE assigns left to right, each assignment seeing those before it, so
-- attempts_remaining, which the CASEs read, is assigned last.
-- {table}: the priority's jobs table. {ids}: one %s per local id.
-- %s: run_after for retries, status to append, custom status limit, then for a cancelled job:
--     status to append, the cancel word, status to append, the limit less the word and a space,
--     the cancel word; updated_at (now), the ids.
UPDATE {table}
   SET state = CASE WHEN attempts_remaining > 1 THEN 0 ELSE 3 END,
       run_after = CASE WHEN attempts_remaining > 1 THEN %s ELSE run_after END,
       claim_descriptor = CASE WHEN attempts_remaining > 1 THEN NULL ELSE claim_descriptor END,
       custom_status = CASE
         WHEN attempts_remaining <> 0 THEN SUBSTRING(CONCAT(COALESCE(custom_status, ''), %s), 1, %s)
         WHEN CONCAT(COALESCE(custom_status, ''), %s) = '' THEN %s
         ELSE CONCAT(SUBSTRING(CONCAT(COALESCE(custom_status, ''), %s), 1, %s), ' ', %s) END,
       updated_at = %s,
       attempts_remaining = GREATEST(attempts_remaining - 1, 0)
 WHERE local_id IN ({ids}) AND state = 1
