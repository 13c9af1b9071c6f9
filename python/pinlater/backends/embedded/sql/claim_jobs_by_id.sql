-- Claim chosen PENDING jobs of one priority (dequeue_jobs.sql's or dequeue_candidates.sql's, in
-- the same transaction). The unary + keeps SQLite probing each id.
-- Params: :queue, :priority, :ids (JSON array of local ids), :claim, :now_ms.
-- Returns the claimed rows, as dequeue_jobs.sql.
UPDATE jobs
   SET state = 1, claim_descriptor = :claim, updated_at_ms = :now_ms
 WHERE local_id IN (SELECT value FROM json_each(:ids))
   AND +queue = :queue AND +priority = :priority AND +state = 0
RETURNING local_id, body, attempts_allowed, attempts_remaining, created_at_ms, updated_at_ms, run_after_ms
