-- Forget every group record of a queue's jobs, as part of deleting the queue: run before its
-- jobs go (delete_queue_jobs.sql), it finds them along jobs_by_run_after's queue prefix, then
-- one primary-key probe of group_jobs each. Params: :queue.
DELETE FROM group_jobs WHERE local_id IN (SELECT local_id FROM jobs WHERE queue = :queue)
