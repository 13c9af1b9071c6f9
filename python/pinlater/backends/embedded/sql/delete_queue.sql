-- Drop a queue's row; its jobs go first in the same transaction (delete_queue_jobs.sql).
-- Params: :queue.
DELETE FROM queues WHERE name = :queue
