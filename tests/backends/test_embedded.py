"""What only the embedded (SQLite) store promises: durability, one transaction per call,
thread safety, the data directory lock, and SQL files that all compile."""

from __future__ import annotations

import inspect
import json
import os
import re
import sqlite3
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from tests.support.wait import wait_for

import pinlater
from pinlater.backends.base import AckItem, JobFilter, JobState, NewJob
from pinlater.backends.embedded import DataDirLock, EmbeddedStore, open_embedded_shards, shard_path, sql
from pinlater.backends.embedded import body_filtered as body_filtered_module
from pinlater.backends.embedded import connection as connection_module
from pinlater.backends.embedded import dedup_keys as dedup_keys_module
from pinlater.backends.embedded import groups as groups_module
from pinlater.backends.embedded import native_hot as native_hot_module
from pinlater.backends.embedded import store as store_module
from pinlater.config import Settings
from pinlater.errors import ShardConnectionError, StoreLockedError

Q = "q"
T0 = 1_700_000_000_000


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def store(data_dir: Path) -> Iterator[EmbeddedStore]:
    shard = EmbeddedStore(data_dir, "1")
    shard.create_queue(Q, 3)
    yield shard
    shard.close()


def jobs(n: int, run_after: int = T0) -> list[NewJob]:
    return [NewJob(1, f"body-{i}".encode(), run_after, 2) for i in range(n)]


