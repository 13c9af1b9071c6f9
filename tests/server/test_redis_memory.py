"""A Redis backlog never runs Redis out of memory (issue 14, item 7).

Real redis-server processes with a small ``maxmemory`` (set at run time) and ``noeviction``:

* end to end, through ``pinlater serve`` and the Apache-generated client over two shards: a shard
  filled past REDIS_MEMORY_HIGH_WATER_FRACTION takes no new jobs (descriptors name the other
  shard) without Redis ever refusing a write; with both shards full, enqueue is refused with
  ENQUEUE_REJECTED naming the shards, their use and the mark, while dequeue and ack still work;
  once the drained jobs are collected and memory falls below the mark, enqueue works again;
  ``/metrics`` and the dashboard's ``/api/queues`` show used memory against maxmemory per shard;
* Redis's own OOM refusal, on the shared layer over two real stores with no mark at all: the
  write goes to the other shard, and with both full the enqueue is ENQUEUE_REJECTED;
* the settings' keys and bounds.

Waits are ``wait_for`` on a condition, never a sleep.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import redis
from tests.server.test_contract import PENDING, SUCCEEDED, Api
from tests.support.hot import dequeue, enqueue
from tests.support.pinlater_server import ServerProcess
from tests.support.redis_server import RedisServer, write_shard_config
from tests.support.wait import wait_for

from pinlater.backends.base import NewJob
from pinlater.backends.pressure import StoreMemoryFullError
from pinlater.backends.redis import RedisEndpoint, RedisShardConfig, RedisStore
from pinlater.backends.sharded import ShardedBackend
from pinlater.backends.shardmap import Shard, ShardMap
from pinlater.config import Settings
from pinlater.errors import ConfigError, ErrorCode, PinLaterError

ENQUEUE_REJECTED = 430
DESCRIPTOR = re.compile(r"^(\w+):s(\w+):p(\d+):(\d+)$")
BODY = b"m" * 4096
MIB = 1024 * 1024


@pytest.fixture
def redis_servers(tmp_path: Path) -> Iterator[Callable[[str], RedisServer]]:
    with ExitStack() as stack:
        yield lambda name: stack.enter_context(RedisServer(tmp_path / f"redis-{name}"))


def shard_of(descriptor: str) -> str:
    m = DESCRIPTOR.match(descriptor)
    assert m, f"descriptor {descriptor!r} is not queue:s{{shard}}:p{{priority}}:{{id}}"
    return m.group(2)


def memory(server: RedisServer) -> tuple[int, int]:
    """(used_memory, maxmemory) as Redis reports them now."""
    client = server.client()
    try:
        info = client.info("memory")
        return int(info["used_memory"]), int(info["maxmemory"])
    finally:
        client.close()


def oom_refusals(server: RedisServer) -> int:
    """Writes Redis refused for memory since it started (INFO errorstats, Redis >= 6.2)."""
    client = server.client()
    try:
        stat = client.info("errorstats").get("errorstat_OOM", {})
        return int(stat.get("count", 0)) if isinstance(stat, dict) else 0
    finally:
        client.close()


def set_maxmemory(server: RedisServer, limit: int) -> None:
    client = server.client()
    try:
        assert client.config_get("maxmemory-policy")["maxmemory-policy"] == "noeviction"
        client.config_set("maxmemory", limit)
    finally:
        client.close()


def admin_get(server: ServerProcess, path: str) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.admin_port}{path}", timeout=5) as response:
        return str(response.read().decode())


def prometheus_memory(server: ServerProcess) -> dict[tuple[str, str], float]:
    """(family, shard) -> value of the per-shard store memory gauges on /metrics."""
    found = {}
    pattern = re.compile(r'^(pinlater_store_memory_(?:used|max)_bytes)\{shard="(\w+)"\} (\S+)$')
    for line in admin_get(server, "/metrics").splitlines():
        m = pattern.match(line)
        if m:
            found[(m.group(1), m.group(2))] = float(m.group(3))
    return found


def above_mark_on_metrics(server: ServerProcess, shard: str, mark: float) -> bool:
    gauges = prometheus_memory(server)
    used = gauges.get(("pinlater_store_memory_used_bytes", shard), 0.0)
    limit = gauges.get(("pinlater_store_memory_max_bytes", shard), 0.0)
    return limit > 0 and used >= mark * limit


def rejection(api: Api, queue: str, jobs: int) -> str | None:
    """Enqueue ``jobs`` jobs in one call: None if taken, the message if ENQUEUE_REJECTED (any
    other error fails the test)."""
    try:
        api.enqueue(queue, *(api.job(BODY) for _ in range(jobs)))
    except api.t.PinLaterException as exc:
        assert exc.errorCode == ENQUEUE_REJECTED, f"unexpected error {exc.errorCode}: {exc.message}"
        return str(exc.message)
    return None


@pytest.mark.redis
def test_a_full_shard_takes_no_new_jobs_and_a_full_fleet_refuses_enqueue_while_the_backlog_drains(
    tmp_path: Path,
    redis_servers: Callable[[str], RedisServer],
    start_server: Callable[..., ServerProcess],
    open_client: Callable[[ServerProcess], Any],
    ttypes: ModuleType,
) -> None:
    a, b = redis_servers("a"), redis_servers("b")
    config = write_shard_config(tmp_path / "redis.json", {"a": a, "b": b})
    mark = 0.8
    server = start_server(
        "--backend",
        "redis",
        "--backend-config",
        str(config),
        properties={
            "REDIS_MEMORY_HIGH_WATER_FRACTION": mark,
            "REDIS_MEMORY_PROBE_INTERVAL_SECONDS": 0.05,
            # The monitor collects acked jobs at once, so draining frees memory.
            "BACKEND_MONITOR_THREAD_DELAY_SECONDS": 0.2,
            "BACKEND_MONITOR_JOB_SUCCEEDED_GC_TTL_HOURS": 0,
        },
    )
    api = Api(open_client(server), ttypes)
    api.create("backlog")
    for name in "ab":  # both start without maxmemory: the server says the mark cannot apply
        wait_for(lambda n=name: any(f"shard {n} has no memory limit" in line for line in server.lines), 10)

    # A small maxmemory above what each Redis holds now (the server's connections included); b
    # has twice a's room, so a crosses the mark first.
    set_maxmemory(a, memory(a)[0] + 4 * MIB)
    set_maxmemory(b, memory(b)[0] + 8 * MIB)
    wait_for(lambda: prometheus_memory(server).get(("pinlater_store_memory_max_bytes", "a"), 0) > 0, 10)

    # 1. Fill until a is past the mark: jobs land on both shards until the server sees it.
    placed: Counter[str] = Counter()

    def a_is_full() -> bool:
        if not above_mark_on_metrics(server, "a", mark):
            placed.update(shard_of(d) for d in api.enqueue("backlog", *(api.job(BODY) for _ in range(10))))
            return False
        return True

    wait_for(a_is_full, 60, interval=0, what="shard a above the high-water mark")
    assert set(placed) == {"a", "b"}, f"below the mark both shards take jobs: {placed}"
    assert oom_refusals(a) == 0, "Redis never had to refuse a write"
    # At the mark, a reading may dip under it again (client buffers count in used_memory): put
    # a at 90% of its maxmemory, past the mark for good, and wait until the server reads that.
    max_a = int(memory(a)[0] / 0.9)
    set_maxmemory(a, max_a)
    wait_for(lambda: prometheus_memory(server).get(("pinlater_store_memory_max_bytes", "a")) == max_a, 10)
    used_a = memory(a)[0]
    assert mark * max_a <= used_a < max_a, "a is past the mark, short of maxmemory"
    new = [d for _ in range(20) for d in api.enqueue("backlog", api.job(BODY))]
    assert {shard_of(d) for d in new} == {"b"}, "new jobs go to the shard below the mark"
    assert oom_refusals(a) == 0
    overview = json.loads(admin_get(server, "/api/queues"))
    assert overview["memory"]["high_water"] == mark
    assert overview["memory"]["shards"]["a"]["above"] is True
    assert overview["memory"]["shards"]["b"]["above"] is False
    assert overview["memory"]["shards"]["a"]["max_bytes"] == max_a

    # 2. Fill b too: enqueue is refused, naming both shards, their use and the mark. A refusal
    # may come from the server's estimate of the enqueues since its last reading, which can
    # overshoot (the next reading takes b again): fill until a reading of Redis itself puts b
    # past the mark (the server logs that), then pin b at 90% of its maxmemory as a was.
    def b_is_full() -> str | None:
        message = rejection(api, "backlog", 10)
        logged = any("shard b is above the memory high-water mark" in line for line in server.lines)
        return message if logged else None

    wait_for(b_is_full, 60, interval=0, what="shard b above the mark on a reading")
    max_b = int(memory(b)[0] / 0.9)
    set_maxmemory(b, max_b)
    wait_for(lambda: prometheus_memory(server).get(("pinlater_store_memory_max_bytes", "b")) == max_b, 10)
    message = wait_for(lambda: rejection(api, "backlog", 10), 10, what="enqueue refused")
    assert "shard a used" in message and "shard b" in message, message
    assert "MiB" in message and "80%" in message and "high-water mark" in message, message
    assert rejection(api, "backlog", 1) is not None, "a single small job is refused too"
    assert oom_refusals(a) == 0 and oom_refusals(b) == 0, f"the mark held, Redis refused nothing: {message}"
    backlog = api.count("backlog", PENDING)
    assert backlog > 0

    # 3. Dequeue and ack work while every shard is full.
    jobs = api.dequeue("backlog", limit=20).jobs
    assert len(jobs) == 20
    api.ack("backlog", ok=list(jobs))
    # acked: SUCCEEDED, or already deleted by the monitor (its succeeded TTL here is 0)
    assert {info.jobState for info in api.lookup(*jobs).values()} <= {SUCCEEDED}
    assert api.count("backlog", PENDING) == backlog - 20

    # 4. Drain the backlog; the monitor deletes acked jobs; below the mark enqueue works again.
    def drained() -> bool:
        got = api.dequeue("backlog", limit=100).jobs or {}
        if got:
            api.ack("backlog", ok=list(got))
        return not got

    wait_for(drained, 60, interval=0, what="the backlog drained")
    assert api.count("backlog", PENDING) == 0
    again = wait_for(lambda: rejection(api, "backlog", 1) is None, 30, what="enqueue accepted again")
    assert again
    for r, name in ((a, "a"), (b, "b")):  # the monitor collects the rest of the acked jobs

        def below(r: RedisServer = r, name: str = name) -> bool:
            used, limit = memory(r)
            return used < mark * limit and not above_mark_on_metrics(server, name, mark)

        wait_for(below, 30, what=f"shard {name} below the mark, in Redis and on /metrics")
    assert any("below the memory high-water mark again" in line for line in server.lines)
    assert "pinlater_store_memory_high_water_fraction 0.8" in admin_get(server, "/metrics")


# -- Redis's own refusal, on the shared layer ------------------------------------------------------


def open_redis(name: str, server: RedisServer) -> RedisStore:
    return RedisStore(name, RedisShardConfig(RedisEndpoint(server.host, server.port), layout="original"))


def fill_to_oom(store: RedisStore, server: RedisServer, queue: str) -> int:
    """Enqueue straight on the store until Redis refuses; returns the jobs it took. Then pins
    maxmemory a little under what Redis holds, so that it stays full whatever the clients'
    buffers (counted in used_memory) do next."""
    taken = 0
    while True:
        try:
            store.enqueue_jobs(queue, [NewJob(1, BODY, 0, 1)] * 10, int(time.time() * 1000))
        except StoreMemoryFullError as exc:
            assert "maxmemory" in exc.message and exc.code == ErrorCode.UNKNOWN
            break
        taken += 10
    set_maxmemory(server, memory(server)[0] - 256 * 1024)
    return taken


@pytest.mark.redis
def test_redis_refusing_a_write_for_memory_sends_the_jobs_elsewhere_then_rejects(
    redis_servers: Callable[[str], RedisServer],
) -> None:
    x, y = redis_servers("x"), redis_servers("y")
    stores = {"x": open_redis("x", x), "y": open_redis("y", y)}
    for store in stores.values():
        store.create_queue("q", 3)
    # No high-water mark: only Redis's own OOM refusal steers the jobs.
    backend = ShardedBackend(ShardMap(Shard(n, s) for n, s in stores.items()), num_priorities=3)
    jobs = [NewJob(1, BODY, 0, 1)]

    async def scenario() -> None:
        set_maxmemory(x, memory(x)[0] + MIB)
        assert fill_to_oom(stores["x"], x, "q") > 0
        assert stores["x"].memory.latest is None, "nothing read x's memory yet"
        for _ in range(10):  # random shard order: x refuses, y takes it
            assert shard_of((await enqueue(backend, "q", jobs))[0]) == "y"
        use = stores["x"].memory.latest
        assert use is not None and use.max_bytes > 0, "the refusal made the server read x's memory"
        shard_x = backend.shards.get("x")
        assert shard_x is not None and shard_x.healthy, "a full shard stays healthy: it still serves reads"

        # At maxmemory Redis refuses even a claim (what the mark is there to prevent); a dequeue
        # passes the full shard by and takes what the other has.
        with pytest.raises(StoreMemoryFullError):
            stores["x"].dequeue_jobs("q", 1, 1, "tests", int(time.time() * 1000), False)
        got = await dequeue(backend, "q", 50, "tests")
        assert len(got) == 10 and {shard_of(job.descriptor) for job in got} == {"y"}

        set_maxmemory(y, memory(y)[0] + MIB)
        assert fill_to_oom(stores["y"], y, "q") > 0
        with pytest.raises(PinLaterError) as info:
            await enqueue(backend, "q", jobs)
        assert info.value.code == ErrorCode.ENQUEUE_REJECTED
        assert "shard x used" in info.value.message and "shard y used" in info.value.message
        assert "out of memory" in info.value.message
        await backend.aclose()

    try:
        asyncio.run(scenario())
    finally:
        backend.close()


@pytest.mark.redis
def test_with_a_mark_a_shard_read_above_it_is_passed_by_before_redis_refuses(
    redis_servers: Callable[[str], RedisServer],
) -> None:
    x, y = redis_servers("x"), redis_servers("y")
    stores = {"x": open_redis("x", x), "y": open_redis("y", y)}
    for store in stores.values():
        store.create_queue("q", 3)
    shards = ShardMap(Shard(n, s) for n, s in stores.items())
    backend = ShardedBackend(shards, num_priorities=3, memory_high_water=0.5)
    jobs = [NewJob(1, b"j", 0, 1)]

    async def scenario() -> None:
        used = memory(x)[0]
        set_maxmemory(x, used + used // 2)  # about 67% used: above the mark of 0.5
        assert (stores["x"].memory.refresh().fraction or 0) >= 0.5
        assert {shard_of((await enqueue(backend, "q", jobs))[0]) for _ in range(10)} == {"y"}
        assert oom_refusals(x) == 0, "x was passed by, not tried"
        set_maxmemory(y, memory(y)[0] + 1)
        stores["y"].memory.refresh()
        with pytest.raises(PinLaterError) as info:
            await enqueue(backend, "q", jobs)
        assert info.value.code == ErrorCode.ENQUEUE_REJECTED
        assert "high-water mark 50%" in info.value.message and "shard x used" in info.value.message
        set_maxmemory(x, 0)  # no limit: the mark does not apply
        stores["x"].memory.refresh()
        assert shard_of((await enqueue(backend, "q", jobs))[0]) == "x"
        await backend.aclose()

    try:
        asyncio.run(scenario())
    finally:
        backend.close()


# -- settings ----------------------------------------------------------------------------------------


def test_memory_settings_from_properties_and_their_bounds() -> None:
    assert Settings().redis_memory_high_water_fraction == 0.8
    s = Settings.from_properties(
        "REDIS_MEMORY_HIGH_WATER_FRACTION=0.9\nREDIS_MEMORY_PROBE_INTERVAL_SECONDS=0.25\n", "p.properties"
    )
    assert (s.redis_memory_high_water_fraction, s.redis_memory_probe_interval_seconds) == (0.9, 0.25)
    for bad in ("REDIS_MEMORY_HIGH_WATER_FRACTION=0", "REDIS_MEMORY_HIGH_WATER_FRACTION=1.5"):
        with pytest.raises(ConfigError, match="REDIS_MEMORY_HIGH_WATER_FRACTION"):
            Settings.from_properties(bad, "p.properties")
    with pytest.raises(ConfigError, match="REDIS_MEMORY_PROBE_INTERVAL_SECONDS"):
        Settings.from_properties("REDIS_MEMORY_PROBE_INTERVAL_SECONDS=0", "p.properties")


@pytest.mark.redis
def test_redis_itself_reports_oom_as_redis_py_names_it(redis_servers: Callable[[str], RedisServer]) -> None:
    """Guards the mapping in script_calls: redis-py's class for Redis's OOM answer."""
    server = redis_servers("raw")
    client = server.client()
    try:
        client.config_set("maxmemory", 1)
        with pytest.raises(redis.exceptions.OutOfMemoryError, match="maxmemory"):
            client.set("k", "v")
    finally:
        client.config_set("maxmemory", 0)
        client.close()
