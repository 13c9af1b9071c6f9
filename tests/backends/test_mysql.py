"""MySQL-only behaviour: the original schema and databases, batching, shards, failures.

The shared behaviour of every store is in ``test_conformance.py``; this file checks what only the
MySQL backend promises, against a real MariaDB (``tests/support/mariadb_server.py``).
"""

from __future__ import annotations

import json
import pickle
import re
import threading
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pymysql
import pytest
from tests.support.mariadb_server import MariaDBServer, shared_server
from tests.support.original_mysql import ORIGINAL_JOBS_TABLE

from pinlater.backends.base import AckItem, JobFilter, JobState, NewJob
from pinlater.backends.mysql import Endpoint, MySQLDriver, MySQLShardConfig, MySQLStore, parse_mysql_config, queries
from pinlater.backends.mysql.transactions import DEADLOCK_RETRIES
from pinlater.backends.shardmap import Shard
from pinlater.config import Settings
from pinlater.errors import ConfigError, ErrorCode, PinLaterError, ShardConnectionError

pytestmark = pytest.mark.mysql

T0 = 1_700_000_000_000  # a whole second, in ms
Q = "test_queue"


# -- fixtures -----------------------------------------------------------------------------------


@pytest.fixture
def server() -> MariaDBServer:
    """The process-wide MariaDB, emptied of queue databases."""
    shared = shared_server()
    shared.drop_queue_databases()
    return shared


@pytest.fixture(scope="module")
def own_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MariaDBServer]:
    """A MariaDB for tests that kill, restart or lock it; short lock waits."""
    with MariaDBServer(tmp_path_factory.mktemp("mariadb-own"), extra_args=("--innodb-lock-wait-timeout=1",)) as started:
        yield started


def config_for(server: MariaDBServer) -> MySQLShardConfig:
    return MySQLShardConfig(Endpoint(server.host, server.port), server.user, server.password)


@pytest.fixture
def make_store(server: MariaDBServer) -> Iterator[Callable[..., MySQLStore]]:
    stores: list[MySQLStore] = []

    def make(name: str = "1", target: MariaDBServer | None = None, **kwargs: Any) -> MySQLStore:
        store = MySQLStore(name, config_for(target or server), **kwargs)
        stores.append(store)
        return store

    yield make
    for store in stores:
        store.close()


def session_counters(store: MySQLStore) -> dict[str, int]:
    """Com_* counters of the store's only connection (the store must have pool_size=1)."""
    with store.pool.connection() as conn, conn.cursor() as cur:
        cur.execute(
            "SHOW SESSION STATUS WHERE Variable_name IN ('Com_insert', 'Com_insert_select', 'Com_update', 'Com_select')"
        )
        return {name: int(value) for name, value in cur.fetchall()}


def statements_during(store: MySQLStore, action: Callable[[], object]) -> dict[str, int]:
    before = session_counters(store)
    action()
    after = session_counters(store)
    return {name: after[name] - before[name] for name in after}


def new_jobs(n: int, priority: int = 1, run_after: int = T0) -> list[NewJob]:
    return [NewJob(priority, f"job-{priority}-{i}".encode(), run_after, 3) for i in range(n)]


# -- schema -------------------------------------------------------------------------------------


def _normalised_create_table(server: MariaDBServer, database: str) -> list[str]:
    [(_, ddl)] = server.query(f"SHOW CREATE TABLE `{database}`.`jobs_p1`")
    lines = [line.strip().rstrip(",") for line in ddl.splitlines()[1:-1]]
    # The intended differences: our timestamps keep milliseconds, our bodies are MEDIUMBLOBs.
    return [
        re.sub(r"timestamp\(3\)", "timestamp", re.sub(r"current_timestamp\(3\)", "current_timestamp()", ln)).replace(
            "`body` mediumblob", "`body` blob"
        )
        for ln in lines
    ]


