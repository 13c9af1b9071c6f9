"""Ordered groups, maxInProgress and groupJobsPerSecond in the embedded store, beyond the shared
contract: files written before groups existed, the statements' plans (every group decision is a
bounded number of probes), a group with many waiting jobs, rules changed between calls, the Rust
writer (keyed enqueue, ack, capped dequeue) and two store objects on one file acting as two
servers."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from pinlater._pinlater import AckGroup, ClaimedJobs
from pinlater.backends.base import (
    AckItem,
    ClaimedJob,
    GroupCounts,
    JobFilter,
    JobState,
    KeyedJob,
    NewJob,
    QueueRules,
)
from pinlater.backends.embedded import EmbeddedStore, shard_path, sql

Q = "q"
T0 = 1_700_000_000_000
T = TypeVar("T")


def grouped(body: str, group: str | None, priority: int = 1, key: str | None = None, attempts: int = 2) -> KeyedJob:
    return KeyedJob(NewJob(priority, body.encode(), T0, attempts), key, 0, group)


def bodies(jobs: list[ClaimedJob]) -> list[bytes]:
    return [job.body for job in jobs]


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


def dequeue(store: EmbeddedStore, limit: int = 10, at: int = T0 + 1, priority: int = 1) -> list[ClaimedJob]:
    return store.dequeue_jobs(Q, priority, limit, "w:1", at, False)


def ack(store: EmbeddedStore, jobs: list[ClaimedJob], at: int = T0 + 2, priority: int = 1) -> None:
    store.ack_jobs(Q, [AckItem(priority, job.local_id) for job in jobs], [], at)


# -- files written before groups --------------------------------------------------------------


def test_a_version_3_file_gains_groups_and_keeps_its_jobs(data_dir: Path) -> None:
    shard = EmbeddedStore(data_dir, "1")
    shard.create_queue(Q, 3)
    [old] = shard.enqueue_jobs(Q, [NewJob(1, b"old", T0, 2)], T0)
    shard.close()
    with sqlite3.connect(shard_path(data_dir, "1")) as conn:  # back to what version 3 left
        conn.execute("DROP TABLE group_jobs")
        conn.execute("DROP TABLE groups")
        conn.execute("PRAGMA user_version = 3")
    conn.close()

    shard = EmbeddedStore(data_dir, "1")
    try:
        assert shard._conn is not None
        assert shard._conn.execute("PRAGMA user_version").fetchone()[0] == 6
        [record] = shard.lookup_jobs(Q, [(1, old)], True)
        assert (record.body, record.group_key, record.state) == (b"old", None, JobState.PENDING)
        placed = shard.enqueue_keyed_jobs(Q, [grouped("g1", "g"), grouped("g2", "g")], T0)
        assert shard.group_counts(Q) == GroupCounts(1, 1)
        assert bodies(dequeue(shard)) == [b"old", b"g1"]
        assert [r.group_key for r in shard.lookup_jobs(Q, [(1, p.local_id) for p in placed], False)] == ["g", "g"]
        run(_hot_enqueue_and_ack(shard))  # the Rust writer serves the migrated file too
    finally:
        shard.close()


async def _hot_enqueue_and_ack(shard: EmbeddedStore) -> None:
    hot = shard.native_hot_path(offload)
    placed = await hot.enqueue_keyed_jobs(Q, [grouped("h1", "h"), grouped("h2", "h")], T0)
    got = claimed(await hot.dequeue_jobs(Q, 1, 10, "w:2", T0 + 3, False))
    assert bodies(got) == [b"h1"]
    await hot.ack_jobs(Q, AckGroup([(1, got[0].local_id, "", 0)], []), T0 + 4)
    got = claimed(await hot.dequeue_jobs(Q, 1, 10, "w:2", T0 + 5, False))
    assert [job.local_id for job in got] == [placed[1].local_id]


def test_jobs_keep_the_version_3_columns(store: EmbeddedStore) -> None:
    """Groups live in tables of their own: a column of jobs, even NULL, made every dequeue and ack
    UPDATE slower, and a queue without groups must not pay for them. The one column added since
    is version 5's expiry (read by dequeues from the row they read anyway; see schema.sql)."""
    assert store._conn is not None
    columns = [row[1] for row in store._conn.execute("PRAGMA table_info(jobs)")]
    assert columns == [
        "local_id",
        "queue",
        "priority",
        "state",
        "claim_descriptor",
        "attempts_allowed",
        "attempts_remaining",
        "custom_status",
        "created_at_ms",
        "updated_at_ms",
        "run_after_ms",
        "body",
        "expire_at_ms",
    ]
    indexes = {row[1] for row in store._conn.execute("PRAGMA index_list(jobs)")}
    assert indexes == {"jobs_by_run_after", "jobs_finished_by_updated_at", "jobs_by_expiry"}


