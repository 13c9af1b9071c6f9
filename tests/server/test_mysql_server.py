"""The server on MySQL, end to end: a real ``pinlater serve --backend mysql`` over real MariaDB
processes, driven by the Apache-generated client.

Store-level behaviour is in ``tests/backends/test_mysql.py``; here is what only the whole server
shows: the lifecycle in the original's databases and descriptors, bodies over the BLOB limit,
three shards with one dequeue-only, a database the original created served as it is,
QUEUE_NAME_TOO_LONG with nothing created, MariaDB SIGKILLed and restarted under load with no job
lost, and a shard marked dequeue-only by editing the config. One MariaDB instance holds several
shards (several config entries, or MYSQL_NUM_DB_PER_QUEUE). Tests that only need empty databases
share one MariaDB (``shared_server``); the restart test starts its own, durable one. Waits are
``wait_for`` on a condition, never a guessed sleep.
"""

from __future__ import annotations

import json
import os
import re
import threading
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from tests.server.test_contract import FAILED, IN_PROGRESS, PENDING, SUCCEEDED, Api, attempts_below_one_are_one, now_ms
from tests.support.mariadb_server import MariaDBServer, shared_server
from tests.support.original_mysql import ORIGINAL_JOBS_TABLE
from tests.support.pinlater_server import ServerProcess
from tests.support.thrift_client import connect
from tests.support.wait import wait_for

pytestmark = pytest.mark.mysql

DESCRIPTOR = re.compile(r"^(\w+):s(\w+):p(\d+):(\d+)$")
QUEUE_NAME_TOO_LONG, ENQUEUE_REJECTED = 411, 430


Start = Callable[..., ServerProcess]
Shards = dict[str, tuple[MariaDBServer, bool]]
"""Config key -> (its MariaDB, dequeue-only)."""


# -- helpers ----------------------------------------------------------------------------------


@pytest.fixture
def mariadb() -> MariaDBServer:
    """The process-wide MariaDB, emptied of queue databases."""
    server = shared_server()
    server.drop_queue_databases()
    return server


def write_config(path: Path, shards: Shards) -> None:
    """The original's MySQL JSON, written atomically (a new inode, so the watcher sees it)."""
    config = {key: db.shard_entry(dequeue_only=dequeue_only) for key, (db, dequeue_only) in shards.items()}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(config))
    os.replace(tmp, path)


def serve(start_server: Start, tmp_path: Path, shards: Shards, **properties: Any) -> ServerProcess:
    config = tmp_path / "mysql.json"
    write_config(config, shards)
    return start_server("--backend", "mysql", "--backend-config", str(config), properties=properties or None)


@pytest.fixture
def api_for(open_client: Callable[[ServerProcess], Any], ttypes: ModuleType) -> Callable[[ServerProcess], Api]:
    return lambda server: Api(open_client(server), ttypes)


def shard_of(descriptor: str) -> str:
    m = DESCRIPTOR.match(descriptor)
    assert m, f"descriptor {descriptor!r} is not queue:s{{shard}}:p{{priority}}:{{id}}"
    return m.group(2)


def databases(db: MariaDBServer) -> set[str]:
    return {row[0] for row in db.query("SHOW DATABASES LIKE 'plq%'")}


def readyz(server: ServerProcess) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.admin_port}/readyz", timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        with exc:
            return int(exc.code)


def enqueue_singles(api: Api, queue: str, n: int, tag: str = "single") -> list[str]:
    """``n`` enqueue calls of one job each (each call picks its shard afresh)."""
    return [d for i in range(n) for d in api.enqueue(queue, api.job(f"{tag}-{i}".encode()))]


def drain(api: Api, queue: str, expected: int, timeout: float = 20.0) -> dict[str, bytes]:
    """Dequeue and ack until ``expected`` distinct jobs came back; returns descriptor -> body."""
    got: dict[str, bytes] = {}

    def step() -> bool:
        jobs = api.dequeue(queue, limit=100).jobs or {}
        if jobs:
            api.ack(queue, ok=list(jobs))
        got.update(jobs)
        return len(got) >= expected

    wait_for(step, timeout, interval=0.05, what=f"{expected} jobs drained from {queue}")
    return got


