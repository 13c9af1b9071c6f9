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

-- GC: finished jobs (SUCCEEDED, FAILED) by age. Partial: PENDING and IN_PROGRESS jobs are left
-- out, so an enqueue, a dequeue and an ack write it once per job in all (the ack), not four
-- times; SQLite's work per job falls by about a fifth. Claim timeouts walk a queue's
-- IN_PROGRESS jobs along jobs_by_run_after instead (resurrect_timed_out_jobs.sql). Version 1
-- had an index of every job (jobs_by_updated_at): it is dropped at the first open.
DROP INDEX IF EXISTS jobs_by_updated_at;
CREATE INDEX IF NOT EXISTS jobs_finished_by_updated_at ON jobs (queue, priority, state, updated_at_ms)
    WHERE state >= 2;

-- Dedup keys (#17): per queue, the job that last took each key, and until when its window
-- holds the key (its enqueue time plus its window, ms). A key is compared as text in BINARY
-- collation (byte for byte, never as a pattern). Version 2 files had no such table: it is
-- created at the first open. The original PinLater never read this file, so nothing else
-- needs to know.
CREATE TABLE IF NOT EXISTS dedup_keys (
    queue         TEXT    NOT NULL,
    dedup_key     TEXT    NOT NULL,
    priority      INTEGER NOT NULL,
    local_id      INTEGER NOT NULL,
    held_until_ms INTEGER NOT NULL,
    PRIMARY KEY (queue, dedup_key)
) WITHOUT ROWID;

-- Lookups and scans: the key of a job, probed by local id (unique in the file, AUTOINCREMENT).
CREATE INDEX IF NOT EXISTS dedup_keys_by_job ON dedup_keys (local_id);

-- GC: a queue's records whose window has passed, in (held_until_ms, dedup_key) order.
CREATE INDEX IF NOT EXISTS dedup_keys_by_held_until ON dedup_keys (queue, held_until_ms);

PRAGMA user_version = 3;
