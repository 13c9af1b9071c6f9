-- dedup_record.sql for many keys: the hot path's writer repeats the VALUES row into multi-row
-- statements (rust/store/sqlite_inserts.rs, MultiRow), the keys distinct.
-- Params: :queue, :dedup_key, :priority, :local_id, :held_until_ms.
INSERT OR FAIL INTO dedup_keys (queue, dedup_key, priority, local_id, held_until_ms)
VALUES (:queue, :dedup_key, :priority, :local_id, :held_until_ms)
    ON CONFLICT (queue, dedup_key) DO UPDATE
   SET priority = excluded.priority, local_id = excluded.local_id, held_until_ms = excluded.held_until_ms
