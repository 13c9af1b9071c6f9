-- One part of monitor_idle's UNION ALL: the queue's name if its expiring or dedup_keys table
-- holds a row (an expiry to run or forget, a dedup key record for the GC), one row read at most.
-- {table}: the table. %s: the queue name (returned as it is).
-- Returns: queue.
(SELECT %s FROM {table} LIMIT 1)