def python_child(code: str, *args: str) -> subprocess.Popen[str]:
    """A Python child that imports this same pinlater; stdin stays open until we close or kill it."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(pinlater.__file__).parents[1]), *sys.path])}
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )


def kill(child: subprocess.Popen[str]) -> None:
    child.kill()  # SIGKILL: no cleanup of any kind runs in the child
    child.wait(timeout=10)
    assert child.stdin is not None and child.stdout is not None
    child.stdin.close()
    child.stdout.close()


# -- files and durability -----------------------------------------------------------------------


def test_one_wal_file_per_shard(store: EmbeddedStore, data_dir: Path) -> None:
    assert store.path == shard_path(data_dir, "1") == data_dir / "shard-1.sqlite3"
    with sqlite3.connect(store.path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


@pytest.mark.parametrize("mode, level", [("FULL", 2), ("NORMAL", 1)])
def test_synchronous_mode_is_applied(data_dir: Path, mode: str, level: int) -> None:
    shard = EmbeddedStore(data_dir, "1", synchronous=mode)
    try:
        assert shard._conn is not None
        assert shard._conn.execute("PRAGMA synchronous").fetchone()[0] == level
    finally:
        shard.close()


def test_an_unknown_synchronous_mode_is_refused(data_dir: Path) -> None:
    with pytest.raises(ValueError, match="synchronous"):
        EmbeddedStore(data_dir, "1", synchronous="OFF")


def test_jobs_survive_close_and_reopen(store: EmbeddedStore, data_dir: Path) -> None:
    ids = store.enqueue_jobs(Q, jobs(5), T0)
    store.dequeue_jobs(Q, 1, 2, "claim", T0, False)
    store.close()
    reopened = EmbeddedStore(data_dir, "1")
    try:
        assert reopened.get_queue_names() == {Q}
        found = reopened.lookup_jobs(Q, [(1, i) for i in ids], True)
        assert [(job.local_id, job.body) for job in found] == [(i, f"body-{n}".encode()) for n, i in enumerate(ids)]
        assert [job.state for job in found].count(JobState.IN_PROGRESS) == 2
    finally:
        reopened.close()


def test_enqueued_jobs_survive_sigkill(data_dir: Path) -> None:
    child = python_child(
        """
        import json, sys
        from pathlib import Path
        from pinlater.backends.base import NewJob
        from pinlater.backends.embedded import EmbeddedStore
        store = EmbeddedStore(Path(sys.argv[1]), "1")
        store.create_queue("q", 3)
        n = 0
        while True:  # keep enqueuing, so the kill lands while a batch may be in flight
            ids = store.enqueue_jobs("q", [NewJob(1, b"b%d" % (n + i), 0, 2) for i in range(10)], 1)
            n += 10
            print(json.dumps(ids), flush=True)
        """,
        str(data_dir),
    )
    assert child.stdout is not None
    acknowledged = [json.loads(child.stdout.readline()) for _ in range(20)]
    kill(child)
    reopened = EmbeddedStore(data_dir, "1")
    try:
        ids = [i for batch in acknowledged for i in batch]
        found = reopened.lookup_jobs(Q, [(1, i) for i in ids], True)
        assert [job.local_id for job in found] == ids
        assert [job.body for job in found] == [b"b%d" % n for n in range(len(ids))]
    finally:
        reopened.close()


def test_a_negative_limit_means_none_not_all(store: EmbeddedStore) -> None:
    store.enqueue_jobs(Q, jobs(3), T0)
    assert store.dequeue_jobs(Q, 1, -1, "claim", T0, False) == []
    assert store.delete_jobs(Q, JobFilter(JobState.PENDING, 1, T0, None), -1) == 0


def test_local_ids_are_never_reused(store: EmbeddedStore) -> None:
    first = store.enqueue_jobs(Q, jobs(3), T0)
    assert store.delete_jobs(Q, JobFilter(JobState.PENDING, 1, T0, None), 10) == 3
    assert min(store.enqueue_jobs(Q, jobs(1), T0)) > max(first)


# -- transactions -------------------------------------------------------------------------------


def traced(shard: EmbeddedStore) -> list[str]:
    statements: list[str] = []
    assert shard._conn is not None
    shard._conn.set_trace_callback(statements.append)
    return statements


def verbs(statements: list[str]) -> list[str]:
    """The first keyword of each traced statement, past the header comment of the .sql file."""
    code = ["\n".join(ln for ln in s.splitlines() if not ln.lstrip().startswith("--")) for s in statements]
    return [c.split()[0].upper() for c in code]


def test_a_batch_is_one_transaction(store: EmbeddedStore) -> None:
    statements = traced(store)
    ids = store.enqueue_jobs(Q, jobs(100), T0)
    enqueue = verbs(statements)
    statements.clear()
    store.dequeue_jobs(Q, 1, 100, "claim", T0, False)
    store.ack_jobs(Q, [AckItem(1, i) for i in ids[:50]], [AckItem(1, i) for i in ids[50:]], T0)
    dequeue_and_ack = verbs(statements)
    assert (enqueue.count("BEGIN"), enqueue.count("COMMIT"), enqueue.count("INSERT")) == (1, 1, 100)
    assert enqueue[0] == "BEGIN" and enqueue[-1] == "COMMIT"
    assert (dequeue_and_ack.count("BEGIN"), dequeue_and_ack.count("COMMIT")) == (2, 2)
    assert dequeue_and_ack.count("UPDATE") == 1 + 100  # one set-based claim, 100 acks in one transaction
    assert store.count_jobs(Q, JobFilter(JobState.SUCCEEDED, 1, T0), None) == 50


def test_a_failed_call_leaves_no_partial_write(store: EmbeddedStore) -> None:
    with pytest.raises(ValueError, match="regex"):
        store.delete_jobs(Q, JobFilter(JobState.PENDING, 1, T0, None, body_regex="("), 10)
    ids = store.enqueue_jobs(Q, jobs(2), T0)
    assert store._conn is not None and not store._conn.in_transaction
    assert len(store.lookup_jobs(Q, [(1, i) for i in ids], False)) == 2


def test_calls_after_close_raise_shard_connection_error(store: EmbeddedStore) -> None:
    store.close()
    with pytest.raises(ShardConnectionError, match="closed"):
        store.get_queue_names()
    with pytest.raises(ShardConnectionError):
        store.ping()


def test_a_damaged_file_is_a_shard_connection_error(data_dir: Path) -> None:
    data_dir.mkdir()
    shard_path(data_dir, "1").write_bytes(b"this is not a database, " * 100)
    with pytest.raises(ShardConnectionError) as info:
        EmbeddedStore(data_dir, "1")
    assert info.value.shard == "1"


def test_concurrent_threads_never_dequeue_a_job_twice(store: EmbeddedStore) -> None:
    dequeued: list[list[int]] = [[] for _ in range(8)]
    enqueued: list[list[int]] = [[] for _ in range(8)]
    start = threading.Barrier(8)

    def worker(n: int) -> None:
        start.wait()
        for round_ in range(25):
            enqueued[n] += store.enqueue_jobs(Q, jobs(10), T0)
            claimed = store.dequeue_jobs(Q, 1, 7, f"claim-{n}-{round_}", T0, False)
            dequeued[n] += [job.local_id for job in claimed]
            store.ack_jobs(Q, [AckItem(1, job.local_id) for job in claimed], [], T0)

    with ThreadPoolExecutor(8) as pool:
        for future in [pool.submit(worker, n) for n in range(8)]:
            future.result()
    leftover = [job.local_id for job in store.dequeue_jobs(Q, 1, 10_000, "drain", T0, False)]
    all_dequeued = [i for ids in dequeued for i in ids] + leftover
    assert len(all_dequeued) == len(set(all_dequeued)) == 8 * 25 * 10
    assert sorted(all_dequeued) == sorted(i for ids in enqueued for i in ids)


# -- group commit --------------------------------------------------------------------------------


@pytest.fixture
def no_time_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """Groups bounded by their size only, so a slow machine cannot split the groups a test builds."""
    monkeypatch.setattr(connection_module, "GROUP_MAX_SECONDS", 3600.0)


class Holder:
    """A write that stays inside its savepoint until ``writers`` more writers wait behind it, so
    that they all join its group. ``op`` runs first inside the held write."""

    def __init__(self, store: EmbeddedStore, writers: int, op: str = "") -> None:
        self.store, self.writers, self.op = store, writers, op
        self.go = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        try:
            with self.store._write() as conn:
                if self.op:
                    conn.execute(self.op)
                self.go.wait(timeout=30)
        except BaseException as exc:
            self.error = exc

    def __enter__(self) -> Holder:
        self.thread.start()
        wait_for(lambda: self.store._in_use, what="the held write")
        return self

    def release_when_queued(self) -> None:
        wait_for(lambda: self.store._waiting_writers == self.writers, what=f"{self.writers} waiting writers")
        self.go.set()

    def __exit__(self, *exc: object) -> None:
        self.go.set()
        self.thread.join(timeout=30)


def test_a_lone_writer_commits_at_once(store: EmbeddedStore) -> None:
    before = store.commits
    store.enqueue_jobs(Q, jobs(2), T0)
    assert store.commits == before + 1
    assert store._conn is not None and not store._conn.in_transaction


def test_concurrent_writers_share_commits_and_see_their_own_results(store: EmbeddedStore, no_time_bound: None) -> None:
    threads, rounds = 8, 20
    enqueued: list[list[int]] = [[] for _ in range(threads)]
    statements = traced(store)
    before = store.commits

    def writer(n: int) -> None:
        for round_ in range(rounds):
            batch = [NewJob(1, f"{n}-{round_}-{i}".encode(), T0, 2) for i in range(5)]
            ids = store.enqueue_jobs(Q, batch, T0)
            # What a call returned is committed: a read (which never sees an open group) finds it.
            found = store.lookup_jobs(Q, [(1, i) for i in ids], True)
            assert [job.body for job in found] == [job.body for job in batch]
            enqueued[n] += ids

    with Holder(store, threads) as holder, ThreadPoolExecutor(threads) as pool:
        futures = [pool.submit(writer, n) for n in range(threads)]
        holder.release_when_queued()  # the first round of every thread joins the holder's group
        for future in futures:
            future.result()
    assert holder.error is None
    ids = [i for batch in enqueued for i in batch]
    assert len(ids) == len(set(ids)) == threads * rounds * 5
    operations = threads * rounds + 1
    commits = store.commits - before
    assert verbs(statements).count("COMMIT") - threads * rounds == commits  # one COMMIT per lookup too
    assert commits <= operations - threads  # at least the holder's group of threads + 1 shared one
    assert verbs(statements).count("SAVEPOINT") == operations


def test_a_write_that_raises_leaves_the_rest_of_its_group_committed(store: EmbeddedStore, no_time_bound: None) -> None:
    before = store.commits
    results: dict[str, object] = {}

    def good() -> None:
        results["good"] = store.enqueue_jobs(Q, jobs(3), T0)

    def bad() -> None:  # two rows are inserted, then the third cannot be bound
        try:
            store.enqueue_jobs(Q, [*jobs(2), NewJob(1, b"too late", 2**64, 2)], T0)
        except OverflowError as exc:
            results["bad"] = exc

    with Holder(store, 2, op="INSERT INTO queues VALUES ('held', 1, 0)") as holder:
        others = [threading.Thread(target=good), threading.Thread(target=bad)]
        for thread in others:
            thread.start()
        holder.release_when_queued()
        for thread in others:
            thread.join(timeout=30)
    assert holder.error is None
    assert isinstance(results["bad"], OverflowError)
    assert store.commits == before + 1  # the three writes were one transaction
    assert store.get_queue_names() == {Q, "held"}
    pending = store.scan_jobs(Q, JobFilter(JobState.PENDING, 1, T0, None), 100)
    assert sorted(job.local_id for job in pending) == results["good"]
    assert store._conn is not None and not store._conn.in_transaction


def test_a_failed_commit_fails_every_write_of_the_group(store: EmbeddedStore, no_time_bound: None) -> None:
    # A deferred foreign key is checked at COMMIT only: the held write makes that COMMIT fail.
    assert store._conn is not None
    store._conn.execute("PRAGMA foreign_keys = ON")
    store._conn.execute("CREATE TABLE parent (id INTEGER PRIMARY KEY)")
    store._conn.execute("CREATE TABLE child (parent_id INTEGER REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED)")
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            store.enqueue_jobs(Q, jobs(3), T0)
        except ShardConnectionError as exc:
            errors.append(exc)

    before = store.commits
    with Holder(store, 2, op="INSERT INTO child VALUES (1)") as holder:
        others = [threading.Thread(target=writer) for _ in range(2)]
        for thread in others:
            thread.start()
        holder.release_when_queued()
        for thread in others:
            thread.join(timeout=30)
    assert isinstance(holder.error, ShardConnectionError) and "FOREIGN KEY" in str(holder.error)
    assert len(errors) == 2 and all("FOREIGN KEY" in str(exc) for exc in errors)
    assert store.commits == before
    assert store.count_jobs(Q, JobFilter(JobState.PENDING, 1, T0, None), None) == 0
    assert store._conn.execute("SELECT count(*) FROM child").fetchone()[0] == 0
    assert len(store.enqueue_jobs(Q, jobs(1), T0)) == 1  # the shard still works


def test_close_waits_for_the_group_in_flight_and_keeps_what_it_told(
    store: EmbeddedStore, data_dir: Path, no_time_bound: None
) -> None:
    outcome: list[object] = []

    def writer() -> None:
        try:
            outcome.append(store.enqueue_jobs(Q, jobs(2), T0))
        except ShardConnectionError as exc:
            outcome.append(exc)

    with Holder(store, 1, op="INSERT INTO queues VALUES ('held', 1, 0)") as holder:
        threads = [threading.Thread(target=writer), threading.Thread(target=store.close)]
        for thread in threads:
            thread.start()
        holder.release_when_queued()  # the writer joins the group, unless close takes it first
        for thread in threads:
            thread.join(timeout=30)
    assert holder.error is None
    with pytest.raises(ShardConnectionError, match="closed"):
        store.enqueue_jobs(Q, jobs(1), T0)
    reopened = EmbeddedStore(data_dir, "1")
    try:
        assert reopened.get_queue_names() == {Q, "held"}
        [result] = outcome
        if isinstance(result, list):  # it joined the group: it is stored
            assert len(reopened.lookup_jobs(Q, [(1, i) for i in result], False)) == 2
        else:  # close committed the holder's group first
            assert "closed" in str(result)
            assert reopened.count_jobs(Q, JobFilter(JobState.PENDING, 1, T0, None), None) == 0
    finally:
        reopened.close()


# -- SQL files and shard opening ----------------------------------------------------------------


class _AnyParams(dict[str, object]):
    """Binds NULL to every named parameter not given, so EXPLAIN can compile a statement."""

    def __missing__(self, key: str) -> object:
        return None


def test_every_sql_file_compiles_and_is_used(store: EmbeddedStore) -> None:
    assert store._conn is not None
    statements = [name for name in sql.names() if name != "schema"]
    for name in statements:
        store._conn.execute("EXPLAIN " + sql.load(name), _AnyParams()).fetchall()
    sources = [store_module, body_filtered_module, dedup_keys_module, groups_module]
    used = set(re.findall(r'sql\.load\("(\w+)"\)', "".join(inspect.getsource(m) for m in sources)))
    assert used | set(native_hot_module.STATEMENTS) == set(sql.names())  # the Rust writer's too


def _plan(conn: sqlite3.Connection, name: str, **params: object) -> str:
    """SQLite's plan for a statement of ``sql/``, its steps joined by " | "."""
    rows = conn.execute("EXPLAIN QUERY PLAN " + sql.load(name), _AnyParams(params)).fetchall()
    return " | ".join(row[3] for row in rows)


