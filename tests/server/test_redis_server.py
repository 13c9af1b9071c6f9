"""The server on Redis, end to end: a real ``pinlater serve --backend redis`` over real redis-server
processes, driven by the Apache-generated client.

Store-level behaviour is in ``tests/backends/test_redis.py``; here is what only the whole server
shows: shard choice and failover, dequeue-only shards, a shard killed under load, every shard
down (and /readyz), the backend config reloaded in place, start-up durability warnings, and an
evicted job hash met by a dequeue. Each test starts its own redis-server processes (stopped by
PID) and its own server. Waits are ``wait_for`` on a condition, never a guessed sleep.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
import urllib.error
import urllib.request
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from tests.server.test_contract import (
    FAILED,
    IN_PROGRESS,
    PENDING,
    SUCCEEDED,
    Api,
    attempts_below_one_are_one,
    far_jobs_read_back,
    zero_run_after_is_now,
)
from tests.support.pinlater_server import ServerProcess
from tests.support.redis_server import RedisServer
from tests.support.thrift_client import connect
from tests.support.wait import wait_for

pytestmark = pytest.mark.redis

NO_HEALTHY_SHARDS, SHARD_CONNECTION_FAILED = 501, 502
DESCRIPTOR = re.compile(r"^(\w+):s(\w+):p(\d+):(\d+)$")

Shards = dict[str, tuple[RedisServer, bool]]
"""Shard name -> (its Redis, dequeue-only)."""


# -- helpers ----------------------------------------------------------------------------------


@pytest.fixture
def redis_servers(tmp_path: Path) -> Iterator[Callable[..., RedisServer]]:
    """Start redis-server processes (``name``, RedisServer keyword arguments); all stopped at teardown."""
    with ExitStack() as stack:

        def start(name: str, **kw: Any) -> RedisServer:
            return stack.enter_context(RedisServer(tmp_path / f"redis-{name}", **kw))

        yield start


def durable(start: Callable[..., RedisServer], name: str) -> RedisServer:
    """A Redis that loses nothing acknowledged when SIGKILLed: AOF, fsync on every write."""
    return start(name, appendonly=True, appendfsync="always")


#: The Redis layouts every fault test here runs on.
LAYOUTS = ["original", "compact"]


def key_sizes(redis: RedisServer) -> dict[bytes, int]:
    """Each key of ``redis`` with its size (members, fields, items or bytes), whatever the layout."""
    raw = redis.client()
    try:
        lengths = {b"zset": raw.zcard, b"hash": raw.hlen, b"list": raw.llen, b"set": raw.scard, b"string": raw.strlen}
        return {key: int(lengths[raw.type(key)](key)) for key in raw.scan_iter()}
    finally:
        raw.close()


def write_config(path: Path, shards: Shards, layout: str | None = "original") -> None:
    """Write the original's JSON shard config, atomically (a new inode, so the watcher sees it),
    with ``"layout": layout`` for every shard (None: without the key)."""
    config = {
        "shards": [
            {
                "name": name,
                "shardConfig": {"master": {"host": redis.host, "port": redis.port}, "dequeueOnly": dequeue_only},
                **({} if layout is None else {"layout": layout}),
            }
            for name, (redis, dequeue_only) in shards.items()
        ]
    }
    write_text(path, json.dumps(config))


def write_text(path: Path, text: str) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def serve(start_server: Callable[..., ServerProcess], config: Path, **properties: Any) -> ServerProcess:
    return start_server("--backend", "redis", "--backend-config", str(config), properties=properties or None)


def shard_of(descriptor: str) -> str:
    m = DESCRIPTOR.match(descriptor)
    assert m, f"descriptor {descriptor!r} is not queue:s{{shard}}:p{{priority}}:{{id}}"
    return m.group(2)


def readyz(server: ServerProcess) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.admin_port}/readyz", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.read().decode()


def names(shard: str, text: str) -> bool:
    """Whether a /readyz answer names ``shard`` (as a word: names here are one letter)."""
    return re.search(rf"\b{shard}\b", text) is not None


def healthy_shards(server: ServerProcess) -> int:
    """The server's own view (the health loop's), unlike /readyz, which pings shards itself."""
    return int(stats(server)["shards_healthy"])


def stats(server: ServerProcess) -> dict[str, str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.admin_port}/stats.txt", timeout=5) as response:
        text = response.read().decode()
    return dict(line.strip().split(": ", 1) for line in text.splitlines() if ": " in line)


def log_has(server: ServerProcess, *needles: str) -> bool:
    return any(all(n in line for n in needles) for line in list(server.lines))


@pytest.fixture
def api_for(open_client: Callable[[ServerProcess], Any], ttypes: ModuleType) -> Callable[[ServerProcess], Api]:
    return lambda server: Api(open_client(server), ttypes)


def enqueue_singles(api: Api, queue: str, n: int) -> list[str]:
    """``n`` enqueue calls of one job each (each call picks its shard afresh)."""
    return [d for i in range(n) for d in api.enqueue(queue, api.job(b"single-%d" % i))]


def drain(api: Api, queue: str, expected: int, timeout: float = 15.0) -> dict[str, bytes]:
    """Dequeue and ack until ``expected`` distinct jobs came back; returns descriptor -> body."""
    got: dict[str, bytes] = {}

    def step() -> bool:
        jobs = api.dequeue(queue, limit=50).jobs or {}
        if jobs:
            api.ack(queue, ok=list(jobs))
        got.update(jobs)
        return len(got) >= expected

    wait_for(step, timeout, interval=0.05, what=f"{expected} jobs drained from {queue}")
    return got


# -- the lifecycle ----------------------------------------------------------------------------


def test_lifecycle_through_the_server_on_redis_keeps_the_original_layout(
    tmp_path: Path,
    redis_servers: Callable[..., RedisServer],
    start_server: Callable[..., ServerProcess],
    api_for: Callable[[ServerProcess], Api],
) -> None:
    redis = redis_servers("1")
    config = tmp_path / "redis.json"
    write_config(config, {"1": (redis, False)})
    api = api_for(serve(start_server, config))

    api.create("life")
    assert "life" in api.c.getQueueNames(api.ctx)
    first = api.enqueue("life", api.job(b"a", priority=1, numAttemptsAllowed=3), api.job(b"b", priority=2))
    later = api.enqueue("life", api.job(b"c", priority=1))
    assert [DESCRIPTOR.match(d) is not None for d in first + later] == [True] * 3
    assert first[0] == "life:s1:p1:1" and first[1] == "life:s1:p2:2" and later[0] == "life:s1:p1:3"

    got = api.dequeue("life", limit=2)
    assert list(got.jobs) == [first[0], later[0]], "priority 1 first, oldest first"
    assert got.jobs[first[0]] == b"a"
    assert (got.jobMetadata[first[0]].attemptsAllowed, got.jobMetadata[first[0]].attemptsRemaining) == (3, 3)
    info = api.lookup(first[0])[first[0]]
    assert info.jobState == IN_PROGRESS and "tests:localhost" in info.claimDescriptor

    api.c.ackDequeuedJobs(
        api.ctx,
        api.t.PinLaterJobAckRequest(
            queueName="life",
            jobsSucceeded=[api.t.PinLaterJobAckInfo(jobDescriptor=first[0], appendCustomStatus="done")],
            jobsFailed=[api.t.PinLaterJobAckInfo(jobDescriptor=later[0], retryDelayMillis=3_600_000)],
        ),
    )
    found = api.lookup(first[0], later[0], "life:s1:p1:999", body=True)
    assert set(found) == {first[0], later[0]}, "only jobs found are returned"
    assert found[first[0]].jobState == SUCCEEDED and found[first[0]].customStatus == "done"
    assert found[first[0]].body == b"a"
    assert found[later[0]].jobState == PENDING and found[later[0]].attemptsRemaining == 1
    assert found[later[0]].runAfterTimestampMillis > found[later[0]].updatedAtTimestampMillis + 3_000_000

    assert api.count("life", SUCCEEDED) == 1
    assert api.count("life", PENDING) == 1, "the p2 job is ready; the retried one waits an hour"
    assert api.count("life", PENDING, countFutureJobs=True) == 1
    assert api.count("life", PENDING, priority=1, countFutureJobs=True) == 1
    assert [j.jobDescriptor for j in api.scan("life", SUCCEEDED).scannedJobs] == [first[0]]
    assert [j.jobDescriptor for j in api.scan("life", PENDING, scanFutureJobs=True).scannedJobs] == [later[0]]

    raw = redis.client()
    try:
        assert raw.zrange("pln_1", 0, -1) == [b"life"]
        assert raw.zrange("plq_1_life.p1_s2", 0, -1) == [b"1"]
        assert raw.zrange("plq_1_life.p1_s0", 0, -1) == [b"3"]
        assert raw.zrange("plq_1_life.p2_s0", 0, -1) == [b"2"]
        assert raw.hget("plh_1_life.1", "bd") == b"a" and raw.hget("plh_1_life.1", "cs") == b"done"
        assert raw.get("plj_1_life") == b"3"
    finally:
        raw.close()


# -- shard choice -----------------------------------------------------------------------------


@pytest.mark.parametrize("layout", LAYOUTS)
def test_new_jobs_go_to_writable_shards_and_a_dequeue_only_shard_is_drained(
    tmp_path: Path,
    redis_servers: Callable[..., RedisServer],
    start_server: Callable[..., ServerProcess],
    api_for: Callable[[ServerProcess], Api],
    layout: str,
) -> None:
    a, b, c = (redis_servers(name) for name in "abc")
    config = tmp_path / "redis.json"
    # Jobs already on c, put there while c took new jobs.
    write_config(config, {"c": (c, False)}, layout)
    old_server = serve(start_server, config)
    old_api = api_for(old_server)
    old_api.create("mix")
    old = old_api.enqueue("mix", *(old_api.job(b"old-%d" % i) for i in range(20)))
    assert {shard_of(d) for d in old} == {"c"}
    old_server.stop()

    write_config(config, {"a": (a, False), "b": (b, False), "c": (c, True)}, layout)
    api = api_for(serve(start_server, config))
    api.create("mix")  # idempotent; registers the queue on the new shards
    on_c = key_sizes(c)
    new = enqueue_singles(api, "mix", 40)
    placed = Counter(shard_of(d) for d in new)
    assert set(placed) == {"a", "b"}, f"new jobs land on both writable shards, never on c: {placed}"
    assert key_sizes(c) == on_c, "nothing new on the dequeue-only shard"

    drained = drain(api, "mix", 60)
    assert set(drained) == set(old) | set(new)
    assert all(drained[d] == b"old-%d" % i for i, d in enumerate(old)), "the dequeue-only shard is drained"
    assert api.count("mix", SUCCEEDED) == 60 and api.count("mix", PENDING) == 0


# -- faults -----------------------------------------------------------------------------------


class Producer(threading.Thread):
    """Enqueues batches on its own connection until stopped; records every descriptor returned."""

    def __init__(self, port: int, t: ModuleType, stop: threading.Event, name: str) -> None:
        super().__init__(name=name, daemon=True)
        self.port, self.t, self.halt = port, t, stop
        self.enqueued: list[tuple[float, str]] = []  # (when the call was sent, descriptor)
        self.errors: list[str] = []

    def run(self) -> None:
        client, transport = connect("127.0.0.1", self.port)
        api = Api(client, self.t, source=f"tests:{self.name}")
        try:
            n = 0
            while not self.halt.is_set():
                jobs = [api.job(b"%s-%d" % (self.name.encode(), n + i), numAttemptsAllowed=10) for i in range(5)]
                n += 5
                sent = time.monotonic()
                try:
                    self.enqueued += [(sent, d) for d in api.enqueue("load", *jobs)]
                except api.t.PinLaterException as exc:
                    self.errors.append(f"{exc.errorCode}: {exc.message}")
                self.halt.wait(0.02)  # pace the load; the machine is shared
        finally:
            transport.close()


class Consumer(threading.Thread):
    """Dequeues and acks on its own connection, one ack call per shard, until stopped.

    Records every delivery (descriptor -> attempts remaining at each delivery) and every job
    whose ack succeeded. An ack that fails (its shard is down) is dropped: the job stays claimed
    and the monitor gives it back after the claim timeout.
    """

    def __init__(self, port: int, t: ModuleType, stop: threading.Event, name: str) -> None:
        super().__init__(name=name, daemon=True)
        self.port, self.t, self.halt = port, t, stop
        self.deliveries: dict[str, list[int]] = defaultdict(list)
        self.acked: set[str] = set()
        self.ack_errors: list[str] = []
        self.dequeue_errors: list[str] = []

    def run(self) -> None:
        client, transport = connect("127.0.0.1", self.port)
        api = Api(client, self.t, source=f"tests:{self.name}")
        try:
            while not self.halt.is_set():
                try:
                    got = api.dequeue("load", limit=20)
                except api.t.PinLaterException as exc:
                    self.dequeue_errors.append(f"{exc.errorCode}: {exc.message}")
                    self.halt.wait(0.05)
                    continue
                by_shard: dict[str, list[str]] = defaultdict(list)
                for d in got.jobs or {}:
                    self.deliveries[d].append(got.jobMetadata[d].attemptsRemaining)
                    by_shard[shard_of(d)].append(d)
                for descriptors in by_shard.values():
                    try:
                        api.ack("load", ok=descriptors)
                    except api.t.PinLaterException as exc:
                        self.ack_errors.append(f"{exc.errorCode}: {exc.message}")
                    else:
                        self.acked.update(descriptors)
                if not got.jobs:
                    self.halt.wait(0.02)
        finally:
            transport.close()


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_shard_killed_and_restarted_under_load_loses_no_job(
    tmp_path: Path,
    redis_servers: Callable[..., RedisServer],
    start_server: Callable[..., ServerProcess],
    api_for: Callable[[ServerProcess], Api],
    ttypes: ModuleType,
    layout: str,
) -> None:
    a, b = durable(redis_servers, "a"), durable(redis_servers, "b")
    config = tmp_path / "redis.json"
    write_config(config, {"a": (a, False), "b": (b, False)}, layout)
    server = serve(
        start_server,
        config,
        BACKEND_MONITOR_JOB_CLAIMED_TIMEOUT_SECONDS=3,
        BACKEND_MONITOR_THREAD_DELAY_SECONDS=0.5,
        BACKEND_SOCKET_TIMEOUT_SECONDS=2,
    )
    api = api_for(server)
    api.create("load")

    producers_stop, consumers_stop = threading.Event(), threading.Event()
    producers = [Producer(server.port, ttypes, producers_stop, f"p{i}") for i in range(2)]
    consumers = [Consumer(server.port, ttypes, consumers_stop, f"c{i}") for i in range(2)]
    deliveries: dict[str, list[int]] = defaultdict(list)  # this thread's own, merged with the consumers' below
    acked_here: set[str] = set()

    def enqueued(since: float = 0.0) -> list[str]:
        return [d for p in producers for sent, d in list(p.enqueued) if sent > since]

    def acked() -> set[str]:
        return acked_here.union(*(set(c.acked) for c in consumers))

    def acked_on(shard: str) -> int:
        return sum(1 for d in acked() if shard_of(d) == shard)

    # A worker that holds claimed jobs of shard a across the crash: its acks for them fail, and
    # the jobs must come back (after the claim timeout) rather than be lost.
    held: dict[str, bytes] = {}

    def hold_a_job_of_a() -> bool:
        api.enqueue("load", api.job(b"held", numAttemptsAllowed=10))
        got = api.dequeue("load", limit=20)
        for d in got.jobs:
            deliveries[d].append(got.jobMetadata[d].attemptsRemaining)
        held.update(got.jobs)
        return any(shard_of(d) == "a" for d in held)

    wait_for(hold_a_job_of_a, 10, what="a claimed job on shard a")
    for thread in producers + consumers:
        thread.start()
    try:
        wait_for(lambda: len(acked()) >= 100, 30, what="load to get going")
        assert {shard_of(d) for d in enqueued()} == {"a", "b"}

        a.kill()
        killed_at, acked_on_b = time.monotonic(), acked_on("b")
        wait_for(lambda: readyz(server)[0] == 503, 10, what="/readyz to report shard a")
        status, text = readyz(server)
        assert status == 503 and names("a", text) and not names("b", text), text
        held_on = defaultdict(list)
        for d in held:
            held_on[shard_of(d)].append(d)
        assert api.error_code(api.ack, "load", ok=held_on["a"]) == SHARD_CONNECTION_FAILED
        if held_on["b"]:
            api.ack("load", ok=held_on["b"])
            acked_here.update(held_on["b"])
        wait_for(lambda: len(enqueued(killed_at)) >= 200, 30, what="enqueues to carry on with a down")
        wait_for(lambda: acked_on("b") >= acked_on_b + 200, 30, what="dequeues from b to carry on with a down")
        assert {shard_of(d) for d in enqueued(killed_at)} == {"b"}, "with a down, every new job goes to b"

        a.start()  # same port, same directory: the AOF is replayed
        wait_for(lambda: healthy_shards(server) == 2, 15, what="the health loop to bring shard a back")
        assert readyz(server)[0] == 200
        restarted_at = time.monotonic()
        wait_for(lambda: "a" in {shard_of(d) for d in enqueued(restarted_at)}, 30, what="new jobs on a again")
        producers_stop.set()
        for thread in producers:
            thread.join(15)
        all_enqueued = set(enqueued())
        wait_for(
            lambda: all_enqueued | set(held) <= acked(),
            60,
            interval=0.2,
            what=f"every one of {len(all_enqueued)} enqueued jobs acked",
        )
    finally:
        producers_stop.set()
        consumers_stop.set()
        for thread in producers + consumers:
            thread.join(15)

    # An enqueue in flight on a when it died may have been stored there: it fails rather than
    # being sent to b too (at most one per producer); every later one moved to b.
    for producer in producers:
        assert len(producer.errors) <= 1, producer.errors
        assert all(e.startswith("502: shard a: ") and "not sent to another shard" in e for e in producer.errors)
    for consumer in consumers:
        for d, remaining in consumer.deliveries.items():
            deliveries[d] += remaining
    again = {d: r for d, r in deliveries.items() if len(r) > 1}
    assert all(len(set(r)) == len(r) for r in again.values()), (
        f"a job came back only after a claim timeout (one attempt less each time): {again}"
    )
    assert all(shard_of(d) == "a" for d in again), f"only jobs of the killed shard were redelivered: {again}"
    assert all(deliveries[d][:2] == [10, 9] for d in held_on["a"]), "held jobs came back after the claim timeout"
    failed = api.count("load", FAILED)
    assert failed == 0


def test_a_dequeue_every_shard_failed_says_what_the_last_one_said(
    tmp_path: Path,
    redis_servers: Callable[..., RedisServer],
    start_server: Callable[..., ServerProcess],
    api_for: Callable[[ServerProcess], Api],
) -> None:
    a = durable(redis_servers, "a")
    config = tmp_path / "redis.json"
    write_config(config, {"a": (a, False)}, "compact")
    server = serve(start_server, config, BACKEND_SOCKET_TIMEOUT_SECONDS=2, BACKEND_MONITOR_THREAD_DELAY_SECONDS=3600)
    api = api_for(server)
    api.create("down")
    a.kill()
    with pytest.raises(api.t.PinLaterException) as info:
        api.dequeue("down")
    assert info.value.errorCode == SHARD_CONNECTION_FAILED
    assert info.value.message.startswith("every shard failed during dequeue (the last: shard a: "), info.value.message


@pytest.mark.parametrize("layout", LAYOUTS)
def test_all_shards_down_fails_enqueue_and_readyz_until_they_come_back(
    tmp_path: Path,
    redis_servers: Callable[..., RedisServer],
    start_server: Callable[..., ServerProcess],
    api_for: Callable[[ServerProcess], Api],
    layout: str,
) -> None:
    a, b = durable(redis_servers, "a"), durable(redis_servers, "b")
    config = tmp_path / "redis.json"
    write_config(config, {"a": (a, False), "b": (b, False)}, layout)
    # The monitor runs once at start and then not again during the test, so only the calls
    # below meet the dead shards (a monitor pass could otherwise mark them unhealthy first).
    server = serve(start_server, config, BACKEND_SOCKET_TIMEOUT_SECONDS=2, BACKEND_MONITOR_THREAD_DELAY_SECONDS=3600)
    api = api_for(server)
    api.create("down")
    before = api.enqueue("down", api.job(b"before"))
    assert readyz(server)[0] == 200

    a.kill()
    b.kill()
    # The first call finds both shards dead (each try is a connection failure, so it reports
    # SHARD_CONNECTION_FAILED); by then both are marked unhealthy, and later calls are refused
    # up front with NO_HEALTHY_SHARDS until the health loop sees a shard answer again.
    first = api.error_code(api.enqueue, "down", api.job(b"lost"))
    assert first in (NO_HEALTHY_SHARDS, SHARD_CONNECTION_FAILED)
    assert first == SHARD_CONNECTION_FAILED
    assert api.error_code(api.enqueue, "down", api.job(b"lost")) == NO_HEALTHY_SHARDS
    assert api.error_code(api.dequeue, "down") == NO_HEALTHY_SHARDS
    status, text = readyz(server)
    assert status == 503 and names("a", text) and names("b", text), text
    assert healthy_shards(server) == 0

    b.start()
    wait_for(lambda: healthy_shards(server) == 1, 15, what="the health loop to bring shard b back")
    assert {shard_of(d) for d in enqueue_singles(api, "down", 5)} == {"b"}
    status, text = readyz(server)
    assert status == 503 and names("a", text) and not names("b", text), text
    a.start()
    wait_for(lambda: healthy_shards(server) == 2, 15, what="the health loop to bring shard a back")
    assert readyz(server)[0] == 200
    drained = drain(api, "down", 6)
    assert before[0] in drained and drained[before[0]] == b"before", "the job enqueued before the crash survived"


# -- config reload ----------------------------------------------------------------------------


def test_backend_config_reload_adds_marks_and_removes_shards_and_keeps_the_last_good_one(
    tmp_path: Path,
    redis_servers: Callable[..., RedisServer],
    start_server: Callable[..., ServerProcess],
    api_for: Callable[[ServerProcess], Api],
) -> None:
    a, b, c = (redis_servers(name) for name in "abc")
    config = tmp_path / "redis.json"
    write_config(config, {"a": (a, False), "b": (b, False)})
    server = serve(start_server, config)
    api = api_for(server)
    api.create("hot")
    api.create("cold")

    # Add c: the queues are created there and new jobs start landing on it.
    write_config(config, {"a": (a, False), "b": (b, False), "c": (c, False)})
    wait_for(lambda: log_has(server, "backend config reloaded", "added c"), 10, what="reload adding c")
    raw_c = c.client()
    try:
        wait_for(lambda: set(raw_c.zrange("pln_c", 0, -1)) == {b"hot", b"cold"}, 10, what="queues created on c")
    finally:
        raw_c.close()
    wait_for(
        lambda: "c" in {shard_of(d) for d in enqueue_singles(api, "hot", 5)},
        10,
        what="a new job on c",
    )
    assert wait_for(lambda: stats(server)["shards"] == "3", 5)

    # Mark a dequeue-only: nothing new lands there, but its jobs are still drained.
    write_config(config, {"a": (a, True), "b": (b, False), "c": (c, False)})
    wait_for(lambda: log_has(server, "backend config reloaded", "dequeue-only changed a"), 10, what="a marked")
    placed = Counter(shard_of(d) for d in enqueue_singles(api, "hot", 30))
    assert set(placed) == {"b", "c"}, placed

    # Remove b: everything new goes to c; b's jobs are no longer served by this server.
    write_config(config, {"a": (a, True), "c": (c, False)})
    wait_for(lambda: log_has(server, "backend config reloaded", "removed b"), 10, what="reload removing b")
    assert {shard_of(d) for d in enqueue_singles(api, "hot", 10)} == {"c"}
    assert stats(server)["shards"] == "2"

    # A broken edit is logged with its reason; the last good config keeps serving.
    write_text(config, '{"shards": [')
    wait_for(lambda: log_has(server, "rejected", "not valid JSON"), 10, what="the broken config to be rejected")
    write_text(config, json.dumps({"shards": [{"name": "x", "shardConfig": {"master": {"host": "h"}}}]}))
    wait_for(lambda: log_has(server, "rejected", "missing 'port'"), 10, what="the incomplete config to be rejected")
    # A layout other than the one c holds: refused, and c keeps being served as it is.
    write_config(config, {"a": (a, True), "c": (c, False)}, layout="compact")
    wait_for(lambda: log_has(server, "rejected", "holds the original layout"), 10, what="the other layout rejected")
    assert {shard_of(d) for d in enqueue_singles(api, "hot", 5)} == {"c"}
    assert set(api.c.getQueueNames(api.ctx)) == {"hot", "cold"}
    assert readyz(server)[0] == 200


def test_a_reload_adding_a_shard_that_never_answers_holds_no_request(
    tmp_path: Path,
    redis_servers: Callable[..., RedisServer],
    start_server: Callable[..., ServerProcess],
    api_for: Callable[[ServerProcess], Api],
) -> None:
    """Opening a reloaded config's new shard reads its layout record: on a host that takes the
    connection and never answers, that waits a socket timeout. It ran on the event loop, so every
    request of every client waited with it; now it runs on the watch's thread."""
    import socket
    from types import SimpleNamespace

    a = redis_servers("a")
    config = tmp_path / "redis.json"
    write_config(config, {"a": (a, False)})
    server = serve(start_server, config, BACKEND_SOCKET_TIMEOUT_SECONDS=3)
    api = api_for(server)
    api.create("q")
    with socket.socket() as hole:  # listens, so connections are taken (the kernel's backlog), and never answers
        hole.bind(("127.0.0.1", 0))
        hole.listen(8)
        silent = SimpleNamespace(host="127.0.0.1", port=hole.getsockname()[1])
        write_config(config, {"a": (a, False), "x": (silent, True)})  # type: ignore[dict-item]
        slowest, calls, started = 0.0, 0, time.monotonic()
        while not log_has(server, "backend config reloaded", "added x"):
            assert time.monotonic() - started < 30, "the reload was not applied"
            before = time.monotonic()
            api.enqueue("q", api.job(b"meanwhile"))
            slowest, calls = max(slowest, time.monotonic() - before), calls + 1
    assert log_has(server, "shard x: cannot read its layout now"), "the new shard's open waited on the silent host"
    assert time.monotonic() - started > 2.5 and calls > 10, (calls, time.monotonic() - started)
    assert slowest < 1.5, f"a request waited {slowest:.1f} s while the reload opened the silent shard"
    assert stats(server)["shards"] == "2"


