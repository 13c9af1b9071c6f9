-- The embedded store's schema: one SQLite file per shard, every queue of the shard in it.
-- Applied as a script at open; every statement is idempotent. PRAGMA user_version records the
-- schema version so a later release can migrate in place.

CREATE TABLE IF NOT EXISTS queues (
    name           TEXT PRIMARY KEY,
    num_priorities INTEGER NOT NULL,
    created_at_ms  INTEGER NOT NULL
) WITHOUT ROWID;

-- AUTOINCREMENT (not a plain rowid alias) so that a local id is never handed out twice, even
-- after the highest job was deleted: a stale descriptor must never reach a newer job.
CREATE TABLE IF NOT EXISTS jobs (
    local_id           INTEGER PRIMARY KEY AUTOINCREMENT,
    queue              TEXT    NOT NULL,
    priority           INTEGER NOT NULL,
    state              INTEGER NOT NULL,
    claim_descriptor   TEXT,
    attempts_allowed   INTEGER NOT NULL,
    attempts_remaining INTEGER NOT NULL,
    custom_status      TEXT    NOT NULL DEFAULT '',
    created_at_ms      INTEGER NOT NULL,
    updated_at_ms      INTEGER NOT NULL,
    run_after_ms       INTEGER NOT NULL,
    body               BLOB    NOT NULL
);

-- Dequeue, count and scan: equality on (queue, priority, state), range and order on run_after.
CREATE INDEX IF NOT EXISTS jobs_by_run_after ON jobs (queue, priority, state, run_after_ms, local_id);

-- The monitor: claim timeouts and GC look for old updated_at within one state.
CREATE INDEX IF NOT EXISTS jobs_by_updated_at ON jobs (queue, priority, state, updated_at_ms);

PRAGMA user_version = 1;