# -- plans: bounded probes ---------------------------------------------------------------------


class _AnyParams(dict[str, object]):
    def __missing__(self, key: str) -> object:
        return None


def _plan(conn: sqlite3.Connection, name: str, **params: object) -> str:
    rows = conn.execute("EXPLAIN QUERY PLAN " + sql.load(name), _AnyParams(params)).fetchall()
    return " | ".join(row[3] for row in rows)


def test_group_statements_probe_their_indexes(store: EmbeddedStore) -> None:
    """Promotion reads the partial index of waiting jobs by group (one probe, then :count rows);
    a group's row is one primary-key probe; counting IN_PROGRESS jobs reads one range per
    priority; a PENDING scan merges the ready and waiting ranges in order, never sorting."""
    assert store._conn is not None
    conn = store._conn
    for name in ("group_promote", "group_unwait"):
        promote = _plan(conn, name, queue=Q, group_key="g", count=1)
        assert "INDEX group_jobs_waiting (queue=? AND group_key=?)" in promote, (name, promote)
        assert "TEMP B-TREE" not in promote and "SCAN" not in promote, (name, promote)
    for name in ("groups_first_waiting", "groups_unwait_oldest"):  # the Rust writer's: a probe per group
        promote = _plan(conn, name, queue=Q, groups='["g"]')
        assert "INDEX group_jobs_waiting (queue=? AND group_key=?)" in promote, (name, promote)
        assert "SCAN group_jobs" not in promote, (name, promote)
    assert "PRIMARY KEY (queue=?)" in _plan(conn, "queue_has_groups", queue=Q)
    assert "SCAN group_jobs" in _plan(conn, "file_has_group_jobs")  # LIMIT 1: the first row
    deleted = _plan(conn, "delete_queue_group_jobs", queue=Q)
    assert "jobs_by_run_after (queue=?)" in deleted and "SCAN group_jobs" not in deleted, deleted
    assert "group_jobs_by_queue" not in {row[1] for row in conn.execute("PRAGMA index_list(group_jobs)")}
    for name in ("lookup_jobs", "ack_failed_grouped", "delete_jobs_by_id"):  # the group: a probe by id
        plan = _plan(conn, name, ids="[1]")
        assert "SEARCH group_jobs USING INTEGER PRIMARY KEY (rowid=?)" in plan, (name, plan)
    for name in ("group_get", "group_forget", "group_bucket"):
        assert "PRIMARY KEY" in _plan(conn, name, queue=Q, group_key="g"), name
    counted = _plan(conn, "count_in_progress", queue=Q, num_priorities=3, cap=5)
    assert "jobs_by_run_after (queue=? AND priority=? AND state=?)" in counted, counted
    filters = {"queue": Q, "priority": 1, "state": 0, "also_state": -1, "run_after_gt": 0, "run_after_le": T0}
    for name in ("scan_jobs", "filter_candidates", "filter_candidates_newest"):
        plan = _plan(conn, name, **filters, limit=10, after_run_after=0, after_id=0, before_run_after=T0, before_id=9)
        assert "MERGE (UNION ALL)" in plan and "TEMP B-TREE" not in plan, (name, plan)
    idle = _plan(conn, "groups_idle_forget", queue=Q, full_before_ms=T0, limit=10)
    assert "INDEX groups_idle (queue=? AND refilled_at_ms<?)" in idle, idle
    for name in ("dequeue_candidates", "dequeue_rows"):
        plan = _plan(conn, name, queue=Q, priority=1, limit=10, now_ms=T0, reserved_prefix="~r|")
        assert "jobs_by_run_after (queue=? AND priority=? AND state=? AND run_after_ms<?)" in plan, (name, plan)
        assert "TEMP B-TREE" not in plan, (name, plan)
    for name in ("claim_jobs_by_id", "reserve_jobs_by_id", "ack_succeeded_many", "dequeue_claim_rows"):
        plan = _plan(conn, name, ids="[1, 2]")
        assert "INTEGER PRIMARY KEY" in plan and "jobs_by_run_after" not in plan, (name, plan)


