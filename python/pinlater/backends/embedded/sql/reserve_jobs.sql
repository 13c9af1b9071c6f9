-- The jobs a reservation for the dequeue broker takes: up to :limit eligible PENDING jobs of one
-- priority, those dequeue_jobs.sql would claim but for a job that expires before the
-- reservation would lapse (see ShardStore.reserve_jobs), with their bodies' lengths; the first
-- of them that fit the byte budget are then reserved by id (reserve_jobs_by_id.sql) in the same
-- transaction. A reserved job stays PENDING with attempts unchanged; it has claim_descriptor =
-- the reservation (it starts with :reserved_prefix) and updated_at_ms = the reservation's
-- expiry; the reservation is live while updated_at_ms > now, and a lapsed one is simply ignored
-- (and overwritten by the next claim or reservation).
-- Params: :queue, :priority, :limit, :until_ms, :now_ms, :reserved_prefix.
-- Returns: local_id, length(body), oldest run_after first, then id.
SELECT local_id, length(body)
  FROM jobs
 WHERE queue = :queue AND priority = :priority AND state = 0 AND run_after_ms <= :now_ms
   AND NOT (claim_descriptor IS NOT NULL AND updated_at_ms > :now_ms
            AND substr(claim_descriptor, 1, length(:reserved_prefix)) = :reserved_prefix)
   AND (expire_at_ms IS NULL OR expire_at_ms > :until_ms)
 ORDER BY run_after_ms, local_id
 LIMIT :limit
