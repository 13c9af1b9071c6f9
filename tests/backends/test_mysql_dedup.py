"""Dedup keys in the MySQL store, beyond the shared contract (``test_dedup_conformance.py``):
queues made without the key table (by the original server), exact comparison of keys, stores
racing on overlapping keys, and the GC walk. Against a real MariaDB."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import random
import re
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from tests.support.mariadb_server import MariaDBServer, shared_server
from tests.support.original_mysql import seed_original_queue
from tests.support.wait import wait_for

from pinlater.backends.base import Enqueued, JobFilter, JobState, KeyedJob, NewJob
from pinlater.backends.mysql import Endpoint, MySQLShardConfig, MySQLStore
from pinlater.backends.sharded import ShardedBackend
from pinlater.backends.shardmap import Shard, ShardMap
from pinlater.clock import ManualClock
from pinlater.errors import QueueNotFoundError
from pinlater.monitor import Monitor, MonitorPolicy
from pinlater.server.metrics import Metrics

pytestmark = pytest.mark.mysql

Q = "dedup_q"
T0 = 1_700_000_000_000


def keyed(key: str, priority: int = 1, window_ms: int = 0) -> KeyedJob:
    return KeyedJob(NewJob(priority, key.encode(), T0, 2), key, window_ms)


@pytest.fixture
def server() -> MariaDBServer:
    shared = shared_server()
    shared.drop_queue_databases()
    return shared


@pytest.fixture
def make_store(server: MariaDBServer) -> Iterator[Callable[..., MySQLStore]]:
    stores: list[MySQLStore] = []

    def make(**kwargs: Any) -> MySQLStore:
        store = MySQLStore(
            "1", MySQLShardConfig(Endpoint(server.host, server.port), server.user, server.password), **kwargs
        )
        stores.append(store)
        return store

    yield make
    for store in stores:
        store.close()


def _tables(server: MariaDBServer, database: str) -> list[str]:
    rows = server.query("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s", (database,))
    return sorted(str(row[0]) for row in rows)


def _create_table_ddl(server: MariaDBServer, table: str) -> str:
    """The table's DDL, without its next AUTO_INCREMENT value."""
    [(_, ddl)] = server.query(f"SHOW CREATE TABLE {table}")
    return re.sub(r" AUTO_INCREMENT=\d+", "", str(ddl))


def test_a_queue_the_original_made_gets_the_key_table_from_its_first_dedup_enqueue(
    server: MariaDBServer, make_store: Callable[..., MySQLStore]
) -> None:
    conn = server.admin_connection()
    try:
        seed_original_queue(conn, "1", "legacy", [(1, 0, b"old")])
    finally:
        conn.close()
    store = make_store()
    # Reads and GC need no key table, and make none. (The first read migrates the queue for
    # expiry, #18: the expire_at column and the expiry tables; see test_mysql_job_control.py.)
    [plain] = store.scan_jobs("legacy", JobFilter(JobState.PENDING, 1, T0, future=None), 10)
    jobs_ddl = _create_table_ddl(server, "plq_1_legacy.jobs_p1")
    assert plain.dedup_key is None
    assert [r.dedup_key for r in store.lookup_jobs("legacy", [(1, plain.local_id)], False)] == [None]
    assert store.gc_dedup_keys("legacy", T0, 10) == 0
    assert _tables(server, "plq_1_legacy") == ["expired_count", "expiring", "jobs_p1", "jobs_p2", "jobs_p3"]

    [first] = store.enqueue_keyed_jobs("legacy", [keyed("k")], T0)
    [again] = store.enqueue_keyed_jobs("legacy", [keyed("k")], T0 + 1)
    assert not first.deduplicated and again == Enqueued(1, first.local_id, True)
    assert _tables(server, "plq_1_legacy") == [
        "dedup_keys",
        "expired_count",
        "expiring",
        "jobs_p1",
        "jobs_p2",
        "jobs_p3",
    ]
    assert _create_table_ddl(server, "plq_1_legacy.jobs_p1") == jobs_ddl  # the original's table as it was
    records = store.lookup_jobs("legacy", [(1, plain.local_id), (1, first.local_id)], True)
    assert [(r.body, r.dedup_key) for r in records] == [(b"old", None), (b"k", "k")]


def test_gc_of_a_missing_queue_is_queue_not_found(make_store: Callable[..., MySQLStore]) -> None:
    with pytest.raises(QueueNotFoundError):
        make_store().gc_dedup_keys("no_such_queue", T0, 10)


