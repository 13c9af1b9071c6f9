"""Job control on one shard, for every backend kind: cancel, expiry, paged scans, the oldest ready
job and schedules.

The contract is the seam's docstrings (``ShardStore.cancel_jobs``, "Expiry" in
``ShardStore.enqueue_keyed_jobs``, ``expire_jobs``, ``expired_counts``, ``scan_jobs``'s
``after``, ``oldest_ready`` and the schedule methods). Time is explicit, so nothing sleeps.

The hot operations (enqueue, dequeue, ack, reserve, claim) run twice: through the store's blocking
methods and through its hot path as the server calls it, since both must keep the same rules.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence

import pytest
from tests.support.hot import dequeue
from tests.support.store_ops import CLAIM, Ops

from pinlater.backends.base import (
    CANCELLED,
    EXPIRED,
    AckItem,
    CheckpointItem,
    Enqueued,
    JobFilter,
    JobRecord,
    JobState,
    KeyedJob,
    NewJob,
    ScanCursor,
    ScheduleRow,
    ShardStore,
    ended_status,
)
from pinlater.backends.mysql import MySQLStore
from pinlater.backends.redis import RedisStore
from pinlater.backends.sharded import ShardedBackend
from pinlater.backends.shardmap import Shard, ShardMap
from pinlater.clock import ManualClock
from pinlater.errors import QueueNotFoundError

Q = "control_queue"
OTHER = "other_queue"
T0 = 1_700_000_000_000


@pytest.fixture(params=["store", "hot_path"])
def ops(request: pytest.FixtureRequest, store: ShardStore) -> Iterator[Ops]:
    store.create_queue(Q, 3)
    made = Ops(store, Q, hot=request.param == "hot_path")
    try:
        yield made
    finally:
        made.close()


@pytest.fixture
def grouped(ops: Ops) -> Ops:
    if ops.store.groups_refused is not None:
        pytest.skip(f"groupKey (ordered groups) {ops.store.groups_refused}")
    return ops


def job(
    body: bytes = b"b",
    *,
    priority: int = 1,
    run_after: int = T0,
    attempts: int = 3,
    status: str = "",
    expire_at: int | None = None,
    key: str | None = None,
    group: str | None = None,
) -> KeyedJob:
    return KeyedJob(NewJob(priority, body, run_after, attempts, status), key, 0, group, expire_at)


def plain(ops: Ops, *jobs: KeyedJob) -> list[Enqueued]:
    """Enqueue through the plain path when no job has an extension, else the keyed one."""
    if all(j.key is None and j.group is None and j.expire_at_ms is None for j in jobs):
        ids = ops.store.enqueue_jobs(Q, [j.job for j in jobs], T0)
        return [Enqueued(j.job.priority, i, False) for j, i in zip(jobs, ids, strict=True)]
    return ops.enqueue(list(jobs))


def record(store: ShardStore, placed: Enqueued | tuple[int, int]) -> JobRecord:
    key = (placed.priority, placed.local_id) if isinstance(placed, Enqueued) else placed
    (found,) = store.lookup_jobs(Q, [key], False)
    return found


def key(placed: Enqueued) -> tuple[int, int]:
    return (placed.priority, placed.local_id)


def ids(jobs: Sequence[object]) -> list[int]:
    return [j.local_id for j in jobs]  # type: ignore[attr-defined]


def expired_total(store: ShardStore, queue: str = Q) -> int:
    return store.expired_counts().get(queue, 0)


# -- ended_status -------------------------------------------------------------------------------


def test_ended_status_appends_the_word_so_that_it_always_shows() -> None:
    assert ended_status("", CANCELLED, 100) == "cancelled"
    assert ended_status("tried twice", EXPIRED, 100) == "tried twice expired"
    long = "x" * 100
    assert ended_status(long, CANCELLED, 100) == "x" * 90 + " cancelled"
    assert len(ended_status(long, CANCELLED, 100)) == 100


# -- cancel --------------------------------------------------------------------------------------


def test_cancel_fails_pending_jobs_now_and_later_with_no_attempt_left(ops: Ops) -> None:
    ready, later, kept = plain(ops, job(b"r", status="s1"), job(b"l", run_after=T0 + 60_000), job(b"k"))

    assert ops.store.cancel_jobs(Q, [key(ready), key(later)], T0 + 5) == 2

    for placed, status in ((ready, "s1 cancelled"), (later, "cancelled")):
        found = record(ops.store, placed)
        assert (found.state, found.attempts_remaining, found.custom_status) == (JobState.FAILED, 0, status)
        assert found.updated_at_ms == T0 + 5
        assert found.claim_descriptor is None
    assert ids(ops.dequeue(1, 10, now=T0 + 120_000)) == [kept.local_id], "cancelled jobs are never handed out"


def test_cancel_leaves_finished_unknown_and_already_cancelled_jobs_alone(ops: Ops) -> None:
    done, pending = plain(ops, job(b"d"), job(b"p", priority=2))
    ops.dequeue(1, 10)
    ops.ack(succeeded=[AckItem(1, done.local_id)])

    assert ops.store.cancel_jobs(Q, [key(done), (1, 987_654), (3, 1)], T0) == 0
    assert record(ops.store, done).state == JobState.SUCCEEDED
    assert ops.store.cancel_jobs(Q, [key(pending)], T0) == 1
    assert ops.store.cancel_jobs(Q, [key(pending)], T0) == 0, "a second cancel changes nothing"
    assert record(ops.store, pending).custom_status == "cancelled", "the word is appended once"


def test_a_cancelled_job_in_progress_fails_for_good_at_its_failure_ack(ops: Ops) -> None:
    (placed,) = plain(ops, job(b"run", attempts=5, status="s"))
    (claimed,) = ops.dequeue(1, 1)

    assert ops.store.cancel_jobs(Q, [key(placed)], T0 + 1) == 1
    found = record(ops.store, placed)
    assert (found.state, found.attempts_remaining) == (JobState.IN_PROGRESS, 0)
    assert found.claim_descriptor == CLAIM, "the worker keeps its claim"
    assert ops.store.cancel_jobs(Q, [key(placed)], T0 + 2) == 0

    ops.ack(failed=[AckItem(1, claimed.local_id, ":boom", 1_000)], now=T0 + 10)
    found = record(ops.store, placed)
    assert (found.state, found.attempts_remaining, found.custom_status) == (JobState.FAILED, 0, "s:boom cancelled")
    assert ops.dequeue(1, 10, now=T0 + 60_000) == []


def test_a_cancelled_job_in_progress_still_succeeds(ops: Ops) -> None:
    (placed,) = plain(ops, job(b"run"))
    ops.dequeue(1, 1)
    assert ops.store.cancel_jobs(Q, [key(placed)], T0) == 1

    ops.ack(succeeded=[AckItem(1, placed.local_id, "done")], now=T0 + 10)
    found = record(ops.store, placed)
    assert (found.state, found.custom_status) == (JobState.SUCCEEDED, "done")


def test_a_cancelled_job_whose_claim_times_out_fails_for_good(ops: Ops) -> None:
    (placed,) = plain(ops, job(b"run", attempts=4))
    ops.dequeue(1, 1)
    ops.store.cancel_jobs(Q, [key(placed)], T0)

    resurrected = ops.store.resurrect_timed_out_jobs(Q, 1, T0 + 1, 100, T0 + 1_000)
    assert (resurrected, resurrected.failed) == (1, 1)
    found = record(ops.store, placed)
    assert (found.state, found.attempts_remaining, found.custom_status) == (JobState.FAILED, 0, "cancelled")
    assert ops.dequeue(1, 10, now=T0 + 2_000) == []


def test_a_checkpoint_gives_a_cancelled_job_no_further_attempt(ops: Ops) -> None:
    kept, moved = plain(ops, job(b"kept"), job(b"moved"))
    ops.dequeue(1, 2)
    assert ops.store.cancel_jobs(Q, [key(kept), key(moved)], T0) == 2

    changed = ops.store.checkpoint_jobs(
        Q,
        [
            CheckpointItem(1, kept.local_id, T0, attempts_allowed=7),
            CheckpointItem(1, moved.local_id, T0 + 10, move_to_pending=True),
        ],
        "worker:host-a",
        T0 + 5,
    )
    assert changed == 2
    found = record(ops.store, kept)
    assert (found.state, found.attempts_allowed, found.attempts_remaining) == (JobState.IN_PROGRESS, 7, 0)
    found = record(ops.store, moved)
    assert (found.state, found.attempts_remaining, found.custom_status) == (JobState.FAILED, 0, "cancelled")
    assert ops.dequeue(1, 10, now=T0 + 60_000) == []


def test_a_cancelled_reserved_job_is_not_claimed(ops: Ops) -> None:
    (placed,) = plain(ops, job(b"held"))
    assert ids(ops.reserve(1, 10)) == [placed.local_id]

    assert ops.store.cancel_jobs(Q, [key(placed)], T0 + 1) == 1
    assert ops.claim_reserved([key(placed)], now=T0 + 2) == 0
    found = record(ops.store, placed)
    assert (found.state, found.claim_descriptor) == (JobState.FAILED, None)


def test_cancel_releases_the_dedup_key(ops: Ops) -> None:
    (first,) = ops.enqueue([job(b"one", key="k")])
    assert ops.store.cancel_jobs(Q, [key(first)], T0) == 1

    (second,) = ops.enqueue([job(b"two", key="k")], now=T0 + 1)
    assert not second.deduplicated, "a failed job holds its key no longer"
    assert second.local_id != first.local_id


def test_cancelling_a_groups_head_lets_the_next_job_run(grouped: Ops) -> None:
    head, middle, last = grouped.enqueue([job(b"h", group="g"), job(b"m", group="g"), job(b"l", group="g")])
    assert grouped.store.cancel_jobs(Q, [key(head)], T0) == 1
    assert ids(grouped.dequeue(1, 10)) == [middle.local_id]

    assert grouped.store.cancel_jobs(Q, [key(last)], T0) == 1, "a waiting job cancels too"
    grouped.ack(succeeded=[AckItem(1, middle.local_id)], now=T0 + 1)
    assert grouped.dequeue(1, 10, now=T0 + 2) == [], "the cancelled job behind it never runs"
    assert record(grouped.store, last).state == JobState.FAILED
    assert grouped.store.group_counts(Q).groups == 0


def test_cancelling_a_running_grouped_job_keeps_the_group_until_its_ack(grouped: Ops) -> None:
    head, behind = grouped.enqueue([job(b"h", group="g"), job(b"b", group="g")])
    grouped.dequeue(1, 10)
    assert grouped.store.cancel_jobs(Q, [key(head)], T0) == 1
    assert grouped.dequeue(1, 10) == [], "the head still runs"

    grouped.ack(failed=[AckItem(1, head.local_id, "", 0)], now=T0 + 1)
    assert record(grouped.store, head).state == JobState.FAILED
    assert ids(grouped.dequeue(1, 10, now=T0 + 2)) == [behind.local_id]


# -- expiry --------------------------------------------------------------------------------------


def test_an_expired_job_is_never_handed_out_and_fails_expired(ops: Ops) -> None:
    doomed, fine = ops.enqueue([job(b"doomed", status="s", expire_at=T0 + 100), job(b"fine", expire_at=T0 + 10_000)])
    found = record(ops.store, doomed)
    assert (found.state, found.expire_at_ms) == (JobState.PENDING, T0 + 100)

    assert ids(ops.dequeue(1, 10, now=T0 + 100, dry_run=True)) == [fine.local_id]
    assert ids(ops.dequeue(1, 10, now=T0 + 100)) == [fine.local_id]
    ops.store.expire_jobs(Q, T0 + 200, 100)

    found = record(ops.store, doomed)
    assert (found.state, found.attempts_remaining, found.custom_status) == (JobState.FAILED, 0, "s expired")
    assert found.expire_at_ms == T0 + 100
    assert expired_total(ops.store) == 1, "expired once, whichever step did it"
    assert ops.store.expire_jobs(Q, T0 + 300, 100) == 0


def test_one_dequeue_ends_a_bounded_number_of_expired_jobs(ops: Ops) -> None:
    # A million jobs that expired together must not make one dequeue (a Lua script holding
    # Redis, a transaction holding SQLite) end them all: the monitor's expire_jobs takes the rest.
    ops.enqueue([job(b"x%d" % i, run_after=T0 - 1_000, expire_at=T0 + 10) for i in range(700)])
    (alive,) = ops.enqueue([job(b"alive", run_after=T0)])

    got = ids(ops.dequeue(1, 1, now=T0 + 20))
    if isinstance(ops.store, MySQLStore):
        # 256 met: a backlog, whose rest a thread of the store ends in calls of its own
        assert ops.store.wait_expiry_drains(60)
    else:
        assert expired_total(ops.store) < 700
    while ops.store.expire_jobs(Q, T0 + 20, 500):
        pass
    assert expired_total(ops.store) == 700
    assert got or ids(ops.dequeue(1, 1, now=T0 + 20)) == [alive.local_id]


def test_one_dequeue_through_the_walk_passes_more_expired_jobs_than_one_store_call_ends(store: ShardStore) -> None:
    # A store call that stops at its budget of expired jobs (256 on Redis) says so
    # (ClaimedJobs.cut), and the walk calls again instead of taking the place for empty: else the
    # fresh job behind a mass expiry waited for the empty hint's backoff at every 256 (200,000
    # expired jobs hid one for minutes).
    store.create_queue(Q, 3)
    store.enqueue_keyed_jobs(Q, [job(b"x%d" % i, run_after=T0 - 1_000, expire_at=T0 + 10) for i in range(1_000)], T0)
    (alive,) = store.enqueue_keyed_jobs(Q, [job(b"alive", run_after=T0)], T0)
    counts: dict[str, int] = {}
    backend = ShardedBackend(
        ShardMap([Shard(store.name, store)]),
        num_priorities=3,
        parallelism=2,
        clock=ManualClock(T0 + 20),
        count=lambda name, by: counts.__setitem__(name, counts.get(name, 0) + by),
    )

    async def run() -> list[int]:
        try:
            return [j.job.local_id for j in await dequeue(backend, Q, 1, "walk")]
        finally:
            await backend.aclose()

    got = asyncio.run(run())
    backend._executor.shutdown(wait=True)
    assert got == [alive.local_id], "the one dequeue request answers the job behind the expired ones"
    if isinstance(store, RedisStore):
        assert counts.get("dequeue_store_calls_cut", 0) >= 3, "calls stopped at 256 expired jobs, and said so"
        assert expired_total(store) == 1_000, "the calls ended every expired job they passed"


def test_a_dequeue_past_expired_jobs_takes_no_more_than_its_limit(ops: Ops) -> None:
    # (Redis reads larger pages once it has met expired jobs: the limit still holds.)
    ops.enqueue([job(b"x%d" % i, run_after=T0 - 1_000, expire_at=T0 + 10) for i in range(10)])
    fresh = ops.enqueue([job(b"f%d" % i, run_after=T0) for i in range(20)])

    got = ids(ops.dequeue(1, 2, now=T0 + 20))
    assert got == [p.local_id for p in fresh[:2]]
    assert len(ids(ops.dequeue(1, 100, now=T0 + 20))) == 18


def test_a_dequeue_past_an_expired_job_takes_equal_run_afters_by_id(ops: Ops) -> None:
    # Ids 9 and 10 share a run after: "10" sorts first as text, and the dequeue must still take 9.
    (expired,) = ops.enqueue([job(b"old", run_after=T0 - 1_000, expire_at=T0 + 10)])
    ops.enqueue([job(b"f%d" % i, run_after=T0) for i in range(8 - expired.local_id)])
    pair = ops.enqueue([job(b"a", run_after=T0 - 500), job(b"b", run_after=T0 - 500)])
    assert [p.local_id for p in pair] == [9, 10], "the ids the case needs"

    assert ids(ops.dequeue(1, 1, now=T0 + 20)) == [9]
    assert ids(ops.dequeue(1, 1, now=T0 + 20)) == [10]


def test_a_reserve_stopped_by_expired_jobs_says_so_and_the_next_one_goes_on(store: ShardStore) -> None:
    # The broker's refills walk as dequeues do (walk_ready), so its reserve says cut as well.
    store.create_queue(Q, 3)
    store.enqueue_keyed_jobs(Q, [job(b"x%d" % i, run_after=T0 - 1_000, expire_at=T0 + 10) for i in range(300)], T0)
    (alive,) = store.enqueue_keyed_jobs(Q, [job(b"alive", run_after=T0)], T0)
    backend = ShardedBackend(ShardMap([Shard(store.name, store)]), num_priorities=3, parallelism=2)
    hot = backend.hot_path(backend.shards.all()[0])

    async def run() -> list[tuple[list[int], bool]]:
        answers = []
        try:
            for _ in range(2):
                got = await hot.reserve_jobs(Q, 1, 5, "refill", T0 + 20, 5_000)
                answers.append(([j[0] for j in got.to_list()], got.cut))
        finally:
            await backend.aclose()
        return answers

    answers = asyncio.run(run())
    backend._executor.shutdown(wait=True)
    if isinstance(store, RedisStore):
        assert answers == [([], True), ([alive.local_id], False)], "256 expired jobs, then the rest and the job"
    else:
        assert answers[0] == ([alive.local_id], False)


def test_expire_jobs_takes_the_soonest_first_and_stops_at_its_limit(ops: Ops) -> None:
    placed = ops.enqueue([job(b"%d" % i, priority=1 + i % 3, expire_at=T0 + 1_000 - i) for i in range(5)])
    never = ops.enqueue([job(b"later", expire_at=T0 + 50_000)])

    assert ops.store.expire_jobs(Q, T0 + 5_000, 2) == 2
    states = [record(ops.store, p).state for p in placed]
    assert states == [JobState.PENDING] * 3 + [JobState.FAILED] * 2, "the two that expired first"
    assert ops.store.expire_jobs(Q, T0 + 5_000, 100) == 3
    assert record(ops.store, never[0]).state == JobState.PENDING
    assert expired_total(ops.store) == 5


def test_jobs_in_progress_do_not_expire(ops: Ops) -> None:
    (placed,) = ops.enqueue([job(b"run", expire_at=T0 + 10)])
    assert ids(ops.dequeue(1, 10)) == [placed.local_id]

    assert ops.store.expire_jobs(Q, T0 + 1_000, 100) == 0
    ops.ack(succeeded=[AckItem(1, placed.local_id)], now=T0 + 1_000)
    assert record(ops.store, placed).state == JobState.SUCCEEDED
    assert expired_total(ops.store) == 0


def test_a_retry_that_would_run_after_the_expiry_expires_instead(ops: Ops) -> None:
    late, early = ops.enqueue([job(b"late", expire_at=T0 + 5_000), job(b"early", expire_at=T0 + 5_000)])
    ops.dequeue(1, 10)

    ops.ack(
        failed=[AckItem(1, late.local_id, "", 5_000), AckItem(1, early.local_id, "", 4_000)],
        now=T0 + 500,
    )
    found = record(ops.store, late)
    assert (found.state, found.attempts_remaining, found.custom_status) == (JobState.FAILED, 0, "expired")
    found = record(ops.store, early)
    assert (found.state, found.run_after_ms) == (JobState.PENDING, T0 + 4_500)
    assert expired_total(ops.store) == 1


def test_a_claim_timing_out_past_the_expiry_expires_the_job(ops: Ops) -> None:
    (placed,) = ops.enqueue([job(b"slow", expire_at=T0 + 1_000)])
    ops.dequeue(1, 10)

    resurrected = ops.store.resurrect_timed_out_jobs(Q, 1, T0 + 1, 100, T0 + 2_000)
    assert (resurrected, resurrected.failed) == (1, 1)
    found = record(ops.store, placed)
    assert (found.state, found.custom_status) == (JobState.FAILED, "expired")
    assert expired_total(ops.store) == 1


def test_a_job_expiring_within_the_hold_is_not_reserved_but_can_be_dequeued(ops: Ops) -> None:
    soon, later = ops.enqueue([job(b"soon", expire_at=T0 + 30_000), job(b"later", expire_at=T0 + 90_000)])

    assert ids(ops.reserve(1, 10)) == [later.local_id], "the hold is 60 s: a broker could hand it out too late"
    assert ops.claim_reserved([key(soon), key(later)], now=T0 + 10) == 1, "only what was reserved"
    assert ids(ops.dequeue(1, 10, now=T0 + 20)) == [soon.local_id], "a direct dequeue still takes it in time"
    assert ops.reserve(1, 10, now=T0 + 30_000) == []


def test_retrying_an_expired_job_clears_its_expiry(ops: Ops) -> None:
    (placed,) = ops.enqueue([job(b"again", expire_at=T0 + 10)])
    assert ops.store.expire_jobs(Q, T0 + 20, 10) == 1

    assert ops.store.retry_failed_jobs(Q, 1, 2, T0 + 30, 10, T0 + 30) == 1
    found = record(ops.store, placed)
    assert (found.state, found.expire_at_ms) == (JobState.PENDING, None)
    assert ids(ops.dequeue(1, 10, now=T0 + 60_000)) == [placed.local_id]


def test_scans_show_the_expiry(ops: Ops) -> None:
    with_expiry, without = ops.enqueue([job(b"x", expire_at=T0 + 9_000), job(b"y", key="k")])
    found = {r.local_id: r.expire_at_ms for r in ops.store.scan_jobs(Q, JobFilter(JobState.PENDING, 1, T0), 10)}
    assert found == {with_expiry.local_id: T0 + 9_000, without.local_id: None}


def test_an_expired_job_releases_its_dedup_key(ops: Ops) -> None:
    (first,) = ops.enqueue([job(b"one", key="k", expire_at=T0 + 10)])
    assert ops.store.expire_jobs(Q, T0 + 10, 10) == 1

    (second,) = ops.enqueue([job(b"two", key="k")], now=T0 + 11)
    assert not second.deduplicated
    assert second.local_id != first.local_id


def test_an_expired_head_lets_its_group_move_on(grouped: Ops) -> None:
    head, waiting, last = grouped.enqueue(
        [job(b"h", group="g", expire_at=T0 + 10), job(b"w", group="g", expire_at=T0 + 10), job(b"l", group="g")]
    )
    # A dequeue may expire the head itself (and promote the jobs behind it); it never hands out
    # an expired job.
    taken = ids(grouped.dequeue(1, 10, now=T0 + 10))
    assert set(taken) <= {last.local_id}
    grouped.store.expire_jobs(Q, T0 + 10, 100)

    assert record(grouped.store, head).state == JobState.FAILED
    assert record(grouped.store, waiting).state == JobState.FAILED, "a waiting job expires too"
    assert taken + ids(grouped.dequeue(1, 10, now=T0 + 20)) == [last.local_id]
    assert expired_total(grouped.store) == 2


def test_expired_counts_are_kept_per_queue(ops: Ops) -> None:
    ops.store.create_queue(OTHER, 3)
    ops.enqueue([job(b"a", expire_at=T0 + 1), job(b"b", expire_at=T0 + 1)])
    ops.store.enqueue_keyed_jobs(OTHER, [job(b"c", expire_at=T0 + 1)], T0)

    ops.store.expire_jobs(Q, T0 + 5, 100)
    ops.store.expire_jobs(OTHER, T0 + 5, 100)
    counts = ops.store.expired_counts()
    assert (counts.get(Q), counts.get(OTHER)) == (2, 1)

    ops.store.delete_queue(OTHER)
    assert ops.store.expired_counts().get(OTHER, 0) == 0


# -- paged scans ---------------------------------------------------------------------------------


def scan_all(store: ShardStore, where: JobFilter, page: int) -> list[JobRecord]:
    """Every page of a scan, each resumed after the last job of the one before."""
    out: list[JobRecord] = []
    after: ScanCursor | None = None
    for _ in range(1_000):
        got = store.scan_jobs(Q, where, page, after)
        assert len(got) <= page
        out.extend(got)
        if len(got) < page:
            return out
        after = ScanCursor(got[-1].run_after_ms, got[-1].local_id)
    raise AssertionError("the scan did not end")


def test_paging_returns_every_job_once_newest_first(ops: Ops) -> None:
    # Ties on run_after bigger than a page: the store's order of local ids decides within them.
    jobs = [job(b"%d" % i, run_after=T0 - 1_000 * (i % 4)) for i in range(30)]
    placed = plain(ops, *jobs)
    where = JobFilter(JobState.PENDING, 1, T0)

    got = scan_all(ops.store, where, 7)

    assert sorted(ids(got)) == sorted(p.local_id for p in placed)
    runs = [r.run_after_ms for r in got]
    assert runs == sorted(runs, reverse=True)
    assert [r.body for r in got] == [None] * 30


def test_a_job_that_keeps_matching_is_returned_once_whatever_changes_around_it(ops: Ops) -> None:
    placed = plain(ops, *[job(b"%d" % i, run_after=T0 - 100 * i) for i in range(20)])
    where = JobFilter(JobState.PENDING, 1, T0)
    first = ops.store.scan_jobs(Q, where, 5)
    cursor = ScanCursor(first[-1].run_after_ms, first[-1].local_id)

    # The last job returned is deleted, a newer and an older job are added, and one job not yet
    # returned leaves PENDING.
    ops.store.delete_jobs(Q, JobFilter(JobState.PENDING, 1, T0, None, "^4$"), 10)
    plain(ops, job(b"newer", run_after=T0), job(b"older", run_after=T0 - 100_000))
    taken = placed[10]
    ops.store.cancel_jobs(Q, [key(taken)], T0)
    rest: list[JobRecord] = []
    while True:
        got = ops.store.scan_jobs(Q, where, 5, cursor)
        rest.extend(got)
        if len(got) < 5:
            break
        cursor = ScanCursor(got[-1].run_after_ms, got[-1].local_id)

    seen = ids(first) + ids(rest)
    stayed = {p.local_id for p in placed} - {placed[4].local_id, taken.local_id}
    assert len(seen) == len(set(seen)), "nothing twice"
    assert stayed <= set(seen), "every job that stayed PENDING is returned"
    later = set(ids(rest))
    assert placed[4].local_id not in later and taken.local_id not in later


def test_paging_future_jobs_and_a_cursor_past_the_end(ops: Ops) -> None:
    plain(ops, *[job(b"%d" % i, run_after=T0 + 1_000 * (i + 1)) for i in range(6)], job(b"ready"))
    where = JobFilter(JobState.PENDING, 1, T0, future=True)

    got = scan_all(ops.store, where, 4)
    assert [r.run_after_ms for r in got] == [T0 + 1_000 * (i + 1) for i in reversed(range(6))]
    last = got[-1]
    assert ops.store.scan_jobs(Q, where, 4, ScanCursor(last.run_after_ms, last.local_id)) == []


def test_paging_with_a_body_regex(ops: Ops) -> None:
    plain(ops, *[job(b"match-%d" % i if i % 3 == 0 else b"other-%d" % i, run_after=T0 - i) for i in range(30)])
    where = JobFilter(JobState.PENDING, 1, T0, body_regex="^match")

    got = scan_all(ops.store, where, 3)
    assert len(got) == 10
    assert len(set(ids(got))) == 10


# -- the oldest ready job -------------------------------------------------------------------------


def test_oldest_ready_is_the_smallest_run_after_of_ready_pending_jobs(ops: Ops) -> None:
    ops.store.create_queue(OTHER, 3)
    plain(ops, job(b"a", run_after=T0 - 5_000), job(b"b", run_after=T0 - 1_000), job(b"c", priority=2, run_after=T0))
    plain(ops, job(b"later", priority=3, run_after=T0 + 5_000))
    ops.store.enqueue_jobs(OTHER, [NewJob(1, b"o", T0 - 7_000, 3)], T0)
    (running,) = ops.store.enqueue_jobs(Q, [NewJob(2, b"run", T0 - 9_000, 3)], T0)
    ops.dequeue(2, 1, now=T0)  # takes the oldest of priority 2: the one at T0 - 9_000

    got = ops.store.oldest_ready(3, T0)

    assert got[(Q, 1)] == T0 - 5_000
    assert got[(Q, 2)] == T0, "the job in progress is not waiting"
    assert (Q, 3) not in got, "a future job is not ready"
    assert got[(OTHER, 1)] == T0 - 7_000
    assert record(ops.store, (2, running)).state == JobState.IN_PROGRESS


def test_oldest_ready_leaves_out_waiting_group_jobs(grouped: Ops) -> None:
    grouped.enqueue([job(b"h", group="g", run_after=T0 - 100), job(b"w", group="g", run_after=T0 - 200)])
    grouped.dequeue(1, 10)
    assert (Q, 1) not in grouped.store.oldest_ready(3, T0), "the job behind a running head cannot be handed out"


# -- schedules -----------------------------------------------------------------------------------


def row(name: str, next_run: int, queue: str = Q, paused: bool = False, spec: str = '{"every": 1}') -> ScheduleRow:
    return ScheduleRow(queue, name, spec, next_run, paused)


def test_schedules_are_kept_replaced_listed_and_deleted(store: ShardStore) -> None:
    store.create_queue(Q, 3)
    store.create_queue(OTHER, 3)
    store.put_schedule(row("b", T0 + 2))
    store.put_schedule(row("a", T0 + 1, spec='{"cron": "* * * * *"}'))
    store.put_schedule(row("c", T0 + 3, queue=OTHER))

    assert store.list_schedules(Q) == [row("a", T0 + 1, spec='{"cron": "* * * * *"}'), row("b", T0 + 2)]
    store.put_schedule(row("a", T0 + 9, paused=True, spec="{}"))
    assert store.list_schedules(Q)[0] == row("a", T0 + 9, paused=True, spec="{}")

    assert store.delete_schedule(Q, "a") is True
    assert store.delete_schedule(Q, "a") is False
    assert store.delete_schedule("no_such_queue", "a") is False
    assert [r.name for r in store.list_schedules(Q)] == ["b"]
    assert store.list_schedules("no_such_queue") == []
    with pytest.raises(QueueNotFoundError):
        store.put_schedule(row("x", T0, queue="no_such_queue"))


def test_due_schedules_are_the_unpaused_ones_whose_tick_came_earliest_first(store: ShardStore) -> None:
    store.create_queue(Q, 3)
    store.create_queue(OTHER, 3)
    store.put_schedule(row("late", T0 + 60_000))
    store.put_schedule(row("second", T0 - 10))
    store.put_schedule(row("first", T0 - 20, queue=OTHER))
    store.put_schedule(row("paused", T0 - 30, paused=True))
    store.put_schedule(row("now", T0))

    assert [r.name for r in store.due_schedules(T0, 10)] == ["first", "second", "now"]
    assert [r.name for r in store.due_schedules(T0, 2)] == ["first", "second"]
    assert store.due_schedules(T0, 10)[0] == row("first", T0 - 20, queue=OTHER)


def test_a_page_of_due_schedules_stops_at_its_byte_budget(store: ShardStore) -> None:
    """500 due rows of schedules with 1 MiB bodies made one 700 MB page (on Redis one script's
    reply, which every client of that Redis waited for); a page holds ``max_bytes`` of specs at
    most, the first row whatever its size, and the rest are due at the next call."""
    store.create_queue(Q, 3)
    for i in range(5):
        store.put_schedule(row(f"s{i}", T0 - 10 + i, spec="x" * 1000))
    assert [r.name for r in store.due_schedules(T0, 10, max_bytes=2500)] == ["s0", "s1"]
    assert [r.name for r in store.due_schedules(T0, 10, max_bytes=0)] == ["s0"], "the first whatever its size"
    assert [r.name for r in store.due_schedules(T0, 3, max_bytes=10_000)] == ["s0", "s1", "s2"]
    assert len(store.due_schedules(T0, 10)) == 5, "the default budget is 16 MiB"


def test_advancing_a_schedule_is_a_compare_and_set(store: ShardStore) -> None:
    store.create_queue(Q, 3)
    store.put_schedule(row("tick", T0))

    assert store.advance_schedule(Q, "tick", T0, T0 + 60_000) is True
    assert store.advance_schedule(Q, "tick", T0, T0 + 120_000) is False, "another server moved it first"
    assert store.list_schedules(Q) == [row("tick", T0 + 60_000)]
    assert store.due_schedules(T0 + 1, 10) == []
    assert store.advance_schedule(Q, "gone", T0, T0 + 1) is False


def test_deleting_a_queue_deletes_its_schedules(store: ShardStore) -> None:
    store.create_queue(Q, 3)
    store.create_queue(OTHER, 3)
    store.put_schedule(row("mine", T0))
    store.put_schedule(row("theirs", T0, queue=OTHER))

    store.delete_queue(Q)

    assert store.list_schedules(Q) == []
    assert [r.name for r in store.due_schedules(T0, 10)] == ["theirs"]
    store.create_queue(Q, 3)
    assert store.list_schedules(Q) == [], "a queue made again starts without them"
