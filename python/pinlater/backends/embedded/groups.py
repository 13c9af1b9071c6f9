"""Ordered groups (#17) in the embedded store, inside the caller's write transaction.

The model is ``ShardStore.enqueue_keyed_jobs``'s: a group's *active* jobs (PENDING or
IN_PROGRESS) are where dequeues look; the rest *wait* in state -1 (``WAITING``), which no
dequeue reads (``sql/schema.sql``). A grouped job's group is a row of ``group_jobs`` (with a
``waiting`` flag), never a column of ``jobs``, so ungrouped jobs pay nothing for groups. A row of
``groups`` per (queue, group) counts its active jobs and bounds its waiting ones (``waiting``: 0
when none waits, else at least as many as wait, ``WAITING_SOME`` as this build writes it), so
every decision below is one read and one write of that row, plus one probe of
``group_jobs_waiting`` per promotion: nothing here walks a group's jobs. A bound, not a count:
the Rust writer leaves the row of a group that stays busy unwritten (a job joining its waiting
ones, or one promoted for each that left); the index says how many really wait (``counts``).

* ``join``: a new (or retried) job is active when its group has room and nothing waits; first,
  waiting jobs are promoted while there is room (so a raised concurrency applies).
* ``release``: jobs left their groups (final ack, final claim timeout, delete) or waiting ones
  were deleted; the oldest waiting jobs are promoted while there is room.
* ``take_token``: a group's ``groupJobsPerSecond`` bucket, kept in its row so that every server
  sharing the file draws from the same one.

The Rust writer (``rust/store/sqlite_shard.rs``) does ``join`` and ``release`` by the same rules for
the hot path's keyed enqueue and ack, set-based: one statement per step for all the groups of a
request (``groups_get.sql``, ``groups_first_waiting.sql``, ``groups_put.sql``, ...), none per job,
and it keeps the rows it wrote in memory until another connection commits to the file.
"""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Iterable

from pinlater.backends.embedded import sql

WAITING = -1
"""The internal state of a job waiting behind its group's active jobs (PENDING to readers)."""

WAITING_SOME = 1 << 40
"""A group's ``waiting`` once a job waits in it: "some may wait" (``WAITING_SOME`` in
``rust/store/sqlite_shard.rs`` says why, and why earlier builds sharing the file stay right)."""

MAX_PROMOTED = 1000
"""Most waiting jobs of one group one operation promotes (``MAX_PROMOTED`` in
``rust/store/sqlite_shard.rs`` says why): the rest of a raised concurrency's room is filled as the
promoted jobs finish or jobs join the group."""

#: A group's change from one operation: (active jobs that left, waiting jobs deleted).
Change = tuple[int, int]


def join(
    conn: sqlite3.Connection, queue: str, group: str, concurrency: int, promoted: dict[str, int] | None = None
) -> int:
    """Account for one job entering ``group``; the state it enters in (0 PENDING or ``WAITING``).
    The caller records the job's group (``record``) or, for a job already recorded, its waiting.
    ``promoted``: the jobs each group promoted so far in the caller's operation, which joins many
    (``MAX_PROMOTED`` bounds the operation, not each join)."""
    active, waiting, tokens, refilled = _settle(conn, queue, group, concurrency, 0, 0, promoted)
    if active < concurrency and waiting == 0:
        state, active = 0, active + 1
    else:
        state, waiting = WAITING, max(waiting, WAITING_SOME)
    _write(conn, queue, group, (active, waiting, tokens, refilled))
    return state


def record(conn: sqlite3.Connection, queue: str, group: str, local_id: int, state: int) -> None:
    """Record a new job's group (``group_jobs``), waiting if ``state`` is ``WAITING``."""
    params = {"local_id": local_id, "queue": queue, "group_key": group, "waiting": int(state == WAITING)}
    conn.execute(sql.load("group_job_record"), params)


def wait(conn: sqlite3.Connection, local_id: int) -> None:
    """Put a recorded job (PENDING again after ``retry_failed_jobs``) back to waiting."""
    conn.execute(sql.load("group_wait"), {"local_id": local_id})
    conn.execute(sql.load("group_job_wait"), {"local_id": local_id})


def forget_jobs(conn: sqlite3.Connection, rows: Iterable[tuple[str | None, int]]) -> None:
    """Forget the group records of deleted jobs: ``(group_key, local_id)`` rows (None: ungrouped)."""
    ids = [local_id for group, local_id in rows if group is not None]
    if ids:
        conn.execute(sql.load("group_jobs_forget"), {"ids": json.dumps(ids)})


def release(conn: sqlite3.Connection, queue: str, concurrency: int, changes: dict[str, Change]) -> None:
    """Account for jobs that left their groups (``changes[group]``: active ones gone, waiting
    ones deleted), promoting the oldest waiting jobs into the room made."""
    for group, (left, deleted) in changes.items():
        _write(conn, queue, group, _settle(conn, queue, group, concurrency, -left, -deleted))


