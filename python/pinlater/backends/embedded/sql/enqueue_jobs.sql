-- Insert one PENDING job (Python runs it with executemany, so a batch is one transaction; the
-- hot path's writer repeats its VALUES row into multi-row INSERTs: rust/store/sqlite_inserts.rs).
-- Params: :queue, :priority, :attempts, :custom_status (already truncated), :now_ms,
-- :run_after_ms, :body.
INSERT OR FAIL INTO jobs (queue, priority, state, claim_descriptor, attempts_allowed, attempts_remaining,
                  custom_status, created_at_ms, updated_at_ms, run_after_ms, body)
VALUES (:queue, :priority, 0, NULL, :attempts, :attempts,
        :custom_status, :now_ms, :now_ms, :run_after_ms, :body)
