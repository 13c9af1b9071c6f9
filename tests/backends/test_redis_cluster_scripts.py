"""``cluster_scripts.py`` on a real three-master Redis Cluster: the store's other scripts through
redis-py's cluster clients (routing by slot, NOSCRIPT on the node that answers it, pipelines
split by master, errors as on one server).

The scripts are the original layout's ``count_jobs.lua`` and ``queue_counts.lua``, given keys
that share one hash tag per queue: they only read, and what matters here is where they run.
(The store on a cluster, in the compact layout, is in the conformance suite.)"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis.cluster import RedisCluster
from tests.support.redis_cluster import RedisClusterNodes, cluster_port

from pinlater.backends.redis.cluster import key_slot
from pinlater.backends.redis.cluster_scripts import AsyncClusterShardScripts, ClusterShardScripts, blocking_cluster
from pinlater.backends.redis.config import RedisEndpoint, RedisShardConfig
from pinlater.backends.redis.layouts import ShardLayout
from pinlater.backends.redis.script_calls import ScriptCall
from pinlater.errors import QueueNotFoundError, ShardConnectionError

pytestmark = pytest.mark.redis


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisClusterNodes]:
    with RedisClusterNodes(tmp_path_factory.mktemp("cluster")) as nodes:
        yield nodes


@pytest.fixture
def client(cluster: RedisClusterNodes) -> Iterator[RedisCluster]:
    cluster.flush_all()
    rc = cluster.client()
    yield rc
    rc.close()


def config_of(cluster: RedisClusterNodes) -> RedisShardConfig:
    seeds = tuple(RedisEndpoint(h, p) for h, p in cluster.seeds)
    return RedisShardConfig(seeds[0], layout="original", cluster=seeds)


@pytest.fixture
def shard(cluster: RedisClusterNodes, client: RedisCluster) -> Iterator[ClusterShardScripts]:
    config = config_of(cluster)
    lazy = blocking_cluster("c", config, 2.0)
    yield ClusterShardScripts("c", config, lazy, ShardLayout("c", config, lazy))
    lazy.close()


def fill(client: RedisCluster, queue: str, members: int) -> None:
    client.zadd(f"{{c:{queue}}}n", {queue: 0})
    if members:
        client.zadd(f"{{c:{queue}}}s", {str(i): i for i in range(members)})


def count(shard: ClusterShardScripts, queue: str) -> int:
    keys = [f"{{c:{queue}}}n", f"{{c:{queue}}}s"]
    return int(shard.run_in_queue("count_jobs", queue, keys, [queue, "-inf", "+inf"]))


def test_scripts_run_on_every_master(
    cluster: RedisClusterNodes, client: RedisCluster, shard: ClusterShardScripts
) -> None:
    queues = [f"q{i}" for i in range(20)]
    for i, queue in enumerate(queues):
        fill(client, queue, i)
    assert len({cluster.owner(key_slot(f"{{c:{q}}}".encode())).port for q in queues}) == 3
    assert [count(shard, q) for q in queues] == list(range(20))
    with pytest.raises(QueueNotFoundError):
        count(shard, "missing")
    shard.ping()


def test_noscript_loads_on_the_node_that_answers_it(client: RedisCluster, shard: ClusterShardScripts) -> None:
    fill(client, "ns", 3)
    assert count(shard, "ns") == 3
    client.script_flush()  # on every master
    assert count(shard, "ns") == 3


def test_pipelines_are_split_by_master(client: RedisCluster, shard: ClusterShardScripts) -> None:
    queues = [f"p{i}" for i in range(12)]
    for i, queue in enumerate(queues):
        fill(client, queue, i)
    client.script_flush()  # on every master: the pipeline loads it itself
    calls = [([f"{{c:{q}}}s", f"{{c:{q}}}h"], ["+inf"]) for q in queues]  # one queue (slot) per call
    replies = shard.run_pipelined("queue_counts", calls)
    assert [list(r) for r in replies] == [[i, i, 0, 0] for i in range(12)]


def test_a_slot_moved_since_is_followed(
    cluster: RedisClusterNodes, client: RedisCluster, shard: ClusterShardScripts
) -> None:
    fill(client, "mv", 4)
    assert count(shard, "mv") == 4
    slot = key_slot(b"{c:mv}")
    cluster.migrate_slot(slot, cluster.other_than(cluster.owner(slot)))
    assert count(shard, "mv") == 4
    assert shard.run_pipelined("queue_counts", [(["{c:mv}s"], ["+inf"])]) == [[4, 4]]


def test_async_scripts(cluster: RedisClusterNodes, client: RedisCluster) -> None:
    for i in range(10):
        fill(client, f"a{i}", i)

    async def run() -> list[int]:
        config = config_of(cluster)
        scripts = AsyncClusterShardScripts("c", config, 4, 2.0, ShardLayout("c", config, client))
        try:
            calls = [
                ScriptCall("count_jobs", f"a{i}", [f"{{c:a{i}}}n", f"{{c:a{i}}}s"], [f"a{i}", "-inf", "+inf"], int)
                for i in range(10)
            ]
            counts = list(await asyncio.gather(*(scripts.call(c) for c in calls)))
            with pytest.raises(QueueNotFoundError):
                await scripts.call(ScriptCall("count_jobs", "x", ["{c:x}n", "{c:x}s"], ["x", "-inf", "+inf"], int))
            return counts
        finally:
            await scripts.aclose()

    assert asyncio.run(run()) == list(range(10))


def test_a_cluster_down_at_open_fails_calls_not_the_open(tmp_path: Path) -> None:
    nowhere = RedisEndpoint("127.0.0.1", cluster_port())
    config = RedisShardConfig(nowhere, layout="compact", cluster=(nowhere,))
    lazy = blocking_cluster("c", config, 0.5)
    layout = ShardLayout("c", config, lazy)  # cannot read the record: checked once reached
    assert not layout.checked
    shard = ClusterShardScripts("c", config, lazy, layout)
    try:
        with pytest.raises(ShardConnectionError) as caught:
            shard.ping()
        assert not caught.value.maybe_applied
        with pytest.raises(ShardConnectionError):
            shard.run_in_queue("count_jobs", "q", ["{c:q}n", "{c:q}s"], ["q", "-inf", "+inf"])

        async def run() -> None:
            scripts = AsyncClusterShardScripts("c", config, 4, 0.5, layout)
            try:
                with pytest.raises(ShardConnectionError):
                    await scripts.call(ScriptCall("count_jobs", "q", ["{c:q}n", "{c:q}s"], ["q", "-inf", "+inf"], int))
            finally:
                await scripts.aclose()

        asyncio.run(run())
    finally:
        lazy.close()
