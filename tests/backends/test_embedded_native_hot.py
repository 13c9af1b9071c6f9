"""The embedded store's hot path in Rust (``NativeEmbeddedHotPath`` over ``SqliteShard``):
it answers as the Python store's methods do, groups concurrent calls into one commit, shares
the file with the Python connection's writes (the monitor's) without starving either, and
never answers before its commit (a killed server keeps what it acknowledged)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

import pytest
from tests.server.test_contract import IN_PROGRESS, SUCCEEDED, Api
from tests.support.pinlater_server import ServerProcess

from pinlater._pinlater import AckGroup, NewJobBatch, sqlite_library_version
from pinlater.backends.base import AckItem, ClaimedJob, JobRecord, JobState, NewJob
from pinlater.backends.embedded import EmbeddedStore
from pinlater.backends.embedded.native_hot import NativeEmbeddedHotPath
from pinlater.errors import QueueNotFoundError, ShardConnectionError

Q = "q"
T0 = 1_700_000_000_000
T = TypeVar("T")


async def offload(fn: Callable[..., T], /, *args: object) -> T:
    return await asyncio.to_thread(fn, *args)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[EmbeddedStore]:
    shard = EmbeddedStore(tmp_path / "native", "1")
    shard.create_queue(Q, 3)
    yield shard
    shard.close()


@pytest.fixture
def reference(tmp_path: Path) -> Iterator[EmbeddedStore]:
    """A second store, driven through its Python methods only."""
    shard = EmbeddedStore(tmp_path / "python", "1")
    shard.create_queue(Q, 3)
    yield shard
    shard.close()


def run(coro: Awaitable[T]) -> T:
    async def main() -> T:
        return await coro

    return asyncio.run(main())


def records(store: EmbeddedStore, ids: Sequence[int]) -> list[JobRecord]:
    return store.lookup_jobs(Q, [(p, i) for i in ids for p in (1, 2, 3)], True)


def claimed(jobs: Any) -> list[ClaimedJob]:
    return [ClaimedJob._make(job) for job in jobs.to_list()]


def test_the_extension_links_the_sqlite_python_uses() -> None:
    import sqlite3

    assert sqlite_library_version() == sqlite3.sqlite_version


def test_the_lifecycle_answers_as_the_python_store(store: EmbeddedStore, reference: EmbeddedStore) -> None:
    new = [
        NewJob(1, b"a", T0 - 5, 3, "first"),
        NewJob(2, b"b", T0 - 9, 1),
        NewJob(1, b"c", T0 - 7, 1, "x" * 6000),  # cut to CUSTOM_STATUS_LIMIT
        NewJob(1, b"later", T0 + 60_000, 2),
        NewJob(1, b"", T0 - 7, 2, "\u00e9" * 4999 + "\u00e9\u00e9"),  # characters, not bytes
    ]
    hot = store.native_hot_path(offload)

    async def native() -> tuple[list[int], list[ClaimedJob], list[ClaimedJob], list[ClaimedJob]]:
        ids = (await hot.enqueue_jobs(Q, NewJobBatch(new), T0)).to_list()
        dry = claimed(await hot.dequeue_jobs(Q, 1, 10, "c1", T0, True))
        got = claimed(await hot.dequeue_jobs(Q, 1, 2, "c1", T0 + 1, False))
        rest = claimed(await hot.dequeue_jobs(Q, 1, 10, "c2", T0 + 2, False))
        await hot.ack_jobs(Q, AckGroup([(1, got[0].local_id, "+ok", 0)], [(1, got[1].local_id, "+no", 500)]), T0 + 3)
        await hot.ack_jobs(Q, AckGroup([], [(1, rest[0].local_id, "+no", 7)]), T0 + 4)
        await hot.ack_jobs(Q, AckGroup([(1, 10_000, "", 0), (2, rest[0].local_id, "", 0)], []), T0 + 5)  # unclaimed
        return ids, dry, got, rest

    ids, dry, got, rest = run(native())

    ref_ids = reference.enqueue_jobs(Q, new, T0)
    assert ids == ref_ids == [1, 2, 3, 4, 5]
    assert dry == reference.dequeue_jobs(Q, 1, 10, "c1", T0, True)
    assert [j.local_id for j in dry] == [3, 5, 1], "oldest run_after first, then id"
    assert got == reference.dequeue_jobs(Q, 1, 2, "c1", T0 + 1, False)
    assert rest == reference.dequeue_jobs(Q, 1, 10, "c2", T0 + 2, False)
    reference.ack_jobs(Q, [AckItem(1, got[0].local_id, "+ok")], [AckItem(1, got[1].local_id, "+no", 500)], T0 + 3)
    reference.ack_jobs(Q, [], [AckItem(1, rest[0].local_id, "+no", 7)], T0 + 4)
    reference.ack_jobs(Q, [AckItem(1, 10_000), AckItem(2, rest[0].local_id)], [], T0 + 5)

    mine, theirs = records(store, ids), records(reference, ids)
    assert mine == theirs
    by_id = {r.local_id: r for r in mine}
    assert by_id[3].state == JobState.SUCCEEDED and len(by_id[3].custom_status) == 5000
    assert by_id[5].state == JobState.PENDING and by_id[5].run_after_ms == T0 + 3 + 500
    assert by_id[5].attempts_remaining == 1 and by_id[5].claim_descriptor is None
    assert (by_id[1].state, by_id[1].attempts_remaining, by_id[1].run_after_ms) == (JobState.PENDING, 2, T0 + 11)
    assert by_id[4].state == JobState.PENDING and by_id[4].claim_descriptor is None
    assert by_id[2].state == JobState.PENDING, "priority 2 was never dequeued"


def test_many_successes_in_one_ack_end_as_the_python_store_ends_them(
    store: EmbeddedStore, reference: EmbeddedStore
) -> None:
    """The writer marks a request's successes with a statement per run of one priority and one
    status to append: runs in the request's order, so a job acked twice keeps its first ack's
    status; a job of another priority, unclaimed or unknown is left alone."""
    new = [NewJob(p, b"x", T0 - 1, 2, "s") for p in (1, 1, 2, 2, 1, 1)]
    ok = [(1, 1, "+a", 0), (1, 2, "+a", 0), (2, 3, "+b", 0), (2, 4, "", 0), (1, 1, "+late", 0)]
    ok += [(2, 5, "+a", 0), (1, 6, "+a", 0), (1, 99, "+a", 0)]  # 5 is of priority 1; 99 is unknown
    hot = store.native_hot_path(offload)

    async def native() -> None:
        await hot.enqueue_jobs(Q, NewJobBatch(new), T0)
        await hot.dequeue_jobs(Q, 1, 3, "c", T0, False)  # 1, 2, 5: 6 stays PENDING
        await hot.dequeue_jobs(Q, 2, 2, "c", T0, False)
        await hot.ack_jobs(Q, AckGroup(ok, []), T0 + 1)

    run(native())
    reference.enqueue_jobs(Q, new, T0)
    reference.dequeue_jobs(Q, 1, 3, "c", T0, False)
    reference.dequeue_jobs(Q, 2, 2, "c", T0, False)
    reference.ack_jobs(Q, [AckItem._make(a) for a in ok], [], T0 + 1)

    mine = records(store, range(1, 7))
    assert mine == records(reference, range(1, 7))
    ended = {r.local_id: (r.state, r.custom_status) for r in mine}
    assert ended == {
        1: (JobState.SUCCEEDED, "s+a"),
        2: (JobState.SUCCEEDED, "s+a"),
        3: (JobState.SUCCEEDED, "s+b"),
        4: (JobState.SUCCEEDED, "s"),
        5: (JobState.IN_PROGRESS, "s"),
        6: (JobState.PENDING, "s"),
    }


def test_claims_and_acks_by_ranges_of_ids_reach_those_jobs_alone(
    store: EmbeddedStore, reference: EmbeddedStore
) -> None:
    """The writer claims and acks by ranges of local ids where the ids make one range or a few
    long ones, else by their list: either way exactly the jobs the Python store's statements
    reach. Ids 1-8, 10-19 and the odd ids 21-29 are the queue's, 14 not due yet; 9 and the even
    ids 20-28 another queue's."""
    ready = [NewJob(1, b"a", T0 - 1, 2)]
    later = ready * 4 + [NewJob(1, b"due later", T0 + 60_000, 2)] + ready * 5
    steps: list[tuple[str, Any]] = [
        ("dequeue", (2, "c1")),  # 1, 2: one range
        ("ack", [(1, 2, "+ok", 0), (1, 1, "+ok", 0), (1, 2, "+again", 0)]),  # one range, 2 twice
        ("dequeue", (12, "c2")),  # 3-8, 10-13, 15-16: three ranges of 4 ids a range
        ("ack", [(1, i, "+ok", 0) for i in [*range(3, 9), *range(10, 14)]]),  # two ranges
        ("dequeue", (10, "c3")),  # 17-19, 21, 23, 25, 27, 29: six ranges, so by the list
        ("ack", [(1, 14, "+ok", 0), (1, 15, "+ok", 0), (1, 16, "+ok", 0)]),  # one range; 14 is PENDING
        ("ack", [(1, i, "+ok", 0) for i in (14, 17, 18, 19, 21, 23, 25, 27, 29)]),  # by the list; 14 PENDING
        ("ack", [(1, 1, "+ok", 0), (1, 2, "+ok", 0), (1, 3, "+ok", 0)]),  # one range of acked jobs
    ]
    hot = store.native_hot_path(offload)
    other = [NewJob(1, b"o", T0 - 1, 2)]

    async def native() -> list[list[int]]:
        got: list[list[int]] = []
        await hot.enqueue_jobs(Q, NewJobBatch(ready * 8), T0)
        await offload(store.create_queue, "other", 1)
        await offload(store.enqueue_jobs, "other", other, T0)
        await hot.enqueue_jobs(Q, NewJobBatch(later), T0)
        for _ in range(5):
            await offload(store.enqueue_jobs, "other", other, T0)
            await hot.enqueue_jobs(Q, NewJobBatch(ready), T0)
        for at, (kind, arg) in enumerate(steps):
            if kind == "dequeue":
                got.append([j.local_id for j in claimed(await hot.dequeue_jobs(Q, 1, arg[0], arg[1], T0 + at, False))])
            else:
                await hot.ack_jobs(Q, AckGroup(arg, []), T0 + at)
        return got

    got = run(native())
    reference.enqueue_jobs(Q, ready * 8, T0)
    reference.create_queue("other", 1)
    reference.enqueue_jobs("other", other, T0)
    reference.enqueue_jobs(Q, later, T0)
    for _ in range(5):
        reference.enqueue_jobs("other", other, T0)
        reference.enqueue_jobs(Q, ready, T0)
    want: list[list[int]] = []
    for at, (kind, arg) in enumerate(steps):
        if kind == "dequeue":
            want.append([j.local_id for j in reference.dequeue_jobs(Q, 1, arg[0], arg[1], T0 + at, False)])
        else:
            reference.ack_jobs(Q, [AckItem._make(a) for a in arg], [], T0 + at)
    ours = [*range(1, 9), *range(10, 20), *range(21, 30, 2)]
    assert got == want == [[1, 2], [*range(3, 9), *range(10, 14), 15, 16], [17, 18, 19, 21, 23, 25, 27, 29]]
    mine = records(store, ours)
    assert mine == records(reference, ours)
    ended = {r.local_id: (r.state, r.custom_status) for r in mine}
    # (2's second ack found it no longer IN_PROGRESS)
    assert ended == {i: (JobState.SUCCEEDED, "+ok") for i in ours if i != 14} | {14: (JobState.PENDING, "")}
    others = store.lookup_jobs("other", [(1, i) for i in (9, 20, 22, 24, 26, 28)], False)
    assert [r.state for r in others] == [JobState.PENDING] * 6


