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

import pinlater
from pinlater.backends.base import AckItem, JobFilter, JobState, NewJob
from pinlater.backends.embedded import DataDirLock, EmbeddedStore, open_embedded_shards, shard_path, sql
from pinlater.backends.embedded import body_filtered as body_filtered_module
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


# -- SQL files and shard opening ----------------------------------------------------------------


class _AnyParams(dict[str, object]):
    """Binds NULL to every named parameter, so EXPLAIN can compile a statement."""

    def __missing__(self, key: str) -> object:
        return None


def test_every_sql_file_compiles_and_is_used(store: EmbeddedStore) -> None:
    assert store._conn is not None
    statements = [name for name in sql.names() if name != "schema"]
    for name in statements:
        store._conn.execute("EXPLAIN " + sql.load(name), _AnyParams()).fetchall()
    used = set(
        re.findall(r'sql\.load\("(\w+)"\)', inspect.getsource(store_module) + inspect.getsource(body_filtered_module))
    )
    assert used == set(sql.names())


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
