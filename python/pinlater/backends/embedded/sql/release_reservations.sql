-- Release live reservations of one priority held by :reservation: the jobs stay PENDING and
-- become dequeuable at once (claim cleared, updated now).
-- The unary + keeps SQLite probing each id instead of scanning the queue's index.
-- Params: :queue, :priority, :ids (JSON array of local ids), :reservation, :now_ms.
UPDATE jobs
   SET claim_descriptor = NULL, updated_at_ms = :now_ms
 WHERE local_id IN (SELECT value FROM json_each(:ids))
   AND +queue = :queue AND +priority = :priority AND +state = 0
   AND claim_descriptor = :reservation AND updated_at_ms > :now_ms
