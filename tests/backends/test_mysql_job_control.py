"""Job control (#18) on the MySQL store, beyond the shared contract: queues the original server
made (migrated at first use, and still served to the original's own statements), the expiry
index and its bounds, paged scans that cost a page however deep, schedules and expired counts
in tables of ours, and the Rust hot path (expiry, cancel and the migration) as the server calls
it. Against a real MariaDB."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.support.mariadb_server import MariaDBServer, shared_server
from tests.support.original_mysql import seed_original_queue
from tests.support.wait import wait_for

from pinlater._pinlater import AckGroup
from pinlater.backends.base import (
    AckItem,
    CheckpointItem,
    ClaimedJob,
    JobFilter,
    JobRecord,
    JobState,
    KeyedJob,
    NewJob,
    ScanCursor,
    ScheduleRow,
)
from pinlater.backends.mysql import Endpoint, MySQLShardConfig, MySQLStore
from pinlater.backends.mysql.native_hot import NativeMySQLHotPath
from pinlater.backends.mysql.store import EXPIRY_DRAIN_LIMIT, LAZY_EXPIRY_LIMIT
from pinlater.backends.sharded import ShardedBackend
from pinlater.backends.shardmap import Shard, ShardMap
from pinlater.errors import ShardConnectionError

pytestmark = pytest.mark.mysql

T0 = 1_700_000_000_000
Q = "jc"

#: The original server's statements (MySQLQueries.java), which name their columns: what it keeps
#: sending to a table we migrated.
ORIGINAL_ENQUEUE = (
    "INSERT INTO {table} (state, attempts_allowed, attempts_remaining, custom_status, created_at, run_after, body)"
    " VALUES (0, 2, 2, SUBSTRING('', 1, 5000), NOW(), NOW() - INTERVAL 1 MINUTE, %s)"
)
ORIGINAL_DEQUEUE = "UPDATE {table} SET claim_descriptor = %s, state = 1 WHERE state = 0 AND run_after <= NOW() LIMIT %s"
ORIGINAL_DEQUEUE_SELECT = (
    "SELECT local_id, attempts_allowed, attempts_remaining, updated_at, created_at, body FROM {table}"
    " WHERE claim_descriptor = %s"
)
ORIGINAL_LOOKUP = (
    "SELECT local_id, state, attempts_allowed, attempts_remaining, created_at, run_after, updated_at,"
    " claim_descriptor, custom_status, body FROM {table} WHERE local_id = %s"
)
ORIGINAL_ACK_SUCCEEDED = (
    "UPDATE {table} SET state = 2, custom_status = SUBSTRING(CONCAT(custom_status, %s), 1, 5000) WHERE local_id = %s"
)


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


def expiring(body: str, expire_at_ms: int, priority: int = 1, attempts: int = 3) -> KeyedJob:
    return KeyedJob(NewJob(priority, body.encode(), T0, attempts), None, expire_at_ms=expire_at_ms)


def pending(where_priority: int = 1, now_ms: int = T0) -> JobFilter:
    return JobFilter(JobState.PENDING, where_priority, now_ms, future=None)


def one(store: MySQLStore, queue: str, priority: int, local_id: int) -> JobRecord:
    [record] = store.lookup_jobs(queue, [(priority, local_id)], False)
    return record


def _ddl(server: MariaDBServer, table: str) -> str:
    [(_, ddl)] = server.query(f"SHOW CREATE TABLE {table}")
    return re.sub(r" AUTO_INCREMENT=\d+", "", str(ddl))


def _tables(server: MariaDBServer, database: str) -> list[str]:
    rows = server.query("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s", (database,))
    return sorted(str(row[0]) for row in rows)


def _rows_read(store: MySQLStore, action: Callable[[], object]) -> int:
    """Index and table rows the store's only connection read during ``action`` (pool_size=1)."""

    def counters() -> int:
        with store.pool.transaction() as cur:
            cur.execute("SHOW SESSION STATUS LIKE 'Handler_read%'")
            return sum(int(value) for name, value in cur.fetchall() if name != "Handler_read_key")

    before = counters()
    action()
    return counters() - before - 1  # the SHOW itself reads a row or so


# -- a queue the original server made --------------------------------------------------------------


