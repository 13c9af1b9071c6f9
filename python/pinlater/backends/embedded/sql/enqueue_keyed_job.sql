-- Insert one job of a keyed enqueue (dedup key and/or group): as enqueue_jobs.sql, with its
-- state: 0 PENDING, or -1 WAITING behind its group's active jobs (its group: group_job_record.sql).
-- Params: :queue, :priority, :state, :attempts, :custom_status (already truncated), :now_ms,
-- :run_after_ms, :body, :expire_at_ms (NULL: none). Returns: local_id.
INSERT INTO jobs (queue, priority, state, claim_descriptor, attempts_allowed, attempts_remaining,
                  custom_status, created_at_ms, updated_at_ms, run_after_ms, body, expire_at_ms)
VALUES (:queue, :priority, :state, NULL, :attempts, :attempts,
        :custom_status, :now_ms, :now_ms, :run_after_ms, :body, :expire_at_ms)
RETURNING local_id
