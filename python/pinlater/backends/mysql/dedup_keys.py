"""Dedup keys (#17) in the MySQL store: ``MySQLStore.enqueue_keyed_jobs``, ``gc_dedup_keys``,
and the keys that lookups and scans show.

Where: a table ``dedup_keys`` in each queue's database (``sql/schema/create_dedup_keys_table.sql``),
beside the original's jobs tables, which stay as they are. ``create_queue`` makes it; a queue
made without it (by the original server, or before this table existed) gets it from its first
dedup enqueue. Until then its jobs simply have no keys. A record is key -> (priority, local id,
held_until ms), keyed by the SHA-256 of the key's UTF-8 bytes, the key itself kept as bytes (so
compared exactly; a SHA-256 collision is taken as impossible).

Atomicity: one transaction per call. Its first statement locks every key's record
(``dedup_lock_keys.sql``: an insert of the missing ones, an exclusive record lock on the others,
in key-hash order so concurrent calls lock in one order), so a second enqueue of a key waits
until the first commits and then finds the job it made. Nothing else is locked for reading:
the records and their holders' states are plain reads, whose snapshot is taken at the first of
them, after the locks, so they see every commit before ours (a ``FOR UPDATE`` read of the
records would lock every row it scanned, and deadlocked concurrent calls; a test counts InnoDB's
deadlocks). A deadlock all the same rolls the whole call back, so it is run again, up to
``transactions.DEADLOCK_RETRIES`` more times, as every transaction is. Like the job INSERTs,
each statement of keys is cut to half of max_allowed_packet (a request of 10,000 keys of 1 KB
is 10 MB of them, twice that escaped), the pieces sent in key-hash order.

The holder's state is read without locking its job: an ack that finishes it as we read is
ordered after this call (the enqueue was deduplicated against a job that was still running).
A FAILED holder whose key was taken, then retried by ``retry_failed_jobs``, runs beside the
job that took its key: the record names only the newer one.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, TypeVar

import pymysql

from pinlater.backends.base import Enqueued, KeyedJob, NewJob
from pinlater.backends.dedup_sweep import forgettable, holds
from pinlater.backends.mysql import expiry, names, queries
from pinlater.backends.mysql.bodies import BLOB_BYTES
from pinlater.backends.mysql.inserts import insert_jobs, statement_budget
from pinlater.backends.mysql.pool import error_code
from pinlater.backends.mysql.transactions import NO_TABLE_ERROR, Cursor
from pinlater.errors import ErrorCode, PinLaterError, QueueNotFoundError

if TYPE_CHECKING:
    from pinlater.backends.mysql.store import MySQLStore

#: A GC walk's position: (held_until, key_hash) of the last record looked at.
Position = tuple[int, bytes]

_I64_MIN = -(2**63)
_I64_MAX = 2**63 - 1

E = TypeVar("E")

# Bytes a statement's values may take once PyMySQL has escaped them (binary values as
# ``_binary'...'``, each byte at most two), for cutting statements to max_allowed_packet.
_STATEMENT_BYTES = 1024  #: the statement without its rows or IN values
_HASH_BYTES = 2 * 32 + 16  #: one key hash, with its separator
_ID_BYTES = 24  #: one local id, with its separator
_LOCK_ROW_BYTES = _HASH_BYTES + 24  #: a dedup_lock_keys.sql row, without its key
_TAKE_ROW_BYTES = _HASH_BYTES + 24 + 3 * _ID_BYTES  #: a dedup_take_keys.sql row, without its key


class _NoKeysTable(Exception):
    """The queue's database has no dedup_keys table (or the queue is gone)."""


def create_table(cur: Cursor, shard: str, queue: str) -> None:
    """Create the queue's dedup_keys table if it is missing (in ``create_queue``'s transaction)."""
    cur.execute(queries.CREATE_DEDUP_KEYS_TABLE.render(table=names.quoted_dedup_keys_table(shard, queue)))


