"""``cluster.py`` on a real three-master Redis Cluster: slots as Redis computes them, and the
hot client's routing (owner by slot, MOVED, ASK, TRYAGAIN, a dead master).

The commands are EVALSHA of ``count_jobs.lua`` (its keys given one hash tag per queue, so one
slot), which only reads: what matters here is which node runs it, and that it runs once.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from redis.cluster import RedisCluster
from tests.support.redis_cluster import RedisClusterNodes

from pinlater._pinlater import redis_int_reply, redis_pack_command
from pinlater.backends.redis.cluster import ClusterHotClient, SlotMap, first_key, key_slot, read_slot_map
from pinlater.backends.redis.config import RedisEndpoint, RedisShardConfig
from pinlater.backends.redis.hot_client import HotClient, script_sha
from pinlater.errors import ShardConnectionError

pytestmark = pytest.mark.redis

SHA = script_sha("count_jobs")


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


def hot_client(cluster: RedisClusterNodes, timeout: float = 2.0) -> ClusterHotClient:
    seeds = [RedisEndpoint(host, port) for host, port in cluster.seeds]
    config = RedisShardConfig(seeds[0])
    return ClusterHotClient(
        "c", seeds, timeout, lambda node: HotClient("c", dataclasses.replace(config, master=node), timeout)
    )


def count_command(queue: str) -> bytes:
    """count_jobs over ``{c:queue}n`` (names) and ``{c:queue}s`` (the set)."""
    return redis_pack_command(("EVALSHA", SHA, 2, f"{{c:{queue}}}n", f"{{c:{queue}}}s", queue, "-inf", "+inf"))


def fill(client: RedisCluster, queue: str, members: int) -> None:
    client.zadd(f"{{c:{queue}}}n", {queue: 0})
    if members:
        client.zadd(f"{{c:{queue}}}s", {str(i): i for i in range(members)})


def test_key_slot_is_redis_own(client: RedisCluster) -> None:
    for key in [b"plc:{1:q}:m", b"{1:q}", b"plain", b"a{}b", b"{}{x}", b"x{y", b"pll:{1}", b"plc:{s_1:jobs}:p3:s0"]:
        assert key_slot(key) == client.keyslot(key) == client.cluster_keyslot(key)


def test_first_key_of_a_packed_command() -> None:
    assert first_key(count_command("q")) == b"{c:q}n"
    assert first_key(redis_pack_command(("EVALSHA", "x" * 40, 1, b"k" * 300, "a"))) == b"k" * 300


def test_slot_map_reads_every_master(cluster: RedisClusterNodes) -> None:
    slot_map = asyncio.run(read_slot_map([RedisEndpoint(h, p) for h, p in cluster.seeds], 2.0))
    assert sorted(n.port for n in slot_map.masters()) == sorted(n.port for n in cluster.nodes)
    for slot in (0, 5000, 16383):
        owner = slot_map.owner(slot)
        assert owner is not None and owner.port == cluster.owner(slot).port


def test_slot_map_needs_every_slot() -> None:
    with pytest.raises(ValueError, match="16384"):
        SlotMap([None] * 10)


def test_calls_go_to_the_owner_of_each_slot(cluster: RedisClusterNodes, client: RedisCluster) -> None:
    queues = [f"q{i}" for i in range(30)]
    for i, queue in enumerate(queues):
        fill(client, queue, i)
    owners = {cluster.owner(key_slot(f"{{c:{q}}}".encode())).port for q in queues}
    assert len(owners) == 3  # the queues span every master

    async def run() -> list[int | None]:
        hot = hot_client(cluster)
        try:
            counts = await asyncio.gather(*(hot.call("count_jobs", count_command(q), redis_int_reply) for q in queues))
            assert await hot.call("count_jobs", count_command("missing"), redis_int_reply) is None
            return list(counts)
        finally:
            await hot.aclose()

    assert asyncio.run(run()) == list(range(30))


def test_moved_is_followed_and_kept(cluster: RedisClusterNodes, client: RedisCluster) -> None:
    fill(client, "mv", 5)
    slot = key_slot(b"{c:mv}")

    async def run() -> None:
        hot = hot_client(cluster)
        try:
            assert await hot.call("count_jobs", count_command("mv"), redis_int_reply) == 5
            target = cluster.other_than(cluster.owner(slot))
            await asyncio.to_thread(cluster.migrate_slot, slot, target)
            # the map still names the old owner, which answers MOVED
            assert hot.slot_map is not None and hot.slot_map.owner(slot) != RedisEndpoint(target.host, target.port)
            assert await hot.call("count_jobs", count_command("mv"), redis_int_reply) == 5
            assert hot.slot_map.owner(slot) == RedisEndpoint(target.host, target.port)
        finally:
            await hot.aclose()

    asyncio.run(run())


def test_ask_runs_on_the_importing_node(cluster: RedisClusterNodes, client: RedisCluster) -> None:
    fill(client, "ask", 7)
    slot = key_slot(b"{c:ask}")
    source = cluster.owner(slot)
    target = cluster.other_than(source)

    async def run() -> None:
        hot = hot_client(cluster)
        try:
            assert await hot.call("count_jobs", count_command("ask"), redis_int_reply) == 7
            cluster.begin_migration(slot, source, target)
            while cluster.migrate_keys(slot, source, target, batch=1):
                pass
            # both keys are on the target now: the source answers ASK, the target runs it
            assert await hot.call("count_jobs", count_command("ask"), redis_int_reply) == 7
            assert hot.slot_map is not None and hot.slot_map.owner(slot) == RedisEndpoint(source.host, source.port)
        finally:
            await hot.aclose()
            cluster.finish_migration(slot, source, target)

    asyncio.run(run())


def test_tryagain_waits_up_to_the_timeout(cluster: RedisClusterNodes, client: RedisCluster) -> None:
    fill(client, "try", 0)  # only the names key: the set is missing on both nodes
    slot = key_slot(b"{c:try}")
    source = cluster.owner(slot)
    target = cluster.other_than(source)

    async def run() -> None:
        hot = hot_client(cluster, timeout=1.0)  # long enough for more ASK-TRYAGAIN rounds than MAX_REDIRECTS
        try:
            assert await hot.call("count_jobs", count_command("try"), redis_int_reply) == 0
            cluster.begin_migration(slot, source, target)
            while cluster.migrate_keys(slot, source, target):
                pass
            # a multi-key command with a missing key cannot run on the importing node
            with pytest.raises(ShardConnectionError) as caught:
                await hot.call("count_jobs", count_command("try"), redis_int_reply)
            assert isinstance(caught.value.__cause__, redis.exceptions.TryAgainError)
            cluster.finish_migration(slot, source, target)
            assert await hot.call("count_jobs", count_command("try"), redis_int_reply) == 0
        finally:
            await hot.aclose()

    asyncio.run(run())


def test_a_dead_master_fails_its_slots_only(tmp_path: Path) -> None:
    with RedisClusterNodes(tmp_path / "cluster") as cluster:
        rc = cluster.client()
        try:
            for i in range(30):
                fill(rc, f"d{i}", 1)
        finally:
            rc.close()
        dead = cluster.nodes[0]

        async def run() -> None:
            hot = hot_client(cluster)
            try:
                await hot.call("count_jobs", count_command("d0"), redis_int_reply)  # reads the map
                dead.kill()
                for i in range(30):
                    queue = f"d{i}"
                    owner = hot.slot_map.owner(key_slot(f"{{c:{queue}}}".encode())) if hot.slot_map else None
                    if owner is not None and owner.port == dead.port:
                        with pytest.raises(ShardConnectionError) as caught:
                            await hot.call("count_jobs", count_command(queue), redis_int_reply)
                        assert not caught.value.maybe_applied
                    else:
                        assert await hot.call("count_jobs", count_command(queue), redis_int_reply) == 1
            finally:
                await hot.aclose()

        asyncio.run(run())


def test_after_a_failover_calls_go_to_the_promoted_replica(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="pinlater.backends.redis.cluster")
    with RedisClusterNodes(tmp_path / "cluster", replicas=1) as cluster:
        rc = cluster.client()
        try:
            fill(rc, "fo", 3)
        finally:
            rc.close()
        master = cluster.owner(key_slot(b"{c:fo}"))
        with master.client() as client:
            assert client.wait(1, 10_000) == 1  # the replica has the keys

        async def run() -> None:
            hot = hot_client(cluster)
            try:
                assert await hot.call("count_jobs", count_command("fo"), redis_int_reply) == 3  # connected
                promoted = await asyncio.to_thread(cluster.fail_over, master)
                # the open connection is dead, the old master refuses: the map is read again and
                # the call goes to the promoted replica (count_jobs is safe to send again)
                assert await hot.call("count_jobs", count_command("fo"), redis_int_reply) == 3
                assert hot.slot_map is not None
                assert hot.slot_map.owner(key_slot(b"{c:fo}")) == RedisEndpoint(promoted.host, promoted.port)
                assert f"count_jobs again on 127.0.0.1:{promoted.port}" in caplog.text
            finally:
                await hot.aclose()

        asyncio.run(run())
