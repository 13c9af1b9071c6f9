-- The jobs dequeue_jobs.sql would claim, with their groups, for a queue whose groups are rate
-- limited (groupJobsPerSecond): the caller takes a token per grouped job before claiming it
-- (claim_jobs_by_id.sql, reserve_jobs_by_id.sql) and defers the others (defer_job.sql).
-- Params: :queue, :priority, :limit, :now_ms, :reserved_prefix.
-- Returns: local_id, group_key, length(body) (the byte budget's: store.py ``_take_by_rate``).
SELECT local_id, (SELECT group_key FROM group_jobs WHERE group_jobs.local_id = jobs.local_id), length(body)
  FROM jobs
 WHERE queue = :queue AND priority = :priority AND state = 0 AND run_after_ms <= :now_ms
   AND NOT (claim_descriptor IS NOT NULL AND updated_at_ms > :now_ms
            AND substr(claim_descriptor, 1, length(:reserved_prefix)) = :reserved_prefix)
   AND (expire_at_ms IS NULL OR expire_at_ms > :now_ms)
 ORDER BY run_after_ms, local_id
 LIMIT :limit
