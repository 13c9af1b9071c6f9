"""Expiry (#18) in the MySQL store: the migration that makes room for it, the index of PENDING jobs
by expiry, ``expire_jobs``, and the expired counts.

Where: a job's expiry is a column of its row, ``expire_at`` (ms since the epoch, NULL for none),
last in each jobs table. The original server's statements name their columns, so a nullable
column at the end is invisible to it (its INSERTs leave it NULL: an original client's job never
expires). Being on the row, the expiry costs the plain hot path nothing: the dequeue's
``(expire_at IS NULL OR expire_at > now)`` reads the row its index walk lands on anyway (as the
reservation check does), acks compare it on the rows they update, and lookups and scans read it
with the rest; it goes with its job (deletes, GC, ``delete_queue``) for free.

It is not indexed in the jobs tables: an index there would be written by every plain job's
INSERT and GC. ``expire_jobs`` walks a side table instead, ``expiring`` (``(expire_at, priority,
local_id)``, ``sql/schema/create_expiring_table.sql``), written only for jobs with an expiry:
by the enqueue, and again by whatever puts such a job back to PENDING (a retried failure ack, a
claim timeout, a checkpoint), since ``expire_jobs`` forgets the rows it looks at. So every
PENDING job with an expiry has its row, soonest first, and each call costs its limit in rows.

Migration: a jobs table made without the column (by the original server, or before #18) gets it
at its first use by a statement that names it: MySQL's "unknown column" (1054) makes
``MySQLStore`` run ``migrate`` for the queue (every queue, for a shard-wide statement) and the
statement again (the Rust hot path likewise, through ``native_hot.py``). ``migrate`` makes the
queue's ``expiring`` table first, then adds the column (an instant ALTER on MariaDB 10.3+ and
MySQL 8.0.12+), so a table with the column has its side table. Two servers migrating at once:
the second ALTER's "duplicate column" (1060) is taken as done.

Expired counts: a one-row table per queue, ``expired_count``, made with ``expiring`` (by the
queue's creation or ``migrate``), raised in the transaction that expired the jobs, only when it
expired some; ``expired_counts`` reads every queue's in one UNION ALL.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING

import pymysql

from pinlater.backends.base import EXPIRED, KeyedJob
from pinlater.backends.mysql import names, queries
from pinlater.backends.mysql.db_time import to_db_time
from pinlater.backends.mysql.job_rows import CUSTOM_STATUS_LIMIT
from pinlater.backends.mysql.pool import error_code
from pinlater.backends.mysql.transactions import NO_TABLE_ERROR, Cursor, store_error
from pinlater.errors import QueueNotFoundError, ShardConnectionError

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from pinlater.backends.base import Enqueued
    from pinlater.backends.mysql.store import MySQLStore

#: MySQL's ER_BAD_FIELD_ERROR: a statement names a column the table lacks (``expire_at``, before
#: ``migrate``).
UNKNOWN_COLUMN_ERROR = 1054
#: ER_DUP_FIELDNAME: the column exists already (another server migrated the table first).
DUPLICATE_COLUMN_ERROR = 1060

#: How long a migration's ALTER of a table may take in the server (seconds; cut off past it, and
#: tried again by the next statement that needs it): an hour of copying on MySQL before 8.0.12.
#: A table bigger than that is prepared with ``pinlater prepare-mysql``, which waits as long.
MIGRATION_SECONDS = 3600.0
#: How long a migration's ALTER waits for the table's metadata lock (seconds): an open
#: transaction on the table holds it, and every statement of the table waits behind the ALTER.
MIGRATION_LOCK_WAIT_SECONDS = 10

#: Rows of ``expiring`` one ``expire_jobs`` call looks at, at most, per job it may expire.
LOOK_AHEAD = 4
#: Tables read per statement of ``expired_counts`` (``store.QUEUE_COUNTS_TABLES_PER_STATEMENT``).
TABLES_PER_STATEMENT = 1000


def ended_cut(word: str) -> int:
    """The characters of a status kept before ``" " + word`` (``base.ended_status``)."""
    return max(0, CUSTOM_STATUS_LIMIT - 1 - len(word))


def ended_args(word: str) -> tuple[str, int, str]:
    """The parameters of an ``ended_status`` CASE on the row's own status: word, cut, word."""
    return (word, ended_cut(word), word)


def _like(text: str) -> str:
    """``text`` as a LIKE pattern matching only itself."""
    return text.replace("\\", "\\\\").replace("_", "\\_").replace("%", "\\%")