def test_a_queue_without_groups_or_rules_runs_the_statements_it_ran_before(store: EmbeddedStore) -> None:
    """The plain path pays nothing for groups but one probe per ack call (not per job): no
    RETURNING on its acks (about doubles an UPDATE), no group statement, no in-progress count."""
    assert store._conn is not None
    store.enqueue_jobs(Q, [NewJob(1, b"x", T0, 2) for _ in range(3)], T0)
    ran: list[str] = []
    store._conn.set_trace_callback(ran.append)
    try:
        got = dequeue(store)
        store.ack_jobs(Q, [AckItem(1, got[0].local_id)], [AckItem(1, job.local_id) for job in got[1:]], T0 + 2)
    finally:
        store._conn.set_trace_callback(None)
    # The trace shows statements with their values bound: known by their first (comment) line.
    heads = {sql.load(name).splitlines()[0]: name for name in sql.names() if name != "schema"}
    statements = [heads.get(line.splitlines()[0], line) for line in ran]
    control = ("BEGIN IMMEDIATE", "SAVEPOINT pinlater_op", "RELEASE pinlater_op", "COMMIT")
    assert [name for name in statements if name not in control] == [
        "queue_get",
        "dequeue_jobs",
        "claim_jobs_by_id",
        "queue_get",
        "queue_has_groups",
        "ack_succeeded",
        "ack_failed",
        "ack_failed",
    ], statements


def _vm_steps(store: EmbeddedStore, work: Callable[[], object]) -> int:
    """SQLite virtual machine instructions that ``work`` costs on the store's connection."""
    assert store._conn is not None
    steps = [0]

    def tick() -> int:
        steps[0] += 1
        return 0

    store._conn.set_progress_handler(tick, 1)
    try:
        work()
    finally:
        store._conn.set_progress_handler(None, 0)
    return steps[0]


def test_a_group_with_many_waiting_jobs_is_served_one_at_a_time_at_a_bounded_cost(store: EmbeddedStore) -> None:
    store.enqueue_keyed_jobs(Q, [grouped(f"small{i}", "small") for i in range(3)], T0)
    store.enqueue_keyed_jobs(Q, [grouped(f"big{i}", "big") for i in range(3000)], T0)
    store.enqueue_keyed_jobs(Q, [grouped("other", "other", priority=2)], T0)
    assert store.group_counts(Q) == GroupCounts(3, 2)
    assert store.count_jobs(Q, JobFilter(JobState.PENDING, 1, T0 + 1), None) == 3003

    def turn(group: str) -> Callable[[], object]:
        def work() -> object:
            got = dequeue(store, at=T0 + 1)
            mine = [job for job in got if job.body.startswith(group.encode())]
            ack(store, mine)
            store.enqueue_keyed_jobs(Q, [grouped(f"{group}+", group)], T0)  # and the enqueue behind
            return mine

        return work

    seen: list[bytes] = []
    for _ in range(3):  # each dequeue hands out the head of each group, nothing behind it
        got = dequeue(store)
        seen += bodies(got)
        assert len(got) == 2
        ack(store, got)
    assert seen == [b"small0", b"big0", b"small1", b"big1", b"small2", b"big2"]
    # A turn of the big group (3000 waiting) costs what a turn of a small one costs: promotion
    # is a probe of the waiting index, not a walk of the group.
    small = _vm_steps(store, turn("small"))
    big = _vm_steps(store, turn("big"))
    assert 0 < big <= small * 1.5, (big, small)  # a walk of the group would cost thousands more


