-- Forget every key record of a queue, as part of deleting the queue. Params: :queue.
DELETE FROM dedup_keys WHERE queue = :queue
