-- A batch of a queue's key records whose window has passed, after the walk's position
-- (:after_held_until_ms, :after_key), in (held_until_ms, dedup_key) order, each with its
-- holder's state (NULL: the job is gone); the caller keeps those still held (dedup_sweep.py).
-- Records with a window only (held_until_ms > 0, along dedup_keys_windowed): the others go with
-- their jobs (schema.sql).
-- Params: :queue, :now_ms, :after_held_until_ms, :after_key, :limit.
-- Returns: dedup_key, held_until_ms, state.
SELECT dedup_keys.dedup_key, dedup_keys.held_until_ms, jobs.state
  FROM dedup_keys
  LEFT JOIN jobs ON jobs.local_id = dedup_keys.local_id
                AND jobs.queue = dedup_keys.queue AND jobs.priority = dedup_keys.priority
 WHERE dedup_keys.queue = :queue AND dedup_keys.held_until_ms > 0 AND dedup_keys.held_until_ms <= :now_ms
   AND (dedup_keys.held_until_ms, dedup_keys.dedup_key) > (:after_held_until_ms, :after_key)
 ORDER BY dedup_keys.held_until_ms, dedup_keys.dedup_key
 LIMIT :limit
