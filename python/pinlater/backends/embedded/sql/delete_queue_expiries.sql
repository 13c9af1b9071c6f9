-- Forget a queue's expired count, as part of deleting the queue. Params: :queue.
DELETE FROM expiries WHERE queue = :queue
