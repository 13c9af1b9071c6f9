"""Ordered groups and the queue rules on one shard, for every backend kind.

The contract is the seam's docstrings (``ShardStore.enqueue_keyed_jobs``'s "Ordered groups",
``ShardStore.set_queue_rules``): a group's jobs come out in enqueue order whatever their
priorities, at most ``group_concurrency`` of them active at once; a job retried or timed out
keeps its place at the head; the others wait, PENDING to every reader. ``max_in_progress`` caps
the queue's IN_PROGRESS jobs; ``group_jobs_per_second`` meters each group. Stores that refuse
groups (``groups_refused``) still keep the cap. Time is explicit, so nothing sleeps.

The hot operations (enqueue, dequeue, ack, reserve, claim) run twice: through the store's
blocking methods, and through its hot path as the server calls it (on an event loop; the
embedded store's on its Rust writer, Redis's packed in Rust).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence

import pytest
from tests.support.store_ops import CLAIM, Ops

from pinlater.backends.base import (
    AckItem,
    ClaimedJob,
    Enqueued,
    GroupCounts,
    JobFilter,
    JobState,
    KeyedJob,
    NewJob,
    QueueRules,
    ShardStore,
)

Q = "group_queue"
T0 = 1_700_000_000_000


@pytest.fixture(params=["store", "hot_path"])
def ops(request: pytest.FixtureRequest, store: ShardStore) -> Iterator[Ops]:
    store.create_queue(Q, 3)
    made = Ops(store, Q, hot=request.param == "hot_path")
    try:
        yield made
    finally:
        made.close()


#: Dedup keys for ``job`` to give, one of its own to each job, while a ``grouped`` test runs
#: "with_keys"; None: no keys.
_keys: Iterator[int] | None = None


@pytest.fixture(params=["groups", "with_keys"])
def grouped(request: pytest.FixtureRequest, ops: Ops) -> Iterator[Ops]:
    """``ops`` on a store that keeps ordered groups; "with_keys": every job ``job`` makes has a
    dedup key of its own too (each new, so none is deduplicated), and the groups behave the same:
    keyed jobs take paths of their own (on Redis, a batch of new keys takes
    ``enqueue_keyed_jobs.lua``'s ``enqueue_fresh``)."""
    global _keys
    if ops.store.groups_refused is not None:
        pytest.skip(f"groupKey (ordered groups) {ops.store.groups_refused}")
    _keys = itertools.count() if request.param == "with_keys" else None
    try:
        yield ops
    finally:
        _keys = None


def job(
    group: str | None, body: bytes = b"b", *, priority: int = 1, run_after: int = T0, attempts: int = 3
) -> KeyedJob:
    key = None if _keys is None else f"key-{next(_keys)}"
    return KeyedJob(NewJob(priority, body, run_after, attempts), key, 0, group)


def dequeue_all(ops: Ops, limit: int = 100, now: int = T0) -> list[tuple[int, ClaimedJob]]:
    """Every priority in turn, as the server walks them; ``(priority, job)``."""
    out: list[tuple[int, ClaimedJob]] = []
    for priority in (1, 2, 3):
        out.extend((priority, j) for j in ops.dequeue(priority, limit - len(out), now))
        if len(out) >= limit:
            break
    return out


def bodies(got: Sequence[tuple[int, ClaimedJob]]) -> list[bytes]:
    return [j.body for _, j in got]


def rules(store: ShardStore, **kwargs: object) -> None:
    store.set_queue_rules({Q: QueueRules(**kwargs)})  # type: ignore[arg-type]


def state_of(store: ShardStore, placed: Enqueued) -> JobState:
    (record,) = store.lookup_jobs(Q, [(placed.priority, placed.local_id)], False)
    return record.state


# -- ordered groups ----------------------------------------------------------------------------


def test_a_group_is_handed_out_one_job_at_a_time_in_enqueue_order(grouped: Ops) -> None:
    placed = grouped.enqueue([job("g", b"g1", priority=3), job("g", b"g2", priority=1), job("g", b"g3", priority=2)])
    assert not any(p.deduplicated for p in placed)

    for expected in (b"g1", b"g2", b"g3"):
        got = dequeue_all(grouped)
        assert bodies(got) == [expected], "the group's oldest job, whatever the priorities"
        assert dequeue_all(grouped) == [], "nothing more of the group while it runs"
        ((priority, claimed),) = got
        grouped.ack(succeeded=[AckItem(priority, claimed.local_id)])
    assert dequeue_all(grouped) == []
    assert grouped.store.group_counts(Q) == GroupCounts(0, 0), "a finished group is forgotten"


def test_a_blocked_group_does_not_hold_back_other_groups_or_ungrouped_jobs(grouped: Ops) -> None:
    grouped.enqueue([job("a", b"a1"), job("a", b"a2"), job("b", b"b1"), job(None, b"plain"), job("b", b"b2")])

    first = dequeue_all(grouped)
    assert sorted(bodies(first)) == [b"a1", b"b1", b"plain"]
    assert grouped.store.group_counts(Q) == GroupCounts(groups=2, blocked=2)
    assert dequeue_all(grouped) == []

    grouped.ack(succeeded=[AckItem(p, j.local_id) for p, j in first if j.body == b"b1"])
    assert bodies(dequeue_all(grouped)) == [b"b2"], "b moved on; a still runs a1"
    assert grouped.store.group_counts(Q) == GroupCounts(groups=2, blocked=1)


def test_waiting_jobs_are_pending_to_every_reader(grouped: Ops) -> None:
    jobs = [job("g", b"one"), job("g", b"two")]
    first, second = grouped.enqueue(jobs)
    assert state_of(grouped.store, second) == JobState.PENDING
    (record,) = grouped.store.lookup_jobs(Q, [(second.priority, second.local_id)], True)
    assert (record.body, record.group_key, record.dedup_key) == (b"two", "g", jobs[1].key)
    pending = JobFilter(JobState.PENDING, 1, T0)
    assert grouped.store.count_jobs(Q, pending, None) == 2
    assert {r.local_id: r.group_key for r in grouped.store.scan_jobs(Q, pending, 10)} == {
        first.local_id: "g",
        second.local_id: "g",
    }
    assert [j.body for j in grouped.dequeue(1, 10, dry_run=True)] == [b"one"], "a dry run shows what a dequeue takes"


def test_a_retried_failure_keeps_its_place_at_the_head(grouped: Ops) -> None:
    head, behind = grouped.enqueue([job("g", b"head"), job("g", b"behind")])
    (claimed,) = grouped.dequeue(1, 10)
    assert claimed.local_id == head.local_id

    grouped.ack(failed=[AckItem(1, head.local_id, "", 5_000)], now=T0 + 10)
    assert grouped.dequeue(1, 10, now=T0 + 1_000) == [], "the job behind waits for the retry"
    assert state_of(grouped.store, head) == JobState.PENDING
    again = grouped.dequeue(1, 10, now=T0 + 5_010)
    assert [j.local_id for j in again] == [head.local_id]

    grouped.ack(succeeded=[AckItem(1, head.local_id)], now=T0 + 6_000)
    assert [j.local_id for j in grouped.dequeue(1, 10, now=T0 + 6_000)] == [behind.local_id]


def test_a_final_failure_lets_the_next_job_run(grouped: Ops) -> None:
    head, behind = grouped.enqueue([job("g", b"head", attempts=1), job("g", b"behind")])
    grouped.dequeue(1, 10)
    grouped.ack(failed=[AckItem(1, head.local_id, "", 5_000)])
    assert state_of(grouped.store, head) == JobState.FAILED
    assert [j.local_id for j in grouped.dequeue(1, 10)] == [behind.local_id]


def test_a_timed_out_claim_keeps_its_place_and_a_final_one_moves_on(grouped: Ops) -> None:
    head, second, third = grouped.enqueue([job("g", b"head", attempts=2), job("g", b"2", attempts=1), job("g", b"3")])
    grouped.dequeue(1, 10)
    assert grouped.store.resurrect_timed_out_jobs(Q, 1, T0 + 1, 10, T0 + 60_000) == 1
    assert [j.local_id for j in grouped.dequeue(1, 10, now=T0 + 60_000)] == [head.local_id], "head again"
    grouped.ack(succeeded=[AckItem(1, head.local_id)], now=T0 + 60_000)

    assert [j.local_id for j in grouped.dequeue(1, 10, now=T0 + 60_000)] == [second.local_id]
    assert grouped.store.resurrect_timed_out_jobs(Q, 1, T0 + 60_001, 10, T0 + 120_000) == 1
    assert state_of(grouped.store, second) == JobState.FAILED, "no attempt left"
    assert [j.local_id for j in grouped.dequeue(1, 10, now=T0 + 120_000)] == [third.local_id]


def test_deleting_the_running_job_lets_the_next_run(grouped: Ops) -> None:
    _, behind = grouped.enqueue([job("g", b"head-xyz"), job("g", b"behind")])
    grouped.dequeue(1, 10)
    deleted = grouped.store.delete_jobs(Q, JobFilter(JobState.IN_PROGRESS, 1, T0, None, "xyz"), 10)
    assert deleted == 1
    assert [j.local_id for j in grouped.dequeue(1, 10)] == [behind.local_id]


def test_deleting_a_waiting_job_leaves_the_order_of_the_rest(grouped: Ops) -> None:
    placed = grouped.enqueue([job("g", b"1"), job("g", b"2-gone"), job("g", b"3")])
    assert grouped.store.delete_jobs(Q, JobFilter(JobState.PENDING, 1, T0, None, "gone"), 10) == 1
    (first,) = grouped.dequeue(1, 10)
    grouped.ack(succeeded=[AckItem(1, first.local_id)])
    assert [j.local_id for j in grouped.dequeue(1, 10)] == [placed[2].local_id]


def test_group_concurrency_lets_that_many_run_and_a_raise_applies_at_the_next_enqueue(grouped: Ops) -> None:
    rules(grouped.store, group_concurrency=2)
    placed = grouped.enqueue([job("g", b"%d" % i) for i in range(5)])
    got = grouped.dequeue(1, 10)
    assert [j.local_id for j in got] == [p.local_id for p in placed[:2]]
    assert grouped.store.group_counts(Q) == GroupCounts(1, 1)

    rules(grouped.store, group_concurrency=4)
    late = grouped.enqueue([job("g", b"late")])
    assert [j.local_id for j in grouped.dequeue(1, 10)] == [p.local_id for p in placed[2:4]], "oldest first"
    grouped.ack(succeeded=[AckItem(1, j.local_id) for j in got])
    assert [j.local_id for j in grouped.dequeue(1, 10)] == [placed[4].local_id, late[0].local_id]


def test_a_raise_over_a_big_backlog_promotes_a_thousand_at_a_time_in_order(grouped: Ops) -> None:
    """A concurrency raised past a group's backlog fills its room at most MAX_PROMOTED (1,000)
    jobs a call, not in one call that holds the shard however big the backlog; the rest follow as
    the promoted jobs finish, and the group still comes out in enqueue order."""
    placed = [p.local_id for p in grouped.enqueue([job("g", b"%d" % i) for i in range(1500)])]
    placed += [p.local_id for p in grouped.enqueue([job("g", b"%d" % i) for i in range(1500, 2500)])]
    rules(grouped.store, group_concurrency=100_000)
    # applies the raise: a thousand promoted for the request, not for each of its jobs
    placed += [p.local_id for p in grouped.enqueue([job("g", b"late") for _ in range(1000)])]
    first = [j.local_id for j in grouped.dequeue(1, 5000)]
    assert first == placed[:1001], "the one active before and the thousand oldest waiting"
    taken = list(first)
    while len(taken) < len(placed):
        grouped.ack(succeeded=[AckItem(1, i) for i in taken[-1000:]])
        more = [j.local_id for j in grouped.dequeue(1, 5000)]
        assert 0 < len(more) <= 1000, len(more)
        taken += more
    assert taken == placed


def test_a_lowered_concurrency_takes_nothing_back_but_holds_the_next(grouped: Ops) -> None:
    rules(grouped.store, group_concurrency=3)
    placed = grouped.enqueue([job("g", b"%d" % i) for i in range(5)])
    got = grouped.dequeue(1, 10)
    assert len(got) == 3
    rules(grouped.store, group_concurrency=1)
    grouped.ack(succeeded=[AckItem(1, got[0].local_id)])
    assert grouped.dequeue(1, 10) == [], "two still run, over the new concurrency of 1"
    grouped.ack(succeeded=[AckItem(1, j.local_id) for j in got[1:]])
    assert [j.local_id for j in grouped.dequeue(1, 10)] == [placed[3].local_id]


def test_a_retried_failed_job_rejoins_its_group(grouped: Ops) -> None:
    first, second = grouped.enqueue([job("g", b"1", attempts=1), job("g", b"2")])
    grouped.dequeue(1, 10)
    grouped.ack(failed=[AckItem(1, first.local_id)])
    (running,) = grouped.dequeue(1, 10)
    assert running.local_id == second.local_id

    assert grouped.store.retry_failed_jobs(Q, 1, 2, T0, 10, T0) == 1
    assert state_of(grouped.store, first) == JobState.PENDING
    assert grouped.dequeue(1, 10) == [], "it waits: its group runs a job"
    grouped.ack(succeeded=[AckItem(1, second.local_id)])
    assert [j.local_id for j in grouped.dequeue(1, 10)] == [first.local_id]


def test_a_retried_failed_job_rejoins_at_its_old_place_in_the_line(grouped: Ops) -> None:
    """Enqueue order, whatever happened since: put back behind a running job, the failed first
    job comes before the jobs enqueued after it that still wait, the line's head among them (on
    Redis the head of a line is kept in the group's counts, the rest in its fifo: the third job
    joins as the head, the fourth behind it, and the first must take the head's place)."""
    first, second = grouped.enqueue([job("g", b"1", attempts=1), job("g", b"2")])
    assert [j.local_id for j in grouped.dequeue(1, 10)] == [first.local_id]
    grouped.ack(failed=[AckItem(1, first.local_id)])
    assert [j.local_id for j in grouped.dequeue(1, 10)] == [second.local_id]
    (third,) = grouped.enqueue([job("g", b"3")])
    (fourth,) = grouped.enqueue([job("g", b"4")])

    assert grouped.store.retry_failed_jobs(Q, 1, 2, T0, 10, T0) == 1
    assert grouped.dequeue(1, 10) == [], "it waits: its group runs a job"
    order = []
    for running in (second, first, third, fourth):
        grouped.ack(succeeded=[AckItem(1, running.local_id)])
        order += [j.local_id for j in grouped.dequeue(1, 10)]
    assert order == [first.local_id, third.local_id, fourth.local_id]


def test_retried_failed_jobs_of_a_group_rejoin_in_line_order(grouped: Ops) -> None:
    """Jobs that failed in the other order than their line's (the later one cancelled first) come
    back in line order: the first to rejoin a group with room runs first, whatever its place."""
    x, a, b = grouped.enqueue([job("g", b"x"), job("g", b"a"), job("g", b"b")])
    assert [j.local_id for j in grouped.dequeue(1, 10)] == [x.local_id]
    assert grouped.store.cancel_jobs(Q, [(1, b.local_id)], T0 + 1) == 1
    assert grouped.store.cancel_jobs(Q, [(1, a.local_id)], T0 + 2) == 1
    grouped.ack(succeeded=[AckItem(1, x.local_id)])

    assert grouped.store.retry_failed_jobs(Q, 1, 2, T0, 10, T0 + 3) == 2
    order = []
    for _ in range(2):
        (got,) = grouped.dequeue(1, 10)
        order.append(got.local_id)
        grouped.ack(succeeded=[AckItem(1, got.local_id)])
    assert order == [a.local_id, b.local_id]


def test_a_dequeue_takes_ready_groups_in_turn(grouped: Ops) -> None:
    grouped.enqueue([job("big", b"big-%d" % i) for i in range(50)])
    grouped.enqueue([job("small", b"small")])
    got = bodies(dequeue_all(grouped, limit=10))
    assert sorted(got) == [b"big-0", b"small"], "one turn of the big group, then the small one"


def test_the_broker_reserves_only_active_jobs(grouped: Ops) -> None:
    placed = grouped.enqueue([job("g", b"1"), job("g", b"2"), job(None, b"plain")])
    reserved = grouped.reserve(1, 10)
    assert sorted(j.body for j in reserved) == [b"1", b"plain"]
    assert grouped.claim_reserved([(1, j.local_id) for j in reserved]) == 2
    grouped.ack(succeeded=[AckItem(1, placed[0].local_id)])
    assert [j.local_id for j in grouped.reserve(1, 10)] == [placed[1].local_id]


def test_dedup_keys_and_groups_together(grouped: Ops) -> None:
    keyed = KeyedJob(NewJob(1, b"k1", T0, 2), "key", 0, "g")
    first = grouped.enqueue([keyed, job("g", b"plain-in-group")])
    again = grouped.enqueue([keyed._replace(job=NewJob(1, b"k2", T0, 2))])
    assert again == [first[0]._replace(deduplicated=True)]
    (record,) = grouped.store.lookup_jobs(Q, [(1, first[0].local_id)], True)
    assert (record.body, record.dedup_key, record.group_key) == (b"k1", "key", "g")
    assert [j.body for j in grouped.dequeue(1, 10)] == [b"k1"]


def test_groups_are_per_queue(grouped: Ops) -> None:
    grouped.store.create_queue("other", 1)
    grouped.enqueue([job("g", b"here")])
    grouped.store.enqueue_keyed_jobs("other", [job("g", b"there")], T0)
    assert [j.body for j in grouped.dequeue(1, 10)] == [b"here"]
    assert [j.body for j in grouped.store.dequeue_jobs("other", 1, 10, CLAIM, T0, False)] == [b"there"]


def test_deleting_the_queue_forgets_its_groups(grouped: Ops) -> None:
    grouped.enqueue([job("g", b"1"), job("g", b"2")])
    grouped.store.delete_queue(Q)
    grouped.store.create_queue(Q, 3)
    assert grouped.store.group_counts(Q) == GroupCounts(0, 0)
    placed = grouped.enqueue([job("g", b"new")])
    assert [j.local_id for j in grouped.dequeue(1, 10)] == [placed[0].local_id]


# -- group rate --------------------------------------------------------------------------------


def test_group_jobs_per_second_meters_each_group(grouped: Ops) -> None:
    rules(grouped.store, group_concurrency=10, group_jobs_per_second=1.0)
    grouped.enqueue([job("a", b"a%d" % i) for i in range(5)] + [job("b", b"b%d" % i) for i in range(5)])
    assert sorted(bodies(dequeue_all(grouped))) == [b"a0", b"b0"], "one token each"
    assert dequeue_all(grouped, now=T0 + 500) == []
    assert sorted(bodies(dequeue_all(grouped, now=T0 + 1_000))) == [b"a1", b"b1"]


def test_group_rate_leaves_ungrouped_jobs_alone(grouped: Ops) -> None:
    rules(grouped.store, group_concurrency=10, group_jobs_per_second=2.0)
    grouped.enqueue([job("a", b"a%d" % i) for i in range(5)] + [job(None, b"p%d" % i) for i in range(5)])
    got = bodies(dequeue_all(grouped))
    assert sorted(got) == [b"a0", b"a1", b"p0", b"p1", b"p2", b"p3", b"p4"]


# -- maxInProgress (every store, groups or not) ------------------------------------------------


def test_max_in_progress_caps_the_queue_across_priorities(ops: Ops) -> None:
    rules(ops.store, max_in_progress=3)
    ops.store.enqueue_jobs(Q, [NewJob(1 + i % 2, b"%d" % i, T0, 2) for i in range(10)], T0)
    first = ops.dequeue(1, 2)
    assert len(first) == 2
    assert len(ops.dequeue(2, 10)) == 1, "one more to reach the cap"
    assert ops.dequeue(1, 10) == [] and ops.dequeue(2, 10) == []
    assert len(ops.dequeue(1, 10, dry_run=True)) == 3, "a dry run ignores the cap"

    ops.ack(succeeded=[AckItem(1, first[0].local_id)])
    assert len(ops.dequeue(1, 10)) == 1
    ops.ack(failed=[AckItem(1, first[1].local_id, "", 0)])
    assert len(ops.dequeue(2, 10)) == 1, "a retried job left IN_PROGRESS too"


def test_max_in_progress_bounds_reservations_and_their_claims(ops: Ops) -> None:
    rules(ops.store, max_in_progress=2)
    ops.store.enqueue_jobs(Q, [NewJob(1, b"%d" % i, T0, 2) for i in range(6)], T0)
    reserved = ops.reserve(1, 6)
    assert 0 < len(reserved) <= 2
    assert ops.claim_reserved([(1, j.local_id) for j in reserved]) == len(reserved)
    more = ops.reserve(1, 6)
    assert ops.claim_reserved([(1, j.local_id) for j in more]) == 2 - len(reserved)
    assert ops.dequeue(1, 10) == []


def test_the_cap_follows_the_rules_as_they_change(ops: Ops) -> None:
    ops.store.enqueue_jobs(Q, [NewJob(1, b"%d" % i, T0, 2) for i in range(10)], T0)
    rules(ops.store, max_in_progress=1)
    assert len(ops.dequeue(1, 10)) == 1
    rules(ops.store, max_in_progress=4)
    assert len(ops.dequeue(1, 10)) == 3
    ops.store.set_queue_rules({})
    assert len(ops.dequeue(1, 10)) == 6, "no rules: no cap"


def test_rules_of_another_queue_do_not_apply(ops: Ops) -> None:
    ops.store.set_queue_rules({"elsewhere": QueueRules(max_in_progress=1)})
    ops.store.enqueue_jobs(Q, [NewJob(1, b"%d" % i, T0, 2) for i in range(3)], T0)
    assert len(ops.dequeue(1, 10)) == 3


def test_a_store_that_refuses_groups_says_why_and_counts_none(ops: Ops) -> None:
    reason = ops.store.groups_refused
    if reason is None:
        pytest.skip("this store keeps ordered groups")
    assert reason and not reason.startswith("groupKey")
    assert ops.store.group_counts(Q) == GroupCounts(0, 0)