def test_a_queue_the_original_made_gets_job_control_and_the_original_still_runs_on_it(
    server: MariaDBServer, make_store: Callable[..., MySQLStore]
) -> None:
    conn = server.admin_connection()
    try:
        seed_original_queue(conn, "1", "legacy", [(1, 0, b"old-1"), (1, 0, b"old-2"), (2, 0, b"old-3")])
    finally:
        conn.close()
    original_ddl = _ddl(server, "plq_1_legacy.jobs_p1")
    store = make_store()
    assert store.expire_jobs("legacy", T0, 10) == 0  # the monitor's sweep finds nothing to expire

    # Its jobs are served as they are, with no expiry; the first use migrates the queue.
    old = store.scan_jobs("legacy", pending(), 10)
    assert [(r.expire_at_ms, r.dedup_key) for r in old] == [(None, None), (None, None)]
    migrated = _ddl(server, "plq_1_legacy.jobs_p1")
    assert migrated.replace("  `expire_at` bigint(20) DEFAULT NULL,\n", "") == original_ddl
    assert _tables(server, "plq_1_legacy") == ["expired_count", "expiring", "jobs_p1", "jobs_p2", "jobs_p3"]

    # Expiry, cancel, paging and schedules work there.
    [e] = store.enqueue_keyed_jobs("legacy", [expiring("soon", T0 + 1000)], T0)
    assert one(store, "legacy", 1, e.local_id).expire_at_ms == T0 + 1000
    assert store.cancel_jobs("legacy", [(1, old[0].local_id)], T0) == 1
    assert one(store, "legacy", 1, old[0].local_id).custom_status == "cancelled"
    assert store.dequeue_jobs("legacy", 1, 10, "late", T0 + 1000, dry_run=True) == []  # old-2 ran long ago
    assert store.expire_jobs("legacy", T0 + 1000, 10) == 1
    assert store.expired_counts() == {"legacy": 1}
    first = store.scan_jobs("legacy", JobFilter(JobState.FAILED, 1, T0 + 1000, future=None), 1)
    cursor = ScanCursor(first[0].run_after_ms, first[0].local_id)
    rest = store.scan_jobs("legacy", JobFilter(JobState.FAILED, 1, T0 + 1000, future=None), 10, after=cursor)
    assert {first[0].local_id, *(r.local_id for r in rest)} == {old[0].local_id, e.local_id}
    store.put_schedule(ScheduleRow("legacy", "nightly", "spec", T0))
    assert store.due_schedules(T0, 10) == [ScheduleRow("legacy", "nightly", "spec", T0)]

    # The original server's statements, which name their columns, run on the migrated tables.
    admin = server.admin_connection()
    try:
        with admin.cursor() as cur:
            table = "plq_1_legacy.jobs_p2"
            cur.execute(ORIGINAL_ENQUEUE.format(table=table), (b"from-the-original",))
            cur.execute(ORIGINAL_DEQUEUE.format(table=table), ("orig-claim", 10))
            cur.execute(ORIGINAL_DEQUEUE_SELECT.format(table=table), ("orig-claim",))
            claimed = cur.fetchall()
            assert sorted(bytes(row[5]) for row in claimed) == [b"from-the-original", b"old-3"]
            cur.execute(ORIGINAL_ACK_SUCCEEDED.format(table=table), ("+ok", claimed[0][0]))
            cur.execute(ORIGINAL_LOOKUP.format(table=table), (claimed[0][0],))
            assert cur.fetchone()[1] == 2
    finally:
        admin.close()
    records = store.lookup_jobs("legacy", [(2, int(row[0])) for row in claimed], False)
    assert [r.expire_at_ms for r in records] == [None, None]  # the original's jobs never expire


