-- groups_unwait_oldest.sql for groups that take one job each (the usual promotion: one job left
-- a group of concurrency 1): each group's oldest waiting job no longer waits, one probe of
-- group_jobs_waiting per group. The groups come as a plain JSON array of keys, so no per-group
-- json_extract and no recursive step (about 40% cheaper than groups_unwait_oldest.sql's). A group
-- with no waiting job gives no row. jobs_promote.sql then makes the returned jobs PENDING.
-- Params: :queue, :groups (a JSON array of distinct group keys).
-- Returns: group_key, local_id of each job no longer waiting.
UPDATE OR FAIL group_jobs
   SET waiting = 0
 WHERE local_id IN (SELECT (SELECT min(local_id) FROM group_jobs
                             WHERE queue = :queue AND group_key = wanted.value AND waiting = 1)
                      FROM json_each(:groups) AS wanted)
RETURNING group_key, local_id
