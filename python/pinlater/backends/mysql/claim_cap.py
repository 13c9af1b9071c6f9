"""``maxInProgress`` (#17) in the MySQL store: a queue's cap on its IN_PROGRESS jobs on this shard
(``QueueRules.max_in_progress``, every priority), kept by ``dequeue_jobs``, ``claim_reserved`` and
``reserve_jobs``, and by the Rust hot path's dequeue (``rust/store/mysql_shard.rs``), which runs
the same statements.

Atomicity across servers: a capped claim first locks the queue's claim lock row
(``lock_claims.sql``, in a table ``claim_lock`` of ours beside the jobs tables), counts the
queue's IN_PROGRESS jobs, and claims at most the room left, in one transaction; the lock is held
until it commits, so capped claims of one queue run one at a time on the shard, whichever server
sends them, and each counts the claims committed before it (the count is a plain read whose
snapshot is taken after the lock). Nothing else makes a job IN_PROGRESS (a checkpoint keeps a
job IN_PROGRESS only if it already is), so the count cannot grow under the lock but by the
original server, which knows no cap. Acks and timeouts lower it without the lock: a claim that
misses one only sees less room.

A queue without a cap never touches the table: its claims send what they always sent. The count
reads the queue's jobs tables from the data dictionary each time (``list_jobs_tables.sql``), so a
priority added by a later ``create_queue`` counts at once, and stops each table's walk at the
cap (``count_in_progress_table.sql``): the cost is bounded by the cap, not by the jobs.

A reservation makes nothing IN_PROGRESS, so ``reserve_jobs`` only reads the room without the lock
(a reservation past the room would be a hold nobody can claim); the claim of reserved jobs is
what the lock guards.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pymysql

from pinlater.backends.mysql import names, queries
from pinlater.backends.mysql.pool import error_code
from pinlater.backends.mysql.transactions import NO_TABLE_ERROR, Cursor

if TYPE_CHECKING:
    from pinlater.backends.mysql.store import MySQLStore


def create_table(cur: Cursor, shard: str, queue: str) -> None:
    """Create the queue's claim lock table if it is missing (in ``create_queue``'s transaction)."""
    cur.execute(queries.CREATE_CLAIM_LOCK_TABLE.render(table=names.quoted_claim_lock_table(shard, queue)))


def lock_claims(cur: Cursor, shard: str, queue: str) -> None:
    """Take the queue's claim lock, held until the transaction ends. Must be the transaction's
    first statement: a queue made without the table (by the original server, or before the
    table existed) gets it here, and the DDL commits the transaction, which is then empty."""
    lock = queries.LOCK_CLAIMS.render(table=names.quoted_claim_lock_table(shard, queue))
    try:
        cur.execute(lock)
    except pymysql.err.ProgrammingError as exc:
        if error_code(exc) != NO_TABLE_ERROR:
            raise
        create_table(cur, shard, queue)  # a missing queue fails here: QueueNotFoundError
        cur.execute(lock)


def room(store: MySQLStore, cur: Cursor, queue: str, cap: int, *, lock: bool) -> int:
    """How many more jobs of the queue may be IN_PROGRESS on the shard: ``cap`` less those that
    are (every priority), 0 at or past it. ``lock``: take the claim lock first (see
    ``lock_claims``), for a claim; without it the answer may be stale by the time it is used."""
    if lock:
        lock_claims(cur, store.name, queue)
    cur.execute(queries.LIST_JOBS_TABLES.render(), (names.database_name(store.name, queue), names.JOBS_TABLE_PATTERN))
    found = (names.priority_from_table(str(row[0])) for row in cur.fetchall())
    priorities = sorted(priority for priority in found if priority is not None and priority <= 127)
    if not priorities or cap <= 0:
        return max(cap, 0)  # no jobs table: the claim that follows finds the queue missing
    parts = [queries.COUNT_IN_PROGRESS_TABLE.render(table=store._table(queue, p)) for p in priorities]
    cur.execute("\nUNION ALL\n".join(parts), [cap] * len(parts))
    in_progress = sum(int(row[0]) for row in cur.fetchall())
    return max(cap - in_progress, 0)
