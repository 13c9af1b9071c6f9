"""Job control (#18) in the MySQL store, beside expiry (``expiry.py``) and the shard's database
(``schedule_rows.py``): ``cancel_jobs``, paged ``scan_jobs`` and ``oldest_ready``.

Cancel: a PENDING job ends FAILED at once (``cancel_pending_jobs.sql``); an IN_PROGRESS one gets
attempts_remaining 0 (``cancel_in_progress_jobs.sql``), which the failure ack, the claim timeout
and the checkpoint read as "cancelled" (their SQL). Both by primary key, per priority.

Paged scans: after a cursor (run_after, local_id), ``scan_jobs_after.sql`` reads the rest of the
cursor's run_after (smaller ids) and the earlier run_afters as two ranges of the (state,
run_after) index, so a page costs about its limit whatever its depth.

Queue depth: ``oldest_ready`` is one UNION ALL over the shard's jobs tables (listed as
``queue_counts`` lists them), each part the first ready job of its (state, run_after) index
that is not past its expiry.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING

import pymysql

from pinlater.backends.base import CANCELLED, JobFilter, JobRecord, ScanCursor
from pinlater.backends.mysql import body_filtered, dedup_keys, expiry, job_rows, names, queries
from pinlater.backends.mysql.db_time import from_db_time, to_db_time
from pinlater.backends.mysql.pool import error_code
from pinlater.backends.mysql.transactions import NO_TABLE_ERROR, Cursor

if TYPE_CHECKING:
    from pinlater.backends.mysql.store import MySQLStore

#: Jobs tables read per statement of ``oldest_ready`` (``store.QUEUE_COUNTS_TABLES_PER_STATEMENT``).
TABLES_PER_STATEMENT = 1000


def cancel_jobs(store: MySQLStore, queue: str, keys: Sequence[tuple[int, int]], now_ms: int) -> int:
    by_priority: dict[int, set[int]] = defaultdict(set)
    for priority, local_id in keys:
        by_priority[priority].add(local_id)
    tables = {priority: store._table(queue, priority) for priority in by_priority}
    now = to_db_time(now_ms)

    def op(cur: Cursor) -> int:
        changed = 0
        missing_tables: list[pymysql.err.MySQLError] = []
        for priority, id_set in sorted(by_priority.items()):
            ids = sorted(id_set)
            table = tables[priority]
            try:
                changed += int(
                    cur.execute(
                        queries.CANCEL_PENDING_JOBS.render(table=table, ids=len(ids)),
                        (now, *expiry.ended_args(CANCELLED), *ids),
                    )
                )
            except pymysql.err.ProgrammingError as exc:
                if error_code(exc) != NO_TABLE_ERROR:
                    raise
                missing_tables.append(exc)  # a priority the queue lacks: nothing of it to cancel
                continue
            changed += int(cur.execute(queries.CANCEL_IN_PROGRESS_JOBS.render(table=table, ids=len(ids)), ids))
        if missing_tables and len(missing_tables) == len(by_priority) and not store.kept_priorities(cur, queue):
            raise missing_tables[0]  # no table at all: the queue is not here (QueueNotFoundError)
        return changed

    if not keys:
        return 0
    return store._run(queue, op)


def scan_jobs(store: MySQLStore, queue: str, where: JobFilter, limit: int, after: ScanCursor | None) -> list[JobRecord]:
    table = store._table(queue, where.priority)
    state, low, high = job_rows.filter_args(where)

    def op(cur: Cursor) -> list[JobRecord]:
        if after is None:
            cur.execute(queries.SCAN_JOBS.render(table=table), (*job_rows.filter_args(where), limit))
        else:
            mark = to_db_time(after.run_after_ms)
            cur.execute(
                queries.SCAN_JOBS_AFTER.render(table=table),
                (
                    *(state, mark, low, high, after.local_id, limit),
                    *(state, low, high, mark, limit),
                    limit,
                ),
            )
        rows = cur.fetchall()
        keys = dedup_keys.keys_of_jobs(cur, store, queue, where.priority, [int(row[0]) for row in rows])
        return [job_rows.job_record(where.priority, row, None, keys.get(int(row[0]))) for row in rows]

    if limit <= 0:
        return []
    if where.body_regex is not None:
        return body_filtered.scan_matching(store, queue, where, limit, after)
    return store._run(queue, op)


def oldest_ready(store: MySQLStore, num_priorities: int, now_ms: int) -> dict[tuple[str, int], int]:
    """Two statements whatever the number of queues (more past ``TABLES_PER_STATEMENT`` tables):
    the shard's jobs tables, then the UNION ALL. A queue dropped in between is looked for again,
    once; a table without ``expire_at`` migrates the shard (``MySQLStore._run``)."""
    now = to_db_time(now_ms)

    def tables(cur: Cursor) -> list[tuple[str, int]]:
        cur.execute(
            queries.LIST_QUEUE_TABLES.render(), (names.queue_database_pattern(store.name), names.JOBS_TABLE_PATTERN)
        )
        found = []
        for database, table in cur.fetchall():
            queue = names.queue_from_database(str(database), store.name)
            priority = names.priority_from_table(str(table))
            if queue is not None and priority is not None and priority <= num_priorities:
                found.append((queue, priority))
        return sorted(found)

    def read(cur: Cursor, found: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        oldest: dict[tuple[str, int], int] = {}
        for start in range(0, len(found), TABLES_PER_STATEMENT):
            chunk = found[start : start + TABLES_PER_STATEMENT]
            parts = [queries.OLDEST_READY_TABLE.render(table=store._table(q, p)) for q, p in chunk]
            cur.execute("\nUNION ALL\n".join(parts), [arg for q, p in chunk for arg in (q, p, now, now_ms)])
            for queue, priority, run_after in cur.fetchall():
                oldest[(str(queue), int(priority))] = from_db_time(run_after)
        return oldest

    def op(cur: Cursor) -> dict[tuple[str, int], int]:
        try:
            return read(cur, tables(cur))
        except pymysql.err.ProgrammingError as exc:
            if error_code(exc) != NO_TABLE_ERROR:
                raise
            return read(cur, tables(cur))  # a queue was dropped meanwhile

    return store._run(None, op)
