"""The enqueue INSERTs of the MySQL backend: chunking a priority's jobs under
max_allowed_packet, and recovering the new ids of a multi-row INSERT."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pinlater.backends.base import NewJob
from pinlater.backends.mysql import queries
from pinlater.backends.mysql.job_rows import CUSTOM_STATUS_LIMIT, ENQUEUE_ROW_WIDTH
from pinlater.backends.mysql.pool import ConnectionPool
from pinlater.backends.mysql.transactions import Cursor

#: How ids of a multi-row INSERT are recovered; None picks from the server's settings.
INSERT_ID_STRATEGIES = ("last_insert_id", "returning", "per_row")


def insert_chunks(pool: ConnectionPool, indexes: list[int], jobs: Sequence[NewJob]) -> list[list[int]]:
    """Split one priority's jobs so each INSERT stays well under max_allowed_packet."""
    info = pool.server_info
    budget = (info.max_allowed_packet if info else 16 * 1024 * 1024) // 2
    chunks: list[list[int]] = [[]]
    size = 0
    for index in indexes:
        job = jobs[index]
        # Escaped bytes take up to twice their size; a character up to 4 bytes.
        cost = 2 * len(job.body) + 4 * min(len(job.custom_status), CUSTOM_STATUS_LIMIT) + 200
        if chunks[-1] and size + cost > budget:
            chunks.append([])
            size = 0
        chunks[-1].append(index)
        size += cost
    return chunks


def insert(
    pool: ConnectionPool, strategy: str | None, cur: Cursor, table: str, rows: list[tuple[Any, ...]]
) -> list[int]:
    """One multi-row INSERT; the new ids in row order."""
    strategy = strategy or default_insert_id_strategy(pool)
    if strategy == "returning":
        cur.execute(
            queries.ENQUEUE_JOBS_RETURNING.render(table=table, rows=(len(rows), ENQUEUE_ROW_WIDTH)),
            [value for row in rows for value in row],
        )
        ids = [int(row[0]) for row in cur.fetchall()]
    elif strategy == "last_insert_id":
        cur.execute(
            queries.ENQUEUE_JOBS.render(table=table, rows=(len(rows), ENQUEUE_ROW_WIDTH)),
            [value for row in rows for value in row],
        )
        first = int(cur.lastrowid)
        info = pool.server_info
        step = info.auto_increment_increment if info else 1
        ids = [first + k * step for k in range(cur.rowcount)]
    else:
        ids = []
        single = queries.ENQUEUE_JOBS.render(table=table, rows=(1, ENQUEUE_ROW_WIDTH))
        for row in rows:
            cur.execute(single, row)
            ids.append(int(cur.lastrowid))
    if len(ids) != len(rows):
        raise RuntimeError(f"inserted {len(rows)} jobs into {table} but recovered {len(ids)} ids")
    return ids


def default_insert_id_strategy(pool: ConnectionPool) -> str:
    info = pool.server_info
    if info is None or info.consecutive_insert_ids:
        return "last_insert_id"
    return "returning" if info.supports_insert_returning else "per_row"
