"""Body-filtered count, scan and delete of the MySQL store: the pattern is matched here, by the
extension's engine, never by MySQL's REGEXP.

Why not REGEXP: it backtracks (PCRE in MariaDB, ICU in MySQL 8). A nested repetition over a long
body reaches its match limit, which MariaDB reports as a warning while the row counts as not
matching (a wrong count, a delete that leaves jobs it was asked to delete), or runs into the
socket timeout; its dialect differs (``$``, ``.``, classes); and a pattern it refuses failed the
call. Matched here (``body_filter.BodyFilter``), a pattern means the same on every backend, takes
time linear in the bodies, and stops at the request's time budget. The price is the bodies'
trip to the server, where PyMySQL's parsing of the rows is most of it: about 12 µs a candidate
against REGEXP's 0.5-0.8 (README).

How: each store call walks the candidates (one state and priority, within the time bounds) along
the ``(state, run_after)`` index in batches of at most ``BATCH_ROWS`` rows, one transaction per
batch: the ties of the last position's run_after first (``filter_ties.sql``), then what follows
(``filter_after.sql``; newest first for a scan: ``filter_ties_newest.sql``,
``filter_before.sql``), each a range of the index however far the walk has gone. A candidate's
body comes with it when at most ``SHORT_BODY_BYTES`` long; longer ones are read by id, about
``BATCH_BYTES`` of them at a time (``bodies_by_id.sql``), so a batch holds a bounded amount of
bodies whatever their sizes (MEDIUMBLOBs, up to 16 MiB each). The budget is checked between
batches and before every body.

Count and scan read each batch in its own transaction, as the other stores read pages: a change
between batches may be seen; a scan reads its matches' records by id in the transaction that
listed them (``records_by_id.sql``). A delete reads its batch's matches again in the batch's
transaction, locked by primary key (``lock_bodies_by_id.sql``: a checkpoint may give a job a new
body), matches them again and deletes those still of the filter's state and range
(``delete_jobs_by_id.sql``), so a job is deleted only if it matches the filter when it is
deleted; the candidates that did not match are not locked.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from pinlater.backends.base import JobFilter, JobRecord, ScanCursor
from pinlater.backends.body_filter import BodyFilter
from pinlater.backends.mysql import dedup_keys, job_rows, queries
from pinlater.backends.mysql.db_time import to_db_time
from pinlater.backends.mysql.transactions import Cursor

if TYPE_CHECKING:
    from pinlater.backends.mysql.store import MySQLStore

BATCH_ROWS = 2000
"""Most candidates read per batch."""

SHORT_BODY_BYTES = 4 << 10
"""A candidate's body comes with its row when at most this long (a batch of short bodies holds
at most ``BATCH_ROWS`` times this: 8 MiB)."""

BATCH_BYTES = 8 << 20
"""Longer bodies are read by id in groups of about this many bytes (at least one body each)."""

_ID_MAX = 2**64 - 1  # local_id is BIGINT UNSIGNED

Row = Sequence[Any]
"""A candidate: local_id, run_after (text), body length, body or None (a long one)."""
Position = tuple["datetime | str", int]
"""Where a walk stands: the run_after (as read back, or a bound) and local_id of the last
candidate it looked at; the ties of that run_after past that id come next."""
T = TypeVar("T")


def _candidates(cur: Cursor, table: str, where: JobFilter, position: Position, newest: bool) -> list[Row]:
    """The next batch from ``position``: its ties, then the run_afters past it."""
    state, low, high = job_rows.filter_args(where)
    mark, local_id = position
    ties, rest = (
        (queries.FILTER_TIES_NEWEST, queries.FILTER_BEFORE) if newest else (queries.FILTER_TIES, queries.FILTER_AFTER)
    )
    cur.execute(ties.render(table=table), (SHORT_BODY_BYTES, state, mark, local_id, low, high, BATCH_ROWS))
    rows = list(cur.fetchall())
    if len(rows) < BATCH_ROWS:
        cur.execute(
            rest.render(table=table), (SHORT_BODY_BYTES, state, mark, low if newest else high, BATCH_ROWS - len(rows))
        )
        rows += cur.fetchall()
    return rows


def _start(where: JobFilter, newest: bool) -> Position:
    """Where a walk starts: at the range's first run_after before any id (no job has id 0, nor
    the largest, AUTO_INCREMENT's ids starting at 1), so its first ties are every job there."""
    _, low, high = job_rows.filter_args(where)
    return (high, _ID_MAX) if newest else (low, 0)


def _matching(cur: Cursor, table: str, rows: Sequence[Row], body_filter: BodyFilter) -> list[int]:
    """Positions in ``rows`` of the candidates whose body matches, in order. Long bodies are read
    by id, ``BATCH_BYTES`` at a time; a job gone since it was listed does not match."""
    short = [i for i, row in enumerate(rows) if row[3] is not None]
    found = [short[i] for i in body_filter.matching([bytes(rows[i][3]) for i in short])]
    for group in _groups(rows, (i for i, row in enumerate(rows) if row[3] is None)):
        body_filter.check()
        ids = [int(rows[i][0]) for i in group]
        cur.execute(queries.BODIES_BY_ID.render(table=table, ids=len(ids)), ids)
        bodies = {int(local_id): bytes(body) for local_id, body in cur.fetchall()}
        found += [group[i] for i in body_filter.matching([bodies.get(local_id) for local_id in ids])]
    return sorted(found)


