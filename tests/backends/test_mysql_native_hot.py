"""The MySQL store's Rust hot path (``NativeMySQLHotPath``) against the Python store's methods of
the same names, on a real MariaDB: the same rows, the same results, the same statements (read
from the server's general log), the same errors; a server restart mid-use; concurrent calls.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import pytest
from tests.support.mariadb_server import MariaDBServer, shared_server
from tests.support.wait import wait_for

from pinlater._pinlater import AckGroup, NewJobBatch
from pinlater.backends.base import AckItem, ClaimedJob, JobFilter, JobRecord, JobState, NewJob
from pinlater.backends.mysql import Endpoint, MySQLShardConfig, MySQLStore
from pinlater.backends.mysql.bodies import BLOB_BYTES
from pinlater.backends.mysql.native_hot import NativeMySQLHotPath
from pinlater.backends.sharded import ShardedBackend
from pinlater.backends.shardmap import Shard, ShardMap
from pinlater.errors import ErrorCode, PinLaterError, QueueNotFoundError, ShardConnectionError

pytestmark = pytest.mark.mysql

T = TypeVar("T")
T0 = 1_700_000_000_000
PY, RS = "pyq", "rsq"  # the same length: their statements differ only in the name


def config_for(server: MariaDBServer) -> MySQLShardConfig:
    return MySQLShardConfig(Endpoint(server.host, server.port), server.user, server.password)


class Harness:
    """A store and its native hot path on one event loop (run in a thread of its own)."""

    def __init__(self, store: MySQLStore) -> None:
        self.store = store
        self.loop = asyncio.new_event_loop()
        self.pool = ThreadPoolExecutor(4)
        self.hot = NativeMySQLHotPath(store, self._offload)

    def _offload(self, fn: Callable[..., T], /, *args: object) -> Awaitable[T]:
        return asyncio.get_running_loop().run_in_executor(self.pool, fn, *args)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coro)

    def enqueue(self, queue: str, jobs: list[NewJob], now_ms: int = T0) -> list[int]:
        return self.run(self.hot.enqueue_jobs(queue, NewJobBatch(list(jobs)), now_ms)).to_list()

    def dequeue(self, queue: str, priority: int, limit: int, claim: str, dry_run: bool = False) -> list[ClaimedJob]:
        claimed = self.run(self.hot.dequeue_jobs(queue, priority, limit, claim, T0, dry_run))
        return [ClaimedJob._make(job) for job in claimed.to_list()]

    def ack(self, queue: str, succeeded: list[AckItem], failed: list[AckItem], now_ms: int = T0) -> None:
        self.run(self.hot.ack_jobs(queue, AckGroup(list(succeeded), list(failed)), now_ms))

    def close(self) -> None:
        self.hot.close()
        self.store.close()
        self.loop.close()
        self.pool.shutdown()


@pytest.fixture
def server() -> MariaDBServer:
    shared = shared_server()
    shared.drop_queue_databases()
    return shared


@pytest.fixture
def harness(server: MariaDBServer) -> Iterator[Harness]:
    h = Harness(MySQLStore("1", config_for(server), pool_size=4))
    h.store.create_queue(PY, 3)
    h.store.create_queue(RS, 3)
    try:
        yield h
    finally:
        h.close()


def jobs_of_every_kind() -> list[NewJob]:
    status = 'it\'s \\ a "status"\n\x00\u00e9\u4e2d' * 400  # escapes, unicode, cut at 5,000 characters
    return [
        NewJob(1, b"plain", T0, 3),
        NewJob(2, bytes(range(256)), T0 - 5, 1, "x"),
        NewJob(1, b"", T0 + 60_000, 2, status),
        NewJob(3, b"\x00'\\\"", 0, 1),  # run_after before TIMESTAMP's range: clamped
        NewJob(1, b"later", 2**41, 5),  # past 2038: clamped
        NewJob(2, b"second of p2", T0, 4),
    ]


def records(store: MySQLStore, queue: str, keys: list[tuple[int, int]]) -> list[JobRecord]:
    return store.lookup_jobs(queue, keys, True)


def test_enqueue_writes_what_the_python_store_writes(harness: Harness) -> None:
    jobs = jobs_of_every_kind()
    py_ids = harness.store.enqueue_jobs(PY, jobs, T0)
    rs_ids = harness.enqueue(RS, jobs)
    assert rs_ids == py_ids == [1, 1, 2, 1, 3, 2]
    keys = [(job.priority, local_id) for job, local_id in zip(jobs, rs_ids, strict=True)]
    rs_records = records(harness.store, RS, keys)
    assert rs_records == records(harness.store, PY, keys)
    assert len(rs_records) == len(jobs)
    assert len(rs_records[2].custom_status) == 5000
    assert rs_records[1].body == bytes(range(256))
    assert harness.enqueue(RS, []) == []


def test_claimed_jobs_come_in_claim_order(harness: Harness) -> None:
    """Oldest run_after first, then lowest id, on both paths: the SELECT of the claimed rows has
    no ORDER BY (the rows are sorted after reading them)."""
    run_afters = [T0 - 10, T0 - 30, T0 - 10, T0 - 20, T0 - 30, T0]
    jobs = [NewJob(1, f"j{k}".encode(), run_after, 1) for k, run_after in enumerate(run_afters)]
    expected = [b"j1", b"j4", b"j3", b"j0", b"j2", b"j5"]
    for queue in (PY, RS):
        assert harness.enqueue(queue, jobs) == [1, 2, 3, 4, 5, 6]
    claimed = harness.dequeue(RS, 1, 10, "order")
    assert [job.body for job in claimed] == expected
    assert [job.body for job in harness.store.dequeue_jobs(PY, 1, 10, "order", T0, False)] == expected
    # a claim already used: the redo tells our rows from the earlier ones, still in order
    assert harness.enqueue(RS, jobs) == [7, 8, 9, 10, 11, 12]
    assert [job.body for job in harness.dequeue(RS, 1, 10, "order")] == expected


@pytest.mark.parametrize("strategy", ["last_insert_id", "returning", "per_row"])
def test_every_id_strategy(server: MariaDBServer, strategy: str) -> None:
    h = Harness(MySQLStore("1", config_for(server), insert_id_strategy=strategy))
    try:
        h.store.create_queue(RS, 2)
        jobs = [NewJob(1 + i % 2, f"j{i}".encode(), T0, 1) for i in range(7)]
        ids = h.enqueue(RS, jobs)
        assert ids == [1, 1, 2, 2, 3, 3, 4]
        found = records(h.store, RS, [(job.priority, i) for job, i in zip(jobs, ids, strict=True)])
        assert [r.body for r in found] == [job.body for job in jobs]
    finally:
        h.close()


def test_dequeue_claims_what_the_python_store_claims(harness: Harness) -> None:
    jobs = [NewJob(1, f"job-{i}".encode(), T0 - (i % 3) * 1000, 3) for i in range(12)]
    jobs.append(NewJob(1, b"not yet", T0 + 1, 3))
    harness.store.enqueue_jobs(PY, jobs, T0)
    harness.enqueue(RS, jobs)

    peeked = harness.dequeue(RS, 1, 5, "dry", dry_run=True)
    assert peeked == harness.store.dequeue_jobs(PY, 1, 5, "dry", T0, True)
    assert len(peeked) == 5
    assert harness.store.count_jobs(RS, JobFilter(JobState.IN_PROGRESS, 1, T0), None) == 0

    first = harness.dequeue(RS, 1, 5, "claim-a")
    assert first == harness.store.dequeue_jobs(PY, 1, 5, "claim-a", T0, False)
    assert [job.local_id for job in first] == [job.local_id for job in peeked]
    rest = harness.dequeue(RS, 1, 100, "claim-b")
    assert rest == harness.store.dequeue_jobs(PY, 1, 100, "claim-b", T0, False)
    assert len(rest) == 7  # the job not due yet stays
    keys = [(1, i) for i in range(1, 14)]
    assert records(harness.store, RS, keys) == records(harness.store, PY, keys)
    assert harness.dequeue(RS, 1, 10, "claim-c") == []
    assert harness.dequeue(RS, 1, 0, "claim-d") == []
    with pytest.raises(ValueError, match="claim descriptor longer"):
        harness.dequeue(RS, 1, 1, "c" * 201)


def test_a_reused_claim_returns_only_the_jobs_claimed_now(harness: Harness) -> None:
    for queue in (PY, RS):
        harness.store.enqueue_jobs(queue, [NewJob(1, f"j{i}".encode(), T0, 1) for i in range(4)], T0)
    assert [j.local_id for j in harness.dequeue(RS, 1, 2, "same")] == [1, 2]
    assert [j.local_id for j in harness.dequeue(RS, 1, 2, "same")] == [3, 4]
    harness.store.dequeue_jobs(PY, 1, 2, "same", T0, False)
    harness.store.dequeue_jobs(PY, 1, 2, "same", T0, False)
    keys = [(1, i) for i in range(1, 5)]
    assert records(harness.store, RS, keys) == records(harness.store, PY, keys)


def test_acks_settle_as_the_python_store_settles(harness: Harness) -> None:
    jobs = [NewJob(1 + i % 2, f"job-{i}".encode(), T0, 1 + i % 3) for i in range(10)]
    for queue in (PY, RS):
        harness.store.enqueue_jobs(queue, jobs, T0)
        for priority in (1, 2):
            harness.store.dequeue_jobs(queue, priority, 100, f"claim-{priority}", T0, False)
    succeeded = [AckItem(1, 1, "done"), AckItem(2, 1, "done"), AckItem(1, 2), AckItem(1, 2)]  # a duplicate
    failed = [
        AckItem(1, 3, "retry", 5_000),  # attempts left: back to PENDING later
        AckItem(2, 2, "boom", 0),
        AckItem(2, 3, "boom", 0),
        AckItem(2, 4, "retry", 1_000),
        AckItem(1, 4, "", 0),
        AckItem(1, 99, "no such job", 0),
    ]
    harness.store.ack_jobs(PY, succeeded, failed, T0 + 10)
    harness.ack(RS, succeeded, failed, T0 + 10)
    harness.ack(RS, [], [])
    keys = [(job.priority, i // 2 + 1) for i, job in enumerate(jobs)]
    rs_records = records(harness.store, RS, keys)
    assert rs_records == records(harness.store, PY, keys)
    states = {(r.priority, r.local_id): r.state for r in rs_records}
    assert states[(1, 1)] == JobState.SUCCEEDED
    assert {states[(1, 3)], states[(2, 2)], states[(2, 3)]} <= {JobState.PENDING, JobState.FAILED}
    # An ack of a job no longer in progress changes nothing.
    again = [AckItem(1, 1, "again")]
    harness.ack(RS, [], again, T0 + 20)
    assert records(harness.store, RS, [(1, 1)]) == [r for r in rs_records if (r.priority, r.local_id) == (1, 1)]


def test_a_missing_queue_and_an_unsupported_priority(harness: Harness) -> None:
    with pytest.raises(QueueNotFoundError):
        harness.enqueue("gone", [NewJob(1, b"x", T0, 1)])
    with pytest.raises(QueueNotFoundError):
        harness.dequeue("gone", 1, 5, "claim")
    with pytest.raises(QueueNotFoundError):
        harness.ack("gone", [AckItem(1, 1)], [])
    with pytest.raises(QueueNotFoundError):
        harness.dequeue(RS, 3 + 1, 5, "claim")  # no table for that priority
    with pytest.raises(PinLaterError) as refused:
        harness.enqueue(RS, [NewJob(200, b"x", T0, 1)])
    assert refused.value.code == ErrorCode.PRIORITY_NOT_SUPPORTED
    with pytest.raises(PinLaterError) as invalid:
        harness.dequeue("bad-name", 1, 5, "claim")
    assert invalid.value.code == ErrorCode.QUEUE_NAME_INVALID


def _refusal(fn: Callable[[], object]) -> str:
    with pytest.raises(PinLaterError) as refused:
        fn()
    assert refused.value.code == ErrorCode.ENQUEUE_REJECTED
    return refused.value.message


def test_bodies_at_the_tables_limit_and_over_it(harness: Harness, server: MariaDBServer) -> None:
    for queue in (PY, RS):
        server.query(f"ALTER TABLE `plq_1_{queue}`.`jobs_p1` MODIFY body BLOB NOT NULL")
    at_limit = [NewJob(1, b"a" * BLOB_BYTES, T0, 1), NewJob(2, b"b" * (BLOB_BYTES + 1), T0, 1)]
    assert harness.enqueue(RS, at_limit) == harness.store.enqueue_jobs(PY, at_limit, T0)
    over = [NewJob(2, b"ok", T0, 1), NewJob(1, b"c" * (BLOB_BYTES + 1), T0, 1)]
    rs_message = _refusal(lambda: harness.enqueue(RS, over))
    py_message = _refusal(lambda: harness.store.enqueue_jobs(PY, over, T0))
    assert rs_message == py_message.replace(PY, RS)
    assert "the body of job 1 (counting from 0)" in rs_message
    # Nothing of the refused batch was written.
    assert harness.store.count_jobs(RS, JobFilter(JobState.PENDING, 2, T0), None) == 1


def test_a_column_narrowed_behind_the_cache_is_refused_not_truncated(harness: Harness, server: MariaDBServer) -> None:
    long_body = [NewJob(1, b"d" * (BLOB_BYTES + 10), T0, 1)]
    assert harness.enqueue(RS, long_body) == [1]  # the MEDIUMBLOB is now cached
    server.query(f"DELETE FROM `plq_1_{RS}`.`jobs_p1`")
    server.query(f"ALTER TABLE `plq_1_{RS}`.`jobs_p1` MODIFY body BLOB NOT NULL")
    message = _refusal(lambda: harness.enqueue(RS, long_body))
    assert "over the limit of 65535 bytes" in message
    assert harness.store.count_jobs(RS, JobFilter(JobState.PENDING, 1, T0), None) == 0


def test_concurrent_calls(harness: Harness) -> None:
    async def main() -> None:
        batches = [[NewJob(1, f"{k}-{i}".encode(), T0, 1) for i in range(20)] for k in range(16)]
        results = await asyncio.gather(*(harness.hot.enqueue_jobs(RS, NewJobBatch(b), T0) for b in batches))
        ids = [i for r in results for i in r.to_list()]
        assert sorted(ids) == list(range(1, 321))
        claims = await asyncio.gather(*(harness.hot.dequeue_jobs(RS, 1, 25, f"c{k}", T0, False) for k in range(16)))
        claimed = [job[0] for c in claims for job in c.to_list()]
        assert sorted(claimed) == list(range(1, 321))  # every job once, none twice
        acks = [AckGroup([(1, job[0], "", 0) for job in c.to_list()], []) for c in claims]
        await asyncio.gather(*(harness.hot.ack_jobs(RS, a, T0) for a in acks))

    harness.run(main())
    assert harness.store.count_jobs(RS, JobFilter(JobState.SUCCEEDED, 1, T0), None) == 320
    assert 1 <= harness.hot.worker_count <= harness.store.pool_size


def test_a_cancelled_call_and_a_second_event_loop(harness: Harness) -> None:
    async def cancel_one() -> list[int]:
        task = asyncio.ensure_future(harness.hot.enqueue_jobs(RS, NewJobBatch([(1, b"c", T0, 1, "")]), T0))
        await asyncio.sleep(0)  # the call is with a worker
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        ids = await harness.hot.enqueue_jobs(RS, NewJobBatch([(1, b"d", T0, 1, "")]), T0)
        return ids.to_list()

    assert len(harness.run(cancel_one())) == 1

    async def on_another_loop() -> list[int]:
        ids = await harness.hot.enqueue_jobs(RS, NewJobBatch([(1, b"e", T0, 1, "")]), T0)
        return ids.to_list()

    assert len(asyncio.run(on_another_loop())) == 1  # the wake-up socket moved to this loop
    assert len(harness.enqueue(RS, [NewJob(1, b"f", T0, 1)])) == 1  # and back
    # The cancelled enqueue still ran, as it would have on the thread pool.
    wait_for(lambda: harness.store.count_jobs(RS, JobFilter(JobState.PENDING, 1, T0), None) == 4, 10, what="4 jobs")


def test_closed_off_the_loop_the_loop_stops_watching_on_its_own_thread(harness: Harness) -> None:
    assert len(harness.enqueue(RS, [NewJob(1, b"x", T0, 1)])) == 1
    fd = harness.hot._native.wake_fd()
    harness.hot.close()  # no loop running here, as on the server's thread pool
    harness.run(asyncio.sleep(0))  # the loop runs what close scheduled
    assert not harness.loop.remove_reader(fd)
    with pytest.raises(ShardConnectionError, match="closed"):
        harness.enqueue(RS, [NewJob(1, b"y", T0, 1)])


def test_call_blocking_answers_as_the_workers_do(harness: Harness) -> None:
    shard = harness.hot._native  # the benchmark's alternative way in
    batch = NewJobBatch([(1, b"a", T0, 2, ""), (1, b"b", T0, 2, "")])
    ids, error = shard.call_blocking("enqueue_jobs", RS, f"plq_1_{RS}", T0, jobs=batch)
    assert error is None and ids.to_list() == harness.store.enqueue_jobs(PY, [NewJob(1, b"a", T0, 2)] * 2, T0)
    claimed, error = shard.call_blocking("dequeue_jobs", RS, f"plq_1_{RS}", T0, priority=1, limit=5, claim="c")
    assert error is None and [job[0] for job in claimed.to_list()] == [1, 2]
    _, error = shard.call_blocking("ack_jobs", "gone", "plq_1_gone", T0, acks=AckGroup([(1, 1, "", 0)], []))
    assert error == ("queue_not_found", "gone", 0, False)
    with pytest.raises(ValueError, match="bad call"):
        shard.call_blocking("enqueue_jobs", RS, f"plq_1_{RS}", T0)


# -- the statements, as the server saw them ------------------------------------------------------


@pytest.fixture(scope="module")
def own_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MariaDBServer]:
    """A MariaDB to log, lock and restart; short lock waits."""
    directory = tmp_path_factory.mktemp("mariadb-native-hot")
    with MariaDBServer(directory, extra_args=("--innodb-lock-wait-timeout=1",)) as started:
        yield started


def _logged(server: MariaDBServer, user: str) -> list[str]:
    rows = server.query(
        "SELECT CONVERT(argument USING utf8mb4) FROM mysql.general_log"
        " WHERE command_type = 'Query' AND user_host LIKE %s ORDER BY event_time",
        (f"{user}[%",),
    )
    return [str(row[0]) for row in rows]


def test_the_server_sees_the_statements_the_python_store_sends(own_server: MariaDBServer) -> None:
    own_server.drop_queue_databases()
    h = Harness(MySQLStore("1", config_for(own_server), pool_size=1))
    try:
        h.store.create_queue(PY, 2)
        h.store.create_queue(RS, 2)
        jobs = jobs_of_every_kind()[:3]  # priorities 1 and 2
        # Both paths connected, before the log starts.
        h.store.ping()
        h.dequeue(RS, 1, 1, "warm", dry_run=True)
        own_server.query("SET GLOBAL log_output = 'TABLE'")
        own_server.query("TRUNCATE mysql.general_log")
        own_server.query("SET GLOBAL general_log = 1")
        try:

            def py_calls() -> None:
                h.store.enqueue_jobs(PY, jobs, T0)
                h.store.dequeue_jobs(PY, 1, 1, "peek", T0, True)
                claimed = h.store.dequeue_jobs(PY, 1, 5, "claim", T0, False)
                h.store.ack_jobs(PY, [AckItem(1, claimed[0].local_id, "ok")], [AckItem(1, 2, "no", 1000)], T0)

            def rs_calls() -> None:
                h.enqueue(RS, jobs)
                h.dequeue(RS, 1, 1, "peek", dry_run=True)
                claimed = h.dequeue(RS, 1, 5, "claim")
                h.ack(RS, [AckItem(1, claimed[0].local_id, "ok")], [AckItem(1, 2, "no", 1000)])

            py_calls()
            py_log = _logged(own_server, own_server.user)
            own_server.query("TRUNCATE mysql.general_log")
            rs_calls()
            rs_log = _logged(own_server, own_server.user)
        finally:
            own_server.query("SET GLOBAL general_log = 0")
        assert len(py_log) >= 10  # INSERTs, COMMITs, SELECTs, UPDATEs
        # The same statements in the same order; the Rust path sends some of them together, in
        # one round trip (the log shows such a query once): the claim's UPDATE with its SELECT,
        # an ack's UPDATEs with their COMMIT.
        statements = [statement for query in rs_log for statement in query.split(";\n")]
        assert statements == [statement.replace(PY, RS) for statement in py_log]
        # The claim: 2 for 3; the ack of two groups: 1 for 8 (a failure group's expiry, tally,
        # failure and index of retried jobs by expiry, the tally's reset and count: #18).
        assert len(rs_log) == len(py_log) - 8
    finally:
        h.close()


def test_lock_wait_timeouts_are_retried_then_reported(own_server: MariaDBServer) -> None:
    own_server.drop_queue_databases()
    h = Harness(MySQLStore("1", config_for(own_server), pool_size=1, num_auto_retries=1))
    blocker = own_server.admin_connection()
    try:
        h.store.create_queue(RS, 1)
        [local_id] = h.enqueue(RS, [NewJob(1, b"locked", T0, 1)])
        h.dequeue(RS, 1, 1, "claim-locked")
        with blocker.cursor() as cur:
            cur.execute("BEGIN")
            cur.execute(f"SELECT local_id FROM plq_1_{RS}.jobs_p1 WHERE local_id = %s FOR UPDATE", (local_id,))
        # through the walk's own failure handling: the shard answered, so it is not taken for down
        shard = Shard("1", h.store)
        backend = ShardedBackend(ShardMap([shard]), num_priorities=1, parallelism=1)
        acks = AckGroup([AckItem(1, local_id)], [])
        with pytest.raises(ShardConnectionError, match="1205") as waited:
            h.run(backend.on_shard(shard, h.hot.ack_jobs(RS, acks, T0)))
        assert not waited.value.maybe_applied
        assert waited.value.contention and shard.healthy, "lock waits past the retries are no outage"
        h.run(backend.aclose())
        backend._executor.shutdown(wait=True)
        blocker.rollback()
        h.ack(RS, [AckItem(1, local_id)], [])
        [record] = h.store.lookup_jobs(RS, [(1, local_id)], False)
        assert record.state == JobState.SUCCEEDED
    finally:
        blocker.close()
        h.close()


def test_a_stalled_server_costs_a_call_one_timeout_not_two(own_server: MariaDBServer) -> None:
    """A pooled connection whose call waits out the socket timeout is no stale connection (one
    the server closed fails at once): the call is not run again for free on a fresh one, which
    against a stopped server waited out another timeout."""
    own_server.drop_queue_databases()
    h = Harness(MySQLStore("1", config_for(own_server), pool_size=1, socket_timeout=1.5, num_auto_retries=0))
    pid = own_server.pid
    assert pid is not None
    try:
        h.store.create_queue(RS, 1)
        [local_id] = h.enqueue(RS, [NewJob(1, b"stalled", T0, 1)])  # the Rust session's connection
        h.store.lookup_jobs(RS, [(1, local_id)], False)  # and the Python pool's, both pooled now
        os.kill(pid, signal.SIGSTOP)
        try:
            calls: list[Callable[[], object]] = [
                lambda: h.dequeue(RS, 1, 1, "claim-stalled"),
                lambda: h.store.lookup_jobs(RS, [(1, local_id)], False),
            ]
            for call in calls:
                started = time.monotonic()
                with pytest.raises(ShardConnectionError):
                    call()
                took = time.monotonic() - started
                assert took < 2.6, f"one socket timeout (1.5 s), not a second on a fresh connection: {took:.1f} s"
        finally:
            os.kill(pid, signal.SIGCONT)
        assert [j.local_id for j in h.dequeue(RS, 1, 1, "claim-after")] == [local_id], "served again at once"
    finally:
        h.close()


def test_a_server_restart_mid_use(own_server: MariaDBServer) -> None:
    own_server.drop_queue_databases()
    h = Harness(MySQLStore("1", config_for(own_server), pool_size=3, socket_timeout=2.0, num_auto_retries=1))
    try:
        h.store.create_queue(RS, 1)

        async def enqueue_in_parallel(n: int) -> list[list[int]]:
            batches = [NewJobBatch([(1, f"r{k}".encode(), T0, 1, "")]) for k in range(n)]
            results = await asyncio.gather(*(h.hot.enqueue_jobs(RS, b, T0) for b in batches))
            return [r.to_list() for r in results]

        assert len(h.run(enqueue_in_parallel(6))) == 6  # several workers, each with a connection
        workers = h.hot.worker_count
        assert workers >= 2
        pid = own_server.pid
        own_server.stop()  # SIGTERM to that PID: every pooled connection dies
        assert pid is not None and own_server.pid is None
        with pytest.raises(ShardConnectionError) as down:
            h.enqueue(RS, [NewJob(1, b"while down", T0, 1)])
        assert not down.value.maybe_applied
        assert "MySQL error 2003: Can't connect to MySQL server on '127.0.0.1'" in down.value.detail
        own_server.start()  # same port
        # Every worker's connection is dead; not one call fails on them, and none is repeated.
        assert all(len(ids) == 1 for ids in h.run(enqueue_in_parallel(6)))
        assert len(h.enqueue(RS, [NewJob(1, b"after", T0, 1)])) == 1
        assert h.store.count_jobs(RS, JobFilter(JobState.PENDING, 1, T0), None) == 13
        claimed = h.dequeue(RS, 1, 100, "after-restart")
        assert len(claimed) == 13
        assert len({job.body for job in claimed}) == 7  # r0..r5 twice, "after" once: no duplicates
        own_server.restart()
        h.ack(RS, [AckItem(1, job.local_id) for job in claimed], [])
        assert h.store.count_jobs(RS, JobFilter(JobState.SUCCEEDED, 1, T0), None) == 13
    finally:
        h.close()


class CommitCutter:
    """A TCP proxy in front of MariaDB that, when armed, lets the next COMMIT (alone or ending a
    multi-statement query) through and then cuts the client's connection instead of passing on
    the server's answer: a COMMIT applied whose outcome the client never learns."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream = ("127.0.0.1", upstream_port)
        self.armed = False
        self.cuts = 0
        self._cutting = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.upstream)
            threading.Thread(target=self._pump, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, True), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, answers: bool) -> None:
        try:
            while data := src.recv(65536):
                # a COMMIT alone, or last of statements sent together (an ack's)
                if not answers and self.armed and (b"\x03COMMIT" in data or data.endswith(b";\nCOMMIT")):
                    self.armed = False
                    self._cutting.set()
                elif answers and self._cutting.is_set():
                    self._cutting.clear()
                    self.cuts += 1
                    break  # the COMMIT's answer: dropped, and the connection with it
                dst.sendall(data)
        except OSError:
            pass
        for sock in (src, dst):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

    def close(self) -> None:
        self._listener.close()