def test_a_failure_on_the_last_attempt_is_final(store: EmbeddedStore) -> None:
    hot = store.native_hot_path(offload)

    async def go() -> None:
        (local_id,) = (await hot.enqueue_jobs(Q, NewJobBatch([NewJob(3, b"x", 0, 1, "s")]), T0)).to_list()
        assert len(await hot.dequeue_jobs(Q, 3, 5, "c", T0, False)) == 1
        await hot.ack_jobs(Q, AckGroup([], [(3, local_id, "|gone", 1000)]), T0 + 1)
        assert len(await hot.dequeue_jobs(Q, 3, 5, "c", T0 + 10_000, False)) == 0

    run(go())
    (record,) = store.lookup_jobs(Q, [(3, 1)], False)
    assert (record.state, record.attempts_remaining, record.custom_status) == (JobState.FAILED, 0, "s|gone")


def test_a_missing_queue_raises_queue_not_found(store: EmbeddedStore) -> None:
    hot = store.native_hot_path(offload)

    async def go() -> list[BaseException]:
        calls = [
            hot.enqueue_jobs("nope", NewJobBatch([NewJob(1, b"x", 0, 1)]), T0),
            hot.enqueue_jobs("nope", NewJobBatch([]), T0),
            hot.dequeue_jobs("nope", 1, 1, "c", T0, False),
            hot.dequeue_jobs("nope", 1, 1, "c", T0, True),
            hot.ack_jobs("nope", AckGroup([(1, 1, "", 0)], []), T0),
        ]
        errors: list[BaseException] = []
        for call in calls:
            with pytest.raises(QueueNotFoundError) as info:
                await call
            errors.append(info.value)
        return errors

    errors = run(go())
    assert [e.queue for e in errors if isinstance(e, QueueNotFoundError)] == ["nope"] * 5
    assert store.get_queue_names() == {Q}


