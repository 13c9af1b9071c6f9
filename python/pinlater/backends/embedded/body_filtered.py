"""Body-filtered count, scan and delete of the embedded store.

SQLite never runs the pattern. Each store call walks the candidates (one state and priority,
within the time bounds) along ``jobs_by_run_after`` in batches of at most ``BATCH_ROWS`` rows or
about ``BATCH_BYTES`` of bodies, and the extension matches each batch with the interpreter
released (``body_filter.BodyFilter``). Why batches rather than a SQL function backed by the same
engine:

* a SQL function is called once per row with the interpreter held, inside one transaction that
  holds the shard's lock for the whole scan, so every other call on the shard waited for it;
  here the lock is held for one batch at a time, and other threads run while a batch is matched;
* memory stays bounded by a batch (the cursor stops early at ``BATCH_BYTES``);
* the time budget is checked before every body and between batches, so a call stops promptly.

Count and scan read each batch in its own read transaction, as the Redis store reads pages: a
change between batches may be seen. Delete matches and deletes each batch inside one write
transaction, so a job is deleted only if its body matched at the moment it is deleted.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Sequence
from typing import Any

from pinlater.backends.body_filter import BodyFilter
from pinlater.backends.embedded import sql
from pinlater.backends.embedded.connection import SQLiteTransactions

BATCH_ROWS = 500
"""Most candidates read per batch."""

BATCH_BYTES = 8 << 20
"""A batch stops once its bodies reach this many bytes (so at most one body more)."""

_I64_MAX = 2**63 - 1
# Columns of filter_candidates.sql: local id, run after, body; of filter_candidates_newest.sql:
# the thirteen of a scan's record (local id 1, run after 7, dedup key 10, group key 11, expiry 12),
# then the body.
_RECORD = 13

Row = Sequence[Any]
RequireQueue = Callable[[sqlite3.Connection, str], object]


def _batch(conn: sqlite3.Connection, statement: str, params: dict[str, Any]) -> tuple[list[Row], bool]:
    """(rows, whether they are the last ones): up to BATCH_ROWS rows or about BATCH_BYTES of bodies."""
    rows: list[Row] = []
    size = 0
    cursor = conn.execute(statement, {**params, "limit": BATCH_ROWS})
    try:
        for row in cursor:
            rows.append(row)
            size += len(row[-1])
            if size >= BATCH_BYTES:
                return rows, False
    finally:
        cursor.close()
    return rows, len(rows) < BATCH_ROWS


class BodyFilteredReads(SQLiteTransactions):
    """``EmbeddedStore``'s body-filtered reads (see the module docstring). ``params`` are the
    store's filter parameters (queue, priority, state, also_state, run_after_gt, run_after_le)."""

    def _jobs_deleted(self, conn: sqlite3.Connection, queue: str, rows: Sequence[Row]) -> None:
        """Called in the write transaction with the ``(group_key, state, local_id)`` rows of the
        jobs a delete removed (the store accounts for grouped ones)."""

    def _count_matching(
        self, params: dict[str, Any], body_filter: BodyFilter, limit: int | None, require: RequireQueue
    ) -> int:
        count = 0
        position = {"after_run_after": params["run_after_gt"], "after_id": _I64_MAX}
        first = True
        while True:
            body_filter.check()
            with self._read() as conn:
                if first:
                    require(conn, params["queue"])
                    first = False
                if limit is not None and count >= limit:
                    break
                rows, last = _batch(conn, sql.load("filter_candidates"), {**params, **position})
            count += len(body_filter.matching([row[2] for row in rows]))
            if last:
                break
            position = {"after_run_after": rows[-1][1], "after_id": rows[-1][0]}
        return count if limit is None else min(count, limit)

    def _scan_matching(
        self,
        params: dict[str, Any],
        body_filter: BodyFilter,
        limit: int,
        require: RequireQueue,
        after: tuple[int, int] | None = None,
    ) -> list[Row]:
        """Matching rows (the record columns, no body), newest run_after first, before ``after``
        (a ``ScanCursor``) when given."""
        found: list[Row] = []
        start = (params["run_after_le"], _I64_MAX)
        if after is not None:
            start = min(start, (after[0], after[1]))
        position = {"before_run_after": start[0], "before_id": start[1]}
        first = True
        while True:
            body_filter.check()
            with self._read() as conn:
                if first:
                    require(conn, params["queue"])
                    first = False
                if limit <= 0:
                    return found
                rows, last = _batch(conn, sql.load("filter_candidates_newest"), {**params, **position})
            found += [rows[i][:_RECORD] for i in body_filter.matching([row[-1] for row in rows])]
            if last or len(found) >= limit:
                return found[:limit]
            position = {"before_run_after": rows[-1][7], "before_id": rows[-1][1]}

    def _delete_matching(
        self, params: dict[str, Any], body_filter: BodyFilter, limit: int, require: RequireQueue
    ) -> int:
        deleted = 0
        position = {"after_run_after": params["run_after_gt"], "after_id": _I64_MAX}
        first = True
        while True:
            body_filter.check()
            with self._write() as conn:
                if first:
                    require(conn, params["queue"])
                    first = False
                if deleted >= limit:
                    return deleted
                rows, last = _batch(conn, sql.load("filter_candidates"), {**params, **position})
                matched = body_filter.matching([row[2] for row in rows])[: limit - deleted]
                if matched:
                    ids = json.dumps([rows[i][0] for i in matched])
                    gone = conn.execute(
                        sql.load("delete_jobs_by_id"), {"queue": params["queue"], "ids": ids}
                    ).fetchall()
                    self._jobs_deleted(conn, params["queue"], gone)
                    deleted += len(gone)
            if last:
                return deleted
            position = {"after_run_after": rows[-1][1], "after_id": rows[-1][0]}
