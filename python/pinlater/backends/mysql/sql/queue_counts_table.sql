-- One jobs table's counts by state: one part of queue_counts' UNION ALL over every jobs table of
-- the shard. A covering walk of the (state, run_after) index; uncapped (the store caps nothing
-- here; ShardedBackend applies MYSQL_COUNT_LIMIT to each count as count_jobs would have).
-- {table}: the priority's jobs table.
-- %s: the queue name, the priority (both returned as they are), now: jobs with run_after after
-- it are the future ones, as count_jobs.sql's bounds split them.
-- Returns: queue, priority, state, jobs, future jobs.
SELECT %s, %s, state, COUNT(*), SUM(run_after > %s) FROM {table} GROUP BY state
