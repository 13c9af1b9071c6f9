-- Reserve up to :limit eligible PENDING jobs of one priority for the dequeue broker: the same
-- jobs dequeue_jobs.sql would claim, left PENDING with attempts unchanged. A reserved job has
-- claim_descriptor = the reservation (it starts with :reserved_prefix) and updated_at_ms = the
-- reservation's expiry; the reservation is live while updated_at_ms > now, and a lapsed one is
-- simply ignored (and overwritten by the next claim or reservation). A job that expires before
-- the reservation would lapse is not reserved (see ShardStore.reserve_jobs).
-- Params: :queue, :priority, :limit, :reservation, :until_ms, :now_ms, :reserved_prefix.
-- Returns the reserved rows (unordered: the caller sorts by run_after, id).
UPDATE jobs
   SET claim_descriptor = :reservation, updated_at_ms = :until_ms
 WHERE local_id IN (SELECT local_id FROM jobs
                     WHERE queue = :queue AND priority = :priority AND state = 0 AND run_after_ms <= :now_ms
                       AND NOT (claim_descriptor IS NOT NULL AND updated_at_ms > :now_ms
                                AND substr(claim_descriptor, 1, length(:reserved_prefix)) = :reserved_prefix)
                       AND (expire_at_ms IS NULL OR expire_at_ms > :until_ms)
                     ORDER BY run_after_ms, local_id
                     LIMIT :limit)
RETURNING local_id, body, attempts_allowed, attempts_remaining, created_at_ms, updated_at_ms, run_after_ms
