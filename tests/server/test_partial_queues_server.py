"""A queue that exists on only some shards, end to end on Redis and MySQL: a real ``pinlater
serve`` over three real shards holding data in the original's layout, driven by the client
generated from the original IDL.

The original created a queue on every shard at once, but shards added later, restored from a
backup, or written by several deployments hold a queue on some shards only. At start-up the
server puts every queue on each shard that takes new jobs; reads treat a shard without the
queue (a dequeue-only one is left as it is) as holding none of its jobs, and QUEUE_NOT_FOUND
comes only when no shard has the queue. In process, over the embedded store:
``tests/backends/test_partial_queues.py``.
"""

from __future__ import annotations

import json
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

import pytest
from tests.server import test_mysql_server as on_mysql
from tests.server import test_redis_server as on_redis
from tests.server.test_contract import FAILED, IN_PROGRESS, PENDING, SUCCEEDED, Api
from tests.support import original_mysql, original_redis
from tests.support.mariadb_server import MariaDBServer, shared_server
from tests.support.pinlater_server import ServerProcess
from tests.support.redis_server import RedisServer

QUEUE_NOT_FOUND = 413
SHARDS = ("1", "2", "3")
#: What the original left on one shard, as (priority, state, body).
ORIGINAL_JOBS = [
    (1, original_redis.PENDING, b"old-0"),
    (1, original_redis.PENDING, b"old-1"),
    (1, original_redis.PENDING, b"old-2"),
    (2, original_redis.PENDING, b"old-3"),
    (1, original_redis.SUCCEEDED, b"done"),
    (3, original_redis.FAILED, b"dead"),
]


class Stores(Protocol):
    """Three real shards of one backend, named ``SHARDS``."""

    def seed(self, shard: str, queue: str, jobs: list[tuple[int, int, bytes]]) -> None:
        """Write a queue and its jobs on one shard, as the original did."""

    def queues(self, shard: str) -> set[str]:
        """The queues the shard holds now, read from the store itself."""

    def serve(self, start_server: Callable[..., ServerProcess], dequeue_only: str, **props: Any) -> ServerProcess:
        """``pinlater serve`` over the three shards; ``dequeue_only`` names the ones marked so."""


class RedisStores:
    def __init__(self, servers: dict[str, RedisServer], tmp_path: Path) -> None:
        self.servers, self.config = servers, tmp_path / "redis.json"

    def seed(self, shard: str, queue: str, jobs: list[tuple[int, int, bytes]]) -> None:
        with self.servers[shard].client() as raw:
            original_redis.seed_original_queue(raw, shard, queue, jobs)

    def queues(self, shard: str) -> set[str]:
        with self.servers[shard].client() as raw:
            return {name.decode() for name in raw.zrange(f"pln_{shard}", 0, -1)}

    def serve(self, start_server: Callable[..., ServerProcess], dequeue_only: str, **props: Any) -> ServerProcess:
        on_redis.write_config(self.config, {s: (self.servers[s], s in dequeue_only) for s in SHARDS})
        return on_redis.serve(start_server, self.config, **props)


class MySQLStores:
    """Three shards in one MariaDB (config keys 1, 2, 3: databases ``plq_{shard}_{queue}``)."""

    def __init__(self, server: MariaDBServer, tmp_path: Path) -> None:
        self.server, self.tmp_path = server, tmp_path

    def seed(self, shard: str, queue: str, jobs: list[tuple[int, int, bytes]]) -> None:
        conn = self.server.admin_connection()
        try:
            original_mysql.seed_original_queue(conn, shard, queue, jobs)
        finally:
            conn.close()

    def queues(self, shard: str) -> set[str]:
        prefix = f"plq_{shard}_"
        return {db[len(prefix) :] for db in on_mysql.databases(self.server) if db.startswith(prefix)}

    def serve(self, start_server: Callable[..., ServerProcess], dequeue_only: str, **props: Any) -> ServerProcess:
        shards = {s: (self.server, s in dequeue_only) for s in SHARDS}
        return on_mysql.serve(start_server, self.tmp_path, shards, **props)


@pytest.fixture(params=[pytest.param("redis", marks=pytest.mark.redis), pytest.param("mysql", marks=pytest.mark.mysql)])
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Stores]:
    if request.param == "redis":
        with ExitStack() as stack:
            servers = {s: stack.enter_context(RedisServer(tmp_path / f"redis-{s}")) for s in SHARDS}
            yield RedisStores(servers, tmp_path)
    else:
        server = shared_server()
        server.drop_queue_databases()
        yield MySQLStores(server, tmp_path)


@pytest.fixture
def api_for(open_client: Callable[[ServerProcess], Any], ttypes: ModuleType) -> Callable[[ServerProcess], Api]:
    return lambda server: Api(open_client(server), ttypes)


def shards_of(descriptors: Any) -> set[str]:
    return {on_redis.shard_of(d) for d in descriptors}


def created_lines(server: ServerProcess) -> Counter[str]:
    return Counter(line.split("created queue ", 1)[1] for line in server.lines if "created queue " in line)


