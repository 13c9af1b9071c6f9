-- Expire up to :limit PENDING (or WAITING) jobs of a queue, every priority, whose expiry is at or
-- before :now_ms, soonest first, along the partial index jobs_by_expiry (only unfinished jobs with
-- an expiry are in it, so the walk reads due jobs only): FAILED, no attempt left, claim (or
-- reservation) cleared, updated now, ' expired' appended (base.ended_status).
-- Params: :queue, :now_ms, :limit, :status_limit.
-- Returns each job's id, group (NULL: ungrouped) and whether it was waiting in it (NULL, 0 or 1).
UPDATE OR FAIL jobs
   SET state = 3, attempts_remaining = 0, claim_descriptor = NULL,
       custom_status = CASE WHEN custom_status = '' THEN 'expired'
                            ELSE substr(custom_status, 1, max(0, :status_limit - 8)) || ' expired' END,
       updated_at_ms = :now_ms
 WHERE local_id IN (SELECT local_id FROM jobs INDEXED BY jobs_by_expiry
                     WHERE queue = :queue AND expire_at_ms IS NOT NULL AND state <= 0
                       AND expire_at_ms <= :now_ms
                     ORDER BY expire_at_ms
                     LIMIT :limit)
RETURNING local_id,
          (SELECT group_key FROM group_jobs WHERE group_jobs.local_id = jobs.local_id),
          (SELECT waiting FROM group_jobs WHERE group_jobs.local_id = jobs.local_id)
