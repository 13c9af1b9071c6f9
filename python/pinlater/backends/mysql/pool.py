"""A small thread-safe PyMySQL connection pool for one shard, and the retry policy around it.

Connections are made lazily, at most ``size`` at a time; a caller waits up to the socket timeout
for a free one. Every connection runs with autocommit off, so each ``transaction`` is explicit:
committed when the body returns, rolled back when it raises. Connection-level failures (server
gone, lost connection, timeouts) drop the connection and every idle one with it: after a server
restart they are all dead, and the next attempt must not pick up another corpse.

Stale connections: a pooled connection whose socket is readable while idle (the server closed
it: a restart, ``wait_timeout``, a kill) is dropped at checkout, before anything is sent, for
the cost of one ``poll``. One that still fails before its COMMIT was sent raises
``StaleConnectionError``: nothing of the transaction was committed (the server rolls back what a
dead session left), so it is safe to run again on a fresh connection; not one that waited out
the socket timeout (a stalled server, not a stale connection: that would cost another timeout).
A connection lost while COMMIT was on its way raises ``CommitUnknownError``: the transaction may
have committed.

``ServerInfo`` is read on every new connection, so a server replaced under us (a restart with
different settings) is noticed.
"""

from __future__ import annotations

import contextlib
import logging
import select
import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any, TypeVar

import pymysql
from pymysql.constants import CLIENT

from pinlater.backends.mysql import queries

log = logging.getLogger(__name__)

T = TypeVar("T")

#: The server went away or the link broke: the connection is unusable.
LOST_CONNECTION_ERRORS = frozenset({2006, 2013, 2055, 1053, 1927, 4031})
#: Could not connect at all (server down, refused, too many connections, bad credentials).
CONNECT_ERRORS = frozenset({2002, 2003, 2005, 1040, 1044, 1045, 1129, 1130})
#: The transaction was rolled back (or should be) but the connection is fine.
TRANSIENT_ERRORS = frozenset({1213, 1205})
#: Worth another attempt (bounded by BACKEND_NUM_AUTO_RETRIES).
RETRYABLE_ERRORS = LOST_CONNECTION_ERRORS | TRANSIENT_ERRORS | frozenset({2002, 2003, 1040})


@dataclass(frozen=True, slots=True)
class ServerInfo:
    """What the store needs to know about the server (``sql/server_info.sql``)."""

    version: str
    autoinc_lock_mode: int
    auto_increment_increment: int
    max_allowed_packet: int

    @property
    def is_mariadb(self) -> bool:
        return "mariadb" in self.version.lower()

    @property
    def consecutive_insert_ids(self) -> bool:
        """A multi-row INSERT gets consecutive ids (InnoDB lock modes 0 "traditional" and 1
        "consecutive"; mode 2 "interleaved" may hand out ids to other inserts in between)."""
        return self.autoinc_lock_mode in (0, 1)

    @property
    def supports_insert_returning(self) -> bool:
        if not self.is_mariadb:
            return False
        try:
            major, minor = (int(part) for part in self.version.split("-", 1)[0].split(".")[:2])
        except ValueError:
            return False
        return (major, minor) >= (10, 5)


def error_code(exc: BaseException) -> int | None:
    """The MySQL error number of a PyMySQL error, if it has one."""
    if isinstance(exc, pymysql.err.MySQLError) and exc.args and isinstance(exc.args[0], int):
        return exc.args[0]
    return None


def is_connection_failure(exc: BaseException) -> bool:
    """True when ``exc`` means the connection (or the server) is unusable."""
    if isinstance(exc, pymysql.err.InterfaceError | OSError | EOFError | StaleConnectionError | CommitUnknownError):
        return True
    code = error_code(exc)
    return code is not None and (code in LOST_CONNECTION_ERRORS or code in CONNECT_ERRORS or 2000 <= code < 2100)


def _timed_out(exc: BaseException) -> bool:
    """A read or write that waited out the socket timeout (PyMySQL raises the lost connection
    in the handler of the ``TimeoutError``): the server may be alive but stalled, so it is no
    stale pooled connection's failure, which comes at once (run again for free, each call on a
    stopped server cost one more timeout)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, TimeoutError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


@cache
def _opportunistic_tls_context() -> ssl.SSLContext:
    """The context PyMySQL builds for its default "preferred" TLS (encrypt if the server offers
    it, verify nothing), made once: PyMySQL makes one per connection and loads the system CA
    store into it each time (about 0.1 s) although nothing is verified."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def _datetime_literal(value: datetime) -> str:
    """A datetime as a quoted SQL literal, the same value PyMySQL's ``escape_datetime`` writes
    (microseconds always shown), at a third of its cost. A small cache serves the timestamps
    that repeat in a batch (every row of an enqueue carries "now" two or three times)."""
    literal = _DATETIME_LITERALS.get(value)
    if literal is None:
        if len(_DATETIME_LITERALS) >= 1024:
            _DATETIME_LITERALS.clear()
        literal = _DATETIME_LITERALS[value] = f"'{value.isoformat(' ', 'microseconds')}'"
    return literal