def test_calls_queued_together_share_one_commit_and_fail_alone(store: EmbeddedStore) -> None:
    hot = store.native_hot_path(offload)
    gate = store.write_gate

    async def go() -> list[Any]:
        before = hot.commits
        gate.acquire()  # the writer waits for the file while every call is queued
        try:
            queues = [Q if n != 7 else "nope" for n in range(30)]
            batches = [NewJobBatch([NewJob(1, b"%d" % n, 0, 1)]) for n in range(30)]
            tasks = [asyncio.ensure_future(hot.enqueue_jobs(q, b, T0)) for q, b in zip(queues, batches, strict=True)]
            await asyncio.sleep(0)  # each task runs to its await: all 30 are submitted
        finally:
            gate.release()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        assert hot.commits - before <= 2, "the first call's group, then everyone queued behind it"
        return results

    results = run(go())
    assert isinstance(results[7], QueueNotFoundError)
    ids = [r.to_list()[0] for n, r in enumerate(results) if n != 7]
    assert sorted(ids) == list(range(1, 30)), "the failed call was undone alone; the others committed"
    assert [r.body for r in store.lookup_jobs(Q, [(1, i) for i in ids], True)] == [
        b"%d" % n for n in range(30) if n != 7
    ]


def test_python_writes_and_hot_writes_take_turns(tmp_path: Path) -> None:
    """The monitor's writes (resurrect, GC) and Python-side enqueues race the hot path with a
    busy timeout too short for SQLite's busy handler to settle it: neither side fails."""
    store = EmbeddedStore(tmp_path / "race", "1", busy_timeout_ms=20)
    store.create_queue(Q, 3)
    rounds = 60
    gc_deleted: list[int] = []  # list.append is atomic; += across threads is not
    python_enqueues: list[int] = []
    stop = threading.Event()
    errors: list[BaseException] = []

    def monitor() -> None:
        try:
            while not stop.is_set():
                store.resurrect_timed_out_jobs(Q, 1, 0, 100, T0)
                gc_deleted.append(store.gc_finished_jobs(Q, 1, JobState.SUCCEEDED, T0 + 10**9, 100))
                python_enqueues.append(len(store.enqueue_jobs(Q, [NewJob(2, b"py", 0, 1)], T0)))
        except BaseException as exc:
            errors.append(exc)

    async def hot_rounds() -> None:
        hot = store.native_hot_path(offload)
        for n in range(rounds):
            batch = NewJobBatch([NewJob(1, b"%d" % n, 0, 1) for _ in range(10)])
            await asyncio.gather(hot.enqueue_jobs(Q, batch, T0), hot.enqueue_jobs(Q, batch, T0))
            jobs = claimed(await hot.dequeue_jobs(Q, 1, 20, "c", T0, False))
            assert len(jobs) == 20
            ok, bad = jobs[:10], jobs[10:]
            await hot.ack_jobs(
                Q, AckGroup([(1, j.local_id, "", 0) for j in ok], [(1, j.local_id, "", 0) for j in bad]), T0
            )

    threads = [threading.Thread(target=monitor) for _ in range(2)]
    for thread in threads:
        thread.start()
    try:
        run(hot_rounds())
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    try:
        assert errors == []
        counts = store.queue_counts(3, T0)
        total = {(k.priority, k.state): 0 for k in counts}
        for key, n in counts.items():
            total[key.priority, key.state] += n
        assert total.get((1, JobState.FAILED)) == rounds * 10
        assert total.get((1, JobState.SUCCEEDED), 0) + sum(gc_deleted) == rounds * 10
        assert total.get((1, JobState.PENDING), 0) == total.get((1, JobState.IN_PROGRESS), 0) == 0
        assert total.get((2, JobState.PENDING)) == sum(python_enqueues) > 0
    finally:
        store.close()


