-- Up to :limit jobs of one state and priority, newest run_after first, without bodies.
-- Each with its dedup key, as lookup_jobs.sql. Params: as count_jobs.sql.
SELECT jobs.priority, jobs.local_id, jobs.state, jobs.attempts_allowed, jobs.attempts_remaining,
       jobs.custom_status, jobs.created_at_ms, jobs.run_after_ms, jobs.updated_at_ms, jobs.claim_descriptor,
       dedup_keys.dedup_key
  FROM jobs
  LEFT JOIN dedup_keys ON dedup_keys.local_id = jobs.local_id
                      AND dedup_keys.queue = jobs.queue AND dedup_keys.priority = jobs.priority
 WHERE jobs.queue = :queue AND jobs.priority = :priority AND jobs.state = :state
   AND jobs.run_after_ms > :run_after_gt AND jobs.run_after_ms <= :run_after_le
 ORDER BY jobs.run_after_ms DESC, jobs.local_id DESC
 LIMIT :limit
