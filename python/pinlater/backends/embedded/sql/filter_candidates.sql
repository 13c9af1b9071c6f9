-- A batch of candidates for a body filter (count, delete), oldest run_after first: jobs of one
-- state and priority with :run_after_gt < run_after <= :run_after_le, after the keyset position
-- (:after_run_after, :after_id): id, run_after and body (matched outside SQLite, see body_filtered.py).
-- PENDING includes the WAITING jobs (:also_state, as count_jobs.sql), the two ranges merged in order.
-- Start with (:run_after_gt, 2^63-1): the row value bound is then exactly run_after > gt.
-- Params: :queue, :priority, :state, :also_state, :run_after_gt, :run_after_le, :after_run_after,
-- :after_id, :limit.
SELECT local_id, run_after_ms, body
  FROM jobs
 WHERE queue = :queue AND priority = :priority AND state = :state
   AND (run_after_ms, local_id) > (:after_run_after, :after_id) AND run_after_ms <= :run_after_le
UNION ALL
SELECT local_id, run_after_ms, body
  FROM jobs
 WHERE queue = :queue AND priority = :priority AND state = :also_state
   AND (run_after_ms, local_id) > (:after_run_after, :after_id) AND run_after_ms <= :run_after_le
 ORDER BY run_after_ms, local_id
 LIMIT :limit