# -- durability and eviction ------------------------------------------------------------------


def test_start_up_warns_about_a_shard_without_aof_and_with_eviction(
    tmp_path: Path,
    redis_servers: Callable[..., RedisServer],
    start_server: Callable[..., ServerProcess],
) -> None:
    safe = durable(redis_servers, "safe")
    risky = redis_servers("risky", extra_args=("--maxmemory-policy", "allkeys-lru", "--maxmemory", "64mb"))
    config = tmp_path / "redis.json"
    write_config(config, {"safe": (safe, False), "risky": (risky, False)})
    server = serve(start_server, config)
    output = server.output()
    assert log_has(server, "WARNING", "redis shard risky", "appendonly is no", "jobs written since"), output
    assert log_has(server, "WARNING", "redis shard risky", "maxmemory-policy is allkeys-lru", "evicted job hash"), (
        output
    )
    assert not log_has(server, "redis shard safe"), "a durable shard gets no warning"
    assert sum("maxmemory-policy" in line for line in server.lines) == 1, "warned once, at start"


def test_an_evicted_job_hash_is_skipped_by_dequeue_and_counted(
    tmp_path: Path,
    redis_servers: Callable[..., RedisServer],
    start_server: Callable[..., ServerProcess],
    api_for: Callable[[ServerProcess], Api],
) -> None:
    redis = redis_servers("1")
    config = tmp_path / "redis.json"
    write_config(config, {"1": (redis, False)})
    server = serve(start_server, config)
    api = api_for(server)
    api.create("ev")
    descriptors = api.enqueue("ev", *(api.job(b"job-%d" % i) for i in range(3)))
    raw = redis.client()
    try:
        assert raw.delete(f"plh_1_ev.{descriptors[1].rsplit(':', 1)[1]}") == 1  # as LRU eviction would
        got = api.dequeue("ev", limit=10)
        assert list(got.jobs) == [descriptors[0], descriptors[2]]
        assert raw.zrange("plq_1_ev.p1_s0", 0, -1) == [], "the dangling member is removed"
        assert raw.zcard("plq_1_ev.p1_s1") == 2
    finally:
        raw.close()
    assert api.lookup(descriptors[1]) == {}
    api.ack("ev", ok=list(got.jobs))
    assert api.count("ev", SUCCEEDED) == 2
    assert wait_for(lambda: stats(server).get("redis_evicted_jobs") == "1", 5, what="evicted jobs in /stats.txt")


