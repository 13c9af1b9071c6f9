"""``PinLaterClient``: the synchronous client, thread-safe, with a bounded pool per server."""

from __future__ import annotations

import itertools
import os
import select
import socket
import sys
import threading
import time
import weakref
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

from pinlater.client import calls
from pinlater.client.calls import AckLike, Call, JobLike, StateLike
from pinlater.client.codec import decode, encode, frame_length
from pinlater.client.errors import PinLaterConnectionError
from pinlater.client.servers import Address, ServerSet, format_address, make_server_set
from pinlater.client.types import (
    SCAN_START,
    Checkpoint,
    DequeuedJob,
    EnqueueResult,
    JobInfo,
    ScanResult,
    ScheduleInfo,
)
from pinlater.errors import PinLaterError
from pinlater.idl import idl

T = TypeVar("T")

#: Most bytes one recv of a reply asks for (each call allocates what it asks for).
READ_PIECE = 1 << 20


def default_source() -> str:
    """The RequestContext source of the original's callers: ``{program}:{hostname}``."""
    argv0 = sys.argv[0] if sys.argv and sys.argv[0] not in ("", "-c", "-m") else "python"
    program = os.path.basename(argv0).removesuffix(".py")
    if program == "__main__":  # python -m package: name the package
        program = os.path.basename(os.path.dirname(argv0)) or "python"
    return f"{program}:{socket.gethostname()}"


class _Connection:
    __slots__ = ("address", "name", "sock")

    def __init__(self, address: Address, connect_timeout: float, timeout: float) -> None:
        self.address = address
        self.name = format_address(address)
        try:
            self.sock = socket.create_connection(address, timeout=connect_timeout)
        except OSError as exc:
            message = f"cannot connect to {self.name}: {exc}"
            raise PinLaterConnectionError(message, address=self.name, sent=False) from exc
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.settimeout(timeout)

    def is_stale(self) -> bool:
        """An idle connection with something to read was closed by the server (or is out of step).
        Asked with poll, not select, which fails for a descriptor past 1023 (a process with many
        files open would have opened a connection per call)."""
        poller = select.poll()
        try:
            poller.register(self.sock, select.POLLIN)
            return bool(poller.poll(0))
        except (OSError, ValueError):  # (ValueError: a closed socket)
            return True

    def roundtrip(self, frame: bytes, wait: float = 0.0) -> bytes:
        """Send a frame and read the reply, all of it within the timeout (plus ``wait`` seconds):
        a server that trickles its reply is cut off, as one that sends nothing is."""
        try:
            self.sock.sendall(frame)
        except OSError as exc:  # an incomplete frame is never processed: not sent
            raise PinLaterConnectionError(f"{self.name}: send failed: {exc}", address=self.name, sent=False) from exc
        timeout = self.sock.gettimeout()
        deadline = None if timeout is None else time.monotonic() + timeout + wait
        try:
            return self._read(frame_length(self._read(4, deadline), self.name), deadline)
        except OSError as exc:
            raise PinLaterConnectionError(f"{self.name}: no reply: {exc}", address=self.name) from exc
        finally:
            self.sock.settimeout(timeout)

    def _read(self, n: int, deadline: float | None) -> bytes:
        # Read in pieces of at most READ_PIECE bytes: recv(n) allocates n bytes for each call,
        # so a frame header claiming 256 MiB made each recv of a trickled reply allocate that.
        parts = []
        got = 0
        while got < n:
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"the reply took longer than the timeout ({got} of {n} bytes came)")
                self.sock.settimeout(left)
            data = self.sock.recv(min(n - got, READ_PIECE))
            if not data:
                raise PinLaterConnectionError(f"{self.name}: connection closed by the server", address=self.name)
            if got == 0 and len(data) == n:
                return data
            parts.append(data)
            got += len(data)
        return b"".join(parts)

    def close(self) -> None:
        self.sock.close()