def test_a_table_made_without_the_column_after_open_is_migrated_on_the_rust_hot_path(
    server: MariaDBServer, make_store: Callable[..., MySQLStore]
) -> None:
    store = make_store()
    shard = Shard("1", store)
    backend = ShardedBackend(ShardMap([shard]), num_priorities=3, parallelism=2)
    loop = asyncio.new_event_loop()
    try:
        hot = backend.hot_path(shard)
        assert isinstance(hot, NativeMySQLHotPath)
        conn = server.admin_connection()  # the original server makes a queue while we run
        try:
            seed_original_queue(conn, "1", "later", [(1, 0, b"a"), (1, 0, b"b")])
        finally:
            conn.close()
        now = int(time.time() * 1000)  # the original's jobs ran a minute ago, by the server's clock
        claimed = loop.run_until_complete(hot.dequeue_jobs("later", 1, 5, "claim-rs", now, False))
        ids = [ClaimedJob._make(j).local_id for j in claimed.to_list()]
        assert len(ids) == 2
        conn = server.admin_connection()
        try:
            seed_original_queue(conn, "1", "later2", [(1, 0, b"c")])
        finally:
            conn.close()
        assert len(store.dequeue_jobs("later2", 1, 1, "claim-py", now, False)) == 1
        # An ack's first statement that names expire_at migrates too (a cancelled job's failure).
        with server.admin_connection() as admin, admin.cursor() as cur:
            cur.execute("ALTER TABLE plq_1_later2.jobs_p1 DROP COLUMN expire_at")
        assert store.cancel_jobs("later2", [(1, 1)], now) == 1
        loop.run_until_complete(hot.ack_jobs("later2", AckGroup([], [AckItem(1, 1, "boom", 0)]), now))
        record = one(store, "later2", 1, 1)
        assert (record.state, record.custom_status) == (JobState.FAILED, "boom cancelled")
    finally:
        loop.run_until_complete(backend.aclose())
        backend.close()
        loop.close()


def test_the_migration_takes_as_long_as_its_alter_takes_not_the_socket_timeout(
    server: MariaDBServer, make_store: Callable[..., MySQLStore]
) -> None:
    """On MySQL before 8.0.12 the ALTER copies the table, minutes on a big one; here it waits
    1.5 s for a transaction that holds the table open, past the store's 0.5 s socket timeout.
    On a pooled connection the timeout cut it off (MySQL rolled it back) and every statement
    of the queue failed, trying again; now it finishes, and the statement then runs."""
    conn = server.admin_connection()
    try:
        seed_original_queue(conn, "1", "big", [(1, 0, b"old")])
        seed_original_queue(conn, "1", "small", [(1, 0, b"old")])
    finally:
        conn.close()
    store = make_store(socket_timeout=0.5)
    reader = server.admin_connection()
    timer = threading.Timer(1.5, reader.commit)
    try:
        with reader.cursor() as cur:
            cur.execute("START TRANSACTION")
            cur.execute("SELECT COUNT(*) FROM plq_1_big.jobs_p1")  # its metadata lock, until COMMIT
        timer.start()
        started = time.monotonic()
        found: list[list[JobRecord]] = []
        first = threading.Thread(target=lambda: found.append(store.scan_jobs("big", pending(), 10)))
        first.start()
        wait_for(store.migration_lock.locked, 5, what="the migration to start")
        # Another queue's statement that needs a migration meanwhile waits a socket timeout for
        # this one, then fails as contention, rather than hold another of the shard's threads
        # for as long as the copy takes. (The statements of the table being altered wait for
        # MySQL's metadata lock instead, as they would for anyone's ALTER.)
        with pytest.raises(ShardConnectionError, match="being given the expire_at column") as caught:
            store.scan_jobs("small", pending(), 10)
        assert caught.value.contention
        first.join(10)
        took = time.monotonic() - started
    finally:
        timer.cancel()  # (if it has not fired: the test failed; the close below ends the transaction)
        if timer.is_alive():
            timer.join()  # it commits on the reader: closed only after
        reader.close()
    assert [len(f) for f in found] == [1]
    assert took >= 1.0, "it waited for the transaction"
    assert "expire_at" in _ddl(server, "plq_1_big.jobs_p1")
    assert len(store.scan_jobs("small", pending(), 10)) == 1, "migrated when tried again"


def held_open_original_queue(server: MariaDBServer, queue: str) -> Any:
    """A queue of shard 1 as the original made it (one job, no expire_at column), and a
    connection whose open transaction holds its table's metadata lock until it ends."""
    conn = server.admin_connection()
    try:
        seed_original_queue(conn, "1", queue, [(1, 0, b"old")])
    finally:
        conn.close()
    holder = server.admin_connection()
    with holder.cursor() as cur:
        cur.execute("START TRANSACTION")
        cur.execute(f"SELECT COUNT(*) FROM plq_1_{queue}.jobs_p1")
    return holder