def test_close_answers_what_was_queued_and_then_refuses(store: EmbeddedStore, tmp_path: Path) -> None:
    hot = store.native_hot_path(offload)

    async def go() -> list[Any]:
        store.write_gate.acquire()
        try:
            tasks = [
                asyncio.ensure_future(hot.enqueue_jobs(Q, NewJobBatch([NewJob(1, b"%d" % n, 0, 1)]), T0))
                for n in range(5)
            ]
            await asyncio.sleep(0)
        finally:
            store.write_gate.release()
        await asyncio.to_thread(store.close)  # joins the writer after the queued work
        results = await asyncio.gather(*tasks)
        with pytest.raises(ShardConnectionError, match="closed"):
            await hot.enqueue_jobs(Q, NewJobBatch([]), T0)
        return [r.to_list()[0] for r in results]

    ids = run(go())
    reopened = EmbeddedStore(tmp_path / "native", "1")
    try:
        assert [r.body for r in reopened.lookup_jobs(Q, [(1, i) for i in ids], True)] == [b"%d" % n for n in range(5)]
    finally:
        reopened.close()


def test_a_cancelled_caller_leaves_the_others_answered(store: EmbeddedStore) -> None:
    hot = store.native_hot_path(offload)

    async def go() -> list[int]:
        store.write_gate.acquire()
        try:
            first = asyncio.ensure_future(hot.enqueue_jobs(Q, NewJobBatch([NewJob(1, b"gone", 0, 1)]), T0))
            second = asyncio.ensure_future(hot.enqueue_jobs(Q, NewJobBatch([NewJob(1, b"kept", 0, 1)]), T0))
            await asyncio.sleep(0)
            first.cancel()
        finally:
            store.write_gate.release()
        return (await second).to_list()

    assert run(go()) == [2]
    assert len(store.lookup_jobs(Q, [(1, 1)], False)) == 1, "the write stands, as a thread's would"


