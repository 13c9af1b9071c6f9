"""A Redis Cluster shard's config and what only a cluster shard has: opening while the cluster is
down, ping, the memory probe and the durability check over every master, and queue counts of
queues on several masters. (The operations themselves run in the conformance suite, kind
``redis-cluster``; slot moves under load in ``test_redis_cluster_migration.py``.)"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import pytest
from tests.support.redis_cluster import RedisClusterNodes, cluster_port, shared_cluster

from pinlater._pinlater import NewJobBatch
from pinlater.backends.base import CountKey, JobState, NewJob
from pinlater.backends.pressure import MemoryUse
from pinlater.backends.redis import RedisDriver, RedisEndpoint, RedisShardConfig, RedisStore, durability_warnings
from pinlater.backends.redis.cluster import key_slot
from pinlater.backends.redis.config import parse_redis_config
from pinlater.backends.redis.memory import fullest
from pinlater.config import Settings
from pinlater.errors import ConfigError, ShardConnectionError

A = {"host": "10.0.0.3", "port": 7000}
B = {"host": "10.0.0.4", "port": 7001}


def config_text(shard: dict[str, object], **entry: object) -> str:
    return json.dumps({"shards": [{"name": "c", "shardConfig": shard, **entry}]})


def test_parse_a_cluster_shard() -> None:
    shards = parse_redis_config(config_text({"cluster": [A, B, A], "dequeueOnly": True}), "redis.json")
    seeds = (RedisEndpoint("10.0.0.3", 7000), RedisEndpoint("10.0.0.4", 7001))
    assert shards == {"c": RedisShardConfig(seeds[0], layout="compact", cluster=seeds)}
    assert shards["c"].is_cluster and shards["c"].dequeue_only and shards["c"].slave is None
    explicit = parse_redis_config(config_text({"cluster": [A]}, layout="compact"), "redis.json")
    assert explicit["c"].layout == "compact" and explicit["c"].cluster == seeds[:1]
    assert not parse_redis_config(config_text({"master": A}), "redis.json")["c"].is_cluster


@pytest.mark.parametrize(
    ("shard", "entry", "reason"),
    [
        ({"cluster": [A], "master": B}, {}, "has 'cluster' and 'master'"),
        ({"cluster": [A], "slave": B}, {}, "has 'cluster' and 'slave'"),
        ({"cluster": []}, {}, "non-empty list"),
        ({"cluster": A}, {}, "non-empty list"),
        ({"cluster": [{"host": "h", "port": 0}]}, {}, "cluster[0].port must be"),
        ({"cluster": [A]}, {"layout": "original"}, 'needs the compact layout'),
        ({"dequeueOnly": False}, {}, "missing 'master' (or 'cluster'"),
    ],
)  # fmt: skip
def test_a_bad_cluster_config_says_why(shard: dict[str, object], entry: dict[str, object], reason: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_redis_config(config_text(shard, **entry), "/etc/pinlater/redis.json")
    message = str(info.value)
    assert message.startswith("/etc/pinlater/redis.json: ") and reason in message and "\n" not in message


def test_the_fullest_master_is_the_reading() -> None:
    assert fullest([MemoryUse(50, 100), MemoryUse(900, 1000), MemoryUse(10**9, 0)]) == MemoryUse(900, 1000)
    assert fullest([MemoryUse(5, 0), MemoryUse(7, 0)]) == MemoryUse(7, 0)
    assert fullest([]) == MemoryUse(0, 0)


@pytest.mark.redis
def test_a_cluster_down_at_open_is_a_shard_down_not_a_failed_open() -> None:
    nowhere = RedisEndpoint("127.0.0.1", cluster_port())
    store = RedisStore("c", RedisShardConfig(nowhere, layout="compact", cluster=(nowhere,)), Settings())
    try:
        with pytest.raises(ShardConnectionError) as caught:
            store.ping()
        assert not caught.value.maybe_applied
        with pytest.raises(ShardConnectionError):
            store.memory.refresh()
        assert "cannot check durability settings" in durability_warnings(store)[0]
    finally:
        store.close()


@pytest.fixture
def cluster() -> RedisClusterNodes:
    nodes = shared_cluster()
    nodes.flush_all()
    return nodes


@pytest.fixture
def store(cluster: RedisClusterNodes) -> Iterator[RedisStore]:
    shard = {"cluster": [{"host": host, "port": port} for host, port in cluster.seeds[:1]]}
    driver = RedisDriver()
    config = driver.parse_config(config_text(shard), "redis.json")["c"]
    opened = driver.open_store("c", config, Settings())
    assert isinstance(opened, RedisStore)
    yield opened
    opened.close()


@pytest.mark.redis
def test_ping_memory_and_durability_cover_every_master(cluster: RedisClusterNodes, store: RedisStore) -> None:
    store.ping()
    assert store.memory.refresh().max_bytes == 0
    fullest_node = cluster.nodes[1]
    with fullest_node.client() as client:
        client.config_set("maxmemory", 64 << 20)
    try:
        use = store.memory.refresh()
        assert use.max_bytes == 64 << 20 and use.used_bytes > 0
    finally:
        with fullest_node.client() as client:
            client.config_set("maxmemory", 0)
    warnings = durability_warnings(store)
    for _, port in cluster.seeds:
        assert any(f"cluster master 127.0.0.1:{port}): appendonly is no" in w for w in warnings), warnings
    assert all(w.startswith("redis shard c (cluster master 127.0.0.1:") for w in warnings)


@pytest.mark.redis
def test_queue_counts_over_queues_on_every_master(cluster: RedisClusterNodes, store: RedisStore) -> None:
    queues = [f"q{i}" for i in range(12)]
    assert len({cluster.owner(key_slot(f"{{c:{q}}}".encode())).port for q in queues}) == 3

    async def enqueue() -> None:
        for i, queue in enumerate(queues):
            jobs = [NewJob(1 + j % 2, b"x", 0, 1) for j in range(i + 1)]
            await store.native.enqueue_jobs(queue, NewJobBatch(jobs), 1_000)
        await store.aclose()

    for queue in queues:
        store.create_queue(queue, 2)
    asyncio.run(enqueue())
    assert store.get_queue_names() == set(queues)
    counts = store.queue_counts(2, 2_000)
    for i, queue in enumerate(queues):
        assert counts.get(CountKey(queue, 1, JobState.PENDING, False), 0) == (i + 2) // 2
        assert counts.get(CountKey(queue, 2, JobState.PENDING, False), 0) == (i + 1) // 2
