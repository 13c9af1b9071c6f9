-- Forget a queue's schedules, as part of deleting the queue. Params: :queue.
DELETE FROM schedules WHERE queue = :queue
