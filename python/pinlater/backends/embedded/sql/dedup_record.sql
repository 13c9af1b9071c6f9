-- Record that a job took a key of a queue (replacing the record of a holder that no longer
-- holds it). Params: :queue, :dedup_key, :priority, :local_id, :held_until_ms.
INSERT INTO dedup_keys (queue, dedup_key, priority, local_id, held_until_ms)
VALUES (:queue, :dedup_key, :priority, :local_id, :held_until_ms)
    ON CONFLICT (queue, dedup_key) DO UPDATE
   SET priority = excluded.priority, local_id = excluded.local_id, held_until_ms = excluded.held_until_ms