def _groups(rows: Sequence[Row], indices: Iterable[int]) -> Iterator[list[int]]:
    """``indices`` of ``rows`` in groups whose bodies (by length) hold about ``BATCH_BYTES``, at
    least one body each."""
    group: list[int] = []
    size = 0
    for i in indices:
        length = int(rows[i][2])
        if group and size + length > BATCH_BYTES:
            yield group
            group, size = [], 0
        group.append(i)
        size += length
    if group:
        yield group


def _walk(
    store: MySQLStore,
    queue: str,
    body_filter: BodyFilter,
    position: Position,
    batch: Callable[[Cursor, Position], tuple[list[Row], T]],
    *,
    repeatable: bool = True,
) -> Iterator[T]:
    """What ``batch`` makes of each batch from ``position`` on (its candidates and a value), each
    in a transaction of its own, until a batch comes short; the caller stops it when done."""
    while True:
        body_filter.check()

        def op(cur: Cursor, at: Position = position) -> tuple[list[Row], T]:
            return batch(cur, at)

        rows, value = store._run(queue, op, repeatable=repeatable)
        yield value
        if len(rows) < BATCH_ROWS:
            return
        position = (rows[-1][1], int(rows[-1][0]))


def count_matching(store: MySQLStore, queue: str, where: JobFilter, cap: int) -> int:
    table = store._table(queue, where.priority)
    body_filter = store.body_filter(where)

    def batch(cur: Cursor, at: Position) -> tuple[list[Row], int]:
        rows = _candidates(cur, table, where, at, newest=False)
        return rows, len(_matching(cur, table, rows, body_filter))

    count = 0
    for matched in _walk(store, queue, body_filter, _start(where, False), batch):
        count += matched
        if count >= cap:
            return cap
    return count


def scan_matching(
    store: MySQLStore, queue: str, where: JobFilter, limit: int, after: ScanCursor | None
) -> list[JobRecord]:
    """The matching jobs' records (no body), newest run_after first, before ``after`` when
    given, with their dedup keys."""
    table = store._table(queue, where.priority)
    body_filter = store.body_filter(where)
    position = _start(where, True)
    if after is not None:
        position = min((position[0], position[1]), (to_db_time(after.run_after_ms), after.local_id))
    found: list[JobRecord] = []

    def batch(cur: Cursor, at: Position) -> tuple[list[Row], list[JobRecord]]:
        rows = _candidates(cur, table, where, at, newest=True)
        ids = [int(rows[i][0]) for i in _matching(cur, table, rows, body_filter)][: limit - len(found)]
        if not ids:
            return rows, []
        cur.execute(queries.RECORDS_BY_ID.render(table=table, ids=len(ids)), ids)
        records = {int(row[0]): row for row in cur.fetchall()}
        keys = dedup_keys.keys_of_jobs(cur, store, queue, where.priority, ids)
        return rows, [job_rows.job_record(where.priority, records[i], None, keys.get(i)) for i in ids if i in records]

    for records in _walk(store, queue, body_filter, position, batch):
        found += records
        if len(found) >= limit:
            break
    return found


def delete_matching(store: MySQLStore, queue: str, where: JobFilter, limit: int) -> int:
    table = store._table(queue, where.priority)
    body_filter = store.body_filter(where)
    state, low, high = job_rows.filter_args(where)
    deleted = 0

    def batch(cur: Cursor, at: Position) -> tuple[list[Row], int]:
        rows = _candidates(cur, table, where, at, newest=False)
        matched = [rows[i] for i in _matching(cur, table, rows, body_filter)]
        gone = 0
        # The matches' bodies read again, locked, and matched again: a checkpoint may have given
        # one a new body since the snapshot above; each group about BATCH_BYTES of them.
        for group in _groups(matched, range(len(matched))):
            body_filter.check()
            ids = [int(matched[i][0]) for i in group]
            cur.execute(queries.LOCK_BODIES_BY_ID.render(table=table, ids=len(ids)), ids)
            locked = {int(local_id): bytes(body) for local_id, body in cur.fetchall()}
            # in the walk's order, so that a limit cuts there
            still = [ids[i] for i in body_filter.matching([locked.get(local_id) for local_id in ids])]
            still = still[: limit - deleted - gone]
            if still:
                sql = queries.DELETE_JOBS_BY_ID.render(table=table, ids=len(still))
                gone += int(cur.execute(sql, (state, low, high, *still)))
            if deleted + gone >= limit:
                break
        return rows, gone

    if limit <= 0:
        return 0
    # A batch whose COMMIT may have been applied is not run again (its jobs may be gone).
    for gone in _walk(store, queue, body_filter, _start(where, False), batch, repeatable=False):
        deleted += gone
        if deleted >= limit:
            break
    return deleted
