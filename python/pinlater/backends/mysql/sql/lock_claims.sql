-- The first statement of a capped claim (dequeue, claim of reserved jobs): lock the queue's claim
-- lock row, making it if missing. An insert locks a new row, the duplicate key an existing one
-- (an exclusive record lock, no gap lock; a SELECT ... FOR UPDATE of a missing row would only
-- take a gap lock, which two sessions can hold at once). The lock is held until COMMIT or
-- ROLLBACK, so capped claims of the queue run one at a time, across servers; the plain reads
-- that follow take their snapshot after it, so they see every claim committed before.
-- {table}: the queue's claim_lock table.
INSERT INTO {table} (id) VALUES (1) ON DUPLICATE KEY UPDATE id = id
