-- The records of some keys of a queue, with each holder's state (NULL: the job is gone).
-- Params: :queue, :keys (a JSON array of the keys). Returns: dedup_key, priority, local_id,
-- held_until_ms, state (WAITING read as PENDING); one row per key that has a record (a key given
-- twice: twice). CROSS JOIN keeps the keys the outer loop (one primary-key probe each), not an
-- IN list built into a temporary index first: about a third of the statement's cost when most
-- keys are new.
SELECT dedup_keys.dedup_key, dedup_keys.priority, dedup_keys.local_id, dedup_keys.held_until_ms, max(jobs.state, 0)
  FROM json_each(:keys) AS wanted
 CROSS JOIN dedup_keys
  LEFT JOIN jobs ON jobs.local_id = dedup_keys.local_id
                AND jobs.queue = dedup_keys.queue AND jobs.priority = dedup_keys.priority
 WHERE dedup_keys.queue = :queue AND dedup_keys.dedup_key = wanted.value
