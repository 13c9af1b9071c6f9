-- Claim the PENDING jobs dequeue_rows.sql read (in the same transaction), as dequeue_jobs.sql
-- claims them. The unary + keeps SQLite probing each id.
-- Params: :queue, :priority, :ids (JSON array of local ids), :claim, :now_ms.
UPDATE OR FAIL jobs
   SET state = 1, claim_descriptor = :claim, updated_at_ms = :now_ms
 WHERE local_id IN (SELECT value FROM json_each(:ids))
   AND +queue = :queue AND +priority = :priority AND +state = 0
