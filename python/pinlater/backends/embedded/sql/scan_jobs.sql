-- Up to :limit jobs of one state and priority, newest run_after first, without bodies.
-- Params: as count_jobs.sql.
SELECT priority, local_id, state, attempts_allowed, attempts_remaining, custom_status,
       created_at_ms, run_after_ms, updated_at_ms, claim_descriptor
  FROM jobs
 WHERE queue = :queue AND priority = :priority AND state = :state
   AND run_after_ms > :run_after_gt AND run_after_ms <= :run_after_le
 ORDER BY run_after_ms DESC, local_id DESC
 LIMIT :limit
