-- A batch of key records whose window has passed, after the GC walk's position, in
-- (held_until, key_hash) order (dedup_sweep.py); the caller keeps those still held.
-- {table}: the queue's dedup_keys table.
-- %s: now (ms), position held_until, position held_until again, position key_hash, limit.
-- Returns: key_hash, priority, local_id, held_until.
SELECT key_hash, priority, local_id, held_until
  FROM {table}
 WHERE held_until <= %s
   AND (held_until > %s OR (held_until = %s AND key_hash > %s))
 ORDER BY held_until, key_hash
 LIMIT %s
