"""Thrift framed transport on asyncio: 4-byte big-endian length, then one message.

Invariants:

* Each connection answers its requests one at a time, in the order they arrived, so pipelined
  calls get their replies in order. Concurrency comes from many connections; a global semaphore
  caps the requests being handled at once (``max_concurrent_requests``).
* A frame length of zero, below zero or above ``max_frame_bytes`` closes that connection (one
  warning naming the peer). So does a payload the dispatcher cannot decode (``ProtocolError``),
  after its PROTOCOL_ERROR reply, if it has one. A peer that closes mid-frame just goes away.
  Nothing one connection sends can affect another.
* A connection with ``PIPELINE_DEPTH`` undecoded frames waiting stops being read until it drains,
  and a connection whose peer does not read its replies stops being served until it does.
* ``stop(grace)`` stops accepting, drops frames not yet started, lets requests in flight finish
  for up to ``grace`` seconds, then closes every connection.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import resource
import struct
import time
from dataclasses import dataclass
from typing import Any

from pinlater.server.dispatch import Dispatcher, ProtocolError

__all__ = [
    "DEFAULT_MAX_CONCURRENT_REQUESTS",
    "DEFAULT_MAX_CONNECTIONS",
    "DEFAULT_MAX_FRAME_BYTES",
    "FramedServer",
    "ServerStats",
]

log = logging.getLogger(__name__)

_I32 = struct.Struct(">i")

DEFAULT_MAX_FRAME_BYTES = 16 * 1024 * 1024
DEFAULT_MAX_CONNECTIONS = 10_000
DEFAULT_MAX_CONCURRENT_REQUESTS = 1_024
#: Frames queued on one connection before it stops being read (and read again below half).
PIPELINE_DEPTH = 64
#: Listen backlog: bursts of thousands of connects must not overflow the accept queue.
LISTEN_BACKLOG = 4096
#: Loop turns stop() gives accepts under way to reach connection_made.
ACCEPT_SETTLE_TURNS = 4
#: How long stop() waits for aborted transports to report connection_lost.
CLOSE_TIMEOUT_SECONDS = 2.0
#: At most one "too many connections" warning per this many seconds.
REJECT_LOG_INTERVAL_SECONDS = 5.0


@dataclass(frozen=True, slots=True)
class ServerStats:
    """A snapshot of the server's counters (totals since start, except the two gauges)."""

    connections_open: int
    connections_accepted: int
    connections_rejected: int
    requests_in_flight: int
    frames_in: int
    frames_out: int
    protocol_errors: int
    oversized_frames: int
    #: Frames whose length was zero or negative.
    invalid_frame_lengths: int
    truncated_frames: int


@dataclass(slots=True)
class _Counters:
    connections_accepted: int = 0
    connections_rejected: int = 0
    requests_in_flight: int = 0
    frames_in: int = 0
    frames_out: int = 0
    protocol_errors: int = 0
    oversized_frames: int = 0
    invalid_frame_lengths: int = 0
    truncated_frames: int = 0


def raise_open_files_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit (thousands of sockets); return the soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as exc:
            log.warning("could not raise the open files limit from %d to %d: %s", soft, target, exc)
    return soft


