"""The control plane of a Redis Cluster shard: the store's other scripts through redis-py's
cluster clients, with the same errors and rules as on one server (``script_calls.py``).

redis-py's ``RedisCluster`` (blocking) and ``redis.asyncio.RedisCluster`` route ``EVALSHA`` by
the slot of its keys (all of one call's keys must share a slot: a queue's keys share the tag
``{S:Q}``), follow MOVED and ASK, and answer NOSCRIPT by ``SCRIPT LOAD`` on every master, then
``EVALSHA`` again (``Script.__call__``). Set up as the pools of one server are:

* redis-py's own retries off (``Retry(NoBackoff(), 0)``): after a connection error it reads the
  slot map again, but never resends; ``ShardScripts`` repeats once where ``connections.py``
  allows it (the node connections note ``SENT`` as the pools' do);
* the client name ``pinlater-shard-{name}``, the backend's socket timeouts, maintenance
  notifications off (``connections.pool_options``);
* what the cluster client raises for a cluster it cannot use (``RedisClusterException``: no
  node reachable, a slot not served; ``ClusterError``: ``CLUSTERDOWN``, redirects exhausted)
  becomes redis-py's ``ConnectionError``, so ``shard_errors`` maps it to ``ShardConnectionError``.

The blocking ``RedisCluster`` reads the slot map when it is made and fails if no node answers;
``LazyRedisCluster`` makes it on first use instead, so a store opens while its cluster is down,
as a store on one server does. A pipeline of scripts (``run_pipelined``) is split by the cluster
client per master; it may carry calls of many queues, each call's keys in one slot.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster
from redis._parsers import Encoder
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.exceptions import ClusterError, NoScriptError, RedisClusterException
from redis.retry import Retry

from pinlater.backends.redis import scripts
from pinlater.backends.redis.config import RedisShardConfig
from pinlater.backends.redis.connections import PackedConnection, TrackedConnection, pool_options
from pinlater.backends.redis.layouts import ShardLayout
from pinlater.backends.redis.script_calls import AsyncShardScripts, ScriptCall, ShardScripts

T = TypeVar("T")


@contextmanager
def cluster_errors() -> Iterator[None]:
    """The cluster client's own errors for an unusable cluster as redis-py's ConnectionError."""
    try:
        yield
    except (RedisClusterException, ClusterError) as exc:
        raise redis.ConnectionError(f"cluster: {type(exc).__name__}: {exc}") from exc


class LazyRedisCluster(redis.RedisCluster):
    """redis-py's blocking ``RedisCluster``, made (the slot map read) on first use, not when the
    store opens. Thread-safe."""

    def __init__(self, **kwargs: Any) -> None:  # deliberately not super().__init__ yet
        self._lazy_kwargs = kwargs
        self._lazy_lock = threading.RLock()
        self._lazy_ready = False
        self._lazy_building = False  # RedisCluster.__init__ sends commands (COMMAND) itself
        self._lazy_closed = False

    def _ready(self) -> None:
        if self._lazy_ready:
            return
        with self._lazy_lock:
            if self._lazy_ready or self._lazy_building:
                return
            if self._lazy_closed:
                raise redis.ConnectionError("cluster: the client is closed")
            self._lazy_building = True
            try:
                with cluster_errors():
                    super().__init__(**self._lazy_kwargs)
            finally:
                self._lazy_building = False
            self._lazy_ready = True

    def get_encoder(self) -> Encoder:
        """What ``register_script`` needs for the SHA, without connecting (bytes as they are)."""
        return Encoder(encoding="utf-8", encoding_errors="strict", decode_responses=False)  # type: ignore[no-untyped-call]  # untyped in redis-py

    def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        self._ready()
        with cluster_errors():
            return super().execute_command(*args, **kwargs)  # type: ignore[no-untyped-call]  # untyped in redis-py

    def pipeline(self, transaction: Any = None, shard_hint: Any = None) -> Any:
        self._ready()
        return super().pipeline(transaction, shard_hint)  # type: ignore[no-untyped-call]  # untyped in redis-py

    def primaries(self) -> dict[str, redis.Redis]:
        """A client of each master by its ``host:port`` (each through its pool in this client)."""
        self._ready()
        with cluster_errors():
            nodes = self.get_primaries()  # type: ignore[no-untyped-call]  # untyped in redis-py
            return {node.name: self.get_redis_connection(node) for node in nodes}

    def close(self) -> None:
        with self._lazy_lock:
            self._lazy_closed = True
            if not self._lazy_ready:
                return
        super().close()


def blocking_cluster(name: str, config: RedisShardConfig, timeout: float) -> LazyRedisCluster:
    """The blocking cluster client of a shard (made on first use). The first seed goes as a URL:
    only then do redis-py's node pools take ``connection_class`` (``redis.Redis`` does not)."""
    first, *others = config.cluster
    return LazyRedisCluster(
        url=f"redis://{first.host}:{first.port}",
        startup_nodes=[redis.cluster.ClusterNode(n.host, n.port) for n in others],  # type: ignore[no-untyped-call]
        retry=Retry(NoBackoff(), 0),
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        client_name=f"pinlater-shard-{name}",
        connection_class=TrackedConnection,
        **pool_options(),
    )


