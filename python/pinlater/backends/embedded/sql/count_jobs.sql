-- Count jobs of one state and priority with :run_after_gt < run_after <= :run_after_le, stopping
-- at :limit (-1: no cap). The bounds come from JobFilter.future, so the count stays a range scan
-- of jobs_by_run_after. Body filters never come here (body_filtered.py matches outside SQLite).
-- Params: :queue, :priority, :state, :run_after_gt, :run_after_le, :limit.
SELECT count(*) FROM (
    SELECT 1 FROM jobs
     WHERE queue = :queue AND priority = :priority AND state = :state
       AND run_after_ms > :run_after_gt AND run_after_ms <= :run_after_le
     LIMIT :limit)
