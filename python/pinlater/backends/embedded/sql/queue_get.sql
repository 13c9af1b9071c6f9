-- Whether a queue exists. Params: :queue. Returns: num_priorities and whether the queue ever had
-- a job with an expiry (a row in expiries: then acks and claim timeouts may expire), or no row.
SELECT num_priorities, EXISTS (SELECT 1 FROM expiries WHERE expiries.queue = :queue) FROM queues WHERE name = :queue