def test_schema_matches_the_original(server: MariaDBServer, make_store: Callable[..., MySQLStore]) -> None:
    make_store().create_queue("fresh", 3)
    server.query("CREATE DATABASE plq_9_original")
    server.query(ORIGINAL_JOBS_TABLE.format(table="plq_9_original.jobs_p1"))
    ours = _normalised_create_table(server, "plq_1_fresh")
    theirs = _normalised_create_table(server, "plq_9_original")
    # One more intended difference: the expiry (#18), a nullable column last, which the
    # original's statements (explicit column lists) never see; its tables get it at first use.
    assert [ln for ln in ours if ln != "`expire_at` bigint(20) DEFAULT NULL"] == theirs
    assert ours[10] == "`expire_at` bigint(20) DEFAULT NULL"
    make_store("9").lookup_jobs("original", [(1, 1)], False)
    assert _normalised_create_table(server, "plq_9_original") == ours
    assert "`local_id` bigint(20) unsigned NOT NULL AUTO_INCREMENT" in ours
    assert "KEY `state` (`state`,`run_after`)" in ours
    assert "KEY `claim_descriptor` (`claim_descriptor`)" in ours
    [(_, ddl)] = server.query("SHOW CREATE TABLE plq_1_fresh.jobs_p1")
    assert "`body` mediumblob NOT NULL" in ddl
    precision = server.query(
        "SELECT COLUMN_NAME, DATETIME_PRECISION FROM information_schema.COLUMNS"
        " WHERE TABLE_SCHEMA = 'plq_1_fresh' AND TABLE_NAME = 'jobs_p1' AND DATA_TYPE = 'timestamp'",
    )
    assert sorted(precision) == [("created_at", 3), ("run_after", 3), ("updated_at", 3)]
    tables = server.query("SELECT TABLE_NAME, ENGINE FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'plq_1_fresh'")
    # Beside the original's tables, ours alone: the dedup key records and the claim lock (#17),
    # the expiry index and the expired count (#18; schedules come with the first one).
    assert sorted(tables) == [
        ("claim_lock", "InnoDB"),
        ("dedup_keys", "InnoDB"),
        ("expired_count", "InnoDB"),
        ("expiring", "InnoDB"),
        ("jobs_p1", "InnoDB"),
        ("jobs_p2", "InnoDB"),
        ("jobs_p3", "InnoDB"),
    ]


def test_a_database_the_original_created_is_served(
    server: MariaDBServer, make_store: Callable[..., MySQLStore]
) -> None:
    # Built by hand the way the original did: its DDL, rows written by a session in the server's
    # (here: a non-UTC) time zone, updated_at left to its default.
    conn = server.admin_connection()
    local = timezone(timedelta(hours=2))

    def local_time(ms: int) -> str:
        return datetime.fromtimestamp(ms / 1000, local).strftime("%Y-%m-%d %H:%M:%S")

    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+02:00'")
        cur.execute("CREATE DATABASE plq_1_legacy")
        for priority in (1, 2, 3):
            cur.execute(ORIGINAL_JOBS_TABLE.format(table=f"plq_1_legacy.jobs_p{priority}"))
        for i in range(3):
            cur.execute(
                "INSERT INTO plq_1_legacy.jobs_p1 (state, attempts_allowed, attempts_remaining, custom_status,"
                " created_at, run_after, body) VALUES (%s, %s, %s, SUBSTRING(%s, 1, 5000), %s, %s, %s)",
                (0, 2, 2, f"status-{i}", local_time(T0 - 60_000), local_time(T0 - 10_000 + i * 1000), f"old-{i}"),
            )
    conn.close()

    store = make_store()
    assert store.get_queue_names() == {"legacy"}
    assert store.count_jobs("legacy", JobFilter(JobState.PENDING, 1, T0), None) == 3
    claimed = store.dequeue_jobs("legacy", 1, 2, "claim:host-a|x:1", T0, False)
    assert [job.body for job in claimed] == [b"old-0", b"old-1"]
    assert all(job.created_at_ms == T0 - 60_000 and job.attempts_remaining == 2 for job in claimed)
    store.ack_jobs("legacy", [AckItem(1, claimed[0].local_id, "+done")], [AckItem(1, claimed[1].local_id)], T0 + 5)
    first, second, third = store.lookup_jobs("legacy", [(1, 1), (1, 2), (1, 3)], True)
    assert (first.state, first.custom_status, first.run_after_ms) == (JobState.SUCCEEDED, "status-0+done", T0 - 10_000)
    assert (second.state, second.attempts_remaining, second.claim_descriptor) == (JobState.PENDING, 1, None)
    assert (third.state, third.body, third.run_after_ms) == (JobState.PENDING, b"old-2", T0 - 8_000)
    # Writing a second-precision table: the server drops the milliseconds.
    [new_id] = store.enqueue_jobs("legacy", [NewJob(2, b"new", T0 + 1_500, 1)], T0 + 250)
    [record] = store.lookup_jobs("legacy", [(2, new_id)], False)
    assert (record.run_after_ms, record.created_at_ms, record.updated_at_ms) == (T0 + 1_000, T0, T0)
    # The retried job runs again at T0 + 5 ms, stored as T0: newest run_after first.
    assert [job.local_id for job in store.scan_jobs("legacy", JobFilter(JobState.PENDING, 1, T0), 10)] == [2, 3]