def any_in(conn: sqlite3.Connection, queue: str) -> bool:
    """Whether ``queue`` has a group row: every IN_PROGRESS grouped job's group has one, so an ack
    of a queue without any moves no group (and runs the statements that return nothing)."""
    return conn.execute(sql.load("queue_has_groups"), {"queue": queue}).fetchone() is not None


def changes_of(rows: Iterable[tuple[str | None, int]], leaving: Iterable[int]) -> dict[str, Change]:
    """The groups' changes from ``(group_key, state)`` rows of jobs that ended or were deleted:
    a row in a ``leaving`` state was active and left; a ``WAITING`` row was a waiting job deleted."""
    states = frozenset(leaving)
    changes: dict[str, Change] = {}
    for group, state in rows:
        if group is None:
            continue
        left, deleted = changes.get(group, (0, 0))
        if state == WAITING:
            changes[group] = (left, deleted + 1)
        elif state in states:
            changes[group] = (left + 1, deleted)
    return changes


def take_token(conn: sqlite3.Connection, queue: str, group: str, rate: float, now_ms: int) -> int | None:
    """Take one of ``group``'s tokens (a bucket of ``max(1, rate)``, refilled at ``rate`` per
    second, full at first): None when taken, else when the next token is due (ms)."""
    row = conn.execute(sql.load("group_get"), {"queue": queue, "group_key": group}).fetchone()
    capacity = max(1.0, rate)
    tokens = capacity
    if row is not None and row[3] is not None:
        tokens = min(capacity, row[2] + max(0, now_ms - row[3]) * rate / 1000)
    if tokens >= 1:
        if row is None:  # an active job's group always has a row; keep the bucket regardless
            _write(conn, queue, group, (0, 0, tokens - 1, now_ms))
        else:
            params = {"queue": queue, "group_key": group, "tokens": tokens - 1, "refilled_at_ms": now_ms}
            conn.execute(sql.load("group_bucket"), params)
        return None
    return now_ms + max(1, math.ceil((1 - tokens) * 1000 / rate))


def forget_idle(conn: sqlite3.Connection, queue: str, rate: float | None, now_ms: int, limit: int) -> int:
    """Forget up to ``limit`` rows of groups with no unfinished job whose bucket is full again
    (with no rate limit, every such row); how many."""
    full_after_ms = 0 if rate is None else math.ceil(max(1.0, rate) * 1000 / rate)
    params = {"queue": queue, "full_before_ms": now_ms - full_after_ms, "limit": max(limit, 0)}
    return conn.execute(sql.load("groups_idle_forget"), params).rowcount


def counts(conn: sqlite3.Connection, queue: str) -> tuple[int, int]:
    """(groups with an unfinished job, those with a job waiting)."""
    groups, blocked = conn.execute(sql.load("group_counts"), {"queue": queue}).fetchone()
    return int(groups), int(blocked)


_Row = tuple[int, int, float | None, int | None]  # active, waiting, tokens, refilled_at_ms


def _settle(
    conn: sqlite3.Connection,
    queue: str,
    group: str,
    concurrency: int,
    active_delta: int,
    waiting_delta: int,
    promoted: dict[str, int] | None = None,
) -> _Row:
    """The group's row after the deltas and the promotions they allow (not written yet), at most
    ``MAX_PROMOTED`` less what the operation promoted in the group already (``promoted``)."""
    row = conn.execute(sql.load("group_get"), {"queue": queue, "group_key": group}).fetchone()
    active, waiting, tokens, refilled = row if row is not None else (0, 0, None, None)
    active = max(0, active + active_delta)
    waiting = max(0, waiting + waiting_delta)  # still a bound: the deltas are of jobs gone
    budget = MAX_PROMOTED - (promoted.get(group, 0) if promoted is not None else 0)
    room = min(max(0, concurrency - active), budget) if waiting > 0 else 0
    if room > 0:
        params = {"queue": queue, "group_key": group, "count": room}
        moved = conn.execute(sql.load("group_promote"), params).rowcount
        conn.execute(sql.load("group_unwait"), params)
        active += moved
        if promoted is not None:
            promoted[group] = promoted.get(group, 0) + moved
        # Fewer promoted than there was room for: nothing else waits. As many: more may, and the
        # bound stays (the next promotion finds out).
        waiting = waiting if moved == room else 0
    return active, waiting, tokens, refilled


def _write(conn: sqlite3.Connection, queue: str, group: str, row: _Row) -> None:
    active, waiting, tokens, refilled = row
    if active == 0 and waiting == 0 and refilled is None:
        conn.execute(sql.load("group_forget"), {"queue": queue, "group_key": group})
        return
    params = {
        "queue": queue,
        "group_key": group,
        "active": active,
        "waiting": waiting,
        "tokens": tokens,
        "refilled_at_ms": refilled,
    }
    conn.execute(sql.load("group_put"), params)
