-- Up to :limit jobs of one state and priority, newest run_after first, without bodies.
-- Each with its dedup key, as lookup_jobs.sql, and its group key. PENDING includes the WAITING
-- jobs (:also_state -1, read as PENDING; -2 for other states, matching nothing): two ranges of
-- jobs_by_run_after merged in order (MERGE (UNION ALL)), so :limit still bounds the walk.
-- The upper end is the keyset position (:before_run_after, :before_id), exclusive, the range's one
-- upper bound (a second one, run_after <= x, would be the one SQLite seeks to, and a page deep into
-- the queue would walk every row before it): a page reads about :limit rows wherever it starts.
-- The first page passes (run_after_le, 2^63-1), which leaves out only a local id AUTOINCREMENT
-- never hands out; a later one the ScanCursor, or that if it is lower.
-- Params: :queue, :priority, :state, :also_state, :run_after_gt, :before_run_after, :before_id, :limit.
SELECT jobs.priority, jobs.local_id AS id, max(jobs.state, 0), jobs.attempts_allowed, jobs.attempts_remaining,
       jobs.custom_status, jobs.created_at_ms, jobs.run_after_ms AS run_after_ms, jobs.updated_at_ms,
       jobs.claim_descriptor, dedup_keys.dedup_key, group_jobs.group_key, jobs.expire_at_ms
  FROM jobs
  LEFT JOIN dedup_keys ON dedup_keys.local_id = jobs.local_id
                      AND dedup_keys.queue = jobs.queue AND dedup_keys.priority = jobs.priority
  LEFT JOIN group_jobs ON group_jobs.local_id = jobs.local_id
 WHERE jobs.queue = :queue AND jobs.priority = :priority AND jobs.state = :state
   AND jobs.run_after_ms > :run_after_gt AND (jobs.run_after_ms, jobs.local_id) < (:before_run_after, :before_id)
UNION ALL
SELECT jobs.priority, jobs.local_id, max(jobs.state, 0), jobs.attempts_allowed, jobs.attempts_remaining,
       jobs.custom_status, jobs.created_at_ms, jobs.run_after_ms, jobs.updated_at_ms,
       jobs.claim_descriptor, dedup_keys.dedup_key, group_jobs.group_key, jobs.expire_at_ms
  FROM jobs
  LEFT JOIN dedup_keys ON dedup_keys.local_id = jobs.local_id
                      AND dedup_keys.queue = jobs.queue AND dedup_keys.priority = jobs.priority
  LEFT JOIN group_jobs ON group_jobs.local_id = jobs.local_id
 WHERE jobs.queue = :queue AND jobs.priority = :priority AND jobs.state = :also_state
   AND jobs.run_after_ms > :run_after_gt AND (jobs.run_after_ms, jobs.local_id) < (:before_run_after, :before_id)
 ORDER BY run_after_ms DESC, id DESC
 LIMIT :limit