class _Connection(asyncio.Protocol):
    """One client connection: split frames, serve them in order, write the replies."""

    def __init__(self, server: FramedServer) -> None:
        self._server = server
        self._transport: asyncio.Transport | None = None
        self.peer: Any = None
        self._buf = bytearray()
        self._queue: collections.deque[bytes] = collections.deque()
        self.worker: asyncio.Task[None] | None = None
        self._reading_paused = False
        self._writable: asyncio.Future[None] | None = None
        #: No more frames are taken; close once the worker is done.
        self._closing = False
        self._lost = False

    # -- asyncio callbacks ----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        self.peer = transport.get_extra_info("peername")
        self._server._opened(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self._queue.clear()
        self._buf.clear()
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)
        self._server._closed(self)

    def data_received(self, data: bytes) -> None:
        if self._closing:
            return
        if self._buf:  # a frame spans reads: grow the buffer in place (no quadratic copying)
            self._buf += data
            with memoryview(self._buf) as view:
                pos, bad_length = self._split_frames(view)
            del self._buf[:pos]
        else:  # fast path: frames are sliced straight out of ``data``
            pos, bad_length = self._split_frames(data)
            if pos < len(data):
                self._buf = bytearray(data[pos:])
        if self._queue:
            if self.worker is None:
                self.worker = self._server._loop().create_task(self._serve())
            if len(self._queue) >= PIPELINE_DEPTH and not self._reading_paused:
                self._reading_paused = True
                self._transport_or_fail().pause_reading()
        if bad_length is not None:
            self._bad_length(bad_length)

    def _split_frames(self, view: bytes | memoryview) -> tuple[int, int | None]:
        """Queue every whole frame in ``view``; return (bytes consumed, bad frame length or None)."""
        max_bytes = self._server.max_frame_bytes
        stats = self._server._counters
        pos, end = 0, len(view)
        while end - pos >= 4:
            length: int = _I32.unpack_from(view, pos)[0]
            if length <= 0 or length > max_bytes:
                return pos, length
            if end - pos - 4 < length:
                break
            self._queue.append(bytes(view[pos + 4 : pos + 4 + length]))
            stats.frames_in += 1
            pos += 4 + length
        return pos, None

    def eof_received(self) -> bool:
        if self._buf:
            self._server._counters.truncated_frames += 1
            self._buf.clear()
        self._closing = True
        # Keep the socket half-open while queued requests are answered; close now if idle.
        return self.worker is not None

    def pause_writing(self) -> None:
        if self._writable is None or self._writable.done():
            self._writable = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)

    # -- serving --------------------------------------------------------------------------------

    async def _serve(self) -> None:
        server = self._server
        stats = server._counters
        transport = self._transport_or_fail()
        try:
            while self._queue and not self._lost:
                payload = self._queue.popleft()
                if self._reading_paused and len(self._queue) <= PIPELINE_DEPTH // 2 and not self._closing:
                    self._reading_paused = False
                    transport.resume_reading()
                async with server._semaphore:
                    stats.requests_in_flight += 1
                    try:
                        reply = await server.dispatcher.handle_frame(payload)
                    except ProtocolError as exc:
                        stats.protocol_errors += 1
                        log.warning("closing connection from %s: %s", self.peer, exc)
                        if exc.reply is not None:
                            self._write(exc.reply)
                        self._begin_close()
                        break
                    except Exception:  # the dispatcher answers handler errors itself: this is a bug
                        log.exception("closing connection from %s: dispatcher failed", self.peer)
                        self._begin_close()
                        break
                    finally:
                        stats.requests_in_flight -= 1
                if reply is not None:
                    self._write(reply)
                if self._writable is not None and not self._writable.done():
                    await self._writable
        finally:
            self.worker = None
            if self._closing and not self._lost:
                transport.close()

    def _write(self, reply: bytes) -> None:
        if self._lost:
            return
        self._transport_or_fail().write(len(reply).to_bytes(4, "big") + reply)
        self._server._counters.frames_out += 1

    # -- closing --------------------------------------------------------------------------------

    def _bad_length(self, length: int) -> None:
        stats = self._server._counters
        if length <= 0:
            stats.invalid_frame_lengths += 1
            log.warning("closing connection from %s: frame length %d", self.peer, length)
        else:
            stats.oversized_frames += 1
            log.warning(
                "closing connection from %s: frame of %d bytes exceeds %d",
                self.peer,
                length,
                self._server.max_frame_bytes,
            )
        self._begin_close()

    def _begin_close(self) -> None:
        """Take no more frames; requests already queued are answered, then the socket closes."""
        if self._closing and self.worker is None:
            return
        self._closing = True
        self._buf.clear()
        transport = self._transport_or_fail()
        if not self._reading_paused and not self._lost:
            self._reading_paused = True
            transport.pause_reading()
        if self.worker is None:
            transport.close()

    def shutdown(self) -> None:
        """Server stop: drop frames not yet started, finish the one in flight, then close."""
        self._queue.clear()
        self._begin_close()

    def abort(self) -> None:
        self._closing = True
        self._queue.clear()
        if self._transport is not None and not self._lost:
            self._transport.abort()

    def _transport_or_fail(self) -> asyncio.Transport:
        assert self._transport is not None, "connection not made yet"
        return self._transport


