"""The reservation operations of ``MySQLStore`` (the dequeue broker).

A reserved job: claim_descriptor = the reservation, updated_at = its expiry (see
reserve_jobs.sql). Live while updated_at > now.

Under a queue's ``max_in_progress`` (``claim_cap.py``): a reservation takes at most the room
left, read without the lock (it makes nothing IN_PROGRESS); a claim of reserved jobs takes the
claim lock and claims, of the jobs still under its live reservation, the first ones in the order
given, as many as there is room for. The others stay reserved (the broker releases them, or they
lapse).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import pymysql

from pinlater.backends.base import RESERVATION_PREFIX, ClaimedJob
from pinlater.backends.mysql import claim_cap, queries
from pinlater.backends.mysql.db_time import to_db_time
from pinlater.backends.mysql.job_rows import MAX_CLAIM_LENGTH, claimed_job
from pinlater.backends.mysql.transactions import Cursor, rollback_unless_list

if TYPE_CHECKING:
    from pinlater.backends.mysql.store import MySQLStore


def reserve_jobs(
    store: MySQLStore,
    queue: str,
    priority: int,
    limit: int,
    reservation: str,
    now_ms: int,
    hold_ms: int,
    max_bytes: int,
) -> list[ClaimedJob]:
    if len(reservation) > MAX_CLAIM_LENGTH:
        raise ValueError(f"reservation longer than {MAX_CLAIM_LENGTH} characters")
    table = store._table(queue, priority)
    now = to_db_time(now_ms)
    prefix = RESERVATION_PREFIX
    cap = store.rules(queue).max_in_progress

    ask = limit  # lowered where the bodies passed the byte budget (below)

    def op(cur: Cursor) -> list[ClaimedJob] | int | None:
        n = ask if cap is None or ask <= 0 else min(ask, claim_cap.room(store, cur, queue, cap, lock=False))
        if n <= 0:
            cur.execute(queries.PEEK_JOBS.render(table=table), (now, now_ms, 0))  # QUEUE_NOT_FOUND check
            return []
        # Ours already live before this call are not part of its answer.
        select = queries.SELECT_RESERVED_JOBS.render(table=table)
        before = {int(row[0]) for row in _streamed(cur, select, (reservation, now))}
        until = to_db_time(now_ms + hold_ms)
        reserved = cur.execute(
            queries.RESERVE_JOBS.render(table=table),
            (reservation, until, now, now_ms + hold_ms, now, prefix, prefix, n),
        )
        if not reserved:
            return []
        # In claim order (run_after, local_id): the jobs the budget takes (``within_bytes``) are
        # kept, the others only counted, so no more than one body past it is held.
        jobs: list[ClaimedJob] = []
        spent = count = 0
        for row in _streamed(cur, select, (reservation, now)):
            if int(row[0]) in before:
                continue
            count += 1
            if not jobs or spent < max_bytes:
                jobs.append(claimed_job(row))
                spent += len(jobs[-1].body)
        return jobs if len(jobs) == count else len(jobs)  # (fewer: rolled back, reserved again)

    while True:
        jobs = store._run(queue, rollback_unless_list(op))
        if isinstance(jobs, list):
            return jobs
        ask = jobs or 0  # (op answers no None)


def _streamed(cur: Cursor, sql: str, args: tuple[Any, ...]) -> Iterator[tuple[Any, ...]]:
    """The rows of ``sql``, read one at a time on the transaction's connection (an unbuffered
    cursor), so a row's body is let go once it was looked at."""
    rows = cur.connection.cursor(pymysql.cursors.SSCursor)
    try:
        rows.execute(sql, args)
        yield from rows
    finally:
        rows.close()


def claim_reserved(
    store: MySQLStore, queue: str, items: Sequence[tuple[int, int, str]], reservation: str, now_ms: int
) -> list[tuple[int, int]]:
    # Per priority: local id -> claim, ids sorted (rows are locked in one order: no deadlocks).
    by_priority: dict[int, dict[int, str]] = defaultdict(dict)
    for priority, local_id, claim in items:
        if len(claim) > MAX_CLAIM_LENGTH:
            raise ValueError(f"claim descriptor longer than {MAX_CLAIM_LENGTH} characters")
        by_priority[priority][local_id] = claim
    tables = {priority: store._table(queue, priority) for priority in by_priority}
    now = to_db_time(now_ms)
    cap = store.rules(queue).max_in_progress

    def within_cap(cur: Cursor, cap: int) -> dict[int, dict[int, str]]:
        """``by_priority`` cut to the room left under the cap (the claim lock held from here on):
        the first jobs, in the order given, still under this live reservation."""
        room = claim_cap.room(store, cur, queue, cap, lock=True)
        if room >= sum(len(claims) for claims in by_priority.values()):
            return by_priority
        if room <= 0:
            return {}
        live: set[tuple[int, int]] = set()
        for priority, claims in sorted(by_priority.items()):
            ids = sorted(claims)
            select = queries.SELECT_RESERVED_IDS.render(table=tables[priority], ids=len(ids))
            cur.execute(select, (reservation, now, *ids))
            live.update((priority, int(row[0])) for row in cur.fetchall())
        kept: dict[int, dict[int, str]] = defaultdict(dict)
        for priority, local_id, _ in items:
            if room > 0 and (priority, local_id) in live and local_id not in kept[priority]:
                kept[priority][local_id] = by_priority[priority][local_id]
                room -= 1
        return kept

    def op(cur: Cursor) -> list[tuple[int, int]]:
        # Claimed: every job given that is IN_PROGRESS under its claim once the chosen ones are
        # claimed (claims are unique per dequeue). That counts the jobs of a first run of this
        # call whose COMMIT's answer was lost (run again by ``_run``): answered "not claimed",
        # the broker would withhold them until their claim timed out and took an attempt.
        claimed: list[tuple[int, int]] = []
        chosen = by_priority if cap is None else within_cap(cur, cap)
        for priority, claims in sorted(by_priority.items()):
            table = tables[priority]
            if mine := chosen.get(priority):
                ids = sorted(mine)
                params = (*ids, *(mine[i] for i in ids), now, reservation, now, now_ms, *ids)
                cur.execute(queries.CLAIM_RESERVED_JOBS.render(table=table, ids=len(ids)), params)
            ids = sorted(claims)
            cur.execute(queries.SELECT_CLAIMED_IDS.render(table=table, ids=len(ids)), ids)
            claimed += [(priority, int(i)) for i, cd in cur.fetchall() if claims.get(int(i)) == cd]
        return claimed

    if not items:
        return []
    return store._run(queue, op)


def release_reservations(
    store: MySQLStore, queue: str, items: Sequence[tuple[int, int]], reservation: str, now_ms: int
) -> int:
    by_priority = _ids_by_priority(items)
    tables = {priority: store._table(queue, priority) for priority in by_priority}
    now = to_db_time(now_ms)

    def op(cur: Cursor) -> int:
        released = 0
        for priority, ids in sorted(by_priority.items()):
            sql = queries.RELEASE_RESERVATIONS.render(table=tables[priority], ids=len(ids))
            released += int(cur.execute(sql, (now, reservation, now, *ids)))
        return released

    if not items:
        return 0
    return store._run(queue, op)


def _ids_by_priority(items: Sequence[tuple[int, int]]) -> dict[int, list[int]]:
    """Local ids by priority, each list sorted (rows are locked in one order: no deadlocks)."""
    by_priority: dict[int, list[int]] = defaultdict(list)
    for priority, local_id in items:
        by_priority[priority].append(local_id)
    return {priority: sorted(ids) for priority, ids in by_priority.items()}