def enqueue_keyed_jobs(store: MySQLStore, queue: str, jobs: Sequence[KeyedJob], now_ms: int) -> list[Enqueued]:
    """Jobs without a key (only an expiry) are inserted as they come; jobs with an expiry get it
    in the same transaction (``expiry.mark_enqueued``)."""
    if not jobs:
        return []
    for job in jobs:
        if job.group is not None:
            # ShardedBackend refuses a grouped job before it gets here (groups_refused): this
            # only keeps a caller that did not from having its group ignored.
            raise PinLaterError(ErrorCode.ENQUEUE_REJECTED, f"groupKey (ordered groups) {store.groups_refused}")
    keys_table = names.quoted_dedup_keys_table(store.name, queue)
    # Keyless jobs get an empty key and hash here, and never reach a statement about keys.
    key_bytes = [b"" if job.key is None else job.key.encode("utf-8") for job in jobs]
    hashes = [b"" if job.key is None else hashlib.sha256(kb).digest() for job, kb in zip(jobs, key_bytes, strict=True)]
    order = sorted((i for i, job in enumerate(jobs) if job.key is not None), key=hashes.__getitem__)

    def check_bodies() -> None:
        for index, job in enumerate(jobs):
            what = f"the body of job {index} (counting from 0) of the request"
            store._check_body(queue, job.job.priority, job.job.body, what)

    if any(len(job.job.body) > BLOB_BYTES for job in jobs):
        check_bodies()

    budget = statement_budget(store.pool)

    def op(cur: Cursor) -> list[Enqueued]:
        # Each statement is cut to the budget (long keys, escaped, would outgrow max_allowed_packet);
        # the pieces go in key-hash order, so the locks are still taken in one order.
        for piece in _pieces(order, lambda i: _LOCK_ROW_BYTES + 2 * len(key_bytes[i]), budget):
            try:
                cur.execute(
                    queries.DEDUP_LOCK_KEYS.render(table=keys_table, rows=(len(piece), 2)),
                    [value for i in piece for value in (hashes[i], key_bytes[i])],
                )
            except pymysql.err.ProgrammingError as exc:
                if error_code(exc) == NO_TABLE_ERROR:
                    raise _NoKeysTable from exc
                raise
        records: dict[bytes, tuple[int, int, int]] = {b"": (0, 0, 0)}  # keyless jobs: no holder
        for piece in _pieces(order, lambda _: _HASH_BYTES, budget):
            cur.execute(queries.DEDUP_RECORDS.render(table=keys_table, ids=len(piece)), [hashes[i] for i in piece])
            records.update((bytes(row[0]), (int(row[1]), int(row[2]), int(row[3]))) for row in cur.fetchall())
        holders = [records[key_hash] for key_hash in hashes]
        states = _job_states(store, cur, queue, [(priority, local_id) for priority, local_id, _ in holders])
        answers: list[Enqueued | None] = []  # None: the job takes its key
        takers: dict[int, list[int]] = defaultdict(list)  # priority -> indexes of jobs
        for index, (priority, local_id, held_until) in enumerate(holders):
            if jobs[index].key is not None and holds(states.get((priority, local_id)), held_until, now_ms):
                answers.append(Enqueued(priority, local_id, True))
            else:
                answers.append(None)
                takers[jobs[index].job.priority].append(index)
        if not takers:
            return [answer for answer in answers if answer is not None]
        taken: list[tuple[int, Enqueued]] = []
        for priority, indexes in sorted(takers.items()):
            group: list[NewJob] = [jobs[i].job for i in indexes]
            table = store._table(queue, priority)
            ids = insert_jobs(store.pool, store.insert_id_strategy, cur, table, group, now_ms)
            taken += [(i, Enqueued(priority, local_id, False)) for i, local_id in zip(indexes, ids, strict=True)]
        expiry.mark_enqueued(cur, store, queue, jobs, taken)
        taken.sort(key=lambda item: hashes[item[0]])
        rows = [
            (hashes[i], key_bytes[i], e.priority, e.local_id, min(now_ms + jobs[i].window_ms, _I64_MAX))
            for i, e in taken
            if jobs[i].key is not None
        ]
        for run in _pieces(rows, lambda row: _TAKE_ROW_BYTES + 2 * len(row[1]), budget):
            cur.execute(
                queries.DEDUP_TAKE_KEYS.render(table=keys_table, rows=(len(run), 5)),
                [value for row in run for value in row],
            )
        for i, e in taken:
            answers[i] = e
        return [answer for answer in answers if answer is not None]

    def run() -> list[Enqueued]:
        return store._run_writing_bodies(queue, op, check_bodies, repeatable=False)

    try:
        return run()
    except _NoKeysTable:
        store._run(queue, lambda cur: create_table(cur, store.name, queue))  # a missing queue: QueueNotFoundError
    try:
        return run()
    except _NoKeysTable as exc:  # made a moment ago and gone: the queue was deleted meanwhile
        raise QueueNotFoundError(queue) from exc


