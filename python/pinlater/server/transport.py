"""Thrift framed transport on asyncio: 4-byte big-endian length, then one message.

Invariants:

* Each connection answers its requests one at a time, in the order they arrived, so pipelined
  calls get their replies in order. Concurrency comes from many connections; ``RequestSlots``
  caps the requests being handled at once (``max_concurrent_requests``).
* A frame length of zero, below zero or above ``max_frame_bytes`` closes that connection (a
  warning naming the peer). So does a payload the dispatcher cannot decode (``ProtocolError``),
  after its PROTOCOL_ERROR reply, if it has one. A peer that closes mid-frame just goes away.
  Nothing one connection sends can affect another.
* Memory held for peers is bounded. ``max_pending_frame_bytes`` bounds the bytes held in frames
  over all connections: unfinished frames, and whole frames queued or being served (a frame's
  bytes go back when its request has been handled, or when its connection drops it).
  - A frame must arrive whole within ``frame_timeout_seconds`` of its first byte, or its
    connection is closed. The connection whose unfinished frame would take the total past the
    budget is closed (closed rather than paused: a paused peer still holds its slot and learns
    nothing, while a closed one fails at once and retries once the budget has room); unless
    another host holds more of the budget: its connections, most first, are aborted instead
    (``evict_frames``), so no one host can hold the budget against the others.
  - Whole frames are never refused for the budget (they are answered; a small request arriving
    whole in one read is served throughout). Instead a connection stops being read while it
    has ``PIPELINE_DEPTH`` frames or ``max_frame_bytes`` bytes queued, or any at all while the
    total is past the budget, and is read again once its queue drains (below half). So one
    connection holds about two frames at most, plus one read (asyncio reads at most 256 KiB).
  - A peer that does not take its replies stops being served until it does (the worker waits
    for the write buffer to drain, holding the frames queued behind). If the write buffer does
    not shrink for ``frame_timeout_seconds`` the connection is aborted (aborted, as a graceful
    close would wait for the replies to drain). The frame timeout rather than the idle timeout,
    because a reply is a frame in transit like a request, and the idle timeout may be off.
    Replies waiting so have a budget of their own, ``max_pending_frame_bytes`` again: the
    connection whose reply takes the bytes unread by peers past it is aborted (its buffer goes
    with it), so many peers that each ask for a big reply and read none hold at most that;
    unless another host holds more of them, whose connections go first (``evict_unread``).
  - A connection with nothing in flight and nothing received for ``idle_timeout_seconds`` is
    closed (``None``: never).
* A peer that goes away before its replies are written costs one rate-limited line naming it.
* The accept loop is ours (not ``asyncio.Server``'s, which in Python 3.11 retries a failing accept
  as many times as the listen backlog per wake-up, logging each): an accept error (EMFILE at the
  open-files limit, ENFILE, ENOBUFS, ...) pauses accepting, for 50 ms doubling up to 1 s while
  it repeats, and is logged at most once per ``LOG_INTERVAL_SECONDS`` with a count of the rest.
  Connections are capped below the open-files limit, less ``open_files_reserve`` for store
  connections, files and the admin port (``connection_cap``), so the cap refuses before the
  limit does; the cap in force is logged at start.
* One peer (a host address) holds at most ``max_connections_per_peer`` of them (by default nine
  tenths of the cap, at least one): a host that opens connections in a loop, or leaks them,
  leaves a tenth of the slots to every other client rather than none. Its further connects are
  refused at accept, as the cap's are (closed at once, one throttled line naming it).
* Events a peer can repeat at will (refusals, bad frames, timeouts, a peer gone mid-reply) are
  logged through ``ThrottledLog``: at most one line per kind per ``LOG_INTERVAL_SECONDS``.
* ``stop(grace)`` stops accepting, drops frames not yet started, lets requests in flight finish
  for up to ``grace`` seconds, then closes every connection.
* ``share_port``: several processes serve one port (SO_REUSEPORT; the kernel spreads new
  connections over their listening sockets). ``"open"`` binds first, as a lone server does, so
  a port someone holds is refused, then lets others join; ``"join"`` joins a port a process of
  the same user opened so. ``None`` (the default): the port is this process's alone.
"""