def test_a_killed_server_keeps_every_job_it_acknowledged(
    start_server: Callable[..., ServerProcess], open_client: Callable[[ServerProcess], Any], ttypes: ModuleType
) -> None:
    srv = start_server()
    api = Api(open_client(srv), ttypes)
    api.create("durable")
    descriptors: list[str] = []
    for batch in range(10):
        descriptors += api.enqueue("durable", *[api.job(b"%d-%d" % (batch, i)) for i in range(50)])
    claimed_jobs = list(api.dequeue("durable", limit=40).jobs)
    api.ack("durable", ok=claimed_jobs[:15])
    srv.kill()  # SIGKILL right after the last answer

    api2 = Api(open_client(start_server()), ttypes)
    found = api2.lookup(*descriptors, body=True)
    assert len(found) == 500
    assert found[descriptors[-1]].body == b"9-49"
    states = sorted(info.jobState for info in found.values())
    assert states.count(SUCCEEDED) == 15
    assert states.count(IN_PROGRESS) == 25


def test_the_store_hands_the_server_its_native_path(store: EmbeddedStore) -> None:
    assert isinstance(store.hot_path(offload), NativeEmbeddedHotPath)
    run(store.hot_path(offload).enqueue_jobs(Q, NewJobBatch([NewJob(1, b"x", 0, 1)]), T0))
    assert store.native_hot_path(offload).commits == 1