def test_an_enqueue_whose_commit_was_cut_off_is_not_repeated(server: MariaDBServer) -> None:
    cutter = CommitCutter(server.port)
    config = MySQLShardConfig(Endpoint(server.host, cutter.port), server.user, server.password)
    h = Harness(MySQLStore("1", config, pool_size=1, num_auto_retries=2))
    try:
        h.store.create_queue(RS, 1)
        assert h.enqueue(RS, [NewJob(1, b"first", T0, 1)]) == [1]  # connected, through the proxy
        cutter.armed = True
        with pytest.raises(ShardConnectionError) as cut:
            h.enqueue(RS, [NewJob(1, b"cut", T0, 1), NewJob(1, b"cut", T0, 1)])
        assert cut.value.maybe_applied
        assert "may have been applied: not repeated" in cut.value.detail
        assert cutter.cuts == 1
        assert h.store.count_jobs(RS, JobFilter(JobState.PENDING, 1, T0), None) == 3, "applied once, not twice"
        # An ack is harmless to repeat: the same cut is retried on a new connection.
        claimed = h.dequeue(RS, 1, 10, "claim")
        cutter.armed = True
        h.ack(RS, [AckItem(1, job.local_id) for job in claimed], [])
        assert cutter.cuts == 2
        assert h.store.count_jobs(RS, JobFilter(JobState.SUCCEEDED, 1, T0), None) == 3
    finally:
        h.close()
        cutter.close()


