-- The oldest waiting jobs of many groups no longer wait (group_promote.sql and group_unwait.sql
-- for many groups at once): up to count of each, walked along group_jobs_waiting one probe per
-- job (min local_id above the one before), so a group with a million waiting jobs costs count
-- probes. jobs_promote.sql then makes the returned jobs PENDING.
-- Params: :queue, :groups (a JSON array of [group_key, count], count >= 1).
-- Returns: group_key, local_id of each job no longer waiting (up to count per group).
WITH RECURSIVE oldest (group_key, left_to_take, local_id) AS (
    SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'),
           (SELECT min(local_id) FROM group_jobs
             WHERE queue = :queue AND group_key = json_extract(value, '$[0]') AND waiting = 1)
      FROM json_each(:groups)
    UNION ALL
    SELECT group_key, left_to_take - 1,
           (SELECT min(w.local_id) FROM group_jobs AS w
             WHERE w.queue = :queue AND w.group_key = oldest.group_key AND w.waiting = 1
               AND w.local_id > oldest.local_id)
      FROM oldest
     WHERE left_to_take > 1 AND local_id IS NOT NULL
)
UPDATE OR FAIL group_jobs
   SET waiting = 0
 WHERE local_id IN (SELECT local_id FROM oldest WHERE local_id IS NOT NULL)
RETURNING group_key, local_id
