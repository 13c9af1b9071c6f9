-- How many jobs of a queue are IN_PROGRESS (every priority 1..:num_priorities), stopping at
-- :cap (maxInProgress): one range of jobs_by_run_after per priority, at most :cap rows read.
-- Params: :queue, :num_priorities, :cap.
WITH RECURSIVE priorities(priority) AS (
    SELECT 1 UNION ALL SELECT priority + 1 FROM priorities WHERE priority < :num_priorities)
SELECT count(*) FROM (
    SELECT 1 FROM jobs
     WHERE queue = :queue AND priority IN priorities AND state = 1
     LIMIT :cap)