def test_the_store_hands_out_the_native_hot_path(server: MariaDBServer) -> None:
    store = MySQLStore("1", config_for(server))
    loop = asyncio.new_event_loop()
    try:

        def offload(fn: Callable[..., T], /, *args: object) -> Awaitable[T]:
            return loop.run_in_executor(None, fn, *args)

        hot = store.hot_path(offload)
        assert isinstance(hot, NativeMySQLHotPath)
        store.create_queue(RS, 1)
        ids = loop.run_until_complete(hot.enqueue_jobs(RS, NewJobBatch([(1, b"x", T0, 1, "")]), T0))
        assert ids.to_list() == [1]
        fd = hot._native.wake_fd()
        loop.run_until_complete(store.aclose())
        assert not loop.remove_reader(fd), "aclose stopped watching the wake-up socket"
    finally:
        store.close()  # closes the hot path's workers too
        loop.close()
    assert hot.worker_count == 0


def test_a_claim_rolled_back_by_deadlocks_is_run_again_past_the_common_retries(server: MariaDBServer) -> None:
    """A dequeue whose claim InnoDB rolls back for a deadlock runs again three times beyond
    ``num_auto_retries`` (0 here), then fails as the shard's error. The deadlocks come from a
    trigger on the jobs table that raises MySQL error 1213 for the first ``fail`` claims, counted
    in a table that a rollback leaves alone (Aria, not transactional)."""
    h = Harness(MySQLStore("1", config_for(server), pool_size=4, num_auto_retries=0))
    h.store.create_queue(RS, 3)
    db = f"plq_1_{RS}"
    try:
        server.query(f"CREATE TABLE `{db}`.`deadlocks` (n INT NOT NULL, fail INT NOT NULL) ENGINE=Aria")
        server.query(f"INSERT INTO `{db}`.`deadlocks` VALUES (0, 3)")
        server.query(
            f"CREATE TRIGGER `{db}`.`deadlocked_claims` BEFORE UPDATE ON `{db}`.`jobs_p1` FOR EACH ROW "
            f"BEGIN IF (SELECT n < fail FROM `{db}`.`deadlocks`) THEN "
            f"UPDATE `{db}`.`deadlocks` SET n = n + 1; "
            "SIGNAL SQLSTATE '40001' SET MYSQL_ERRNO = 1213, MESSAGE_TEXT = 'Deadlock found (a test trigger)'; "
            "END IF; END"
        )
        first, second = h.enqueue(RS, [NewJob(1, b"one", T0, 1), NewJob(1, b"two", T0, 1)])
        (claimed,) = h.dequeue(RS, 1, 1, "c1")
        assert claimed.local_id == first
        assert server.query(f"SELECT n FROM `{db}`.`deadlocks`") == [(3,)], "three runs rolled back, the fourth claimed"
        server.query(f"UPDATE `{db}`.`deadlocks` SET n = 0, fail = 4")
        with pytest.raises(ShardConnectionError, match="1213"):
            h.dequeue(RS, 1, 1, "c2")
        assert server.query(f"SELECT n FROM `{db}`.`deadlocks`") == [(4,)], "four runs, none more"
        [record] = records(h.store, RS, [(1, second)])
        assert record.state == JobState.PENDING, "the failed claim left the job as it was"
    finally:
        h.close()


