"""The admin port's connections, bounded: at most ``MAX_ADMIN_CONNECTIONS`` open, at most nine tenths
of them from one host, and none held idle.

aiohttp keeps a connection that sends nothing, or half a request's headers, for its keep-alive
timeout (an hour) or for ever, and caps no count: 20,000 idle connections to the admin port
took the server to its open-files limit, and the Thrift port could accept no client (a probe;
the admin port needs no password to connect). So the admin site (``GuardedSite``) wraps each
connection's protocol:

* at ``MAX_ADMIN_CONNECTIONS`` open, a new connection takes the place of the idle one (no request
  in progress) whose peer was heard from longest ago, else of the action whose body has come
  slowest (bytes a second since it began waiting for it, ``reading``: no password is checked
  before the body is whole, so a peer trickling bodies on every connection had locked out even
  ``/healthz`` and ``/readyz``, a load balancer's checks), or is closed as it is accepted when
  there is none (logged at most once a minute), so the admin port holds at most that many of
  the files ``OPEN_FILES_RESERVE`` keeps for it and the stores, and a peer holding idle
  connections cannot lock an operator out;
* one host (a peer address) holds at most nine tenths of the cap, as on the Thrift port
  (``transport.peer_connection_cap``; not on a loopback address, where every peer is this
  machine: ``AdminApp``): a host at its share has its new connection take the place
  of its own idle one heard from longest ago, or closed as it is accepted when none of its own is
  idle; so a host holding every one of its connections in a request (bodies trickled in, each
  kept up to ``ADMIN_REQUEST_SECONDS``) leaves the other hosts a tenth of the port;
* a sweep, once a second, closes a connection with no request in progress that has answered
  none for ``ADMIN_IDLE_SECONDS`` since it opened or since its last answer, or since its answer
  last went out further to a slow reader (an idle keep-alive, a peer still sending its first
  request's headers, or one that takes none of its answer), and one whose request has run for
  ``ADMIN_REQUEST_SECONDS`` (a body trickled in a byte at a time; the slowest real request, a
  body-filtered scan, stops at its budget of seconds).

The requests in progress are counted by the admin app's middleware (``request_started``,
``request_ended``), which sees each request's protocol.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from typing import cast

from aiohttp import web

from pinlater.config import ADMIN_REQUEST_SECONDS
from pinlater.logthrottle import ThrottledLog
from pinlater.server.transport import peer_connection_cap, peer_host

__all__ = ["ADMIN_IDLE_SECONDS", "ADMIN_REQUEST_SECONDS", "MAX_ADMIN_CONNECTIONS", "AdminConnections", "GuardedSite"]

log = logging.getLogger("pinlater.server.admin")

MAX_ADMIN_CONNECTIONS = 256
"""Admin connections open at once; one more is closed as it is accepted."""

ADMIN_IDLE_SECONDS = 30.0
"""A connection with no request in progress is closed once it has answered none this long."""


SWEEP_SECONDS = 1.0


class _Connection:
    __slots__ = ("buffered", "busy", "heard", "host", "read_from", "reading", "received", "since", "transport")

    def __init__(self, transport: asyncio.Transport, host: str, now: float) -> None:
        self.transport = transport
        #: The peer's address (its host part), whose share of the cap it counts in.
        self.host = host
        #: Requests in progress (one at a time on HTTP/1.1, but aiohttp may pipeline).
        self.busy = 0
        #: When it opened, its last request ended, its first request in progress began, or the
        #: answer it is being written last went out further.
        self.since = now
        #: Bytes of answers waiting to be written, at the last sweep.
        self.buffered = 0
        #: When its peer last sent anything (a request about to begin is not the one to evict).
        self.heard = now
        #: Its request is an action waiting for its body, its password not yet checked.
        self.reading = False
        #: Bytes its peer sent, and when its action began waiting for its body with how many.
        self.received = 0
        self.read_from = (now, 0)


class AdminConnections:
    """The admin port's open connections, keyed by aiohttp's protocol (``request.protocol``)."""

    def __init__(
        self,
        cap: int = MAX_ADMIN_CONNECTIONS,
        idle_seconds: float = ADMIN_IDLE_SECONDS,
        request_seconds: float = ADMIN_REQUEST_SECONDS,
        peer_cap: int | None = None,
    ) -> None:
        self.cap = cap
        #: Connections one host may hold: by default nine tenths of the cap (at least one).
        self.peer_cap = peer_connection_cap(cap, peer_cap)
        self.idle_seconds = idle_seconds
        self.request_seconds = request_seconds
        self.open: dict[object, _Connection] = {}
        #: Connections open per host (a host with none has no entry).
        self.per_host: collections.Counter[str] = collections.Counter()
        #: Connections closed as they were accepted, past the cap (a total since start).
        self.refused = 0
        #: Of those, refused for their host's share of it (a total since start).
        self.refused_per_host = 0
        #: Connections closed by the sweep, idle or too slow (a total since start).
        self.timed_out = 0
        #: Idle connections closed to make room for a new one at the cap (a total since start).
        self.evicted = 0
        self._log_refused = ThrottledLog(log, 60.0)
        self._log_refused_host = ThrottledLog(log, 60.0)  # (its own: a flood of one hides not the other)

    def protocol(self, inner: asyncio.Protocol) -> asyncio.Protocol:
        return _Guarded(self, inner)

    def request_started(self, protocol: object) -> None:
        connection = self.open.get(protocol)
        if connection is not None:
            if not connection.busy:
                connection.since = time.monotonic()
            connection.busy += 1

    def request_ended(self, protocol: object) -> None:
        connection = self.open.get(protocol)
        if connection is not None:
            connection.busy = max(0, connection.busy - 1)
            connection.since = time.monotonic()

    def reading(self, protocol: object, reading: bool) -> None:
        """The request in progress on ``protocol``'s connection waits for its body (or has it)."""
        connection = self.open.get(protocol)
        if connection is not None:
            connection.reading = reading
            if reading:
                connection.read_from = (time.monotonic(), connection.received)

    @property
    def reading_bodies(self) -> int:
        """Connections whose action waits for its body."""
        return sum(1 for c in self.open.values() if c.reading)

    def sweep(self, now: float) -> int:
        """Close the connections past their time; how many."""
        late = [c for c in self.open.values() if self._late(c, now)]
        for connection in late:
            connection.transport.abort()
        self.timed_out += len(late)
        return len(late)

    def _late(self, c: _Connection, now: float) -> bool:
        buffered = c.transport.get_write_buffer_size()
        if buffered < c.buffered:  # an answer going out to a slow reader: progress
            c.since = now
        c.buffered = buffered
        # (aiohttp writes an answer after the middleware ended the request: a peer that takes
        # none of it ages as an idle one, and is closed as one)
        return now - c.since >= (self.request_seconds if c.busy else self.idle_seconds)

    def admit(self, key: object, transport: asyncio.Transport, host: str) -> bool:
        """Count a connection just accepted from ``host``, making room for it if its host is at
        its share or the port at its cap (``make_room``); whether it was taken (if not, the
        caller closes it and it was counted refused)."""
        if self.per_host[host] >= self.peer_cap and not self.make_room(host):
            self.refused += 1
            self.refused_per_host += 1
            self._log_refused_host(
                "admin connection from %s refused: that host has %d open, at most %d (nine tenths of"
                " MAX_ADMIN_CONNECTIONS), none of them idle",
                host,
                self.per_host[host],
                self.peer_cap,
            )
            return False
        if len(self.open) >= self.cap and not self.make_room():
            self.refused += 1
            self._log_refused(
                "admin connection refused: %d open, at most %d (MAX_ADMIN_CONNECTIONS)", len(self.open), self.cap
            )
            return False
        self.open[key] = _Connection(transport, host, time.monotonic())
        self.per_host[host] += 1
        return True

    def forget(self, key: object) -> None:
        """A connection closed (or closed by ``make_room``): out of the counts."""
        connection = self.open.pop(key, None)
        if connection is not None:
            left = self.per_host[connection.host] - 1
            if left > 0:
                self.per_host[connection.host] = left
            else:
                del self.per_host[connection.host]

    def make_room(self, host: str | None = None) -> bool:
        """Make room for one connection (of ``host``'s, if given): forget one that is closing
        already, else close the idle one whose peer was heard from longest ago (not one whose
        next request is arriving), else the action whose body has come slowest (a legitimate
        upload waiting its turn is not cut for a peer trickling bytes); whether room was made.
        It leaves the counts at once (its ``connection_lost`` comes later)."""
        mine = [(key, c) for key, c in self.open.items() if host is None or c.host == host]
        for key, c in mine:
            if c.transport.is_closing():  # closing already (by the sweep, say), its loss not yet told
                c.transport.abort()  # (a close waits on a peer taking its answer: not forgotten open)
                self.forget(key)
                return True
        idle = [(c.heard, key) for key, c in mine if not c.busy and not c.transport.get_write_buffer_size()]
        if not idle:
            now = time.monotonic()
            idle = [(_body_rate(c, now), key) for key, c in mine if c.reading]
        if not idle:
            return False
        _, key = min(idle, key=lambda pair: pair[0])
        self.open[key].transport.abort()
        self.forget(key)
        self.evicted += 1
        return True

    async def run(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_SECONDS)
            try:
                self.sweep(time.monotonic())
            except Exception:  # a bug: logged, and the sweep goes on
                log.exception("admin connection sweep failed")


