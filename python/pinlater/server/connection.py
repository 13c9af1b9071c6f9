"""One client connection of the framed transport: split frames, serve them in order, write replies.

``FramedServer`` (``transport.py``) owns the limits; a connection reports to it what it holds
(``_hold``), and the server's sweep closes it when a frame is late or it is idle. The invariants
are stated in ``transport.py``'s module doc.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import struct
import time
from typing import TYPE_CHECKING, Any

from pinlater.server.dispatch import ProtocolError

if TYPE_CHECKING:
    from pinlater.server.transport import FramedServer

__all__ = ["PIPELINE_DEPTH", "Connection"]

log = logging.getLogger("pinlater.server.transport")

_I32 = struct.Struct(">i")

#: Frames queued on one connection before it stops being read (and read again below half).
PIPELINE_DEPTH = 64


class Connection(asyncio.Protocol):
    """One client connection: split frames, serve them in order, write the replies."""

    def __init__(self, server: FramedServer, peer: Any = None) -> None:
        self._server = server
        self._transport: asyncio.Transport | None = None
        #: The peer's address, from accept() (the transport cannot tell once the peer has reset).
        self.peer: Any = peer
        self._buf = bytearray()
        self._queue: collections.deque[bytes] = collections.deque()
        self.worker: asyncio.Task[None] | None = None
        self._reading_paused = False
        self._writable: asyncio.Future[None] | None = None
        #: No more frames are taken; close once the worker is done.
        self._closing = False
        self._lost = False
        #: Bytes of the unfinished frame counted against the server's budget (``len(_buf)``).
        self.held = 0
        #: When the unfinished frame's first byte arrived (``time.monotonic``).
        self.frame_started = 0.0
        #: When the peer last sent anything or was last answered.
        self.last_active = time.monotonic()
        self._aborted = False
        self._gone_noted = False

    # -- asyncio callbacks ----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        self.peer = transport.get_extra_info("peername") or self.peer
        self._server._opened(self)

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is not None and self.worker is not None:
            self._peer_gone(exc)
        self._lost = True
        self._queue.clear()
        self._release()
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)
        self._server._closed(self)

    def data_received(self, data: bytes) -> None:
        if self._closing:
            return
        now = self.last_active = time.monotonic()
        if self._buf:  # a frame spans reads: grow the buffer in place (no quadratic copying)
            self._buf += data
            with memoryview(self._buf) as view:
                pos, bad_length = self._split_frames(view)
            del self._buf[:pos]
            new_frame = pos > 0
        else:  # fast path: frames are sliced straight out of ``data``
            pos, bad_length = self._split_frames(data)
            if pos < len(data):
                self._buf = bytearray(data[pos:])
            new_frame = True
        if self._queue:
            if self.worker is None:
                self.worker = self._server._loop().create_task(self._serve())
            if len(self._queue) >= PIPELINE_DEPTH and not self._reading_paused:
                self._reading_paused = True
                self._transport_or_fail().pause_reading()
        if bad_length is not None:
            self._bad_length(bad_length)
            return
        held = len(self._buf)
        if held != self.held:
            if held and new_frame:
                self.frame_started = now
            grew = held > self.held
            self._server._hold(self, held)
            if grew and self._server._pending_frame_bytes > self._server.max_pending_frame_bytes:
                self._over_budget()

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
            self._release()
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
                    if self._buf:  # the frame's clock stood still while we did not read
                        self.frame_started = time.monotonic()
                    transport.resume_reading()
                async with server._semaphore:
                    stats.requests_in_flight += 1
                    try:
                        reply = await server.dispatcher.handle_frame(payload)
                    except ProtocolError as exc:
                        stats.protocol_errors += 1
                        server._log_bad_frame("closing connection from %s: %s", self.peer, exc)
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
            self.last_active = time.monotonic()
            if self._closing and not self._lost:
                transport.close()

    def _write(self, reply: bytes) -> None:
        if self._lost:
            return
        transport = self._transport_or_fail()
        if transport.is_closing():
            # The transport closed under us: the peer reset or went away. asyncio would take the
            # write and, from the fifth, log "socket.send() raised exception." with no peer.
            if not self._aborted:
                self._peer_gone(None)
            return
        transport.write(len(reply).to_bytes(4, "big") + reply)
        self._server._counters.frames_out += 1

    def _peer_gone(self, exc: Exception | None) -> None:
        if self._gone_noted:
            return
        self._gone_noted = True
        why = "" if exc is None else f": {type(exc).__name__}: {exc}"
        self._server._log_peer_gone("client %s went away before its replies were written%s", self.peer, why)

    # -- limits ---------------------------------------------------------------------------------

    def _release(self) -> None:
        """Drop the unfinished frame and give its bytes back to the budget."""
        self._buf.clear()
        if self.held:
            self._server._hold(self, 0)

    def _over_budget(self) -> None:
        server = self._server
        server._counters.over_budget += 1
        server._log_limit(
            "closing connection from %s: its unfinished frame (%d bytes so far) would take the bytes held in "
            "unfinished frames over MAX_PENDING_FRAME_BYTES %d",
            self.peer,
            self.held,
            server.max_pending_frame_bytes,
        )
        self._begin_close()

    def frame_timed_out(self, now: float) -> None:
        server = self._server
        server._counters.frame_timeouts += 1
        announced = _I32.unpack_from(self._buf, 0)[0] if len(self._buf) >= 4 else -1
        server._log_limit(
            "closing connection from %s: frame incomplete %.1fs after its first byte (%d of %d bytes; "
            "FRAME_TIMEOUT_SECONDS %g)",
            self.peer,
            now - self.frame_started,
            max(0, self.held - 4),
            announced,
            server.frame_timeout_seconds,
        )
        self._begin_close()

    def idle_since(self) -> float | None:
        """When this connection fell idle (nothing queued, in flight or half-received), if it is."""
        if self.worker is not None or self._queue or self._buf or self._closing:
            return None
        return self.last_active

    def close_idle(self) -> None:
        self._server._counters.idle_closed += 1
        log.debug("closing idle connection from %s", self.peer)
        self._begin_close()

    # -- closing --------------------------------------------------------------------------------

    def _bad_length(self, length: int) -> None:
        server = self._server
        stats = server._counters
        if length <= 0:
            stats.invalid_frame_lengths += 1
            server._log_bad_frame("closing connection from %s: frame length %d", self.peer, length)
        else:
            stats.oversized_frames += 1
            server._log_bad_frame(
                "closing connection from %s: frame of %d bytes exceeds %d", self.peer, length, server.max_frame_bytes
            )
        self._begin_close()

    def _begin_close(self) -> None:
        """Take no more frames; requests already queued are answered, then the socket closes."""
        if self._closing and self.worker is None:
            return
        self._closing = True
        self._release()
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
        self._aborted = True
        self._queue.clear()
        if self._transport is not None and not self._lost:
            self._transport.abort()

    def _transport_or_fail(self) -> asyncio.Transport:
        assert self._transport is not None, "connection not made yet"
        return self._transport
