-- The record of one key of a queue, with its holder's state (NULL: the job is gone).
-- Params: :queue, :dedup_key. Returns: priority, local_id, held_until_ms, state; or no row.
SELECT dedup_keys.priority, dedup_keys.local_id, dedup_keys.held_until_ms, jobs.state
  FROM dedup_keys
  LEFT JOIN jobs ON jobs.local_id = dedup_keys.local_id
                AND jobs.queue = dedup_keys.queue AND jobs.priority = dedup_keys.priority
 WHERE dedup_keys.queue = :queue AND dedup_keys.dedup_key = :dedup_key