#: Shared by threads: a lost race only writes the same literal twice.
_DATETIME_LITERALS: dict[datetime, str] = {}


class _Connection(pymysql.connections.Connection):  # type: ignore[misc]  # PyMySQL is untyped
    """PyMySQL's connection, sharing one context for its default opportunistic TLS, with a fast
    path for escaping the parameters the store sends most (an enqueue of 100 jobs has 300 ints
    and 300 naive UTC datetimes; PyMySQL's generic escaping of them cost more CPU than
    everything else in the request)."""

    def escape(self, obj: Any, mapping: Any = None) -> str:
        kind = type(obj)  # exact types: bool, IntEnum and aware datetimes keep PyMySQL's path
        if kind is int:
            return str(obj)
        if kind is datetime and obj.tzinfo is None and mapping is None:
            return _datetime_literal(obj)
        literal: str = super().escape(obj, mapping)
        return literal

    def _create_ssl_ctx(self, sslp: Any) -> ssl.SSLContext:
        if isinstance(sslp, dict) and not sslp:
            return _opportunistic_tls_context()
        ctx: ssl.SSLContext = super()._create_ssl_ctx(sslp)
        return ctx


class PoolTimeout(Exception):
    """No connection became free in time."""


class StaleConnectionError(pymysql.err.OperationalError):  # type: ignore[misc]  # PyMySQL is untyped
    """A pooled connection died before its transaction's COMMIT was sent: nothing of it was
    committed. The args are the original error's (its MySQL error number first)."""


class CommitUnknownError(pymysql.err.OperationalError):  # type: ignore[misc]  # PyMySQL is untyped
    """The connection failed while COMMIT was on its way: the transaction may have committed."""


