"""Dedup keys through servers on Redis (both layouts): several servers racing on the same keys
make one job per key, and a key whose shard is down is refused rather than placed elsewhere."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from tests.server.test_contract import PENDING, Api
from tests.server.test_redis_server import (
    LAYOUTS,
    SHARD_CONNECTION_FAILED,
    durable,
    redis_servers,  # noqa: F401 (a fixture)
    serve,
    shard_of,
    write_config,
)
from tests.support.pinlater_server import ServerProcess
from tests.support.redis_server import RedisServer
from tests.support.wait import wait_for

pytestmark = pytest.mark.redis

Q = "dedup_redis"


def enqueue(api: Api, *jobs: Any) -> tuple[list[str], list[bool] | None]:
    response = api.c.enqueueJobs(api.ctx, api.t.PinLaterEnqueueRequest(queueName=Q, jobs=list(jobs)))
    flags = response.deduplicated
    return list(response.jobDescriptors), None if flags is None else list(flags)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_servers_racing_on_the_same_keys_make_one_job_per_key(
    tmp_path: Path,
    redis_servers: Callable[..., RedisServer],  # noqa: F811
    start_server: Callable[..., ServerProcess],
    open_client: Callable[[ServerProcess], Any],
    ttypes: Any,
    layout: str,
) -> None:
    a, b = redis_servers("a"), redis_servers("b")
    config = tmp_path / "redis.json"
    write_config(config, {"a": (a, False), "b": (b, False)}, layout)
    servers = [serve(start_server, config) for _ in range(3)]
    apis = [Api(open_client(s), ttypes) for s in servers for _ in range(2)]
    apis[0].create(Q)
    keys = [f"race:{i}" for i in range(40)]

    def one(api: Api) -> list[str]:
        return [d for key in keys for d in enqueue(api, api.job(key.encode(), dedupKey=key))[0]]

    with ThreadPoolExecutor(len(apis)) as pool:
        answers = list(pool.map(one, apis))
    assert all(a == answers[0] for a in answers), "every server answered each key with the same job"
    assert {shard_of(d) for d in answers[0]} == {"a", "b"}
    assert apis[0].count(Q, PENDING) == len(keys)
    infos = apis[0].lookup(*answers[0], body=True)
    assert {info.dedupKey for info in infos.values()} == set(keys)
    assert all(info.body == info.dedupKey.encode() for info in infos.values())


def test_a_key_whose_shard_is_down_is_refused_and_found_again_when_it_returns(
    tmp_path: Path,
    redis_servers: Callable[..., RedisServer],  # noqa: F811
    start_server: Callable[..., ServerProcess],
    open_client: Callable[[ServerProcess], Any],
    ttypes: Any,
) -> None:
    a, b = durable(redis_servers, "a"), durable(redis_servers, "b")
    config = tmp_path / "redis.json"
    write_config(config, {"a": (a, False), "b": (b, False)}, "compact")
    server = serve(start_server, config, BACKEND_SOCKET_TIMEOUT_SECONDS=2, BACKEND_MONITOR_THREAD_DELAY_SECONDS=3600)
    api = Api(open_client(server), ttypes)
    api.create(Q)
    placed, _ = enqueue(api, *(api.job(b"x", dedupKey=f"k{i}") for i in range(20)))
    on_a = [f"k{i}" for i, d in enumerate(placed) if shard_of(d) == "a"]
    on_b = [f"k{i}" for i, d in enumerate(placed) if shard_of(d) == "b"]
    assert on_a and on_b

    a.kill()
    code = api.error_code(enqueue, api, api.job(b"y", dedupKey=on_a[0]))
    assert code == SHARD_CONNECTION_FAILED, "a key of a down shard is not placed on another"
    (again,), flags = enqueue(api, api.job(b"y", dedupKey=on_b[0]))
    assert flags == [True] and again == placed[int(on_b[0][1:])]

    a.start()
    found = None

    def retry() -> bool:
        nonlocal found
        try:
            found = enqueue(api, api.job(b"z", dedupKey=on_a[0]))
        except api.t.PinLaterException:
            return False
        return True

    wait_for(retry, 20, interval=0.2, what="shard a to take enqueues again")
    assert found == ([placed[int(on_a[0][1:])]], [True]), "the holder survived the kill (appendfsync always)"
    assert api.count(Q, PENDING) == 20