# -- the lifecycle ----------------------------------------------------------------------------


def test_lifecycle_through_the_server_in_the_original_databases(
    start_server: Start, api_for: Callable[[ServerProcess], Api], mariadb: MariaDBServer, tmp_path: Path
) -> None:
    api = api_for(serve(start_server, tmp_path, {"1": (mariadb, False)}))
    api.create("life")
    assert databases(mariadb) == {"plq_1_life"}
    bodies = [bytes([0, 255, 39, 92, i]) for i in range(3)]  # NUL, 0xff, quote, backslash survive
    first = api.enqueue(
        "life", api.job(bodies[0], numAttemptsAllowed=3), api.job(bodies[1]), api.job(bodies[2], priority=2)
    )
    assert first == ["life:s1:p1:1", "life:s1:p1:2", "life:s1:p2:1"]
    assert api.enqueue("life", api.job(b"later", runAfterTimestampMillis=now_ms() + 3_600_000)) == ["life:s1:p1:3"]
    assert api.count("life", PENDING) == 3
    assert api.count("life", PENDING, countFutureJobs=True) == 1

    got = api.dequeue("life", limit=2)
    assert list(got.jobs) == ["life:s1:p1:1", "life:s1:p1:2"] and got.jobs["life:s1:p1:1"] == bodies[0]
    assert (got.jobMetadata["life:s1:p1:1"].attemptsAllowed, got.jobMetadata["life:s1:p1:1"].attemptsRemaining) == (
        3,
        3,
    )
    retry = api.t.PinLaterJobAckInfo(jobDescriptor="life:s1:p1:2", appendCustomStatus="boom", retryDelayMillis=60_000)
    api.c.ackDequeuedJobs(
        api.ctx,
        api.t.PinLaterJobAckRequest(
            queueName="life",
            jobsSucceeded=[api.t.PinLaterJobAckInfo(jobDescriptor="life:s1:p1:1", appendCustomStatus="ok")],
            jobsFailed=[retry],
        ),
    )
    found = api.lookup("life:s1:p1:1", "life:s1:p1:2", "life:s1:p2:1", "life:s1:p9:1", "life:s1:p1:999", body=True)
    assert sorted(found) == ["life:s1:p1:1", "life:s1:p1:2", "life:s1:p2:1"]
    done, retried = found["life:s1:p1:1"], found["life:s1:p1:2"]
    assert (done.jobState, done.customStatus, done.body, done.attemptsRemaining) == (SUCCEEDED, "ok", bodies[0], 3)
    assert (retried.jobState, retried.customStatus, retried.attemptsRemaining) == (PENDING, "boom", 1)
    assert retried.runAfterTimestampMillis > now_ms() + 50_000
    assert found["life:s1:p2:1"].jobState == PENDING

    # The rows are the original's: one table per priority, the state as a number.
    rows = mariadb.query("SELECT local_id, state, custom_status, body FROM plq_1_life.jobs_p1 ORDER BY local_id")
    assert rows[:2] == [(1, SUCCEEDED, "ok", bodies[0]), (2, PENDING, "boom", bodies[1])]
    assert [info.jobDescriptor for info in api.scan("life", SUCCEEDED).scannedJobs] == ["life:s1:p1:1"]
    scanned = api.scan("life", PENDING, scanFutureJobs=True, priority=1).scannedJobs
    assert [info.jobDescriptor for info in scanned] == ["life:s1:p1:3", "life:s1:p1:2"]  # newest run_after first
    assert list(api.dequeue("life", limit=10).jobs) == ["life:s1:p2:1"]
    assert api.count("life", IN_PROGRESS) == 1
    assert set(api.c.getQueueNames(api.ctx)) == {"life"}


def test_attempts_below_one_are_one_on_mysql(
    start_server: Start, api_for: Callable[[ServerProcess], Api], mariadb: MariaDBServer, tmp_path: Path
) -> None:
    """(The original's MySQL backend stored 0, then left such a job IN_PROGRESS for good after a
    failure; ours uses attempts_remaining 0 of a PENDING job for a cancelled one.)"""
    attempts_below_one_are_one(api_for(serve(start_server, tmp_path, {"1": (mariadb, False)})))


