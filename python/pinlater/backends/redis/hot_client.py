"""The Redis store's own asyncio connection for the hot scripts: commands packed in Rust from the
batches, replies read in Rust into them, no Python object per job and no redis-py on the way.

One ``HotClient`` per shard keeps one connection per event loop and pipelines on it: every call
writes its command at once and waits on a FIFO of futures, since Redis answers in order. The
connection is made on first use (``CLIENT SETNAME pinlater-shard-{name}``, as the store's pools
name theirs, and ``SCRIPT LOAD`` of the hot scripts, all in one round trip); the shard config holds
a host and port only (no password or database), as for the pools. A script flushed since
(``NOSCRIPT``) is loaded again and the call sent once more: Redis ran nothing.

Failures, mapped by ``shard_errors`` exactly as for redis-py's clients (the same exception types
go in: ``redis.ConnectionError`` and ``redis.TimeoutError`` for the connection, redis-py's own
``parse_error`` for an error reply):

* a connection that breaks (closed, reset, a reply that is not RESP or not the script's, or one
  whose headers announce more than ``MAX_REPLY_BYTES``) fails every call waiting on it with
  ``ShardConnectionError`` (``maybe_applied`` when its command was written), and the next call
  connects afresh;
* a call with no reply within the timeout (BACKEND_SOCKET_TIMEOUT_SECONDS, as the pools' socket
  timeout) fails with a ``TimeoutError`` cause, and the connection is dropped with every call on
  it (their replies would come after the late one);
* a call is repeated once on a fresh connection where ``connections.repeatable`` allows it (never
  an enqueue once written);
* an idle connection that has something to read (the server closed it, say after a restart) is
  dropped before anything is written on it (polled as ``connections.readable_now`` does), as the pools' checkout
  check does.
"""

from __future__ import annotations

import asyncio
import enum
import hashlib
import logging
import select
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol, TypeAlias, TypeVar, cast

import redis
from redis._parsers.base import BaseParser

from pinlater._pinlater import (
    RedisErrorReply,
    redis_claimed_reply,
    redis_claimed_split,
    redis_pack_command,
    redis_reply_end,
)
from pinlater.backends.redis import scripts
from pinlater.backends.redis.config import RedisShardConfig
from pinlater.backends.redis.connections import NOT_REPEATED_ONCE_SENT, SENT, repeatable
from pinlater.backends.redis.layouts import ShardLayout
from pinlater.backends.redis.script_calls import shard_errors
from pinlater.errors import ShardConnectionError

T = TypeVar("T")
U = TypeVar("U")

#: One script call as ``HotScripts.call`` takes it: (script, command, reply parser).
Call: TypeAlias = tuple[str, bytes, Callable[[bytes], T]]

#: What a connection hands a call: the reply's bytes, or ``(end, value)`` where a splitter (below)
#: read the reply's value while finding its end.
Reply: TypeAlias = bytes | tuple[int, object]

#: ``redis_reply_end`` that also reads the reply when it is the one a parser expects (see
#: ``redis_claimed_split``): ``(end, value)``, else what ``redis_reply_end`` answers.
Splitter: TypeAlias = Callable[[bytes, int, int], int | tuple[int, object]]

_SPLITTERS: dict[Callable[[bytes], object], Splitter] = {redis_claimed_reply: redis_claimed_split}
"""Parsers whose replies the connection reads as it splits them off the stream: one walk of a
dequeue reply's bytes instead of two (about a tenth of the server's instructions per job on Redis)."""

log = logging.getLogger(__name__)

HOT_SCRIPTS = (
    "enqueue_jobs",
    "enqueue_keyed_jobs",
    "dequeue_jobs",
    "ack_jobs",
    "count_jobs",
    "reserve_jobs",
    "claim_reserved",
)
"""The scripts loaded on connect (``count_jobs`` checks a queue exists for a dequeue of 0 jobs;
``reserve_jobs`` and ``claim_reserved`` are the dequeue broker's refill and claims;
``enqueue_keyed_jobs`` the enqueues of jobs with dedup or group keys)."""

_NO_DEADLINE = float("inf")

