-- Record that new jobs took their keys (the records exist and are locked: dedup_lock_keys.sql).
-- {table}: the queue's dedup_keys table. {rows}: one group per key: key_hash, dedup_key,
-- priority, local_id, held_until.
INSERT INTO {table} (key_hash, dedup_key, priority, local_id, held_until) VALUES {rows}
    ON DUPLICATE KEY UPDATE priority = VALUES(priority), local_id = VALUES(local_id),
                            held_until = VALUES(held_until)
