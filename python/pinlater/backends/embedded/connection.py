"""The SQLite connection under one embedded shard: opening it, and group commit of its writes.

``connect`` opens a shard file in WAL mode with the chosen ``synchronous`` level, a busy timeout,
and the schema; ``SQLiteTransactions`` (mixed into ``EmbeddedStore``) runs the transactions. SQLite
never matches bodies: body filters run outside it, a batch at a time (``body_filtered``).

* One connection serves every call: SQLite serialises writers anyway, and a single connection
  keeps transactions simple. One thread at a time owns it (``_in_use``, under ``_lock`` and its
  condition ``_turn``); the GIL is released inside SQLite, so this only orders the server's
  thread-pool calls.
* Reads (``_read``) are one ``BEGIN`` ... ``COMMIT`` each (one snapshot for the queue check and the
  query). A read first commits any open write group, so it never sees an uncommitted write.
* Writes (``_write``) are grouped. With ``synchronous`` FULL every ``COMMIT`` waits for a disk sync,
  and when each write had its own transaction that sync, held under the shard's one connection,
  could set the shard's rate on a slow disk. So:

  - the first writer to find no group open begins one (``BEGIN IMMEDIATE``: the write lock is
    taken up front, so a transaction never fails half-way on an upgrade);
  - each write runs inside its own ``SAVEPOINT``; if it raises, ``ROLLBACK TO`` undoes that write
    alone and its caller gets the error, while the others of the group stay in it;
  - after its write, a writer hands the connection to the next waiting writer, who adds its
    savepoint to the same transaction, as long as someone is waiting and the group is within its
    bounds (``GROUP_MAX_OPS`` writes, ``GROUP_MAX_SECONDS`` since its first write finished);
    otherwise it commits. A lone writer on an idle shard therefore commits at once and pays
    nothing but the savepoint. Later writes of a group see the earlier ones, as sequential
    calls would, and none of them returns before the group commits;
  - writers that arrive while a group commits (the sync) wait, and form the next group;
  - no writer returns before the ``COMMIT`` that includes its write has completed, so a client
    is never told of a write that a kill -9 or a power loss (FULL) could lose. If that ``COMMIT``
    fails, every write of the group fails with ``ShardConnectionError``.

  The bounds keep a group from holding its first caller's reply for long under sustained load
  (writers keep arriving while each one runs), and one transaction's WAL frames to at most
  ``GROUP_MAX_OPS`` batches. The server's thread pool has a handful of threads, so groups are
  usually smaller than that and ``GROUP_MAX_SECONDS`` is the bound that matters: it caps what
  the first caller waits for the others' writes (the commit after them is shared).
* Every write transaction holds the shard's ``WriteGate`` (``_gate``) from just before its
  ``BEGIN IMMEDIATE`` to its ``COMMIT`` or rollback. The native hot path (``native_hot``) writes
  the same file on a connection of its own and takes the same gate, a FIFO ticket lock, so the
  two writers take turns in order instead of polling SQLite's lock in its busy handler, where
  one that keeps the lock busy could starve the other.
* SQLite errors that make the shard unusable become ``ShardConnectionError``.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn

from pinlater._pinlater import WriteGate
from pinlater.errors import ShardConnectionError

GROUP_MAX_OPS = 64
"""Most writes committed by one transaction."""

GROUP_MAX_SECONDS = 0.010
"""No write joins a group whose first write finished longer ago than this: the most the first
caller waits for others' writes, beyond the commit itself."""

_SAVEPOINT = "pinlater_op"