def test_keys_differing_only_in_trailing_spaces_case_or_nul_are_distinct(
    make_store: Callable[..., MySQLStore],
) -> None:
    store = make_store()
    store.create_queue(Q, 3)
    keys = ["a", "a ", "a\x00", "A", "\u00e9", "e\u0301"]  # the last two: one text, two spellings
    got = store.enqueue_keyed_jobs(Q, [keyed(k) for k in keys], T0)
    assert not any(e.deduplicated for e in got)
    records = store.lookup_jobs(Q, [(1, e.local_id) for e in got], False)
    assert [r.dedup_key for r in records] == keys


def _deadlocks(server: MariaDBServer) -> int:
    [(_, value)] = server.query("SHOW GLOBAL STATUS LIKE 'Innodb_deadlocks'")
    return int(value)


def test_stores_racing_on_overlapping_keys_make_one_job_per_key(
    server: MariaDBServer, make_store: Callable[..., MySQLStore]
) -> None:
    """Two stores (as two servers), many threads, each call a few of five keys in its own
    order: every key ends with exactly one job, every answer for a key names it, and InnoDB
    found no deadlock on the way (keys are locked in one order, without gap locks)."""
    stores = [make_store(pool_size=4, num_auto_retries=0), make_store(pool_size=4, num_auto_retries=0)]
    stores[0].create_queue(Q, 3)
    keys = [f"key-{i}" for i in range(5)]
    rng = random.Random(17)
    calls = [rng.sample(keys, rng.randint(2, 5)) for _ in range(48)]

    def call(i: int) -> list[tuple[str, Enqueued]]:
        chosen = calls[i]
        got = stores[i % 2].enqueue_keyed_jobs(Q, [keyed(k, priority=1 + i % 3) for k in chosen], T0)
        return list(zip(chosen, got, strict=True))

    deadlocks = _deadlocks(server)
    with ThreadPoolExecutor(8) as pool:
        answers = list(itertools.chain.from_iterable(pool.map(call, range(len(calls)))))
    assert _deadlocks(server) == deadlocks
    by_key: dict[str, set[tuple[int, int]]] = {}
    for key, e in answers:
        by_key.setdefault(key, set()).add((e.priority, e.local_id))
    assert all(len(jobs) == 1 for jobs in by_key.values()), by_key
    assert sum(not e.deduplicated for _, e in answers) == len(by_key)
    total = sum(stores[0].count_jobs(Q, JobFilter(JobState.PENDING, p, T0), None) for p in (1, 2, 3))
    assert total == len(by_key)


def test_the_gc_walk_goes_on_past_records_still_held(make_store: Callable[..., MySQLStore]) -> None:
    """Each call looks at no more than its limit of records whose window passed, and the next
    call goes on after them, so records behind many held ones are reached."""
    store = make_store()
    store.create_queue(Q, 3)
    store.enqueue_keyed_jobs(Q, [keyed(f"a{i}") for i in range(6)], T0)  # PENDING: held
    store.enqueue_keyed_jobs(Q, [keyed(f"b{i}", priority=2) for i in range(3)], T0 + 1)  # later in the walk
    assert store.delete_jobs(Q, JobFilter(JobState.PENDING, 2, T0, future=None), 10) == 3
    assert [store.gc_dedup_keys(Q, T0 + 2, 2) for _ in range(6)] == [0, 0, 0, 2, 1, 0]
    fresh = store.enqueue_keyed_jobs(Q, [keyed(f"b{i}") for i in range(3)], T0 + 3)
    assert not any(e.deduplicated for e in fresh)


def test_a_small_max_allowed_packet_cuts_the_key_statements(tmp_path: Path) -> None:
    """The key statements of one call stay under max_allowed_packet as the job INSERTs do: a
    request of many long keys (whose quotes escape to twice their size) is cut into several
    statements, not refused by the server as one packet too large."""
    with MariaDBServer(tmp_path / "small-packet", extra_args=("--max-allowed-packet=16384",)) as server:
        store = MySQLStore(
            "1", MySQLShardConfig(Endpoint(server.host, server.port), server.user, server.password), pool_size=1
        )
        try:
            store.create_queue(Q, 3)
            keys = [f"{i:04d}" + "'\\" * 150 for i in range(120)]  # ~37 KB of keys, ~73 KB escaped
            jobs = [keyed(k, priority=1 + i % 3) for i, k in enumerate(keys)]
            first = store.enqueue_keyed_jobs(Q, jobs, T0)
            assert not any(e.deduplicated for e in first)
            again = store.enqueue_keyed_jobs(Q, list(reversed(jobs)), T0 + 1)
            assert [(e.priority, e.local_id) for e in again] == [(e.priority, e.local_id) for e in reversed(first)]
            assert all(e.deduplicated for e in again)
            records = {
                (p, r.local_id): r.dedup_key
                for p in (1, 2, 3)
                for r in store.lookup_jobs(Q, [(p, e.local_id) for e in first if e.priority == p], False)
            }
            assert [records[(e.priority, e.local_id)] for e in first] == keys
            store.delete_jobs(Q, JobFilter(JobState.PENDING, 1, T0, future=None), 1000)
            assert store.gc_dedup_keys(Q, T0 + 2, 1000) == 40
        finally:
            store.close()


