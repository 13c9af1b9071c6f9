-- The records of some keys of a queue, with each holder's state (NULL: the job is gone).
-- Params: :queue, :keys (a JSON array of the keys). Returns: dedup_key, priority, local_id,
-- held_until_ms, state (WAITING read as PENDING); one row per key that has a record.
SELECT dedup_keys.dedup_key, dedup_keys.priority, dedup_keys.local_id, dedup_keys.held_until_ms, max(jobs.state, 0)
  FROM dedup_keys
  LEFT JOIN jobs ON jobs.local_id = dedup_keys.local_id
                AND jobs.queue = dedup_keys.queue AND jobs.priority = dedup_keys.priority
 WHERE dedup_keys.queue = :queue AND dedup_keys.dedup_key IN (SELECT value FROM json_each(:keys))
