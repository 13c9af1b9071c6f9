-- Forget every group of a queue (counts and rate buckets), as part of deleting the queue.
-- Params: :queue.
DELETE FROM groups WHERE queue = :queue