class FramedServer:
    """Serves ``dispatcher`` over Thrift framed transport on ``host:port`` (0 picks a free port)."""

    def __init__(
        self,
        dispatcher: Dispatcher,
        host: str,
        port: int,
        *,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        max_concurrent_requests: int = DEFAULT_MAX_CONCURRENT_REQUESTS,
    ) -> None:
        if max_frame_bytes <= 0 or max_connections <= 0 or max_concurrent_requests <= 0:
            raise ValueError("max_frame_bytes, max_connections and max_concurrent_requests must be positive")
        self.dispatcher = dispatcher
        self.host = host
        self.port = port
        self.max_frame_bytes = max_frame_bytes
        self.max_connections = max_connections
        self.max_concurrent_requests = max_concurrent_requests
        self._counters = _Counters()
        #: Connections being served.
        self._connections: set[_Connection] = set()
        #: Every transport made and not yet lost, refused ones included.
        self._live: set[_Connection] = set()
        self._all_lost: asyncio.Future[None] | None = None
        self._server: asyncio.Server | None = None
        self._semaphore = asyncio.Semaphore(max_concurrent_requests)
        self._last_reject_log = float("-inf")
        self._accepting = False
        self._event_loop: asyncio.AbstractEventLoop | None = None

    async def start(self) -> None:
        """Bind and start accepting; ``self.port`` is the bound port afterwards."""
        if self._server is not None:
            raise RuntimeError("server already started")
        limit = raise_open_files_limit()
        if limit != resource.RLIM_INFINITY and limit < self.max_connections + 64:
            log.warning("open files limit %d is below max_connections %d", limit, self.max_connections)
        loop = self._event_loop = asyncio.get_running_loop()
        self._accepting = True
        self._server = await loop.create_server(
            lambda: _Connection(self), self.host, self.port, backlog=LISTEN_BACKLOG, reuse_address=True
        )
        self.port = self._server.sockets[0].getsockname()[1]
        log.info("thrift server listening on %s:%d", self.host, self.port)

    async def stop(self, grace_seconds: float = 10.0) -> None:
        """Stop accepting, let requests in flight finish (at most ``grace_seconds``), close all."""
        server, self._server = self._server, None
        if server is None:
            return
        self._accepting = False
        await self._stop_listening(server)
        connections = list(self._connections)
        for conn in connections:
            conn.shutdown()
        workers = [c.worker for c in connections if c.worker is not None]
        if workers:
            _, pending = await asyncio.wait(workers, timeout=grace_seconds)
            if pending:
                log.warning("cancelling %d requests still running after %.1fs", len(pending), grace_seconds)
                for task in pending:
                    task.cancel()
                await asyncio.gather(*pending, return_exceptions=True)
        # Abort every transport and await its connection_lost, so none is left for the garbage
        # collector (or a closed loop) to find.
        for conn in list(self._live):
            conn.abort()
        if self._live:
            self._all_lost = self._loop().create_future()
            try:
                await asyncio.wait_for(self._all_lost, CLOSE_TIMEOUT_SECONDS)
            except TimeoutError:
                log.warning("%d connections did not close", len(self._live))
        await server.wait_closed()

    async def _stop_listening(self, server: asyncio.Server) -> None:
        """Close the listening sockets without stranding connections accepted a moment ago.

        An accept creates its transport one loop turn later, and Python 3.11's ``Server._attach``
        asserts (leaking that socket) if the server was closed in between. So: stop reading the
        listening sockets, let accepts under way reach connection_made (where they are refused),
        then close.
        """
        loop = self._loop()
        for sock in server.sockets:
            try:
                loop.remove_reader(sock.fileno())
            except (NotImplementedError, ValueError, OSError):  # a loop without readers: close at once
                pass
        for _ in range(ACCEPT_SETTLE_TURNS):
            await asyncio.sleep(0)
        server.close()

    def stats(self) -> ServerStats:
        c = self._counters
        return ServerStats(
            connections_open=len(self._connections),
            connections_accepted=c.connections_accepted,
            connections_rejected=c.connections_rejected,
            requests_in_flight=c.requests_in_flight,
            frames_in=c.frames_in,
            frames_out=c.frames_out,
            protocol_errors=c.protocol_errors,
            oversized_frames=c.oversized_frames,
            invalid_frame_lengths=c.invalid_frame_lengths,
            truncated_frames=c.truncated_frames,
        )

    # -- called by connections ------------------------------------------------------------------

    def _opened(self, conn: _Connection) -> None:
        self._live.add(conn)
        if not self._accepting or len(self._connections) >= self.max_connections:
            self._counters.connections_rejected += 1
            now = time.monotonic()
            if now - self._last_reject_log >= REJECT_LOG_INTERVAL_SECONDS:
                self._last_reject_log = now
                log.warning("refusing connection from %s: %d connections open", conn.peer, len(self._connections))
            conn.abort()
            return
        self._counters.connections_accepted += 1
        self._connections.add(conn)

    def _loop(self) -> asyncio.AbstractEventLoop:
        assert self._event_loop is not None, "server not started"
        return self._event_loop

    def _closed(self, conn: _Connection) -> None:
        self._connections.discard(conn)
        self._live.discard(conn)
        if not self._live and self._all_lost is not None and not self._all_lost.done():
            self._all_lost.set_result(None)