def test_a_stop_does_not_wait_for_a_migrations_alter(
    server: MariaDBServer, make_store: Callable[..., MySQLStore]
) -> None:
    """A server stop waits for its store calls in progress, and a migration's ALTER may take an
    hour: ``interrupt`` (the stop's first step) abandons it, the call failing at once; MySQL
    finishes the ALTER, and the next statement finds the column."""
    store = make_store()
    reader = held_open_original_queue(server, "slow")  # the ALTER waits for its lock
    try:
        failed: list[BaseException] = []

        def scan() -> None:
            try:
                store.scan_jobs("slow", pending(), 10)
            except BaseException as exc:
                failed.append(exc)

        caller = threading.Thread(target=scan)
        caller.start()
        waiting = "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE STATE LIKE '%metadata lock%'"
        wait_for(lambda: server.query(waiting)[0][0] >= 1, 5, what="the ALTER to wait for the table's lock")
        started = time.monotonic()
        store.interrupt()
        caller.join(8)
        assert not caller.is_alive() and time.monotonic() - started < 8, "within the ALTER's 10 s lock wait"
        assert len(failed) == 1 and isinstance(failed[0], ShardConnectionError), failed
    finally:
        reader.close()
    assert len(store.scan_jobs("slow", pending(), 10)) == 1


