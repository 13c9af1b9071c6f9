"""Schedules (#18) in the MySQL store: the rows ``schedules.py`` keeps, one table per queue.

Where: ``schedules`` in the queue's database (``sql/schema/create_schedules_table.sql``), beside
the original's jobs tables: inside the databases the original's grants cover (``plq_...``), and
dropped with the queue by ``delete_queue``. Made by the queue's first ``put_schedule``; a queue
without it has no schedules.

``due_schedules`` is three statements whatever the number of queues: the queues with a schedules
table (from the data dictionary), one UNION ALL of a range of each table's ``due`` index
(unpaused, next_run <= now, earliest first, up to the limit) with the specs' sizes, merged by
next_run and cut to the page (its limit and bytes), then one UNION ALL reading the specs of the
rows kept. Only queues that ever had a schedule are read, and no spec past the page: 500 due
rows of 1.4 MB specs were read whole, 700 MB, before the page was cut. ``advance_schedule`` is
one compare-and-set UPDATE.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import pymysql

from pinlater.backends.base import ScheduleRow, within_sizes
from pinlater.backends.mysql import names, queries
from pinlater.backends.mysql.pool import error_code
from pinlater.backends.mysql.transactions import NO_TABLE_ERROR, Cursor, T
from pinlater.errors import QueueNotFoundError

if TYPE_CHECKING:
    from pinlater.backends.mysql.store import MySQLStore

#: Schedules tables read per statement of ``due_schedules``.
TABLES_PER_STATEMENT = 1000


def _table(store: MySQLStore, queue: str) -> str:
    return names.quoted_side_table(store.name, queue, names.SCHEDULES_TABLE)


def _row(queue: str, row: Sequence[Any]) -> ScheduleRow:
    name, spec, next_run, paused = row
    return ScheduleRow(
        queue=queue,
        name=bytes(name).decode("utf-8"),
        spec=bytes(spec).decode("utf-8"),
        next_run_ms=int(next_run),
        paused=bool(paused),
    )


def _read(store: MySQLStore, queue: str, op: Callable[[Cursor], T], missing: T) -> T:
    """``op`` on the queue's schedules table; ``missing`` when there is none (or no queue)."""

    def guarded(cur: Cursor) -> T:
        try:
            return op(cur)
        except pymysql.err.MySQLError as exc:
            if error_code(exc) not in (NO_TABLE_ERROR, 1049):
                raise
            return missing  # a statement error leaves the transaction usable

    return store._run(None, guarded)


def put_schedule(store: MySQLStore, row: ScheduleRow) -> None:
    table = _table(store, row.queue)
    args = (row.name.encode("utf-8"), row.spec.encode("utf-8"), row.next_run_ms, int(row.paused))

    def op(cur: Cursor) -> None:
        try:
            cur.execute(queries.PUT_SCHEDULE.render(table=table), args)
        except pymysql.err.ProgrammingError as exc:
            if error_code(exc) != NO_TABLE_ERROR:
                raise
            # The queue's first schedule (the DDL commits the empty transaction); a missing
            # queue fails here: QueueNotFoundError.
            database = names.database_name(store.name, row.queue)
            cur.execute(queries.LIST_JOBS_TABLES.render(), (database, names.JOBS_TABLE_PATTERN))
            if not cur.fetchall():
                raise QueueNotFoundError(row.queue) from exc
            cur.execute(queries.CREATE_SCHEDULES_TABLE.render(table=table))
            cur.execute(queries.PUT_SCHEDULE.render(table=table), args)

    store._run(row.queue, op)


def delete_schedule(store: MySQLStore, queue: str, name: str) -> bool:
    sql = queries.DELETE_SCHEDULE.render(table=_table(store, queue))
    return _read(store, queue, lambda cur: int(cur.execute(sql, (name.encode("utf-8"),))) > 0, False)


def list_schedules(store: MySQLStore, queue: str) -> list[ScheduleRow]:
    def op(cur: Cursor) -> list[ScheduleRow]:
        cur.execute(queries.LIST_SCHEDULES.render(table=_table(store, queue)))
        return [_row(queue, row) for row in cur.fetchall()]

    return _read(store, queue, op, [])


def advance_schedule(store: MySQLStore, queue: str, name: str, expected_next_ms: int, next_run_ms: int) -> bool:
    sql = queries.ADVANCE_SCHEDULE.render(table=_table(store, queue))
    args = (next_run_ms, name.encode("utf-8"), expected_next_ms)
    return _read(store, queue, lambda cur: int(cur.execute(sql, args)) > 0, False)


def due_schedules(store: MySQLStore, now_ms: int, limit: int, max_bytes: int) -> list[ScheduleRow]:
    """Up to ``limit`` due rows, earliest first, while their specs hold at most ``max_bytes``
    (the first always, as ``within_page`` cuts); the specs are read for those rows only."""
    if limit <= 0:
        return []
    pattern = names.queue_database_pattern(store.name)

    def read(cur: Cursor) -> list[ScheduleRow]:
        cur.execute(queries.LIST_QUEUE_SIDE_TABLES.render(), (pattern, names.SCHEDULES_TABLE))
        found = sorted(
            queue
            for (database,) in cur.fetchall()
            if (queue := names.queue_from_database(str(database), store.name)) is not None
        )
        due: list[tuple[int, str, bytes, int]] = []  # next run, queue, name, the spec's bytes
        for start in range(0, len(found), TABLES_PER_STATEMENT):
            chunk = found[start : start + TABLES_PER_STATEMENT]
            parts = [queries.DUE_SCHEDULE_SIZES_TABLE.render(table=_table(store, queue)) for queue in chunk]
            cur.execute("\nUNION ALL\n".join(parts), [arg for queue in chunk for arg in (queue, now_ms, limit)])
            due += [(int(run), str(queue), bytes(name), int(size or 0)) for queue, name, run, size in cur.fetchall()]
        due.sort()  # by next run, queue, then name (UTF-8 bytes sort as their text does)
        kept = within_sizes(due[:limit], max_bytes, lambda row: row[3])  # as within_page cuts, by the sizes
        names_of: dict[str, list[bytes]] = {}
        for _, queue, name, _ in kept:
            names_of.setdefault(queue, []).append(name)
        rows: dict[tuple[str, bytes], ScheduleRow] = {}
        queues = list(names_of)
        for start in range(0, len(queues), TABLES_PER_STATEMENT):
            chunk = queues[start : start + TABLES_PER_STATEMENT]
            parts = [
                queries.SCHEDULE_SPECS_TABLE.render(table=_table(store, queue), ids=len(names_of[queue]))
                for queue in chunk
            ]
            cur.execute("\nUNION ALL\n".join(parts), [arg for queue in chunk for arg in (queue, *names_of[queue])])
            for row in cur.fetchall():
                rows[(str(row[0]), bytes(row[1]))] = _row(str(row[0]), row[1:])
        return [rows[key] for _, queue, name, _ in kept if (key := (queue, name)) in rows]

    def op(cur: Cursor) -> list[ScheduleRow]:
        try:
            return read(cur)
        except pymysql.err.ProgrammingError as exc:
            if error_code(exc) != NO_TABLE_ERROR:
                raise
            return read(cur)  # a queue was dropped meanwhile

    return store._run(None, op)