def assert_missing_queue_is_not_found(api: Api) -> None:
    assert api.error_code(api.count, "nope", PENDING) == QUEUE_NOT_FOUND
    assert api.error_code(api.scan, "nope", PENDING) == QUEUE_NOT_FOUND
    assert api.error_code(api.dequeue, "nope") == QUEUE_NOT_FOUND
    assert api.error_code(api.dequeue, "nope", dryRun=True) == QUEUE_NOT_FOUND
    assert api.error_code(api.enqueue, "nope", api.job(b"x")) == QUEUE_NOT_FOUND


def test_a_queue_on_one_shard_of_three_is_put_on_all_three_at_start_up_and_served(
    stores: Stores, start_server: Callable[..., ServerProcess], api_for: Callable[[ServerProcess], Api]
) -> None:
    stores.seed("2", "part", ORIGINAL_JOBS)
    stores.seed("3", "solo", [(1, original_redis.PENDING, b"alone")])
    assert [stores.queues(s) for s in SHARDS] == [set(), {"part"}, {"solo"}]

    server = stores.serve(start_server, dequeue_only="")
    api = api_for(server)
    assert [stores.queues(s) for s in SHARDS] == [{"part", "solo"}] * 3, "every queue on every shard"
    assert created_lines(server) == Counter(
        {
            "part on shard 1: another shard has it": 1,
            "part on shard 3: another shard has it": 1,
            "solo on shard 1: another shard has it": 1,
            "solo on shard 2: another shard has it": 1,
        }
    )
    assert set(api.c.getQueueNames(api.ctx)) == {"part", "solo"}

    assert api.count("part", PENDING) == 4
    assert api.count("part", PENDING, priority=1) == 3
    assert (api.count("part", SUCCEEDED), api.count("part", FAILED)) == (1, 1)
    scanned = api.scan("part", PENDING).scannedJobs
    assert len(scanned) == 4 and shards_of(j.jobDescriptor for j in scanned) == {"2"}

    got = api.dequeue("part", limit=10)
    assert list(got.jobs.values()) == [b"old-0", b"old-1", b"old-2", b"old-3"], "priority 1 first, oldest first"
    assert shards_of(got.jobs) == {"2"}
    assert api.count("part", IN_PROGRESS) == 4
    api.ack("part", ok=list(got.jobs))
    assert (api.count("part", SUCCEEDED), api.count("part", IN_PROGRESS)) == (5, 0)

    new = on_redis.enqueue_singles(api, "part", 30)
    assert shards_of(new) == set(SHARDS), "an enqueue may land on any shard: the queue is on all"
    assert api.count("part", PENDING) == 30
    assert set(on_redis.drain(api, "part", 30)) == set(new)
    assert api.count("part", SUCCEEDED) == 35
    assert list(api.dequeue("solo").jobs.values()) == [b"alone"]
    assert_missing_queue_is_not_found(api)


def test_reads_treat_a_dequeue_only_shard_without_the_queue_as_empty(
    stores: Stores, start_server: Callable[..., ServerProcess], api_for: Callable[[ServerProcess], Api]
) -> None:
    # Shard 3 takes no new jobs, so it is not given the queue: every read meets a shard without it.
    stores.seed("1", "part", ORIGINAL_JOBS)
    server = stores.serve(start_server, dequeue_only="3", BROKER_ENABLED="true")
    api = api_for(server)
    assert [stores.queues(s) for s in SHARDS] == [{"part"}, {"part"}, set()]
    assert created_lines(server) == Counter({"part on shard 2: another shard has it": 1})

    assert api.count("part", PENDING) == 4
    assert api.count("part", PENDING, priority=2) == 1
    [dead] = [j.jobDescriptor for j in api.scan("part", FAILED).scannedJobs]
    assert dead.startswith("part:s1:p3:") and api.lookup(dead, body=True)[dead].body == b"dead"
    dry = api.dequeue("part", limit=10, dryRun=True)
    assert list(dry.jobs.values()) == [b"old-0", b"old-1", b"old-2", b"old-3"]
    with urllib.request.urlopen(f"http://127.0.0.1:{server.admin_port}/api/queues", timeout=5) as response:
        [row] = json.load(response)["queues"]
    assert (row["name"], row["counts"]["pending"], row["counts"]["failed"]) == ("part", [3, 1, 0], [0, 0, 1])

    got = api.dequeue("part", limit=2)  # through the broker: its refill walks every shard
    assert list(got.jobs.values()) == [b"old-0", b"old-1"]
    api.ack("part", ok=list(got.jobs))
    more = api.dequeue("part", limit=10)
    assert list(more.jobs.values()) == [b"old-2", b"old-3"]
    api.ack("part", failed=list(more.jobs))  # attempts left: back to PENDING
    assert api.lookup(*got.jobs, *more.jobs).keys() == {*got.jobs, *more.jobs}

    retry = api.t.PinLaterRetryFailedJobsRequest(queueName="part", priority=3)
    assert api.c.retryFailedJobs(api.ctx, retry) == 1
    delete = api.t.PinLaterDeleteJobsRequest(queueName="part", jobState=PENDING, priority=3)
    assert api.c.deleteJobs(api.ctx, delete) == 1
    assert api.count("part", SUCCEEDED) == 3

    new = on_redis.enqueue_singles(api, "part", 20)
    assert shards_of(new) == {"1", "2"}
    assert api.count("part", PENDING) == 22
    assert_missing_queue_is_not_found(api)