def test_a_locked_database_is_a_shard_connection_error_and_passes(tmp_path: Path) -> None:
    import sqlite3

    store = EmbeddedStore(tmp_path / "locked", "1", busy_timeout_ms=50)
    store.create_queue(Q, 1)
    hot = store.native_hot_path(offload)
    other = sqlite3.connect(store.path, isolation_level=None)  # a writer that knows no WriteGate
    try:
        other.execute("BEGIN IMMEDIATE")
        with pytest.raises(ShardConnectionError, match="locked") as info:
            run(hot.enqueue_jobs(Q, NewJobBatch([NewJob(1, b"x", 0, 1)]), T0))
        assert not info.value.maybe_applied
        other.execute("ROLLBACK")
        assert run(hot.enqueue_jobs(Q, NewJobBatch([NewJob(1, b"y", 0, 1)]), T0)).to_list() == [1]
    finally:
        other.close()
        store.close()


@pytest.mark.parametrize("synchronous", ["FULL", "NORMAL"])
def test_full_syncs_the_log_before_a_call_returns_and_normal_never_does(tmp_path: Path, synchronous: str) -> None:
    store = EmbeddedStore(tmp_path / synchronous, "1", synchronous=synchronous)
    try:
        store.create_queue(Q, 3)
        hot = store.native_hot_path(offload)
        for n in range(3):
            run(hot.enqueue_jobs(Q, NewJobBatch([NewJob(1, b"%d" % n, 0, 1)]), T0))
            assert hot.commits == n + 1
            # a call returns after its commit's sync (which no later commit could share)
            assert hot.syncs == (n + 1 if synchronous == "FULL" else 0)
        assert len(store.lookup_jobs(Q, [(1, 1), (1, 2), (1, 3)], False)) == 3
    finally:
        store.close()


def test_python_commits_leave_the_log_to_the_checkpointer_once_the_hot_path_opens(tmp_path: Path) -> None:
    """Python's connection copies the log into the file (holding the write lock) at SQLite's
    1,000 pages until the hot path opens, then only at NATIVE_AUTOCHECKPOINT_PAGES: the hot
    path's checkpointer copies it, off the lock. A copy is what grows the file in WAL mode."""
    store = EmbeddedStore(tmp_path / "ckpt", "1", synchronous="NORMAL")
    try:
        store.create_queue(Q, 3)
        body = b"x" * 3000  # about a page a job

        def growth_of_the_file() -> int:
            """Commits about 1,200 pages through Python's connection, 100 a commit."""
            before = store.path.stat().st_size
            for _ in range(12):
                store.enqueue_jobs(Q, [NewJob(1, body, 0, 1) for _ in range(100)], T0)
            return store.path.stat().st_size - before

        assert growth_of_the_file() > 1_000 * 3000  # copied past 1,000 pages
        store.native_hot_path(offload)
        assert growth_of_the_file() == 0  # the log holds them all
        assert len(records(store, list(range(1, 2401)))) == 2400
    finally:
        store.close()


