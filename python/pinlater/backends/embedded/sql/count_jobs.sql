-- Count jobs of one state (:also_state: -1, WAITING, for PENDING; else -2, none) and priority with :run_after_gt < run_after <= :run_after_le, stopping
-- at :limit (-1: no cap). The bounds come from JobFilter.future, so the count stays a range scan
-- of jobs_by_run_after. Body filters never come here (body_filtered.py matches outside SQLite).
-- Params: :queue, :priority, :state, :also_state, :run_after_gt, :run_after_le, :limit.
SELECT count(*) FROM (
    SELECT 1 FROM jobs
     WHERE queue = :queue AND priority = :priority AND state IN (:state, :also_state)
       AND run_after_ms > :run_after_gt AND run_after_ms <= :run_after_le
     LIMIT :limit)
