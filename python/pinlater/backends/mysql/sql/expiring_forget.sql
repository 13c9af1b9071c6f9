-- Forget index rows expire_jobs looked at (their job expired, finished, went or lost its expiry).
-- {table}: the queue's expiring table. %s: expire_at, priority, local_id.
DELETE FROM {table} WHERE expire_at = %s AND priority = %s AND local_id = %s
