-- Treat the jobs of :ids (timed_out_candidates.sql's, read before) that are still claimed (last
-- updated) before :claimed_before_ms as failed without a retry delay: PENDING now with one
-- attempt less, or FAILED when that was the last attempt. One rowid probe per id: a job acked,
-- checkpointed or deleted since the read is left alone.
-- Returns each job's group and new state (a grouped job that became FAILED left its group).
-- A cancelled job (attempts_remaining 0) ends FAILED with ' cancelled' appended (base.ended_status);
-- on a queue with expiring jobs, resurrect_expire.sql first expires the ones past their expiry.
-- Params: :queue, :priority, :claimed_before_ms, :ids (a JSON array of local ids), :status_limit, :now_ms.
UPDATE jobs
   SET state = CASE WHEN attempts_remaining > 1 THEN 0 ELSE 3 END,
       run_after_ms = CASE WHEN attempts_remaining > 1 THEN :now_ms ELSE run_after_ms END,
       claim_descriptor = CASE WHEN attempts_remaining > 1 THEN NULL ELSE claim_descriptor END,
       attempts_remaining = CASE WHEN attempts_remaining > 1 THEN attempts_remaining - 1 ELSE 0 END,
       custom_status = CASE WHEN attempts_remaining > 0 THEN custom_status
                            WHEN custom_status = '' THEN 'cancelled'
                            ELSE substr(custom_status, 1, max(0, :status_limit - 10)) || ' cancelled' END,
       updated_at_ms = :now_ms
 WHERE local_id IN (SELECT value FROM json_each(:ids))
   AND +queue = :queue AND +priority = :priority AND +state = 1 AND +updated_at_ms < :claimed_before_ms
RETURNING (SELECT group_key FROM group_jobs WHERE group_jobs.local_id = jobs.local_id), state
