"""Keyed enqueues on the Redis store's hot path (``NativeHotPath.enqueue_keyed_jobs``: packed by
the extension, sent on the pipelined hot connection) beyond the shared suites: the second call for
a record of a priority above the store's, a flushed script, calls in flight together, and a Redis
Cluster (``ClusterHotClient``)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.support.redis_cluster import shared_cluster
from tests.support.redis_server import RedisServer

from pinlater.backends.base import Enqueued, KeyedJob, NewJob, QueueRules
from pinlater.backends.redis import RedisDriver, RedisEndpoint, RedisShardConfig, RedisStore
from pinlater.backends.redis.native_hot import NativeHotPath
from pinlater.config import Settings

pytestmark = pytest.mark.redis

Q = "kq"
T0 = 1_700_000_000_000


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    with RedisServer(tmp_path / "redis") as srv:
        yield srv


def open_store(server: RedisServer, layout: str, levels: int = 3) -> RedisStore:
    config = RedisShardConfig(RedisEndpoint(server.host, server.port), layout=layout)
    return RedisStore("1", config, Settings(num_priority_levels=levels))


def run(store: RedisStore, body: Callable[[NativeHotPath], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        try:
            hot = store.hot_path(None)  # type: ignore[arg-type]  # offload unused
            assert isinstance(hot, NativeHotPath)
            return await body(hot)
        finally:
            await store.aclose()

    return asyncio.run(main())


def job(key: str | None, group: str | None = None, priority: int = 1) -> KeyedJob:
    return KeyedJob(NewJob(priority, b"body", T0, 2), key, 60_000 if key is not None else 0, group)


@pytest.mark.parametrize("layout", ["original", "compact"])
def test_a_record_of_a_priority_above_the_stores_takes_a_second_call(server: RedisServer, layout: str) -> None:
    wide, narrow = open_store(server, layout, 5), open_store(server, layout, 2)
    try:
        wide.create_queue(Q, 5)
        (a,) = wide.enqueue_keyed_jobs(Q, [job("k", priority=5)], T0)
        if layout == "compact":
            narrow.set_queue_rules({Q: QueueRules(group_concurrency=1)})
            jobs = [job("k"), job(None, "g"), job("k2", "g")]
        else:
            jobs = [job("k"), job("k2")]
        placed = run(narrow, lambda hot: hot.enqueue_keyed_jobs(Q, jobs, T0 + 1))
        assert placed[0] == Enqueued(5, a.local_id, True)
        assert [e.deduplicated for e in placed[1:]] == [False] * (len(jobs) - 1)
        assert [e.local_id for e in placed[1:]] == list(range(a.local_id + 1, a.local_id + len(jobs)))
        if layout == "compact":  # the group's tail was built over the five priorities too
            claimed = narrow.dequeue_jobs(Q, 1, 10, "c", T0 + 1, False)
            assert [j.local_id for j in claimed] == [placed[1].local_id]  # the second waits behind it
    finally:
        wide.close()
        narrow.close()


def test_a_flushed_script_is_loaded_again(server: RedisServer) -> None:
    store = open_store(server, "compact")
    try:
        store.create_queue(Q, 3)

        async def twice(hot: NativeHotPath) -> list[Enqueued]:
            first = await hot.enqueue_keyed_jobs(Q, [job("a", "g")], T0)
            server.client().script_flush()
            second = await hot.enqueue_keyed_jobs(Q, [job("a", "g"), job("b", "g")], T0)
            return first + second

        a, again, b = run(store, twice)
        assert again == Enqueued(1, a.local_id, True)
        assert not a.deduplicated and not b.deduplicated and b.local_id == a.local_id + 1
    finally:
        store.close()


def test_calls_in_flight_together_are_answered_each_its_own(server: RedisServer) -> None:
    store = open_store(server, "compact")
    try:
        store.create_queue(Q, 3)

        async def together(hot: NativeHotPath) -> list[list[Enqueued]]:
            calls = [hot.enqueue_keyed_jobs(Q, [job(f"k{i}", f"g{i % 3}"), job(f"j{i}")], T0) for i in range(20)]
            first = await asyncio.gather(*calls)
            again = [hot.enqueue_keyed_jobs(Q, [job(f"j{i}"), job(f"k{i}", f"g{i % 3}")], T0) for i in range(20)]
            return [*first, *await asyncio.gather(*again)]

        answers = run(store, together)
        first, again = answers[:20], answers[20:]
        ids = sorted(e.local_id for placed in first for e in placed)
        assert ids == list(range(1, 41)) and not any(e.deduplicated for placed in first for e in placed)
        for (k, j), (j2, k2) in zip(first, again, strict=True):  # each call answered with its own keys' holders
            assert (j2, k2) == (j._replace(deduplicated=True), k._replace(deduplicated=True))
    finally:
        store.close()


def test_a_keyed_enqueue_on_a_redis_cluster() -> None:
    nodes = shared_cluster()
    nodes.flush_all()
    shard = {"cluster": [{"host": host, "port": port} for host, port in nodes.seeds[:1]]}
    driver = RedisDriver()
    text = json.dumps({"shards": [{"name": "c", "shardConfig": shard}]})
    store = driver.open_store("c", driver.parse_config(text, "redis.json")["c"], Settings())
    assert isinstance(store, RedisStore)
    try:
        store.create_queue(Q, 2)

        async def hot() -> tuple[list[Enqueued], list[Enqueued]]:
            first = await store.native.enqueue_keyed_jobs(Q, [job("k", "g"), job(None, "g"), job("j")], T0)
            again = await store.native.enqueue_keyed_jobs(Q, [job("k", "g")], T0 + 1)
            await store.native.aclose()
            return first, again

        first, again = asyncio.run(hot())
        assert [e.local_id for e in first] == [1, 2, 3] and not any(e.deduplicated for e in first)
        assert again == [Enqueued(1, 1, True)]
        assert [j.local_id for j in store.dequeue_jobs(Q, 1, 10, "c", T0, False)] == [1, 3]  # 2 waits behind 1
        store.delete_queue(Q)
    finally:
        store.close()