def test_queue_name_too_long(make_store: Callable[..., MySQLStore]) -> None:
    store = make_store("1")
    longest = "q" * (64 - len("plq_1_"))
    store.create_queue(longest, 1)
    assert longest in store.get_queue_names()
    with pytest.raises(PinLaterError) as info:
        store.create_queue(longest + "q", 1)
    assert info.value.code == ErrorCode.QUEUE_NAME_TOO_LONG
    with pytest.raises(PinLaterError) as info:
        make_store("1d3").create_queue(longest, 1)  # the same name is too long on a longer shard name
    assert info.value.code == ErrorCode.QUEUE_NAME_TOO_LONG


# -- batched statements -------------------------------------------------------------------------


def test_enqueue_is_one_insert_per_priority(make_store: Callable[..., MySQLStore]) -> None:
    store = make_store(pool_size=1)
    store.create_queue(Q, 3)
    jobs = new_jobs(100, priority=1) + new_jobs(50, priority=3) + new_jobs(1, priority=1)
    ids: list[int] = []
    counts = statements_during(store, lambda: ids.extend(store.enqueue_jobs(Q, jobs, T0)))
    assert counts["Com_insert"] == 2
    assert ids[:100] == list(range(1, 101)) and ids[100:150] == list(range(1, 51)) and ids[150] == 101
    found = store.lookup_jobs(Q, [(job.priority, i) for job, i in zip(jobs, ids, strict=True)], True)
    assert [job.body for job in found] == [job.body for job in jobs]


def test_dequeue_is_one_update_and_one_select(make_store: Callable[..., MySQLStore]) -> None:
    store = make_store(pool_size=1)
    store.create_queue(Q, 3)
    store.enqueue_jobs(Q, new_jobs(30), T0)
    counts = statements_during(store, lambda: store.dequeue_jobs(Q, 1, 20, "claim-unique-1", T0, False))
    assert (counts["Com_update"], counts["Com_select"]) == (1, 1)


def test_acks_are_grouped_by_outcome(make_store: Callable[..., MySQLStore]) -> None:
    store = make_store(pool_size=1)
    store.create_queue(Q, 3)
    ids = store.enqueue_jobs(Q, new_jobs(40), T0)
    store.dequeue_jobs(Q, 1, 40, "claim-unique-2", T0, False)
    succeeded = [AckItem(1, i) for i in ids[:20]]
    failed = [AckItem(1, i, "err", retry_delay_ms=1000) for i in ids[20:]]
    counts = statements_during(store, lambda: store.ack_jobs(Q, succeeded, failed, T0 + 1))
    # Successes: one UPDATE. Failures: one UPDATE, after the one that expires retries past their
    # expiry and before the INSERT ... SELECT that indexes retried jobs with one again (#18), all
    # by primary key; then one INSERT ... SELECT of the expired tally (of 0: it writes nothing).
    # The Rust hot path sends them all in one round trip.
    assert (counts["Com_update"], counts["Com_insert_select"]) == (3, 2)
    assert store.count_jobs(Q, JobFilter(JobState.SUCCEEDED, 1, T0 + 1), None) == 20
    assert store.count_jobs(Q, JobFilter(JobState.PENDING, 1, T0 + 1, future=True), None) == 20


@pytest.mark.parametrize("strategy", ["last_insert_id", "returning", "per_row"])
def test_every_id_strategy_recovers_ids_in_order(make_store: Callable[..., MySQLStore], strategy: str) -> None:
    store = make_store(insert_id_strategy=strategy)
    store.create_queue(Q, 2)
    jobs = new_jobs(7) + new_jobs(3, priority=2)
    ids = store.enqueue_jobs(Q, jobs, T0)
    found = store.lookup_jobs(Q, [(job.priority, i) for job, i in zip(jobs, ids, strict=True)], True)
    assert [job.body for job in found] == [job.body for job in jobs]


