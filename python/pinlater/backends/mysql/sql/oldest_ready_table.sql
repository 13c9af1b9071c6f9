-- One jobs table's oldest ready PENDING job that a dequeue may hand out (not past its expiry):
-- one part of oldest_ready's UNION ALL over every jobs table of the shard. The (state,
-- run_after) index is walked from its start and stops at the first such job.
-- {table}: the priority's jobs table.
-- %s: the queue name, the priority (both returned as they are), now, now (ms).
-- Returns: queue, priority, run_after.
(SELECT %s, %s, run_after FROM {table}
  WHERE state = 0 AND run_after <= %s AND (expire_at IS NULL OR expire_at > %s)
  ORDER BY run_after
  LIMIT 1)
