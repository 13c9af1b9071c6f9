"""A store restart under load costs no failed call once the store answers again, and no job.

A real ``pinlater serve`` on Redis and on MariaDB, several client connections (the client
generated from the original IDL) enqueueing, dequeueing and acking; the store is stopped by PID
and started again on the same port and data (AOF / datadir). Calls that fail while it is down
are counted apart (reported, allowed); from the moment the store answers again, not one call may
fail: every pooled connection the server held is dead by then, and none may cost a caller an
error, nor may the wait for the server's health loop to see the shard back (a call that finds
no healthy shard asks the unhealthy ones first). Every job enqueued is acked in
the end. Waits are ``wait_for`` on a condition; loops are bounded in count and time.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

import pytest
from tests.server.test_contract import SUCCEEDED, Api
from tests.support.mariadb_server import MariaDBServer
from tests.support.pinlater_server import ServerProcess
from tests.support.redis_server import RedisServer, write_shard_config
from tests.support.thrift_client import connect
from tests.support.wait import wait_for

QUEUE = "restarts"
MAX_CALLS = 20_000
BATCH = 5
"""Jobs per enqueue."""
"""Per worker: a bound on the loop, far above what the test needs."""


class Store(Protocol):
    def restart(self) -> Any: ...


@dataclass
class Call:
    started: float
    op: str
    error: str | None


@dataclass(eq=False)
class Worker(threading.Thread):
    """One client connection running ``step`` until stopped, recording every call it made."""

    port: int
    ttypes: ModuleType
    role: str
    stop: threading.Event = field(default_factory=threading.Event)
    calls: list[Call] = field(default_factory=list)
    enqueued: list[str] = field(default_factory=list)
    acked: set[str] = field(default_factory=set)
    fatal: BaseException | None = None

    def __post_init__(self) -> None:
        threading.Thread.__init__(self, name=self.role, daemon=True)

    def call(self, op: str, fn: Callable[[], Any]) -> tuple[bool, Any]:
        """(whether it succeeded, its result); a PinLaterException is recorded, not raised."""
        started = time.monotonic()
        try:
            result = fn()
        except self.ttypes.PinLaterException as exc:
            self.calls.append(Call(started, op, f"{op}: code {exc.errorCode}: {exc.message}"))
            return False, None
        self.calls.append(Call(started, op, None))
        return True, result

    def run(self) -> None:
        client, transport = connect("127.0.0.1", self.port, timeout=30)
        api = Api(client, self.ttypes, source=f"tests:{self.role}")
        try:
            for n in range(MAX_CALLS):
                if self.stop.is_set():
                    break
                if self.role.startswith("producer"):
                    jobs = [api.job(f"{self.role}-{n}-{i}".encode(), numAttemptsAllowed=50) for i in range(BATCH)]
                    ok, descriptors = self.call("enqueue", lambda jobs=jobs: api.enqueue(QUEUE, *jobs))
                    self.enqueued += descriptors if ok else []
                    self.stop.wait(0.01)  # pace the load: the machine is shared
                    continue
                ok, got = self.call("dequeue", lambda: api.dequeue(QUEUE, limit=10))
                jobs = list(got.jobs) if ok else []
                if jobs and self.call("ack", lambda jobs=jobs: api.ack(QUEUE, ok=jobs))[0]:
                    self.acked.update(jobs)
                if not jobs:
                    self.stop.wait(0.02)
        except BaseException as exc:  # surfaced by the test, not lost in a thread
            self.fatal = exc
        finally:
            transport.close()


@contextmanager
def redis_store(tmp_path: Path) -> Iterator[tuple[Store, list[str]]]:
    with RedisServer(tmp_path / "redis", appendonly=True, appendfsync="always") as redis:
        config = write_shard_config(tmp_path / "redis.json", {"a": redis})
        yield redis, ["--backend", "redis", "--backend-config", str(config)]


@contextmanager
def mysql_store(tmp_path: Path) -> Iterator[tuple[Store, list[str]]]:
    with MariaDBServer(tmp_path / "mariadb", flush_log_at_trx_commit=1) as mariadb:
        config = tmp_path / "mysql.json"
        config.write_text(json.dumps({"1": mariadb.shard_entry()}))
        yield mariadb, ["--backend", "mysql", "--backend-config", str(config)]


@pytest.mark.parametrize(
    "make_store",
    [pytest.param(redis_store, marks=pytest.mark.redis), pytest.param(mysql_store, marks=pytest.mark.mysql)],
    ids=["redis", "mysql"],
)
def test_a_store_restart_under_load_costs_no_failed_call_once_it_answers(
    make_store: Callable[[Path], Any],
    start_server: Callable[..., ServerProcess],
    open_client: Callable[[ServerProcess], Any],
    ttypes: ModuleType,
    tmp_path: Path,
) -> None:
    with make_store(tmp_path) as (store, args):
        server = start_server(
            *args,
            properties={
                "BACKEND_MONITOR_JOB_CLAIMED_TIMEOUT_SECONDS": 3,
                "BACKEND_MONITOR_THREAD_DELAY_SECONDS": 0.5,
                "BACKEND_SOCKET_TIMEOUT_SECONDS": 3,
                "BACKEND_CONNECTIONS_PER_SHARD": 6,
            },
        )
        api = Api(open_client(server), ttypes)
        api.create(QUEUE)
        producers = [Worker(server.port, ttypes, f"producer{i}") for i in range(2)]
        consumers = [Worker(server.port, ttypes, f"consumer{i}") for i in range(3)]
        workers = producers + consumers

        def acked() -> set[str]:
            return set().union(*(set(c.acked) for c in consumers))

        for worker in workers:
            worker.start()
        try:
            wait_for(lambda: len(acked()) >= 200, 60, what="the load to get going")
            store.restart()  # stopped by PID (SIGTERM), started on the same port and data; returns once it answers
            back_at = time.monotonic()
            acked_when_back = len(acked())
            wait_for(lambda: len(acked()) >= acked_when_back + 300, 60, what="load to carry on after the restart")
            for producer in producers:
                producer.stop.set()
                producer.join(30)
            enqueued = {d for p in producers for d in p.enqueued}

            def every_job_acked() -> bool:
                missing = enqueued - acked()
                if len(missing) > 100:
                    return False
                # An ack whose reply the outage cut off may have been applied: the job is done.
                done = {d for d, info in api.lookup(*missing).items() if info.jobState == SUCCEEDED}
                return missing <= done

            wait_for(every_job_acked, 90, interval=0.2, what=f"every one of {len(enqueued)} enqueued jobs acked")
            stored = sum(api.count(QUEUE, state) for state in range(4))
        finally:
            for worker in workers:
                worker.stop.set()
            for worker in workers:
                worker.join(30)

    assert all(w.fatal is None for w in workers), [w.fatal for w in workers]
    calls = [c for w in workers for c in w.calls]
    during = Counter(c.op for c in calls if c.error is not None and c.started < back_at)
    after = [c.error for c in calls if c.error is not None and c.started >= back_at]
    calls_after = Counter(c.op for c in calls if c.started >= back_at)
    print(f"failed calls during the outage: {dict(during)}; calls after it: {dict(calls_after)}")
    assert min(calls_after["enqueue"], calls_after["dequeue"], calls_after["ack"]) >= 20, calls_after
    assert after == [], f"{len(after)} calls failed after the store answered again: {after[:5]}"
    # No job twice: each enqueue that got descriptors wrote its batch once; one that failed during
    # the outage wrote it at most once (its outcome unknown, it was not sent again).
    failed_enqueues = sum(1 for c in calls if c.op == "enqueue" and c.error is not None)
    assert len(enqueued) <= stored <= len(enqueued) + BATCH * failed_enqueues, (stored, len(enqueued), failed_enqueues)


@pytest.mark.redis
def test_an_enqueue_whose_outcome_is_unknown_is_not_sent_to_another_shard(
    start_server: Callable[..., ServerProcess],
    open_client: Callable[[ServerProcess], Any],
    ttypes: ModuleType,
    tmp_path: Path,
) -> None:
    """Shard a takes the command but does not answer in time (its writes are paused): the jobs
    may be in it, so the enqueue fails with SHARD_CONNECTION_FAILED instead of landing on shard
    b as well; after a's writes resume, the failed batch is in the store at most once."""
    with RedisServer(tmp_path / "a") as a, RedisServer(tmp_path / "b") as b:
        config = write_shard_config(tmp_path / "redis.json", {"a": a, "b": b})
        server = start_server(
            "--backend", "redis", "--backend-config", str(config), properties={"BACKEND_SOCKET_TIMEOUT_SECONDS": 0.5}
        )
        api = Api(open_client(server), ttypes)
        api.create(QUEUE)
        a.client().execute_command("CLIENT", "PAUSE", "60000", "WRITE")  # scripts that may write wait
        enqueued: list[str] = []
        failures: list[int] = []

        def one_fails() -> bool:
            try:
                enqueued.extend(api.enqueue(QUEUE, api.job(b"try-%d" % len(enqueued))))
            except ttypes.PinLaterException as exc:
                failures.append(int(exc.errorCode))
                return True
            return False

        try:
            wait_for(one_fails, 60, interval=0.05, what="an enqueue sent to the paused shard")
        finally:
            a.client().execute_command("CLIENT", "UNPAUSE")
        assert failures == [502]  # SHARD_CONNECTION_FAILED
        assert all(":sb:" in d for d in enqueued)
        pending = api.count(QUEUE, 0)
        assert pending - len(enqueued) in (0, 1), (pending, len(enqueued))