_ASKING = redis_pack_command(("ASKING",))

MAX_REPLY_BYTES = 512 << 20
"""A reply announcing more is refused and its connection dropped (Redis's own largest bulk
string, ``proto-max-bulk-len``, is 512 MiB by default)."""


def script_sha(name: str, layout: str = "original") -> str:
    """The SHA1 Redis names the layout's ``{name}.lua`` by (as redis-py's ``Script`` computes it)."""
    return hashlib.sha1(scripts.source(name, layout).encode(), usedforsecurity=False).hexdigest()


class HotScripts(Protocol):
    """What ``NativeHotPath`` sends its scripts through: ``HotClient`` on one server,
    ``cluster.ClusterHotClient`` on a Redis Cluster."""

    #: The SHA of each of ``HOT_SCRIPTS`` in the shard's layout.
    shas: dict[str, str]
    #: Whether ``call_then`` writes its second call behind the first (``HotClient``), or sends
    #: the first alone (a cluster's client).
    pipelines: bool

    async def call(self, script: str, command: bytes, parse: Callable[[bytes], T]) -> T: ...

    async def call_pair(self, first: Call[T], second: Call[U]) -> tuple[T, U]:
        """Two calls of one queue, the first run before the second, each answered as ``call``
        answers it; the first's failure is raised. ``HotClient`` writes them at once (one round
        trip); both scripts must be ones a fresh connection may repeat."""
        ...

    async def call_then(self, first: Call[T], second: Call[U]) -> tuple[T, U | None]:
        """``first`` as ``call`` answers it, and ``second`` written right behind it on the same
        connection where one is up (``HotClient``: one write), so Redis runs it after the first.
        ``second`` is an extra: its answer, or None when it was not sent behind the first (no
        live connection, a client that cannot) or did not run (a failure of its own, NOSCRIPT),
        never an error of the call."""
        ...

    async def aclose(self) -> None: ...

    def forget(self) -> None: ...


class _Broken(Exception):
    """Why a connection stopped: the redis-py exception type to raise, and its text."""

    def __init__(self, kind: type[redis.RedisError], text: str) -> None:
        super().__init__(text)
        self.kind = kind


