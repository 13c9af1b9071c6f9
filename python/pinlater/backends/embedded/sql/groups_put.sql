-- group_put.sql for many groups of a queue: the hot path's writer repeats the VALUES row into
-- multi-row statements (rust/store/sqlite_inserts.rs, MultiRow), the groups distinct.
-- Params: :queue, :group_key, :active, :waiting, :tokens, :refilled_at_ms.
INSERT OR FAIL INTO groups (queue, group_key, active, waiting, tokens, refilled_at_ms)
VALUES (:queue, :group_key, :active, :waiting, :tokens, :refilled_at_ms)
    ON CONFLICT (queue, group_key) DO UPDATE
   SET active = excluded.active, waiting = excluded.waiting,
       tokens = excluded.tokens, refilled_at_ms = excluded.refilled_at_ms
