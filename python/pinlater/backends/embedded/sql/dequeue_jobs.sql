-- The jobs a dequeue claims: up to :limit eligible PENDING jobs of one priority, oldest run_after
-- first, skipping jobs under a live reservation (claim descriptor starting with :reserved_prefix
-- and updated_at, the reservation's expiry, still after now: see reserve_jobs.sql), and expired
-- jobs (an expire_at_ms not after now, read from the row, already read for its claim
-- descriptor). With their bodies' lengths, not the bodies: the claim takes the first of them
-- that fit its byte budget (store.py ``_fitting``), then claims them by id (claim_jobs_by_id.sql)
-- in the same transaction, its write lock held.
-- Params: :queue, :priority, :limit, :now_ms, :reserved_prefix.
-- Returns: local_id, length(body), oldest run_after first, then id.
-- The Rust writer reads and claims as these do (dequeue_rows.sql, dequeue_claim_rows.sql): keep
-- them alike.
SELECT local_id, length(body)
  FROM jobs
 WHERE queue = :queue AND priority = :priority AND state = 0 AND run_after_ms <= :now_ms
   AND NOT (claim_descriptor IS NOT NULL AND updated_at_ms > :now_ms
            AND substr(claim_descriptor, 1, length(:reserved_prefix)) = :reserved_prefix)
   AND (expire_at_ms IS NULL OR expire_at_ms > :now_ms)
 ORDER BY run_after_ms, local_id
 LIMIT :limit