def latin1_queue(server: MariaDBServer, queue: str) -> None:
    """A queue on shard 1 as the original made it on a MySQL 5.x: its DDL, in a latin1 database."""
    from tests.backends.test_mysql import ORIGINAL_JOBS_TABLE

    conn = server.admin_connection()
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE plq_1_{queue} CHARACTER SET latin1")
        for priority in (1, 2, 3):
            cur.execute(ORIGINAL_JOBS_TABLE.format(table=f"plq_1_{queue}.jobs_p{priority}"))
    conn.close()


def test_statuses_a_latin1_table_cannot_hold_are_written_as_the_original_wrote_them(
    harness: Harness, server: MariaDBServer
) -> None:
    """The original created its databases in the server's default character set (latin1 on MySQL
    5.x), where MySQL wrote each character a column cannot hold as '?'. Sent as utf8mb4 in strict
    mode, an enqueue holding one was refused (1366), an ack appending one (1267), and every retry
    of it with it: it is fitted to the table's character set and applied, an ack alone or riding
    on a dequeue."""
    latin1_queue(server, "latin")
    ids = harness.enqueue("latin", [NewJob(1, b"a", T0, 2, "new ✓"), NewJob(1, b"b", T0, 2), NewJob(1, b"c", T0, 2)])
    assert harness.store.lookup_jobs("latin", [(1, ids[0])], False)[0].custom_status == "new ?"
    assert len(harness.dequeue("latin", 1, 2, "claim:w|h:1")) == 2
    harness.ack("latin", [AckItem(1, ids[0], " ok é ✓ 日本")], [AckItem(1, ids[1], "boom 💥", 0)])
    done, retried = harness.store.lookup_jobs("latin", [(1, ids[0]), (1, ids[1])], False)
    assert (done.state, done.custom_status) == (JobState.SUCCEEDED, "new ? ok é ? ??")
    assert (retried.state, retried.custom_status) == (JobState.PENDING, "boom ?")
    [third] = harness.dequeue("latin", 1, 1, "claim:w|h:2")
    acks = AckGroup([AckItem(1, third.local_id, "fin ✓")], [])
    harness.run(harness.hot.ack_and_dequeue_jobs("latin", acks, 1, 5, "claim:w|h:3", T0))
    [record] = harness.store.lookup_jobs("latin", [(1, third.local_id)], False)
    assert record.state is JobState.SUCCEEDED and record.custom_status.endswith("fin ?")  # (after "boom ?")


