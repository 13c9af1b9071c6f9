-- The jobs group_promote.sql just promoted no longer wait (same subquery, run right after it).
-- Params: :queue, :group_key, :count.
UPDATE group_jobs
   SET waiting = 0
 WHERE local_id IN (SELECT local_id FROM group_jobs
                     WHERE queue = :queue AND group_key = :group_key AND waiting = 1
                     ORDER BY local_id
                     LIMIT :count)