def _body_rate(c: _Connection, now: float) -> float:
    """Bytes a second its peer sent since its action began waiting for its body, counting 1 KiB
    more over at least a second: one that has just begun (its first bytes not yet in) is not
    taken for the slowest, a peer trickling a byte a second is, within a few seconds."""
    began, received = c.read_from
    return (c.received - received + 1024) / max(now - began, 1.0)


class _Guarded(asyncio.Protocol):
    """aiohttp's protocol for one connection, counted in ``AdminConnections`` (or refused)."""

    __slots__ = ("_inner", "_owner")

    def __init__(self, owner: AdminConnections, inner: asyncio.Protocol) -> None:
        self._owner = owner
        self._inner: asyncio.Protocol | None = inner

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        tcp = cast(asyncio.Transport, transport)  # (uvloop's is not an asyncio.Transport)
        assert self._inner is not None
        if not self._owner.admit(self._inner, tcp, peer_host(tcp.get_extra_info("peername"))):
            self._inner = None
            tcp.abort()
            return
        self._inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self._inner is not None:
            connection = self._owner.open.get(self._inner)
            if connection is not None:
                connection.heard = time.monotonic()
                connection.received += len(data)
            self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return None if self._inner is None else self._inner.eof_received()

    def pause_writing(self) -> None:
        if self._inner is not None:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._inner is not None:
            self._inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._inner is not None:
            self._owner.forget(self._inner)
            self._inner.connection_lost(exc)


class GuardedSite(web.BaseSite):
    """``web.TCPSite`` whose connections go through ``AdminConnections`` (see the module doc)."""

    __slots__ = ("_host", "_port", "_sweeper", "connections")

    def __init__(self, runner: web.BaseRunner, host: str, port: int, connections: AdminConnections) -> None:
        super().__init__(runner)
        self._host = host
        self._port = port
        self.connections = connections
        self._sweeper: asyncio.Task[None] | None = None

    @property
    def name(self) -> str:
        return f"http://{self._host}:{self._port}"

    async def start(self) -> None:
        await super().start()
        server = self._runner.server
        assert server is not None
        connections = self.connections
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: connections.protocol(server()), self._host, self._port, backlog=self._backlog
        )
        self._sweeper = asyncio.create_task(connections.run(), name="pinlater-admin-sweep")

    async def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        await super().stop()