def test_waiting_jobs_are_pending_to_every_reader_and_deletes_promote(store: EmbeddedStore) -> None:
    placed = store.enqueue_keyed_jobs(Q, [grouped(f"g{i}", "g", key=f"k{i}") for i in range(4)], T0)
    ids = [p.local_id for p in placed]
    records = store.lookup_jobs(Q, [(1, i) for i in ids], False)
    assert {r.state for r in records} == {JobState.PENDING}
    assert [(r.dedup_key, r.group_key) for r in records] == [(f"k{i}", "g") for i in range(4)]
    scanned = store.scan_jobs(Q, JobFilter(JobState.PENDING, 1, T0 + 1), 10)
    assert [r.local_id for r in scanned] == ids[::-1]
    counts = store.queue_counts(3, T0 + 1)
    assert counts[next(k for k in counts if k.state == JobState.PENDING and not k.future)] == 4
    again = store.enqueue_keyed_jobs(Q, [grouped("dup", "g", key="k3")], T0)  # a waiting job holds k3
    assert again[0].deduplicated and again[0].local_id == ids[3]
    # Deleting the active head promotes the next; deleting a waiting one only counts it out.
    store.delete_jobs(Q, JobFilter(JobState.PENDING, 1, T0 + 1, body_regex="^g[02]$"), 10)
    assert bodies(dequeue(store)) == [b"g1"]
    assert store.group_counts(Q) == GroupCounts(1, 1)
    store.delete_jobs(Q, JobFilter(JobState.IN_PROGRESS, 1, T0 + 1, None), 10)
    assert bodies(dequeue(store)) == [b"g3"]
    assert store.group_counts(Q) == GroupCounts(1, 0)


def test_timeouts_and_failures_keep_the_head_and_final_ones_promote(store: EmbeddedStore) -> None:
    store.enqueue_keyed_jobs(Q, [grouped("a", "g", attempts=2), grouped("b", "g", attempts=1)], T0)
    [a] = dequeue(store)
    assert store.resurrect_timed_out_jobs(Q, 1, T0 + 10, 10, T0 + 20) == 1  # one attempt left
    assert bodies(dequeue(store, at=T0 + 21)) == [b"a"]  # still first, b still waits
    store.ack_jobs(Q, [], [AckItem(1, a.local_id, "", 50)], T0 + 22)  # last attempt: FAILED
    assert bodies(dequeue(store, at=T0 + 23)) == [b"b"]
    # retry_failed_jobs puts a back in its group: b is active, so a waits behind it.
    assert store.retry_failed_jobs(Q, 1, 2, T0, 10, T0 + 24) == 1
    assert store.group_counts(Q) == GroupCounts(1, 1)
    assert dequeue(store, at=T0 + 25) == []
    assert store.resurrect_timed_out_jobs(Q, 1, T0 + 30, 10, T0 + 31) == 1  # b's only attempt
    assert bodies(dequeue(store, at=T0 + 32)) == [b"a"]


def test_rules_changed_between_calls(store: EmbeddedStore) -> None:
    store.enqueue_keyed_jobs(Q, [grouped(f"g{i}", "g") for i in range(5)], T0)
    assert bodies(dequeue(store)) == [b"g0"]
    store.set_queue_rules({Q: QueueRules(group_concurrency=3)})
    store.enqueue_keyed_jobs(Q, [grouped("g5", "g")], T0)  # an enqueue applies the raised concurrency
    assert bodies(dequeue(store)) == [b"g1", b"g2"]
    store.set_queue_rules({})  # lowered: nothing taken back
    assert store.group_counts(Q) == GroupCounts(1, 1)
    store.set_queue_rules({Q: QueueRules(max_in_progress=4)})
    store.enqueue_keyed_jobs(Q, [grouped("solo", None, key="s"), grouped("x", "x")], T0)
    assert bodies(dequeue(store)) == [b"solo"]  # 3 in progress + 1 = the cap; x waits for room
    store.set_queue_rules({Q: QueueRules(max_in_progress=5)})
    assert bodies(dequeue(store)) == [b"x"]


def test_group_rate_defers_the_groups_out_of_tokens(store: EmbeddedStore) -> None:
    store.set_queue_rules({Q: QueueRules(group_concurrency=5, group_jobs_per_second=2.0)})
    store.enqueue_keyed_jobs(Q, [grouped(f"a{i}", "a") for i in range(5)] + [grouped("b0", "b")], T0)
    store.enqueue_jobs(Q, [NewJob(1, b"plain", T0, 1)], T0)
    assert bodies(dequeue(store)) == [b"a0", b"a1", b"b0", b"plain"]  # a's bucket holds 2
    assert dequeue(store, at=T0 + 2) == []  # a2..a4 deferred to their tokens
    [a2] = store.lookup_jobs(Q, [(1, 3)], False)
    assert a2.run_after_ms == T0 + 1 + 500
    assert bodies(dequeue(store, at=T0 + 501)) == [b"a2"]  # one token back after 500 ms
    assert dequeue(store, at=T0 + 502) == []
    assert bodies(dequeue(store, at=T0 + 5000)) == [b"a3", b"a4"]  # full again: two


