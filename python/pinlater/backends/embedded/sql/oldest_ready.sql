-- Per (queue, priority 1..:num_priorities), the smallest run_after of a ready PENDING job that a
-- dequeue may hand out (not expired; WAITING jobs have state -1 and are left out), or NULL: one
-- probe of jobs_by_run_after per queue and priority, walking only past expired jobs the monitor has
-- not expired yet. Params: :num_priorities, :now_ms. Returns: queue, priority, run_after_ms.
WITH RECURSIVE priorities(priority) AS (
    SELECT 1 UNION ALL SELECT priority + 1 FROM priorities WHERE priority < :num_priorities)
SELECT queues.name, priorities.priority,
       (SELECT run_after_ms FROM jobs
         WHERE jobs.queue = queues.name AND jobs.priority = priorities.priority AND jobs.state = 0
           AND jobs.run_after_ms <= :now_ms AND (jobs.expire_at_ms IS NULL OR jobs.expire_at_ms > :now_ms)
         ORDER BY jobs.run_after_ms
         LIMIT 1)
  FROM queues CROSS JOIN priorities
