"""The Redis store's hot operations on the event loop (``RedisStore.hot_path``, redis.asyncio).

Through ``ShardedBackend.hot_path``, as the server calls them, against a real redis-server:
they run without the thread pool, agree with the blocking methods, and fail the same ways.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.hot import dequeue, enqueue
from tests.support.redis_server import RedisServer

from pinlater._pinlater import AckGroup, NewJobBatch, decode_descriptors
from pinlater.backends.base import AckItem, JobState, NewJob
from pinlater.backends.redis import RedisEndpoint, RedisShardConfig, RedisStore
from pinlater.backends.sharded import ShardedBackend
from pinlater.backends.shardmap import Shard, ShardMap
from pinlater.config import Settings
from pinlater.errors import QueueNotFoundError, ShardConnectionError

pytestmark = pytest.mark.redis

Q = "loop"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    with RedisServer(tmp_path / "redis") as srv:
        yield srv


@pytest.fixture
def store(server: RedisServer) -> Iterator[RedisStore]:
    settings = Settings().with_values({"backend_socket_timeout_seconds": 1.0}, source="test")
    shard = RedisStore("1", RedisShardConfig(RedisEndpoint(server.host, server.port), layout="original"), settings)
    shard.create_queue(Q, 3)
    yield shard
    shard.close()


def backend_of(store: RedisStore) -> ShardedBackend:
    return ShardedBackend(ShardMap([Shard(store.name, store)]), num_priorities=3, parallelism=2)


def test_the_lifecycle_runs_on_the_loop_and_matches_the_blocking_store(store: RedisStore) -> None:
    backend = backend_of(store)

    async def lifecycle() -> list[str]:
        now = backend.clock.now_ms()
        jobs = [NewJob(priority=p, body=b"job-%d" % p, run_after_ms=now, attempts_allowed=2) for p in (2, 1)]
        descriptors = await enqueue(backend, Q, jobs)
        got = await dequeue(backend, Q, 5, "worker")
        assert [j.descriptor for j in got] == descriptors[::-1], "priority 1 first"
        shard = backend.shards.get("1")
        assert shard is not None
        acks = AckGroup([AckItem(1, got[0].job.local_id)], [])
        await backend.on_shard(shard, backend.hot_path(shard).ack_jobs(Q, acks, now))
        await backend.aclose()
        return descriptors

    descriptors = asyncio.run(lifecycle())
    assert backend._executor._threads == set(), "no store call went through the thread pool"
    keys = [(p, i) for _q, _s, p, i in decode_descriptors(descriptors)]
    records = {r.priority: r for r in store.lookup_jobs(Q, keys, False)}
    assert records[1].state == JobState.SUCCEEDED
    assert records[2].state == JobState.IN_PROGRESS and (records[2].claim_descriptor or "").startswith("worker|")
    backend.close()


def test_a_missing_queue_and_a_dead_server_fail_as_on_the_pool(store: RedisStore, server: RedisServer) -> None:
    backend = backend_of(store)
    shard = backend.shards.get("1")
    assert shard is not None

    async def missing() -> None:
        try:
            await backend.on_shard(shard, backend.hot_path(shard).dequeue_jobs("nope", 1, 10, "c", 0, False))
        finally:
            await backend.aclose()

    with pytest.raises(QueueNotFoundError):
        asyncio.run(missing())
    assert shard.healthy
    server.stop()

    async def dead() -> None:
        try:
            batch = NewJobBatch([NewJob(1, b"x", 0, 1)])
            await backend.on_shard(shard, backend.hot_path(shard).enqueue_jobs(Q, batch, 0))
        finally:
            await backend.aclose()

    with pytest.raises(ShardConnectionError):
        asyncio.run(dead())
    assert not shard.healthy, "a connection failure on the loop marks the shard, as on the pool"
    backend.close()