class _Connection(asyncio.Protocol):
    """One socket to Redis: commands written as they come, replies matched to them in order."""

    def __init__(self, max_reply_bytes: int) -> None:
        self._max = max_reply_bytes
        self._transport: asyncio.Transport | None = None
        #: The loop it was made on (``connection_made``): each send's future and deadline.
        self._loop: asyncio.AbstractEventLoop | None = None
        #: Calls waiting for their reply, in the order sent, each with its deadline (``loop.time()``;
        #: ``inf`` for none): one timer per connection watches the oldest (``_sweep``).
        #: And each call's ``Splitter`` (None: ``redis_reply_end``; its future gets bytes).
        self._waiters: deque[tuple[asyncio.Future[Any], float, Splitter | None]] = deque()
        self._timer: asyncio.TimerHandle | None = None
        self._chunks: list[bytes] = []
        self._have = 0  # bytes in _chunks
        self._need = 1  # scan again once _have reaches this
        self.broken: _Broken | None = None
        #: Polls the socket for ``usable`` (made once: that check precedes most calls).
        self._poller: select.poll | None = None

    # -- asyncio.Protocol ----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # uvloop's transports are not subclasses
        self._transport = transport
        self._loop = asyncio.get_running_loop()
        sock = transport.get_extra_info("socket")
        if sock is not None:
            self._poller = select.poll()
            self._poller.register(sock.fileno(), select.POLLIN | select.POLLERR | select.POLLHUP)

    def data_received(self, data: bytes) -> None:
        if self.broken is not None:
            return
        self._chunks.append(data)
        self._have += len(data)
        if self._have < self._need:
            return
        buf = data if len(self._chunks) == 1 else b"".join(self._chunks)
        pos, size = 0, len(buf)
        need = 1
        waiters = self._waiters
        while pos < size:
            split = waiters[0][2] if waiters else None
            try:
                found = redis_reply_end(buf, pos, self._max) if split is None else split(buf, pos, self._max)
            except ValueError as exc:
                self.fail(_Broken(redis.ConnectionError, f"Protocol error: {exc}"))
                return
            if isinstance(found, int):
                end = found
                if end < 0:
                    need = -end - pos
                    break
                reply: Reply = buf if pos == 0 and end == size else buf[pos:end]
            else:
                end, reply = found[0], found
            pos = end
            if not waiters:
                self.fail(_Broken(redis.ConnectionError, "Protocol error: a reply nobody asked for"))
                return
            waiter = waiters.popleft()[0]
            if not waiter.done():  # a caller that was cancelled leaves its reply unread
                waiter.set_result(reply)
        rest = buf[pos:] if pos < size else b""
        self._chunks = [rest] if rest else []
        self._have = len(rest)
        self._need = need

    def connection_lost(self, exc: Exception | None) -> None:
        reason = "Connection closed by server." if exc is None else f"Connection lost: {exc}"
        self.fail(_Broken(redis.ConnectionError, reason))

    # -- ours ------------------------------------------------------------------------------------

    def usable(self, probe: bool = True) -> bool:
        """Not broken; when idle, nothing to read (the server closed it, or is out of step).
        Without ``probe``, an idle connection is not polled for that (a system call): for calls
        that may run again on a fresh connection when this one turns out dead after the write."""
        if self.broken is not None or self._transport is None or self._transport.is_closing():
            return False
        if self._waiters or not probe:
            return True
        poller = self._poller  # (``connections.readable_now``, with a poller made once)
        try:
            readable = poller is None or bool(poller.poll(0))
        except OSError:
            readable = True
        if readable:
            self.fail(_Broken(redis.ConnectionError, "Connection closed by server."))
            return False
        return True

    def send(self, command: bytes, timeout: float | None = None) -> asyncio.Future[bytes]:
        """Write ``command``; the future gets its reply. Raises ``_Broken`` if nothing was written.
        With ``timeout``, a reply not in by then breaks the connection (``TimeoutError``)."""
        return cast("asyncio.Future[bytes]", self.send_split(command, timeout, None))  # (no splitter: bytes)

    def send_split(self, command: bytes, timeout: float | None, split: Splitter | None) -> asyncio.Future[Reply]:
        """``send``, the reply found (and, where ``split`` reads it, read) by ``split``."""
        loop = self._loop
        if self.broken is not None or self._transport is None or loop is None:
            raise self.broken or _Broken(redis.ConnectionError, "Not connected.")
        waiter: asyncio.Future[Reply] = loop.create_future()
        if timeout is None:
            self._waiters.append((waiter, _NO_DEADLINE, split))
        else:
            deadline = loop.time() + timeout
            self._waiters.append((waiter, deadline, split))
            if self._timer is None:
                self._timer = loop.call_at(deadline, self._sweep)
        self._transport.write(command)
        return waiter

    def send_pair(
        self, first: bytes, second: bytes, timeout: float, splits: tuple[Splitter | None, Splitter | None]
    ) -> tuple[asyncio.Future[Reply], asyncio.Future[Reply]]:
        """``send`` of two commands in one write (one system call): Redis reads them together
        and answers both in one go."""
        loop = self._loop
        if self.broken is not None or self._transport is None or loop is None:
            raise self.broken or _Broken(redis.ConnectionError, "Not connected.")
        deadline = loop.time() + timeout
        one: asyncio.Future[Reply] = loop.create_future()
        two: asyncio.Future[Reply] = loop.create_future()
        self._waiters.append((one, deadline, splits[0]))
        self._waiters.append((two, deadline, splits[1]))
        if self._timer is None:
            self._timer = loop.call_at(deadline, self._sweep)
        self._transport.write(first + second)
        return one, two

    def _sweep(self) -> None:
        """The timer: fail the connection if its oldest call still waiting is past its deadline,
        else watch that call (deadlines grow along the FIFO: calls share their client's timeout)."""
        self._timer = None
        if self.broken is not None:
            return
        loop = asyncio.get_running_loop()
        for waiter, deadline, _ in self._waiters:
            if waiter.done() or deadline == _NO_DEADLINE:
                continue
            if deadline <= loop.time():
                self.fail(_Broken(redis.TimeoutError, "Timeout reading from socket"))
            else:
                self._timer = loop.call_at(deadline, self._sweep)
            return

    def fail(self, why: _Broken) -> None:
        """Break the connection: every waiting call fails with ``why``."""
        if self.broken is None:
            self.broken = why
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._transport is not None:
            self._transport.abort()
        while self._waiters:
            waiter = self._waiters.popleft()[0]
            if not waiter.done():
                waiter.set_exception(_Broken(why.kind, str(why)))
        self._chunks, self._have = [], 0

    def close(self) -> None:
        self.fail(_Broken(redis.ConnectionError, "Connection closed by the store."))


