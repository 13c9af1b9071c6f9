"""Dedup keys in the embedded store, beyond the shared contract (``test_dedup_conformance.py``):
files written before the key table existed, records across a restart, the GC walk, and the
indexes the statements use."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from pinlater.backends.base import AckItem, Enqueued, JobFilter, JobState, KeyedJob, NewJob
from pinlater.backends.embedded import EmbeddedStore, shard_path, sql
from pinlater.backends.embedded import store as store_module
from pinlater.errors import ShardConnectionError

Q = "q"
T0 = 1_700_000_000_000


def keyed(key: str, priority: int = 1, window_ms: int = 0) -> KeyedJob:
    return KeyedJob(NewJob(priority, key.encode(), T0, 2), key, window_ms)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def store(data_dir: Path) -> Iterator[EmbeddedStore]:
    shard = EmbeddedStore(data_dir, "1")
    shard.create_queue(Q, 3)
    try:
        yield shard
    finally:
        shard.close()


def test_a_version_2_file_gains_the_key_table_and_keeps_its_jobs(data_dir: Path) -> None:
    shard = EmbeddedStore(data_dir, "1")
    shard.create_queue(Q, 3)
    [plain] = shard.enqueue_jobs(Q, [NewJob(1, b"old", T0, 2)], T0)
    shard.close()
    with sqlite3.connect(shard_path(data_dir, "1")) as conn:  # back to what version 2 left
        conn.execute("DROP TABLE dedup_keys")
        conn.execute("PRAGMA user_version = 2")
    conn.close()

    shard = EmbeddedStore(data_dir, "1")
    try:
        assert shard._conn is not None
        assert shard._conn.execute("PRAGMA user_version").fetchone()[0] == 6
        [record] = shard.lookup_jobs(Q, [(1, plain)], True)
        assert (record.body, record.dedup_key) == (b"old", None)
        [first] = shard.enqueue_keyed_jobs(Q, [keyed("k")], T0)
        [again] = shard.enqueue_keyed_jobs(Q, [keyed("k")], T0 + 1)
        assert not first.deduplicated and again == Enqueued(1, first.local_id, True)
    finally:
        shard.close()


def test_key_records_survive_a_restart(data_dir: Path, store: EmbeddedStore) -> None:
    [first] = store.enqueue_keyed_jobs(Q, [keyed("k", priority=2)], T0)
    store.close()
    shard = EmbeddedStore(data_dir, "1")
    try:
        assert shard.enqueue_keyed_jobs(Q, [keyed("k")], T0 + 1) == [Enqueued(2, first.local_id, True)]
        [record] = shard.lookup_jobs(Q, [(2, first.local_id)], False)
        assert record.dedup_key == "k"
    finally:
        shard.close()


def test_keys_differing_only_in_trailing_spaces_or_nul_are_distinct(store: EmbeddedStore) -> None:
    keys = ["a", "a ", "a\x00", "A"]
    got = store.enqueue_keyed_jobs(Q, [keyed(k) for k in keys], T0)
    assert not any(e.deduplicated for e in got)
    records = store.lookup_jobs(Q, [(1, e.local_id) for e in got], False)
    assert [r.dedup_key for r in records] == keys


def test_body_filtered_scans_show_the_key(store: EmbeddedStore) -> None:
    [a] = store.enqueue_keyed_jobs(Q, [keyed("match-keyed")], T0)
    [plain] = store.enqueue_jobs(Q, [NewJob(1, b"match-plain", T0, 2)], T0)
    store.enqueue_keyed_jobs(Q, [keyed("other")], T0)
    found = store.scan_jobs(Q, JobFilter(JobState.PENDING, 1, T0, body_regex="^match"), 10)
    assert {r.local_id: r.dedup_key for r in found} == {a.local_id: "match-keyed", plain: None}


def test_the_gc_walk_goes_on_past_records_still_held(store: EmbeddedStore) -> None:
    """Each call looks at no more than its limit of records whose window passed, and the next
    call goes on after them, so records behind many held ones are reached. (Windows of a
    millisecond: the walk sees records with a window only.)"""
    store.enqueue_keyed_jobs(Q, [keyed(f"a{i}", window_ms=1) for i in range(6)], T0)  # PENDING: held
    store.enqueue_keyed_jobs(Q, [keyed(f"b{i}", priority=2, window_ms=1) for i in range(3)], T0)
    assert store.delete_jobs(Q, JobFilter(JobState.PENDING, 2, T0, future=None), 10) == 3
    assert [store.gc_dedup_keys(Q, T0 + 1, 2) for _ in range(6)] == [0, 0, 0, 2, 1, 0]
    assert not any(e.deduplicated for e in store.enqueue_keyed_jobs(Q, [keyed(f"b{i}") for i in range(3)], T0 + 2))


def test_deleting_a_queue_starts_its_gc_walk_over(store: EmbeddedStore) -> None:
    store.enqueue_keyed_jobs(Q, [keyed(f"a{i}", window_ms=1) for i in range(3)], T0)
    assert store.gc_dedup_keys(Q, T0 + 1, 2) == 0  # the walk stops after a1
    store.delete_queue(Q)
    store.create_queue(Q, 3)
    store.enqueue_keyed_jobs(Q, [keyed(f"a{i}", priority=2, window_ms=1) for i in range(3)], T0)
    store.delete_jobs(Q, JobFilter(JobState.PENDING, 2, T0, future=None), 10)
    assert store.gc_dedup_keys(Q, T0 + 1, 2) == 2  # a0 and a1, not only a2 past the old position


def _plan(conn: sqlite3.Connection, name: str, **params: object) -> str:
    rows = conn.execute("EXPLAIN QUERY PLAN " + sql.load(name), params).fetchall()
    return " | ".join(row[3] for row in rows)


def test_key_statements_use_their_indexes(store: EmbeddedStore) -> None:
    assert store._conn is not None
    conn = store._conn
    filters = {
        "queue": Q,
        "priority": 1,
        "state": 0,
        "also_state": -1,
        "run_after_gt": 0,
        "run_after_le": T0,
        "limit": 10,
    }
    for name, params in (
        ("lookup_jobs", {"queue": Q, "ids": "[1, 2]", "include_body": 0}),
        ("scan_jobs", {**filters, "before_run_after": T0, "before_id": 9}),
        ("filter_candidates_newest", {**filters, "before_run_after": T0, "before_id": 9}),
    ):
        assert "USING INDEX dedup_keys_by_job (local_id=?" in _plan(conn, name, **params), name
    holder = _plan(conn, "dedup_holders", queue=Q, keys='["k", "l"]')
    assert "USING PRIMARY KEY (queue=? AND dedup_key=?)" in holder, holder
    gc = _plan(conn, "dedup_gc_candidates", queue=Q, now_ms=T0, after_held_until_ms=0, after_key="", limit=5)
    assert "USING INDEX dedup_keys_windowed (queue=?" in gc and "TEMP B-TREE" not in gc, gc
    [windowed] = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'dedup_keys_windowed'").fetchone()
    assert windowed.endswith("WHERE held_until_ms > 0"), "records without a window are left out"
    forget = _plan(conn, "dedup_keys_of_jobs_forget", queue=Q, ids="[1, 2]")
    assert "USING INDEX dedup_keys_by_job (local_id=?" in forget, forget
    assert "USING PRIMARY KEY (queue=?)" in _plan(conn, "queue_has_dedup_keys", queue=Q)


def _records(store: EmbeddedStore) -> dict[str, tuple[int, int]]:
    """Every key record of the file: key -> (local id, held_until_ms)."""
    assert store._conn is not None
    rows = store._conn.execute("SELECT dedup_key, local_id, held_until_ms FROM dedup_keys")
    return {key: (local_id, held_until) for key, local_id, held_until in rows}


def test_a_key_without_a_window_goes_with_its_job(store: EmbeddedStore) -> None:
    """Such a record holds 0 as its window's end, is never walked by the GC, and is deleted with
    its job: by the finished-job GC, by a delete (by state, or by body regex), unless a later job
    took the key; a record with a window outlasts its job until the walk."""
    jobs = store.enqueue_keyed_jobs(
        Q, [keyed("gc"), keyed("retaken"), keyed("windowed", window_ms=5), keyed("deleted"), keyed("regex")], T0
    )
    gc, retaken, windowed, deleted, regex = (e.local_id for e in jobs)
    assert _records(store) == {
        "gc": (gc, 0),
        "retaken": (retaken, 0),
        "windowed": (windowed, T0 + 5),
        "deleted": (deleted, 0),
        "regex": (regex, 0),
    }
    claimed = store.dequeue_jobs(Q, 1, 3, "c", T0, False)
    assert [j.local_id for j in claimed] == [gc, retaken, windowed]
    store.ack_jobs(Q, [AckItem(1, gc), AckItem(1, retaken), AckItem(1, windowed)], [], T0 + 1)
    [taker] = store.enqueue_keyed_jobs(Q, [keyed("retaken")], T0 + 2)
    assert not taker.deduplicated
    assert store.gc_finished_jobs(Q, 1, JobState.SUCCEEDED, T0 + 3, 10) == 3
    assert _records(store) == {
        "retaken": (taker.local_id, 0),  # names the later job: stays
        "windowed": (windowed, T0 + 5),
        "deleted": (deleted, 0),
        "regex": (regex, 0),
    }
    assert store.delete_jobs(Q, JobFilter(JobState.PENDING, 1, T0, body_regex="^regex$"), 10) == 1
    assert "regex" not in _records(store)
    assert store.delete_jobs(Q, JobFilter(JobState.PENDING, 1, T0 + 2, future=None), 1) == 1  # the oldest
    assert set(_records(store)) == {"retaken", "windowed"}
    assert store.gc_dedup_keys(Q, T0 + 5, 10) == 1  # the walk: windowed's window passed, its job gone
    assert set(_records(store)) == {"retaken"}
    assert store.gc_dedup_keys(Q, T0 + 6, 10) == 0


def test_a_window_ending_at_or_before_the_epoch_is_walked(store: EmbeddedStore) -> None:
    """A window's end is stored above 0 whatever the clock: at 0 or below, its record would be
    neither walked by the GC nor deleted with its job."""
    [early] = store.enqueue_keyed_jobs(Q, [keyed("early", window_ms=5)], -10)
    assert _records(store) == {"early": (early.local_id, 1)}
    assert store.delete_jobs(Q, JobFilter(JobState.PENDING, 1, T0, future=None), 10) == 1
    assert store.gc_dedup_keys(Q, 1, 10) == 1
    assert _records(store) == {}


def test_an_open_interrupted_in_its_upgrade_runs_it_again(data_dir: Path, store: EmbeddedStore) -> None:
    """The upgrade runs in the transaction that sets the file's version: an open that fails
    half-way leaves the version as it was, and the next open upgrades."""
    kept = _orphan_a_record(data_dir, store)
    failing = (*store_module.UPGRADES, (6, "DELETE FROM no_such_table"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(store_module, "UPGRADES", failing)
        with pytest.raises(ShardConnectionError):
            EmbeddedStore(data_dir, "1")
    with sqlite3.connect(shard_path(data_dir, "1")) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 5
        assert conn.execute("SELECT count(*) FROM dedup_keys").fetchone()[0] == 2
    conn.close()

    shard = EmbeddedStore(data_dir, "1")
    try:
        assert _records(shard) == {"kept": (kept.local_id, 0)}
    finally:
        shard.close()


def _orphan_a_record(data_dir: Path, store: EmbeddedStore) -> Enqueued:
    """Two jobs with keys without a window, then the file as a version 5 build leaves it after
    deleting the second job (its record stays): the first job, which stays."""
    kept, orphaned = store.enqueue_keyed_jobs(Q, [keyed("kept"), keyed("orphaned")], T0)
    store.close()
    _back_to_version_5(data_dir)
    with sqlite3.connect(shard_path(data_dir, "1")) as conn:
        conn.execute("DELETE FROM jobs WHERE local_id = ?", (orphaned.local_id,))  # as that build's delete
    conn.close()
    return kept


def _back_to_version_5(data_dir: Path) -> None:
    """The file as a version 5 build leaves it: its index of every record, and its version."""
    with sqlite3.connect(shard_path(data_dir, "1")) as conn:
        conn.execute("CREATE INDEX dedup_keys_by_held_until ON dedup_keys (queue, held_until_ms)")
        conn.execute("PRAGMA user_version = 5")
    conn.close()


def test_a_version_5_file_walks_its_records_without_a_window(data_dir: Path, store: EmbeddedStore) -> None:
    """Version 5 stored a record without a window with its enqueue time: such records stay in
    the walk's index, and the walk forgets them once their jobs are gone."""
    [old] = store.enqueue_keyed_jobs(Q, [keyed("old")], T0)
    store.close()
    with sqlite3.connect(shard_path(data_dir, "1")) as conn:
        conn.execute("UPDATE dedup_keys SET held_until_ms = ?", (T0,))  # as version 5 wrote it
    conn.close()
    _back_to_version_5(data_dir)

    shard = EmbeddedStore(data_dir, "1")
    try:
        assert shard._conn is not None
        indexes = {row[0] for row in shard._conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
        assert "dedup_keys_windowed" in indexes and "dedup_keys_by_held_until" not in indexes
        assert _records(shard) == {"old": (old.local_id, T0)}
        assert shard.delete_jobs(Q, JobFilter(JobState.PENDING, 1, T0, future=None), 10) == 1
        assert _records(shard) == {"old": (old.local_id, T0)}, "not 0: left for the walk"
        assert shard.gc_dedup_keys(Q, T0 + 1, 10) == 1
        assert _records(shard) == {}
    finally:
        shard.close()


def test_records_orphaned_by_an_earlier_build_are_forgotten_at_the_next_open(
    data_dir: Path, store: EmbeddedStore
) -> None:
    """A build before version 6 deletes jobs without their records, and walks the records with
    its own index: a record without a window whose job such a build deleted is forgotten once,
    when this build opens the file again; one whose job is still there stays."""
    kept = _orphan_a_record(data_dir, store)

    shard = EmbeddedStore(data_dir, "1")
    try:
        assert _records(shard) == {"kept": (kept.local_id, 0)}
        [again] = shard.enqueue_keyed_jobs(Q, [keyed("kept")], T0 + 1)
        assert again == Enqueued(1, kept.local_id, True)
    finally:
        shard.close()