def test_statements_by_id_probe_each_id_and_gc_reads_the_finished_jobs_index(store: EmbeddedStore) -> None:
    """Statements given ids look each one up by rowid, never walking a queue's index (which
    holds every PENDING job); GC reads only the partial index of finished jobs."""
    assert store._conn is not None
    names = ("claim_reserved", "release_reservations", "delete_jobs_by_id", "lookup_jobs")
    for name in (*names, "resurrect_timed_out_jobs", "resurrect_expire"):
        plan = _plan(store._conn, name, ids="[1, 2, 3]")
        assert "INTEGER PRIMARY KEY" in plan and "jobs_by_run_after" not in plan, (name, plan)
    assert "COVERING INDEX jobs_finished_by_updated_at" in _plan(store._conn, "gc_finished_jobs", state=2)
    # The claim-timeout sweep's walk of the jobs in progress is a read of its own.
    assert "INDEX jobs_by_run_after (queue=? AND priority=? AND state=?)" in _plan(store._conn, "timed_out_candidates")


def test_a_claim_timeout_sweep_walks_the_jobs_in_progress_outside_the_write_lock(store: EmbeddedStore) -> None:
    """The sweep reads its candidates in a read transaction: one that finds none writes nothing
    (no commit, so it never held the write lock while it walked), and the write changes only the
    candidates still claimed before the cutoff, whatever happened to the others since the read."""
    ids = store.enqueue_jobs(Q, jobs(5), T0)
    claimed = store.dequeue_jobs(Q, 1, 5, "claim", T0 + 1, False)
    assert sorted(job.local_id for job in claimed) == sorted(ids)
    commits = store.commits
    assert store.resurrect_timed_out_jobs(Q, 1, T0, 10, T0 + 2) == 0, "none claimed before T0"
    assert store.commits == commits, "a sweep that resurrects nothing writes nothing"

    store.ack_jobs(Q, [AckItem(1, ids[0])], [], T0 + 3)  # acked after the sweep read it, say
    assert store._conn is not None
    params = {"queue": Q, "priority": 1, "claimed_before_ms": T0 + 2, "ids": json.dumps(ids)}
    with store._write() as conn:
        rows = conn.execute(
            sql.load("resurrect_timed_out_jobs"), {**params, "status_limit": 100, "now_ms": T0 + 4}
        ).fetchall()
    assert len(rows) == 4, "the acked job is left alone"
    states = {record.local_id: record.state for record in store.lookup_jobs(Q, [(1, i) for i in ids], False)}
    assert states == {ids[0]: JobState.SUCCEEDED, **{i: JobState.PENDING for i in ids[1:]}}
    assert store.resurrect_timed_out_jobs(Q, 1, T0 + 5, 10, T0 + 6) == 0
    assert store.commits == commits + 2, "the ack and the write above; nothing left to resurrect"