from __future__ import annotations

import asyncio
import collections
import ipaddress
import logging
import operator
import resource
import socket
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

from pinlater.logthrottle import ThrottledLog
from pinlater.server.connection import Connection
from pinlater.server.dispatch import Dispatcher

__all__ = [
    "DEFAULT_MAX_CONCURRENT_REQUESTS",
    "DEFAULT_MAX_CONNECTIONS",
    "DEFAULT_MAX_FRAME_BYTES",
    "DEFAULT_MAX_PENDING_FRAME_BYTES",
    "FramedServer",
    "ServerStats",
    "connection_cap",
    "peer_connection_cap",
    "peer_host",
]

log = logging.getLogger(__name__)


DEFAULT_MAX_FRAME_BYTES = 16 * 1024 * 1024
DEFAULT_MAX_CONNECTIONS = 10_000
DEFAULT_MAX_CONCURRENT_REQUESTS = 1_024
#: Bytes held in unfinished frames over all connections (40 peers each stopping 1 MiB short of a
#: 16 MiB frame held 600 MB before this budget existed).
DEFAULT_MAX_PENDING_FRAME_BYTES = 256 * 1024 * 1024
#: A frame must arrive whole this long after its first byte.
DEFAULT_FRAME_TIMEOUT_SECONDS = 60.0
#: The original's SERVER_CONN_MAX_IDLE_TIME_MINUTES=5; workers long-poll at most 30 s.
DEFAULT_IDLE_TIMEOUT_SECONDS = 300.0
#: Open files kept out of the connection cap: store connections, SQLite files, admin HTTP, logs.
DEFAULT_OPEN_FILES_RESERVE = 1024
#: Accepts taken per wake-up of a listening socket, so one burst cannot hold up the loop.
ACCEPTS_PER_WAKEUP = 256
#: Accepting pauses this long after an accept error, doubling while errors repeat, up to the max.
ACCEPT_BACKOFF_MIN_SECONDS = 0.05
ACCEPT_BACKOFF_MAX_SECONDS = 1.0
#: Timeouts are checked this often at most (and at least once a second).
SWEEP_MIN_INTERVAL_SECONDS = 0.05
#: Listen backlog: bursts of thousands of connects must not overflow the accept queue.
LISTEN_BACKLOG = 4096
#: How long stop() waits for aborted transports to report connection_lost.
CLOSE_TIMEOUT_SECONDS = 2.0
#: At most one line per kind of peer-triggered event per this many seconds.
LOG_INTERVAL_SECONDS = 5.0


@dataclass(frozen=True, slots=True)
class ServerStats:
    """A snapshot of the server's counters (totals since start, except the gauges)."""

    connections_open: int
    connections_accepted: int
    connections_rejected: int
    #: Of those, refused because their host held ``max_connections_per_peer`` already.
    connections_rejected_per_peer: int
    #: Gauge: requests being handled, long polls waiting for jobs among them.
    requests_in_flight: int
    #: Gauge: long polls waiting for jobs, which hold no request slot while they wait.
    long_polls_waiting: int
    #: Gauge: body-filtered counts, scans and deletes at their store calls, which hold no slot
    #: either (the backend's filter turns bound them).
    filtered_calls_running: int
    frames_in: int
    frames_out: int
    protocol_errors: int
    oversized_frames: int
    #: Frames whose length was zero or negative.
    invalid_frame_lengths: int
    truncated_frames: int
    accept_errors: int
    #: Connections closed because a frame did not arrive whole in time.
    frame_timeouts: int
    #: Connections closed because their unfinished frame would pass the frame budget.
    over_budget: int
    idle_closed: int
    #: Connections aborted because their peer took none of its replies for the frame timeout.
    write_stalls: int
    #: Connections aborted because their unread replies would pass the budget of unread replies.
    replies_over_budget: int
    #: Gauge: bytes held in unfinished frames and in whole frames not yet handled, now.
    pending_frame_bytes: int
    #: Gauge: reply bytes waiting for peers that stopped taking them, now (``Connection.unread``).
    unread_reply_bytes: int


