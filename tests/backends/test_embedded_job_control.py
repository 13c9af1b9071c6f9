"""Job control (#18) in the embedded store, beyond the shared contract: version 4 files migrated
at open, the statements' plans and the work they do (expiry along its partial index, a deep scan
page, due schedules, the oldest ready job), what a queue without expiring jobs runs, the status
words at the status limit, and the Rust writer's expiry (keyed enqueue, ack, dequeue) with
groups."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from pinlater._pinlater import AckGroup, ClaimedJobs
from pinlater.backends.base import (
    CANCELLED,
    EXPIRED,
    AckItem,
    CheckpointItem,
    ClaimedJob,
    GroupCounts,
    JobFilter,
    JobState,
    KeyedJob,
    NewJob,
    ScanCursor,
    ScheduleRow,
    ended_status,
)
from pinlater.backends.embedded import CUSTOM_STATUS_LIMIT, EmbeddedStore, shard_path, sql

Q = "q"
T0 = 1_700_000_000_000
T = TypeVar("T")


def keyed(
    body: str,
    expire_at: int | None = None,
    group: str | None = None,
    key: str | None = None,
    status: str = "",
    attempts: int = 3,
) -> KeyedJob:
    return KeyedJob(NewJob(1, body.encode(), T0, attempts, status), key, 0, group, expire_at)


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


def conn_of(store: EmbeddedStore) -> sqlite3.Connection:
    assert store._conn is not None
    return store._conn


async def offload(fn: Callable[..., T], /, *args: object) -> T:
    return await asyncio.to_thread(fn, *args)


def run(coro: Awaitable[T]) -> T:
    async def main() -> T:
        return await coro

    return asyncio.run(main())


def claimed(jobs: ClaimedJobs) -> list[ClaimedJob]:
    return [ClaimedJob._make(job) for job in jobs.to_list()]


def state_of(store: EmbeddedStore, local_id: int) -> tuple[JobState, int, str]:
    (found,) = store.lookup_jobs(Q, [(1, local_id)], False)
    return found.state, found.attempts_remaining, found.custom_status


# -- files written before job control ------------------------------------------------------------


def test_a_version_4_file_gains_expiry_and_schedules_and_keeps_its_jobs(data_dir: Path) -> None:
    shard = EmbeddedStore(data_dir, "1")
    shard.create_queue(Q, 3)
    plain = shard.enqueue_jobs(Q, [NewJob(1, b"old-%d" % i, T0 + i, 2) for i in range(3)], T0)
    [grouped, behind] = shard.enqueue_keyed_jobs(Q, [keyed("g1", group="g", key="k"), keyed("g2", group="g")], T0)
    [running] = shard.dequeue_jobs(Q, 1, 1, "w:1", T0 + 1, False)
    shard.close()
    with sqlite3.connect(shard_path(data_dir, "1")) as conn:  # back to what version 4 left
        conn.execute("DROP INDEX jobs_by_expiry")
        conn.execute("ALTER TABLE jobs DROP COLUMN expire_at_ms")
        conn.execute("DROP TABLE expiries")
        conn.execute("DROP TABLE schedules")
        conn.execute("PRAGMA user_version = 4")
        assert "expire_at_ms" not in {row[1] for row in conn.execute("PRAGMA table_info(jobs)")}
    conn.close()

    shard = EmbeddedStore(data_dir, "1")
    try:
        conn = conn_of(shard)
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 6
        assert "expire_at_ms" in {row[1] for row in conn.execute("PRAGMA table_info(jobs)")}
        indexes = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
        assert {"jobs_by_expiry", "schedules_due"} <= indexes
        old = shard.lookup_jobs(Q, [(1, i) for i in [*plain, grouped.local_id, behind.local_id]], True)
        assert [(r.state, r.expire_at_ms) for r in old] == [(JobState.IN_PROGRESS, None)] + [
            (JobState.PENDING, None)
        ] * 4
        assert running.local_id == plain[0]
        assert (old[3].dedup_key, old[3].group_key) == ("k", "g")
        # Everything new works on the migrated file, the old jobs with it.
        [doomed] = shard.enqueue_keyed_jobs(Q, [keyed("doomed", expire_at=T0 + 5)], T0)
        taken = shard.dequeue_jobs(Q, 1, 10, "w:2", T0 + 10, False)
        assert [j.local_id for j in taken] == [grouped.local_id, *plain[1:]]
        assert state_of(shard, doomed.local_id)[::2] == (JobState.FAILED, "expired")
        assert shard.expired_counts() == {Q: 1}
        assert shard.cancel_jobs(Q, [(1, running.local_id)], T0 + 11) == 1
        shard.put_schedule(ScheduleRow(Q, "s", "{}", T0))
        assert shard.due_schedules(T0, 10) == [ScheduleRow(Q, "s", "{}", T0)]
        run(_hot_expiry(shard))  # the Rust writer serves the migrated file too
    finally:
        shard.close()


async def _hot_expiry(shard: EmbeddedStore) -> None:
    hot = shard.native_hot_path(offload)
    [placed] = await hot.enqueue_keyed_jobs(Q, [keyed("hot", expire_at=T0 + 100)], T0 + 20)
    assert claimed(await hot.dequeue_jobs(Q, 1, 10, "w:3", T0 + 100, False)) == []
    assert state_of(shard, placed.local_id)[::2] == (JobState.FAILED, "expired")


# -- what a queue without expiring jobs runs -----------------------------------------------------


def test_a_queue_without_expiring_jobs_runs_no_expiry_statement(store: EmbeddedStore) -> None:
    ran: list[str] = []
    conn_of(store).set_trace_callback(ran.append)

    def expiry_ran() -> bool:  # ack_failed_expire, resurrect_expire or expire_jobs (traced expanded)
        found = any("expire_at_ms <=" in statement for statement in ran)
        ran.clear()
        return found

    store.enqueue_jobs(Q, [NewJob(1, b"a", T0, 3), NewJob(1, b"b", T0, 3)], T0)
    first, _ = store.dequeue_jobs(Q, 1, 10, "w:1", T0, False)
    store.ack_jobs(Q, [], [AckItem(1, first.local_id, "", 10)], T0 + 1)
    store.resurrect_timed_out_jobs(Q, 1, T0 + 5, 10, T0 + 5)
    store.reserve_jobs(Q, 1, 10, "~r|x", T0 + 50, 1_000)
    assert not expiry_ran()

    store.enqueue_keyed_jobs(Q, [keyed("e", expire_at=T0 + 10_000)], T0)
    [again] = store.dequeue_jobs(Q, 1, 1, "w:1", T0 + 2_000, False)
    store.ack_jobs(Q, [], [AckItem(1, again.local_id, "", 10)], T0 + 2_001)
    assert expiry_ran(), "a queue that had an expiring job checks its retries"
    assert conn_of(store).execute("SELECT queue, expired FROM expiries").fetchall() == [(Q, 0)]

    store.delete_queue(Q)
    store.create_queue(Q, 3)
    assert conn_of(store).execute("SELECT count(*) FROM expiries").fetchone()[0] == 0, "gone with the queue"


# -- plans and bounded work ----------------------------------------------------------------------


class _AnyParams(dict[str, object]):
    """Binds NULL to every named parameter not given, so EXPLAIN can compile a statement."""

    def __missing__(self, key: str) -> object:
        return None


def _plan(conn: sqlite3.Connection, name: str, **params: object) -> str:
    rows = conn.execute("EXPLAIN QUERY PLAN " + sql.load(name), _AnyParams(params)).fetchall()
    return " | ".join(row[3] for row in rows)


def test_job_control_statements_use_their_indexes(store: EmbeddedStore) -> None:
    conn = conn_of(store)
    assert "INDEX jobs_by_expiry (queue=? AND expire_at_ms>? AND expire_at_ms<?)" in _plan(conn, "expire_jobs")
    assert "INDEX schedules_due (next_run_ms<?)" in _plan(conn, "schedules_due")
    plan = _plan(conn, "oldest_ready")
    assert "INDEX jobs_by_run_after (queue=? AND priority=? AND state=? AND run_after_ms<?)" in plan, plan
    plan = _plan(conn, "scan_jobs")
    assert plan.count("INDEX jobs_by_run_after (queue=? AND priority=? AND state=? AND") == 2, plan
    assert "TEMP B-TREE" not in plan, plan
    for name in ("cancel_jobs", "claim_reserved"):
        plan = _plan(conn, name, ids="[1, 2]")
        assert "INTEGER PRIMARY KEY" in plan and "jobs_by_run_after" not in plan, (name, plan)


def test_only_unfinished_jobs_with_an_expiry_are_in_the_expiry_index(store: EmbeddedStore) -> None:
    store.enqueue_jobs(Q, [NewJob(1, b"plain", T0, 3) for _ in range(50)], T0)
    store.enqueue_keyed_jobs(Q, [keyed(f"e{i}", expire_at=T0 + 10) for i in range(30)], T0)
    taken = store.dequeue_jobs(Q, 1, 70, "w:1", T0, False)  # the 50 plain jobs and 20 expiring ones
    store.ack_jobs(Q, [AckItem(1, job.local_id) for job in taken[:60]], [], T0 + 1)
    indexed = (
        "SELECT count(*) FROM jobs INDEXED BY jobs_by_expiry"
        " WHERE queue = ? AND expire_at_ms IS NOT NULL AND state <= 0"
    )

    assert conn_of(store).execute(indexed, (Q,)).fetchone()[0] == 10
    # Past their expiry, the 10 in progress and the 10 finished ones are not walked over.
    assert store.expire_jobs(Q, T0 + 100, 1_000) == 10
    assert conn_of(store).execute(indexed, (Q,)).fetchone()[0] == 0


def _work(conn: sqlite3.Connection, call: Callable[[], object]) -> int:
    """SQLite's virtual machine steps (in hundreds) that ``call`` takes on ``conn``."""
    steps = [0]

    def count() -> int:
        steps[0] += 1
        return 0

    conn.set_progress_handler(count, 100)
    try:
        call()
    finally:
        conn.set_progress_handler(None, 0)
    return steps[0]


