-- Of the queues named in :queues (a JSON array), those holding nothing for the monitor's sweeps
-- (ShardStore.monitor_idle): no job IN_PROGRESS, SUCCEEDED or FAILED at priorities
-- 1..:num_priorities (a probe of jobs_by_run_after per priority and state), none PENDING or
-- WAITING with an expiry (jobs_by_expiry), no key record with a window, the only ones the dedup
-- GC walks (dedup_keys_windowed), and no group row (its primary key), which the GC of idle
-- groups and the group counts read. A reservation's job stays PENDING: nothing for the monitor.
-- Params: :queues, :num_priorities.
-- Returns: the idle queues' names.
WITH RECURSIVE priorities(p) AS (SELECT 1 UNION ALL SELECT p + 1 FROM priorities WHERE p < :num_priorities)
SELECT named.value
  FROM json_each(:queues) AS named
 WHERE NOT EXISTS (SELECT 1 FROM priorities, jobs
                    WHERE jobs.queue = named.value AND jobs.priority = priorities.p AND jobs.state IN (1, 2, 3))
   AND NOT EXISTS (SELECT 1 FROM jobs
                    WHERE jobs.queue = named.value AND jobs.expire_at_ms IS NOT NULL AND jobs.state <= 0)
   AND NOT EXISTS (SELECT 1 FROM dedup_keys WHERE dedup_keys.queue = named.value AND dedup_keys.held_until_ms > 0)
   AND NOT EXISTS (SELECT 1 FROM groups WHERE groups.queue = named.value)