@pytest.mark.usefixtures("ready_lists_on")
@pytest.mark.parametrize("layout", ["original", "compact"])
def test_far_and_zero_run_afters_and_few_attempts_on_redis(
    tmp_path: Path,
    redis_servers: Callable[..., RedisServer],
    start_server: Callable[..., ServerProcess],
    api_for: Callable[[ServerProcess], Api],
    layout: str,
) -> None:
    redis = redis_servers("1")
    config = tmp_path / "redis.json"
    write_config(config, {"1": (redis, False)}, layout=layout)
    api = api_for(serve(start_server, config))
    far_jobs_read_back(api)
    zero_run_after_is_now(api)
    attempts_below_one_are_one(api)


def test_jobs_without_a_run_after_go_to_the_compact_layouts_ready_list(
    tmp_path: Path,
    redis_servers: Callable[..., RedisServer],
    start_server: Callable[..., ServerProcess],
    api_for: Callable[[ServerProcess], Api],
) -> None:
    """The server defaults a run after to the now it gives the store, so a compact shard keeps
    those jobs in its ready list (``lua_compact/lib/ready.lua``), not in a sorted set."""
    redis = redis_servers("1")
    config = tmp_path / "redis.json"
    write_config(config, {"1": (redis, False)}, layout="compact")
    server = serve(start_server, config)
    api = api_for(server)
    api.create("rl")
    raw = redis.client()
    # ids from 1001: none gains a digit, which ends a list's run of one millisecond (ready.lua)
    raw.hset("plc:{1:rl}:j", "id", 1000)
    # one call per job: each a new now, from the handler's clock, the same in the store
    descriptors = [d for i in range(100) for d in api.enqueue("rl", api.job(b"job-%d" % i))]
    descriptors += api.enqueue("rl", api.job(b"later", runAfterTimestampMillis=int(time.time() * 1000) + 60_000))
    try:
        entries: list[bytes] = raw.lrange("plc:{1:rl}:p1:r", 0, -1)  # type: ignore[assignment]  # sync client
        listed = [entry for entry in entries if not entry.startswith(b"@")]
        assert [int(entry) for entry in listed] == [int(d.rsplit(":", 1)[1]) for d in descriptors[:100]]
        assert raw.zcard("plc:{1:rl}:p1:s0") == 1  # the one to run later
    finally:
        raw.close()
    assert api.count("rl", PENDING) == 100
    got = api.dequeue("rl", limit=100)
    assert list(got.jobs) == descriptors[:100]


