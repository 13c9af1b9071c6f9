"""``NativeMySQLHotPath``: the MySQL store's hot path (enqueue, dequeue, ack) in Rust.

Each call crosses into the extension once (``_pinlater.MySQLShard``, ``rust/store/mysql_shard.rs``)
with the request's jobs as one Rust value, and is awaited through an asyncio future. A Rust
worker thread runs it without ever taking the GIL and files the answer; the event loop watches
the shard's wake-up socket (``loop.add_reader``) and completes every answered future at once
(``MySQLShard.drain``, on the loop's thread). The workers own their connections (at most the
store's ``pool_size``) and run the same statements and transactions as ``MySQLStore``: the same
SQL files (their text is handed over from ``queries.py``), session setup, time conversion, id
strategy, retries and error mapping, and the queue's ``max_in_progress`` (``claim_cap.py``),
read from the store's rules at each dequeue and handed over with it. A table made without
``expire_at`` (#18) fails a dequeue or failure ack with MySQL's 1054 before anything is applied:
the queue is migrated (``expiry.migrate``, on the thread pool) and the call sent again, once.

Python keeps what needs PyMySQL or a Python object: the queue's database name (``names.py``),
the body-limit check of bodies longer than a BLOB (``bodies.py``, before any statement, and
again when the server finds a body too long for its column), and the dequeue broker's
operations, which run ``MySQLStore``'s on the thread pool (``ThreadedHotPath``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pymysql

from pinlater._pinlater import AckGroup, ClaimedJobs, LocalIds, MySQLShard, NewJobBatch
from pinlater.backends.base import (
    CANCELLED,
    DEQUEUE_BYTES,
    EXPIRED,
    RESERVATION_PREFIX,
    Offload,
    sequential_ack_and_dequeue,
)
from pinlater.backends.mysql import expiry, names, queries
from pinlater.backends.mysql.bodies import BLOB_BYTES
from pinlater.backends.mysql.inserts import DEFAULT_MAX_ALLOWED_PACKET
from pinlater.backends.mysql.job_rows import CUSTOM_STATUS_LIMIT, MAX_CLAIM_LENGTH
from pinlater.backends.mysql.pool import error_code
from pinlater.backends.mysql.text_charsets import TEXT_REFUSED_ERRORS, fit_text
from pinlater.backends.threaded import BrokerOnThreadPool, ThreadedHotPath
from pinlater.errors import ErrorCode, PinLaterError, QueueNotFoundError, ShardConnectionError

if TYPE_CHECKING:
    from pinlater.backends.mysql.store import MySQLStore

__all__ = ["NativeMySQLHotPath"]

#: MySQL's ER_DATA_TOO_LONG (``store.DATA_TOO_LONG_ERROR``).
_DATA_TOO_LONG_ERROR = 1406

#: The SQL files the Rust hot path runs, by the names ``MySQLShard`` takes.
_SQL = {
    "session_setup": queries.SESSION_SETUP,
    "server_info": queries.SERVER_INFO,
    "enqueue_jobs": queries.ENQUEUE_JOBS,
    "enqueue_jobs_returning": queries.ENQUEUE_JOBS_RETURNING,
    "dequeue_jobs": queries.DEQUEUE_JOBS,
    "select_claimed_jobs": queries.SELECT_CLAIMED_JOBS,
    "peek_jobs": queries.PEEK_JOBS,
    "ack_succeeded_jobs": queries.ACK_SUCCEEDED_JOBS,
    "ack_failed_jobs": queries.ACK_FAILED_JOBS,
    "lock_claims": queries.LOCK_CLAIMS,
    "create_claim_lock_table": queries.CREATE_CLAIM_LOCK_TABLE,
    "list_jobs_tables": queries.LIST_JOBS_TABLES,
    "count_in_progress_table": queries.COUNT_IN_PROGRESS_TABLE,
    "ack_expire_jobs": queries.ACK_EXPIRE_JOBS,
    "expiring_readd": queries.EXPIRING_READD,
    "expired_count_reset": queries.EXPIRED_COUNT_RESET,
    "expired_count_tally": queries.EXPIRED_COUNT_TALLY,
    "expired_count_add_tallied": queries.EXPIRED_COUNT_ADD_TALLIED,
}

#: What ``MySQLShard`` hands ``settle`` for a failure: (kind, detail, MySQL error number, maybe applied).
NativeError = tuple[str, str, int, bool]


def _exception(shard: str, error: NativeError) -> BaseException:
    """The exception ``MySQLStore`` raises for the failure the Rust side reports."""
    kind, detail, code, maybe_applied = error
    if kind == "queue_not_found":
        return QueueNotFoundError(detail)
    if kind == "connection":
        return ShardConnectionError(shard, detail, maybe_applied=maybe_applied)
    if kind == "contention":
        return ShardConnectionError(shard, detail, contention=True)
    if kind == "server":  # unmapped: as PyMySQL raises it
        default = pymysql.err.InternalError if code < 1000 else pymysql.err.OperationalError
        cls: type[pymysql.err.MySQLError] = pymysql.err.error_map.get(code, default)
        exc: BaseException = cls(code, detail)
        return exc
    if kind == "priority":
        return PinLaterError(ErrorCode.PRIORITY_NOT_SUPPORTED, f"priority {detail} is not supported")
    return RuntimeError(f"MySQL shard {shard}: {detail}")


def _settler(shard: str) -> Callable[[asyncio.Future[Any], object, NativeError | None], None]:
    def settle(future: asyncio.Future[Any], value: object, error: NativeError | None) -> None:
        if future.done() or future.get_loop().is_closed():  # the caller gave up (cancelled)
            return
        if error is None:
            future.set_result(value)
        else:
            future.set_exception(_exception(shard, error))

    return settle


def _stop_watching(loop: asyncio.AbstractEventLoop, native: MySQLShard) -> None:
    """Remove ``native``'s wake-up socket from ``loop``; holding ``native`` keeps the socket open
    (its number cannot go to another file) until then."""
    loop.remove_reader(native.wake_fd())


class NativeMySQLHotPath(BrokerOnThreadPool):
    """``HotPath`` of one ``MySQLStore``: enqueue, dequeue and ack in Rust; the broker's
    operations through ``ThreadedHotPath``. ``close`` stops its threads and connections.

    Calls come from one event loop at a time (the server's): the wake-up socket is watched by
    the loop of the latest call, which completes every answer."""

    def __init__(self, store: MySQLStore, offload: Offload) -> None:
        self._store = store
        self._offload = offload
        self._threaded = ThreadedHotPath(store, offload)
        self._databases: dict[str, str] = {}
        #: The event loop watching the wake-up socket (the one the calls come from).
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        config = store.config
        self._native = MySQLShard(
            store.name,
            config.master.host,
            config.master.port,
            config.user,
            config.passwd,
            pool_size=store.pool_size,
            socket_timeout=store.socket_timeout,
            num_auto_retries=store.num_auto_retries,
            insert_id_strategy=store.insert_id_strategy,
            reservation_prefix=RESERVATION_PREFIX,
            custom_status_limit=CUSTOM_STATUS_LIMIT,
            cancelled_word=CANCELLED,
            expired_word=EXPIRED,
            sql={name: sql.text for name, sql in _SQL.items()},
            settle=_settler(store.name),
        )

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        """The running loop, watching the shard's wake-up socket (moved there from an earlier one)."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            if self._closed:  # as the Python store's closed pool fails
                raise ShardConnectionError(self._store.name, "the MySQL shard is closed")
            self._unwatch()
            loop.add_reader(self._native.wake_fd(), self._native.drain)
            self._loop = loop
        return loop

    def _unwatch(self) -> None:
        loop, self._loop = self._loop, None
        if loop is None or loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            loop.remove_reader(self._native.wake_fd())
        else:  # closed from another thread: the loop stops watching on its own thread
            loop.call_soon_threadsafe(_stop_watching, loop, self._native)

    def _database(self, queue: str) -> str:
        """The queue's database name (``names.database_name``: refuses a bad or too long name)."""
        database = self._databases.get(queue)
        if database is None:
            database = names.database_name(self._store.name, queue)
            if len(self._databases) >= 4096:  # queues are few; this only bounds a misuse
                self._databases.clear()
            self._databases[queue] = database
        return database

    # -- the hot path -------------------------------------------------------------------------

    async def enqueue_jobs(self, queue: str, jobs: NewJobBatch, now_ms: int) -> LocalIds:
        if not len(jobs):
            return LocalIds([])
        database = self._database(queue)
        long_bodies = jobs.body_bytes > BLOB_BYTES
        if long_bodies:
            await self._offload(self._check_bodies, queue, jobs)
        future: asyncio.Future[LocalIds] = self._running_loop().create_future()
        self._native.enqueue_jobs(queue, database, jobs, now_ms, future)
        try:
            return await future
        except pymysql.err.MySQLError as exc:
            if error_code(exc) in TEXT_REFUSED_ERRORS:
                # A custom status an original table's character set cannot hold: the enqueue was
                # rolled back; its statuses fitted to the tables, as the original's MySQL wrote
                # them, it runs again.
                jobs = await self._offload(self._fitted_jobs, queue, jobs)
                again: asyncio.Future[LocalIds] = self._running_loop().create_future()
                self._native.enqueue_jobs(queue, database, jobs, now_ms, again)
                return await again
            if not isinstance(exc, pymysql.err.DataError) or error_code(exc) != _DATA_TOO_LONG_ERROR:
                raise
            # The column changed under the cache: refused as the checks before would have.
            self._store.bodies.forget(queue)
            await self._offload(self._check_bodies, queue, jobs)
            raise PinLaterError(ErrorCode.ENQUEUE_REJECTED, f"a value is too long for its column: {exc}") from exc

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
        if limit <= 0:
            return ClaimedJobs([])
        if len(claim) > MAX_CLAIM_LENGTH:
            raise ValueError(f"claim descriptor longer than {MAX_CLAIM_LENGTH} characters")
        database = self._database(queue)
        cap = self._store.rules(queue).max_in_progress  # the rules as set now, per call
        if not dry_run and self._store.expire_met_due(queue, now_ms):
            await self._offload(self._store.expire_met, queue, now_ms)
        for attempt in (0, 1):
            future: asyncio.Future[ClaimedJobs] = self._running_loop().create_future()
            self._native.dequeue_jobs(queue, database, priority, limit, claim, now_ms, dry_run, cap, max_bytes, future)
            try:
                return await future
            except pymysql.err.MySQLError as exc:
                if attempt or error_code(exc) != expiry.UNKNOWN_COLUMN_ERROR:
                    raise
                await self._offload(expiry.migrate, self._store, queue)
        raise AssertionError("unreachable")

    async def ack_jobs(self, queue: str, acks: AckGroup, now_ms: int) -> None:
        if not len(acks):
            return
        database = self._database(queue)
        # Each failure below is before the acks' COMMIT (rolled back: nothing applied), and each
        # fix is made once: an original's table may need all three.
        kept_tried = fitted = migrated = False
        while True:
            future: asyncio.Future[None] = self._running_loop().create_future()
            self._native.ack_jobs(queue, database, acks, now_ms, future)
            try:
                await future
                return
            except QueueNotFoundError:
                # A priority the queue has no table of: its acks name no job, the others run again.
                kept = None if kept_tried else await self._offload(self._kept_acks, queue, acks)
                kept_tried = True
                if kept is None:
                    raise
                if not len(kept):
                    return
                acks = kept
            except pymysql.err.MySQLError as exc:
                code = error_code(exc)
                if code in TEXT_REFUSED_ERRORS and not fitted:
                    # A status an original table's character set cannot hold: fitted to the
                    # table, as the original's MySQL wrote it, and again.
                    acks = await self._offload(self._fitted_acks, queue, acks)
                    fitted = True
                elif code == expiry.UNKNOWN_COLUMN_ERROR and not migrated:
                    # A table made without expire_at: migrated (expiry.py), the acks run again.
                    await self._offload(expiry.migrate, self._store, queue)
                    migrated = True
                else:
                    raise

    def _fitted_jobs(self, queue: str, jobs: NewJobBatch) -> NewJobBatch:
        """``jobs`` with each custom status fitted to its table's character set (blocking)."""
        charsets = self._store.status_charsets(queue)
        return NewJobBatch(
            [(p, body, at, n, fit_text(status, charsets.get(p))) for p, body, at, n, status in jobs.to_list()]
        )

    def _fitted_acks(self, queue: str, acks: AckGroup) -> AckGroup:
        """``acks`` with each status fitted to its table's character set (``text_charsets.py``;
        blocking: it reads the tables' columns)."""
        charsets = self._store.status_charsets(queue)

        def fitted(items: list[tuple[int, int, str, int]]) -> list[tuple[int, int, str, int]]:
            return [(p, i, fit_text(status, charsets.get(p)), delay) for p, i, status, delay in items]

        return AckGroup(fitted(acks.succeeded()), fitted(acks.failed()))

    def _kept_acks(self, queue: str, acks: AckGroup) -> AckGroup | None:
        """``acks`` but those of a priority the queue has no table of (its tables read as
        ``MySQLStore.kept_priorities`` reads them; blocking), or None when the queue has no table
        at all or one of every priority named (the error was another table's: it stands)."""
        kept = set(self._store._read_body_columns(queue))
        if not kept or kept.issuperset(acks.priorities()):
            return None
        return AckGroup([a for a in acks.succeeded() if a[0] in kept], [a for a in acks.failed() if a[0] in kept])

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
        """One worker, one round trip for the acks and the claim (``MySQLShard``); in turn when
        the queue has expiries to end first, or its tables lack ``expire_at`` (migrated first)."""
        if not len(acks) or self._store.expire_met_due(queue, now_ms):
            return await sequential_ack_and_dequeue(self, queue, acks, priority, limit, claim, now_ms, max_bytes)
        if len(claim) > MAX_CLAIM_LENGTH:
            raise ValueError(f"claim descriptor longer than {MAX_CLAIM_LENGTH} characters")
        database = self._database(queue)
        cap = self._store.rules(queue).max_in_progress
        future: asyncio.Future[ClaimedJobs] = self._running_loop().create_future()
        self._native.ack_and_dequeue_jobs(queue, database, acks, priority, limit, claim, now_ms, cap, max_bytes, future)
        try:
            return await future
        except (pymysql.err.MySQLError, QueueNotFoundError) as exc:
            # A table made without expire_at, or none of an ack's priority: the statement that
            # failed ran nothing after it, and the acks may be repeated; ``ack_jobs`` migrates the
            # queue, or leaves out the acks that name no job, and runs them again.
            code = error_code(exc)
            if not isinstance(exc, QueueNotFoundError) and code != expiry.UNKNOWN_COLUMN_ERROR:
                if code not in TEXT_REFUSED_ERRORS:  # (a status its table cannot hold: fitted there)
                    raise
            return await sequential_ack_and_dequeue(self, queue, acks, priority, limit, claim, now_ms, max_bytes)

    # -- the rest ------------------------------------------------------------------------------

    def _check_bodies(self, queue: str, jobs: NewJobBatch) -> None:
        """``MySQLStore``'s refusal of a body its table cannot hold (blocking: it may read the
        queue's body columns); only the bodies longer than a BLOB cross back into Python."""
        packet = self._native.max_allowed_packet()
        if packet is None:
            info = self._store.pool.server_info
            packet = info.max_allowed_packet if info else DEFAULT_MAX_ALLOWED_PACKET
        for index, priority, body in self._native.long_bodies(jobs, BLOB_BYTES):
            what = f"the body of job {index} (counting from 0) of the request"
            self._store.bodies.check(queue, priority, body, what, packet)

    @property
    def worker_count(self) -> int:
        """Rust worker threads (each with its connection) started so far."""
        return self._native.worker_count()

    def unwatch(self) -> None:
        """Stop watching the wake-up socket (``MySQLStore.aclose``, on the loop's thread); a
        later call watches it again."""
        self._unwatch()

    def close(self) -> None:
        """Stop the workers once the calls they took are answered, and stop watching their
        wake-up socket. Idempotent."""
        self._closed = True
        self._native.close()
        self._unwatch()
