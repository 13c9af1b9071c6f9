"""One client connection of the framed transport: split frames, serve them in order, write replies.

``FramedServer`` (``transport.py``) owns the limits; a connection reports to it what it holds
(``_hold`` for the unfinished frame, ``_count_queued`` for whole frames not yet answered), and the
server's sweep closes it when a frame is late, its peer stops reading replies, or it is idle. The
invariants are stated in ``transport.py``'s module doc.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import struct
import time
from typing import TYPE_CHECKING, Any, cast

from pinlater._pinlater import DETACH_BYTES, decode_hot_frame
from pinlater.server.dispatch import ProtocolError
from pinlater.server.guesses import caller_host
from pinlater.server.lease import RequestLease, current_lease

if TYPE_CHECKING:
    from pinlater.server.transport import FramedServer

__all__ = ["PIPELINE_DEPTH", "Connection"]

log = logging.getLogger("pinlater.server.transport")

_I32 = struct.Struct(">i")

#: Frames queued on one connection before it stops being read (and read again below half). A
#: connection also stops being read once its queued bytes reach ``max_frame_bytes`` (again below
#: half), and, while the server is over ``max_pending_frame_bytes``, once it has any queued.
PIPELINE_DEPTH = 64

#: A frame longer than ``max_frame_bytes`` but at most this many times it is read and dropped as it
#: comes, and its call answered PROTOCOL_ERROR naming the limit (``Oversized``), the connection
#: kept: closed unanswered, a client saw a reset, which Finagle retries, the same frame each time.
#: One longer still closes the connection at once, as it did.
OVERSIZED_READ_FACTOR = 4
#: Bytes of an oversized frame kept to answer it: its message header (a method name of at most
#: 128 characters, 512 bytes).
OVERSIZED_HEADER_BYTES = 4 + 4 + 512 + 4


class Oversized(bytes):
    """In a connection's queue, in place of a frame past ``max_frame_bytes`` that was read and
    dropped: its first ``OVERSIZED_HEADER_BYTES`` (the message header), and its length."""

    length: int


class Connection(asyncio.Protocol):
    """One client connection: split frames, serve them in order, write the replies."""

    def __init__(self, server: FramedServer, peer: Any = None, peer_host: str | None = None) -> None:
        self._server = server
        self._transport: asyncio.Transport | None = None
        self._vectored = False
        #: The server's loop, which serves this connection (kept: ``get_running_loop`` makes a
        #: getpid() system call each time).
        self._loop = server._loop()
        #: The peer's address, from accept() (the transport cannot tell once the peer has reset).
        self.peer: Any = peer
        #: The host counted for this connection in the server's per-peer count, until released.
        self.peer_host = peer_host
        #: Its host for the budgets' shares (``FramedServer.evict_unread``), kept once released.
        self.host = peer_host or ""
        self._buf = bytearray()
        self._queue: collections.deque[bytes] = collections.deque()
        self.worker: asyncio.Task[None] | None = None
        #: The request slot of the request being served (``lease.py``).
        self._lease = RequestLease(server.slots)
        self._reading_paused = False
        self._writable: asyncio.Future[None] | None = None
        #: No more frames are taken; close once the worker is done.
        self._closing = False
        #: The transport was closed (``_close_transport``): what is left is to write its replies.
        self._close_sent = False
        self._lost = False
        #: Bytes of the unfinished frame counted against the server's budget (``len(_buf)``).
        self.held = 0
        #: Bytes of whole frames queued or being served, counted against the same budget.
        self.queued = 0
        #: Bytes of the frame being served (in ``queued``): given back only when it is handled.
        self.serving = 0
        #: While the peer is not draining its replies: when the write buffer last shrank, and
        #: its smallest size since writing paused (``FramedServer._sweep`` watches both).
        self.write_progress_at = 0.0
        self.write_buffer_low = 0
        #: Reply bytes the peer had not taken when writing paused, counted against the server's
        #: budget of unread replies (``_count_unread``).
        self.unread = 0
        #: When the unfinished frame's first byte arrived (``time.monotonic``).
        self.frame_started = 0.0
        #: When the peer last sent anything or was last answered.
        self.last_active = time.monotonic()
        self._aborted = False
        self._gone_noted = False
        #: Bytes of an oversized frame still to drop (``OVERSIZED_READ_FACTOR``), its length and
        #: the head of it kept to answer it.
        self._discard = 0
        self._oversized_length = 0
        self._oversized_head = bytearray()

    # -- asyncio callbacks ----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # uvloop's transports are not subclasses
        self._transport = transport
        # uvloop writes a reply's length and bytes in one writev, uncopied; asyncio's writelines
        # joins them (3.11) or, on some 3.12 and 3.13 releases, never pauses writing for a peer
        # that does not read (CPython gh-127655): there, one write of the joined frame.
        self._vectored = type(transport).__module__.startswith("uvloop")
        self.peer = transport.get_extra_info("peername") or self.peer
        self._server._opened(self)

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is not None and self.worker is not None:
            self._peer_gone(exc)
        self._lost = True
        self._lease.lost = True
        if self._lease.idle and self.worker is not None:
            self.worker.cancel()  # a long poll waiting for nobody (``lease.py``): ends now
        self._drop_queue()
        self._release()
        self._uncount_unread()
        self._server._write_paused.discard(self)
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)
        self._server._closed(self)

    def data_received(self, data: bytes) -> None:
        if self._closing:
            return
        if self._discard:
            data = self._drop_oversized(data)
            if not data:
                self.last_active = time.monotonic()
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
        if self._queue and self.worker is None:
            self.worker = self._loop.create_task(self._serve())
        if bad_length is not None:
            if 0 < bad_length <= OVERSIZED_READ_FACTOR * self._server.max_frame_bytes:
                self._begin_oversized(bad_length)
            else:
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
                return
        # Stop reading when enough whole frames wait to be served: by count, by bytes, or any at
        # all while the server holds more than its budget. (Inline: checked on every read.)
        server = self._server
        if (
            self._queue
            and not self._reading_paused
            and (
                len(self._queue) >= PIPELINE_DEPTH
                or self.queued >= server.max_frame_bytes
                or (self.queued > 0 and server._pending_frame_bytes > server.max_pending_frame_bytes)
            )
        ):
            self._reading_paused = True
            self._transport_or_fail().pause_reading()

    def _split_frames(self, view: bytes | memoryview) -> tuple[int, int | None]:
        """Queue every whole frame in ``view``; return (bytes consumed, bad frame length or None)."""
        max_bytes = self._server.max_frame_bytes
        stats = self._server._counters
        pos, end = 0, len(view)
        queued = 0
        bad_length = None
        while end - pos >= 4:
            length: int = _I32.unpack_from(view, pos)[0]
            if length <= 0 or length > max_bytes:
                bad_length = length
                break
            if end - pos - 4 < length:
                break
            self._queue.append(bytes(view[pos + 4 : pos + 4 + length]))
            stats.frames_in += 1
            queued += length
            pos += 4 + length
        if queued:
            self._server._count_queued(self, queued)
        return pos, bad_length

    def eof_received(self) -> bool:
        if self._buf:
            self._server._counters.truncated_frames += 1
            self._release()
        self._closing = True
        # A long poll waiting for this peer answers empty at its next wake (within the recheck
        # interval) instead of waiting out its time: the peer may be gone (``lease.py``).
        self._lease.lost = True
        # Keep the socket half-open while queued requests are answered; close now if idle.
        if self.worker is None and self._transport is not None and not self._lost:
            self._close_transport(self._transport)
        return True

    def pause_writing(self) -> None:
        if self._writable is None or self._writable.done():
            self._writable = asyncio.get_running_loop().create_future()
        self.write_progress_at = time.monotonic()
        self.write_buffer_low = self._transport_or_fail().get_write_buffer_size()
        self._server._write_paused.add(self)

    def resume_writing(self) -> None:
        self._uncount_unread()
        if not self._close_sent:  # (one closed with replies left stays watched: ``_close_transport``)
            self._server._write_paused.discard(self)
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)

    # -- serving --------------------------------------------------------------------------------

    async def _serve(self) -> None:
        server = self._server
        stats = server._counters
        lease = self._lease
        current_lease.set(lease)  # (this task's: a long poll gives the slot back while it waits)
        caller_host.set(self.host)  # (whose wrong admin passwords a deleteQueue counts among)
        dispatcher = server.dispatcher
        hot_methods = dispatcher.hot_methods
        transport = self._transport
        assert transport is not None, "connection not made yet"
        try:
            while self._queue and not self._lost:
                payload = self._queue.popleft()
                self.serving = len(payload)
                server._serving(self, len(payload))
                if self._reading_paused:
                    self._maybe_resume_reading()
                try:
                    if not lease.take_now():
                        await lease.take()
                    try:
                        # A well-formed hot call is served here, the rest by ``handle_frame``
                        # (``Dispatcher.hot_methods``).
                        reply: bytes | None
                        hot = (
                            None
                            if type(payload) is Oversized
                            else _decode_hot(payload)
                            if len(payload) < DETACH_BYTES
                            else await _decode_hot_apart(payload)
                        )
                        if hot is not None and (serve := hot_methods.get(hot[0])) is not None:
                            name, seqid, call = hot
                            try:
                                reply = await serve(call, seqid)
                            except Exception as exc:  # answered as handle_frame answers it
                                reply = dispatcher.hot_failed(name, seqid, exc)
                        elif type(payload) is Oversized:  # read and dropped: answered, or closed
                            reply = self._answer_oversized(payload)
                        else:
                            reply = await dispatcher.handle_frame(payload)
                    except ProtocolError as exc:
                        stats.protocol_errors += 1
                        server._log_bad_frame("closing connection from %s: %s", self.peer, exc)
                        if exc.reply is not None:
                            self._write(exc.reply)
                        self._begin_close()
                        break
                    except Exception:  # the dispatcher answers handler errors itself: a bug
                        log.exception("closing connection from %s: dispatcher failed", self.peer)
                        self._begin_close()
                        break
                    finally:
                        lease.end()
                finally:
                    # Handled (or cancelled, even while waiting for a slot): the payload is
                    # garbage now, and its bytes go back to the budget.
                    server._count_queued(self, -len(payload))
                    server._serving(self, -self.serving)
                    self.serving = 0
                    if self._reading_paused:
                        self._maybe_resume_reading()
                if reply is not None:
                    self._write(reply)
                if self._writable is not None and not self._writable.done():
                    if self._count_unread():
                        break  # aborted: over the budget of unread replies
                    await self._writable
        finally:
            self.worker = None
            self.last_active = time.monotonic()
            if self._closing and not self._lost:
                self._close_transport(transport)

    def _write(self, reply: bytes) -> None:
        transport = self._transport
        if self._lost or transport is None:  # (None: never, once a frame was read)
            return
        if transport.is_closing():
            # The transport closed under us: the peer reset or went away. asyncio would take the
            # write and, from the fifth, log "socket.send() raised exception." with no peer.
            if not self._aborted:
                self._peer_gone(None)
            return
        if self._vectored:
            transport.writelines((len(reply).to_bytes(4, "big"), reply))
        else:
            transport.write(len(reply).to_bytes(4, "big") + reply)
        self._server._counters.frames_out += 1

    def _peer_gone(self, exc: Exception | None) -> None:
        if self._gone_noted:
            return
        self._gone_noted = True
        why = "" if exc is None else f": {type(exc).__name__}: {exc}"
        self._server._log_peer_gone("client %s went away before its replies were written%s", self.peer, why)

    # -- limits ---------------------------------------------------------------------------------

    def _count_unread(self) -> bool:
        """Count the reply bytes the peer has not taken (writing paused) against the server's
        budget of unread replies, ``max_pending_frame_bytes`` apart from the frames' own; past
        it, abort (which frees them) and answer True. 300 peers that each sent a lookup of 10 MB
        of bodies and read nothing held 3 GB until the write stall timeout closed them."""
        server = self._server
        size = self.write_buffer_size()
        server._unread_reply_bytes += size - self.unread
        self.unread = size
        if server._unread_reply_bytes <= server.max_pending_frame_bytes or server.evict_unread(self):
            return False
        self.unread_over_budget()
        return True

    def unread_over_budget(self) -> None:
        """Abort for the budget of unread replies (``_count_unread``, ``FramedServer.evict_unread``)."""
        server = self._server
        server._counters.replies_over_budget += 1
        server._log_limit(
            "closing connection from %s: its unread replies (%d bytes) would take the reply bytes waiting for "
            "peers over MAX_PENDING_FRAME_BYTES %d",
            self.peer,
            self.unread,
            server.max_pending_frame_bytes,
        )
        self.abort()

    def _uncount_unread(self) -> None:
        if self.unread:
            self._server._unread_reply_bytes -= self.unread
            self.unread = 0

    def _maybe_resume_reading(self) -> None:
        """Read again once the queue is down to half its bounds (and within the budget)."""
        if not self._reading_paused or self._closing or self._lost:
            return
        server = self._server
        if len(self._queue) > PIPELINE_DEPTH // 2 or self.queued > server.max_frame_bytes // 2:
            return
        if self.queued > 0 and server._pending_frame_bytes > server.max_pending_frame_bytes:
            return
        self._reading_paused = False
        if self._buf:  # the frame's clock stood still while we did not read
            self.frame_started = time.monotonic()
        self._transport_or_fail().resume_reading()

    def _drop_queue(self) -> None:
        """Drop the frames not yet started and give their bytes back to the budget (the one being
        served, if any, is given back when it has been handled)."""
        if self._queue:
            dropped = sum(len(payload) for payload in self._queue)
            self._queue.clear()
            self._server._count_queued(self, -dropped)

    def _release(self) -> None:
        """Drop the unfinished frame and give its bytes back to the budget."""
        self._buf.clear()
        if self.held:
            self._server._hold(self, 0)
        if self._discard:  # (an oversized frame being dropped: no longer)
            self._discard = 0
            self._server._partial.discard(self)

    def _over_budget(self) -> None:
        if not self._server.evict_frames(self):
            self.frames_over_budget(evicted=False)

    def frames_over_budget(self, evicted: bool) -> None:
        """Close for the budget of frames: this connection's unfinished frame took the total past
        it (its requests queued are answered), or its host held more of it than the host of the
        one that did (``FramedServer.evict_frames``: aborted, its frames given back now)."""
        server = self._server
        server._counters.over_budget += 1
        server._log_limit(
            "closing connection from %s: its frames (%d bytes) would take the bytes held in frames over "
            "MAX_PENDING_FRAME_BYTES %d%s",
            self.peer,
            self.held + self.queued,
            server.max_pending_frame_bytes,
            ", its host holding more of them than any other" if evicted else "",
        )
        if evicted:
            self._release()
            self.abort()
        else:
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

    def write_buffer_size(self) -> int:
        """Reply bytes waiting in our buffer for the peer to take."""
        return 0 if self._transport is None else self._transport.get_write_buffer_size()

    def write_stalled(self, now: float) -> None:
        """The peer has not taken any of its replies for ``frame_timeout_seconds``: abort (a
        graceful close would wait for the replies to drain, which they never will)."""
        server = self._server
        server._counters.write_stalls += 1
        server._log_limit(
            "closing connection from %s: it has not read its replies for %.1fs (%d bytes waiting to be written; "
            "FRAME_TIMEOUT_SECONDS %g)",
            self.peer,
            now - self.write_progress_at,
            self.write_buffer_size(),
            server.frame_timeout_seconds,
        )
        self.abort()

    def idle_since(self) -> float | None:
        """When this connection fell idle (nothing queued, in flight or half-received), if it is."""
        if self.worker is not None or self._queue or self._buf or self._closing:
            return None
        return self.last_active

    def close_idle(self) -> None:
        self._server._counters.idle_closed += 1
        log.debug("closing idle connection from %s", self.peer)
        if self.write_buffer_size():  # replies untaken all this time: a graceful close would wait on
            self.abort()  # them forever
        else:
            self._begin_close()

    # -- closing --------------------------------------------------------------------------------

    def _begin_oversized(self, length: int) -> None:
        """The unread bytes start with a frame of ``length`` past the limit: drop it as it comes
        (its first bytes kept, to answer it), timed as an unfinished frame is."""
        rest = bytes(self._buf[4:])
        self._release()
        self._server._counters.oversized_frames += 1
        self._discard, self._oversized_length = length, length
        self._oversized_head.clear()
        self.frame_started = time.monotonic()
        self._server._partial.add(self)  # (the sweep closes it if the frame stops coming)
        rest = self._drop_oversized(rest)
        if rest and not self._closing:
            self.data_received(rest)

    def _drop_oversized(self, data: bytes) -> bytes:
        """Drop what ``data`` holds of the oversized frame; once it is all read, queue its answer
        (``Oversized``, served in turn). Returns the bytes after it."""
        take = min(self._discard, len(data))
        room = OVERSIZED_HEADER_BYTES - len(self._oversized_head)
        if room > 0:
            self._oversized_head += data[: min(room, take)]
        self._discard -= take
        if self._discard:
            return b""
        self._server._partial.discard(self)
        marker = Oversized(self._oversized_head)
        marker.length = self._oversized_length
        self._queue.append(marker)
        self._server._count_queued(self, len(marker))
        if self.worker is None:
            self.worker = self._loop.create_task(self._serve())
        if len(self._queue) >= PIPELINE_DEPTH and not self._reading_paused:  # (as for whole frames)
            self._reading_paused = True
            self._transport_or_fail().pause_reading()
        return data[take:]

    def _answer_oversized(self, head: Oversized) -> bytes | None:
        """PROTOCOL_ERROR naming the limit for the dropped frame's call (raises ``ProtocolError``,
        closing the connection, if its header cannot be read)."""
        server = self._server
        server._log_bad_frame(
            "frame of %d bytes from %s exceeds %d (MAX_FRAME_BYTES): read, dropped and answered",
            head.length,
            self.peer,
            server.max_frame_bytes,
        )
        return server.dispatcher.oversized(head, head.length, server.max_frame_bytes)

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
            self._close_transport(transport)

    def _close_transport(self, transport: asyncio.Transport) -> None:
        """Close once the replies still buffered are written. A peer that never takes them held
        the connection for good (the transport waits for its buffer to drain, and a closing
        connection is never idle): it stays with the writers the sweep watches, aborted once it
        has taken none of them for ``FRAME_TIMEOUT_SECONDS`` (``write_stalled``)."""
        transport.close()
        self._close_sent = True
        left = transport.get_write_buffer_size()
        if left and self not in self._server._write_paused:
            self.write_progress_at = time.monotonic()
            self.write_buffer_low = left
            self._server._write_paused.add(self)

    def shutdown(self) -> None:
        """Server stop: drop frames not yet started, finish the one in flight, then close."""
        self._drop_queue()
        self._begin_close()

    def abort(self) -> None:
        self._closing = True
        self._aborted = True
        self._drop_queue()
        self._uncount_unread()  # (the transport drops its buffer)
        if self._transport is not None and not self._lost:
            self._transport.abort()

    def _transport_or_fail(self) -> asyncio.Transport:
        assert self._transport is not None, "connection not made yet"
        return self._transport


def _decode_hot(payload: bytes) -> tuple[str, int, Any] | None:
    """``decode_hot_frame`` of ``payload``; ``None`` if it is no hot call, or if the decoder
    failed (a bug: the general path reads the frame again and answers)."""
    try:
        return decode_hot_frame(payload)
    except Exception:
        return None


async def _decode_hot_apart(payload: bytes) -> tuple[str, int, Any] | None:
    """``_decode_hot`` on a worker thread, for a frame of at least ``DETACH_BYTES``, for which
    the extension releases the GIL: the loop serves the other connections meanwhile (decoding a
    keyed enqueue of 100,000 jobs took it about 50 ms). A smaller frame is decoded on the loop,
    with no coroutine and no thread hop. ``None`` too if no worker thread takes it (the loop's
    executor shut down as the server stops): the general path answers."""
    try:
        return await asyncio.get_running_loop().run_in_executor(None, _decode_hot, payload)
    except RuntimeError:
        return None