class _Pool:
    """Idle connections to one server; at most ``size`` open at once (callers wait for one)."""

    def __init__(self, address: Address, size: int, connect_timeout: float, timeout: float) -> None:
        self.address = address
        self.size = size
        self.connect_timeout = connect_timeout
        self.timeout = timeout
        self.idle: list[_Connection] = []
        self.open = 0
        self.closed = False
        self.cond = threading.Condition()

    def acquire(self) -> _Connection:
        with self.cond:
            while True:
                while self.idle:
                    conn = self.idle.pop()
                    if not conn.is_stale():
                        return conn
                    conn.close()
                    self.open -= 1
                if self.open < self.size:
                    self.open += 1
                    break
                if not self.cond.wait(self.timeout):
                    name = format_address(self.address)
                    raise PinLaterConnectionError(
                        f"{name}: all {self.size} connections busy for {self.timeout}s", address=name, sent=False
                    )
        try:
            return _Connection(self.address, self.connect_timeout, self.timeout)
        except BaseException:
            self._forget()
            raise

    def release(self, conn: _Connection, broken: bool) -> None:
        if broken or self.closed:
            conn.close()
            self._forget()
            return
        with self.cond:
            self.idle.append(conn)
            self.cond.notify()

    def _forget(self) -> None:
        with self.cond:
            self.open -= 1
            self.cond.notify()

    def close(self) -> None:
        with self.cond:
            self.closed = True
            for conn in self.idle:
                conn.close()
            self.open -= len(self.idle)
            self.idle.clear()


