"""``AsyncPinLaterClient``: the asyncio client, the same API as ``PinLaterClient`` awaited.

One client belongs to one event loop at a time (its connections do); used from another loop it
drops the old connections and starts over.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import socket
from collections.abc import AsyncIterator, Iterable
from typing import Any, TypeVar

from pinlater.client import calls
from pinlater.client.calls import AckLike, Call, JobLike, StateLike
from pinlater.client.codec import decode, encode, frame_length
from pinlater.client.errors import PinLaterConnectionError
from pinlater.client.servers import Address, ServerSet, format_address, make_server_set
from pinlater.client.sync import default_source
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


class _AsyncConnection:
    __slots__ = ("name", "reader", "writer")

    def __init__(self, name: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.name = name
        self.reader = reader
        self.writer = writer

    def is_stale(self) -> bool:
        """Closed by the server (or by a failed call) while idle."""
        return self.writer.is_closing() or self.reader.at_eof()

    async def roundtrip(self, frame: bytes, timeout: float) -> bytes:
        # Not awaiting drain(): the reply can only come after the server read the whole request.
        self.writer.write(frame)
        try:
            async with asyncio.timeout(timeout):
                header = await self.reader.readexactly(4)
                return await self.reader.readexactly(frame_length(header, self.name))
        except (OSError, asyncio.IncompleteReadError, TimeoutError) as exc:
            raise PinLaterConnectionError(f"{self.name}: no reply: {exc!r}", address=self.name) from exc

    def close(self) -> None:
        try:
            self.writer.close()
        except RuntimeError:  # its loop is closed (the client moved on to another one)
            # The cleanup the closed loop can no longer be asked to run (asyncio's selector
            # transports; the socket is closed now, not by the collector with a warning).
            lost = getattr(self.writer.transport, "_call_connection_lost", None)
            if lost is not None:
                lost(None)


class _AsyncPool:
    def __init__(self, address: Address, size: int, connect_timeout: float, timeout: float) -> None:
        self.address = address
        self.name = format_address(address)
        self.connect_timeout = connect_timeout
        self.timeout = timeout
        self.idle: list[_AsyncConnection] = []
        self.slots = asyncio.Semaphore(size)
        self.closed = False

    async def acquire(self) -> _AsyncConnection:
        try:
            async with asyncio.timeout(self.timeout):
                await self.slots.acquire()
        except TimeoutError:
            raise PinLaterConnectionError(
                f"{self.name}: every connection busy for {self.timeout}s", address=self.name, sent=False
            ) from None
        while self.idle:
            conn = self.idle.pop()
            if not conn.is_stale():
                return conn
            conn.close()
        try:
            async with asyncio.timeout(self.connect_timeout):
                reader, writer = await asyncio.open_connection(*self.address)
        except (OSError, TimeoutError) as exc:
            self.slots.release()
            raise PinLaterConnectionError(
                f"cannot connect to {self.name}: {exc!r}", address=self.name, sent=False
            ) from exc
        except BaseException:
            self.slots.release()
            raise
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return _AsyncConnection(self.name, reader, writer)

    def release(self, conn: _AsyncConnection, broken: bool) -> None:
        if broken or self.closed:
            conn.close()
        else:
            self.idle.append(conn)
        self.slots.release()

    def close(self) -> None:
        self.closed = True
        for conn in self.idle:
            conn.close()
        self.idle.clear()


class AsyncPinLaterClient:
    """asyncio PinLater client: the arguments and behaviour of ``PinLaterClient``, awaited."""

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
        self._pools: dict[Address, _AsyncPool] = {}
        self._pools_version = -1
        self._loop: asyncio.AbstractEventLoop | None = None
        self._seqid = itertools.count(1)

    def _pool(self, address: Address) -> _AsyncPool:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            self.close()
            self._loop = loop
        if self._pools_version != self.servers.version:
            current = set(self.servers.addresses())
            for gone in [a for a in self._pools if a not in current]:
                self._pools.pop(gone).close()
            self._pools_version = self.servers.version
        pool = self._pools.get(address)
        if pool is None:
            pool = self._pools[address] = _AsyncPool(address, self.max_connections, self.connect_timeout, self.timeout)
        return pool

    async def call(self, call: Call[T]) -> T:
        """Send one call, with failover and the retries its safety allows (see ``PinLaterClient``)."""
        seqid = next(self._seqid) & 0x7FFFFFFF
        frame = encode(call.method, seqid, self.context, call.args)
        attempts = 0
        while True:
            order = self.servers.order()
            for address in order:
                attempts += 1
                pool = self._pool(address)
                try:
                    conn = await pool.acquire()
                except PinLaterConnectionError:
                    self.servers.mark_down(address)
                    if attempts > max(self.retries, len(order) - 1):
                        raise
                    continue
                broken = True
                try:
                    payload = await conn.roundtrip(frame, self.timeout + call.wait)
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
    def raw(self) -> AsyncRawClient:
        """Thrift structs in and out: ``await client.raw.enqueueJobs(request)``."""
        return AsyncRawClient(self)

    def close(self) -> None:
        for pool in self._pools.values():
            pool.close()
        self._pools.clear()

    async def __aenter__(self) -> AsyncPinLaterClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    # -- the contract -----------------------------------------------------------------------

    async def create_queue(self, name: str) -> None:
        await self.call(calls.create_queue(name))

    async def delete_queue(self, name: str, password: str) -> None:
        await self.call(calls.delete_queue(name, password))

    async def queue_names(self) -> set[str]:
        return await self.call(calls.queue_names())

    async def enqueue(self, queue: str, jobs: Iterable[JobLike]) -> EnqueueResult:
        """As ``PinLaterClient.enqueue``: the descriptors, with ``.deduplicated``."""
        return await self.call(calls.enqueue(queue, jobs))

    async def dequeue(
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
        """As ``PinLaterClient.dequeue``, ``wait`` included."""
        return await self.call(calls.dequeue(queue, limit, succeeded, failed, dry_run, coverage, wait))

    async def ack(self, queue: str, succeeded: Iterable[AckLike] = (), failed: Iterable[AckLike] = ()) -> None:
        await self.call(calls.ack(queue, succeeded, failed))

    async def checkpoint(self, queue: str, checkpoints: Iterable[Checkpoint]) -> None:
        await self.call(calls.checkpoint(queue, checkpoints))

    async def lookup(self, descriptors: Iterable[str], include_body: bool = False) -> dict[str, JobInfo]:
        return await self.call(calls.lookup(descriptors, include_body))

    async def count(
        self,
        queue: str,
        state: StateLike,
        priority: int | None = None,
        *,
        count_future: bool = False,
        body_regex: str | None = None,
    ) -> int:
        return await self.call(calls.count(queue, state, priority, count_future, body_regex))

    async def scan(
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
        """As ``PinLaterClient.scan``: one page, with the continuation of the next."""
        return await self.call(calls.scan(queue, state, priority, scan_future, limit, body_regex, continuation))

    async def scan_all(
        self,
        queue: str,
        state: StateLike,
        priority: int | None = None,
        *,
        scan_future: bool = False,
        page_size: int = 100,
        body_regex: str | None = None,
        continuation: str = SCAN_START,
    ) -> AsyncIterator[JobInfo]:
        """As ``PinLaterClient.scan_all``: ``async for job in client.scan_all(...)``."""
        if page_size < 1:
            raise ValueError(f"page_size must be at least 1, not {page_size}")
        sent: str | None = continuation
        while sent is not None:
            page = await self.scan(
                queue,
                state,
                priority,
                scan_future=scan_future,
                limit=page_size,
                body_regex=body_regex,
                continuation=sent,
            )
            for job in page.jobs:
                yield job
            sent = calls.next_page(sent, page)

    async def retry_failed(
        self, queue: str, priority: int = 1, *, attempts: int = 1, run_after_ms: int | None = None, limit: int = 1000
    ) -> int:
        return await self.call(calls.retry_failed(queue, priority, attempts, run_after_ms, limit))

    async def delete_jobs(
        self, queue: str, state: StateLike, priority: int = 1, *, body_regex: str | None = None, limit: int = 1000
    ) -> int:
        return await self.call(calls.delete_jobs(queue, state, priority, body_regex, limit))

    # -- job control (pinlater extensions) --------------------------------------------------

    async def cancel(self, queue: str, descriptors: Iterable[str]) -> int:
        """As ``PinLaterClient.cancel``: how many jobs changed."""
        return await self.call(calls.cancel(queue, descriptors))

    async def upsert_schedule(
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
        """As ``PinLaterClient.upsert_schedule``."""
        await self.call(
            calls.upsert_schedule(
                queue, name, body, cron, interval_ms, priority, attempts, custom_status, group_key, paused
            )
        )

    async def delete_schedule(self, queue: str, name: str) -> None:
        await self.call(calls.delete_schedule(queue, name))

    async def list_schedules(self, queue: str) -> list[ScheduleInfo]:
        return await self.call(calls.list_schedules(queue))


class AsyncRawClient:
    """``await client.raw.<thriftMethod>(*args)``: the contract's methods with Thrift structs."""

    def __init__(self, client: AsyncPinLaterClient) -> None:
        self._client = client

    def __getattr__(self, method: str) -> Any:
        async def invoke(*args: Any) -> Any:
            return await self._client.call(calls.raw(method, args))

        return invoke
