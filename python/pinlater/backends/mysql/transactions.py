"""Running one MySQL transaction for a shard: retrying deadlocks, lock wait timeouts and lost
connections ``num_auto_retries`` times, and mapping server errors to PinLater's.

A missing database or table is ``QueueNotFoundError``; a bad body regex is ``ValueError``;
retryable errors past the retries, and any failure to connect, are ``ShardConnectionError``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

import pymysql

from pinlater.backends.mysql.pool import (
    RETRYABLE_ERRORS,
    ConnectionPool,
    PoolTimeout,
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
REGEX_ERROR = 1139


def run_transaction(
    pool: ConnectionPool, shard: str, num_auto_retries: int, queue: str | None, op: Callable[[Cursor], T]
) -> T:
    """Run ``op`` in a transaction, retrying deadlocks and lost connections, mapping errors."""
    attempt = 0
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
            if code == REGEX_ERROR:
                raise ValueError(f"invalid body regex: {exc.args[1] if len(exc.args) > 1 else exc}") from exc
            retryable = code in RETRYABLE_ERRORS or isinstance(exc, pymysql.err.InterfaceError)
            if retryable and attempt < num_auto_retries:
                attempt += 1
                log.info("shard %s: retrying after MySQL error %s (attempt %d)", shard, code, attempt)
                continue
            if retryable or is_connection_failure(exc):
                raise ShardConnectionError(shard, f"MySQL error {code}: {_message(exc)}") from exc
            raise
        except (OSError, EOFError) as exc:
            raise ShardConnectionError(shard, f"{type(exc).__name__}: {exc}") from exc


def rollback_if_none(op: Callable[[Cursor], T | None]) -> Callable[[Cursor], T | None]:
    """``op`` whose None result rolls the transaction back (and is still returned)."""

    def wrapped(cur: Cursor) -> T | None:
        result = op(cur)
        if result is None:
            cur.connection.rollback()
        return result

    return wrapped


def _message(exc: BaseException) -> str:
    return str(exc.args[1]) if len(exc.args) > 1 else str(exc)
