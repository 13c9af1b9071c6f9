-- Index new jobs by expiry (an enqueue with expiries, in its transaction).
-- {table}: the queue's expiring table. {rows}: one (%s, %s, %s) group per job: expire_at (ms),
-- priority, local_id.
INSERT INTO {table} (expire_at, priority, local_id) VALUES {rows}
    ON DUPLICATE KEY UPDATE local_id = VALUES(local_id)
