-- The records of keys locked by dedup_lock_keys.sql. A plain read, not FOR UPDATE: the rows are
-- locked already, and a locking read may lock every row it scans (a small table is scanned
-- whole), which deadlocks with other calls. It reads the last committed versions all the same:
-- the transaction's snapshot is taken at its first plain read, here, after the locks.
-- {table}: the queue's dedup_keys table. {ids}: one %s per key_hash.
-- Returns: key_hash, priority, local_id, held_until.
SELECT key_hash, priority, local_id, held_until
  FROM {table}
 WHERE key_hash IN ({ids})
