-- Jobs of one queue by local id; the caller drops rows whose priority it did not ask for.
-- CROSS JOIN keeps SQLite from scanning the queue's index instead of probing each id.
-- The job's dedup key comes from the key record naming it, if any (one probe of dedup_keys_by_job).
-- WAITING (-1) reads as PENDING; the group key comes from group_jobs (one probe by local id).
-- Params: :queue, :ids (a JSON array of local ids), :include_body (0/1).
SELECT jobs.priority, jobs.local_id, max(jobs.state, 0), jobs.attempts_allowed, jobs.attempts_remaining,
       jobs.custom_status, jobs.created_at_ms, jobs.run_after_ms, jobs.updated_at_ms, jobs.claim_descriptor,
       dedup_keys.dedup_key, group_jobs.group_key, jobs.expire_at_ms, CASE WHEN :include_body THEN jobs.body END AS body
  FROM json_each(:ids) AS wanted
 CROSS JOIN jobs ON jobs.local_id = wanted.value
  LEFT JOIN dedup_keys ON dedup_keys.local_id = jobs.local_id
                      AND dedup_keys.queue = jobs.queue AND dedup_keys.priority = jobs.priority
  LEFT JOIN group_jobs ON group_jobs.local_id = jobs.local_id
 WHERE jobs.queue = :queue
