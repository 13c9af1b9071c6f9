-- Claim reserved jobs of one priority, as dequeue_jobs.sql claims, only where the job is still
-- PENDING under this live reservation (see reserve_jobs.sql) and not expired.
-- The unary + keeps SQLite probing each id instead of scanning the queue's index.
-- Params: :queue, :priority, :ids (JSON array of local ids), :reservation, :claim, :now_ms.
-- Returns the local ids claimed.
UPDATE jobs
   SET state = 1, claim_descriptor = :claim, updated_at_ms = :now_ms
 WHERE local_id IN (SELECT value FROM json_each(:ids))
   AND +queue = :queue AND +priority = :priority AND +state = 0
   AND claim_descriptor = :reservation AND updated_at_ms > :now_ms
   AND (expire_at_ms IS NULL OR expire_at_ms > :now_ms)
RETURNING local_id
