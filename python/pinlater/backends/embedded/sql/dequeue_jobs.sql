-- Claim up to :limit eligible PENDING jobs of one priority, oldest run_after first, skipping
-- jobs under a live reservation (claim descriptor starting with :reserved_prefix and
-- updated_at, the reservation's expiry, still after now: see reserve_jobs.sql), and expired jobs
-- (an expire_at_ms not after now, read from the row, already read for its claim descriptor).
-- Params: :queue, :priority, :limit, :claim, :now_ms, :reserved_prefix.
-- Returns the claimed rows (RETURNING order is unspecified: the caller sorts by run_after, id).
-- The Rust writer claims as this does in two statements (dequeue_rows.sql, dequeue_claim_rows.sql):
-- keep them alike.
UPDATE jobs
   SET state = 1, claim_descriptor = :claim, updated_at_ms = :now_ms
 WHERE local_id IN (SELECT local_id FROM jobs
                     WHERE queue = :queue AND priority = :priority AND state = 0 AND run_after_ms <= :now_ms
                       AND NOT (claim_descriptor IS NOT NULL AND updated_at_ms > :now_ms
                                AND substr(claim_descriptor, 1, length(:reserved_prefix)) = :reserved_prefix)
                       AND (expire_at_ms IS NULL OR expire_at_ms > :now_ms)
                     ORDER BY run_after_ms, local_id
                     LIMIT :limit)
RETURNING local_id, body, attempts_allowed, attempts_remaining, created_at_ms, updated_at_ms, run_after_ms
