"""Calling one shard's Lua scripts: key names per queue, error mapping, the QUEUE_NOT_FOUND
reply, and the count of evicted jobs the scripts report.

The hot operations are built once as a ``ScriptCall`` (script, keys, arguments, and how to read
the reply) and run either through the blocking client (``ShardScripts.call``, on the backend's
thread pool) or on the event loop through redis.asyncio (``AsyncShardScripts.call``), with the
same errors either way.

A connection error, a timeout, or a server that cannot take writes (loading, read-only replica,
failing persistence) raises ``ShardConnectionError``; a queue missing from ``pln_{S}`` raises
``QueueNotFoundError`` (scripts return -1); a write refused at ``maxmemory`` (OOM) raises
``StoreMemoryFullError``, which leaves the shard healthy. A call that failed on a dead connection
is repeated once on a fresh one where that cannot do harm (``connections.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import redis
import redis.asyncio
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff

from pinlater.backends.base import JobState
from pinlater.backends.pressure import StoreMemoryFullError
from pinlater.backends.redis import scripts
from pinlater.backends.redis.config import RedisShardConfig
from pinlater.backends.redis.connections import SENT, PackedConnection, pool_options, repeatable
from pinlater.backends.redis.keys import QueueKeys
from pinlater.backends.redis.keys_compact import CompactQueueKeys, QueueKeyNames
from pinlater.backends.redis.layouts import ShardLayout
from pinlater.errors import QueueNotFoundError, ShardConnectionError

# Server answers that mean "this shard cannot serve now", not "this request is wrong".
_OUT_OF_MEMORY = "command not allowed when used memory > 'maxmemory'"
_UNAVAILABLE = ("BUSY", "LOADING", "MASTERDOWN", "MISCONF", "NOREPLICAS", "READONLY", "TRYAGAIN")

T = TypeVar("T")

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ScriptCall(Generic[T]):
    """One script run in a queue: what to send, and how to read the reply."""

    script: str
    queue: str
    keys: list[str]
    args: list[Any]
    parse: Callable[[Any], T]


@contextmanager
def shard_errors(name: str, config: RedisShardConfig) -> Iterator[None]:
    """Map redis-py's errors (blocking or asyncio) to the store's."""
    try:
        yield
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        detail = f"{config.master}: {type(exc).__name__}: {exc}"
        raise ShardConnectionError(name, detail, maybe_applied=SENT.get()) from exc
    except redis.ResponseError as exc:
        # redis-py raises OutOfMemoryError for "-OOM command not allowed when used memory >
        # 'maxmemory'"; older servers wrap it in a script error, so the text is checked too.
        if isinstance(exc, redis.exceptions.OutOfMemoryError) or _OUT_OF_MEMORY in str(exc):
            raise StoreMemoryFullError(name, f"{config.master}: {exc}") from exc
        # redis-py strips the codes it has a class for (READONLY, TRYAGAIN, MASTERDOWN) from the
        # text and keeps them in status_code; the others (BUSY, MISCONF...) stay in the text.
        if str(exc).startswith(_UNAVAILABLE) or getattr(exc, "status_code", None) in _UNAVAILABLE:
            raise ShardConnectionError(name, f"{config.master}: {exc}") from exc
        raise


def _in_queue(result: Any, queue: str) -> Any:
    if isinstance(result, int) and result == scripts.QUEUE_NOT_FOUND:
        raise QueueNotFoundError(queue)
    return result


class ShardScripts:
    """The scripts of one shard, called through its client. Thread-safe."""

    def __init__(
        self, name: str, config: RedisShardConfig, client: redis.Redis | redis.RedisCluster, layout: ShardLayout
    ) -> None:
        self._name = name
        self._config = config
        self._client = client
        self.layout = layout
        self._lock = threading.Lock()
        self._evicted_jobs = 0
        self._use_layout(layout.name)
        layout.on_change(self._use_layout)

    def _use_layout(self, name: str) -> None:
        self._scripts = scripts.register(self._client, name)
        self._key_names: type[QueueKeys] | type[CompactQueueKeys] = CompactQueueKeys if name == "compact" else QueueKeys
        self._queue_keys: dict[str, QueueKeyNames] = {}

    @property
    def evicted_jobs(self) -> int:
        """Jobs found without their hash (evicted) and removed, since the store opened."""
        return self._evicted_jobs

    def keys(self, queue: str) -> QueueKeyNames:
        """The key names of ``queue`` in the shard's layout, read first if the config names none
        and it is not read yet (so no call is built with a provisional layout's names)."""
        if not self.layout.known:
            try:
                asyncio.get_running_loop()
            except RuntimeError:  # a blocking caller (a worker thread): read the record now
                self.check_layout()
            else:  # on the event loop, which must not block: the health check reads it
                self.layout.require()
        keys = self._queue_keys.get(queue)
        if keys is None:
            if len(self._queue_keys) > 4096:  # queue names are few; this only bounds a misuse
                self._queue_keys.clear()
            keys = self._queue_keys[queue] = self._key_names(self._name, queue)
        return keys

    def errors(self) -> contextlib.AbstractContextManager[None]:
        return shard_errors(self._name, self._config)

    def run(self, script: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        self.check_layout()
        return self._on_live_connection(script, lambda: self._scripts[script](keys=list(keys), args=list(args)))

    def ping(self) -> None:
        self._on_live_connection("ping", self._client.ping)
        self.check_layout()

    def check_layout(self) -> None:
        """Read the shard's layout record if it could not be read when the store opened."""
        if not self.layout.checked:
            with self.errors():
                self.layout.check()

    def command(self, *args: Any) -> Any:
        """A plain command on the shard's client (the compact layout's queue names), mapped and
        repeated on a fresh connection as the scripts are."""
        self.check_layout()
        return self._on_live_connection(str(args[0]), lambda: self._client.execute_command(*args))  # type: ignore[no-untyped-call]

    def _on_live_connection(self, what: str, send: Callable[[], T]) -> T:
        """``send()``, repeated once on a fresh connection after a dead one where harmless."""
        token = SENT.set(False)  # (kept across the attempts: either may have sent it)
        try:
            for attempt in (1, 2):
                try:
                    with self.errors():
                        return send()
                except ShardConnectionError as exc:
                    if attempt == 2 or not repeatable(what, exc.__cause__ or exc):
                        raise
                    log.info("shard %s: %s again on a fresh connection after: %s", self._name, what, exc.detail)
                    self._drop_idle_connections()
        finally:
            SENT.reset(token)
        raise AssertionError("unreachable")

    def _drop_idle_connections(self) -> None:
        """Before a repeat on a fresh connection: after a restart every idle one is dead too.
        (redis-py's cluster client drops the failed node's idle connections itself.)"""
        if isinstance(self._client, redis.Redis):
            self._client.connection_pool.disconnect(inuse_connections=False)

    def run_pipelined(self, script: str, calls: Sequence[tuple[Sequence[str], Sequence[Any]]]) -> list[Any]:
        """Run ``script`` once per ``(keys, args)`` in one pipeline: one round trip (two when
        redis-py first checks the script is loaded). Redis runs the calls one after another, so
        other clients' commands go in between; together they are not atomic."""
        with self.errors():
            pipe = self._client.pipeline(transaction=False)
            for keys, args in calls:
                self._scripts[script](keys=list(keys), args=list(args), client=pipe)
            replies: list[Any] = pipe.execute()
        return replies

    def run_in_queue(self, script: str, queue: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        return _in_queue(self.run(script, keys, args), queue)

    def call(self, call: ScriptCall[T]) -> T:
        return call.parse(self.run_in_queue(call.script, call.queue, call.keys, call.args))

    def require_queue(self, queue: str) -> None:
        self.call(self.require_queue_call(queue, lambda _reply: None))

    def require_queue_call(self, queue: str, answer: Callable[[Any], T]) -> ScriptCall[T]:
        """A cheap script that fails with QUEUE_NOT_FOUND when the queue does not exist."""
        keys = self.keys(queue)
        return ScriptCall(
            "count_jobs", queue, [keys.exists_key, keys.set_key(1, JobState.PENDING)], [queue, 0, 0], answer
        )

    def count_evicted(self, n: Any) -> None:
        if n := int(n):
            with self._lock:
                self._evicted_jobs += n


def priority_keys(
    keys: QueueKeyNames, priorities: set[int], per: int, first: Sequence[str] = ()
) -> tuple[list[str], dict[int, int]]:
    """KEYS for scripts that take ``per`` state sets per priority (PENDING first), after the
    queue-names key and the keys ``first``, and each priority's 1-based index of its PENDING
    set in them."""
    key_list = [keys.exists_key, *first]
    index: dict[int, int] = {}
    for p in sorted(priorities):
        index[p] = len(key_list) + 1
        key_list += keys.priority_sets(p)[:per]
    return key_list, index


class AsyncShardScripts:
    """The same scripts through redis.asyncio, on the event loop that first uses them: no thread
    hand-off per call. The client (its own pool of ``max_connections``) is made on first use and
    made anew if a later call runs on another loop."""

    def __init__(
        self, name: str, config: RedisShardConfig, max_connections: int, timeout: float, layout: ShardLayout
    ) -> None:
        self._name = name
        self._layout = layout
        self._config = config
        self._max_connections = max_connections
        self._timeout = timeout
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: redis.asyncio.Redis | redis.asyncio.RedisCluster | None = None
        self._scripts: dict[str, Any] = {}
        layout.on_change(self._use_layout)

    def _scripts_here(self) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self.forget()
            self._client = self._new_client()
            self._scripts = scripts.register(self._client, self._layout.name)  # type: ignore[arg-type]  # same API
            self._loop = loop
        return self._scripts

    def _use_layout(self, name: str) -> None:
        if self._client is not None:
            self._scripts = scripts.register(self._client, name)  # type: ignore[arg-type]  # same API

    def _new_client(self) -> redis.asyncio.Redis | redis.asyncio.RedisCluster:
        """The client of the loop now running (its pool holds up to ``max_connections``)."""
        pool = redis.asyncio.BlockingConnectionPool(
            host=self._config.master.host,
            port=self._config.master.port,
            max_connections=self._max_connections,
            timeout=self._timeout,
            socket_timeout=self._timeout,
            socket_connect_timeout=self._timeout,
            retry=AsyncRetry(NoBackoff(), 0),
            client_name=f"pinlater-shard-{self._name}",
            connection_class=PackedConnection,
            **pool_options(),
        )
        return redis.asyncio.Redis(connection_pool=pool)

    async def _drop_idle_connections(self) -> None:
        """Before a repeat on a fresh connection: after a restart every idle one is dead too.
        (redis-py's cluster client drops the failed node's idle connections itself.)"""
        if isinstance(self._client, redis.asyncio.Redis):
            await self._client.connection_pool.disconnect(inuse_connections=False)

    async def call(self, call: ScriptCall[T]) -> T:
        self._layout.require()
        token = SENT.set(False)  # (kept across the attempts: either may have sent it)
        try:
            for attempt in (1, 2):
                try:
                    with shard_errors(self._name, self._config):
                        result = await self._scripts_here()[call.script](keys=call.keys, args=call.args)
                    return call.parse(_in_queue(result, call.queue))
                except ShardConnectionError as exc:
                    if attempt == 2 or not repeatable(call.script, exc.__cause__ or exc):
                        raise
                    log.info("shard %s: %s again on a fresh connection after: %s", self._name, call.script, exc.detail)
                    await self._drop_idle_connections()
        finally:
            SENT.reset(token)
        raise AssertionError("unreachable")

    async def aclose(self) -> None:
        """Close the client's connections (on the loop that made them)."""
        client, loop = self._client, self._loop
        self._client, self._loop, self._scripts = None, None, {}
        if isinstance(client, redis.asyncio.Redis) and loop is asyncio.get_running_loop():
            await client.aclose(close_connection_pool=True)
        elif client is not None and loop is asyncio.get_running_loop():
            await client.aclose()

    def forget(self) -> None:
        """Drop a client made on another loop (closed or not ours to await): its connections go
        with their loop."""
        self._client, self._loop, self._scripts = None, None, {}