def test_a_migration_waits_for_a_table_held_open_a_bounded_time(
    server: MariaDBServer, make_store: Callable[..., MySQLStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An idle transaction on the table (a stuck client's) held the ALTER's metadata-lock wait,
    and every statement of the table behind it, for MySQL's default a year: it gives up after
    MIGRATION_LOCK_WAIT_SECONDS, as contention, and the next statement migrates once it is gone."""
    from pinlater.backends.mysql import expiry

    monkeypatch.setattr(expiry, "MIGRATION_LOCK_WAIT_SECONDS", 1)
    store = make_store()
    idle = held_open_original_queue(server, "held")
    try:
        with pytest.raises(ShardConnectionError, match="1205") as caught:
            store.scan_jobs("held", pending(), 10)
        assert caught.value.contention
    finally:
        idle.close()
    assert len(store.scan_jobs("held", pending(), 10)) == 1


def test_prepare_mysql_adds_the_column_ahead_and_then_finds_nothing_to_do(
    server: MariaDBServer, tmp_path: Path
) -> None:
    conn = server.admin_connection()
    try:
        seed_original_queue(conn, "1", "legacy", [(1, 0, b"a"), (2, 0, b"b")])
    finally:
        conn.close()
    config = tmp_path / "mysql.json"
    config.write_text(json.dumps({"1": server.shard_entry()}))
    cmd = [sys.executable, "-m", "pinlater.cli", "prepare-mysql", "--backend-config", str(config)]
    first = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    assert first.stdout == "shard 1: 3 table(s) given expire_at\n"  # the original makes p1..p3
    assert "adding expire_at to `plq_1_legacy`.`jobs_p2`" in first.stderr
    assert _tables(server, "plq_1_legacy") == ["expired_count", "expiring", "jobs_p1", "jobs_p2", "jobs_p3"]
    assert all("expire_at" in _ddl(server, f"plq_1_legacy.jobs_p{p}") for p in (1, 2, 3))
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert (again.returncode, again.stdout) == (0, "shard 1: 0 table(s) given expire_at\n")
    wrong = subprocess.run([*cmd, "--shard", "9"], capture_output=True, text=True, timeout=120)
    assert (
        wrong.returncode == 2 and wrong.stderr.startswith("pinlater prepare-mysql: ") and "no shard 9" in wrong.stderr
    )


# -- expiry ---------------------------------------------------------------------------------------


def test_expire_jobs_walks_the_expiry_index_not_the_queue(make_store: Callable[..., MySQLStore]) -> None:
    store = make_store(pool_size=1)
    store.create_queue(Q, 2)
    store.enqueue_jobs(Q, [NewJob(1, b"plain", T0, 1)] * 2000, T0)
    store.enqueue_keyed_jobs(Q, [expiring(f"e{i}", T0 + 10 + i, priority=1 + i % 2) for i in range(20)], T0)
    expired: list[int] = []
    read = _rows_read(store, lambda: expired.append(store.expire_jobs(Q, T0 + 1000, 5)))
    assert expired == [5]
    assert read < 60  # about the 5 index rows and their 5 jobs, not the 2,000 plain ones
    assert _rows_read(store, lambda: store.count_jobs(Q, pending(), None)) > 2000  # what a walk reads
    # Soonest first: e0..e4 expired, e5.. wait.
    failed = store.scan_jobs(Q, JobFilter(JobState.FAILED, 1, T0 + 1000, future=None), 10)
    failed += store.scan_jobs(Q, JobFilter(JobState.FAILED, 2, T0 + 1000, future=None), 10)
    assert len(failed) == 5 and all(r.custom_status == "expired" for r in failed)
    assert store.expire_jobs(Q, T0 + 1000, 100) == 15
    assert store.expire_jobs(Q, T0 + 1000, 100) == 0
    assert store.expired_counts() == {Q: 20}


def test_another_server_learns_from_its_monitor_that_a_queue_has_expiring_jobs(
    make_store: Callable[..., MySQLStore],
) -> None:
    writer, other = make_store(), make_store()  # two servers' stores on one database
    writer.create_queue(Q, 1)
    later = KeyedJob(NewJob(1, b"b", T0 + 250, 3), None, expire_at_ms=T0 + 300)  # not ready at T0 + 200
    [first, second] = writer.enqueue_keyed_jobs(Q, [expiring("a", T0 + 100), later], T0)

    assert other.dequeue_jobs(Q, 1, 10, "w:c1", T0 + 200, False) == []  # skipped, never handed out
    assert one(other, Q, 1, first.local_id).state == JobState.PENDING, "it has not seen an expiring job yet"
    assert other.expire_jobs(Q, T0 + 200, 10) == 1  # its monitor's pass
    assert other.dequeue_jobs(Q, 1, 10, "w:c2", T0 + 400, False) == []
    assert one(other, Q, 1, second.local_id).state == JobState.FAILED, "expired by the dequeue that met it"


def test_a_job_checkpointed_back_to_pending_is_indexed_again(make_store: Callable[..., MySQLStore]) -> None:
    store = make_store()
    store.create_queue(Q, 1)
    [e] = store.enqueue_keyed_jobs(Q, [expiring("cp", T0 + 500)], T0)
    [claimed] = store.dequeue_jobs(Q, 1, 1, "worker-1:c", T0, False)
    # The monitor passes its expiry while it runs: IN_PROGRESS does not expire, and the index
    # row it looked at is forgotten.
    assert store.expire_jobs(Q, T0 + 600, 10) == 0
    item = CheckpointItem(1, claimed.local_id, T0 + 700, move_to_pending=True)
    assert store.checkpoint_jobs(Q, [item], "worker-1", T0 + 650) == 1
    assert store.dequeue_jobs(Q, 1, 1, "worker-2:c", T0 + 800, False) == []  # never handed out
    assert store.expired_counts() == {Q: 1}, "found again through the index by the dequeue's expiry step"
    record = one(store, Q, 1, e.local_id)
    assert (record.state, record.custom_status, record.attempts_remaining) == (JobState.FAILED, "expired", 0)


def test_expired_counts_survive_a_restart_and_go_with_the_queue(make_store: Callable[..., MySQLStore]) -> None:
    store = make_store()
    store.create_queue(Q, 1)
    store.create_queue("other", 1)
    store.enqueue_keyed_jobs(Q, [expiring("a", T0 + 1), expiring("b", T0 + 1)], T0)
    assert store.expired_counts() == {}  # queues without an expiry yet are left out
    assert store.expire_jobs(Q, T0 + 1, 10) == 2
    again = make_store()  # another server, or this one restarted
    assert again.expired_counts() == {Q: 2}
    again.delete_queue(Q)
    assert again.expired_counts() == {}
    again.create_queue(Q, 1)
    assert again.expired_counts() == {}


@pytest.mark.parametrize("path", ["store", "native"])
def test_the_hot_path_expires_the_jobs_a_dequeue_meets_and_retries_past_expiry(
    make_store: Callable[..., MySQLStore], path: str
) -> None:
    store = make_store()
    shard = Shard("1", store)
    backend = ShardedBackend(ShardMap([shard]), num_priorities=3, parallelism=2)
    loop = asyncio.new_event_loop()
    hot = backend.hot_path(shard)
    try:
        store.create_queue(Q, 1)
        got = store.enqueue_keyed_jobs(Q, [expiring("x", T0 + 100), expiring("y", T0 + 10_000)], T0)
        [x, y] = [e.local_id for e in got]

        def dequeue(now_ms: int, dry_run: bool = False) -> list[int]:
            if path == "store":
                return [j.local_id for j in store.dequeue_jobs(Q, 1, 10, f"c{now_ms}", now_ms, dry_run)]
            claimed = loop.run_until_complete(hot.dequeue_jobs(Q, 1, 10, f"c{now_ms}", now_ms, dry_run))
            return [ClaimedJob._make(j).local_id for j in claimed.to_list()]

        def fail(now_ms: int, delay_ms: int, local_id: int) -> None:
            item = AckItem(1, local_id, "err", delay_ms)
            if path == "store":
                store.ack_jobs(Q, [], [item], now_ms)
            else:
                loop.run_until_complete(hot.ack_jobs(Q, AckGroup([], [item]), now_ms))

        assert dequeue(T0 + 100, dry_run=True) == [y]
        assert one(store, Q, 1, x).state == JobState.PENDING, "a dry run changes nothing"
        assert dequeue(T0 + 100) == [y]
        record = one(store, Q, 1, x)
        assert (record.state, record.custom_status) == (JobState.FAILED, "expired"), "expired by the dequeue"
        assert store.expired_counts() == {Q: 1}
        fail(T0 + 200, 9_800, y)  # the retry would run at its expiry: it expires
        record = one(store, Q, 1, y)
        assert (record.state, record.custom_status, record.claim_descriptor) == (JobState.FAILED, "err expired", None)
        assert store.expired_counts() == {Q: 2}
        assert store.expire_jobs(Q, T0 + 200, 10) == 0
    finally:
        loop.run_until_complete(backend.aclose())
        backend.close()
        loop.close()


def test_a_dequeue_that_meets_a_backlog_of_expired_jobs_has_a_thread_end_them_all(
    make_store: Callable[..., MySQLStore],
) -> None:
    # Each expired row ahead of the first live one costs every dequeue's statement a read: a
    # lazy pass that expires its whole limit starts a drain, so the backlog ends at once, not
    # 256 a dequeue (a dequeue took 0.6 s behind 200,000 of them).
    store = make_store()
    store.create_queue(Q, 1)
    n = LAZY_EXPIRY_LIMIT + 2 * EXPIRY_DRAIN_LIMIT + 10
    store.enqueue_keyed_jobs(Q, [expiring(f"e{i}", T0 + 100) for i in range(n)], T0)
    [fresh] = store.enqueue_keyed_jobs(Q, [KeyedJob(NewJob(1, b"fresh", T0 + 150, 3), None)], T0)
    [got] = store.dequeue_jobs(Q, 1, 1, "w:c", T0 + 200, False)
    assert got.local_id == fresh.local_id
    assert store.wait_expiry_drains(60)
    assert store.expired_counts() == {Q: n}, "the lazy pass's 256, then the drain's calls until three ended none"


def test_claim_timeouts_expire_past_expiry_and_end_cancelled_jobs(make_store: Callable[..., MySQLStore]) -> None:
    store = make_store()
    store.create_queue(Q, 1)
    got = store.enqueue_keyed_jobs(Q, [expiring("late", T0 + 100), expiring("cancel", T0 + 100_000)], T0)
    [late, cancelled] = [e.local_id for e in got]
    plain = store.enqueue_jobs(Q, [NewJob(1, b"plain", T0, 3, "st")], T0)[0]
    assert len(store.dequeue_jobs(Q, 1, 10, "w:1", T0, False)) == 3
    assert store.cancel_jobs(Q, [(1, cancelled)], T0 + 1) == 1
    record = one(store, Q, 1, cancelled)  # no further attempt, and nothing else: the claim's time stays
    assert (record.state, record.attempts_remaining, record.updated_at_ms) == (JobState.IN_PROGRESS, 0, T0)
    assert store.resurrect_timed_out_jobs(Q, 1, T0 + 1000, 10, T0 + 2000) == 3
    records = {r.local_id: r for r in store.lookup_jobs(Q, [(1, late), (1, cancelled), (1, plain)], False)}
    assert (records[late].state, records[late].custom_status) == (JobState.FAILED, "expired")
    assert (records[cancelled].state, records[cancelled].custom_status) == (JobState.FAILED, "cancelled")
    assert (records[plain].state, records[plain].attempts_remaining) == (JobState.PENDING, 2)
    assert store.expired_counts() == {Q: 1}


# -- paged scans and queue depth ------------------------------------------------------------------


def test_a_deep_page_costs_a_page_even_among_jobs_of_one_run_after(make_store: Callable[..., MySQLStore]) -> None:
    store = make_store(pool_size=1)
    store.create_queue(Q, 1)
    store.enqueue_jobs(Q, [NewJob(1, b"same", T0, 1)] * 3000, T0)
    where = JobFilter(JobState.PENDING, 1, T0)
    seen: list[int] = []
    page = store.scan_jobs(Q, where, 500)
    while page:
        seen += [r.local_id for r in page]
        last = page[-1]
        page = store.scan_jobs(Q, where, 500, after=ScanCursor(last.run_after_ms, last.local_id))
    assert seen == list(range(3000, 0, -1))
    deep: list[JobRecord] = []
    read = _rows_read(store, lambda: deep.extend(store.scan_jobs(Q, where, 10, after=ScanCursor(T0, 100))))
    assert [r.local_id for r in deep] == list(range(99, 89, -1))
    assert read < 40  # about 10 rows, not the 2,900 jobs of that run_after before the cursor
    assert _rows_read(store, lambda: store.count_jobs(Q, where, None)) > 2900  # what a walk of them reads


def test_oldest_ready_is_one_statement_over_every_queue_and_skips_expired_jobs(
    make_store: Callable[..., MySQLStore],
) -> None:
    store = make_store()
    store.create_queue(Q, 2)
    store.create_queue("idle", 1)
    store.enqueue_keyed_jobs(Q, [expiring("gone", T0 + 50)], T0 - 5000)
    store.enqueue_jobs(Q, [NewJob(1, b"a", T0 - 3000, 1), NewJob(2, b"b", T0 + 9000, 1)], T0 - 5000)
    assert store.oldest_ready(3, T0) == {(Q, 1): T0 - 3000}
    assert store.oldest_ready(3, T0 + 10) == {(Q, 1): T0 - 3000}
    assert store.oldest_ready(3, T0 + 10_000) == {(Q, 1): T0 - 3000, (Q, 2): T0 + 9000}


# -- schedules --------------------------------------------------------------------------------------


def test_a_due_page_reads_no_spec_past_it(make_store: Callable[..., MySQLStore]) -> None:
    """The page is cut by the specs' sizes before a spec is read: 40 due schedules of 1 MB, in
    two queues, under a page of 1.5 MB, read one and hold a few MB at the peak, where all 40
    specs (over 80 MB with PyMySQL's copies) were read first; 2 MB hold two, across queues."""
    store = make_store()
    for queue in ("a", "b"):
        store.create_queue(queue, 1)
    spec = "s" * 1_000_000
    for i in range(40):
        store.put_schedule(ScheduleRow("ab"[i % 2], f"n{i:02}", spec, T0 + i))
    tracemalloc.start()
    try:
        page = store.due_schedules(T0 + 100, 500, max_bytes=1_500_000)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert [(r.queue, r.name, len(r.spec)) for r in page] == [("a", "n00", 1_000_000)]
    assert peak < 12_000_000, f"{peak} bytes at the peak"
    page = store.due_schedules(T0 + 100, 500, max_bytes=2_000_000)
    assert [(r.queue, r.name) for r in page] == [("a", "n00"), ("b", "n01")]
    assert [r.name for r in store.due_schedules(T0 + 100, 3, max_bytes=10**9)] == ["n00", "n01", "n02"]


def test_schedules_live_in_their_queue_and_are_due_across_queues(
    server: MariaDBServer, make_store: Callable[..., MySQLStore]
) -> None:
    store = make_store()
    for queue in ("a", "b", "c"):
        store.create_queue(queue, 1)
    assert _tables(server, "plq_1_a").count("schedules") == 0  # made by the first schedule
    store.put_schedule(ScheduleRow("a", "x", "spec-a", T0 + 20))
    store.put_schedule(ScheduleRow("b", "y", "spec-b", T0 + 10))
    store.put_schedule(ScheduleRow("b", "paused", "spec", T0, paused=True))
    assert "schedules" in _tables(server, "plq_1_a")
    due = store.due_schedules(T0 + 30, 10)
    assert [(r.queue, r.name) for r in due] == [("b", "y"), ("a", "x")]
    assert [(r.queue, r.name) for r in store.due_schedules(T0 + 30, 1)] == [("b", "y")]
    other = make_store()  # a second server firing the same tick: one of them moves it
    assert other.advance_schedule("b", "y", T0 + 10, T0 + 70)
    assert not store.advance_schedule("b", "y", T0 + 10, T0 + 70)
    store.delete_queue("b")
    assert [(r.queue, r.name) for r in store.due_schedules(T0 + 100, 10)] == [("a", "x")]
    store.create_queue("b", 1)
    assert store.list_schedules("b") == []
