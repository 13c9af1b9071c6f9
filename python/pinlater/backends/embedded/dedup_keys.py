"""Dedup keys (#17) in the embedded store: the key records, read and written inside the
caller's write transaction (``EmbeddedStore.enqueue_keyed_jobs`` and ``gc_dedup_keys``).

A queue's records are rows of ``dedup_keys`` (``sql/schema.sql``): key -> (priority, local id,
held_until_ms). Atomicity comes from the shard's one write transaction at a time: the store's own
connection serialises its writers, and the native hot path's connection takes the same
``WriteGate`` and ``BEGIN IMMEDIATE``, so no other write lands between reading a key's record and
taking the key. Keys are bound as parameters and compared in BINARY collation: byte for byte.

Jobs are inserted by the store (``InsertJobs``): as ``enqueue_jobs`` stores any job, joining its
ordered group if it has one (``groups``). A job with only a group (``key`` None) takes no key.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Sequence

from pinlater.backends.base import Enqueued, KeyedJob
from pinlater.backends.dedup_sweep import SweepCursors, forgettable, holds
from pinlater.backends.embedded import sql

#: Inserts jobs into the queue inside the open transaction; their local ids, in order.
InsertJobs = Callable[[sqlite3.Connection, Sequence[KeyedJob]], list[int]]

#: A GC walk's position: (held_until_ms, key) of the last record looked at.
Position = tuple[int, str]

_I64_MIN = -(2**63)
_I64_MAX = 2**63 - 1


def enqueue(
    conn: sqlite3.Connection, queue: str, jobs: Sequence[KeyedJob], now_ms: int, insert: InsertJobs
) -> list[Enqueued]:
    """``ShardStore.enqueue_keyed_jobs`` inside the caller's write transaction."""
    answers: list[Enqueued | None] = []  # None: the job takes its key
    takers: list[KeyedJob] = []
    keys = [job.key for job in jobs if job.key is not None]
    found: dict[str, tuple[int, int, int, int | None]] = {}
    if keys:  # one statement for the call's keys
        params = {"queue": queue, "keys": json.dumps(keys)}
        found = {row[0]: row[1:] for row in conn.execute(sql.load("dedup_holders"), params)}
    for job in jobs:
        row = None if job.key is None else found.get(job.key)  # (priority, local_id, held_until_ms, state)
        if row is not None and holds(row[3], row[2], now_ms):
            answers.append(Enqueued(row[0], row[1], True))
        else:
            answers.append(None)
            takers.append(job)
    if not takers:
        return [answer for answer in answers if answer is not None]
    ids = insert(conn, takers)
    records = [
        {
            "queue": queue,
            "dedup_key": job.key,
            "priority": job.job.priority,
            "local_id": local_id,
            "held_until_ms": held_until(now_ms, job.window_ms),
        }
        for job, local_id in zip(takers, ids, strict=True)
        if job.key is not None
    ]
    if records:
        conn.executemany(sql.load("dedup_record"), records)
    new_ids = iter(ids)
    return [
        Enqueued(job.job.priority, next(new_ids), False) if answer is None else answer
        for job, answer in zip(jobs, answers, strict=True)
    ]


def held_until(now_ms: int, window_ms: int) -> int:
    """A new record's ``held_until_ms``: the end of its window, or 0 for a key without one. Such a
    record is not in the GC walk's index (``dedup_keys_windowed``) and goes with its job
    (``sql/schema.sql``)."""
    return max(1, min(now_ms + window_ms, _I64_MAX)) if window_ms > 0 else 0  # a window: above 0


def forget_unheld(
    conn: sqlite3.Connection, queue: str, now_ms: int, limit: int, cursors: SweepCursors[Position]
) -> int:
    """``ShardStore.gc_dedup_keys`` inside the caller's write transaction: looks at up to
    ``limit`` records past their window, from where the queue's last walk stopped
    (``dedup_sweep``), and forgets those whose holder is gone (``dedup_sweep.forgettable``).
    Records of keys without a window are not walked: they go with their jobs."""
    if limit <= 0:
        return 0
    # From the start: before every record (held_until_ms is an enqueue time plus a window, never
    # the smallest integer).
    after_held_until, after_key = cursors.position(queue) or (_I64_MIN, "")
    params = {
        "queue": queue,
        "now_ms": now_ms,
        "after_held_until_ms": after_held_until,
        "after_key": after_key,
        "limit": limit,
    }
    candidates = conn.execute(sql.load("dedup_gc_candidates"), params).fetchall()
    doomed = [
        {"queue": queue, "dedup_key": key}
        for key, held_until, state in candidates
        if forgettable(state, held_until, now_ms)
    ]
    if doomed:
        conn.executemany(sql.load("dedup_forget"), doomed)
    cursors.move(queue, (candidates[-1][1], candidates[-1][0]) if len(candidates) == limit else None)
    return len(doomed)
