-- Forget one key record (GC), only if it still names the job GC looked at and its window
-- still has passed: a dedup enqueue may have given the key to a new job meanwhile.
-- {table}: the queue's dedup_keys table. %s: key_hash, priority, local_id, now (ms).
DELETE FROM {table}
 WHERE key_hash = %s AND priority = %s AND local_id = %s AND held_until <= %s
