-- One jobs table's counts by state: one part of queue_counts' UNION ALL over every jobs table of
-- the shard. Each count (state, ready or future) is a range read of the (state, run_after) index
-- that stops at the cap (MYSQL_COUNT_LIMIT), as count_jobs.sql does: a subquery each, since
-- MariaDB has no derived table that refers to an outer row (no LATERAL), so the states are spelled
-- out (JobState: 0 pending, 1 in progress, 2 succeeded, 3 failed).
-- {table}: the priority's jobs table.
-- %s: the queue name, the priority (both returned as they are), then for each state in order:
-- now, the cap, now, the cap (jobs with run_after after now are the future ones).
-- Returns: queue, priority, then per state: ready jobs, future jobs.
SELECT %s, %s,
  (SELECT COUNT(*) FROM (SELECT 1 FROM {table} WHERE state = 0 AND run_after <= %s LIMIT %s) AS r0),
  (SELECT COUNT(*) FROM (SELECT 1 FROM {table} WHERE state = 0 AND run_after > %s LIMIT %s) AS f0),
  (SELECT COUNT(*) FROM (SELECT 1 FROM {table} WHERE state = 1 AND run_after <= %s LIMIT %s) AS r1),
  (SELECT COUNT(*) FROM (SELECT 1 FROM {table} WHERE state = 1 AND run_after > %s LIMIT %s) AS f1),
  (SELECT COUNT(*) FROM (SELECT 1 FROM {table} WHERE state = 2 AND run_after <= %s LIMIT %s) AS r2),
  (SELECT COUNT(*) FROM (SELECT 1 FROM {table} WHERE state = 2 AND run_after > %s LIMIT %s) AS f2),
  (SELECT COUNT(*) FROM (SELECT 1 FROM {table} WHERE state = 3 AND run_after <= %s LIMIT %s) AS r3),
  (SELECT COUNT(*) FROM (SELECT 1 FROM {table} WHERE state = 3 AND run_after > %s LIMIT %s) AS f3)