def test_interleaved_autoinc_lock_mode_uses_returning(tmp_path: Path) -> None:
    with MariaDBServer(tmp_path / "mode2", extra_args=("--innodb-autoinc-lock-mode=2",)) as server:
        store = MySQLStore("1", config_for(server), pool_size=4)
        try:
            store.create_queue(Q, 1)
            results: list[tuple[list[NewJob], list[int]]] = []

            def enqueue(worker: int) -> None:
                for batch in range(5):
                    jobs = [NewJob(1, f"w{worker}-b{batch}-{i}".encode(), T0, 1) for i in range(50)]
                    results.append((jobs, store.enqueue_jobs(Q, jobs, T0)))

            threads = [threading.Thread(target=enqueue, args=(w,)) for w in range(4)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert store.pool.server_info is not None and store.pool.server_info.autoinc_lock_mode == 2
            for jobs, ids in results:
                found = store.lookup_jobs(Q, [(1, i) for i in ids], True)
                assert [job.body for job in found] == [job.body for job in jobs]
        finally:
            store.close()


def test_count_is_capped_by_the_limit(make_store: Callable[..., MySQLStore]) -> None:
    store = make_store()
    store.create_queue(Q, 1)
    store.enqueue_jobs(Q, new_jobs(30), T0)
    assert store.count_jobs(Q, JobFilter(JobState.PENDING, 1, T0), 10) == 10
    assert store.count_jobs(Q, JobFilter(JobState.PENDING, 1, T0), 100_000) == 30
    assert store.count_jobs(Q, JobFilter(JobState.PENDING, 1, T0), None) == 30


def rows_read_during(store: MySQLStore, action: Callable[[], object]) -> int:
    """Rows the store's only connection (pool_size=1) read through an index or a table scan."""

    def read() -> int:
        with store.pool.connection() as conn, conn.cursor() as cur:
            cur.execute(
                "SHOW SESSION STATUS WHERE Variable_name IN"
                " ('Handler_read_next', 'Handler_read_rnd_next', 'Handler_read_key', 'Handler_read_first')"
            )
            return sum(int(value) for _, value in cur.fetchall())

    before = read()
    action()
    return read() - before


def test_the_finished_jobs_gc_reads_only_rows_that_can_qualify(make_store: Callable[..., MySQLStore]) -> None:
    """updated_at has no index: a GC call that finds fewer than its limit (the sweep's last of each
    pass) read every finished row of the table, and under REPEATABLE READ locked them all. It is
    bounded by run_after too, which a finished job's is below, in the (state, run_after) index."""
    store = make_store(pool_size=1)
    store.create_queue(Q, 1)
    old = store.enqueue_jobs(Q, new_jobs(5, run_after=T0), T0)
    store.dequeue_jobs(Q, 1, 5, "w", T0, False)
    store.ack_jobs(Q, [AckItem(1, i) for i in old], [], T0)
    recent = store.enqueue_jobs(Q, new_jobs(2000, run_after=T0 + 3_600_000), T0)
    store.dequeue_jobs(Q, 1, 2000, "w", T0 + 3_600_000, False)
    store.ack_jobs(Q, [AckItem(1, i) for i in recent], [], T0 + 3_600_000)
    assert store.gc_finished_jobs(Q, 1, JobState.SUCCEEDED, T0 - 1, 100) == 0  # (the hour's call without it)
    gone: list[int] = []
    read = rows_read_during(
        store, lambda: gone.append(store.gc_finished_jobs(Q, 1, JobState.SUCCEEDED, T0 + 1_000, 100))
    )
    assert gone == [5]
    assert read < 100, f"{read} rows read to delete 5 of 2,005 finished"


def test_the_gc_reaches_a_finished_job_whose_run_after_is_later_once_an_hour(
    make_store: Callable[..., MySQLStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job cancelled before it was due ends FAILED with its run_after ahead: the bounded calls
    pass it by, and the hour's call per table without the bound takes it."""
    from pinlater.backends.mysql import store as mysql_store

    store = make_store()
    store.create_queue(Q, 1)
    [later] = store.enqueue_jobs(Q, new_jobs(1, run_after=T0 + 86_400_000), T0)
    assert store.cancel_jobs(Q, [(1, later)], T0) == 1
    assert store.gc_finished_jobs(Q, 1, JobState.FAILED, T0 - 1, 10) == 0  # the hour's call: nothing yet
    assert store.gc_finished_jobs(Q, 1, JobState.FAILED, T0 + 1_000, 10) == 0, "bounded: passed by"
    monkeypatch.setattr(mysql_store, "GC_FULL_SWEEP_SECONDS", 0.0)
    assert store.gc_finished_jobs(Q, 1, JobState.FAILED, T0 + 1_000, 10) == 1


def test_concurrent_dequeues_never_hand_out_a_job_twice(make_store: Callable[..., MySQLStore]) -> None:
    store = make_store(pool_size=4)
    store.create_queue(Q, 1)
    ids = store.enqueue_jobs(Q, new_jobs(400), T0)
    got: list[int] = []
    lock = threading.Lock()

    def worker(n: int) -> None:
        for k in range(1_000):
            batch = store.dequeue_jobs(Q, 1, 7, f"claim-{n}-{k}", T0, False)
            if not batch:
                return
            with lock:
                got.extend(job.local_id for job in batch)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(got) == sorted(ids)


# -- configuration and shards -------------------------------------------------------------------


def test_num_db_per_queue_expands_each_instance_into_shards(server: MariaDBServer) -> None:
    document = {
        "pinlaterlocaldb001": server.shard_entry(),
        "pinlaterlocaldb002": server.shard_entry(dequeue_only=True),
    }
    driver = MySQLDriver(num_db_per_queue=3)
    parsed = driver.parse_config(json.dumps(document), "mysql.json")
    assert sorted(parsed) == ["1", "1d1", "1d2", "2", "2d1", "2d2"]
    assert [parsed[name].dequeue_only for name in sorted(parsed)] == [False] * 3 + [True] * 3
    assert parsed["1"] == parsed["2d1"]  # one connection; dequeue_only is not part of equality

    settings = Settings(backend_connections_per_shard=2)
    stores = {name: driver.open_store(name, parsed[name], settings) for name in ("1", "1d1", "1d2")}
    try:
        for store in stores.values():
            store.create_queue(Q, 1)
        [only_in_1d1] = stores["1d1"].enqueue_jobs(Q, [NewJob(1, b"in 1d1", T0, 1)], T0)
        assert stores["1"].lookup_jobs(Q, [(1, only_in_1d1)], True) == []
        assert stores["1d2"].count_jobs(Q, JobFilter(JobState.PENDING, 1, T0), None) == 0
        assert stores["1d1"].count_jobs(Q, JobFilter(JobState.PENDING, 1, T0), None) == 1
        stores["1d2"].create_queue("only_1d2", 1)
        assert stores["1"].get_queue_names() == {Q}
        assert stores["1d2"].get_queue_names() == {Q, "only_1d2"}
    finally:
        for store in stores.values():
            store.close()
    databases = {row[0] for row in server.query("SHOW DATABASES LIKE 'plq%'")}
    assert databases == {"plq_1_test_queue", "plq_1d1_test_queue", "plq_1d2_test_queue", "plq_1d2_only_1d2"}


def test_config_shard_names_follow_the_original() -> None:
    entry = {"master": {"host": "db", "port": 3306}, "user": "u", "passwd": "p"}
    text = json.dumps({"pinlaterlocaldb001": entry, "7": entry, "other002": entry})
    assert sorted(parse_mysql_config(text, "f.json")) == ["1", "2", "7"]
    # With the original's SHARD_ALLOWED_HOSTNAME_PREFIX, other keys are skipped.
    prefixed = parse_mysql_config(text, "f.json", shard_name_prefix="pinlaterlocaldb", num_db_per_queue=2)
    assert sorted(prefixed) == ["1", "1d1"]
    config = prefixed["1"]
    assert (config.master, config.user, config.passwd, config.slave, config.dequeue_only) == (
        Endpoint("db", 3306),
        "u",
        "p",
        None,
        False,
    )


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("{not json", "not valid JSON"),
        ("[]", "expected a JSON object"),
        ('{"1": {"user": "u"}}', 'missing "master"'),
        ('{"1": {"master": {"host": "h", "port": 70000}, "user": "u"}}', "port"),
        ('{"1": {"master": {"host": "h"}, "user": "u", "dequeueonly": true}}', "unknown field(s) dequeueonly"),
        ('{"1": {"master": {"host": "h"}, "user": "u", "dequeueOnly": "yes"}}', "dequeueOnly"),
        ('{"a_b": {"master": {"host": "h"}, "user": "u"}}', "letters and digits"),
        ('{"db1": {"master": {"host": "h"}, "user": "u"}, "1": {"master": {"host": "h"}, "user": "u"}}', "both map"),
    ],
)
def test_bad_config_is_a_one_line_config_error(text: str, reason: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_mysql_config(text, "/etc/pinlater/mysql.json")
    message = str(info.value)
    assert message.startswith("/etc/pinlater/mysql.json: ") and reason in message and "\n" not in message


# -- failures -----------------------------------------------------------------------------------


def test_lost_connection_then_recovery_after_restart(own_server: MariaDBServer) -> None:
    store = MySQLStore("1", config_for(own_server), pool_size=2, socket_timeout=2.0, num_auto_retries=1)
    try:
        store.create_queue("lost", 1)
        ids = store.enqueue_jobs("lost", new_jobs(5), T0)
        own_server.kill()
        with pytest.raises(ShardConnectionError):
            store.enqueue_jobs("lost", new_jobs(1), T0)
        with pytest.raises(ShardConnectionError):
            store.ping()
        own_server.start()
        store.ping()  # same store, new connections
        assert [job.local_id for job in store.dequeue_jobs("lost", 1, 10, "claim-after-restart", T0, False)] == ids
        # A clean restart leaves dead connections in the pool: one retry gets past them.
        own_server.restart()
        assert store.count_jobs("lost", JobFilter(JobState.IN_PROGRESS, 1, T0), None) == 5
    finally:
        store.close()


def test_without_retries_a_dead_pooled_connection_is_replaced_not_reported(own_server: MariaDBServer) -> None:
    store = MySQLStore("1", config_for(own_server), pool_size=1, socket_timeout=2.0, num_auto_retries=0)
    try:
        store.ping()
        own_server.restart()
        store.ping()  # the dead connection was found closed and replaced before anything was sent
        own_server.kill()
        with pytest.raises(ShardConnectionError):
            store.ping()  # a server that is down is still reported at once
        own_server.start()
        store.ping()
    finally:
        store.close()


def test_lock_wait_timeouts_are_retried_then_reported(own_server: MariaDBServer) -> None:
    store = MySQLStore("1", config_for(own_server), pool_size=1, num_auto_retries=1)
    blocker = own_server.admin_connection()
    try:
        store.create_queue("locked", 1)
        [local_id] = store.enqueue_jobs("locked", new_jobs(1), T0)
        store.dequeue_jobs("locked", 1, 1, "claim-locked", T0, False)
        with blocker.cursor() as cur:
            cur.execute("BEGIN")
            cur.execute("SELECT local_id FROM plq_1_locked.jobs_p1 WHERE local_id = %s FOR UPDATE", (local_id,))
        with pytest.raises(ShardConnectionError, match="1205") as waited:
            store.ack_jobs("locked", [AckItem(1, local_id)], [], T0)
        assert waited.value.contention, "the shard answered: other transactions held the row"
        assert pickle.loads(pickle.dumps(waited.value)).contention, "kept across processes"
        shard = Shard("1", store)
        shard.failed(waited.value)
        assert shard.healthy
        shard.failed(ShardConnectionError("1", "MySQL error 2003: refused"))
        assert not shard.healthy, "a connection failure still marks the shard"
        blocker.rollback()
        store.ack_jobs("locked", [AckItem(1, local_id)], [], T0)
        [record] = store.lookup_jobs("locked", [(1, local_id)], False)
        assert record.state == JobState.SUCCEEDED
    finally:
        blocker.close()
        store.close()


def test_deadlocks_are_retried_a_bounded_number_of_times(make_store: Callable[..., MySQLStore]) -> None:
    """num_auto_retries runs again for any transient error; a deadlock gets DEADLOCK_RETRIES more
    (a lock wait timeout none)."""
    store = make_store(num_auto_retries=2)
    calls: list[int] = []

    def failing(code: int, fail_times: int) -> Callable[[Any], str]:
        def op(cur: Any) -> str:
            calls.append(1)
            if len(calls) <= fail_times:
                raise pymysql.err.OperationalError(code, "Deadlock found when trying to get lock")
            return "ok"

        return op

    allowed = 2 + DEADLOCK_RETRIES
    assert store._run(None, failing(1213, allowed)) == "ok"
    assert len(calls) == allowed + 1
    calls.clear()
    with pytest.raises(ShardConnectionError, match="1213"):
        store._run(None, failing(1213, allowed + 1))
    assert len(calls) == allowed + 1
    calls.clear()
    with pytest.raises(ShardConnectionError, match="1205"):
        store._run(None, failing(1205, 3))
    assert len(calls) == 3


# -- the SQL files ------------------------------------------------------------------------------

_TABLE = "`plq_1_sqlcheck`.`jobs_p1`"
_DATABASE = "`plq_1_sqlcheck`"
_KEYS = "`plq_1_sqlcheck`.`dedup_keys`"
_LOCK = "`plq_1_sqlcheck`.`claim_lock`"
_EXPIRING = "`plq_1_sqlcheck`.`expiring`"
_EXPIRED = "`plq_1_sqlcheck`.`expired_count`"
_SCHEDULES = "`plq_1_sqlcheck`.`schedules`"
_MS = 1_700_000_000_000
_HASH = bytes(range(32))
_NOW = datetime(2023, 11, 14, 22, 13, 20)
_RANGE = (0, _NOW - timedelta(days=1), _NOW)
_ROW = (0, 2, 2, "status", _NOW, _NOW, _NOW, b"body")
_CHECKPOINT_ARGS = (1, 0, _NOW, _NOW, b"new", 1, "pre", "cancelled", "pre", 4990, "cancelled", "pre", "pre", 5000)
_CHECKPOINT_ARGS = (*_CHECKPOINT_ARGS, 3, 3, 1, 1, "c")
_DAY_AGO = _NOW - timedelta(days=1)
_SCAN_AFTER_ARGS = (0, _NOW, _DAY_AGO, _NOW, 5, 10, 0, _DAY_AGO, _NOW, _NOW, 10, 10)

#: Every SQL file with sample tokens and arguments, in an order that works on one database.
SAMPLES: dict[str, tuple[dict[str, Any], tuple[Any, ...]]] = {
    "schema/create_database": ({"database": _DATABASE}, ()),
    "schema/create_jobs_table": ({"table": _TABLE}, ()),
    "schema/create_dedup_keys_table": ({"table": _KEYS}, ()),
    "schema/create_claim_lock_table": ({"table": _LOCK}, ()),
    "schema/create_expiring_table": ({"table": _EXPIRING}, ()),
    "schema/create_expired_count_table": ({"table": _EXPIRED}, ()),
    "schema/create_schedules_table": ({"table": _SCHEDULES}, ()),
    "add_expire_column": ({"table": _LOCK}, ()),  # any table without the column
    "tables_without_expiry": ({}, ("plq\\_1\\_%", "jobs\\_p%")),
    "session_setup": ({}, ()),
    "server_info": ({}, ()),
    "ping": ({}, ()),
    "list_queue_databases": ({}, ("plq\\_1\\_%",)),
    "body_columns": ({}, ("plq_1_sqlcheck",)),
    "status_charsets": ({}, ("plq_1_sqlcheck",)),
    "list_queue_tables": ({}, ("plq\\_1\\_%", "jobs\\_p%")),
    "enqueue_jobs": ({"table": _TABLE, "rows": (2, 8)}, _ROW + _ROW),
    "enqueue_jobs_returning": ({"table": _TABLE, "rows": (1, 8)}, _ROW),
    "set_expiry": ({"table": _TABLE, "ids": 2}, (1, 2, _MS, _MS, 1, 2)),
    "expiring_add": ({"table": _EXPIRING, "rows": (2, 3)}, (_MS, 1, 1, _MS, 1, 2)),
    "peek_jobs": ({"table": _TABLE}, (_NOW, _MS, 10)),
    "dequeue_jobs": ({"table": _TABLE}, ("claim", _NOW, _NOW, _MS, _NOW, "~r|", "~r|", 10)),
    "reserve_jobs": ({"table": _TABLE}, ("~r|x", _NOW, _NOW, _MS, _NOW, "~r|", "~r|", 10)),
    "select_reserved_jobs": ({"table": _TABLE}, ("~r|x", _NOW)),
    "claim_reserved_jobs": ({"table": _TABLE, "ids": 1}, (1, "claim", _NOW, "~r|x", _NOW, _MS, 1)),
    "select_claimed_ids": ({"table": _TABLE, "ids": 1}, (1,)),
    "select_reserved_ids": ({"table": _TABLE, "ids": 2}, ("~r|x", _NOW, 1, 2)),
    "lock_claims": ({"table": _LOCK}, ()),
    "list_jobs_tables": ({}, ("plq_1_sqlcheck", "jobs\\_p%")),
    "count_in_progress_table": ({"table": _TABLE}, (10,)),
    "release_reservations": ({"table": _TABLE, "ids": 1}, (_NOW, "~r|x", _NOW, 1)),
    "select_claimed_jobs": ({"table": _TABLE}, ("claim",)),
    "lookup_jobs": ({"table": _TABLE, "ids": 2}, (1, 1, 2)),
    "checkpoint_job": (
        {"table": _TABLE},
        _CHECKPOINT_ARGS,
    ),
    "ack_succeeded_jobs": ({"table": _TABLE, "ids": 1}, ("ok", 5000, _NOW, 1)),
    "ack_expire_jobs": ({"table": _TABLE, "ids": 2}, ("err", "expired", "err", 4992, "expired", _NOW, _MS, 2, 3)),
    "ack_failed_jobs": (
        {"table": _TABLE, "ids": 2},
        (_NOW, "err", 5000, "err", "cancelled", "err", 4990, "cancelled", _NOW, 2, 3),
    ),
    "expiring_readd": ({"side": _EXPIRING, "table": _TABLE, "ids": 2}, (1, 2, 3)),
    "expired_count_add": ({"table": _EXPIRED}, (2,)),
    "expired_count_reset": ({}, ()),
    "expired_count_tally": ({}, ()),
    "expired_count_add_tallied": ({"table": _EXPIRED}, ()),
    "list_queue_side_tables": ({}, ("plq\\_1\\_%", "expired_count")),
    "expired_count_table": ({"table": _EXPIRED}, ("q",)),
    "cancel_pending_jobs": ({"table": _TABLE, "ids": 2}, (_NOW, "cancelled", 4990, "cancelled", 1, 2)),
    "cancel_in_progress_jobs": ({"table": _TABLE, "ids": 2}, (1, 2)),
    "expiring_due": ({"table": _EXPIRING}, (_MS, 10)),
    "expire_jobs": ({"table": _TABLE, "ids": 2}, (_NOW, "expired", 4992, "expired", _MS, 1, 2)),
    "expiring_forget": ({"table": _EXPIRING}, (_MS, 1, 1)),
    "oldest_ready_table": ({"table": _TABLE}, ("q", 1, _NOW, _MS)),
    "scan_jobs_after": (
        {"table": _TABLE},
        _SCAN_AFTER_ARGS,
    ),
    "put_schedule": ({"table": _SCHEDULES}, (b"name", b"spec", _MS, 0)),
    "list_schedules": ({"table": _SCHEDULES}, ()),
    "due_schedule_sizes_table": ({"table": _SCHEDULES}, ("q", _MS, 10)),
    "schedule_specs_table": ({"table": _SCHEDULES, "ids": 2}, ("q", b"a", b"b")),
    "advance_schedule": ({"table": _SCHEDULES}, (_MS + 1, b"name", _MS)),
    "delete_schedule": ({"table": _SCHEDULES}, (b"name",)),
    "count_jobs": ({"table": _TABLE}, (*_RANGE, 100)),
    "queue_counts_table": ({"table": _TABLE}, ("q", 1, _NOW)),
    "list_monitor_tables": ({}, ("plq\\_1\\_%", "jobs\\_p%", "expiring", "dedup_keys")),
    "monitor_busy_jobs_table": ({"table": _TABLE}, ("q",)),
    "monitor_busy_side_table": ({"table": _EXPIRING}, ("q",)),
    "scan_jobs": ({"table": _TABLE}, (0, _NOW - timedelta(days=1), _NOW, 10)),
    "filter_ties": ({"table": _TABLE}, (4096, 0, _NOW, 5, _DAY_AGO, _NOW, 10)),
    "filter_after": ({"table": _TABLE}, (4096, 0, _DAY_AGO, _NOW, 10)),
    "filter_ties_newest": ({"table": _TABLE}, (4096, 0, _NOW, 5, _DAY_AGO, _NOW, 10)),
    "filter_before": ({"table": _TABLE}, (4096, 0, _NOW, _DAY_AGO, 10)),
    "bodies_by_id": ({"table": _TABLE, "ids": 2}, (1, 2)),
    "body_bytes_by_id": ({"table": _TABLE, "ids": 2}, (1, 2)),
    "records_by_id": ({"table": _TABLE, "ids": 2}, (1, 2)),
    "retry_failed_jobs": ({"table": _TABLE}, (1, _NOW, _NOW, 10)),
    "select_timed_out_jobs": ({"table": _TABLE}, (_NOW, 10)),
    "resurrect_expire_jobs": ({"table": _TABLE, "ids": 2}, ("expired", 4992, "expired", _NOW, _MS, 1, 2)),
    "resurrect_timed_out_jobs": ({"table": _TABLE, "ids": 2}, (_NOW, "cancelled", 4990, "cancelled", _NOW, 1, 2)),
    "gc_finished_jobs": ({"table": _TABLE}, (2, _NOW, _NOW, 10)),
    "gc_finished_jobs_all": ({"table": _TABLE}, (2, _NOW, 10)),
    "delete_jobs": ({"table": _TABLE}, (*_RANGE, 10)),
    "lock_bodies_by_id": ({"table": _TABLE, "ids": 2}, (1, 2)),
    "delete_jobs_by_id": ({"table": _TABLE, "ids": 2}, (*_RANGE, 1, 2)),
    "dedup_lock_keys": ({"table": _KEYS, "rows": (1, 2)}, (_HASH, b"key")),
    "dedup_records": ({"table": _KEYS, "ids": 1}, (_HASH,)),
    "dedup_take_keys": ({"table": _KEYS, "rows": (1, 5)}, (_HASH, b"key", 1, 1, 0)),
    "dedup_keys_of_jobs": ({"table": _KEYS, "ids": 2}, (1, 1, 2)),
    "dedup_gc_candidates": ({"table": _KEYS}, (0, -1, -1, b"", 10)),
    "dedup_forget": ({"table": _KEYS}, (_HASH, 1, 1, 0)),
    "schema/drop_database": ({"database": _DATABASE}, ()),
}


def test_every_sql_file_executes_on_a_real_server(server: MariaDBServer) -> None:
    assert sorted(SAMPLES) == queries.all_names(), "add a sample for every SQL file"
    conn = server.admin_connection()
    try:
        with conn.cursor() as cur:
            for name, (tokens, args) in SAMPLES.items():
                sql = queries.load(name).render(**tokens)
                cur.execute(sql, args or None)
                cur.fetchall()
    finally:
        conn.close()


def test_text_is_fitted_to_a_character_set_as_mysql_wrote_it() -> None:
    from pinlater.backends.mysql.text_charsets import fit_text

    text = "ok é ✓ 😀"
    assert fit_text(text, "utf8mb4") == fit_text(text, None) == text
    assert fit_text(text, "latin1") == "ok é ? ?"
    assert fit_text(text, "utf8mb3") == fit_text(text, "utf8") == "ok é ✓ ?"
    assert fit_text(text, "koi8r") == "ok ? ? ?", "a set it does not know: ASCII, which every one holds"
    assert fit_text("plain", "latin1") == "plain"