def connect(
    path: Path,
    synchronous: str,
    busy_timeout_ms: int,
    schema: str,
    added_columns: Sequence[tuple[str, str, str]] = (),
    upgrades: Sequence[tuple[int, str]] = (),
) -> sqlite3.Connection:
    """Open ``path`` and apply ``schema`` (an idempotent script). ``added_columns`` are the
    ``(table, column, declaration)`` columns a later schema version added to an existing table:
    each one missing from a table an earlier version made is added first (``ALTER TABLE ... ADD
    COLUMN``: old rows read the default, nothing is rewritten), so the script may index it.
    ``upgrades`` are ``(version, statement)``: each statement runs after the script when the
    file's ``user_version`` was below its version, in the script's transaction, so the script's
    new ``user_version`` is committed with them or not at all (an open interrupted half-way runs
    them again next time)."""
    # isolation_level=None: the store issues BEGIN/COMMIT itself instead of the module guessing.
    conn = sqlite3.connect(path, timeout=busy_timeout_ms / 1000, isolation_level=None, check_same_thread=False)
    try:
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise sqlite3.OperationalError(f"WAL journal mode is not available here (got {mode})")
        conn.execute(f"PRAGMA synchronous = {synchronous}")  # checked against SYNCHRONOUS_MODES
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        _add_columns(conn, added_columns)
        _apply_schema(conn, schema, [statement for below, statement in upgrades if version < below])
    except BaseException:
        conn.close()
        raise
    return conn


def _add_columns(conn: sqlite3.Connection, added_columns: Sequence[tuple[str, str, str]]) -> None:
    """Add each ``(table, column, declaration)`` missing from an existing table, in one transaction."""
    if not added_columns:
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        for table, column, declaration in added_columns:
            # Identifiers are the store's own constants, never a caller's text.
            present = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
            if present and column not in present:
                conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {declaration}")
        conn.execute("COMMIT")
    except BaseException:
        _rollback_quietly(conn)
        raise


def _apply_schema(conn: sqlite3.Connection, schema: str, upgrades: Sequence[str]) -> None:
    """Run the ``schema`` script, then ``upgrades``, in one transaction."""
    try:
        # executescript commits what is open, then runs the text as it is: the BEGIN opens the
        # transaction the script's statements (its PRAGMA user_version too) run in.
        conn.executescript("BEGIN IMMEDIATE;\n" + schema)
        for statement in upgrades:
            conn.execute(statement)
        conn.execute("COMMIT")
    except BaseException:
        _rollback_quietly(conn)
        raise


class _Group:
    """One write transaction shared by several writes."""

    __slots__ = ("done", "error", "first_done", "gated", "ops")

    def __init__(self) -> None:
        self.first_done = 0.0  # time.monotonic() when its first write finished
        self.ops = 0  # writes run in it so far
        self.gated = False  # it holds the shard's WriteGate
        self.done = False
        self.error: str | None = None  # why its COMMIT (or the transaction) failed