def test_a_keyed_or_expiring_enqueue_with_a_status_latin1_cannot_hold_is_fitted_to_it(
    harness: Harness, server: MariaDBServer
) -> None:
    """As a plain enqueue's: the jobs with a dedup key or an expiry (placed by the Python store)
    were refused (1366) in their one transaction, now run again with the statuses fitted."""
    from pinlater.backends.base import KeyedJob

    latin1_queue(server, "latink")
    jobs = [
        KeyedJob(NewJob(1, b"a", T0, 2, "keyed ✓"), "key-1"),
        KeyedJob(NewJob(2, b"b", T0, 2, "expiring é 日本"), None, expire_at_ms=T0 + 60_000),
    ]
    placed = harness.store.enqueue_keyed_jobs("latink", jobs, T0)
    found = harness.store.lookup_jobs("latink", [(1, placed[0].local_id)], False)
    found += harness.store.lookup_jobs("latink", [(2, placed[1].local_id)], False)
    assert [(r.custom_status, r.dedup_key) for r in found] == [("keyed ?", "key-1"), ("expiring é ??", None)]
    again = harness.store.enqueue_keyed_jobs("latink", [jobs[0]], T0)
    assert again[0].local_id == placed[0].local_id and again[0].deduplicated, "the key is held"


def test_a_checkpoint_status_a_latin1_table_cannot_hold_is_fitted_to_it(
    harness: Harness, server: MariaDBServer
) -> None:
    """As an ack's: the prepended status is written with '?' for what latin1 cannot hold."""
    from pinlater.backends.base import CheckpointItem

    latin1_queue(server, "latinc")
    [local_id] = harness.enqueue("latinc", [NewJob(1, b"a", T0, 2)])
    assert len(harness.dequeue("latinc", 1, 1, "claim:w|h:1")) == 1
    item = CheckpointItem(1, local_id, T0, prepend_custom_status="step ✓ é;")
    assert harness.store.checkpoint_jobs("latinc", [item], "claim:w", T0 + 1) == 1
    [record] = harness.store.lookup_jobs("latinc", [(1, local_id)], False)
    assert (record.state, record.custom_status) == (JobState.IN_PROGRESS, "step ? é;")
