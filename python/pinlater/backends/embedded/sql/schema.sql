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
    body               BLOB    NOT NULL,
    expire_at_ms       INTEGER
);

-- Job states: 0 PENDING, 1 IN_PROGRESS, 2 SUCCEEDED, 3 FAILED (the wire's values) and -1,
-- WAITING: a grouped job behind its group's active jobs. WAITING is PENDING to every reader
-- (counts, lookups, scans, deletes, dedup keys map it so), but a dequeue, which reads state 0
-- only, never sees it: the waiting jobs sit in their own range of jobs_by_run_after.

-- Dequeue, count and scan: equality on (queue, priority, state), range and order on run_after.
CREATE INDEX IF NOT EXISTS jobs_by_run_after ON jobs (queue, priority, state, run_after_ms, local_id);

-- GC: finished jobs (SUCCEEDED, FAILED) by age. Partial: PENDING and IN_PROGRESS jobs are left
-- out, so an enqueue, a dequeue and an ack write it once per job in all (the ack), not four
-- times; SQLite's work per job falls by about a fifth. Claim timeouts walk a queue's
-- IN_PROGRESS jobs along jobs_by_run_after instead (timed_out_candidates.sql). Version 1
-- had an index of every job (jobs_by_updated_at): it is dropped at the first open.
DROP INDEX IF EXISTS jobs_by_updated_at;
CREATE INDEX IF NOT EXISTS jobs_finished_by_updated_at ON jobs (queue, priority, state, updated_at_ms)
    WHERE state >= 2;

-- Dedup keys (#17): per queue, the job that last took each key, and until when its window
-- holds the key (its enqueue time plus its window, ms; 0 for a key without a window, from
-- version 6: see dedup_keys_windowed). A key is compared as text in BINARY
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

-- GC, version 6: a queue's records with a window (held_until_ms > 0), in (held_until_ms,
-- dedup_key) order, so the GC walk finds those whose window has passed. Partial: a record of a
-- key without a window (most keys) stores held_until_ms 0, is not in it, and goes with its job
-- instead, in the transaction that deletes the job (dedup_keys_of_jobs_forget.sql). An enqueue of
-- such a key writes two index entries, not three: about 0.4 us less of the writer's time per
-- job. Version 5 indexed every record (dedup_keys_by_held_until) and stored a record without a
-- window with its enqueue time: those records are in the new index and go through the walk as
-- before. A build before version 6 that opens the file makes its index again, and deletes jobs
-- without their records: the next open by this one forgets such orphans, in the transaction that
-- sets the version (connection.py).
DROP INDEX IF EXISTS dedup_keys_by_held_until;
CREATE INDEX IF NOT EXISTS dedup_keys_windowed ON dedup_keys (queue, held_until_ms) WHERE held_until_ms > 0;

-- Ordered groups (#17), version 4. Per (queue, group): how many of its jobs are active (PENDING
-- and dispatchable, or IN_PROGRESS), a bound of how many wait (0: none; else at least as many
-- as wait: groups.py), and its groupJobsPerSecond token bucket (tokens as of refilled_at_ms;
-- NULL: never taken, full). A row goes when its group has no
-- unfinished job, unless its bucket is not full yet (then it stays, with zero counts, until
-- gc_dedup_keys finds it full: groups_idle).
CREATE TABLE IF NOT EXISTS groups (
    queue          TEXT    NOT NULL,
    group_key      TEXT    NOT NULL,
    active         INTEGER NOT NULL,
    waiting        INTEGER NOT NULL,
    tokens         REAL,
    refilled_at_ms INTEGER,
    PRIMARY KEY (queue, group_key)
) WITHOUT ROWID;

CREATE INDEX IF NOT EXISTS groups_idle ON groups (queue, refilled_at_ms) WHERE active = 0 AND waiting = 0;

-- The group of each grouped job, for as long as the job exists (lookups and scans show it), and
-- whether it waits (then its state in jobs is -1). A table of its own, not a column of jobs: a
-- column there, even NULL, made every dequeue and ack UPDATE of every job measurably slower
-- (about 0.4 us a job on the Rust writer), and ungrouped queues must not pay for groups.
-- Version 3 files had neither table: both are created at the first open.
CREATE TABLE IF NOT EXISTS group_jobs (
    local_id  INTEGER PRIMARY KEY,
    queue     TEXT    NOT NULL,
    group_key TEXT    NOT NULL,
    waiting   INTEGER NOT NULL
);

-- Promotion: a group's oldest waiting jobs (enqueue order: local id), one probe then :count rows.
CREATE INDEX IF NOT EXISTS group_jobs_waiting ON group_jobs (queue, group_key, local_id) WHERE waiting = 1;

-- No index of group_jobs by queue: it cost an index entry written at each grouped enqueue and
-- deleted at its GC. GC asks whether the file has any grouped job (file_has_group_jobs.sql) and
-- deleting a queue finds its records through its jobs (delete_queue_group_jobs.sql). Files
-- written by earlier builds of version 4 had one: it goes at the next open.
DROP INDEX IF EXISTS group_jobs_by_queue;

-- Job control (#18), version 5. A job's expireAtTimestampMillis is expire_at_ms, NULL for a job
-- without one (most jobs: a NULL last column costs a row one header byte). Version 4 files had no
-- such column: store.py adds it (ALTER TABLE ... ADD COLUMN, old rows read NULL) before this
-- script runs. Dequeues, reservations and claims read it from the job's row, which they read
-- anyway (for its claim descriptor), so a queue without expiring jobs pays an expression.
--
-- expire_jobs: a queue's PENDING (and WAITING) jobs with an expiry, soonest first. Partial: jobs
-- without an expiry are never in it (their updates evaluate its WHERE, nothing more), and jobs
-- leave it when they are claimed or finish, so a walk from the start finds due jobs only.
CREATE INDEX IF NOT EXISTS jobs_by_expiry ON jobs (queue, expire_at_ms) WHERE expire_at_ms IS NOT NULL AND state <= 0;

-- Per queue that ever had a job with an expiry: how many of its jobs expired. The row is made at
-- the first such enqueue and goes with the queue; its presence is what tells an ack (and a claim
-- timeout) of a queue that a retry may have to expire instead (queue_get.sql reads it).
CREATE TABLE IF NOT EXISTS expiries (
    queue   TEXT    PRIMARY KEY,
    expired INTEGER NOT NULL
) WITHOUT ROWID;

-- Schedules: rows kept for schedules.py (spec is its text), by (queue, name); due ones found
-- along schedules_due (the unpaused ones by next tick), never by a walk of every schedule.
CREATE TABLE IF NOT EXISTS schedules (
    queue       TEXT    NOT NULL,
    name        TEXT    NOT NULL,
    spec        TEXT    NOT NULL,
    next_run_ms INTEGER NOT NULL,
    paused      INTEGER NOT NULL,
    PRIMARY KEY (queue, name)
) WITHOUT ROWID;

CREATE INDEX IF NOT EXISTS schedules_due ON schedules (next_run_ms) WHERE paused = 0;

PRAGMA user_version = 6;