#: Every client of this process, each told of a fork in the child (``_forked``).
_CLIENTS: weakref.WeakSet[PinLaterClient] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for client in list(_CLIENTS):
        client._forked()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class PinLaterClient:
    """Synchronous PinLater client; one instance is meant to be shared by threads.

    ``servers``: "host:port", "h1:p1,h2:p2", a list of addresses or a ``ServerSet``;
    ``server_set``: a ServerSet file instead. ``timeout`` bounds each whole reply (seconds),
    ``connect_timeout`` each connect; ``max_connections`` is per server. Calls that are safe to
    repeat are retried on connection errors up to ``retries`` times on the next servers; other
    calls only when the request never left (``calls.Call.safe``). Connection failures raise
    ``PinLaterConnectionError``; server errors a ``PinLaterError`` subclass with its code.
    """

    def __init__(
        self,
        servers: str | Iterable[str | Address] | ServerSet | None = None,
        *,
        server_set: str | os.PathLike[str] | None = None,
        source: str | None = None,
        timeout: float = 30.0,
        connect_timeout: float = 5.0,
        max_connections: int = 8,
        retries: int = 2,
    ) -> None:
        self.servers = make_server_set(servers, server_set)
        self.source = source or default_source()
        self.context = idl.RequestContext(source=self.source)
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.max_connections = max_connections
        self.retries = retries
        self._pools: dict[Address, _Pool] = {}
        self._pools_version = -1
        self._lock = threading.Lock()
        self._seqid = itertools.count(1)
        _CLIENTS.add(self)

    def _forked(self) -> None:
        """In a child process just forked: the pooled sockets are the parent's too (replies went to
        whichever process read first, and each side got the other's descriptors), so the child
        leaves them to it and opens its own; its locks and seqids start afresh."""
        for pool in self._pools.values():
            for conn in pool.idle:
                conn.close()  # (the child's copy of the descriptor: the parent's stays open)
        self._pools = {}
        self._pools_version = -1
        self._lock = threading.Lock()
        self._seqid = itertools.count(int.from_bytes(os.urandom(3), "big") + 1)

    # -- plumbing ---------------------------------------------------------------------------

    def _pool(self, address: Address) -> _Pool:
        pool = self._pools.get(address)
        if pool is None or self._pools_version != self.servers.version:
            with self._lock:
                if self._pools_version != self.servers.version:  # drop servers that left the set
                    current = set(self.servers.addresses())
                    for gone in [a for a in self._pools if a not in current]:
                        self._pools.pop(gone).close()
                    self._pools_version = self.servers.version
                pool = self._pools.get(address)
                if pool is None:
                    pool = self._pools[address] = _Pool(
                        address, self.max_connections, self.connect_timeout, self.timeout
                    )
        return pool

    def call(self, call: Call[T]) -> T:
        """Send one call, with failover and the retries its safety allows."""
        seqid = next(self._seqid) & 0x7FFFFFFF
        frame = encode(call.method, seqid, self.context, call.args)
        attempts = 0
        while True:
            order = self.servers.order()
            for address in order:
                attempts += 1
                pool = self._pool(address)
                try:
                    conn = pool.acquire()
                except PinLaterConnectionError:
                    self.servers.mark_down(address)
                    if attempts > max(self.retries, len(order) - 1):
                        raise
                    continue
                broken = True
                try:
                    payload = conn.roundtrip(frame, call.wait)
                    try:
                        result = decode(call.method, seqid, payload, conn.name)
                    except PinLaterConnectionError:
                        raise
                    except PinLaterError:  # the server's answer, whole: the connection is in step
                        broken = False
                        raise
                    broken = False
                except PinLaterConnectionError as exc:
                    if isinstance(exc.__cause__, TimeoutError):  # (it took the call, and no answer came in time)
                        self.servers.mark_down(address)
                    if (exc.sent and not call.safe) or attempts > self.retries:
                        raise
                    continue
                finally:
                    pool.release(conn, broken)
                self.servers.mark_up(address)
                return call.result(result)

    @property
    def raw(self) -> RawClient:
        """Thrift structs in and out: ``client.raw.enqueueJobs(request)`` (context added)."""
        return RawClient(self)

    def close(self) -> None:
        with self._lock:
            for pool in self._pools.values():
                pool.close()
            self._pools.clear()

    def __enter__(self) -> PinLaterClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the contract -----------------------------------------------------------------------

    def create_queue(self, name: str) -> None:
        self.call(calls.create_queue(name))

    def delete_queue(self, name: str, password: str) -> None:
        self.call(calls.delete_queue(name, password))

    def queue_names(self) -> set[str]:
        return self.call(calls.queue_names())

    def enqueue(self, queue: str, jobs: Iterable[JobLike]) -> EnqueueResult:
        """Enqueue jobs (bytes, str or ``Job``); returns their descriptors in the same order, as
        an ``EnqueueResult`` (a ``list[str]``) whose ``deduplicated[i]`` is True where job ``i``
        was not created because its ``dedup_key`` was held: its descriptor is the holder's."""
        return self.call(calls.enqueue(queue, jobs))

    def dequeue(
        self,
        queue: str,
        limit: int = 1,
        *,
        succeeded: Iterable[AckLike] = (),
        failed: Iterable[AckLike] = (),
        dry_run: bool = False,
        coverage: float = 1.0,
        wait: float = 0.0,
    ) -> list[DequeuedJob]:
        """Claim up to ``limit`` jobs, applying the acks given first (piggy-backed). With
        ``wait`` > 0 (seconds, at most 30), a pinlater server holds the call until a job is
        ready or the time is up (long polling); the original PinLater answers at once."""
        return self.call(calls.dequeue(queue, limit, succeeded, failed, dry_run, coverage, wait))

    def ack(self, queue: str, succeeded: Iterable[AckLike] = (), failed: Iterable[AckLike] = ()) -> None:
        self.call(calls.ack(queue, succeeded, failed))

    def checkpoint(self, queue: str, checkpoints: Iterable[Checkpoint]) -> None:
        self.call(calls.checkpoint(queue, checkpoints))

    def lookup(self, descriptors: Iterable[str], include_body: bool = False) -> dict[str, JobInfo]:
        return self.call(calls.lookup(descriptors, include_body))

    def count(
        self,
        queue: str,
        state: StateLike,
        priority: int | None = None,
        *,
        count_future: bool = False,
        body_regex: str | None = None,
    ) -> int:
        return self.call(calls.count(queue, state, priority, count_future, body_regex))

    def scan(
        self,
        queue: str,
        state: StateLike,
        priority: int | None = None,
        *,
        scan_future: bool = False,
        limit: int = 100,
        body_regex: str | None = None,
        continuation: str = SCAN_START,
    ) -> ScanResult:
        """One page of up to ``limit`` jobs in ``state`` (a ``JobState`` or its name, as for
        ``count`` and ``delete_jobs``), newest run-after first, no bodies. Pass the page's
        ``continuation`` back with the same arguments for the next page; ``"-1"`` (``page.done``)
        means nothing is left. A job that stays in ``state`` for the whole scan comes once."""
        return self.call(calls.scan(queue, state, priority, scan_future, limit, body_regex, continuation))

    def scan_all(
        self,
        queue: str,
        state: StateLike,
        priority: int | None = None,
        *,
        scan_future: bool = False,
        page_size: int = 100,
        body_regex: str | None = None,
        continuation: str = SCAN_START,
    ) -> Iterator[JobInfo]:
        """Every job of the scan, following continuations to the end: one ``scanJobs`` call per
        ``page_size`` jobs, made as the iteration reaches it (a caller that stops early sends no
        more). Jobs that enter ``state`` during the scan may or may not appear; one that stays
        in it throughout appears exactly once."""
        if page_size < 1:
            raise ValueError(f"page_size must be at least 1, not {page_size}")
        sent: str | None = continuation
        while sent is not None:
            page = self.scan(
                queue,
                state,
                priority,
                scan_future=scan_future,
                limit=page_size,
                body_regex=body_regex,
                continuation=sent,
            )
            yield from page.jobs
            sent = calls.next_page(sent, page)

    def retry_failed(
        self, queue: str, priority: int = 1, *, attempts: int = 1, run_after_ms: int | None = None, limit: int = 1000
    ) -> int:
        return self.call(calls.retry_failed(queue, priority, attempts, run_after_ms, limit))

    def delete_jobs(
        self, queue: str, state: StateLike, priority: int = 1, *, body_regex: str | None = None, limit: int = 1000
    ) -> int:
        return self.call(calls.delete_jobs(queue, state, priority, body_regex, limit))

    # -- job control (pinlater extensions; the original server answers UNKNOWN for them) -----

    def cancel(self, queue: str, descriptors: Iterable[str]) -> int:
        """Cancel jobs of ``queue``; returns how many changed. A PENDING job (now or future)
        becomes FAILED with no attempts left and "cancelled" appended to its custom status; an
        IN_PROGRESS one gets no further attempt (a failure ack or claim timeout ends it FAILED
        the same way; a success ack still counts). Finished and unknown jobs are left alone."""
        return self.call(calls.cancel(queue, descriptors))

    def upsert_schedule(
        self,
        queue: str,
        name: str,
        *,
        body: bytes | str,
        cron: str | None = None,
        interval_ms: int | None = None,
        priority: int = 1,
        attempts: int = 2,
        custom_status: str = "",
        group_key: str | None = None,
        paused: bool = False,
    ) -> None:
        """Create or replace the schedule ``name`` of ``queue``: a job with these fields enqueued
        at each tick of ``cron`` (five fields, UTC) or every ``interval_ms`` (at least 1,000),
        exactly one of the two; the next tick counts from now. ``EnqueueRejected`` (with the
        reason) for a bad cron, both or neither of cron and interval, or a job the queue's store
        refuses (a group key where groups are not kept); ``QueueNotFound`` for a missing queue."""
        self.call(
            calls.upsert_schedule(
                queue, name, body, cron, interval_ms, priority, attempts, custom_status, group_key, paused
            )
        )

    def delete_schedule(self, queue: str, name: str) -> None:
        """Remove the schedule (an unknown name is a no-op); jobs it enqueued stay."""
        self.call(calls.delete_schedule(queue, name))

    def list_schedules(self, queue: str) -> list[ScheduleInfo]:
        """The queue's schedules, by name, each with its next tick (``next_run_ms``)."""
        return self.call(calls.list_schedules(queue))


class RawClient:
    """``client.raw.<thriftMethod>(*args)``: the contract's methods with Thrift structs."""

    def __init__(self, client: PinLaterClient) -> None:
        self._client = client

    def __getattr__(self, method: str) -> Any:
        def invoke(*args: Any) -> Any:
            return self._client.call(calls.raw(method, args))

        return invoke
