-- One jobs table's IN_PROGRESS jobs, counted up to a cap: one part of a UNION ALL over the
-- queue's jobs tables (a capped claim's count). The inner LIMIT stops the walk of the
-- (state, run_after) index at the cap, so the count costs at most the cap's rows per table
-- whatever is IN_PROGRESS (more than the cap after a lowered cap, or claims of the original
-- server, which knows no cap).
-- {table}: the priority's jobs table. %s: the cap.
-- Returns: the count.
SELECT COUNT(*) FROM (SELECT 1 FROM {table} WHERE state = 1 LIMIT %s) AS in_progress