def test_two_stores_on_one_file_share_groups_caps_and_buckets(data_dir: Path, store: EmbeddedStore) -> None:
    other = EmbeddedStore(data_dir, "1")  # a second server on the same file
    try:
        rules = {Q: QueueRules(max_in_progress=3, group_jobs_per_second=1.0)}
        store.set_queue_rules(rules)
        other.set_queue_rules(rules)
        store.enqueue_keyed_jobs(Q, [grouped(f"g{i}", "g") for i in range(3)], T0)
        other.enqueue_keyed_jobs(Q, [grouped(f"h{i}", "h") for i in range(2)], T0)
        other.enqueue_jobs(Q, [NewJob(1, f"p{i}".encode(), T0, 1) for i in range(3)], T0)
        first = dequeue(store, limit=1)
        assert bodies(first) == [b"g0"]
        second = dequeue(other)
        assert bodies(second) == [b"h0", b"p0"]  # g is busy; the cap of 3 is shared
        assert dequeue(store) == []
        ack(other, first + second, at=T0 + 10)  # acked by the other server: g1 and h1 promoted
        assert store.group_counts(Q) == other.group_counts(Q) == GroupCounts(2, 1)
        # g's bucket (1/s) was drawn by the first server: the other defers g1 to its next token,
        # and h's was drawn by the other, so the first defers h1.
        assert bodies(dequeue(other, limit=1, at=T0 + 11)) == [b"p1"]
        assert bodies(dequeue(store, limit=1, at=T0 + 12)) == [b"p2"]
        g1, h1 = store.lookup_jobs(Q, [(1, first[0].local_id + 1), (1, second[0].local_id + 1)], False)
        assert (g1.body, h1.body) == (None, None)
        assert g1.run_after_ms == T0 + 1001 and h1.run_after_ms == T0 + 1001  # whoever looked
        assert dequeue(store, at=T0 + 1000) == []
        assert bodies(dequeue(other, at=T0 + 1001)) == [b"g1"]  # p1, p2 and g1: the cap
        assert dequeue(store, at=T0 + 1001) == []
    finally:
        other.close()


def test_delete_queue_forgets_its_groups(store: EmbeddedStore) -> None:
    store.enqueue_keyed_jobs(Q, [grouped("a", "g"), grouped("b", "g")], T0)
    store.delete_queue(Q)
    store.create_queue(Q, 3)
    assert store.group_counts(Q) == GroupCounts(0, 0)
    store.enqueue_keyed_jobs(Q, [grouped("c", "g")], T0)
    assert bodies(dequeue(store)) == [b"c"]


def test_group_records_go_with_their_queue_and_with_gc(data_dir: Path) -> None:
    """No index of group_jobs by queue (a file of an earlier build of version 4 loses it at
    open): deleting a queue forgets exactly its jobs' records, GC the finished jobs' ones."""
    shard = EmbeddedStore(data_dir, "1")
    shard.close()
    with sqlite3.connect(shard_path(data_dir, "1")) as conn:  # what earlier version 4 builds made
        conn.execute("CREATE INDEX group_jobs_by_queue ON group_jobs (queue)")
    conn.close()
    shard = EmbeddedStore(data_dir, "1")
    try:
        assert shard._conn is not None
        conn = shard._conn
        assert [row[1] for row in conn.execute("PRAGMA index_list(group_jobs)")] == ["group_jobs_waiting"]
        for queue in (Q, "other"):
            shard.create_queue(queue, 3)
            shard.enqueue_keyed_jobs(queue, [grouped("a", "g"), grouped("b", "g"), grouped("c", "h")], T0)
        shard.delete_queue("other")
        assert conn.execute("SELECT queue, count(*) FROM group_jobs GROUP BY queue").fetchall() == [(Q, 3)]
        done = dequeue(shard)
        ack(shard, done)
        assert shard.gc_finished_jobs(Q, 1, JobState.SUCCEEDED, T0 + 10, 10) == 2
        left = {row[0] for row in conn.execute("SELECT local_id FROM group_jobs")}
        assert len(left) == 1 and left.isdisjoint(job.local_id for job in done)
    finally:
        shard.close()