class SQLiteTransactions:
    """``_write``/``_read`` transactions over ``_conn`` (see the module docstring).

    ``_init_transactions`` runs before the first call; ``_close_connection`` closes."""

    _name: str
    _conn: sqlite3.Connection | None
    _lock: threading.Lock
    _turn: threading.Condition  # the connection was given up
    _committed: threading.Condition  # a group ended
    _in_use: bool  # a thread owns the connection (running a call or a COMMIT)
    _waiting_writers: int
    _group: _Group | None  # the open write transaction, if any
    _gate: WriteGate  # the shard file's write lock in this process (see the module docstring)
    commits: int
    """Write transactions committed (each one ``COMMIT`` and, with FULL, one disk sync)."""

    def _init_transactions(self) -> None:
        self._lock = threading.Lock()
        self._turn = threading.Condition(self._lock)
        self._committed = threading.Condition(self._lock)
        self._in_use = False
        self._waiting_writers = 0
        self._group = None
        self._gate = WriteGate()
        self.commits = 0

    def _acquire(self, writer: bool) -> sqlite3.Connection:
        """Own the connection (called with ``_lock`` held)."""
        if writer:
            self._waiting_writers += 1
        try:
            while self._in_use:
                self._turn.wait()
        finally:
            if writer:
                self._waiting_writers -= 1
        if self._conn is None:
            raise ShardConnectionError(self._name, "the store is closed")
        self._in_use = True
        return self._conn

    def _give_up(self) -> None:
        """Give up the connection (called with ``_lock`` held). Each give-up wakes one waiter."""
        self._in_use = False
        self._turn.notify()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            conn = self._acquire(writer=True)
            group = self._group
            if group is None:
                group = self._group = _Group()
        try:
            if group.ops == 0:  # the group's first write (a joiner finds ops >= 1)
                self._gate.acquire()
                group.gated = True
                conn.execute("BEGIN IMMEDIATE")
            conn.execute("SAVEPOINT " + _SAVEPOINT)
        except BaseException as exc:
            self._end_group(conn, group, exc)
            _raise(self._name, exc)
        op_error: BaseException | None = None
        try:
            yield conn
            conn.execute("RELEASE " + _SAVEPOINT)
        except BaseException as exc:
            op_error = exc
            if not _rollback_to_savepoint(conn):
                # SQLite rolled back the whole transaction (I/O error, disk full...): every
                # write of the group is gone.
                self._end_group(conn, group, exc)
                _raise(self._name, exc)
        group.ops += 1
        if group.ops == 1:
            group.first_done = time.monotonic()
        with self._lock:
            join = (
                self._waiting_writers > 0
                and group.ops < GROUP_MAX_OPS
                and time.monotonic() - group.first_done < GROUP_MAX_SECONDS
            )
            if join:  # a waiting writer runs next in this transaction; whoever ends it wakes us
                self._give_up()
                while not group.done:
                    self._committed.wait()
        if not join:
            self._end_group(conn, group, None)
        if group.error is not None:
            raise ShardConnectionError(self._name, group.error) from op_error
        if op_error is not None:
            _raise(self._name, op_error)

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            conn = self._acquire(writer=False)
            group = self._group
        try:
            if group is not None:
                self._end_group(conn, group, None, give_up=False)  # never read uncommitted writes
            conn.execute("BEGIN")
            yield conn
            conn.execute("COMMIT")
        except BaseException as exc:
            if conn.in_transaction:
                _rollback_quietly(conn)
            _raise(self._name, exc)
        finally:
            with self._lock:
                self._give_up()

    def _end_group(
        self, conn: sqlite3.Connection, group: _Group, failure: BaseException | None, give_up: bool = True
    ) -> None:
        """Commit the group (or roll it back after ``failure``), wake its writers and, if
        ``give_up``, give up the connection. The caller owns the connection."""
        error = None if failure is None else f"the write transaction failed: {failure}"
        if failure is None:
            try:
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                error = f"commit failed: {exc}"
        if conn.in_transaction:
            _rollback_quietly(conn)
        if group.gated:
            group.gated = False
            self._gate.release()
        with self._lock:
            if error is None:
                self.commits += 1
            self._group = None
            group.done = True
            group.error = error
            self._committed.notify_all()
            if give_up:
                self._give_up()

    def _close_connection(self) -> None:
        """Commit any open group and close the connection; later calls raise ``ShardConnectionError``."""
        with self._lock:
            if self._conn is None:
                return
            conn = self._acquire(writer=False)
            group = self._group
        try:
            if group is not None:
                self._end_group(conn, group, None, give_up=False)
            conn.close()  # the last connection to close checkpoints the WAL into the file
        finally:
            with self._lock:
                self._conn = None
                self._in_use = False
                self._turn.notify_all()  # every waiter finds the store closed


def _raise(name: str, exc: BaseException) -> NoReturn:
    """Busy, I/O, disk full or a damaged file: the shard is unusable for now, a
    ``ShardConnectionError``. Other errors (integrity, programming, the caller's own) escape unchanged."""
    if isinstance(exc, sqlite3.OperationalError) or type(exc) is sqlite3.DatabaseError:
        raise ShardConnectionError(name, str(exc)) from exc
    raise exc


def _rollback_to_savepoint(conn: sqlite3.Connection) -> bool:
    """Undo the current write's savepoint; False if the whole transaction is gone."""
    if not conn.in_transaction:
        return False
    try:
        conn.execute("ROLLBACK TO " + _SAVEPOINT)
        conn.execute("RELEASE " + _SAVEPOINT)
    except sqlite3.Error:
        return False
    return True


def _rollback_quietly(conn: sqlite3.Connection) -> None:
    try:
        conn.rollback()
    except sqlite3.Error:
        pass  # the original error is the one worth reporting; SQLite rolls back on close anyway
