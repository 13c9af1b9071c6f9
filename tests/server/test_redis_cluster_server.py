"""The server on a Redis Cluster shard, end to end: a real ``pinlater serve --backend redis`` whose
config lists a shard by its cluster seed nodes, over a real three-master cluster, driven by the
Apache-generated client. Nothing in the server knows the shard is a cluster (the store hides it):
the same calls, answers and descriptors as on one Redis; the queue's keys carry its hash tag and
are spread over the masters by queue.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from tests.server.test_contract import IN_PROGRESS, PENDING, SUCCEEDED, Api
from tests.support.pinlater_server import ServerProcess
from tests.support.redis_cluster import RedisClusterNodes
from tests.support.wait import wait_for

from pinlater.backends.redis.cluster import key_slot

pytestmark = pytest.mark.redis


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisClusterNodes]:
    with RedisClusterNodes(tmp_path_factory.mktemp("cluster")) as nodes:
        yield nodes


def write_cluster_config(path: Path, cluster: RedisClusterNodes, seeds: int = 2) -> Path:
    shard = {"cluster": [{"host": host, "port": port} for host, port in cluster.seeds[:seeds]]}
    path.write_text(json.dumps({"shards": [{"name": "1", "shardConfig": shard}]}))
    return path


@pytest.mark.usefixtures("ready_lists_on")
@pytest.mark.parametrize("broker", [False, True], ids=["direct", "broker"])
def test_lifecycle_through_the_server_on_a_cluster_shard(
    tmp_path: Path,
    cluster: RedisClusterNodes,
    broker: bool,
    start_server: Callable[..., ServerProcess],
    open_client: Callable[[ServerProcess], Any],
    ttypes: ModuleType,
) -> None:
    cluster.flush_all()
    config = write_cluster_config(tmp_path / "redis.json", cluster)
    server = start_server(
        "--backend", "redis", "--backend-config", str(config), properties={"BROKER_ENABLED": str(broker).lower()}
    )
    api = Api(open_client(server), ttypes)

    queues = [f"life{i}" for i in range(6)]
    for queue in queues:
        api.create(queue)
    assert set(api.c.getQueueNames(api.ctx)) == set(queues)
    owners = {cluster.owner(key_slot(f"{{1:{q}}}".encode())).port for q in queues}
    assert len(owners) > 1, "the queues live on several masters"

    for queue in queues:
        first = api.enqueue(queue, api.job(b"a", priority=1, numAttemptsAllowed=3), api.job(b"b", priority=2))
        assert first == [f"{queue}:s1:p1:1", f"{queue}:s1:p2:2"]
        got = wait_for(lambda q=queue: api.dequeue(q, limit=1).jobs, what="a job dequeued")  # type: ignore[misc]
        assert dict(got) == {first[0]: b"a"}
        assert api.lookup(first[0])[first[0]].jobState == IN_PROGRESS
        api.ack(queue, ok=[first[0]])
        found = api.lookup(first[0], first[1], body=True)
        assert found[first[0]].jobState == SUCCEEDED and found[first[0]].body == b"a"
        assert found[first[1]].jobState == PENDING
        assert api.count(queue, SUCCEEDED) == 1 and api.count(queue, PENDING) == 1

    raw = cluster.client()
    try:
        for queue in queues:
            assert raw.zrange(f"plc:{{1:{queue}}}:p1:s2", 0, -1) == [b"1"]
            listed = [e for e in raw.lrange(f"plc:{{1:{queue}}}:p2:r", 0, -1) if not e.startswith(b"@")]
            pending = raw.zrange(f"plc:{{1:{queue}}}:p2:s0", 0, -1) + raw.zrange(f"plc:{{1:{queue}}}:p2:h", 0, -1)
            assert pending + listed == [b"2"]  # PENDING (in the ready list, or the set), or held by the broker
            if not broker:  # enqueued without a run after: run after == the enqueue's now, so listed
                assert listed == [b"2"]
        assert sorted(raw.zrange("plc:{1}:q", 0, -1)) == sorted(q.encode() for q in queues)
        assert raw.get("pll:{1}") == b"compact"
    finally:
        raw.close()
    # the start-up durability check read every master (each warns: no AOF in these tests)
    for _, port in cluster.seeds:
        wait_for(lambda port=port: any(f"cluster master 127.0.0.1:{port}" in line for line in list(server.lines)))  # type: ignore[misc]
