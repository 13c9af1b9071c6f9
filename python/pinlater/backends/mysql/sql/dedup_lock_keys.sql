-- The first statement of a dedup enqueue: lock each key's record, making the ones missing
-- (no holder yet). A new record is locked by its insert, an existing one by the duplicate key
-- (an exclusive record lock on the primary key, no gap lock), so a second enqueue of the same
-- key waits here until the first commits. Callers pass the keys in key_hash order: concurrent
-- calls lock in one order.
-- {table}: the queue's dedup_keys table. {rows}: one (%s, %s) group per key: key_hash, dedup_key.
INSERT INTO {table} (key_hash, dedup_key) VALUES {rows}
    ON DUPLICATE KEY UPDATE key_hash = key_hash