def test_idle_buckets_are_forgotten_once_full(store: EmbeddedStore) -> None:
    assert store._conn is not None
    store.set_queue_rules({Q: QueueRules(group_jobs_per_second=1.0)})
    store.enqueue_keyed_jobs(Q, [grouped("a", "g")], T0)
    ack(store, dequeue(store))
    assert store.group_counts(Q) == GroupCounts(0, 0)
    rows = "SELECT count(*) FROM groups"
    assert store._conn.execute(rows).fetchone()[0] == 1  # its bucket is not full yet
    store.gc_dedup_keys(Q, T0 + 500, 10)
    assert store._conn.execute(rows).fetchone()[0] == 1
    store.gc_dedup_keys(Q, T0 + 1001, 10)
    assert store._conn.execute(rows).fetchone()[0] == 0


# -- the Rust writer ---------------------------------------------------------------------------


async def offload(fn: Callable[..., T], /, *args: object) -> T:
    return await asyncio.to_thread(fn, *args)


def run(coro: Awaitable[T]) -> T:
    async def main() -> T:
        return await coro

    return asyncio.run(main())


def claimed(jobs: ClaimedJobs) -> list[ClaimedJob]:
    return [ClaimedJob._make(job) for job in jobs.to_list()]


def test_the_hot_path_keeps_groups_and_the_cap(store: EmbeddedStore) -> None:
    async def scenario() -> None:
        hot = store.native_hot_path(offload)
        store.set_queue_rules({Q: QueueRules(group_concurrency=2, max_in_progress=3)})
        jobs = [grouped(f"g{i}", "g", key=f"k{i}" if i % 2 else None, attempts=i + 1) for i in range(4)]
        placed = await hot.enqueue_keyed_jobs(Q, [*jobs, grouped("solo", None, key="s")], T0)
        assert [p.deduplicated for p in placed] == [False] * 5
        again = await hot.enqueue_keyed_jobs(Q, [grouped("dup", "g", key="k3")], T0)  # k3's job waits
        assert again[0].deduplicated and again[0].local_id == placed[3].local_id
        assert store.group_counts(Q) == GroupCounts(1, 1)
        got = claimed(await hot.dequeue_jobs(Q, 1, 10, "w:1", T0 + 1, False))
        assert bodies(got) == [b"g0", b"g1", b"solo"]  # the group's two active, then the cap
        assert claimed(await hot.dequeue_jobs(Q, 1, 10, "w:1", T0 + 1, False)) == []
        # A final failure (g0 had one attempt) promotes g2; a retried one (g1) keeps its place.
        acks = AckGroup([(1, got[2].local_id, "", 0)], [(1, got[0].local_id, "", 0), (1, got[1].local_id, "", 9)])
        await hot.ack_jobs(Q, acks, T0 + 3)
        got = claimed(await hot.dequeue_jobs(Q, 1, 10, "w:1", T0 + 20, False))
        assert sorted(bodies(got)) == [b"g1", b"g2"]
        assert store.group_counts(Q) == GroupCounts(1, 1)
        await hot.ack_jobs(Q, AckGroup([(1, job.local_id, "", 0) for job in got], []), T0 + 21)
        assert bodies(claimed(await hot.dequeue_jobs(Q, 1, 10, "w:1", T0 + 22, False))) == [b"g3"]
        assert store.group_counts(Q) == GroupCounts(1, 0)

    run(scenario())


def test_the_hot_path_promotes_one_and_many_in_one_ack(store: EmbeddedStore) -> None:
    """Groups taking one waiting job (groups_first_waiting.sql) and groups taking more
    (groups_unwait_oldest.sql) in the same ack, each its oldest waiting jobs."""

    async def scenario() -> None:
        hot = store.native_hot_path(offload)
        store.set_queue_rules({Q: QueueRules(group_concurrency=2)})
        jobs = [grouped(f"a{i}", "a") for i in range(4)] + [grouped(f"b{i}", "b") for i in range(4)]
        await hot.enqueue_keyed_jobs(Q, jobs, T0)
        assert store.group_counts(Q) == GroupCounts(2, 2)
        got = claimed(await hot.dequeue_jobs(Q, 1, 10, "w:1", T0 + 1, False))
        assert bodies(got) == [b"a0", b"a1", b"b0", b"b1"]
        done = [job for job in got if job.body in (b"a0", b"a1", b"b0")]  # a: room 2, b: room 1
        await hot.ack_jobs(Q, AckGroup([(1, job.local_id, "", 0) for job in done], []), T0 + 2)
        got = claimed(await hot.dequeue_jobs(Q, 1, 10, "w:1", T0 + 3, False))
        assert bodies(got) == [b"a2", b"a3", b"b2"]
        assert store.group_counts(Q) == GroupCounts(2, 1)

    run(scenario())


