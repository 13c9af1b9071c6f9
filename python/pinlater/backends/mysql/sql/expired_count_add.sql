-- Count expiries of a queue (in the transaction that expired them; only when there were some).
-- {table}: the queue's expired_count table. %s: how many expired.
INSERT INTO {table} (id, expired) VALUES (1, %s)
    ON DUPLICATE KEY UPDATE expired = expired + VALUES(expired)
