"""Fresh ``ShardStore`` instances of each backend kind, for the conformance suite.

``make_store(kind, tmp_path)`` is a small dispatch on ``kind``: a backend that joins the
suite adds one factory to ``_FACTORIES`` (and its kind to ``STORE_KINDS``) and nothing else.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

from pinlater.backends.base import ShardStore
from pinlater.backends.embedded import EmbeddedStore

#: Every kind the conformance suite runs against.
STORE_KINDS: tuple[str, ...] = ("embedded", "redis", "redis-compact", "redis-cluster", "mysql")


@contextmanager
def _embedded(tmp_path: Path) -> Iterator[ShardStore]:
    store = EmbeddedStore(tmp_path / "embedded-data", "1")
    try:
        yield store
    finally:
        store.close()


@contextmanager
def _redis(tmp_path: Path, layout: str = "original") -> Iterator[ShardStore]:
    # A redis-server of its own per test (it starts in milliseconds), so nothing needs flushing.
    from pinlater.backends.redis import RedisEndpoint, RedisShardConfig, RedisStore
    from tests.support.redis_server import RedisServer

    with RedisServer(tmp_path / "redis") as server:
        store = RedisStore("1", RedisShardConfig(RedisEndpoint(server.host, server.port), layout=layout))
        try:
            yield store
        finally:
            store.close()


def _redis_compact(tmp_path: Path) -> AbstractContextManager[ShardStore]:
    return _redis(tmp_path, "compact")


@contextmanager
def _redis_cluster(tmp_path: Path) -> Iterator[ShardStore]:
    # One three-master cluster per test process (it takes about two seconds to form), flushed
    # before each test.
    from pinlater.backends.redis import RedisEndpoint, RedisShardConfig, RedisStore
    from tests.support.redis_cluster import shared_cluster

    cluster = shared_cluster()
    cluster.flush_all()
    seeds = tuple(RedisEndpoint(host, port) for host, port in cluster.seeds)
    store = RedisStore("1", RedisShardConfig(seeds[0], layout="compact", cluster=seeds))
    try:
        yield store
    finally:
        store.close()


@contextmanager
def _mysql(tmp_path: Path) -> Iterator[ShardStore]:
    # One MariaDB per test process (it takes about a second to start); queue databases are
    # dropped before each test instead.
    from pinlater.backends.mysql import Endpoint, MySQLShardConfig, MySQLStore
    from tests.support.mariadb_server import shared_server

    server = shared_server()
    server.drop_queue_databases()
    store = MySQLStore("1", MySQLShardConfig(Endpoint(server.host, server.port), server.user, server.password))
    try:
        yield store
    finally:
        store.close()


_FACTORIES: dict[str, Callable[[Path], AbstractContextManager[ShardStore]]] = {
    "embedded": _embedded,
    "redis": _redis,
    "redis-compact": _redis_compact,
    "redis-cluster": _redis_cluster,
    "mysql": _mysql,
}


def make_store(kind: str, tmp_path: Path) -> AbstractContextManager[ShardStore]:
    """A context manager yielding an empty store of ``kind`` (shard name "1"), closed on exit."""
    try:
        factory = _FACTORIES[kind]
    except KeyError:
        raise ValueError(f"unknown store kind {kind!r}; known: {', '.join(_FACTORIES)}") from None
    return factory(tmp_path)