class HotClient:
    """One shard's hot scripts over a connection of its own (see the module docstring)."""

    pipelines = True

    def __init__(
        self,
        name: str,
        config: RedisShardConfig,
        timeout: float,
        max_reply_bytes: int = MAX_REPLY_BYTES,
        layout: ShardLayout | None = None,
    ) -> None:
        self._name = name
        self._config = config
        self._timeout = timeout
        self._max_reply_bytes = max_reply_bytes
        #: The shard's layout (None: the original, unchecked, as tests of the client alone use).
        self._layout = layout
        self.shas: dict[str, str] = {}
        self._use_layout("original" if layout is None else layout.name)
        if layout is not None and not layout.checked:  # (a checked layout changes no more: a
            layout.on_change(self._use_layout)  # cluster's client per node adds no listener then)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._conn: _Connection | None = None
        self._connecting: asyncio.Task[_Connection] | None = None

    def _use_layout(self, name: str) -> None:
        self._layout_name = name
        self.shas.update({script: script_sha(script, name) for script in HOT_SCRIPTS})  # in place: shared

    async def call(self, script: str, command: bytes, parse: Callable[[bytes], T], *, asking: bool = False) -> T:
        """Send ``command`` (an EVALSHA of ``script``) and read its reply with ``parse``. With
        ``asking`` (a Redis Cluster ``-ASK`` redirect to this node), ``ASKING`` goes first, on the
        same connection, so the node runs the command for a slot it is importing."""
        if self._layout is not None and not self._layout.checked:
            self._layout.require()
        # SENT is kept across the attempts: an error of the second says the writes may have landed
        # if either attempt sent the command (a claim's first run may have, its reply lost)
        token = SENT.set(False)
        try:
            for attempt in (1, 2):
                try:
                    try:
                        conn = self._conn
                        if asking or conn is None or self._loop is not asyncio.get_running_loop() or not conn.usable():
                            return await self._call_once(script, command, parse, asking)
                        # The connection is up (the common case): its round trip inline, one
                        # coroutine fewer per level (``_call_once`` and ``_round_trip`` do the same),
                        # and ``_send``'s too.
                        try:
                            waiter = conn.send_split(command, self._timeout, _SPLITTERS.get(parse))
                            SENT.set(True)
                            reply = await waiter
                        except _Broken as exc:  # (not sent, or its reply lost)
                            raise exc.kind(str(exc)) from None
                        if not isinstance(reply, bytes):  # read as it arrived (a splitter's)
                            return cast(T, reply[1])
                        try:  # (``_read``'s common case inline: a reply that parses)
                            result: T | _NoScript = parse(reply)
                        except (RedisErrorReply, ValueError):
                            result = _read(conn, reply, parse)
                        if result is _NOSCRIPT:
                            return await self._reload_and_call(script, command, parse)
                        return result
                    except redis.RedisError:  # mapped as the pools' calls are (not entered per call: hot)
                        with shard_errors(self._name, self._config):
                            raise
                except ShardConnectionError as exc:
                    if attempt == 2 or not repeatable(script, exc.__cause__ or exc):
                        raise
                    log.info("shard %s: %s again on a fresh connection after: %s", self._name, script, exc.detail)
        finally:
            SENT.reset(token)
        raise AssertionError("unreachable")

    def _live(self) -> _Connection | None:
        """The connection to write a pair on at once: up, on this loop, its layout checked. Not
        polled when idle (``usable(probe=False)``): both scripts of a pair may run again, and
        ``call_pair`` sends them again one by one when the connection was dead after all."""
        conn = self._conn
        if (
            (self._layout is not None and not self._layout.checked)
            or conn is None
            or self._loop is not asyncio.get_running_loop()
            or not conn.usable(probe=False)
        ):
            return None
        return conn

    async def call_pair(self, first: Call[T], second: Call[U]) -> tuple[T, U]:
        """``HotScripts.call_pair``: both commands in one write on the live connection. Without
        one (or after a NOSCRIPT, or a connection lost on the way, which both scripts may
        repeat), what is left goes through ``call``, one after the other."""
        assert first[0] not in NOT_REPEATED_ONCE_SENT and second[0] not in NOT_REPEATED_ONCE_SENT
        conn = self._live()
        if conn is None:
            return await self.call(*first), await self.call(*second)
        try:
            try:
                one, two = conn.send_pair(
                    first[1], second[1], self._timeout, (_SPLITTERS.get(first[2]), _SPLITTERS.get(second[2]))
                )
                try:
                    replies = await one, await two
                except BaseException:  # ``two`` may not have been awaited: its failure is read, not logged
                    two.add_done_callback(_consumed)
                    raise
            except _Broken as exc:
                if exc.kind is not redis.ConnectionError:  # a timeout is not a dead connection
                    raise exc.kind(str(exc)) from None
                log.info("shard %s: %s and %s again one by one after: %s", self._name, first[0], second[0], exc)
                return await self.call(*first), await self.call(*second)
            try:  # (``_read``'s common case inline: replies that parse)
                a: T | _NoScript = _parsed(replies[0], first[2])
                b: U | _NoScript = _parsed(replies[1], second[2])
            except (RedisErrorReply, ValueError):
                a = _read(conn, replies[0], first[2])
                b = _read(conn, replies[1], second[2])
        except redis.RedisError:
            with shard_errors(self._name, self._config):
                raise
        # NOSCRIPT: Redis ran nothing of that one (the scripts were flushed): through ``call``.
        return (
            await self.call(*first) if a is _NOSCRIPT else a,
            await self.call(*second) if b is _NOSCRIPT else b,
        )

    async def call_then(self, first: Call[T], second: Call[U]) -> tuple[T, U | None]:
        """``HotScripts.call_then``: both commands in one write on the live connection, the first
        answered exactly as ``call`` answers it (a lost connection included: what ``call`` would
        repeat, it repeats, alone); without a live connection, the first alone."""
        conn = self._live()
        if conn is None:
            return await self.call(*first), None
        script, command, parse = first
        token = SENT.set(False)
        try:
            try:
                try:
                    one, two = conn.send_pair(
                        command, second[1], self._timeout, (_SPLITTERS.get(parse), _SPLITTERS.get(second[2]))
                    )
                except _Broken as exc:  # nothing was written
                    raise exc.kind(str(exc)) from None
                SENT.set(True)
                two.add_done_callback(lambda f: f.cancelled() or f.exception())  # read below, if at all
                try:
                    reply = await one
                except _Broken as exc:
                    raise exc.kind(str(exc)) from None
                result = _read(conn, reply, parse)
            except redis.RedisError:
                with shard_errors(self._name, self._config):
                    raise
        except ShardConnectionError as exc:
            if not repeatable(script, exc.__cause__ or exc):
                raise
            log.info("shard %s: %s again on a fresh connection after: %s", self._name, script, exc.detail)
            return await self.call(*first), None
        finally:
            SENT.reset(token)
        if result is _NOSCRIPT:  # Redis ran neither (the scripts were flushed): the first alone
            return await self._reload_and_call(script, command, parse), None
        try:
            extra = _read(conn, await two, second[2])
        except (_Broken, redis.RedisError) as exc:
            log.debug("shard %s: %s behind %s failed: %s", self._name, second[0], script, exc)
            return result, None
        return result, None if extra is _NOSCRIPT else extra

    async def _call_once(self, script: str, command: bytes, parse: Callable[[bytes], T], asking: bool = False) -> T:
        conn, reply = await self._round_trip(command, asking)
        result = _read(conn, reply, parse)
        if result is _NOSCRIPT:
            return await self._reload_and_call(script, command, parse, asking)
        return result

    async def _reload_and_call(
        self, script: str, command: bytes, parse: Callable[[bytes], T], asking: bool = False
    ) -> T:
        """After a ``NOSCRIPT`` reply: the script was flushed since we connected (SCRIPT FLUSH),
        so Redis ran nothing; load every hot script (so a later ``call_pair`` never finds one
        loaded and the other not, which would run its second before its first) and send
        ``command`` again."""
        await self._load(list(HOT_SCRIPTS))
        conn, reply = await self._round_trip(command, asking)
        try:
            return parse(reply)
        except RedisErrorReply as exc:
            raise _error_reply(str(exc)) from None
        except ValueError as exc:
            raise _protocol_error(conn, exc) from None

    async def _round_trip(self, command: bytes, asking: bool = False) -> tuple[_Connection, bytes]:
        """The connection and its reply to ``command`` (after ``ASKING`` with ``asking``);
        redis-py's connection errors for a failure (a reply not in within the timeout breaks the
        connection: ``_Connection._sweep``)."""
        conn = await self._connection()
        if asking:
            try:
                ok = conn.send(_ASKING, self._timeout)
            except _Broken as exc:
                raise exc.kind(str(exc)) from None
            # Its reply is +OK; if it is not, the node answers the command with a redirect again.
            ok.add_done_callback(lambda f: f.cancelled() or f.exception())
        waiter = self._send(conn, command)
        try:
            return conn, await waiter
        except _Broken as exc:
            raise exc.kind(str(exc)) from None

    def _send(self, conn: _Connection, command: bytes) -> asyncio.Future[bytes]:
        """Write ``command`` on ``conn`` with this client's timeout and mark it ``SENT``; the
        future gets its reply. redis-py's connection error if nothing was written."""
        try:
            waiter = conn.send(command, self._timeout)
        except _Broken as exc:
            raise exc.kind(str(exc)) from None
        SENT.set(True)
        return waiter

    async def _connection(self) -> _Connection:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self.forget()
            self._loop = loop
        conn = self._conn
        if conn is not None and conn.usable():
            return conn
        self._conn = None
        if self._connecting is None or self._connecting.done():
            self._connecting = loop.create_task(self._connect())
            # read by whoever awaits it; this only keeps an abandoned failure from being logged
            self._connecting.add_done_callback(lambda t: t.cancelled() or t.exception())
        try:
            conn = await asyncio.shield(self._connecting)
        except (TimeoutError, OSError) as exc:
            detail = f"Error connecting to {self._config.master}: {exc or type(exc).__name__}"
            kind = redis.TimeoutError if isinstance(exc, asyncio.TimeoutError) else redis.ConnectionError
            raise kind(detail) from None
        except _Broken as exc:
            raise exc.kind(f"Error connecting to {self._config.master}: {exc}") from None
        return conn

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        endpoint = self._config.master
        max_bytes = self._max_reply_bytes
        _, conn = await asyncio.wait_for(
            loop.create_connection(lambda: _Connection(max_bytes), endpoint.host, endpoint.port), self._timeout
        )
        try:
            setname = conn.send(redis_pack_command(("CLIENT", "SETNAME", f"pinlater-shard-{self._name}")))
            loads = self._send_loads(conn, HOT_SCRIPTS)
            replies = await asyncio.wait_for(asyncio.gather(setname, *loads), self._timeout)
            _check_loaded(replies[0], None)
            for script, reply in zip(HOT_SCRIPTS, replies[1:], strict=True):
                _check_loaded(reply, self.shas[script])
        except BaseException:
            conn.close()
            raise
        if self._loop is loop:
            self._conn = conn
        return conn

    def _send_loads(self, conn: _Connection, names: tuple[str, ...] | list[str]) -> list[asyncio.Future[bytes]]:
        return [
            conn.send(redis_pack_command(("SCRIPT", "LOAD", scripts.source(name, self._layout_name)))) for name in names
        ]

    async def _load(self, names: list[str]) -> None:
        conn = await self._connection()
        try:
            loads = self._send_loads(conn, names)
        except _Broken as exc:
            raise exc.kind(str(exc)) from None
        timer = asyncio.get_running_loop().call_later(self._timeout, _time_out, conn, loads[-1])
        try:
            for name, waiter in zip(names, loads, strict=True):
                _check_loaded(await waiter, self.shas[name])
        except _Broken as exc:
            raise exc.kind(str(exc)) from None
        finally:
            timer.cancel()

    async def aclose(self) -> None:
        """Close the connection (on the loop that made it)."""
        conn, loop = self._conn, self._loop
        self.forget()
        if conn is not None and loop is asyncio.get_running_loop():
            conn.close()

    def forget(self) -> None:
        """Drop the connection of another loop without touching it (it goes with its loop)."""
        self._conn, self._loop, self._connecting = None, None, None


