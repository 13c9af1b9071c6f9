-- enqueue_keyed_job.sql for the hot path's writer, which repeats its VALUES row into multi-row
-- INSERTs (rust/store/sqlite_inserts.rs) and reads the ids as enqueue_jobs.sql's: each job with
-- its state, 0 PENDING or -1 WAITING behind its group's active jobs.
-- Params: :queue, :priority, :state, :attempts, :custom_status (already truncated), :now_ms,
-- :run_after_ms, :body, :expire_at_ms (NULL: none).
INSERT OR FAIL INTO jobs (queue, priority, state, claim_descriptor, attempts_allowed, attempts_remaining,
                  custom_status, created_at_ms, updated_at_ms, run_after_ms, body, expire_at_ms)
VALUES (:queue, :priority, :state, NULL, :attempts, :attempts,
        :custom_status, :now_ms, :now_ms, :run_after_ms, :body, :expire_at_ms)
