"""Ordered groups through servers on Redis: several servers (broker off and on) handing out one
group's jobs never run two at once and run them in enqueue order; the in-progress cap holds across
servers; a shard in the original layout refuses groups with the feature named."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from tests.server.test_contract import PENDING, Api
from tests.server.test_redis_server import (
    redis_servers,  # noqa: F401 (a fixture)
    serve,
    write_config,
)
from tests.support.pinlater_server import ServerProcess
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.redis

Q = "groups_redis"


@pytest.mark.parametrize("broker", ["false", "true"])
def test_servers_hand_out_a_group_one_job_at_a_time_in_order(
    tmp_path: Path,
    redis_servers: Callable[..., RedisServer],  # noqa: F811
    start_server: Callable[..., ServerProcess],
    open_client: Callable[[ServerProcess], Any],
    ttypes: Any,
    broker: str,
) -> None:
    config = tmp_path / "redis.json"
    write_config(config, {"a": (redis_servers("a"), False)}, "compact")
    servers = [serve(start_server, config, BROKER_ENABLED=broker) for _ in range(2)]
    apis = [Api(open_client(s), ttypes) for s in servers for _ in range(2)]
    apis[0].create(Q)
    for group in ("x", "y"):
        apis[0].enqueue(Q, *(apis[0].job(b"%s-%02d" % (group.encode(), n), groupKey=group) for n in range(15)))
    running: set[str] = set()
    order: list[bytes] = []
    lock = threading.Lock()

    def work(api: Api) -> None:
        while True:
            with lock:
                if len(order) == 30:
                    return
            got = dict(api.dequeue(Q, limit=5).jobs)
            with lock:
                for body in got.values():
                    group = body[:1].decode()
                    assert group not in running, f"two jobs of group {group} ran at once"
                    running.add(group)
                    order.append(body)
            for descriptor, body in got.items():
                with lock:
                    running.discard(body[:1].decode())
                api.ack(Q, ok=[descriptor])

    with ThreadPoolExecutor(len(apis)) as pool:
        list(pool.map(work, apis))
    for group in (b"x", b"y"):
        assert [b for b in order if b.startswith(group)] == [b"%s-%02d" % (group, n) for n in range(15)]


def test_the_in_progress_cap_holds_across_servers(
    tmp_path: Path,
    redis_servers: Callable[..., RedisServer],  # noqa: F811
    start_server: Callable[..., ServerProcess],
    open_client: Callable[[ServerProcess], Any],
    ttypes: Any,
) -> None:
    config = tmp_path / "redis.json"
    write_config(config, {"a": (redis_servers("a"), False)}, "original")
    rules = tmp_path / "queues.json"
    rules.write_text(json.dumps({"queues": [{"name": Q, "queueConfig": {"maxInProgress": 5}}]}))
    servers = [serve(start_server, config, QUEUE_CONFIG_FILE_PATH=rules, BROKER_ENABLED="false") for _ in range(3)]
    apis = [Api(open_client(s), ttypes) for s in servers]
    apis[0].create(Q)
    apis[0].enqueue(Q, *(apis[0].job(b"%d" % i) for i in range(40)))

    with ThreadPoolExecutor(len(apis)) as pool:
        got = [len(r.jobs) for r in pool.map(lambda api: api.dequeue(Q, limit=4), apis)]
    assert sum(got) == 5, got
    assert apis[0].count(Q, PENDING) == 35


def test_a_shard_in_the_original_layout_refuses_groups(
    tmp_path: Path,
    redis_servers: Callable[..., RedisServer],  # noqa: F811
    start_server: Callable[..., ServerProcess],
    open_client: Callable[[ServerProcess], Any],
    ttypes: Any,
) -> None:
    config = tmp_path / "redis.json"
    write_config(config, {"a": (redis_servers("a"), False)}, "original")
    api = Api(open_client(serve(start_server, config)), ttypes)
    api.create(Q)
    with pytest.raises(api.t.PinLaterException) as info:
        api.enqueue(Q, api.job(b"plain"), api.job(b"grouped", groupKey="g"))
    assert info.value.errorCode == api.t.ErrorCode.ENQUEUE_REJECTED
    assert info.value.message.startswith("jobs[1]: groupKey (ordered groups) ")
    assert "compact" in info.value.message
    assert api.count(Q, PENDING) == 0, "the request wrote nothing"