def _lock_waits(server: MariaDBServer) -> set[int]:
    """The connections whose transaction waits for a lock. InnoDB refreshes this table only
    when it was not read for 0.1 s: poll it more slowly than that."""
    rows = server.query("SELECT trx_mysql_thread_id FROM information_schema.INNODB_TRX WHERE trx_state = 'LOCK WAIT'")
    return {int(row[0]) for row in rows}


def _hash(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


def test_gc_forgets_in_the_lock_order_of_enqueues(server: MariaDBServer, make_store: Callable[..., MySQLStore]) -> None:
    """GC deletes the records it forgets in key-hash order, the order an enqueue locks them
    in: a GC pass waiting for a key an enqueue holds holds no other key that the enqueue goes
    on to lock, so the two never deadlock (an enqueue's locks are taken here by hand)."""
    store = make_store(num_auto_retries=0)
    store.create_queue(Q, 3)
    early, late = next(
        (a, b)
        for a, b in ((f"early-{i}", f"late-{i}") for i in range(100))
        if _hash(a) > _hash(b)  # the walk meets "early" first; an enqueue locks "late" first
    )
    store.enqueue_keyed_jobs(Q, [keyed(early)], T0)
    store.enqueue_keyed_jobs(Q, [keyed(late)], T0 + 1)
    assert store.delete_jobs(Q, JobFilter(JobState.PENDING, 1, T0 + 1, future=None), 10) == 2
    table = "`plq_1_dedup_q`.`dedup_keys`"
    enqueue = server.admin_connection()
    try:
        with enqueue.cursor() as cur:
            cur.execute("BEGIN")
            cur.execute(f"SELECT key_hash FROM {table} WHERE key_hash = %s FOR UPDATE", (_hash(late),))
            deadlocks = _deadlocks(server)
            waiting = _lock_waits(server)  # none, unless an earlier run left a statement waiting
            with ThreadPoolExecutor(1) as pool:
                gc = pool.submit(store.gc_dedup_keys, Q, T0 + 2, 10)
                wait_for(
                    lambda: _lock_waits(server) - waiting, interval=0.2, what="GC waiting for the key the enqueue holds"
                )
                cur.execute(f"SELECT key_hash FROM {table} WHERE key_hash = %s FOR UPDATE", (_hash(early),))
                cur.execute("COMMIT")
                assert gc.result(timeout=30) == 2
            assert _deadlocks(server) == deadlocks
    finally:
        enqueue.close()


def test_a_damaged_key_table_does_not_stop_the_monitor_on_the_other_queues(
    server: MariaDBServer, make_store: Callable[..., MySQLStore]
) -> None:
    """The key GC of one queue failing (its table damaged by hand) is that queue's problem: the
    monitor still resurrects timed-out claims in the queues after it on the shard."""
    store = make_store()
    for queue in ("a_damaged", "b_fine"):
        store.create_queue(queue, 1)
    server.query("ALTER TABLE plq_1_a_damaged.dedup_keys DROP COLUMN held_until")
    (local_id,) = store.enqueue_jobs("b_fine", [NewJob(1, b"x", T0, 2)], T0)
    assert [j.local_id for j in store.dequeue_jobs("b_fine", 1, 1, "claim-1:w:h", T0, False)] == [local_id]
    clock = ManualClock(T0 + 10_000)
    backend = ShardedBackend(ShardMap([Shard("1", store)]), num_priorities=1, parallelism=2, clock=clock)
    try:
        policy = MonitorPolicy(
            interval_seconds=60,
            max_per_pass=100,
            claim_timeout_ms=1_000,
            succeeded_ttl_ms=3_600_000,
            failed_ttl_ms=3_600_000,
        )
        totals = asyncio.run(Monitor(backend, policy, Metrics()).run_once())
        assert totals["resurrected"] == 1
        (record,) = store.lookup_jobs("b_fine", [(1, local_id)], False)
        assert record.state == JobState.PENDING
    finally:
        backend.close()
