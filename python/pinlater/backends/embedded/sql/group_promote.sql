-- Make a group's :count oldest WAITING jobs (enqueue order: local id) active, PENDING as they
-- were enqueued. One probe of jobs_waiting_by_group, then :count rows along it.
-- Params: :queue, :group_key, :count.
UPDATE jobs
   SET state = 0
 WHERE local_id IN (SELECT local_id FROM jobs
                     WHERE queue = :queue AND group_key = :group_key AND state = -1
                     ORDER BY local_id
                     LIMIT :count)