def migrate(store: MySQLStore, queue: str | None, seconds: float | None = MIGRATION_SECONDS) -> int:
    """Give the jobs tables of ``queue`` (every queue of the shard when None) that lack it the
    ``expire_at`` column, their queue's ``expiring`` table first. Return how many tables were
    altered. A missing queue alters nothing (the statement that follows finds it missing).

    One migration at a time per store (per server process: several servers' ALTERs of one table
    are safe, the later finding the column there), on a connection of its own whose statements
    may take ``seconds`` (None: what they take; ``ConnectionPool.unbounded``): an ALTER that
    copies a big table (MySQL before 8.0.12) is not cut off at the socket timeout, and each
    table is logged as it starts and ends. Its wait for a table's metadata lock ends after
    ``MIGRATION_LOCK_WAIT_SECONDS`` (a failure as contention, tried again). The statements that found
    the column missing meanwhile wait for it up to the socket timeout (an instant ALTER is
    done by then, and they find nothing left to do), then fail as contention: a long copy
    holds one of the shard's threads, not all of them."""
    if queue is None:
        pattern = names.queue_database_pattern(store.name)
    else:
        pattern = _like(names.database_name(store.name, queue))
    if not store.migration_lock.acquire(timeout=store.socket_timeout):
        detail = "its tables are being given the expire_at column (logged): try again later"
        raise ShardConnectionError(store.name, detail, contention=True)
    try:
        try:
            with store.pool.unbounded(seconds, MIGRATION_LOCK_WAIT_SECONDS) as conn, conn.cursor() as cur:
                return _migrate_tables(store, cur, pattern)
        except (pymysql.err.MySQLError, OSError, EOFError) as exc:  # (a lock wait: contention, tried again)
            error = store_error(store.name, queue, exc)
            if error is exc:
                raise
            raise error from exc
    finally:
        store.migration_lock.release()


def _migrate_tables(store: MySQLStore, cur: Cursor, pattern: str) -> int:
    cur.execute(queries.TABLES_WITHOUT_EXPIRY.render(), (pattern, names.JOBS_TABLE_PATTERN))
    found: dict[str, list[int]] = defaultdict(list)
    for database, table in cur.fetchall():
        owner = names.queue_from_database(str(database), store.name)
        priority = names.priority_from_table(str(table))
        if owner is not None and priority is not None and 1 <= priority <= 127:
            found[owner].append(priority)
    altered = 0
    for owner, priorities in sorted(found.items()):
        create_table(cur, store.name, owner)
        for priority in sorted(priorities):
            table = store._table(owner, priority)
            log.warning("shard %s: adding expire_at to %s (MySQL before 8.0.12 copies the table)", store.name, table)
            started = time.monotonic()
            try:
                cur.execute(queries.ADD_EXPIRE_COLUMN.render(table=table))
            except pymysql.err.MySQLError as exc:
                if error_code(exc) != DUPLICATE_COLUMN_ERROR:
                    raise
                continue
            log.warning("shard %s: %s has expire_at, after %.1f s", store.name, table, time.monotonic() - started)
            altered += 1
    return altered


def create_table(cur: Cursor, shard: str, queue: str) -> None:
    """Create the queue's expiring and expired_count tables if they are missing (with the queue,
    or by ``migrate``)."""
    cur.execute(queries.CREATE_EXPIRING_TABLE.render(table=names.quoted_expiring_table(shard, queue)))
    cur.execute(queries.CREATE_EXPIRED_COUNT_TABLE.render(table=count_table(shard, queue)))


def count_table(shard: str, queue: str) -> str:
    return names.quoted_side_table(shard, queue, names.EXPIRED_COUNT_TABLE)


def mark_enqueued(
    cur: Cursor, store: MySQLStore, queue: str, jobs: Sequence[KeyedJob], placed: Sequence[tuple[int, Enqueued]]
) -> None:
    """In an enqueue's transaction: give the jobs just inserted (``placed``: index in ``jobs``,
    where it went) their expiry and index them by it."""
    by_priority: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for index, where in placed:
        expire_at = jobs[index].expire_at_ms
        if expire_at is not None and not where.deduplicated:
            by_priority[where.priority].append((where.local_id, expire_at))
    if not by_priority:
        return
    rows: list[tuple[int, int, int]] = []
    for priority, marks in sorted(by_priority.items()):
        marks.sort()
        ids = [local_id for local_id, _ in marks]
        cur.execute(
            queries.SET_EXPIRY.render(table=store._table(queue, priority), ids=len(marks)),
            (*ids, *(expire_at for _, expire_at in marks), *ids),
        )
        rows += [(expire_at, priority, local_id) for local_id, expire_at in marks]
    rows.sort()
    cur.execute(
        queries.EXPIRING_ADD.render(table=names.quoted_expiring_table(store.name, queue), rows=(len(rows), 3)),
        [value for row in rows for value in row],
    )


