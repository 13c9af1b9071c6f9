"""Errors of the PinLater contract, shared by every backend, the server and the client.

``ErrorCode`` carries the wire values of the Thrift ``ErrorCode`` enum. Code below the server
raises ``PinLaterError`` (or a subclass where callers branch on it); ``server/handler.py`` is the
only place that turns errors into Thrift exceptions.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any

#: The most characters of a caller's text an error message repeats (``shown``).
SHOWN_CHARS = 80


def shown(text: str) -> str:
    """``text`` as an error message names it: quoted, and cut past ``SHOWN_CHARS`` characters, so
    a peer's megabytes do not come back whole in the error, nor fill a log."""
    if len(text) <= SHOWN_CHARS:
        return repr(text)
    return f"{text[:SHOWN_CHARS]!r}... ({len(text)} characters)"


class ErrorCode(IntEnum):
    """The contract's error codes (Thrift ``ErrorCode``), with their wire values."""

    CONTINUATION_INVALID = 400
    PASSWORD_INVALID = 403
    QUEUE_NAME_INVALID = 410
    QUEUE_NAME_TOO_LONG = 411
    QUEUE_NOT_FOUND = 413
    PRIORITY_NOT_SUPPORTED = 416
    DEQUEUE_RATE_LIMITED = 429
    ENQUEUE_REJECTED = 430
    UNKNOWN = 500
    NO_HEALTHY_SHARDS = 501
    SHARD_CONNECTION_FAILED = 502


class PinLaterError(Exception):
    """An error with a contract error code and a message meant for the caller."""

    code: ErrorCode = ErrorCode.UNKNOWN

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def __str__(self) -> str:
        return f"{self.code.name}: {self.message}"

    def __reduce__(self) -> tuple[type[PinLaterError], tuple[ErrorCode, str]]:
        return (PinLaterError, (self.code, self.message))


class QueueNotFoundError(PinLaterError):
    """The queue does not exist (on the shard that was asked)."""

    def __init__(self, queue: str) -> None:
        super().__init__(ErrorCode.QUEUE_NOT_FOUND, f"queue not found: {queue}")
        self.queue = queue

    def __reduce__(self) -> tuple[type[QueueNotFoundError], tuple[str]]:  # type: ignore[override]
        return (QueueNotFoundError, (self.queue,))


class ShardConnectionError(PinLaterError):
    """A shard could not be reached or stopped answering. ``maybe_applied``: the operation had
    reached the store when the connection failed, so it may have taken effect (a write whose
    outcome is unknown must not be sent again, to this shard or another, where that could
    duplicate jobs). ``contention``: the shard answered, but the call lost to other
    transactions past its retries (MySQL deadlocks, lock wait timeouts): the call failed and
    what lost was not applied (a dequeue's acks sent ahead of its claim were), but the shard is
    not down (``Shard.failed`` leaves it healthy, and calls queued for it still run)."""

    def __init__(self, shard: str, detail: str, *, maybe_applied: bool = False, contention: bool = False) -> None:
        super().__init__(ErrorCode.SHARD_CONNECTION_FAILED, f"shard {shard}: {detail}")
        self.shard = shard
        self.detail = detail
        self.maybe_applied = maybe_applied
        self.contention = contention

    def __reduce__(self) -> tuple[Any, ...]:
        return (_shard_connection_error, (self.shard, self.detail, self.maybe_applied, self.contention))


def _shard_connection_error(
    shard: str, detail: str, maybe_applied: bool, contention: bool = False
) -> ShardConnectionError:
    return ShardConnectionError(shard, detail, maybe_applied=maybe_applied, contention=contention)


class StoreLockedError(RuntimeError):
    """The embedded store's data directory is in use by another live server process."""


class ConfigError(ValueError):
    """A configuration file or flag is invalid; the message names it and says why."""
