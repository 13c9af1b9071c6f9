"""Three ``pinlater serve`` processes on one Redis, without the broker: the ServerSet splits
each queue's rate between them, and consumers spread over all three get every job once."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from tests.server.test_contract import SUCCEEDED, Api
from tests.support.pinlater_server import ServerProcess
from tests.support.redis_server import RedisServer
from tests.support.wait import wait_for

Start = Callable[..., ServerProcess]
Open = Callable[[ServerProcess], Any]


@pytest.mark.redis
def test_three_servers_split_rates_and_deliver_each_job_once(
    start_server: Start, open_client: Open, ttypes: ModuleType, tmp_path: Path
) -> None:
    with RedisServer(tmp_path / "redis") as redis:
        config = tmp_path / "redis.json"
        shard = {"name": "1", "shardConfig": {"master": {"host": redis.host, "port": redis.port}}}
        config.write_text(json.dumps({"shards": [shard]}))
        queues = tmp_path / "queues.json"
        queues.write_text(json.dumps({"queues": [{"name": "limited", "queueConfig": {"maxJobsPerSecond": 30}}]}))
        server_set = tmp_path / "serverset"
        props = {"QUEUE_CONFIG_FILE_PATH": queues, "SERVER_SET_ENABLED": "true", "SERVER_SET_PATH": server_set}
        server_set.write_text("placeholder:1\n")
        servers = [
            start_server("--backend", "redis", "--backend-config", str(config), properties=props) for _ in range(3)
        ]
        server_set.write_text("".join(f"127.0.0.1:{s.port}\n" for s in servers))
        for s in servers:
            wait_for(lambda s=s: s.output().count("server set") >= 2, 10, what="every server to reload the set")

        apis = [Api(open_client(s), ttypes, source=f"worker-{k}") for k, s in enumerate(servers)]
        apis[0].create("limited")
        apis[0].create("shared")
        # 30 jobs/s over 3 servers is 10/s each: one burst of 10 per server, then refused.
        for api in apis:
            assert api.dequeue("limited", limit=10).jobs == {}
            assert api.error_code(api.dequeue, "limited", limit=10) == api.t.ErrorCode.DEQUEUE_RATE_LIMITED

        enqueued: list[str] = []
        for batch in range(5):
            enqueued += apis[batch % 3].enqueue("shared", *[apis[0].job(b"%d-%d" % (batch, i)) for i in range(100)])
        delivered: Counter[str] = Counter()
        lock = threading.Lock()
        done = threading.Event()
        errors: list[BaseException] = []

        def consume(k: int, server: ServerProcess) -> None:
            api = Api(open_client(server), ttypes, source=f"consumer-{k}")
            try:
                while not done.is_set():
                    jobs = list(api.dequeue("shared", limit=9, waitMillis=200).jobs)
                    with lock:
                        delivered.update(jobs)
                    if jobs:
                        api.ack("shared", ok=jobs)
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=consume, args=(k, s)) for k, s in enumerate(servers) for _ in range(2)]
        for t in threads:
            t.start()
        try:
            wait_for(lambda: sum(delivered.values()) >= len(enqueued), 60, what="every job delivered")
        finally:
            done.set()
            for t in threads:
                t.join(30)
        assert not errors, errors
        assert set(delivered) == set(enqueued) and max(delivered.values()) == 1
        assert apis[1].count("shared", SUCCEEDED) == len(enqueued)