class _NoScript(enum.Enum):
    """What ``_read`` answers for a NOSCRIPT reply: Redis ran nothing; load the script and send
    the command again."""

    NOSCRIPT = enum.auto()


_NOSCRIPT = _NoScript.NOSCRIPT


def _consumed(future: asyncio.Future[T]) -> None:
    """A done callback that reads a future's failure, so that asyncio does not log it unread."""
    if not future.cancelled():
        future.exception()


def _parsed(reply: Reply, parse: Callable[[bytes], T]) -> T:
    """``parse(reply)``, or the value its splitter read (``_SPLITTERS``)."""
    return parse(reply) if isinstance(reply, bytes) else cast(T, reply[1])


def _read(conn: _Connection, reply: Reply, parse: Callable[[bytes], T]) -> T | _NoScript:
    """``parse(reply)`` (or the value read: ``_parsed``); ``_NOSCRIPT`` for a NOSCRIPT reply;
    redis-py's error for any other error reply, and a protocol error (which drops ``conn``) for a
    reply ``parse`` cannot read."""
    try:
        return _parsed(reply, parse)
    except RedisErrorReply as exc:
        text = str(exc)
        if text.startswith("NOSCRIPT"):
            return _NOSCRIPT
        raise _error_reply(text) from None
    except ValueError as exc:
        raise _protocol_error(conn, exc) from None


