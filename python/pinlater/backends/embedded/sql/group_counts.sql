-- A queue's groups with an unfinished job, and those with a job waiting. One walk of the
-- queue's rows of groups (a row per group), never of its jobs; a row whose waiting bound is
-- above zero (groups.py) is blocked when group_jobs_waiting holds a job of it (one probe).
-- Params: :queue.
SELECT count(*),
       coalesce(sum(waiting > 0 AND EXISTS (SELECT 1 FROM group_jobs
                                             WHERE group_jobs.queue = groups.queue
                                               AND group_jobs.group_key = groups.group_key
                                               AND group_jobs.waiting = 1)), 0)
  FROM groups
 WHERE queue = :queue AND active + waiting > 0