def test_a_version_1_file_is_migrated_at_open_and_keeps_its_jobs(data_dir: Path) -> None:
    """A file written by a server with the version 1 schema (an updated_at index over every job)
    opens with the partial index instead, its jobs served and its finished jobs still GCed."""
    shard = EmbeddedStore(data_dir, "1")
    shard.create_queue(Q, 3)
    shard.enqueue_jobs(Q, jobs(3), T0)
    [claimed] = shard.dequeue_jobs(Q, 1, 1, "old:1", T0 + 1, False)
    shard.ack_jobs(Q, [AckItem(1, claimed.local_id)], [], T0 + 2)
    shard.close()
    path = shard_path(data_dir, "1")
    with sqlite3.connect(path) as conn:  # back to what version 1 left
        conn.execute("DROP INDEX jobs_finished_by_updated_at")
        conn.execute("CREATE INDEX jobs_by_updated_at ON jobs (queue, priority, state, updated_at_ms)")
        conn.execute("PRAGMA user_version = 1")
    conn.close()

    shard = EmbeddedStore(data_dir, "1")
    try:
        assert shard._conn is not None
        indexes = {row[0] for row in shard._conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
        assert "jobs_by_updated_at" not in indexes and "jobs_finished_by_updated_at" in indexes
        assert shard._conn.execute("PRAGMA user_version").fetchone()[0] == 6
        assert shard.count_jobs(Q, JobFilter(JobState.PENDING, 1, T0 + 3), None) == 2
        assert shard.gc_finished_jobs(Q, 1, JobState.SUCCEEDED, T0 + 3, 10) == 1
    finally:
        shard.close()


def test_open_embedded_shards(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "d", embedded_num_shards=3, embedded_synchronous="NORMAL")
    shards = open_embedded_shards(settings)
    try:
        assert list(shards) == ["1", "2", "3"]
        assert all(shard.name == name and shard.path.exists() for name, shard in shards.items())
        shards["2"].create_queue(Q, 3)
        assert [shard.get_queue_names() for shard in shards.values()] == [set(), {Q}, set()]
    finally:
        for shard in shards.values():
            shard.close()


# -- the data directory lock --------------------------------------------------------------------

HOLD_LOCK = """
    import sys
    from pathlib import Path
    from pinlater.backends.embedded import DataDirLock
    lock = DataDirLock(Path(sys.argv[1])).acquire()
    print("locked", flush=True)
    sys.stdin.read()  # hold it until stdin closes or we are killed
    """


def test_lock_creates_the_directory_and_records_the_pid(data_dir: Path) -> None:
    with DataDirLock(data_dir) as lock:
        assert lock.held
        assert (data_dir / "LOCK").read_text().strip() == str(os.getpid())
    assert not lock.held
    lock.release()  # idempotent


def test_a_second_lock_in_the_same_process_is_refused(data_dir: Path) -> None:
    with DataDirLock(data_dir):
        with pytest.raises(StoreLockedError, match=f"pid {os.getpid()}"):
            DataDirLock(data_dir).acquire()
    with DataDirLock(data_dir) as again:
        assert again.held


def test_a_lock_held_by_another_process_is_refused_until_it_exits(data_dir: Path) -> None:
    child = python_child(HOLD_LOCK, str(data_dir))
    assert child.stdout is not None and child.stdin is not None
    assert child.stdout.readline().strip() == "locked"
    try:
        with pytest.raises(StoreLockedError) as info:
            DataDirLock(data_dir).acquire()
        assert str(data_dir) in str(info.value) and f"pid {child.pid}" in str(info.value)
    finally:
        child.stdin.close()
        child.wait(timeout=10)
        child.stdout.close()
    with DataDirLock(data_dir) as lock:
        assert lock.held


def test_a_lock_of_a_killed_process_never_blocks(data_dir: Path) -> None:
    child = python_child(HOLD_LOCK, str(data_dir))
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "locked"
    kill(child)
    with DataDirLock(data_dir) as lock:
        assert lock.held
        assert (data_dir / "LOCK").read_text().strip() == str(os.getpid())
