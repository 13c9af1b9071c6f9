"""What a client call raises: ``PinLaterError`` subclasses carrying the contract's error code.

Subclasses exist where callers branch (``except QueueNotFound``, ``except RateLimited``); every
``ErrorCode`` maps to exactly one of them (``ERROR_CLASSES``), so ``err.code`` is always the
code the server sent.

``PinLaterConnectionError`` is the client's own failure to reach a server or to read its answer.
It carries ``SHARD_CONNECTION_FAILED``, the contract's "could not reach it" code: the server is,
from the caller's side, one more shard that did not answer. It subclasses ``ServerUnavailable``
so one ``except ServerUnavailable`` covers "try again later" whichever side failed; when it
matters, ``isinstance(err, PinLaterConnectionError)`` tells the client's failure from the
server's report about its store. ``err.sent`` says whether the request may have reached the
server (False: it certainly did not, so repeating it cannot double anything).
"""

from __future__ import annotations

from typing import Any

from pinlater.errors import ErrorCode, PinLaterError


class _ClientError(PinLaterError):
    """Base of the client's subclasses: pickles as its own class, not as ``PinLaterError``."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.code, self.message))


class InvalidRequest(_ClientError):
    """The request broke a rule of the contract (queue name, priority, continuation)."""


class PasswordInvalid(_ClientError):
    """deleteQueue with a password whose salted hash is not the server's ADMIN_PASSWORD_HASH."""


class QueueNotFound(_ClientError):
    """The queue does not exist: create it first."""


class RateLimited(_ClientError):
    """DEQUEUE_RATE_LIMITED: the queue's rate limit is spent; back off, then dequeue again."""


class EnqueueRejected(_ClientError):
    """ENQUEUE_REJECTED: the server refused new jobs for the queue, a job it cannot keep (a group
    key where groups are not kept), or a schedule (a bad cron, both or neither of cron and
    interval, a job field a schedule cannot carry); the message gives the reason."""


class ServerUnavailable(_ClientError):
    """The job store (or, for ``PinLaterConnectionError``, the server) could not be reached."""


class ServerError(_ClientError):
    """UNKNOWN: the server failed in a way the contract has no code for."""


class PinLaterConnectionError(ServerUnavailable):
    """The client could not connect, send, or read a whole answer (timeouts included)."""

    def __init__(self, message: str, *, address: str = "", sent: bool = True) -> None:
        super().__init__(ErrorCode.SHARD_CONNECTION_FAILED, message)
        self.address = address
        self.sent = sent

    def __reduce__(self) -> tuple[Any, ...]:
        return (_connection_error, (self.message, self.address, self.sent))


def _connection_error(message: str, address: str, sent: bool) -> PinLaterConnectionError:
    return PinLaterConnectionError(message, address=address, sent=sent)


#: The class raised for each code the server can send.
ERROR_CLASSES: dict[ErrorCode, type[_ClientError]] = {
    ErrorCode.CONTINUATION_INVALID: InvalidRequest,
    ErrorCode.PASSWORD_INVALID: PasswordInvalid,
    ErrorCode.QUEUE_NAME_INVALID: InvalidRequest,
    ErrorCode.QUEUE_NAME_TOO_LONG: InvalidRequest,
    ErrorCode.QUEUE_NOT_FOUND: QueueNotFound,
    ErrorCode.PRIORITY_NOT_SUPPORTED: InvalidRequest,
    ErrorCode.DEQUEUE_RATE_LIMITED: RateLimited,
    ErrorCode.ENQUEUE_REJECTED: EnqueueRejected,
    ErrorCode.UNKNOWN: ServerError,
    ErrorCode.NO_HEALTHY_SHARDS: ServerUnavailable,
    ErrorCode.SHARD_CONNECTION_FAILED: ServerUnavailable,
}


def error_from_thrift(exc: Any) -> PinLaterError:
    """The typed error for a Thrift ``PinLaterException`` (an unknown code becomes UNKNOWN)."""
    try:
        code = ErrorCode(int(exc.errorCode))
    except (TypeError, ValueError):
        code = ErrorCode.UNKNOWN
    return ERROR_CLASSES[code](code, str(exc.message or ""))