class RequestSlots:
    """At most ``limit`` requests handled at once; a request over it waits for a slot, in
    arrival order. Taking a free slot is a plain call (``take_now``), not a coroutine: it is on
    every request's way."""

    __slots__ = ("_waiters", "filtering", "held", "limit", "resting")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        #: Slots taken (the requests being worked on).
        self.held = 0
        #: Requests that gave their slot back (``lease.py``): long polls waiting for jobs, and
        #: body-filtered calls whose store calls wait for or run in the backend's filter turns.
        self.resting = 0
        self.filtering = 0
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()

    def take_now(self) -> bool:
        """Take a slot if one is free and nobody waits for one; ``take`` otherwise."""
        if self.held < self.limit and not self._waiters:
            self.held += 1
            return True
        return False

    async def take(self) -> None:
        """Wait for a slot (handed over by ``release``, so ``held`` counts it already)."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():  # handed a slot as we were cancelled: pass it on
                self.release()
            elif waiter in self._waiters:  # (release may have dropped it already)
                self._waiters.remove(waiter)
            raise

    def release(self) -> None:
        """Give a slot back: to the first request waiting for one, if any."""
        waiters = self._waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self.held -= 1


@dataclass(slots=True)
class _Counters:
    connections_accepted: int = 0
    connections_rejected: int = 0
    #: Of those, refused for their host's count (``max_connections_per_peer``).
    peer_refused: int = 0
    frames_in: int = 0
    frames_out: int = 0
    protocol_errors: int = 0
    oversized_frames: int = 0
    invalid_frame_lengths: int = 0
    truncated_frames: int = 0
    accept_errors: int = 0
    frame_timeouts: int = 0
    over_budget: int = 0
    idle_closed: int = 0
    write_stalls: int = 0
    replies_over_budget: int = 0


def peer_connection_cap(connection_cap: int, max_connections_per_peer: int | None) -> int:
    """The connections one peer host may hold: ``max_connections_per_peer`` if given, else nine
    tenths of ``connection_cap`` (at least one), never more than the cap itself."""
    if max_connections_per_peer is not None:
        return max(1, min(max_connections_per_peer, connection_cap))
    return max(1, connection_cap - max(1, connection_cap // 10))


def connection_cap(max_connections: int, open_files_limit: int, reserve: int) -> int:
    """The connections to serve at most: ``max_connections``, but below the open-files limit less
    ``reserve`` (at most half a small limit), so the cap refuses before accept() fails."""
    if open_files_limit == resource.RLIM_INFINITY or open_files_limit < 0:
        return max_connections
    reserve = min(reserve, open_files_limit // 2)
    return max(1, min(max_connections, open_files_limit - reserve))


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
        max_connections_per_peer: int | None = None,
        max_concurrent_requests: int = DEFAULT_MAX_CONCURRENT_REQUESTS,
        max_pending_frame_bytes: int = DEFAULT_MAX_PENDING_FRAME_BYTES,
        frame_timeout_seconds: float = DEFAULT_FRAME_TIMEOUT_SECONDS,
        idle_timeout_seconds: float | None = DEFAULT_IDLE_TIMEOUT_SECONDS,
        open_files_reserve: int = DEFAULT_OPEN_FILES_RESERVE,
        share_port: Literal["open", "join"] | None = None,
    ) -> None:
        if max_frame_bytes <= 0 or max_connections <= 0 or max_concurrent_requests <= 0:
            raise ValueError("max_frame_bytes, max_connections and max_concurrent_requests must be positive")
        if max_connections_per_peer is not None and max_connections_per_peer <= 0:
            raise ValueError("max_connections_per_peer must be positive (or None: nine tenths of the cap)")
        if max_pending_frame_bytes <= 0 or frame_timeout_seconds <= 0 or open_files_reserve < 0:
            raise ValueError("max_pending_frame_bytes and frame_timeout_seconds must be positive")
        if idle_timeout_seconds is not None and idle_timeout_seconds <= 0:
            raise ValueError("idle_timeout_seconds must be positive (or None: never)")
        self.dispatcher = dispatcher
        self.host = host
        self.port = port
        self.max_frame_bytes = max_frame_bytes
        self.max_connections = max_connections
        #: The connections served at most: ``max_connections``, kept below the open-files limit.
        self.connection_cap = max_connections
        self.max_connections_per_peer = max_connections_per_peer
        #: The connections one peer host holds at most (``peer_connection_cap``).
        self.peer_cap = peer_connection_cap(max_connections, max_connections_per_peer)
        #: Connections accepted and not yet lost, per peer host (refused ones are never counted).
        self._per_peer: collections.Counter[str] = collections.Counter()
        self.max_concurrent_requests = max_concurrent_requests
        self.max_pending_frame_bytes = max_pending_frame_bytes
        self.frame_timeout_seconds = frame_timeout_seconds
        self.idle_timeout_seconds = idle_timeout_seconds
        self.open_files_reserve = open_files_reserve
        self.share_port = share_port
        self._counters = _Counters()
        #: Connections being served.
        self._connections: set[Connection] = set()
        #: Every transport made and not yet lost, refused ones included.
        self._live: set[Connection] = set()
        #: Connections holding an unfinished frame, and the bytes they hold.
        self._partial: set[Connection] = set()
        #: ``_pending_frame_bytes`` by the host of the connections that hold them (``_frame_bytes``):
        #: whether another host holds more than an over-budget frame's own is known without a
        #: walk of every connection at each such frame (``evict_frames``).
        self._frame_bytes_by_host: dict[str, int] = {}
        #: Of those, the bytes of frames being served (given back only when handled, so no
        #: eviction frees them: a long poll's), by host (``_serving``).
        self._serving_by_host: dict[str, int] = {}
        #: Bytes in unfinished frames plus whole frames queued or being served (``conn.queued``).
        self._pending_frame_bytes = 0
        #: Reply bytes that peers had not taken when their writing paused (``Connection.unread``).
        self._unread_reply_bytes = 0
        #: Connections whose peer is not draining its replies (asyncio paused writing).
        self._write_paused: set[Connection] = set()
        self._all_lost: asyncio.Future[None] | None = None
        self._sockets: list[socket.socket] = []
        self._attaching: set[asyncio.Task[None]] = set()
        #: The requests being handled, at most ``max_concurrent_requests``.
        self.slots = RequestSlots(max_concurrent_requests)
        self._accepting = False
        self._accept_paused = False
        self._accept_backoff = 0.0
        self._resume_handle: asyncio.TimerHandle | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._event_loop: asyncio.AbstractEventLoop | None = None
        self._log_refused = ThrottledLog(log, LOG_INTERVAL_SECONDS)
        self._log_accept_error = ThrottledLog(log, LOG_INTERVAL_SECONDS, logging.ERROR)
        self._log_bad_frame = ThrottledLog(log, LOG_INTERVAL_SECONDS)
        self._log_limit = ThrottledLog(log, LOG_INTERVAL_SECONDS)
        self._log_peer_gone = ThrottledLog(log, LOG_INTERVAL_SECONDS, logging.INFO)
        self._log_sweep_error = ThrottledLog(log, LOG_INTERVAL_SECONDS, logging.ERROR)

    async def start(self) -> None:
        """Bind and start accepting; ``self.port`` is the bound port afterwards."""
        if self._sockets:
            raise RuntimeError("server already started")
        limit = raise_open_files_limit()
        self.connection_cap = connection_cap(self.max_connections, limit, self.open_files_reserve)
        self.peer_cap = peer_connection_cap(self.connection_cap, self.max_connections_per_peer)
        loop = self._event_loop = asyncio.get_running_loop()
        self._sockets = self._bind()
        self.port = self._sockets[0].getsockname()[1]
        self._accepting = True
        self._start_accepting()
        self._sweeper = loop.create_task(self._sweep(), name="pinlater-thrift-timeouts")
        if limit == resource.RLIM_INFINITY:
            why = "no open files limit"
        else:
            kept = min(self.open_files_reserve, limit // 2)
            why = f"open files limit {limit}, {kept} of them kept for stores and files"
        log.info(
            "thrift server listening on %s:%d; at most %d connections (MAX_CONNECTIONS %d, %s), "
            "%d from one host (MAX_CONNECTIONS_PER_PEER)",
            self.host,
            self.port,
            self.connection_cap,
            self.max_connections,
            why,
            self.peer_cap,
        )

    def _bind(self) -> list[socket.socket]:
        """Listening sockets for every address ``host`` resolves to, all on one port."""
        infos = socket.getaddrinfo(
            self.host or None, self.port, socket.AF_UNSPEC, socket.SOCK_STREAM, 0, socket.AI_PASSIVE
        )
        sockets: list[socket.socket] = []
        port = self.port
        try:
            for family, kind, proto, _, address in dict.fromkeys(infos):
                sock = socket.socket(family, kind, proto)
                sockets.append(sock)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                if self.share_port == "join":
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
                if port:
                    address = (address[0], port, *address[2:])
                try:
                    sock.bind(address)
                except OSError as exc:
                    raise OSError(
                        exc.errno, f"error while attempting to bind on address {address!r}: {exc.strerror}"
                    ) from None
                port = sock.getsockname()[1]
                if self.share_port == "open":
                    # Set after an exclusive bind and before listen (where Linux forms the group).
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
                sock.listen(LISTEN_BACKLOG)
                sock.setblocking(False)
        except BaseException:
            for sock in sockets:
                sock.close()
            raise
        return sockets

    # -- accepting ------------------------------------------------------------------------------

    def _start_accepting(self) -> None:
        loop = self._loop()
        self._accept_paused = False
        for sock in self._sockets:
            loop.add_reader(sock.fileno(), self._accept, sock)

    def _pause_accepting(self) -> None:
        loop = self._loop()
        self._accept_paused = True
        for sock in self._sockets:
            loop.remove_reader(sock.fileno())

    def _accept(self, sock: socket.socket) -> None:
        loop = self._loop()
        for _ in range(ACCEPTS_PER_WAKEUP):
            try:
                conn, address = sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:  # the peer gave up while queued: take the next
                continue
            except OSError as exc:
                self._accept_failed(exc)
                return
            self._accept_backoff = 0.0
            if len(self._connections) + len(self._attaching) >= self.connection_cap:
                # Refused before a transport is made, so the descriptor is free again at once.
                self._refused(address)
                conn.close()
                continue
            host = peer_host(address)
            if self._per_peer[host] >= self.peer_cap:
                self._refused_peer(address)
                conn.close()
                continue
            self._per_peer[host] += 1
            conn.setblocking(False)
            task = loop.create_task(self._attach(conn, address, host))
            self._attaching.add(task)
            task.add_done_callback(self._attaching.discard)

    def _accept_failed(self, exc: OSError) -> None:
        """Out of file descriptors (or another accept error): pause, then try again.

        Linux keeps reporting the listening socket readable while the connection waits in the
        backlog, so retrying at once would spin; the backoff doubles while errors repeat.
        """
        self._counters.accept_errors += 1
        backoff = min(max(self._accept_backoff * 2, ACCEPT_BACKOFF_MIN_SECONDS), ACCEPT_BACKOFF_MAX_SECONDS)
        self._accept_backoff = backoff
        self._log_accept_error(
            "accept failed: %s; pausing accepts for %.2fs (%d connections open, cap %d)",
            exc,
            backoff,
            len(self._connections),
            self.connection_cap,
        )
        self._pause_accepting()
        self._resume_handle = self._loop().call_later(backoff, self._resume_accepting)

    def _resume_accepting(self) -> None:
        self._resume_handle = None
        if self._accepting and self._accept_paused:
            self._start_accepting()

    async def _attach(self, conn: socket.socket, address: Any, host: str) -> None:
        made: list[Connection] = []

        def connection() -> Connection:
            made.append(Connection(self, address, host))
            return made[-1]

        try:
            await self._loop().connect_accepted_socket(connection, conn)
        except Exception as exc:  # the peer went away before its transport was made
            conn.close()
            log.debug("dropped an accepted connection: %s", exc)
            if made:
                self._release_peer(made[-1])
            else:
                self._release_host(host)

    # -- timeouts -------------------------------------------------------------------------------

    async def _sweep(self) -> None:
        """Close connections whose frame is late, whose peer takes no replies, and idle ones.

        An error on one connection is logged (rate-limited) and the sweep goes on: were this task
        to end, no timeout would be enforced again for the life of the process.
        """
        timeouts = [self.frame_timeout_seconds]
        if self.idle_timeout_seconds is not None:
            timeouts.append(self.idle_timeout_seconds)
        interval = min(max(min(timeouts) / 4, SWEEP_MIN_INTERVAL_SECONDS), 1.0)
        idle = self.idle_timeout_seconds
        idle_interval = 0.0 if idle is None else min(max(idle / 4, SWEEP_MIN_INTERVAL_SECONDS), 5.0)
        next_idle_check = 0.0
        while True:
            await asyncio.sleep(interval)
            now = time.monotonic()
            for conn in list(self._partial):
                self._sweep_one(conn, self._check_frame_late, now)
            for conn in list(self._write_paused):
                self._sweep_one(conn, self._check_write_stalled, now)
            if idle is not None and now >= next_idle_check:
                next_idle_check = now + idle_interval
                for conn in list(self._connections):
                    self._sweep_one(conn, self._check_idle, now)

    def _sweep_one(self, conn: Connection, check: Callable[[Connection, float], None], now: float) -> None:
        try:
            check(conn, now)
        except Exception:
            self._log_sweep_error("timeout sweep failed on connection from %s", conn.peer, exc_info=True)

    def _check_frame_late(self, conn: Connection, now: float) -> None:
        # A connection we stopped reading is not late: its frame's clock restarts when we read again.
        if conn.frame_started < now - self.frame_timeout_seconds and not conn._reading_paused:
            conn.frame_timed_out(now)

    def _check_write_stalled(self, conn: Connection, now: float) -> None:
        size = conn.write_buffer_size()
        if size < conn.write_buffer_low:  # the peer took some: it is slow, not stalled
            conn.write_buffer_low = size
            conn.write_progress_at = now
        elif now - conn.write_progress_at > self.frame_timeout_seconds:
            conn.write_stalled(now)

    def _check_idle(self, conn: Connection, now: float) -> None:
        idle = self.idle_timeout_seconds
        since = conn.idle_since()
        if idle is not None and since is not None and now - since > idle:
            conn.close_idle()

    def evict_unread(self, over: Connection) -> bool:
        """The unread replies are past their budget with ``over``'s: if another host holds more of
        them than ``over``'s host, abort that host's connections, most unread first, until the
        total is within the budget, and answer whether it is. One host that asks for big replies
        and reads none, over enough connections, had held the budget for good, and the next
        client whose reply backed up (a big dequeue, a slow link) was aborted instead."""
        evicted = _evict(over, self._write_paused, lambda c: c.unread, lambda: self._unread_reply_bytes)
        for conn in evicted:
            conn.unread_over_budget()
        return self._unread_reply_bytes <= self.max_pending_frame_bytes

    def evict_frames(self, over: Connection) -> bool:
        """``evict_unread`` for the bytes held in frames, which ``over``'s unfinished frame took
        past their budget: one host's long polls, padded and pipelined on enough connections
        (each holds its frames until it is answered, up to 30 s), had held the budget, and every
        other client's frame that spans reads closed its connection."""
        # What closing a host's connections would give back: its frames, less those being served.
        serving = self._serving_by_host
        freeable = {host: held - serving.get(host, 0) for host, held in self._frame_bytes_by_host.items()}
        mine = freeable.get(over.host, 0)
        if 2 * mine >= sum(freeable.values()):  # no other host holds more: nothing to walk
            return False
        # (its host holds under half: another may hold more, found among the hosts, not the
        # connections; a host flooding the budget from thousands of connections had made every
        # frame of its own past it walk all of them, seconds of the loop a thousand frames; and
        # one holding it in frames being served, which no eviction frees, made every frame past
        # it of another host's walk them for nothing)
        top, most = max(freeable.items(), key=operator.itemgetter(1))
        if top == over.host or most <= mine:
            return False
        evicted = _evict(over, self._connections, _freeable_frames, lambda: self._pending_frame_bytes, top)
        for conn in evicted:
            conn.frames_over_budget(evicted=True)
        return self._pending_frame_bytes <= self.max_pending_frame_bytes

    def _hold(self, conn: Connection, held: int) -> None:
        self._frame_bytes(conn, held - conn.held)
        conn.held = held
        if held:
            self._partial.add(conn)
        else:
            self._partial.discard(conn)

    def _count_queued(self, conn: Connection, delta: int) -> None:
        """Whole frames of ``delta`` bytes were queued on ``conn`` (or, below zero, handled)."""
        self._frame_bytes(conn, delta)
        conn.queued += delta

    def _serving(self, conn: Connection, delta: int) -> None:
        """``conn`` began (``delta`` > 0) or ended serving a frame of ``abs(delta)`` bytes."""
        _tally(self._serving_by_host, conn.host, delta)

    def _frame_bytes(self, conn: Connection, delta: int) -> None:
        """``conn`` holds ``delta`` more bytes in frames (fewer, below zero): the total and its host's."""
        self._pending_frame_bytes += delta
        _tally(self._frame_bytes_by_host, conn.host, delta)

    # -- stopping -------------------------------------------------------------------------------

    async def stop(self, grace_seconds: float = 10.0) -> None:
        """Stop accepting, let requests in flight finish (at most ``grace_seconds``), close all."""
        if not self._sockets:
            return
        self._accepting = False
        await self._stop_listening()
        if self._sweeper is not None:
            self._sweeper.cancel()
            await asyncio.gather(self._sweeper, return_exceptions=True)
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

    async def _stop_listening(self) -> None:
        """Close the listening sockets; connections accepted a moment ago reach connection_made
        (where they are refused) before this returns."""
        if not self._accept_paused:
            self._pause_accepting()
        if self._resume_handle is not None:
            self._resume_handle.cancel()
            self._resume_handle = None
        sockets, self._sockets = self._sockets, []
        for sock in sockets:
            sock.close()
        if self._attaching:
            await asyncio.gather(*list(self._attaching), return_exceptions=True)

    def stats(self) -> ServerStats:
        c = self._counters
        return ServerStats(
            connections_open=len(self._connections),
            connections_accepted=c.connections_accepted,
            connections_rejected=c.connections_rejected,
            connections_rejected_per_peer=c.peer_refused,
            requests_in_flight=self.slots.held + self.slots.resting + self.slots.filtering,
            long_polls_waiting=self.slots.resting,
            filtered_calls_running=self.slots.filtering,
            frames_in=c.frames_in,
            frames_out=c.frames_out,
            protocol_errors=c.protocol_errors,
            oversized_frames=c.oversized_frames,
            invalid_frame_lengths=c.invalid_frame_lengths,
            truncated_frames=c.truncated_frames,
            accept_errors=c.accept_errors,
            frame_timeouts=c.frame_timeouts,
            over_budget=c.over_budget,
            idle_closed=c.idle_closed,
            write_stalls=c.write_stalls,
            replies_over_budget=c.replies_over_budget,
            pending_frame_bytes=self._pending_frame_bytes,
            unread_reply_bytes=self._unread_reply_bytes,
        )

    # -- called by connections ------------------------------------------------------------------

    def _opened(self, conn: Connection) -> None:
        self._live.add(conn)
        if not self._accepting or len(self._connections) >= self.connection_cap:
            if self._accepting:
                self._refused(conn.peer)
            else:
                self._counters.connections_rejected += 1
            conn.abort()
            return
        self._counters.connections_accepted += 1
        self._connections.add(conn)

    def _refused(self, peer: Any) -> None:
        self._counters.connections_rejected += 1
        attaching = len(self._attaching)  # accepted, their transports being made: they count
        self._log_refused(
            "refusing connection from %s: %d connections open%s (the cap is %d)",
            peer,
            len(self._connections),
            f" and {attaching} being set up" if attaching else "",
            self.connection_cap,
        )

    def _refused_peer(self, peer: Any) -> None:
        self._counters.connections_rejected += 1
        self._counters.peer_refused += 1
        self._log_refused(
            "refusing connection from %s: that host has %d connections open (MAX_CONNECTIONS_PER_PEER %d)",
            peer,
            self._per_peer[peer_host(peer)],
            self.peer_cap,
        )

    def _release_peer(self, conn: Connection) -> None:
        """``conn``'s place in its host's count goes back (once, however often it is called)."""
        host, conn.peer_host = conn.peer_host, None
        if host is not None:
            self._release_host(host)

    def _release_host(self, host: str) -> None:
        left = self._per_peer[host] - 1
        if left > 0:
            self._per_peer[host] = left
        else:
            del self._per_peer[host]  # a host with none open keeps no entry

    def _loop(self) -> asyncio.AbstractEventLoop:
        assert self._event_loop is not None, "server not started"
        return self._event_loop

    def _closed(self, conn: Connection) -> None:
        self._release_peer(conn)
        self._connections.discard(conn)
        self._live.discard(conn)
        if not self._live and self._all_lost is not None and not self._all_lost.done():
            self._all_lost.set_result(None)


