-- Whether a queue has a grouped job (existing, finished or not): one probe of group_jobs_by_queue.
-- Params: :queue. Returns: a row, or none.
SELECT 1 FROM group_jobs WHERE queue = :queue LIMIT 1
