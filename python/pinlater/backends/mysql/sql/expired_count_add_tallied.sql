-- expired_count_add.sql with the tally (see expired_count_reset.sql): a tally of 0 selects no
-- row, so it writes and locks nothing.
-- {table}: the queue's expired_count table.
INSERT INTO {table} (id, expired)
SELECT 1, @pinlater_expired FROM DUAL WHERE @pinlater_expired > 0
    ON DUPLICATE KEY UPDATE expired = expired + VALUES(expired)