def test_creating_a_queue_that_exists_runs_no_ddl(
    start_server: Start, api_for: Callable[[ServerProcess], Api], mariadb: MariaDBServer, tmp_path: Path
) -> None:
    """createQueue of a queue every shard has writes nothing: it ran CREATE DATABASE and a CREATE
    TABLE per priority on every shard each time (metadata locks), as often as a peer asked."""
    api = api_for(serve(start_server, tmp_path, {"1": (mariadb, False)}))
    api.create("again")

    def ddl() -> int:
        rows = mariadb.query("SHOW GLOBAL STATUS WHERE Variable_name IN ('Com_create_db', 'Com_create_table')")
        return sum(int(value) for _, value in rows)

    before = ddl()
    for _ in range(20):
        api.create("again")
    assert ddl() == before
    assert databases(mariadb) >= {"plq_1_again"}


def test_a_body_over_the_blob_limit_is_rejected_before_anything_is_written(
    start_server: Start, api_for: Callable[[ServerProcess], Api], mariadb: MariaDBServer, tmp_path: Path
) -> None:
    # A table the original created holds bodies in a BLOB (tests/backends/test_mysql_bodies.py
    # has the rest: our MEDIUMBLOB tables, the ALTER TABLE named in the refusal).
    mariadb.query("CREATE DATABASE plq_1_big")
    mariadb.query(ORIGINAL_JOBS_TABLE.format(table="plq_1_big.jobs_p1"))
    api = api_for(serve(start_server, tmp_path, {"1": (mariadb, False)}))
    [at_limit] = api.enqueue("big", api.job(b"x" * 65_535))
    with pytest.raises(api.t.PinLaterException) as info:
        api.enqueue("big", api.job(b"small"), api.job(b"y" * 65_536))
    assert info.value.errorCode == ENQUEUE_REJECTED
    assert "65536 bytes" in info.value.message and "65535" in info.value.message
    assert mariadb.query("SELECT COUNT(*) FROM plq_1_big.jobs_p1") == [(1,)], "nothing of the batch was written"

    [claimed] = api.dequeue("big", limit=1).jobs
    assert claimed == at_limit
    checkpoint = api.t.PinLaterCheckpointJobRequest(jobDescriptor=claimed, newBody="z" * 70_000)
    with pytest.raises(api.t.PinLaterException) as info:
        api.c.checkpointJobs(api.ctx, api.t.PinLaterCheckpointJobsRequest(queueName="big", requests=[checkpoint]))
    assert info.value.errorCode == ENQUEUE_REJECTED and "70000 bytes" in info.value.message
    assert api.lookup(claimed, body=True)[claimed].body == b"x" * 65_535


# -- shards -----------------------------------------------------------------------------------


def test_new_jobs_land_only_on_writable_shards_and_the_dequeue_only_shard_is_drained(
    start_server: Start, api_for: Callable[[ServerProcess], Api], mariadb: MariaDBServer, tmp_path: Path
) -> None:
    # Three shards in one MariaDB, each its own database per queue.
    api = api_for(serve(start_server, tmp_path, {"1": (mariadb, False), "2": (mariadb, False), "3": (mariadb, True)}))
    api.create("spread")
    assert databases(mariadb) == {"plq_1_spread", "plq_2_spread", "plq_3_spread"}
    # Jobs already on the dequeue-only shard, written as the original wrote them.
    conn = mariadb.admin_connection()
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        cur.executemany(
            "INSERT INTO plq_3_spread.jobs_p1 (state, attempts_allowed, attempts_remaining, custom_status,"
            " created_at, run_after, body) VALUES (0, 2, 2, '', UTC_TIMESTAMP(), UTC_TIMESTAMP() - INTERVAL 1 SECOND,"
            " %s)",
            [(f"old-{i}",) for i in range(20)],
        )
    conn.close()

    new = enqueue_singles(api, "spread", 40)
    new += api.enqueue("spread", *[api.job(f"batch-{i}".encode()) for i in range(10)])
    assert set(Counter(shard_of(d) for d in new)) == {"1", "2"}, "40 calls picked both writable shards, never 3"
    assert mariadb.query("SELECT COUNT(*) FROM plq_3_spread.jobs_p1") == [(20,)]

    drained = drain(api, "spread", 70)
    from_3 = {d: body for d, body in drained.items() if shard_of(d) == "3"}
    assert sorted(from_3.values()) == sorted(f"old-{i}".encode() for i in range(20))
    assert set(drained) - set(from_3) == set(new)
    assert api.count("spread", SUCCEEDED) == 70


