-- A batch of candidates for a body-filtered scan, newest run_after first (the order of
-- scan_jobs.sql): as filter_candidates.sql, before the keyset position (:before_run_after,
-- :before_id). Start with (:run_after_le, 2^63-1), which leaves out only a local id of 2^63-1,
-- one AUTOINCREMENT never hands out.
-- Params: :queue, :priority, :state, :run_after_gt, :run_after_le, :before_run_after, :before_id, :limit.
SELECT priority, local_id, state, attempts_allowed, attempts_remaining, custom_status,
       created_at_ms, run_after_ms, updated_at_ms, claim_descriptor, body
  FROM jobs
 WHERE queue = :queue AND priority = :priority AND state = :state
   AND (run_after_ms, local_id) < (:before_run_after, :before_id) AND run_after_ms > :run_after_gt
 ORDER BY run_after_ms DESC, local_id DESC
 LIMIT :limit