def _error_reply(text: str) -> redis.RedisError:
    """The exception redis-py raises for the error reply ``-{text}`` (so ``shard_errors`` maps
    ours exactly as theirs: ``OutOfMemoryError``, ``BusyLoadingError``, ``ResponseError``...)."""
    try:
        exc: redis.RedisError = BaseParser.parse_error(text)  # type: ignore[no-untyped-call]  # untyped in redis-py
    except ValueError:  # -MOVED or -ASK without "slot host:port": redis-py's classes refuse it
        return redis.ConnectionError(f"Protocol error: a malformed error reply: -{text[:100]}")
    return exc


def _protocol_error(conn: _Connection, exc: ValueError) -> redis.ConnectionError:
    """A reply that is not the script's: the connection is out of step; drop it."""
    conn.fail(_Broken(redis.ConnectionError, f"Protocol error: {exc}"))
    return redis.ConnectionError(f"Protocol error: {exc}")


def _time_out(conn: _Connection, waiter: asyncio.Future[bytes]) -> None:
    if not waiter.done():
        conn.fail(_Broken(redis.TimeoutError, "Timeout reading from socket"))


def _check_loaded(reply: bytes, sha: str | None) -> None:
    """A setup reply: ``+OK`` (``sha`` None) or the script's SHA; an error reply is raised."""
    if reply.startswith(b"-"):
        raise _error_reply(reply[1:-2].decode("utf-8", "replace"))
    if sha is None:
        if reply != b"+OK\r\n":
            raise _Broken(redis.ConnectionError, f"Protocol error: unexpected reply {reply[:64]!r}")
    elif not reply.startswith(b"$") or reply.split(b"\r\n")[1] != sha.encode():
        raise _Broken(redis.ConnectionError, f"Protocol error: SCRIPT LOAD answered {reply[:64]!r}")
