-- A batch of candidates for a body-filtered scan, newest run_after first (the order of
-- scan_jobs.sql, with the dedup and group keys and the expiry as there): as filter_candidates.sql, before the
-- keyset position (:before_run_after, :before_id). Start with (:run_after_le, 2^63-1), which
-- leaves out only a local id of 2^63-1, one AUTOINCREMENT never hands out.
-- Params: :queue, :priority, :state, :also_state, :run_after_gt, :run_after_le, :before_run_after,
-- :before_id, :limit.
SELECT jobs.priority, jobs.local_id AS id, max(jobs.state, 0), jobs.attempts_allowed, jobs.attempts_remaining,
       jobs.custom_status, jobs.created_at_ms, jobs.run_after_ms AS run_after_ms, jobs.updated_at_ms,
       jobs.claim_descriptor, dedup_keys.dedup_key, group_jobs.group_key, jobs.expire_at_ms, jobs.body
  FROM jobs
  LEFT JOIN dedup_keys ON dedup_keys.local_id = jobs.local_id
                      AND dedup_keys.queue = jobs.queue AND dedup_keys.priority = jobs.priority
  LEFT JOIN group_jobs ON group_jobs.local_id = jobs.local_id
 WHERE jobs.queue = :queue AND jobs.priority = :priority AND jobs.state = :state
   AND (jobs.run_after_ms, jobs.local_id) < (:before_run_after, :before_id) AND jobs.run_after_ms > :run_after_gt
UNION ALL
SELECT jobs.priority, jobs.local_id, max(jobs.state, 0), jobs.attempts_allowed, jobs.attempts_remaining,
       jobs.custom_status, jobs.created_at_ms, jobs.run_after_ms, jobs.updated_at_ms,
       jobs.claim_descriptor, dedup_keys.dedup_key, group_jobs.group_key, jobs.expire_at_ms, jobs.body
  FROM jobs
  LEFT JOIN dedup_keys ON dedup_keys.local_id = jobs.local_id
                      AND dedup_keys.queue = jobs.queue AND dedup_keys.priority = jobs.priority
  LEFT JOIN group_jobs ON group_jobs.local_id = jobs.local_id
 WHERE jobs.queue = :queue AND jobs.priority = :priority AND jobs.state = :also_state
   AND (jobs.run_after_ms, jobs.local_id) < (:before_run_after, :before_id) AND jobs.run_after_ms > :run_after_gt
 ORDER BY run_after_ms DESC, id DESC
 LIMIT :limit