class ClusterShardScripts(ShardScripts):
    """``ShardScripts`` on a cluster: the same calls; ping and pipelines by master."""

    def __init__(self, name: str, config: RedisShardConfig, client: LazyRedisCluster, layout: ShardLayout) -> None:
        super().__init__(name, config, client, layout)
        self._cluster = client

    def ping(self) -> None:
        """PING every master: a cluster shard is healthy when all of them answer."""

        def ping_all() -> None:
            for node in self._cluster.primaries().values():
                node.ping()

        self._on_live_connection("ping", ping_all)
        self.check_layout()

    def run_pipelined(self, script: str, calls: Sequence[tuple[Sequence[str], Sequence[Any]]]) -> list[Any]:
        """As ``ShardScripts.run_pipelined``, one pipeline per master; each call's keys must
        share a slot. redis-py's cluster pipeline does not load scripts: on NOSCRIPT the script
        is loaded on every master and the pipeline sent once more (Redis ran none of it)."""
        registered = self._scripts[script]
        for attempt in (1, 2):
            with self.errors(), cluster_errors():
                pipe = self._cluster.pipeline(transaction=False)
                for keys, args in calls:
                    pipe.execute_command("EVALSHA", registered.sha, len(keys), *keys, *args)  # evalsha() is blocked
                try:
                    replies: list[Any] = pipe.execute()
                except NoScriptError:
                    if attempt == 2:
                        raise
                    self._cluster.script_load(scripts.source(script, self.layout.name))
                    continue
            return replies
        raise AssertionError("unreachable")


class AsyncClusterShardScripts(AsyncShardScripts):
    """``AsyncShardScripts`` on a cluster (redis.asyncio's ``RedisCluster``: it reads the slot map
    on first use).

    The first call on a new client runs alone: redis.asyncio's cluster client (8.1) recycles the
    connections of its nodes when it first reads the topology, and calls started meanwhile were
    seen to have their connection closed under them (``AttributeError`` on ``_writer``) when
    several started at once on a fresh client."""

    _warm = False
    _warming: tuple[asyncio.AbstractEventLoop, asyncio.Lock] | None = None

    async def call(self, call: ScriptCall[T]) -> T:
        loop = asyncio.get_running_loop()
        if not (self._warm and self._loop is loop):
            if self._warming is None or self._warming[0] is not loop:
                self._warming = (loop, asyncio.Lock())
            async with self._warming[1]:
                if not (self._warm and self._loop is loop):
                    result = await super().call(call)
                    self._warm = True
                    return result
        return await super().call(call)

    def _new_client(self) -> redis.asyncio.RedisCluster:
        self._warm = False
        return _AsyncCluster(
            startup_nodes=[redis.asyncio.cluster.ClusterNode(n.host, n.port) for n in self._config.cluster],
            retry=AsyncRetry(NoBackoff(), 0),
            socket_timeout=self._timeout,
            socket_connect_timeout=self._timeout,
            client_name=f"pinlater-shard-{self._name}",
            connection_class=PackedConnection,
            **pool_options(),
        )


class _AsyncCluster(redis.asyncio.RedisCluster):
    """redis.asyncio's ``RedisCluster`` with an unusable cluster raised as ``ConnectionError``,
    and node connections of ``connection_class`` (its constructor takes no such argument, but its
    nodes do: the keyword arguments every node is made with get it)."""

    def __init__(self, *, connection_class: type[redis.asyncio.Connection], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.connection_kwargs["connection_class"] = connection_class  # the nodes found later
        for node in self.startup_nodes:  # the seeds, made already
            node.connection_class = connection_class

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        with cluster_errors():
            return await super().execute_command(*args, **kwargs)
