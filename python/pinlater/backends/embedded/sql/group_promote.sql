-- Make a group's :count oldest WAITING jobs (enqueue order: local id) active, PENDING as they
-- were enqueued. One probe of group_jobs_waiting, then :count rows along it; group_unwait.sql
-- then clears the same rows' flag. Params: :queue, :group_key, :count.
UPDATE jobs
   SET state = 0
 WHERE local_id IN (SELECT local_id FROM group_jobs
                     WHERE queue = :queue AND group_key = :group_key AND waiting = 1
                     ORDER BY local_id
                     LIMIT :count)
   AND state = -1