def test_a_database_the_original_created_is_served(
    start_server: Start, api_for: Callable[[ServerProcess], Api], mariadb: MariaDBServer, tmp_path: Path
) -> None:
    # By hand, the original's way: its DDL, rows written by a session in the server's local time
    # zone (here +02:00), updated_at left to its default, whole seconds.
    local = timezone(timedelta(hours=2))
    now = now_ms()

    def local_time(ms: int) -> str:
        return datetime.fromtimestamp(ms / 1000, local).strftime("%Y-%m-%d %H:%M:%S")

    conn = mariadb.admin_connection()
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+02:00'")
        cur.execute("CREATE DATABASE plq_1_legacy")
        for priority in (1, 2, 3):
            cur.execute(ORIGINAL_JOBS_TABLE.format(table=f"plq_1_legacy.jobs_p{priority}"))
        insert = (
            "INSERT INTO plq_1_legacy.jobs_p{p} (state, attempts_allowed, attempts_remaining, custom_status,"
            " created_at, run_after, body) VALUES (%s, %s, %s, SUBSTRING(%s, 1, 5000), %s, %s, %s)"
        )
        for i in range(3):
            cur.execute(
                insert.format(p=1),
                (0, 2, 2, f"status-{i}", local_time(now - 600_000), local_time(now - 60_000 + i * 1000), f"old-{i}"),
            )
        cur.execute(insert.format(p=2), (0, 3, 3, "", local_time(now), local_time(now + 3_600_000), b"future"))
        cur.execute(insert.format(p=3), (3, 1, 0, "gave up", local_time(now), local_time(now - 1000), b"dead"))
    conn.close()

    api = api_for(serve(start_server, tmp_path, {"pinlaterdb001": (mariadb, False)}))
    assert set(api.c.getQueueNames(api.ctx)) == {"legacy"}
    assert api.count("legacy", PENDING) == 3
    assert api.count("legacy", PENDING, countFutureJobs=True) == 1
    assert api.count("legacy", FAILED) == 1
    [old_0] = api.lookup("legacy:s1:p1:1", body=True).values()
    assert (old_0.body, old_0.customStatus, old_0.attemptsAllowed) == (b"old-0", "status-0", 2)
    assert abs(old_0.createdAtTimestampMillis - (now - 600_000)) < 1000, "times read back in UTC"

    got = api.dequeue("legacy", limit=10)
    assert list(got.jobs) == ["legacy:s1:p1:1", "legacy:s1:p1:2", "legacy:s1:p1:3"]
    assert got.jobs["legacy:s1:p1:3"] == b"old-2"
    api.ack("legacy", ok=["legacy:s1:p1:1", "legacy:s1:p1:2"], failed=["legacy:s1:p1:3"])
    states = {d: info.jobState for d, info in api.lookup(*got.jobs).items()}
    assert states == {"legacy:s1:p1:1": SUCCEEDED, "legacy:s1:p1:2": SUCCEEDED, "legacy:s1:p1:3": PENDING}
    # New jobs go on in the original's tables and ids.
    assert api.enqueue("legacy", api.job(b"new")) == ["legacy:s1:p1:4"]
    retry = api.c.retryFailedJobs(api.ctx, api.t.PinLaterRetryFailedJobsRequest(queueName="legacy", priority=3))
    assert retry == 1
    assert drain(api, "legacy", 3) == {"legacy:s1:p1:3": b"old-2", "legacy:s1:p1:4": b"new", "legacy:s1:p3:1": b"dead"}
    timestamps = mariadb.query(
        "SELECT DATETIME_PRECISION FROM information_schema.COLUMNS WHERE"
        " TABLE_SCHEMA = 'plq_1_legacy' AND DATA_TYPE = 'timestamp'",
    )
    assert {row[0] for row in timestamps} == {0}, "the original's tables are used as they are"