def test_shards_named_with_hyphens_and_dots_are_served_as_the_original_wrote_them(
    tmp_path: Path,
    redis_servers: Callable[..., RedisServer],
    start_server: Callable[..., ServerProcess],
    api_for: Callable[[ServerProcess], Api],
) -> None:
    """The original took any shard name without ``:`` (``redis-1`` in its keys and descriptors);
    ours refused to start on one. A job the original wrote under shard ``redis-1.a`` is served
    as it is, and a compact shard ``cache-2`` works as any other."""
    old, new = redis_servers("old"), redis_servers("new")
    raw = old.client()
    now = time.time()
    try:
        raw.zadd("pln_redis-1.a", {"life": now})
        raw.set("plj_redis-1.a_life", 1)
        raw.hset("plh_redis-1.a_life.1", mapping={"bd": b"old", "al": 2, "ar": 2, "ca": now, "ua": now, "cs": ""})
        raw.zadd("plq_redis-1.a_life.p1_s0", {"1": now - 1})
    finally:
        raw.close()
    config = tmp_path / "redis.json"
    write_config(config, {"redis-1.a": (old, True), "cache-2": (new, False)}, layout=None)
    api = api_for(serve(start_server, config))
    assert list(api.dequeue("life").jobs.items()) == [("life:sredis-1.a:p1:1", b"old")]
    api.ack("life", ok=["life:sredis-1.a:p1:1"])
    assert api.lookup("life:sredis-1.a:p1:1")["life:sredis-1.a:p1:1"].jobState == SUCCEEDED
    api.create("fresh")
    (descriptor,) = api.enqueue("fresh", api.job(b"new"))
    assert descriptor == "fresh:scache-2:p1:1", "the writable shard, compact (an empty one)"
    assert list(api.dequeue("fresh").jobs) == [descriptor]
    api.ack("fresh", ok=[descriptor])
    assert api.count("fresh", SUCCEEDED) == 1
    raw = new.client()
    try:
        assert raw.exists("plc:{cache-2:fresh}:j") == 1
    finally:
        raw.close()
