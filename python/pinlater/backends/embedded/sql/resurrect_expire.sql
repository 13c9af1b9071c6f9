-- Expire the jobs of :ids (timed_out_candidates.sql's) still claimed (last updated) before
-- :claimed_before_ms that would be retried (attempts left) but are past their expiry: FAILED, no
-- attempt left, claim cleared, ' expired' appended (base.ended_status). Run before
-- resurrect_timed_out_jobs.sql on a queue with expiring jobs, in the same transaction, which then
-- finds them no longer IN_PROGRESS.
-- Params: :queue, :priority, :claimed_before_ms, :ids (a JSON array of local ids), :status_limit, :now_ms.
-- Returns each expired job's group (NULL: ungrouped): it left its group.
UPDATE jobs
   SET state = 3, attempts_remaining = 0, claim_descriptor = NULL,
       custom_status = CASE WHEN custom_status = '' THEN 'expired'
                            ELSE substr(custom_status, 1, max(0, :status_limit - 8)) || ' expired' END,
       updated_at_ms = :now_ms
 WHERE local_id IN (SELECT value FROM json_each(:ids))
   AND +queue = :queue AND +priority = :priority AND +state = 1 AND +updated_at_ms < :claimed_before_ms
   AND attempts_remaining > 1 AND expire_at_ms <= :now_ms
RETURNING (SELECT group_key FROM group_jobs WHERE group_jobs.local_id = jobs.local_id)
