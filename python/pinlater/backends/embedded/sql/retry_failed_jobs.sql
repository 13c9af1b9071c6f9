-- Move up to :limit FAILED jobs of one priority back to PENDING with :attempts remaining, as
-- the original did (attempts_allowed is left as it was), without an expiry (an operator who puts
-- a job back wants it run).
-- Returns each job's id and group (a grouped job joins its group again, see groups.py).
-- Params: :queue, :priority, :attempts, :run_after_ms, :limit, :now_ms.
UPDATE jobs
   SET state = 0, attempts_remaining = :attempts, run_after_ms = :run_after_ms,
       claim_descriptor = NULL, updated_at_ms = :now_ms, expire_at_ms = NULL
 WHERE local_id IN (SELECT local_id FROM jobs
                     WHERE queue = :queue AND priority = :priority AND state = 3
                     ORDER BY run_after_ms, local_id
                     LIMIT :limit)
RETURNING local_id, (SELECT group_key FROM group_jobs WHERE group_jobs.local_id = jobs.local_id)