def test_a_queue_name_too_long_for_any_shard_is_created_on_none(
    start_server: Start, api_for: Callable[[ServerProcess], Api], mariadb: MariaDBServer, tmp_path: Path
) -> None:
    # MYSQL_NUM_DB_PER_QUEUE=2 makes the shards "1" and "1d1": plq_1_ leaves 58 characters for the
    # queue name, plq_1d1_ only 56.
    api = api_for(serve(start_server, tmp_path, {"1": (mariadb, False)}, MYSQL_NUM_DB_PER_QUEUE=2))
    fits_1_only = "q" * 57
    assert api.error_code(api.create, fits_1_only) == QUEUE_NAME_TOO_LONG
    with pytest.raises(api.t.PinLaterException) as info:
        api.create("r" * 58)
    assert "plq_1d1_" in info.value.message and "64" in info.value.message
    assert databases(mariadb) == set(), "nothing was created on shard 1 either"
    assert set(api.c.getQueueNames(api.ctx)) == set()

    longest = "q" * 56
    api.create(longest)
    assert databases(mariadb) == {f"plq_1_{longest}", f"plq_1d1_{longest}"}
    descriptors = enqueue_singles(api, longest, 20)
    assert {shard_of(d) for d in descriptors} == {"1", "1d1"}
    assert len(drain(api, longest, 20)) == 20


def test_marking_a_shard_dequeue_only_in_the_config_stops_new_jobs_there(
    start_server: Start, api_for: Callable[[ServerProcess], Api], mariadb: MariaDBServer, tmp_path: Path
) -> None:
    server = serve(start_server, tmp_path, {"1": (mariadb, False), "2": (mariadb, False)})
    api = api_for(server)
    api.create("moving")
    before = enqueue_singles(api, "moving", 40, "before")
    assert {shard_of(d) for d in before} == {"1", "2"}

    write_config(tmp_path / "mysql.json", {"1": (mariadb, False), "2": (mariadb, True)})
    wait_for(lambda: "backend config reloaded" in server.output(), 10, what="the config reload")
    after = enqueue_singles(api, "moving", 40, "after")
    assert {shard_of(d) for d in after} == {"1"}
    on_2 = [d for d in before if shard_of(d) == "2"]
    assert mariadb.query("SELECT COUNT(*) FROM plq_2_moving.jobs_p1") == [(len(on_2),)]
    drained = drain(api, "moving", 80)
    assert set(on_2) <= set(drained), "jobs on the now dequeue-only shard are still drained"
    assert server.proc is not None and server.proc.poll() is None


# -- MariaDB restarted under load -------------------------------------------------------------


@pytest.fixture
def durable_mariadb(tmp_path: Path) -> Iterator[MariaDBServer]:
    """A MariaDB of its own that loses nothing committed when SIGKILLed (fsync at each commit)."""
    with MariaDBServer(tmp_path / "mariadb-durable", flush_log_at_trx_commit=1) as server:
        yield server


class Worker(threading.Thread):
    """A producer or consumer on its own connection, counting what it saw; errors are expected
    while MariaDB is down and only counted (a broken connection is reopened)."""

    def __init__(self, port: int, ttypes: ModuleType, step: Callable[[Api], None]) -> None:
        super().__init__(daemon=True)
        self.port = port
        self.ttypes = ttypes
        self.step = step
        self.stop = threading.Event()
        self.errors: Counter[str] = Counter()
        self.fatal: BaseException | None = None

    def run(self) -> None:
        transport = None
        try:
            while not self.stop.is_set():
                if transport is None:
                    try:
                        client, transport = connect("127.0.0.1", self.port, timeout=15)
                    except Exception:
                        self.errors["connect"] += 1
                        self.stop.wait(0.1)
                        continue
                    api = Api(client, self.ttypes, source="tests:restart")
                try:
                    self.step(api)
                except self.ttypes.PinLaterException as exc:
                    self.errors[f"code {exc.errorCode}"] += 1
                    self.stop.wait(0.05)
                except Exception as exc:
                    self.errors[type(exc).__name__] += 1
                    transport.close()
                    transport = None
        except BaseException as exc:  # surfaced by the test, not lost in a thread
            self.fatal = exc
        finally:
            if transport is not None:
                transport.close()


