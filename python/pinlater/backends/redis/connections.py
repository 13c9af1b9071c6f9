"""The Redis store's connections: stale ones replaced before use, and which calls are repeated on
a fresh connection after a connection failure.

After a Redis restart every pooled connection is dead. Two defences, on the blocking client and
on redis.asyncio alike:

* At checkout, a pooled connection whose socket is readable (the server closed it, or sent
  something nobody asked for) is reconnected before anything is sent. redis-py does this check,
  but redis.asyncio 8 skips it while maintenance notifications are "auto" (the default), so the
  pools here turn them off (``pool_options``); the asyncio check also polls the socket itself,
  so a close the event loop has not read yet is seen too.
* A call that still fails with a connection error (not a timeout: the server may be busy with
  it) is repeated once, at once, on a fresh connection, with the pool's idle connections
  dropped first (after a restart they are all dead), when repeating cannot do harm: the
  command never left (connecting failed, or the write itself failed: Redis runs only whole
  commands), or the script is safe to run twice (``repeatable``).

The scripts not repeated once sent are the ones whose second run could add or move jobs the
caller did not ask for: ``enqueue_jobs`` and ``enqueue_keyed_jobs`` (duplicate jobs: a job with a
group key or an expiry but no dedup key would be made twice), ``retry_failed_jobs`` and
``delete_jobs`` (up to twice the caller's limit). Every other script is guarded by state or
claim (acks, checkpoints, claims, releases, cancels, expiry sweeps), only reads, or is idempotent
(queue creation and deletion); a dequeue or reserve run twice leaves the first run's jobs claimed
until the claim timeout brings them back, as a lost reply would anyway, a broker's claim run
twice answers the first run's jobs as claimed (IN_PROGRESS under their claims), and a cancel run twice
answers what its second run changed (the jobs the first run cancelled are left alone then). A
client that repeats a keyed enqueue after the error is answered for each dedup key by the job the
first run made, if it made one (a job with no dedup key is made again).
"""

from __future__ import annotations

import select
from contextvars import ContextVar
from typing import Any

import redis
import redis.asyncio
from redis.maint_notifications import MaintNotificationsConfig

from pinlater._pinlater import redis_pack_command

#: Scripts not repeated once the command may have reached the server (see the module docstring).
NOT_REPEATED_ONCE_SENT = frozenset({"enqueue_jobs", "enqueue_keyed_jobs", "retry_failed_jobs", "delete_jobs"})

#: Whether the current call's command was handed to the socket (per thread, per asyncio task).
SENT: ContextVar[bool] = ContextVar("pinlater_redis_sent", default=False)

#: redis-py's message when no pooled connection became free in time: waiting again would only
#: double the caller's wait.
_POOL_EXHAUSTED = "No connection available."


def pool_options() -> dict[str, Any]:
    """Keyword arguments for both pools: the checkout check on (see the module docstring)."""
    return {"maint_notifications_config": MaintNotificationsConfig(enabled=False)}


def repeatable(script: str, exc: BaseException) -> bool:
    """Whether a call of ``script`` that failed with ``exc`` is repeated on a fresh connection."""
    if not isinstance(exc, redis.ConnectionError) or str(exc) == _POOL_EXHAUSTED:
        return False  # timeouts and server answers (LOADING, ...) are not a dead connection
    return not SENT.get() or script not in NOT_REPEATED_ONCE_SENT


class TrackedConnection(redis.Connection):
    """The blocking client's connection, noting in ``SENT`` when a command was handed over."""

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        super().send_packed_command(command, check_health)  # type: ignore[no-untyped-call]  # untyped in redis-py
        SENT.set(True)


class PackedConnection(redis.asyncio.Connection):
    """redis.asyncio's connection with commands packed by the extension (``redis_pack_command``),
    byte for byte as hiredis packs them for redis-py's blocking client. redis.asyncio packs in
    Python, which profiles showed at about a quarter of the server's time for 100-job scripts;
    hiredis took 65-110 µs for a 100-job enqueue's 510 arguments, the extension about 10 µs.

    It also notes in ``SENT`` when a command was handed over, and its checkout check polls the
    socket as well as the stream (a close the event loop has not read yet)."""

    def pack_command(self, *args: Any) -> list[bytes]:
        if isinstance(args[0], str):
            args = (*args[0].encode().split(), *args[1:])
        elif b" " in args[0]:
            args = (*args[0].split(), *args[1:])
        try:  # our scripts' arguments are str, int, float and bytes: packed as they are
            return [redis_pack_command(args)]
        except TypeError:  # a bytearray, say: as redis-py does, as bytes
            packed = tuple(bytes(a) if isinstance(a, bytearray | memoryview) else a for a in args)
            try:
                return [redis_pack_command(packed)]
            except TypeError as exc:
                raise redis.DataError(str(exc)) from exc

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        await super().send_packed_command(command, check_health)
        SENT.set(True)

    async def can_read(self) -> bool:
        if await super().can_read():
            return True
        writer = self._writer
        sock = None if writer is None else writer.transport.get_extra_info("socket")
        return sock is not None and readable_now(sock.fileno())


def readable_now(fd: int) -> bool:
    """Whether ``fd`` has something to read (or hung up) right now, without reading it. An idle
    pooled connection that is readable was closed by the server (or is out of step)."""
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLERR | select.POLLHUP)
    try:
        return bool(poller.poll(0))
    except OSError:
        return True