def test_a_deep_scan_page_costs_about_a_page_of_rows(store: EmbeddedStore) -> None:
    store.enqueue_jobs(Q, [NewJob(1, b"j", T0 - i // 3, 3) for i in range(6_000)], T0)
    where = JobFilter(JobState.PENDING, 1, T0)
    page = store.scan_jobs(Q, where, 50)
    deep = store.scan_jobs(Q, where, 5_000)[-1]
    cursor = ScanCursor(deep.run_after_ms, deep.local_id)

    first_work = _work(conn_of(store), lambda: store.scan_jobs(Q, where, 50))
    deep_work = _work(conn_of(store), lambda: store.scan_jobs(Q, where, 50, cursor))

    deeper = store.scan_jobs(Q, where, 50, cursor)
    assert len(page) == len(deeper) == 50
    assert (deeper[0].run_after_ms, deeper[0].local_id) < (cursor.run_after_ms, cursor.local_id)
    whole = _work(conn_of(store), lambda: store.count_jobs(Q, where, None))
    assert deep_work <= 2 * first_work + 5, (first_work, deep_work)
    assert deep_work * 10 < whole, (deep_work, whole)


# -- the status words at the limit, on every path -------------------------------------------------


def test_the_words_follow_ended_status_at_the_status_limit(store: EmbeddedStore) -> None:
    limit = CUSTOM_STATUS_LIMIT
    long = "x" * (limit - 5)

    async def scenario() -> None:
        hot = store.native_hot_path(offload)
        cancelled, expiring = await hot.enqueue_keyed_jobs(
            Q, [keyed("c", key="c", status=long), keyed("e", expire_at=T0 + 1_000, status=long)], T0
        )
        await hot.dequeue_jobs(Q, 1, 10, "w:1", T0, False)
        assert store.cancel_jobs(Q, [(1, cancelled.local_id)], T0) == 1
        failed = [AckItem(1, cancelled.local_id, ":boom!!", 0), AckItem(1, expiring.local_id, ":late", 5_000)]
        await hot.ack_jobs(Q, AckGroup([], failed), T0 + 1)
        for placed, append, word in ((cancelled, ":boom!!", CANCELLED), (expiring, ":late", EXPIRED)):
            want = ended_status((long + append)[:limit], word, limit)
            assert state_of(store, placed.local_id) == (JobState.FAILED, 0, want)
            assert len(want) == limit

    run(scenario())
    [pending, waiting_long] = store.enqueue_keyed_jobs(
        Q, [keyed("p", status="y" * limit), keyed("w", status="z" * limit, expire_at=T0)], T0
    )
    assert store.cancel_jobs(Q, [(1, pending.local_id)], T0) == 1
    assert state_of(store, pending.local_id)[2] == ended_status("y" * limit, CANCELLED, limit)
    assert store.expire_jobs(Q, T0, 10) == 1
    assert state_of(store, waiting_long.local_id)[2] == ended_status("z" * limit, EXPIRED, limit)
    assert store.expired_counts() == {Q: 2}


def test_cancelling_a_running_job_does_not_extend_its_claim(store: EmbeddedStore) -> None:
    store.enqueue_jobs(Q, [NewJob(1, b"run", T0, 3)], T0)
    [job] = store.dequeue_jobs(Q, 1, 1, "w:1", T0, False)
    assert store.cancel_jobs(Q, [(1, job.local_id)], T0 + 500) == 1
    (found,) = store.lookup_jobs(Q, [(1, job.local_id)], False)
    assert found.updated_at_ms == T0, "the claim timeout still counts from the dequeue"
    assert store.resurrect_timed_out_jobs(Q, 1, T0 + 1, 10, T0 + 600) == 1


def test_expired_counts_survive_a_restart(data_dir: Path, store: EmbeddedStore) -> None:
    store.enqueue_keyed_jobs(Q, [keyed("a", expire_at=T0), keyed("b", expire_at=T0)], T0)
    assert store.expire_jobs(Q, T0, 10) == 2
    store.close()
    reopened = EmbeddedStore(data_dir, "1")
    try:
        assert reopened.expired_counts() == {Q: 2}
    finally:
        reopened.close()


# -- the Rust writer with groups -----------------------------------------------------------------


def test_the_hot_path_expires_a_grouped_retry_past_its_expiry_and_moves_the_group_on(store: EmbeddedStore) -> None:
    async def scenario() -> None:
        hot = store.native_hot_path(offload)
        head, nxt = await hot.enqueue_keyed_jobs(
            Q, [keyed("h", group="g", expire_at=T0 + 1_000), keyed("n", group="g")], T0
        )
        assert [j.local_id for j in claimed(await hot.dequeue_jobs(Q, 1, 10, "w:1", T0, False))] == [head.local_id]
        await hot.ack_jobs(Q, AckGroup([], [AckItem(1, head.local_id, "", 2_000)]), T0 + 1)
        assert state_of(store, head.local_id) == (JobState.FAILED, 0, "expired")
        got = claimed(await hot.dequeue_jobs(Q, 1, 10, "w:1", T0 + 2, False))
        assert [j.local_id for j in got] == [nxt.local_id]

    run(scenario())
    assert store.expired_counts() == {Q: 1}


def test_a_hot_dequeue_expires_the_due_jobs_of_its_queue(store: EmbeddedStore) -> None:
    async def scenario() -> None:
        hot = store.native_hot_path(offload)
        placed = await hot.enqueue_keyed_jobs(
            Q,
            [
                keyed("h", group="g", expire_at=T0 + 10),
                keyed("w", group="g", expire_at=T0 + 10),
                keyed("last", group="g"),
                keyed("alone", expire_at=T0 + 10),
            ],
            T0,
        )
        got = claimed(await hot.dequeue_jobs(Q, 1, 10, "w:1", T0 + 10, False))
        assert [j.local_id for j in got] == [placed[2].local_id], "the group moved on at once"
        for doomed in (placed[0], placed[1], placed[3]):
            assert state_of(store, doomed.local_id) == (JobState.FAILED, 0, "expired")

    run(scenario())
    assert store.expired_counts() == {Q: 3}
    assert conn_of(store).execute("SELECT count(*) FROM group_jobs WHERE waiting = 1").fetchone()[0] == 0
    assert store.group_counts(Q) == GroupCounts(1, 0)


def test_a_cancelled_grouped_job_checkpointed_to_pending_lets_its_group_move_on(store: EmbeddedStore) -> None:
    head, nxt = store.enqueue_keyed_jobs(Q, [keyed("h", group="g"), keyed("n", group="g")], T0)
    store.dequeue_jobs(Q, 1, 10, "w:1", T0, False)
    assert store.cancel_jobs(Q, [(1, head.local_id)], T0) == 1

    item = CheckpointItem(1, head.local_id, T0 + 5, move_to_pending=True, prepend_custom_status="ck:")
    assert store.checkpoint_jobs(Q, [item], "w:1", T0 + 1) == 1
    assert state_of(store, head.local_id) == (JobState.FAILED, 0, "ck: cancelled")
    assert [j.local_id for j in store.dequeue_jobs(Q, 1, 10, "w:1", T0 + 2, False)] == [nxt.local_id]