def test_mariadb_killed_and_restarted_under_load_loses_no_job(
    start_server: Start,
    api_for: Callable[[ServerProcess], Api],
    durable_mariadb: MariaDBServer,
    tmp_path: Path,
    ttypes: ModuleType,
) -> None:
    server = serve(
        start_server,
        tmp_path,
        {"1": (durable_mariadb, False), "2": (durable_mariadb, False)},
        BACKEND_MONITOR_JOB_CLAIMED_TIMEOUT_SECONDS=2,
        BACKEND_MONITOR_THREAD_DELAY_SECONDS=0.5,
        BACKEND_SOCKET_TIMEOUT_SECONDS=2,
        BACKEND_CONNECTIONS_PER_SHARD=4,
    )
    api = api_for(server)
    api.create("survivor")
    enqueued: list[str] = []
    acked: set[str] = set()
    sequence = iter(range(10**9))

    def produce(client: Api) -> None:
        jobs = [client.job(f"job-{next(sequence)}".encode(), numAttemptsAllowed=100) for _ in range(10)]
        enqueued.extend(client.enqueue("survivor", *jobs))

    def consume(client: Api) -> None:
        jobs = list(client.dequeue("survivor", limit=25).jobs)
        if jobs:
            client.ack("survivor", ok=jobs)
            acked.update(jobs)

    producer = Worker(server.port, ttypes, produce)
    consumer = Worker(server.port, ttypes, consume)
    producer.start()
    consumer.start()
    try:
        wait_for(lambda: len(enqueued) >= 300 and len(acked) >= 100, 30, what="load before the crash")
        # Claims held by a worker that goes away with the outage: only the monitor brings them back.
        # (the consumer outruns the producer: the queue may be empty at any one moment)
        abandoned = wait_for(lambda: list(api.dequeue("survivor", limit=20).jobs), 10, what="jobs to abandon")
        assert abandoned
        durable_mariadb.kill()
        wait_for(
            lambda: sum(producer.errors.values()) >= 3 and sum(consumer.errors.values()) >= 3,
            30,
            what="the producer and the consumer to notice the outage",
        )
        wait_for(lambda: readyz(server) == 503, 10, what="/readyz to report the shards")
        during = len(enqueued)
        durable_mariadb.start()
        wait_for(lambda: readyz(server) == 200, 30, what="the health loop to bring the shards back")
        wait_for(lambda: len(enqueued) >= during + 300, 30, what="enqueues after the restart")
        producer.stop.set()
        producer.join(30)
        total = list(enqueued)

        def every_job_acked() -> bool:
            missing = set(total) - acked
            if len(missing) > 200:
                return False
            # An ack whose reply the outage cut off may still have committed: the job is done.
            done = {d for d, info in api.lookup(*missing).items() if info.jobState == SUCCEEDED}
            return missing <= done

        wait_for(every_job_acked, 60, interval=0.2, what="every enqueued job to be acked at least once")
    finally:
        producer.stop.set()
        consumer.stop.set()
        producer.join(30)
        consumer.join(30)
    assert producer.fatal is None and consumer.fatal is None
    assert server.proc is not None and server.proc.poll() is None, "the same server process throughout"
    assert server.output().count("serving PinLater") == 1, "the server never restarted"
    states = Counter(
        info.jobState
        for chunk in range(0, len(total), 500)
        for info in api.lookup(*total[chunk : chunk + 500]).values()
    )
    assert states == {SUCCEEDED: len(total)}
    assert set(abandoned) <= acked, "abandoned claims were resurrected and dequeued again"
    assert len(set(total)) == len(total)
