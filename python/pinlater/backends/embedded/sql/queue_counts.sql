-- Every queue's job counts in one pass, for the dashboard's queue list: per (queue, priority,
-- state), all jobs and those with run_after_ms > :now_ms (the future ones, as count_jobs.sql's
-- bounds split them). Grouped in the order of jobs_by_run_after, so SQLite walks that covering
-- index once, with no sort.
-- Params: :now_ms, :num_priorities.
SELECT queue, priority, state, count(*), sum(run_after_ms > :now_ms)
  FROM jobs
 WHERE priority BETWEEN 1 AND :num_priorities
 GROUP BY queue, priority, state
