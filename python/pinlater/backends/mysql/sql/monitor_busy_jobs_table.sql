-- One part of monitor_idle's UNION ALL: the queue's name if its jobs table holds a job the
-- monitor's sweeps act on (IN_PROGRESS, SUCCEEDED or FAILED: state above 0), found by the
-- (state, run_after) index's first entry past PENDING, one row read at most.
-- {table}: the priority's jobs table. %s: the queue name (returned as it is).
-- Returns: queue.
(SELECT %s FROM {table} WHERE state > 0 LIMIT 1)