def test_the_hot_path_leaves_the_row_of_a_group_that_stays_busy_unwritten(store: EmbeddedStore) -> None:
    """A group's ``waiting`` is a bound (groups.py): a job joining a group whose jobs already
    wait, and an ack promoting one job for the one that left, write nothing to ``groups``; the
    counts still say exactly which groups are blocked (the waiting index does)."""
    assert store._conn is not None
    conn = store._conn
    conn.executescript(
        """
        CREATE TABLE group_writes (op TEXT NOT NULL);
        CREATE TRIGGER group_inserted AFTER INSERT ON groups BEGIN INSERT INTO group_writes VALUES ('i'); END;
        CREATE TRIGGER group_updated AFTER UPDATE ON groups BEGIN INSERT INTO group_writes VALUES ('u'); END;
        CREATE TRIGGER group_deleted AFTER DELETE ON groups BEGIN INSERT INTO group_writes VALUES ('d'); END;
        """
    )

    def writes() -> str:
        done = "".join(row[0] for row in conn.execute("SELECT op FROM group_writes ORDER BY rowid"))
        conn.execute("DELETE FROM group_writes")
        return done

    async def scenario() -> None:
        hot = store.native_hot_path(offload)
        await hot.enqueue_keyed_jobs(Q, [grouped("a0", "a")], T0)
        assert writes() == "i"  # a is busy now
        await hot.enqueue_keyed_jobs(Q, [grouped("a1", "a"), grouped("a2", "a")], T0)
        assert writes() == "u"  # its first waiting job sets the bound
        await hot.enqueue_keyed_jobs(Q, [grouped("a3", "a")], T0)
        assert writes() == ""  # the bound holds already
        assert store.group_counts(Q) == GroupCounts(1, 1)
        for body in (b"a0", b"a1", b"a2"):
            got = claimed(await hot.dequeue_jobs(Q, 1, 10, "w:1", T0 + 1, False))
            assert bodies(got) == [body]
            await hot.ack_jobs(Q, AckGroup([(1, got[0].local_id, "", 0)], []), T0 + 2)
            assert writes() == ""  # one left, one promoted: the row is as it was
        # a3 was the last to wait: the bound stays above zero, the index says none waits.
        assert conn.execute("SELECT active, waiting > 0 FROM groups").fetchall() == [(1, 1)]
        assert store.group_counts(Q) == GroupCounts(1, 0)
        got = claimed(await hot.dequeue_jobs(Q, 1, 10, "w:1", T0 + 1, False))
        assert bodies(got) == [b"a3"]
        await hot.ack_jobs(Q, AckGroup([(1, got[0].local_id, "", 0)], []), T0 + 2)
        assert writes() == "d"  # nothing to promote: the group is done and forgotten
        assert store.group_counts(Q) == GroupCounts(0, 0)

    run(scenario())


def test_the_hot_path_acks_grouped_jobs_by_ranges_counting_each_job_once(store: EmbeddedStore) -> None:
    """An ack whose ids make a range goes by the range on a queue with groups too; a job acked
    twice in it leaves its group once."""

    async def scenario() -> None:
        hot = store.native_hot_path(offload)
        store.set_queue_rules({Q: QueueRules(group_concurrency=3)})
        await hot.enqueue_keyed_jobs(Q, [grouped(f"g{i}", "g") for i in range(4)], T0)
        got = claimed(await hot.dequeue_jobs(Q, 1, 10, "w:1", T0 + 1, False))
        assert bodies(got) == [b"g0", b"g1", b"g2"]
        g0, g1 = got[0].local_id, got[1].local_id
        assert g1 == g0 + 1
        await hot.ack_jobs(Q, AckGroup([(1, g0, "", 0), (1, g0, "", 0), (1, g1, "", 0)], []), T0 + 2)
        # Two left and g3 was promoted: g2 and g3 active, room for one more.
        await hot.enqueue_keyed_jobs(Q, [grouped("g4", "g"), grouped("g5", "g")], T0)
        got = claimed(await hot.dequeue_jobs(Q, 1, 10, "w:1", T0 + 3, False))
        assert bodies(got) == [b"g3", b"g4"]
        assert store.group_counts(Q) == GroupCounts(1, 1)
        [r0, r1] = store.lookup_jobs(Q, [(1, g0), (1, g1)], False)
        assert (r0.state, r1.state) == (JobState.SUCCEEDED, JobState.SUCCEEDED)

    run(scenario())


