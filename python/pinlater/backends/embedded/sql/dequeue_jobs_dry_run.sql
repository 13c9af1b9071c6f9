-- The jobs dequeue_jobs.sql would claim (expired ones left out), without claiming them.
-- Params: :queue, :priority, :limit, :now_ms.
SELECT local_id, body, attempts_allowed, attempts_remaining, created_at_ms, updated_at_ms, run_after_ms
  FROM jobs
 WHERE queue = :queue AND priority = :priority AND state = 0 AND run_after_ms <= :now_ms
   AND (expire_at_ms IS NULL OR expire_at_ms > :now_ms)
 ORDER BY run_after_ms, local_id
 LIMIT :limit