def keys_of_jobs(cur: Cursor, store: MySQLStore, queue: str, priority: int, ids: Sequence[int]) -> dict[int, str]:
    """Inside a lookup's or scan's transaction: the keys that records name for these jobs of one
    priority, by local id (one indexed query; none where the queue has no dedup_keys table)."""
    if not ids:
        return {}
    keys_table = names.quoted_dedup_keys_table(store.name, queue)
    try:
        cur.execute(queries.DEDUP_KEYS_OF_JOBS.render(table=keys_table, ids=len(ids)), (priority, *ids))
    except pymysql.err.ProgrammingError as exc:
        if error_code(exc) != NO_TABLE_ERROR:
            raise
        return {}  # a statement error leaves the transaction usable
    return {int(row[0]): bytes(row[1]).decode("utf-8") for row in cur.fetchall()}


def gc_dedup_keys(store: MySQLStore, queue: str, now_ms: int, limit: int) -> int:
    """Look at up to ``limit`` records past their window, from where the queue's last walk
    stopped (``dedup_sweep``), and forget those whose holder is gone (``dedup_sweep.forgettable``)."""
    keys_table = names.quoted_dedup_keys_table(store.name, queue)
    held_after, hash_after = store.dedup_sweep.position(queue) or (_I64_MIN, b"")

    def op(cur: Cursor) -> tuple[int, Position | None] | None:
        try:
            cur.execute(
                queries.DEDUP_GC_CANDIDATES.render(table=keys_table),
                (now_ms, held_after, held_after, hash_after, max(limit, 0)),
            )
        except pymysql.err.ProgrammingError as exc:
            if error_code(exc) != NO_TABLE_ERROR:
                raise
            return None
        candidates = [(bytes(row[0]), int(row[1]), int(row[2]), int(row[3])) for row in cur.fetchall()]
        states = _job_states(store, cur, queue, [(priority, local_id) for _, priority, local_id, _ in candidates])
        # In key-hash order, the order enqueues lock keys in: GC never holds one key while
        # waiting for another that an enqueue holding the second goes on to lock (a deadlock).
        doomed = sorted(
            (key_hash, priority, local_id, now_ms)
            for key_hash, priority, local_id, held_until in candidates
            if forgettable(states.get((priority, local_id)), held_until, now_ms)
        )
        forgotten = int(cur.executemany(queries.DEDUP_FORGET.render(table=keys_table), doomed)) if doomed else 0
        last = candidates[-1] if candidates and len(candidates) == limit else None
        return forgotten, None if last is None else (last[3], last[0])

    result = store._run(queue, op)
    if result is None:  # no table: no records, unless the queue itself is gone
        if queue not in store.get_queue_names():
            raise QueueNotFoundError(queue)
        return 0
    forgotten, position = result
    store.dedup_sweep.move(queue, position)
    return forgotten


def _job_states(
    store: MySQLStore, cur: Cursor, queue: str, jobs: Iterable[tuple[int, int]]
) -> dict[tuple[int, int], int]:
    """The states of the jobs that exist among ``(priority, local_id)``, by plain reads (one per
    priority). Priority 0 (a record being made) and priorities without a table have none."""
    by_priority: dict[int, set[int]] = defaultdict(set)
    for priority, local_id in jobs:
        if priority >= 1:
            by_priority[priority].add(local_id)
    states: dict[tuple[int, int], int] = {}
    budget = statement_budget(store.pool)
    for priority, ids in sorted(by_priority.items()):
        table = store._table(queue, priority)
        for piece in _pieces(sorted(ids), lambda _: _ID_BYTES, budget):
            try:
                cur.execute(queries.LOOKUP_JOBS.render(table=table, ids=len(piece)), (0, *piece))
            except pymysql.err.ProgrammingError as exc:
                if error_code(exc) != NO_TABLE_ERROR:
                    raise
                break
            states.update(((priority, int(row[0])), int(row[1])) for row in cur.fetchall())
    return states


def _pieces(items: Sequence[E], cost: Callable[[E], int], budget: int) -> Iterator[Sequence[E]]:
    """``items`` cut, in order, into runs whose rows cost at most ``budget`` bytes in all beyond
    ``_STATEMENT_BYTES`` for the rest of the statement (a row over it alone makes a run of one,
    for the server to refuse)."""
    room = max(budget - _STATEMENT_BYTES, 1)
    start, used = 0, 0
    for i, item in enumerate(items):
        size = cost(item)
        if i > start and used + size > room:
            yield items[start:i]
            start, used = i, 0
        used += size
    if start < len(items):
        yield items[start:]