def test_the_writer_counts_its_commits_and_the_checkpointer_s_copies(tmp_path: Path) -> None:
    """``writer_counts`` through the extension: a commit per write call made in turn, and once
    the log passes the checkpointer's 10,000 pages, a copy by the checkpointer thread, finished
    by the writer's next commit, with no fallback (the writer copying it all itself)."""
    store = EmbeddedStore(tmp_path / "counts", "1", synchronous="NORMAL")
    try:
        store.create_queue(Q, 3)
        assert store.writer_counts() == (0, 0, 0, 0, 0), "no writer before the hot path opens"
        hot = store.native_hot_path(offload)
        body = b"x" * 3000  # about a page a job

        async def write(calls: int) -> None:
            for _ in range(calls):
                await hot.enqueue_jobs(Q, NewJobBatch([NewJob(1, body, 0, 1) for _ in range(100)]), T0)

        run(write(3))
        counts = store.writer_counts()
        assert counts.commits == 3 and counts.wal_syncs == 0, counts  # NORMAL: no sync of the log
        (wal,) = (tmp_path / "counts").rglob("*-wal")
        calls = 3
        while wal.stat().st_size < 10_100 * (4096 + 24):  # past the checkpointer's 10,000 pages (~100 a call)
            run(write(1))
            calls += 1
        # The copy goes on while commits come, so wait for it here: a writer racing a slow disk
        # could pass the fallback's 40,000 pages first.
        deadline = time.monotonic() + 60
        while store.writer_counts().checkpoints_copied == 0:
            assert time.monotonic() < deadline, f"no copy finished: {store.writer_counts()}"
            time.sleep(0.01)
        run(write(1))  # its commit finishes the copy
        counts = store.writer_counts()
        assert counts.checkpoints_copied == counts.checkpoints_by_writer == 1, counts
        assert counts.checkpoint_fallbacks == 0 and counts.commits == calls + 1 and counts.wal_syncs == 0, counts
    finally:
        store.close()


def test_a_listening_loop_is_answered_by_its_signal_and_another_the_old_way(store: EmbeddedStore) -> None:
    """The hot path's loop listens (``SqliteShard.listen``): the settler queues its answers and
    writes a byte to the loop's signal, which arrives while the loop is kept from running (this
    thread never yields to it), and the loop's reader settles the future. A loop that does not
    listen is answered by ``call_soon_threadsafe`` as before, and its answer leaves the other
    loop's signal quiet."""
    import select

    hot = store.native_hot_path(offload)
    shard = hot._shard
    signals: list[Any] = []

    async def listening() -> tuple[bool, list[int], list[int]]:
        loop = asyncio.get_running_loop()
        first = await hot.enqueue_jobs(Q, NewJobBatch([NewJob(1, b"a", 0, 1)]), T0)  # starts listening
        signal = shard.listen(loop)  # the hot path's, the same one
        signals.append(signal)
        future: asyncio.Future[Any] = loop.create_future()
        assert shard.enqueue(Q, NewJobBatch([NewJob(1, b"b", 0, 1)]), T0, future, loop)
        readable = bool(select.select([signal.fileno()], [], [], 10)[0])  # the loop does not run meanwhile
        assert not future.done()
        return readable, first.to_list(), (await future).to_list()

    readable, first, second = run(listening())
    assert readable, "the answer came by the loop's signal"
    assert first == [1] and second == [2]

    async def not_listening() -> list[int]:
        loop = asyncio.get_running_loop()  # a new loop: the hot path never listened on it
        future: asyncio.Future[Any] = loop.create_future()
        assert shard.enqueue(Q, NewJobBatch([NewJob(1, b"c", 0, 1)]), T0, future, loop)
        ids: list[int] = (await future).to_list()
        return ids

    assert run(not_listening()) == [3], "answered by call_soon_threadsafe"
    assert not select.select([signals[0].fileno()], [], [], 0)[0], "the first loop's signal stayed quiet"


def test_closing_the_store_settles_a_listening_loops_answers_and_stops_watching(store: EmbeddedStore) -> None:
    """``SqliteShard.close`` (from another thread, as the server stops its stores) answers what
    was queued, and each listening loop then settles it and stops watching its signal."""
    hot = store.native_hot_path(offload)

    async def main() -> tuple[list[int], bool]:
        loop = asyncio.get_running_loop()
        await hot.enqueue_jobs(Q, NewJobBatch([NewJob(1, b"a", 0, 1)]), T0)  # listening now
        fd = hot._shard.listen(loop).fileno()
        pending = asyncio.ensure_future(hot.enqueue_jobs(Q, NewJobBatch([NewJob(1, b"b", 0, 1)]), T0))
        await asyncio.sleep(0)  # submitted
        await asyncio.to_thread(store.close)
        ids: list[int] = (await pending).to_list()
        await asyncio.sleep(0)  # the close's removal, scheduled after the drain, has run
        return ids, loop.remove_reader(fd)

    ids, still_watched = run(main())
    assert ids == [2]
    assert not still_watched, "the loop no longer watches the signal"
