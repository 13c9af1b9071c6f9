-- One queue's expired count: one part of expired_counts' UNION ALL over the shard's
-- expired_count tables.
-- {table}: the queue's expired_count table. %s: the queue name (returned as it is).
-- Returns: queue, expired.
SELECT %s, expired FROM {table} WHERE id = 1
