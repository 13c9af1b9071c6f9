-- A queue's groups with an unfinished job, and those with a job waiting. One walk of the
-- queue's rows of groups (a row per group), never of its jobs. Params: :queue.
SELECT count(*), coalesce(sum(waiting > 0), 0)
  FROM groups
 WHERE queue = :queue AND active + waiting > 0