def readd(cur: Cursor, store: MySQLStore, queue: str, priority: int, ids: Sequence[int]) -> None:
    """In the transaction that put these jobs back to PENDING: index again those with an expiry."""
    if not ids:
        return
    sql = queries.EXPIRING_READD.render(
        side=names.quoted_expiring_table(store.name, queue), table=store._table(queue, priority), ids=len(ids)
    )
    cur.execute(sql, (priority, *ids))


def count(cur: Cursor, store: MySQLStore, queue: str, expired: int) -> None:
    """In the transaction that expired them: add ``expired`` jobs to the queue's expired count."""
    if expired > 0:
        cur.execute(queries.EXPIRED_COUNT_ADD.render(table=count_table(store.name, queue)), (expired,))


def expired_counts(store: MySQLStore) -> dict[str, int]:
    """Two statements whatever the number of queues (more past ``TABLES_PER_STATEMENT``): the
    queues with an expired_count table, then one UNION ALL of their counts. A queue dropped in
    between is looked for again, once."""
    pattern = names.queue_database_pattern(store.name)

    def read(cur: Cursor) -> dict[str, int]:
        cur.execute(queries.LIST_QUEUE_SIDE_TABLES.render(), (pattern, names.EXPIRED_COUNT_TABLE))
        found = sorted(
            queue
            for (database,) in cur.fetchall()
            if (queue := names.queue_from_database(str(database), store.name)) is not None
        )
        counts: dict[str, int] = {}
        for start in range(0, len(found), TABLES_PER_STATEMENT):
            chunk = found[start : start + TABLES_PER_STATEMENT]
            parts = [queries.EXPIRED_COUNT_TABLE.render(table=count_table(store.name, queue)) for queue in chunk]
            cur.execute("\nUNION ALL\n".join(parts), chunk)
            counts.update((str(queue), int(n)) for queue, n in cur.fetchall())
        return counts

    def op(cur: Cursor) -> dict[str, int]:
        try:
            return read(cur)
        except pymysql.err.ProgrammingError as exc:
            if error_code(exc) != NO_TABLE_ERROR:
                raise
            return read(cur)  # a queue was dropped meanwhile

    return store._run(None, op)


def expire_jobs(store: MySQLStore, queue: str, now_ms: int, limit: int) -> int:
    """``ShardStore.expire_jobs``: the queue's ``expiring`` rows due, soonest first, a batch of
    ``limit`` at a time (at most ``LOOK_AHEAD`` batches, until ``limit`` jobs expired); the
    PENDING jobs among them expire, and every row looked at is forgotten (its job expired now,
    or is not PENDING: whatever puts it back to PENDING indexes it again)."""
    if limit <= 0:
        return 0
    side = names.quoted_expiring_table(store.name, queue)
    now = to_db_time(now_ms)

    def op(cur: Cursor) -> tuple[int, bool] | None:
        try:
            cur.execute(queries.EXPIRING_DUE.render(table=side), (now_ms, limit))
        except pymysql.err.ProgrammingError as exc:
            if error_code(exc) != NO_TABLE_ERROR:
                raise
            return None  # no expiring table: no job of the queue ever had an expiry here
        due = [(int(row[0]), int(row[1]), int(row[2])) for row in cur.fetchall()]
        by_priority: dict[int, list[int]] = defaultdict(list)
        for _, priority, local_id in due:
            by_priority[priority].append(local_id)
        expired = 0
        for priority, ids in sorted(by_priority.items()):
            ids.sort()
            sql = queries.EXPIRE_JOBS.render(table=store._table(queue, priority), ids=len(ids))
            try:
                expired += int(cur.execute(sql, (now, *ended_args(EXPIRED), now_ms, *ids)))
            except pymysql.err.ProgrammingError as exc:
                if error_code(exc) != NO_TABLE_ERROR:
                    raise  # a priority without a table: its rows are only forgotten
        if due:
            cur.executemany(queries.EXPIRING_FORGET.render(table=side), due)
        count(cur, store, queue, expired)
        return expired, len(due) == limit

    total = 0
    for _ in range(LOOK_AHEAD):
        result = store._run(queue, op)
        if result is None:  # a queue made without expire_at: migrated now, so looked for once
            if queue not in store.get_queue_names():
                raise QueueNotFoundError(queue)
            migrate(store, queue)
            return 0
        expired, more = result
        total += expired
        if not more or total >= limit:
            break
        limit -= expired
    return total
