-- Treat up to :limit jobs claimed (last updated) before :claimed_before_ms as failed without a
-- retry delay: PENDING now with one attempt less, or FAILED when that was the last attempt.
-- The IN_PROGRESS jobs of the queue and priority are read along jobs_by_run_after (no index
-- orders them by updated_at: see schema.sql), so a sweep costs one row read per job in progress.
-- Returns each job's group and new state (a grouped job that became FAILED left its group).
-- A cancelled job (attempts_remaining 0) ends FAILED with ' cancelled' appended (base.ended_status);
-- on a queue with expiring jobs, resurrect_expire.sql first expires the ones past their expiry.
-- Params: :queue, :priority, :claimed_before_ms, :limit, :status_limit, :now_ms.
UPDATE jobs
   SET state = CASE WHEN attempts_remaining > 1 THEN 0 ELSE 3 END,
       run_after_ms = CASE WHEN attempts_remaining > 1 THEN :now_ms ELSE run_after_ms END,
       claim_descriptor = CASE WHEN attempts_remaining > 1 THEN NULL ELSE claim_descriptor END,
       attempts_remaining = CASE WHEN attempts_remaining > 1 THEN attempts_remaining - 1 ELSE 0 END,
       custom_status = CASE WHEN attempts_remaining > 0 THEN custom_status
                            WHEN custom_status = '' THEN 'cancelled'
                            ELSE substr(custom_status, 1, max(0, :status_limit - 10)) || ' cancelled' END,
       updated_at_ms = :now_ms
 WHERE local_id IN (SELECT local_id FROM jobs
                     WHERE queue = :queue AND priority = :priority AND state = 1
                       AND updated_at_ms < :claimed_before_ms
                     ORDER BY updated_at_ms
                     LIMIT :limit)
RETURNING (SELECT group_key FROM group_jobs WHERE group_jobs.local_id = jobs.local_id), state