def test_a_group_counted_exactly_by_an_earlier_build_is_served_in_order(store: EmbeddedStore) -> None:
    """Builds before the bound wrote exact counts of waiting jobs; a count is a bound too, even
    one that a job joined since without raising it (this build raises it to WAITING_SOME)."""
    assert store._conn is not None
    store.enqueue_keyed_jobs(Q, [grouped(f"g{i}", "g") for i in range(3)], T0)
    store._conn.execute("UPDATE groups SET waiting = 2")  # as an earlier build left it

    async def scenario() -> None:
        hot = store.native_hot_path(offload)
        await hot.enqueue_keyed_jobs(Q, [grouped("g3", "g")], T0)
        seen: list[bytes] = []
        for _ in range(4):
            got = claimed(await hot.dequeue_jobs(Q, 1, 10, "w:1", T0 + 1, False))
            seen += bodies(got)
            await hot.ack_jobs(Q, AckGroup([(1, job.local_id, "", 0) for job in got], []), T0 + 2)
        assert seen == [b"g0", b"g1", b"g2", b"g3"]
        assert store.group_counts(Q) == GroupCounts(0, 0)

    run(scenario())


def test_the_hot_path_reads_groups_again_after_another_connection_wrote(data_dir: Path, store: EmbeddedStore) -> None:
    """The Rust writer keeps the group rows it wrote, but a write of the Python connection (or
    of another server on the file) in between is seen: its next transaction reads them again."""

    async def scenario() -> None:
        hot = store.native_hot_path(offload)
        await hot.enqueue_keyed_jobs(Q, [grouped("first", "g")], T0)
        [first] = claimed(await hot.dequeue_jobs(Q, 1, 10, "w:1", T0 + 1, False))
        store.enqueue_keyed_jobs(Q, [grouped("second", "g")], T0 + 2)  # waits, on Python's connection
        other = EmbeddedStore(data_dir, "1")  # another server on the file
        try:
            other.enqueue_keyed_jobs(Q, [grouped("third", "g")], T0 + 3)
        finally:
            other.close()
        assert store.group_counts(Q) == GroupCounts(1, 1)
        await hot.ack_jobs(Q, AckGroup([(1, first.local_id, "", 0)], []), T0 + 4)  # promotes "second"
        got = claimed(await hot.dequeue_jobs(Q, 1, 10, "w:1", T0 + 5, False))
        assert bodies(got) == [b"second"]
        await hot.ack_jobs(Q, AckGroup([(1, got[0].local_id, "", 0)], []), T0 + 6)
        assert bodies(claimed(await hot.dequeue_jobs(Q, 1, 10, "w:1", T0 + 7, False))) == [b"third"]
        await hot.enqueue_keyed_jobs(Q, [grouped("fourth", "g")], T0 + 8)  # behind "third"
        assert claimed(await hot.dequeue_jobs(Q, 1, 10, "w:1", T0 + 9, False)) == []
        assert store.group_counts(Q) == GroupCounts(1, 1)

    run(scenario())


def test_the_hot_path_serves_rate_limited_queues_from_the_shared_bucket(store: EmbeddedStore) -> None:
    async def scenario() -> None:
        hot = store.native_hot_path(offload)
        store.set_queue_rules({Q: QueueRules(group_concurrency=3, group_jobs_per_second=1.0)})
        await hot.enqueue_keyed_jobs(Q, [grouped(f"g{i}", "g") for i in range(3)], T0)
        got = claimed(await hot.dequeue_jobs(Q, 1, 10, "w:1", T0 + 1, False))
        assert bodies(got) == [b"g0"]
        assert store.dequeue_jobs(Q, 1, 10, "w:2", T0 + 2, False) == []  # same bucket, Python side
        got = claimed(await hot.dequeue_jobs(Q, 1, 10, "w:1", T0 + 1001, False))
        assert bodies(got) == [b"g1"]

    run(scenario())
