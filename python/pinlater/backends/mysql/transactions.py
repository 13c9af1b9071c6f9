"""Running one MySQL transaction for a shard: retrying deadlocks, lock wait timeouts and lost
connections ``num_auto_retries`` times, and mapping server errors to PinLater's.

Retries never repeat a commit: a transaction is run again only when it cannot have committed
(a deadlock or lock wait timeout rolled it back; the connection died before COMMIT was sent, and
the server rolls back what a dead session left) or when running it twice is harmless
(``repeatable``). A connection lost during COMMIT leaves the outcome unknown: a transaction that
is not repeatable (an enqueue: it would insert its jobs twice) then fails with
``ShardConnectionError`` saying so. A pooled connection found dead before COMMIT (a stale one,
after a server restart) is replaced and the transaction run again at once, once, whatever
``num_auto_retries`` says: nothing was committed.

A missing database or table is ``QueueNotFoundError``; retryable errors past the retries, and any
failure to connect, are ``ShardConnectionError``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

import pymysql

from pinlater.backends.base import ClaimedJob, within_bytes
from pinlater.backends.mysql.pool import (
    RETRYABLE_ERRORS,
    TRANSIENT_ERRORS,
    CommitUnknownError,
    ConnectionPool,
    PoolTimeout,
    StaleConnectionError,
    error_code,
    is_connection_failure,
)
from pinlater.errors import QueueNotFoundError, ShardConnectionError

# The store's logger: retry messages keep the logger name they always had.
log = logging.getLogger("pinlater.backends.mysql.store")

T = TypeVar("T")
Cursor = Any  # pymysql.cursors.Cursor (PyMySQL ships no type information)

NO_TABLE_ERROR = 1146
NO_QUEUE_ERRORS = frozenset({1049, NO_TABLE_ERROR})
NAME_TOO_LONG_ERRORS = frozenset({1059, 1102})
DEADLOCK_ERROR = 1213
DEADLOCK_RETRIES = 3
"""Times a transaction rolled back by a deadlock runs again beyond ``num_auto_retries``: a
deadlock costs InnoDB nothing to detect and the victim nothing to undo, where a lock wait
timeout (which gets none) waited a whole innodb_lock_wait_timeout. The Rust hot path
(``rust/store/mysql_shard.rs``) has the same."""


def run_transaction(
    pool: ConnectionPool,
    shard: str,
    num_auto_retries: int,
    queue: str | None,
    op: Callable[[Cursor], T],
    *,
    repeatable: bool = True,
) -> T:
    """Run ``op`` in a transaction, retrying deadlocks and lost connections, mapping errors
    (``num_auto_retries`` times, deadlocks ``DEADLOCK_RETRIES`` more). ``repeatable`` False:
    not run again once its COMMIT may have been applied."""
    attempt = deadlocks = 0
    replaced_stale = False
    while True:
        try:
            with pool.transaction() as cur:
                return op(cur)
        except PoolTimeout as exc:
            raise ShardConnectionError(shard, str(exc)) from exc
        except pymysql.err.MySQLError as exc:
            code = error_code(exc)
            if code in NO_QUEUE_ERRORS and queue is not None:
                raise QueueNotFoundError(queue) from exc
            if isinstance(exc, StaleConnectionError) and not replaced_stale:
                replaced_stale = True
                log.info("shard %s: again on a fresh connection after a dead pooled one (%s)", shard, code)
                continue
            if isinstance(exc, CommitUnknownError) and not repeatable:
                detail = f"connection lost during COMMIT, which may have been applied: not repeated ({_message(exc)})"
                raise ShardConnectionError(shard, detail, maybe_applied=True) from exc
            retryable = code in RETRYABLE_ERRORS or isinstance(exc, pymysql.err.InterfaceError)
            if retryable and attempt < num_auto_retries:
                attempt += 1
                log.info("shard %s: retrying after MySQL error %s (attempt %d)", shard, code, attempt)
                continue
            if code == DEADLOCK_ERROR and deadlocks < DEADLOCK_RETRIES:
                deadlocks += 1
                log.info("shard %s: again after a deadlock (%d past the retries)", shard, deadlocks)
                continue
            error = store_error(shard, queue, exc)
            if error is exc:
                raise
            raise error from exc
        except (OSError, EOFError) as exc:
            raise store_error(shard, queue, exc) from exc


def store_error(shard: str, queue: str | None, exc: Exception) -> Exception:
    """What a MySQL failure that is not tried again is raised as: a missing queue's database or
    table as ``QueueNotFoundError`` (with ``queue``), a lost connection or one of
    ``RETRYABLE_ERRORS`` as ``ShardConnectionError`` (lock waits and deadlocks as contention),
    anything else as itself."""
    if isinstance(exc, OSError | EOFError):
        return ShardConnectionError(shard, f"{type(exc).__name__}: {exc}")
    code = error_code(exc)
    if code in NO_QUEUE_ERRORS and queue is not None:
        return QueueNotFoundError(queue)
    if code in RETRYABLE_ERRORS or isinstance(exc, pymysql.err.InterfaceError) or is_connection_failure(exc):
        return ShardConnectionError(shard, f"MySQL error {code}: {_message(exc)}", contention=code in TRANSIENT_ERRORS)
    return exc


def rollback_unless_list(op: Callable[[Cursor], list[T] | int | None]) -> Callable[[Cursor], list[T] | int | None]:
    """``op`` whose answer but a list (None, or a number: ``fitted``) rolls the transaction
    back (and is still returned)."""

    def wrapped(cur: Cursor) -> list[T] | int | None:
        result = op(cur)
        if not isinstance(result, list):
            cur.connection.rollback()
        return result

    return wrapped


def fitted(jobs: list[ClaimedJob], max_bytes: int) -> list[ClaimedJob] | int:
    """A claim's (or reservation's) jobs, in claim order, when the byte budget takes them all
    (``within_bytes``); else how many it takes, for the caller to roll the transaction back
    (``rollback_unless_list``) and claim that many, as the Rust hot path does
    (rust/store/mysql_shard.rs)."""
    n = within_bytes((len(job.body) for job in jobs), max_bytes)
    return jobs if n == len(jobs) else n


def _message(exc: BaseException) -> str:
    return str(exc.args[1]) if len(exc.args) > 1 else str(exc)
