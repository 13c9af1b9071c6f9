-- Reserve chosen PENDING jobs of one priority (reserve_jobs.sql's or dequeue_candidates.sql's,
-- in the same transaction): see reserve_jobs.sql. The unary + keeps SQLite probing each id.
-- Params: :queue, :priority, :ids (JSON array of local ids), :reservation, :until_ms.
-- Returns the reserved rows, as reserve_jobs.sql.
UPDATE jobs
   SET claim_descriptor = :reservation, updated_at_ms = :until_ms
 WHERE local_id IN (SELECT value FROM json_each(:ids))
   AND +queue = :queue AND +priority = :priority AND +state = 0
   AND (expire_at_ms IS NULL OR expire_at_ms > :until_ms)
RETURNING local_id, body, attempts_allowed, attempts_remaining, created_at_ms, updated_at_ms, run_after_ms
