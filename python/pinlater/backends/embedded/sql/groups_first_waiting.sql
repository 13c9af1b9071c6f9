-- The oldest waiting job of each of many groups (the usual promotion: one job left a group of
-- concurrency 1), one probe of group_jobs_waiting per group; group_jobs_unwait.sql then takes
-- them out of waiting and jobs_promote.sql makes them PENDING. Read apart from that UPDATE, which
-- takes them by id: one UPDATE with RETURNING (groups_unwait_first.sql before) cost more.
-- Params: :queue, :groups (a JSON array of distinct group keys).
-- Returns: group_key, local_id per group; local_id NULL for a group with no waiting job.
SELECT wanted.value,
       (SELECT min(local_id) FROM group_jobs
         WHERE queue = :queue AND group_key = wanted.value AND waiting = 1)
  FROM json_each(:groups) AS wanted
