-- Forget every group record of a queue's jobs, as part of deleting the queue. Params: :queue.
DELETE FROM group_jobs WHERE queue = :queue
