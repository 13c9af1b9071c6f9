-- The jobs dequeue_jobs.sql would claim, read for the Rust writer, which then claims them by id
-- (dequeue_claim_rows.sql) in the same transaction: two statements, without dequeue_jobs.sql's
-- RETURNING, which stores its rows (bodies too) in a temporary table before handing them out
-- (the two statements cost the writer about 0.6 us a job less). The WHERE is dequeue_jobs.sql's,
-- which this must match; updated_at_ms is the value the claim sets.
-- Params: :queue, :priority, :limit, :now_ms, :reserved_prefix.
-- Returns: local_id, body, attempts_allowed, attempts_remaining, created_at_ms, updated_at_ms,
-- oldest run_after first, then id.
SELECT local_id, body, attempts_allowed, attempts_remaining, created_at_ms, :now_ms
  FROM jobs
 WHERE queue = :queue AND priority = :priority AND state = 0 AND run_after_ms <= :now_ms
   AND NOT (claim_descriptor IS NOT NULL AND updated_at_ms > :now_ms
            AND substr(claim_descriptor, 1, length(:reserved_prefix)) = :reserved_prefix)
   AND (expire_at_ms IS NULL OR expire_at_ms > :now_ms)
 ORDER BY run_after_ms, local_id
 LIMIT :limit
