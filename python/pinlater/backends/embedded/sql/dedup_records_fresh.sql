-- dedup_records.sql for keys that have no record yet, as the writer expects of most keyed
-- enqueues: it writes them before probing (dedup_holders.sql), and a key that has a record after
-- all makes the statement fail (OR FAIL, the primary key), when the writer rolls back to before
-- it and probes instead (rust/store/sqlite_shard.rs: Writer::enqueue_keyed). Repeated into
-- multi-row statements (MultiRow), the keys distinct.
-- Params: :queue, :dedup_key, :priority, :local_id, :held_until_ms.
INSERT OR FAIL INTO dedup_keys (queue, dedup_key, priority, local_id, held_until_ms)
VALUES (:queue, :dedup_key, :priority, :local_id, :held_until_ms)
