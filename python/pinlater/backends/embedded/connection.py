"""The SQLite connection under one embedded shard: opening it, and one transaction at a time.

``connect`` opens a shard file in WAL mode with the chosen ``synchronous`` level, a busy timeout,
and the schema; ``SQLiteTransactions`` (mixed into ``EmbeddedStore``) runs the transactions. SQLite
never matches bodies: body filters run outside it, a batch at a time (``body_filtered``).

* One connection, guarded by one lock, serves every call: SQLite serialises writers anyway,
  and a single connection keeps transactions simple. The GIL is released inside SQLite, so the
  lock only orders calls coming from the server's thread pool.
* Every method is one transaction: ``BEGIN IMMEDIATE`` for writes (the write lock is taken up
  front, so a transaction never fails half-way on an upgrade) and ``BEGIN`` for reads (one
  snapshot for the queue check and the query). Batches use ``executemany`` or set-based
  statements inside that one transaction.
* SQLite errors that make the shard unusable become ``ShardConnectionError``.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pinlater.errors import ShardConnectionError


def connect(path: Path, synchronous: str, busy_timeout_ms: int, schema: str) -> sqlite3.Connection:
    # isolation_level=None: the store issues BEGIN/COMMIT itself instead of the module guessing.
    conn = sqlite3.connect(path, timeout=busy_timeout_ms / 1000, isolation_level=None, check_same_thread=False)
    try:
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise sqlite3.OperationalError(f"WAL journal mode is not available here (got {mode})")
        conn.execute(f"PRAGMA synchronous = {synchronous}")  # checked against SYNCHRONOUS_MODES
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        conn.executescript(schema)
    except BaseException:
        conn.close()
        raise
    return conn


class SQLiteTransactions:
    """``_write``/``_read`` transactions over ``_conn``, one at a time under ``_lock``."""

    _name: str
    _lock: threading.Lock
    _conn: sqlite3.Connection | None

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._transaction("BEGIN IMMEDIATE") as conn:
            yield conn

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        with self._transaction("BEGIN") as conn:
            yield conn

    @contextmanager
    def _transaction(self, begin: str) -> Iterator[sqlite3.Connection]:
        with self._lock:
            conn = self._conn
            if conn is None:
                raise ShardConnectionError(self._name, "the store is closed")
            try:
                conn.execute(begin)
                yield conn
                conn.execute("COMMIT")
            except BaseException as exc:
                if conn.in_transaction:
                    _rollback_quietly(conn)
                # Busy, I/O, disk full or a damaged file: the shard is unusable for now. Other
                # sqlite3 errors (integrity, programming) are bugs and escape unchanged.
                if isinstance(exc, sqlite3.OperationalError) or type(exc) is sqlite3.DatabaseError:
                    raise ShardConnectionError(self._name, str(exc)) from exc
                raise


def _rollback_quietly(conn: sqlite3.Connection) -> None:
    try:
        conn.rollback()
    except sqlite3.Error:
        pass  # the original error is the one worth reporting; SQLite rolls back on close anyway