class ConnectionPool:
    """Up to ``size`` PyMySQL connections to one server, shared by threads."""

    def __init__(
        self,
        *,
        host: str,
        port: int,
        user: str,
        password: str,
        size: int,
        timeout: float,
    ) -> None:
        self._connect_args: dict[str, Any] = {
            "host": host,
            "port": port,
            "user": user,
            "password": password,
            "charset": "utf8mb4",
            "autocommit": False,
            "connect_timeout": timeout,
            "read_timeout": timeout,
            "write_timeout": timeout,
            # Affected rows = rows matched, not only rows whose values changed.
            "client_flag": CLIENT.FOUND_ROWS,
            "init_command": queries.SESSION_SETUP.render(),
        }
        self._timeout = timeout
        self._slots = threading.BoundedSemaphore(size)
        self._lock = threading.Lock()
        self._idle: list[pymysql.connections.Connection[Any]] = []
        #: The ``unbounded`` connections in use (``abandon_unbounded``).
        self._unbounded: set[pymysql.connections.Connection[Any]] = set()
        self._closed = False
        self.server_info: ServerInfo | None = None
        #: Called with each new connection (tests count statements with it).
        self.on_connect: Callable[[pymysql.connections.Connection[Any]], None] | None = None

    def _connect(self) -> pymysql.connections.Connection[Any]:
        conn = _Connection(**self._connect_args)
        try:
            with conn.cursor() as cur:
                cur.execute(queries.SERVER_INFO.render())
                row = cur.fetchone()
            conn.commit()
        except BaseException:
            _force_close(conn)
            raise
        assert row is not None
        info = ServerInfo(str(row[0]), int(row[1]), int(row[2]), int(row[3]))
        if info != self.server_info:
            if not info.consecutive_insert_ids:
                log.info(
                    "MySQL %s:%s has innodb_autoinc_lock_mode=%d: enqueue recovers ids %s",
                    self._connect_args["host"],
                    self._connect_args["port"],
                    info.autoinc_lock_mode,
                    "with INSERT ... RETURNING" if info.supports_insert_returning else "one INSERT per job",
                )
            self.server_info = info
        if self.on_connect is not None:
            self.on_connect(conn)
        return conn

    @contextmanager
    def connection(self) -> Iterator[pymysql.connections.Connection[Any]]:
        """Borrow a connection; it goes back to the pool unless the body failed on it."""
        if not self._slots.acquire(timeout=self._timeout):
            raise PoolTimeout(f"no free connection within {self._timeout}s")
        conn: pymysql.connections.Connection[Any] | None = None
        try:
            conn = self._take_idle()
            reused = conn is not None
            if conn is None:
                conn = self._connect()
            yield conn
        except BaseException as exc:
            if conn is not None and is_connection_failure(exc):
                _force_close(conn)
                conn = None
                self.discard_idle()
                if reused and not isinstance(exc, CommitUnknownError | StaleConnectionError) and not _timed_out(exc):
                    raise StaleConnectionError(error_code(exc) or 2006, _describe(exc)) from exc
            raise
        finally:
            if conn is not None:
                with self._lock:
                    if self._closed:
                        _force_close(conn)
                    else:
                        self._idle.append(conn)
            self._slots.release()

    def _take_idle(self) -> pymysql.connections.Connection[Any] | None:
        """An idle connection that still looks alive, or None; dead ones found are closed."""
        while True:
            with self._lock:
                if self._closed:
                    raise pymysql.err.InterfaceError(0, "the connection pool is closed")
                if not self._idle:
                    return None
                conn = self._idle.pop()
            if not _closed_by_server(conn):
                return conn
            log.debug("MySQL %s:%s: dropping a pooled connection the server closed", *self._address())
            _force_close(conn)

    def _address(self) -> tuple[Any, Any]:
        return self._connect_args["host"], self._connect_args["port"]

    @contextmanager
    def transaction(self) -> Iterator[pymysql.cursors.Cursor]:
        """A cursor in a transaction: committed if the body returns, rolled back if it raises.
        A connection failure during COMMIT raises ``CommitUnknownError``."""
        with self.connection() as conn:
            try:
                with conn.cursor() as cur:
                    yield cur
                try:
                    conn.commit()
                except BaseException as exc:
                    if is_connection_failure(exc):
                        raise CommitUnknownError(error_code(exc) or 2013, _describe(exc)) from exc
                    raise
            except BaseException as exc:
                if not is_connection_failure(exc):
                    try:
                        conn.rollback()
                    except Exception as rollback_exc:  # the connection died on us after all
                        raise pymysql.err.OperationalError(2013, f"rollback failed: {rollback_exc}") from exc
                raise

    @contextmanager
    def unbounded(
        self, read_timeout: float | None, lock_wait_seconds: int
    ) -> Iterator[pymysql.connections.Connection[Any]]:
        """A connection of its own, outside the pool, in autocommit, whose statements may take up
        to ``read_timeout`` seconds (None: as long as they take): for DDL (``expiry.migrate``),
        which MySQL before 8.0.12 runs by copying the table (minutes on a big one). On a pooled
        connection the socket timeout cut it off, MySQL rolled it back, and the next statement
        tried it again, for ever. Its wait for a table's metadata lock (an open transaction on
        the table holds it, and every statement on the table queues behind the wait) ends after
        ``lock_wait_seconds`` (error 1205). Connecting still times out as the pool's do."""
        args = dict(self._connect_args, read_timeout=read_timeout, write_timeout=read_timeout, autocommit=True)
        conn = _Connection(**args)
        with self._lock:
            self._unbounded.add(conn)
        try:
            with conn.cursor() as cur:
                cur.execute("SET SESSION lock_wait_timeout = %s", (lock_wait_seconds,))
            yield conn
        finally:
            with self._lock:
                self._unbounded.discard(conn)
            _force_close(conn)

    def abandon_unbounded(self) -> None:
        """Shut the sockets of the ``unbounded`` connections in use, from any thread: a statement
        waiting on one fails at once (a lost connection), where a server stop waited for its
        ALTER, up to an hour. MySQL runs the statement to its end all the same."""
        with self._lock:
            conns = list(self._unbounded)
        for conn in conns:
            sock = conn._sock
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def discard_idle(self) -> None:
        """Close every idle connection (after a connection failure they are suspect)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            _force_close(conn)

    def close(self) -> None:
        """Close idle connections now and busy ones when they come back. Idempotent."""
        with self._lock:
            self._closed = True
        self.discard_idle()


def _describe(exc: BaseException) -> str:
    return str(exc.args[1]) if len(exc.args) > 1 else f"{type(exc).__name__}: {exc}"


def _closed_by_server(conn: pymysql.connections.Connection[Any]) -> bool:
    """Whether an idle connection's socket is readable: between transactions the server sends
    nothing, so anything there (end of stream, a "connection killed" error) means it is gone."""
    sock = conn._sock
    if sock is None:
        return True
    if isinstance(sock, ssl.SSLSocket) and sock.pending():
        return True
    poller = select.poll()
    try:
        poller.register(sock.fileno(), select.POLLIN | select.POLLERR | select.POLLHUP)
        return bool(poller.poll(0))
    except (OSError, ValueError):
        return True


def _force_close(conn: pymysql.connections.Connection[Any]) -> None:
    try:
        conn.close()
    except Exception:  # already broken: dropping the socket is all that is left
        conn._force_close()
