-- The dedup keys that records name for jobs of one priority (lookups and scans).
-- {table}: the queue's dedup_keys table. {ids}: one %s per local id.
-- %s: priority, then the ids. Returns: local_id, dedup_key (UTF-8 bytes).
SELECT local_id, dedup_key
  FROM {table}
 WHERE priority = %s AND local_id IN ({ids})
