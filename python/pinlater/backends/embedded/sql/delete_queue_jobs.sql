-- Delete every job of a queue, as part of deleting the queue. Params: :queue.
DELETE FROM jobs WHERE queue = :queue
