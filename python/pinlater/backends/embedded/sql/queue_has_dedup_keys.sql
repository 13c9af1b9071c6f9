-- Whether the queue has a dedup key record (a probe of the primary key). GC of a queue without
-- any skips dedup_keys_of_jobs_forget.sql. Params: :queue. Returns: a row, or none.
SELECT 1 FROM dedup_keys WHERE queue = :queue LIMIT 1
