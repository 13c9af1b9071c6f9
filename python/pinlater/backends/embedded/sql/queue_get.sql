-- Whether a queue exists. Params: :queue. Returns: num_priorities, or no row.
SELECT num_priorities FROM queues WHERE name = :queue
