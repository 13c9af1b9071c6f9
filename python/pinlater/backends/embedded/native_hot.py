"""``NativeEmbeddedHotPath``: the embedded store's enqueue, dequeue and ack run in Rust.

Each shard file gets a ``SqliteShard`` (``rust/store/sqlite_shard.rs``): a second connection to
the file, owned by a Rust thread that runs the hot writes off the GIL, with no Python object
per job, group-committing whatever requests are queued (one ``BEGIN IMMEDIATE`` ... ``COMMIT``,
a savepoint per request). A coroutine here submits its request with an asyncio future; after
the group's ``COMMIT`` a settler thread queues the answers for the loop, which listens
(``SqliteShard.listen``: a socket it watches, written without the GIL), and the loop completes
the futures (``SqliteShard.drain``), so no caller hears of a write a kill -9 could lose.

The statements are the store's own ``sql/*.sql`` files, handed to Rust as text. Everything
else (the monitor, admin, reads, the broker's reservations) stays on the Python store's
connection; the two writers take turns through the store's ``WriteGate``.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pinlater._pinlater import (
    AckGroup,
    ClaimedJobs,
    KeyedJobBatch,
    KeyedPlacement,
    LocalIds,
    NewJobBatch,
    SqliteShard,
    sqlite_library_version,
)
from pinlater.backends.base import (
    DEQUEUE_BYTES,
    RESERVATION_PREFIX,
    Enqueued,
    KeyedJob,
    Offload,
    sequential_ack_and_dequeue,
)
from pinlater.backends.embedded import connection, sql
from pinlater.backends.threaded import BrokerOnThreadPool, ThreadedHotPath
from pinlater.errors import QueueNotFoundError, ShardConnectionError

if TYPE_CHECKING:
    from pinlater.backends.embedded.store import EmbeddedStore

STATEMENTS = (
    "queue_get",
    "enqueue_jobs",
    "last_job_id",
    "dequeue_jobs_dry_run",
    "dequeue_rows",
    "dequeue_claim_rows",
    "dequeue_claim_range",
    "ack_succeeded_many",
    "ack_succeeded_range",
    "ack_failed",
    "queue_has_groups",
    "ack_failed_grouped",
    "dedup_holders",
    "dedup_records",
    "dedup_records_fresh",
    "next_job_id",
    "enqueue_keyed_jobs",
    "groups_get",
    "groups_put",
    "groups_forget",
    "groups_unwait_oldest",
    "groups_first_waiting",
    "jobs_promote",
    "group_jobs_record",
    "group_jobs_of",
    "count_in_progress",
    "ack_failed_expire",
    "expiries_touch",
    "expiries_add",
    "expire_jobs",
    "group_jobs_unwait",
)
"""The ``sql/*.sql`` files the Rust writer runs."""

STATEMENT_TIMES_ENV = "PINLATER_SQLITE_PROFILE"
"""When set to a path in the server's environment, each shard's writer times its statements and
writes them all there as it ends (``benches/sqlite_statement_time.py`` reads them): a bench's
instrument, which costs the writer a lock per statement."""

_QUEUE_NOT_FOUND = 1  # the error kinds of rust/py/store/sqlite_shard.rs
_CONNECTION = 2


def open_native_shard(store: EmbeddedStore, synchronous: str, busy_timeout_ms: int) -> SqliteShard:
    """The Rust writer of ``store``'s file, sharing its ``WriteGate``. Raises
    ``ShardConnectionError`` if the file cannot be opened."""
    name = store.name
    if sqlite_library_version() != sqlite3.sqlite_version:
        # Two SQLite libraries in one process on one file lose each other's POSIX locks.
        raise ShardConnectionError(
            name,
            f"the extension links SQLite {sqlite_library_version()} but Python's sqlite3 uses "
            f"{sqlite3.sqlite_version}: both must use the system library",
        )

    def settle(results: list[tuple[asyncio.Future[Any], Any, tuple[int, str] | None]]) -> None:
        """Runs on the event loop: completes the futures of one group."""
        for future, value, error in results:
            if future.cancelled():
                continue  # its caller gave up; the write stands, as one run on a thread would
            if error is None:
                future.set_result(value)
            elif error[0] == _QUEUE_NOT_FOUND:
                future.set_exception(QueueNotFoundError(error[1]))
            else:
                future.set_exception(ShardConnectionError(name, error[1]))

    from pinlater.backends.embedded.store import CUSTOM_STATUS_LIMIT

    try:
        return SqliteShard(
            str(store.path),
            synchronous,
            busy_timeout_ms,
            connection.GROUP_MAX_OPS,
            CUSTOM_STATUS_LIMIT,
            RESERVATION_PREFIX,
            {statement: sql.load(statement) for statement in STATEMENTS},
            store.write_gate,
            settle,
            os.environ.get(STATEMENT_TIMES_ENV) or None,
        )
    except OSError as exc:
        raise ShardConnectionError(name, str(exc)) from exc


class NativeEmbeddedHotPath(BrokerOnThreadPool):
    """``HotPath`` of an embedded shard: enqueue, dequeue and ack through its ``SqliteShard``;
    the broker's reserve, claim and release through ``ThreadedHotPath`` on the Python store.

    Each request carries the queue's rules as the store holds them now (``EmbeddedStore.rules``).
    A dequeue of a queue whose groups are rate limited (``group_jobs_per_second``) runs on the
    Python store instead (its token buckets live in ``groups.py``): such a queue is throttled by
    design, and the two connections take turns on the file, so the rule holds either way."""

    __slots__ = ("_heard", "_name", "_shard", "_store", "_threaded")

    def __init__(self, store: EmbeddedStore, shard: SqliteShard, offload: Offload) -> None:
        self._name = store.name
        self._store = store
        self._shard = shard
        self._threaded = ThreadedHotPath(store, offload)
        self._heard: asyncio.AbstractEventLoop | None = None  # the loop that listens, once one does

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        """The running loop, listening for the shard's answers (``SqliteShard.listen``): they
        reach it without the writer's settler thread taking the GIL, which behind the loop's own
        work (a lookup of 100,000 jobs building their replies) waited about 100 ms."""
        loop = asyncio.get_running_loop()
        if loop is not self._heard:
            signal = self._shard.listen(loop)
            loop.add_reader(signal.fileno(), self._shard.drain, loop)
            self._heard = loop
        return loop

    @property
    def commits(self) -> int:
        """Write transactions the Rust writer committed (every hot path of the store shares it)."""
        return self._shard.commits

    @property
    def syncs(self) -> int:
        """Syncs of the WAL the Rust writer's commits had (``FULL``: a thread of its own syncs
        after each commit, before its calls return; groups committed during a sync share the
        next; ``NORMAL``: none)."""
        return self._shard.syncs

    def _closed(self) -> ShardConnectionError:
        return ShardConnectionError(self._name, "the store is closed")

    async def enqueue_jobs(self, queue: str, jobs: NewJobBatch, now_ms: int) -> LocalIds:
        loop = self._running_loop()
        future: asyncio.Future[LocalIds] = loop.create_future()
        if not self._shard.enqueue(queue, jobs, now_ms, future, loop):
            raise self._closed()
        return await future

    async def enqueue_keyed_jobs(self, queue: str, jobs: Sequence[KeyedJob], now_ms: int) -> list[Enqueued]:
        """On the Rust writer, in its group commit, as ``EmbeddedStore.enqueue_keyed_jobs`` does
        on Python's connection (``dedup_keys.py``, ``groups.py``): the same statements and rules."""
        loop = self._running_loop()
        future: asyncio.Future[KeyedPlacement] = loop.create_future()
        concurrency = self._store.rules(queue).group_concurrency
        if not self._shard.enqueue_keyed(queue, jobs, concurrency, now_ms, future, loop):
            raise self._closed()
        return [Enqueued(*placed) for placed in (await future).to_list()]

    async def enqueue_keyed_batch(self, queue: str, jobs: KeyedJobBatch, now_ms: int) -> KeyedPlacement:
        """On the Rust writer, whole: the same statements as ``enqueue_keyed_jobs``, the jobs
        without a key among them and a key repeated in the request resolved there too."""
        loop = self._running_loop()
        future: asyncio.Future[KeyedPlacement] = loop.create_future()
        concurrency = self._store.rules(queue).group_concurrency
        if not self._shard.enqueue_keyed_batch(queue, jobs, concurrency, now_ms, future, loop):
            raise self._closed()
        return await future

    async def dequeue_jobs(
        self,
        queue: str,
        priority: int,
        limit: int,
        claim: str,
        now_ms: int,
        dry_run: bool,
        max_bytes: int = DEQUEUE_BYTES,
    ) -> ClaimedJobs:
        rules = self._store.rules(queue)
        if rules.group_jobs_per_second is not None and not dry_run:
            return await self._threaded.dequeue_jobs(queue, priority, limit, claim, now_ms, dry_run, max_bytes)
        loop = self._running_loop()
        future: asyncio.Future[ClaimedJobs] = loop.create_future()
        cap, concurrency = rules.max_in_progress, rules.group_concurrency
        shard = self._shard
        if not shard.dequeue(queue, priority, limit, claim, now_ms, dry_run, cap, concurrency, max_bytes, future, loop):
            raise self._closed()
        return await future

    async def ack_jobs(self, queue: str, acks: AckGroup, now_ms: int) -> None:
        loop = self._running_loop()
        future: asyncio.Future[None] = loop.create_future()
        concurrency = self._store.rules(queue).group_concurrency
        if not self._shard.ack(queue, acks, now_ms, concurrency, future, loop):
            raise self._closed()
        await future

    async def ack_and_dequeue_jobs(
        self,
        queue: str,
        acks: AckGroup,
        priority: int,
        limit: int,
        claim: str,
        now_ms: int,
        max_bytes: int = DEQUEUE_BYTES,
    ) -> ClaimedJobs:
        """Both queued to the writer at once, the ack first: it runs them in that order, as a
        rule in one group (one COMMIT). Each request has its savepoint, so should the ack fail
        alone, the dequeue still ran: the failure is raised, and the jobs it claimed come back
        at their claim timeout, as when a dequeue's answer is lost."""
        rules = self._store.rules(queue)
        if rules.group_jobs_per_second is not None or acks.failed():
            return await sequential_ack_and_dequeue(self, queue, acks, priority, limit, claim, now_ms, max_bytes)
        loop = self._running_loop()
        acked: asyncio.Future[None] = loop.create_future()
        claimed: asyncio.Future[ClaimedJobs] = loop.create_future()
        cap, concurrency = rules.max_in_progress, rules.group_concurrency
        if not self._shard.ack(queue, acks, now_ms, concurrency, acked, loop):
            raise self._closed()
        shard = self._shard
        if not shard.dequeue(queue, priority, limit, claim, now_ms, False, cap, concurrency, max_bytes, claimed, loop):
            await acked  # closed since: the ack was queued before, and is answered
            raise self._closed()
        try:
            await acked
        except BaseException:
            # read by nobody: its jobs come back at their claim timeout
            claimed.add_done_callback(lambda f: f.cancelled() or f.exception())
            raise
        return await claimed