def _tally(by_host: dict[str, int], host: str, delta: int) -> None:
    """Add ``delta`` to ``host``'s count; a host whose count falls to 0 keeps no entry."""
    if not delta:
        return
    left = by_host.get(host, 0) + delta
    if left:
        by_host[host] = left
    else:
        del by_host[host]


def _freeable_frames(conn: Connection) -> int:
    """The frame bytes closing ``conn`` gives back at once: its unfinished frame and those queued,
    not the one being served (given back once it is handled), none once it was aborted."""
    return 0 if conn._aborted else conn.held + conn.queued - conn.serving


def _evict(
    over: Connection,
    holders: Iterable[Connection],
    held: Callable[[Connection], int],
    total: Callable[[], int],
    top: str | None = None,
) -> Iterator[Connection]:
    """The connections to close, one at a time as the caller closes them, for a budget that
    ``over`` took past its bound (``over._server.max_pending_frame_bytes``): those of the host
    holding most of it (``top``, if the caller knows it), most first, while the total is past the
    bound, if that host is not ``over``'s and holds more than it; none otherwise."""
    if top is None:
        by_host: collections.Counter[str] = collections.Counter()
        for conn in holders:
            by_host[conn.host] += held(conn)
        ranked = by_host.most_common(1)
        if not ranked or ranked[0][0] == over.host or ranked[0][1] <= by_host[over.host]:
            return
        top = ranked[0][0]
    bound = over._server.max_pending_frame_bytes
    for conn in sorted((c for c in holders if c.host == top and held(c)), key=held, reverse=True):
        if total() <= bound:
            return
        yield conn


def peer_host(address: Any) -> str:
    """The host a peer's connections count for, from its address from accept() (``address_host``
    of its host part; the address itself if it has none)."""
    if isinstance(address, tuple) and address:
        return address_host(str(address[0]))
    return str(address)


def address_host(text: str) -> str:
    """The host of an IP address, for counts per host: an IPv6 address by its /64 (one host may
    hold all of it, and take a fresh address for each connection or guess), an IPv4-mapped one
    as its IPv4 address; anything else as given."""
    try:
        address = ipaddress.ip_address(text.partition("%")[0])  # (a link-local one's zone)
    except ValueError:
        return text
    if address.version == 4:
        return text
    if address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(ipaddress.ip_network(f"{address}/64", strict=False))
