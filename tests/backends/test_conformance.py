"""The ShardStore conformance suite: every backend kind must pass every test here.

Time is always explicit (``now_ms``), so nothing sleeps. A test states the behaviour of the
contract (see ``pinlater.backends.base``), never an implementation detail of one backend.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from pinlater import monitor
from pinlater.backends.base import (
    RESERVATION_PREFIX,
    AckItem,
    CheckpointItem,
    JobFilter,
    JobRecord,
    JobState,
    KeyedJob,
    LookupOverBudget,
    NewJob,
    QueueRules,
    ShardStore,
)
from pinlater.backends.sharded import ShardedBackend
from pinlater.backends.shardmap import Shard, ShardMap
from pinlater.clock import ManualClock
from pinlater.errors import QueueNotFoundError
from pinlater.monitor import Monitor, MonitorPolicy
from pinlater.server.metrics import Metrics

Q = "test_queue"
T0 = 1_700_000_000_000  # an arbitrary "now", in ms since the epoch
CLAIM = "claim-0001:worker:host-a"
SOURCE = "host-a"


@pytest.fixture
def queue(store: ShardStore) -> str:
    store.create_queue(Q, 3)
    return Q


def new_jobs(n: int, *, priority: int = 1, run_after: int = T0, attempts: int = 2, prefix: str = "job") -> list[NewJob]:
    return [NewJob(priority, f"{prefix}-{i}".encode(), run_after, attempts) for i in range(n)]


def lookup(store: ShardStore, local_id: int, priority: int = 1, body: bool = False) -> JobRecord:
    found = store.lookup_jobs(Q, [(priority, local_id)], body)
    assert len(found) == 1, f"job p{priority}:{local_id} not found"
    return found[0]


def claim_all(store: ShardStore, n: int, *, now: int = T0, priority: int = 1, attempts: int = 2) -> list[int]:
    """Enqueue n jobs runnable at ``now`` and claim them all; return their ids."""
    ids = store.enqueue_jobs(Q, new_jobs(n, priority=priority, run_after=now, attempts=attempts), now)
    claimed = store.dequeue_jobs(Q, priority, n, CLAIM, now, False)
    assert sorted(job.local_id for job in claimed) == sorted(ids)
    return ids


def make_failed(store: ShardStore, n: int, *, now: int = T0, priority: int = 1) -> list[int]:
    ids = claim_all(store, n, now=now, priority=priority, attempts=1)
    store.ack_jobs(Q, [], [AckItem(priority, i) for i in ids], now)
    return ids


def states(store: ShardStore, ids: Sequence[int], priority: int = 1) -> list[JobState]:
    return [job.state for job in store.lookup_jobs(Q, [(priority, i) for i in ids], False)]


# -- queues -------------------------------------------------------------------------------------


def test_new_store_has_no_queues(store: ShardStore) -> None:
    assert store.get_queue_names() == set()


def test_create_queue_is_idempotent(store: ShardStore) -> None:
    store.create_queue("a", 3)
    store.create_queue("a", 3)
    store.create_queue("b_2", 1)
    assert store.get_queue_names() == {"a", "b_2"}


def test_delete_queue_is_idempotent_and_deletes_its_jobs(store: ShardStore, queue: str) -> None:
    store.create_queue("other", 3)
    ids = store.enqueue_jobs(queue, new_jobs(3), T0)
    kept = store.enqueue_jobs("other", new_jobs(2), T0)
    store.delete_queue(queue)
    store.delete_queue(queue)
    store.delete_queue("never_existed")
    assert store.get_queue_names() == {"other"}
    store.create_queue(queue, 3)
    assert store.lookup_jobs(queue, [(1, i) for i in ids], True) == []
    assert store.count_jobs(queue, JobFilter(JobState.PENDING, 1, T0, None), None) == 0
    assert [job.local_id for job in store.lookup_jobs("other", [(1, i) for i in kept], False)] == kept


# -- enqueue ------------------------------------------------------------------------------------


def test_enqueue_returns_unique_ids_in_request_order(store: ShardStore, queue: str) -> None:
    jobs = new_jobs(7, prefix="first") + new_jobs(3, priority=2, prefix="p2")
    ids = store.enqueue_jobs(queue, jobs, T0)
    more = store.enqueue_jobs(queue, new_jobs(5, prefix="second"), T0)
    assert len(ids) == len(jobs)
    assert len({(job.priority, i) for job, i in zip(jobs, ids, strict=True)}) == len(jobs)
    assert not {(1, i) for i in more} & {(job.priority, i) for job, i in zip(jobs, ids, strict=True)}
    for job, local_id in zip(jobs, ids, strict=True):
        assert lookup(store, local_id, job.priority, body=True).body == job.body


def test_enqueue_records_every_field(store: ShardStore, queue: str) -> None:
    job = NewJob(priority=2, body=b"\x00payload\xff", run_after_ms=T0 + 5000, attempts_allowed=4, custom_status="hi")
    [local_id] = store.enqueue_jobs(queue, [job], T0)
    record = lookup(store, local_id, priority=2, body=True)
    assert record == JobRecord(
        priority=2,
        local_id=local_id,
        state=JobState.PENDING,
        attempts_allowed=4,
        attempts_remaining=4,
        custom_status="hi",
        created_at_ms=T0,
        run_after_ms=T0 + 5000,
        updated_at_ms=T0,
        claim_descriptor=None,
        body=b"\x00payload\xff",
    )
    assert lookup(store, local_id, priority=2, body=False).body is None


def test_enqueue_truncates_custom_status(store: ShardStore, queue: str) -> None:
    limit = store.custom_status_limit
    [local_id] = store.enqueue_jobs(queue, [NewJob(1, b"x", T0, 1, "s" * (limit + 100))], T0)
    assert lookup(store, local_id).custom_status == "s" * limit


def test_enqueue_of_no_jobs_returns_no_ids(store: ShardStore, queue: str) -> None:
    assert store.enqueue_jobs(queue, [], T0) == []


# -- dequeue ------------------------------------------------------------------------------------


def test_dequeue_respects_run_after(store: ShardStore, queue: str) -> None:
    [now_id] = store.enqueue_jobs(queue, new_jobs(1, run_after=T0), T0)
    [later_id] = store.enqueue_jobs(queue, new_jobs(1, run_after=T0 + 1000), T0)
    assert [job.local_id for job in store.dequeue_jobs(queue, 1, 10, CLAIM, T0 + 999, False)] == [now_id]
    assert store.dequeue_jobs(queue, 1, 10, CLAIM, T0 + 999, False) == []
    assert [job.local_id for job in store.dequeue_jobs(queue, 1, 10, CLAIM, T0 + 1000, False)] == [later_id]


def test_dequeue_order_is_run_after_then_id(store: ShardStore, queue: str) -> None:
    late, early = store.enqueue_jobs(queue, [NewJob(1, b"late", T0 - 10, 2), NewJob(1, b"early", T0 - 20, 2)], T0)
    tie_a, tie_b = store.enqueue_jobs(queue, new_jobs(2, run_after=T0 - 15), T0)
    got = [job.local_id for job in store.dequeue_jobs(queue, 1, 10, CLAIM, T0, False)]
    assert got == [early, tie_a, tie_b, late]


def test_dequeue_keeps_priorities_apart(store: ShardStore, queue: str) -> None:
    p1 = store.enqueue_jobs(queue, new_jobs(3, priority=1), T0)
    p2 = store.enqueue_jobs(queue, new_jobs(2, priority=2), T0)
    assert store.dequeue_jobs(queue, 3, 10, CLAIM, T0, False) == []
    assert sorted(job.local_id for job in store.dequeue_jobs(queue, 2, 10, CLAIM, T0, False)) == sorted(p2)
    assert sorted(job.local_id for job in store.dequeue_jobs(queue, 1, 10, CLAIM, T0, False)) == sorted(p1)


def test_dequeue_limit_and_no_job_twice(store: ShardStore, queue: str) -> None:
    ids = store.enqueue_jobs(queue, new_jobs(10), T0)
    seen: list[int] = []
    for _ in range(3):
        batch = store.dequeue_jobs(queue, 1, 4, CLAIM, T0, False)
        assert len(batch) == min(4, 10 - len(seen))
        seen += [job.local_id for job in batch]
    assert sorted(seen) == sorted(ids)
    assert store.dequeue_jobs(queue, 1, 4, CLAIM, T0, False) == []


def test_a_zero_limit_touches_nothing(store: ShardStore, queue: str) -> None:
    store.enqueue_jobs(queue, new_jobs(3), T0)
    assert store.dequeue_jobs(queue, 1, 0, CLAIM, T0, False) == []
    assert store.scan_jobs(queue, JobFilter(JobState.PENDING, 1, T0), 0) == []
    assert store.delete_jobs(queue, JobFilter(JobState.PENDING, 1, T0, None), 0) == 0
    assert store.count_jobs(queue, JobFilter(JobState.PENDING, 1, T0), 0) == 0
    assert store.count_jobs(queue, JobFilter(JobState.PENDING, 1, T0), None) == 3


def test_dequeue_stamps_the_claim(store: ShardStore, queue: str) -> None:
    [local_id] = store.enqueue_jobs(queue, [NewJob(1, b"body", T0, 3)], T0 - 50)
    [claimed] = store.dequeue_jobs(queue, 1, 5, CLAIM, T0 + 7, False)
    assert (claimed.local_id, claimed.body) == (local_id, b"body")
    assert (claimed.attempts_allowed, claimed.attempts_remaining) == (3, 3)
    assert (claimed.created_at_ms, claimed.updated_at_ms) == (T0 - 50, T0 + 7)
    record = lookup(store, local_id)
    assert (record.state, record.claim_descriptor, record.updated_at_ms) == (JobState.IN_PROGRESS, CLAIM, T0 + 7)


def test_dry_run_dequeue_changes_nothing(store: ShardStore, queue: str) -> None:
    ids = store.enqueue_jobs(queue, new_jobs(3), T0)
    before = store.lookup_jobs(queue, [(1, i) for i in ids], True)
    peek = store.dequeue_jobs(queue, 1, 2, CLAIM, T0, True)
    assert [job.local_id for job in peek] == ids[:2]
    assert store.lookup_jobs(queue, [(1, i) for i in ids], True) == before
    assert [job.local_id for job in store.dequeue_jobs(queue, 1, 2, CLAIM, T0, False)] == ids[:2]


def test_a_dry_run_shows_past_one_store_calls_usual_size(store: ShardStore, queue: str) -> None:
    """A dry run is one call a place (it claims nothing, so a second would show the same jobs):
    it asks for as many as it wants, as the original's one query did, past the 1,000 a
    claiming call takes at a time."""
    ids = store.enqueue_jobs(queue, new_jobs(2500), T0)
    peek = store.dequeue_jobs(queue, 1, 2500, CLAIM, T0, True)
    assert [job.local_id for job in peek] == ids
    assert len(store.dequeue_jobs(queue, 1, 2000, CLAIM, T0, True)) == 2000


# -- reservations (the dequeue broker) ------------------------------------------------------------

RES_A = f"{RESERVATION_PREFIX}host-a:1:abc"
RES_B = f"{RESERVATION_PREFIX}host-b:2:def"
HOLD = 20_000


def test_reserve_takes_ready_jobs_in_order_and_leaves_them_pending(store: ShardStore, queue: str) -> None:
    ids = store.enqueue_jobs(queue, new_jobs(4, attempts=3), T0)
    store.enqueue_jobs(queue, new_jobs(1, run_after=T0 + 1), T0)  # not ready yet
    reserved = store.reserve_jobs(queue, 1, 3, RES_A, T0, HOLD)
    assert [(j.local_id, j.body, j.attempts_allowed, j.attempts_remaining) for j in reserved] == [
        (ids[i], f"job-{i}".encode(), 3, 3) for i in range(3)
    ]
    for record in store.lookup_jobs(queue, [(1, i) for i in ids], False):
        assert (record.state, record.attempts_remaining, record.run_after_ms) == (JobState.PENDING, 3, T0)
    assert store.count_jobs(queue, JobFilter(JobState.PENDING, 1, T0), None) == 4
    assert {r.local_id for r in store.scan_jobs(queue, JobFilter(JobState.PENDING, 1, T0), 10)} == set(ids)


def test_live_reservations_exclude_dequeues_and_other_reservations(store: ShardStore, queue: str) -> None:
    ids = store.enqueue_jobs(queue, new_jobs(4), T0)
    assert [j.local_id for j in store.reserve_jobs(queue, 1, 2, RES_A, T0, HOLD)] == ids[:2]
    assert [j.local_id for j in store.reserve_jobs(queue, 1, 5, RES_B, T0 + 1, HOLD)] == ids[2:]
    assert store.reserve_jobs(queue, 1, 5, RES_A, T0 + 2, HOLD) == []
    assert store.dequeue_jobs(queue, 1, 5, CLAIM, T0 + 3, False) == []
    # A dry run answers from the store: reserved jobs are PENDING and are shown.
    assert [j.local_id for j in store.dequeue_jobs(queue, 1, 5, CLAIM, T0 + 3, True)] == ids


def test_a_lapsed_reservation_holds_nothing(store: ShardStore, queue: str) -> None:
    ids = store.enqueue_jobs(queue, new_jobs(2), T0)
    store.reserve_jobs(queue, 1, 1, RES_A, T0, HOLD)
    assert [j.local_id for j in store.dequeue_jobs(queue, 1, 5, CLAIM, T0 + HOLD - 1, False)] == ids[1:]
    assert [j.local_id for j in store.dequeue_jobs(queue, 1, 5, CLAIM, T0 + HOLD, False)] == ids[:1]
    record = lookup(store, ids[0])
    assert (record.state, record.claim_descriptor, record.attempts_remaining) == (JobState.IN_PROGRESS, CLAIM, 2)
    assert store.claim_reserved(queue, [(1, ids[0], "late")], RES_A, T0 + HOLD + 1) == []


def test_a_lapsed_reservation_can_be_reserved_again(store: ShardStore, queue: str) -> None:
    [local_id] = store.enqueue_jobs(queue, new_jobs(1), T0)
    store.reserve_jobs(queue, 1, 1, RES_A, T0, HOLD)
    assert [j.local_id for j in store.reserve_jobs(queue, 1, 1, RES_B, T0 + HOLD, HOLD)] == [local_id]
    assert store.claim_reserved(queue, [(1, local_id, CLAIM)], RES_A, T0 + HOLD + 1) == []
    assert store.claim_reserved(queue, [(1, local_id, CLAIM)], RES_B, T0 + HOLD + 1) == [(1, local_id)]


def test_claim_reserved_claims_like_a_dequeue(store: ShardStore, queue: str) -> None:
    p1 = store.enqueue_jobs(queue, new_jobs(2, attempts=3), T0)
    [p2] = store.enqueue_jobs(queue, new_jobs(1, priority=2), T0)
    store.reserve_jobs(queue, 1, 5, RES_A, T0, HOLD)
    store.reserve_jobs(queue, 2, 5, RES_A, T0, HOLD)
    keys = [(1, p1[0]), (2, p2), (1, p1[1])]
    items = [(p, i, CLAIM) for p, i in keys]
    assert sorted(store.claim_reserved(queue, items[:2], RES_A, T0 + 5)) == sorted(keys[:2])
    record = lookup(store, p1[0])
    assert (record.state, record.claim_descriptor, record.updated_at_ms) == (JobState.IN_PROGRESS, CLAIM, T0 + 5)
    assert record.attempts_remaining == 3
    assert lookup(store, p2, priority=2).state == JobState.IN_PROGRESS
    # claimed jobs behave as any claim: checkpoint guard, ack, claim timeout
    assert checkpoint(store, p1[0], source=SOURCE) == 1
    store.ack_jobs(queue, [AckItem(1, p1[0])], [], T0 + 20)
    assert lookup(store, p1[0]).state == JobState.SUCCEEDED
    # not twice, not under another reservation (by another dequeue: claims are unique to one)
    again = [(p, i, "another") for p, i in keys]
    assert store.claim_reserved(queue, again, RES_B, T0 + 30) == []
    assert store.claim_reserved(queue, again, RES_A, T0 + 30) == [(1, p1[1])]


def test_a_claim_run_again_answers_the_jobs_its_first_run_claimed(store: ShardStore, queue: str) -> None:
    """A claim whose answer was lost (a dropped connection, a COMMIT unanswered) is run again by
    the store's client: the jobs its first run claimed are IN_PROGRESS under their claims, and are
    answered as claimed. Answered "not claimed", the broker withheld them, and they ran at no
    worker's hands until their claim timed out and took an attempt (FAILED, if their last)."""
    ids = store.enqueue_jobs(queue, new_jobs(3), T0)
    store.reserve_jobs(queue, 1, 3, RES_A, T0, HOLD)
    items = [(1, i, f"w|s:{n}") for n, i in enumerate(ids)]
    assert sorted(store.claim_reserved(queue, items[:2], RES_A, T0 + 1)) == [(1, ids[0]), (1, ids[1])]
    # run again, with a third job still held: all three claimed, the first two left as they were
    assert sorted(store.claim_reserved(queue, items, RES_A, T0 + 2)) == sorted((1, i) for i in ids)
    assert [lookup(store, i).claim_descriptor for i in ids] == ["w|s:0", "w|s:1", "w|s:2"]
    assert [lookup(store, i).updated_at_ms for i in ids] == [T0 + 1, T0 + 1, T0 + 2]
    # a job in progress under another claim is not this call's
    assert store.claim_reserved(queue, [(1, ids[0], "w|s:9")], RES_A, T0 + 3) == []


def test_a_claim_run_again_under_a_full_cap_answers_its_first_runs_jobs(store: ShardStore, queue: str) -> None:
    """As above, with the queue's max in progress reached by the first run: the room left is
    for jobs not yet claimed; those of the first run are answered all the same."""
    store.set_queue_rules({queue: QueueRules(max_in_progress=2)})
    ids = store.enqueue_jobs(queue, new_jobs(3), T0)
    store.reserve_jobs(queue, 1, 3, RES_A, T0, HOLD)
    items = [(1, i, f"w|s:{n}") for n, i in enumerate(ids)]
    assert sorted(store.claim_reserved(queue, items[:2], RES_A, T0 + 1)) == [(1, ids[0]), (1, ids[1])]
    assert sorted(store.claim_reserved(queue, items, RES_A, T0 + 2)) == [(1, ids[0]), (1, ids[1])]
    assert lookup(store, ids[2]).state == JobState.PENDING


def test_claim_reserved_stamps_each_job_with_its_own_claim(store: ShardStore, queue: str) -> None:
    ids = store.enqueue_jobs(queue, new_jobs(4), T0)
    store.reserve_jobs(queue, 1, 4, RES_A, T0, HOLD)
    claims = ["worker-a|s:1", "worker-b|s:2", "worker-a|s:3", "worker-c|s:4"]
    items = [(1, i, c) for i, c in zip(ids, claims, strict=True)]
    assert sorted(store.claim_reserved(queue, items, RES_A, T0 + 1)) == sorted((1, i) for i in ids)
    assert [lookup(store, i).claim_descriptor for i in ids] == claims
    # the checkpoint guard sees each job's own worker
    assert checkpoint(store, ids[1], source="worker-b") == 1
    assert checkpoint(store, ids[0], source="worker-b") == 0


def test_claim_reserved_takes_runs_of_jobs_and_names_each_claimed_one(store: ShardStore, queue: str) -> None:
    a, b, c, d = store.enqueue_jobs(queue, new_jobs(4), T0)
    [x] = store.enqueue_jobs(queue, new_jobs(1, priority=2), T0)
    store.reserve_jobs(queue, 1, 3, RES_A, T0, HOLD)  # a, b, c; d stays unreserved
    store.reserve_jobs(queue, 2, 1, RES_A, T0, HOLD)
    items = [(1, a, "w1"), (1, b, "w1"), (2, x, "w1"), (1, d, "w2"), (1, c, "w2")]
    assert sorted(store.claim_reserved(queue, items, RES_A, T0 + 1)) == sorted([(1, a), (1, b), (2, x), (1, c)])
    assert [lookup(store, i).claim_descriptor for i in (a, b, c)] == ["w1", "w1", "w2"]
    assert lookup(store, x, priority=2).claim_descriptor == "w1"
    assert lookup(store, d).state == JobState.PENDING


def test_claim_reserved_skips_deleted_and_unreserved_jobs(store: ShardStore, queue: str) -> None:
    ids = store.enqueue_jobs(queue, new_jobs(2), T0)
    store.reserve_jobs(queue, 1, 1, RES_A, T0, HOLD)
    store.delete_jobs(queue, JobFilter(JobState.PENDING, 1, T0, None), 10)
    assert store.claim_reserved(queue, [(1, i, CLAIM) for i in ids], RES_A, T0 + 1) == []
    assert store.claim_reserved(queue, [], RES_A, T0 + 1) == []


def test_release_makes_reserved_jobs_dequeuable_at_once(store: ShardStore, queue: str) -> None:
    ids = store.enqueue_jobs(queue, new_jobs(3), T0)
    store.reserve_jobs(queue, 1, 3, RES_A, T0, HOLD)
    keys = [(1, i) for i in ids]
    assert store.release_reservations(queue, keys[:2], RES_B, T0 + 1) == 0
    assert store.release_reservations(queue, keys[:2], RES_A, T0 + 1) == 2
    assert store.release_reservations(queue, keys[:2], RES_A, T0 + 1) == 0
    record = lookup(store, ids[0])
    assert (record.state, record.claim_descriptor, record.attempts_remaining) == (JobState.PENDING, None, 2)
    assert [j.local_id for j in store.dequeue_jobs(queue, 1, 5, CLAIM, T0 + 2, False)] == ids[:2]
    assert store.release_reservations(queue, keys[2:], RES_A, T0 + HOLD) == 0  # lapsed already
    assert store.release_reservations(queue, [], RES_A, T0) == 0


def test_reserved_jobs_take_their_places_in_pending_reads(store: ShardStore, queue: str) -> None:
    [a] = store.enqueue_jobs(queue, [NewJob(1, b"a", T0 - 5, 2)], T0)
    [held] = store.reserve_jobs(queue, 1, 1, RES_A, T0, HOLD)
    assert held.local_id == a
    b, c, d = store.enqueue_jobs(
        queue, [NewJob(1, b"b", T0 - 10, 2), NewJob(1, b"c", T0 - 1, 2), NewJob(1, b"d", T0 + 100, 2)], T0
    )
    pending = JobFilter(JobState.PENDING, 1, T0, future=None)
    # newest run_after first, the held job in its place
    assert [r.local_id for r in store.scan_jobs(queue, pending, 10)] == [d, c, a, b]
    assert [r.local_id for r in store.scan_jobs(queue, pending, 3)] == [d, c, a]
    assert store.count_jobs(queue, pending, None) == 4
    assert store.count_jobs(queue, JobFilter(JobState.PENDING, 1, T0, future=False), None) == 3
    assert store.count_jobs(queue, JobFilter(JobState.PENDING, 1, T0, future=True), None) == 1
    by_body = JobFilter(JobState.PENDING, 1, T0, future=None, body_regex="^a$")
    assert [r.local_id for r in store.scan_jobs(queue, by_body, 10)] == [a]
    assert store.count_jobs(queue, JobFilter(JobState.PENDING, 1, T0, None, "^[ab]$"), None) == 2
    # deleting PENDING jobs deletes held ones too, lowest run_after first
    assert store.delete_jobs(queue, JobFilter(JobState.PENDING, 1, T0, future=None), 2) == 2
    assert states(store, [a, b, c, d]) == [JobState.PENDING, JobState.PENDING]
    assert [r.local_id for r in store.scan_jobs(queue, pending, 10)] == [d, c]
    assert store.claim_reserved(queue, [(1, a, CLAIM)], RES_A, T0 + 1) == []


def test_a_deleted_reserved_job_matched_by_body_is_gone(store: ShardStore, queue: str) -> None:
    ids = store.enqueue_jobs(queue, new_jobs(3), T0)
    store.reserve_jobs(queue, 1, 2, RES_A, T0, HOLD)
    assert store.delete_jobs(queue, JobFilter(JobState.PENDING, 1, T0, None, "job-[02]"), 10) == 2
    assert [r.local_id for r in store.scan_jobs(queue, JobFilter(JobState.PENDING, 1, T0, None), 10)] == [ids[1]]
    assert store.claim_reserved(queue, [(1, i, CLAIM) for i in ids], RES_A, T0 + 1) == [(1, ids[1])]


def test_reservation_methods_need_the_queue(store: ShardStore) -> None:
    with pytest.raises(QueueNotFoundError):
        store.reserve_jobs("missing", 1, 1, RES_A, T0, HOLD)
    with pytest.raises(QueueNotFoundError):
        store.claim_reserved("missing", [(1, 1, CLAIM)], RES_A, T0)
    with pytest.raises(QueueNotFoundError):
        store.release_reservations("missing", [(1, 1)], RES_A, T0)


# -- ack ----------------------------------------------------------------------------------------


def test_ack_success(store: ShardStore, queue: str) -> None:
    [local_id] = claim_all(store, 1)
    store.ack_jobs(queue, [AckItem(1, local_id, append_custom_status="done")], [], T0 + 10)
    record = lookup(store, local_id)
    assert (record.state, record.custom_status, record.updated_at_ms) == (JobState.SUCCEEDED, "done", T0 + 10)


def test_ack_failure_retries_after_the_delay(store: ShardStore, queue: str) -> None:
    [local_id] = claim_all(store, 1, attempts=3)
    store.ack_jobs(queue, [], [AckItem(1, local_id, "boom;", retry_delay_ms=500)], T0 + 10)
    record = lookup(store, local_id)
    assert (record.state, record.attempts_remaining, record.attempts_allowed) == (JobState.PENDING, 2, 3)
    assert (record.run_after_ms, record.updated_at_ms, record.custom_status) == (T0 + 510, T0 + 10, "boom;")
    assert record.claim_descriptor is None
    assert store.dequeue_jobs(queue, 1, 1, CLAIM, T0 + 509, False) == []
    assert [job.local_id for job in store.dequeue_jobs(queue, 1, 1, CLAIM, T0 + 510, False)] == [local_id]


def test_ack_failure_on_the_last_attempt_fails_the_job(store: ShardStore, queue: str) -> None:
    [local_id] = claim_all(store, 1, attempts=2)
    store.ack_jobs(queue, [], [AckItem(1, local_id)], T0)
    assert lookup(store, local_id).attempts_remaining == 1
    store.dequeue_jobs(queue, 1, 1, CLAIM, T0, False)
    store.ack_jobs(queue, [], [AckItem(1, local_id, retry_delay_ms=100)], T0 + 1)
    record = lookup(store, local_id)
    assert (record.state, record.attempts_remaining, record.updated_at_ms) == (JobState.FAILED, 0, T0 + 1)


def test_ack_of_a_job_not_in_progress_is_a_no_op(store: ShardStore, queue: str) -> None:
    done, pending = store.enqueue_jobs(queue, new_jobs(2), T0)
    store.dequeue_jobs(queue, 1, 1, CLAIM, T0, False)  # claims the older one, ``done``
    store.ack_jobs(queue, [AckItem(1, done)], [], T0)
    before = store.lookup_jobs(queue, [(1, pending), (1, done)], True)
    store.ack_jobs(queue, [AckItem(1, pending, "x")], [AckItem(1, done, "y")], T0 + 100)
    store.ack_jobs(queue, [AckItem(1, 999_999)], [AckItem(1, 999_998)], T0 + 100)
    assert store.lookup_jobs(queue, [(1, pending), (1, done)], True) == before


def test_ack_with_the_wrong_priority_is_a_no_op(store: ShardStore, queue: str) -> None:
    [local_id] = claim_all(store, 1, priority=2)
    store.ack_jobs(queue, [AckItem(1, local_id)], [], T0)
    assert lookup(store, local_id, priority=2).state == JobState.IN_PROGRESS


def test_ack_appends_custom_status_up_to_the_limit(store: ShardStore, queue: str) -> None:
    limit = store.custom_status_limit
    [local_id] = store.enqueue_jobs(queue, [NewJob(1, b"x", T0, 3, "a" * (limit - 2))], T0)
    store.dequeue_jobs(queue, 1, 1, CLAIM, T0, False)
    store.ack_jobs(queue, [], [AckItem(1, local_id, "bcdef")], T0)
    assert lookup(store, local_id).custom_status == "a" * (limit - 2) + "bc"


def test_ack_applies_successes_and_failures_together(store: ShardStore, queue: str) -> None:
    ok, bad = claim_all(store, 2, attempts=1)
    store.ack_jobs(queue, [AckItem(1, ok)], [AckItem(1, bad)], T0)
    assert states(store, [ok, bad]) == [JobState.SUCCEEDED, JobState.FAILED]


# -- checkpoint ---------------------------------------------------------------------------------


def checkpoint(store: ShardStore, local_id: int, now: int = T0 + 10, source: str = SOURCE, **kw: Any) -> int:
    item = CheckpointItem(
        priority=kw.pop("priority", 1), local_id=local_id, run_after_ms=kw.pop("run_after", now), **kw
    )
    return store.checkpoint_jobs(Q, [item], source, now)


def test_checkpoint_replaces_the_body_and_keeps_the_claim(store: ShardStore, queue: str) -> None:
    [local_id] = claim_all(store, 1)
    assert checkpoint(store, local_id, new_body=b"progress", now=T0 + 10) == 1
    record = lookup(store, local_id, body=True)
    assert (record.body, record.state, record.claim_descriptor) == (b"progress", JobState.IN_PROGRESS, CLAIM)
    assert record.updated_at_ms == T0 + 10  # refreshed, which extends the claim
    assert (record.attempts_remaining, record.custom_status) == (2, "")


def test_a_checkpoint_with_a_later_run_after_extends_a_redis_claim_to_it(store: ShardStore, queue: str) -> None:
    """Redis, as the original's Redis checkpoint: a job that stays IN_PROGRESS is scored by the
    run after given (the claim timeout counts from it: a long job's lease) and shows it as its
    update time. The SQL stores refresh the claim to now, as the original's MySQL did (its
    updated_at column), and write the run after given."""
    [local_id] = claim_all(store, 1)
    later = T0 + 3_600_000
    assert checkpoint(store, local_id, now=T0 + 10, run_after=later) == 1
    record = lookup(store, local_id)
    assert (record.state, record.claim_descriptor) == (JobState.IN_PROGRESS, CLAIM)
    redis = type(store).__name__ == "RedisStore"
    assert record.updated_at_ms == (later if redis else T0 + 10)
    # The monitor's claim timeout counts from that time: claims from before a minute on are late.
    assert store.resurrect_timed_out_jobs(queue, 1, T0 + 60_000, 10, T0 + 120_000) == (0 if redis else 1)
    assert lookup(store, local_id).state == (JobState.IN_PROGRESS if redis else JobState.PENDING)


def test_checkpoint_resets_attempts(store: ShardStore, queue: str) -> None:
    [local_id] = claim_all(store, 1)
    assert checkpoint(store, local_id, attempts_allowed=5) == 1
    record = lookup(store, local_id, body=True)
    assert (record.attempts_allowed, record.attempts_remaining, record.body) == (5, 5, b"job-0")


def test_checkpoint_prepends_custom_status_up_to_the_limit(store: ShardStore, queue: str) -> None:
    limit = store.custom_status_limit
    [local_id] = store.enqueue_jobs(queue, [NewJob(1, b"x", T0, 2, "old")], T0)
    store.dequeue_jobs(queue, 1, 1, CLAIM, T0, False)
    assert checkpoint(store, local_id, prepend_custom_status="new;") == 1
    assert lookup(store, local_id).custom_status == "new;old"
    assert checkpoint(store, local_id, prepend_custom_status="p" * limit) == 1
    assert lookup(store, local_id).custom_status == "p" * limit


def test_checkpoint_moves_to_pending_with_run_after(store: ShardStore, queue: str) -> None:
    [local_id] = claim_all(store, 1)
    assert checkpoint(store, local_id, move_to_pending=True, run_after=T0 + 1000, now=T0 + 10) == 1
    record = lookup(store, local_id)
    assert (record.state, record.claim_descriptor, record.run_after_ms) == (JobState.PENDING, None, T0 + 1000)
    assert store.dequeue_jobs(queue, 1, 1, CLAIM, T0 + 999, False) == []
    assert [job.local_id for job in store.dequeue_jobs(queue, 1, 1, CLAIM, T0 + 1000, False)] == [local_id]


def test_checkpoint_under_another_claim_is_a_no_op(store: ShardStore, queue: str) -> None:
    [local_id] = claim_all(store, 1)
    before = lookup(store, local_id, body=True)
    assert checkpoint(store, local_id, source="host-b", new_body=b"stale", move_to_pending=True) == 0
    assert checkpoint(store, local_id, priority=2, new_body=b"stale") == 0
    assert lookup(store, local_id, body=True) == before


def test_checkpoint_of_a_job_not_in_progress_is_a_no_op(store: ShardStore, queue: str) -> None:
    [local_id] = store.enqueue_jobs(queue, new_jobs(1), T0)
    before = lookup(store, local_id, body=True)
    assert checkpoint(store, local_id, new_body=b"nope", move_to_pending=True) == 0
    assert lookup(store, local_id, body=True) == before


def test_checkpoint_returns_how_many_changed(store: ShardStore, queue: str) -> None:
    a, b, c = claim_all(store, 3)
    items = [CheckpointItem(1, i, T0, new_body=b"n") for i in (a, b, c, 424242)]
    items[1] = CheckpointItem(2, b, T0, new_body=b"n")  # wrong priority: not this job
    assert store.checkpoint_jobs(queue, items, SOURCE, T0) == 2
    assert store.checkpoint_jobs(queue, [], SOURCE, T0) == 0


# -- lookup -------------------------------------------------------------------------------------


def test_lookup_leaves_out_missing_keys(store: ShardStore, queue: str) -> None:
    a, b = store.enqueue_jobs(queue, new_jobs(2), T0)
    [c] = store.enqueue_jobs(queue, new_jobs(1, priority=3), T0)
    found = store.lookup_jobs(queue, [(1, a), (1, 987_654), (2, b), (3, c), (1, b)], True)
    assert {(job.priority, job.local_id) for job in found} == {(1, a), (3, c), (1, b)}
    assert all(job.body is not None for job in found)
    assert store.lookup_jobs(queue, [], False) == []


def test_a_lookup_whose_bodies_pass_its_budget_is_refused_unchanged(store: ShardStore, queue: str) -> None:
    """Jobs in every state a lookup reads (a ready one, a later one, one running, one done, one
    of another priority): bodies of 4,000 bytes in all are refused under a budget of 3,999,
    leaving every job as it was, and answered under a budget with room for them (Redis counts
    its records, a little more than the bodies), or without bodies whatever the budget."""
    body = b"b" * 1000
    [running] = store.enqueue_jobs(queue, [NewJob(1, body, T0, 2)], T0)
    assert [job.local_id for job in store.dequeue_jobs(queue, 1, 1, CLAIM, T0, False)] == [running]
    done, ready = store.enqueue_jobs(queue, [NewJob(1, body, T0, 2)] * 2, T0)
    assert [job.local_id for job in store.dequeue_jobs(queue, 1, 1, CLAIM, T0, False)] == [done]
    store.ack_jobs(queue, [AckItem(1, done)], [], T0)
    [later] = store.enqueue_jobs(queue, [NewJob(1, body, T0 + 60_000, 2)], T0)
    [other] = store.enqueue_jobs(queue, [NewJob(2, body, T0, 2)], T0)
    keys = [(1, running), (1, done), (1, ready), (1, later), (2, other)]
    before = store.lookup_jobs(queue, keys, True)
    assert len(before) == 5
    with pytest.raises(LookupOverBudget, match="more than a reply may \\(3999, MAX_FRAME_BYTES\\)"):
        store.lookup_jobs(queue, keys[:4], True, 3999)
    assert store.lookup_jobs(queue, keys, True) == before
    assert store.lookup_jobs(queue, keys, True, 10_000) == before
    assert [job.body for job in store.lookup_jobs(queue, keys, False, 1)] == [None] * 5
    assert [job.local_id for job in store.lookup_jobs(queue, keys[4:], True, 1000 + 200)] == [other]
    # a job named under another priority too (where it is not: none has priority 3) counts once
    assert [job.local_id for job in store.lookup_jobs(queue, [(1, ready), (3, ready)], True, 1200)] == [ready]


def test_lookup_does_not_see_other_queues(store: ShardStore, queue: str) -> None:
    store.create_queue("other", 3)
    [theirs] = store.enqueue_jobs("other", new_jobs(1), T0)
    assert store.lookup_jobs(queue, [(1, theirs)], False) == []


# -- count and scan -----------------------------------------------------------------------------


def test_count_current_and_future_jobs(store: ShardStore, queue: str) -> None:
    store.enqueue_jobs(queue, new_jobs(3, run_after=T0), T0)
    store.enqueue_jobs(queue, new_jobs(2, run_after=T0 + 1), T0)
    store.enqueue_jobs(queue, new_jobs(4, priority=2), T0)
    assert store.count_jobs(queue, JobFilter(JobState.PENDING, 1, T0, future=False), None) == 3
    assert store.count_jobs(queue, JobFilter(JobState.PENDING, 1, T0, future=True), None) == 2
    assert store.count_jobs(queue, JobFilter(JobState.PENDING, 2, T0), None) == 4
    assert store.count_jobs(queue, JobFilter(JobState.IN_PROGRESS, 1, T0), None) == 0


def test_count_by_state_regex_and_limit(store: ShardStore, queue: str) -> None:
    jobs = [NewJob(1, body, T0, 2) for body in (b"alpha-1", b"alpha-2", b"beta-1", b"\xff\xfealpha")]
    store.enqueue_jobs(queue, jobs, T0)
    store.dequeue_jobs(queue, 1, 1, CLAIM, T0, False)  # claims alpha-1 (lowest id)
    pending = JobFilter(JobState.PENDING, 1, T0, body_regex="^alpha")
    assert store.count_jobs(queue, pending, None) == 1
    assert store.count_jobs(queue, JobFilter(JobState.PENDING, 1, T0, body_regex="alpha"), None) == 2
    assert store.count_jobs(queue, JobFilter(JobState.IN_PROGRESS, 1, T0, body_regex="-1$"), None) == 1
    assert store.count_jobs(queue, JobFilter(JobState.PENDING, 1, T0), 2) == 2
    assert store.count_jobs(queue, JobFilter(JobState.PENDING, 1, T0), None) == 3


def test_an_invalid_body_regex_is_a_value_error(store: ShardStore, queue: str) -> None:
    store.enqueue_jobs(queue, new_jobs(1), T0)
    with pytest.raises(ValueError, match="regex"):
        store.count_jobs(queue, JobFilter(JobState.PENDING, 1, T0, body_regex="(unclosed"), None)
    with pytest.raises(ValueError, match="regex"):
        store.delete_jobs(queue, JobFilter(JobState.PENDING, 1, T0, None, body_regex="*"), 10)
    assert store.count_jobs(queue, JobFilter(JobState.PENDING, 1, T0), None) == 1


def test_scan_orders_newest_run_after_first(store: ShardStore, queue: str) -> None:
    a, b, c = store.enqueue_jobs(
        queue, [NewJob(1, b"a", T0 - 3, 2), NewJob(1, b"b", T0 - 1, 2), NewJob(1, b"c", T0 - 2, 2)], T0
    )
    scanned = store.scan_jobs(queue, JobFilter(JobState.PENDING, 1, T0), 10)
    assert [job.local_id for job in scanned] == [b, c, a]
    assert all(job.body is None and job.state == JobState.PENDING for job in scanned)
    assert [job.local_id for job in store.scan_jobs(queue, JobFilter(JobState.PENDING, 1, T0), 2)] == [b, c]


def test_scan_future_jobs_and_regex(store: ShardStore, queue: str) -> None:
    [now_job] = store.enqueue_jobs(queue, [NewJob(1, b"red", T0, 2)], T0)
    far, near = store.enqueue_jobs(queue, [NewJob(1, b"red", T0 + 20, 2), NewJob(1, b"blue", T0 + 10, 2)], T0)
    future = JobFilter(JobState.PENDING, 1, T0, future=True)
    assert [job.local_id for job in store.scan_jobs(queue, future, 10)] == [far, near]
    red_future = JobFilter(JobState.PENDING, 1, T0, future=True, body_regex="^red$")
    assert [job.local_id for job in store.scan_jobs(queue, red_future, 10)] == [far]
    assert [job.local_id for job in store.scan_jobs(queue, JobFilter(JobState.PENDING, 1, T0), 10)] == [now_job]


# -- bulk administration ------------------------------------------------------------------------


def test_retry_failed_jobs(store: ShardStore, queue: str) -> None:
    failed = make_failed(store, 3)
    [other_priority] = make_failed(store, 1, priority=2)
    assert store.retry_failed_jobs(queue, 1, 4, T0 + 100, 2, T0 + 1) == 2
    records = store.lookup_jobs(queue, [(1, i) for i in failed], False)
    retried = [job for job in records if job.state == JobState.PENDING]
    assert len(retried) == 2
    assert all((job.attempts_remaining, job.run_after_ms) == (4, T0 + 100) for job in retried)
    assert store.retry_failed_jobs(queue, 1, 4, T0 + 100, 10, T0 + 1) == 1
    assert store.retry_failed_jobs(queue, 1, 4, T0 + 100, 10, T0 + 1) == 0
    assert lookup(store, other_priority, priority=2).state == JobState.FAILED
    assert len(store.dequeue_jobs(queue, 1, 10, CLAIM, T0 + 100, False)) == 3


def test_delete_jobs_by_state_regex_and_limit(store: ShardStore, queue: str) -> None:
    keep_done = claim_all(store, 2)
    store.ack_jobs(queue, [AckItem(1, i) for i in keep_done], [], T0)
    store.enqueue_jobs(queue, [NewJob(1, b"keep", T0, 2), NewJob(1, b"drop-later", T0 + 10**6, 2)], T0)
    store.enqueue_jobs(queue, [NewJob(1, f"drop-{i}".encode(), T0, 2) for i in range(3)], T0)
    anytime = JobFilter(JobState.PENDING, 1, T0, future=None, body_regex="^drop")
    assert store.delete_jobs(queue, anytime, 2) == 2
    assert store.delete_jobs(queue, anytime, 10) == 2  # the future job too: delete ignores time
    assert store.delete_jobs(queue, anytime, 10) == 0
    assert store.count_jobs(queue, JobFilter(JobState.PENDING, 1, T0, None), None) == 1
    assert states(store, keep_done) == [JobState.SUCCEEDED] * 2
    assert store.delete_jobs(queue, JobFilter(JobState.SUCCEEDED, 1, T0, None), 10) == 2


# -- maintenance --------------------------------------------------------------------------------


def test_resurrect_retries_or_fails_timed_out_jobs(store: ShardStore, queue: str) -> None:
    [retry] = claim_all(store, 1, attempts=2, now=T0)
    [last] = claim_all(store, 1, attempts=1, now=T0)
    [fresh] = claim_all(store, 1, attempts=2, now=T0 + 50)
    assert store.resurrect_timed_out_jobs(queue, 1, T0, 10, T0 + 100) == 0  # claimed at T0: not before it
    resurrected = store.resurrect_timed_out_jobs(queue, 1, T0 + 1, 10, T0 + 100)
    assert (resurrected, resurrected.retried, resurrected.failed, resurrected.evicted) == (2, 1, 1, 0)
    r, lst, f = (lookup(store, i) for i in (retry, last, fresh))
    assert (r.state, r.attempts_remaining, r.run_after_ms, r.claim_descriptor) == (JobState.PENDING, 1, T0 + 100, None)
    assert (lst.state, lst.attempts_remaining) == (JobState.FAILED, 0)
    assert f.state == JobState.IN_PROGRESS


def test_resurrect_respects_the_limit(store: ShardStore, queue: str) -> None:
    claim_all(store, 5)
    assert store.resurrect_timed_out_jobs(queue, 1, T0 + 1, 3, T0 + 10) == 3
    assert store.count_jobs(queue, JobFilter(JobState.IN_PROGRESS, 1, T0 + 10), None) == 2


def test_gc_deletes_old_finished_jobs(store: ShardStore, queue: str) -> None:
    old = claim_all(store, 3, now=T0)
    store.ack_jobs(queue, [AckItem(1, i) for i in old], [], T0)
    new = claim_all(store, 1, now=T0 + 500)
    store.ack_jobs(queue, [AckItem(1, i) for i in new], [], T0 + 500)
    failed = make_failed(store, 1, now=T0)
    assert store.gc_finished_jobs(queue, 1, JobState.SUCCEEDED, T0 + 500, 2) == 2
    assert store.gc_finished_jobs(queue, 1, JobState.SUCCEEDED, T0 + 500, 10) == 1
    assert store.gc_finished_jobs(queue, 1, JobState.SUCCEEDED, T0 + 500, 10) == 0
    assert states(store, new + failed) == [JobState.SUCCEEDED, JobState.FAILED]
    assert store.gc_finished_jobs(queue, 1, JobState.FAILED, T0 + 1, 10) == 1


def test_a_monitor_pass_keeps_sweeping_while_a_sweep_does_its_whole_limit(
    store: ShardStore, queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call per sweep and pass, as the original made, deleted 100 jobs a second per queue,
    priority and shard at the defaults (a busy queue piled up its finished jobs for good) and
    brought back 1,000 timed-out claims a pass. Each sweep calls again while it did its limit
    (4 here), up to SWEEP_CALLS calls (3 here)."""
    done = claim_all(store, 10, now=T0)
    store.ack_jobs(queue, [AckItem(1, i) for i in done], [], T0)
    make_failed(store, 13, now=T0)
    stuck = claim_all(store, 9, now=T0)
    store.create_queue("waiting_only", 3)
    store.enqueue_jobs("waiting_only", new_jobs(3), T0)
    backend = ShardedBackend(
        ShardMap([Shard(store.name, store)]), num_priorities=3, parallelism=2, clock=ManualClock(T0 + 120_000)
    )
    policy = MonitorPolicy(
        interval_seconds=60, max_per_pass=4, claim_timeout_ms=60_000, succeeded_ttl_ms=60_000, failed_ttl_ms=60_000
    )
    monkeypatch.setattr(monitor, "SWEEP_CALLS", 3)
    metrics = Metrics()
    try:
        totals = asyncio.run(Monitor(backend, policy, metrics).run_once())
    finally:
        backend._executor.shutdown(wait=True)  # the store fixture closes the store
    assert (totals["gc_succeeded"], totals["gc_failed"], totals["resurrected"]) == (10, 12, 9)
    # and per queue, as the original's monitor named them
    counted = {name: value for name, value in metrics.counters.items() if name.startswith(f"{queue}_")}
    assert counted == {f"{queue}_succeeded_gc": 10, f"{queue}_failed_gc": 12, f"{queue}_timeout_retry": 9}
    assert totals["idle_skipped"] == 1, "waiting_only"
    assert states(store, stuck) == [JobState.PENDING] * 9
    assert store.count_jobs(queue, JobFilter(JobState.FAILED, 1, T0), None) == 1, "the 13th waits for the next pass"


def test_queues_idle_for_the_monitor_are_those_it_has_nothing_to_do_in(store: ShardStore) -> None:
    """``monitor_idle`` names no queue holding anything for the monitor's sweeps: a claim, a
    reservation's hold (on Redis), a finished job, an expiry, a dedup record waiting for the GC, a group.
    It names every queue that holds none of them (the monitor skips those: a dozen store calls
    a queue and pass)."""

    def expiring(q: str) -> object:
        return store.enqueue_keyed_jobs(q, [KeyedJob(NewJob(1, b"x", T0, 1), None, 0, None, T0 + 1)], T0)

    busy: dict[str, Callable[[str], object]] = {
        "claimed": lambda q: claimed_ids(q),
        "held": lambda q: store.reserve_jobs(q, 3, 1, f"{RESERVATION_PREFIX}r1", T0, 60_000),
        "succeeded": lambda q: store.ack_jobs(q, [AckItem(2, i) for i in claimed_ids(q)], [], T0),
        "failed": lambda q: store.ack_jobs(q, [], [AckItem(2, i) for i in claimed_ids(q, attempts=1)], T0),
        "expiring": expiring,
        "windowed": lambda q: windowed_and_collected(q),
    }
    if store.groups_refused is None:
        busy["grouped"] = lambda q: store.enqueue_keyed_jobs(q, [KeyedJob(NewJob(1, b"x", T0, 1), None, 0, "g")], T0)

    def claimed_ids(q: str, attempts: int = 2) -> list[int]:
        store.enqueue_jobs(q, [NewJob(2, b"x", T0, attempts)], T0)
        return [job.local_id for job in store.dequeue_jobs(q, 2, 1, CLAIM, T0, False)]

    def windowed_and_collected(q: str) -> None:
        [enqueued] = store.enqueue_keyed_jobs(q, [KeyedJob(NewJob(1, b"x", T0, 1), "k", 3_600_000)], T0)
        store.dequeue_jobs(q, 1, 1, CLAIM, T0, False)
        store.ack_jobs(q, [AckItem(1, enqueued.local_id)], [], T0)
        assert store.gc_finished_jobs(q, 1, JobState.SUCCEEDED, T0 + 1, 10) == 1  # the key's window is open

    for name, make_busy in busy.items():
        store.create_queue(name, 3)
        store.enqueue_jobs(name, new_jobs(2, priority=3), T0)  # pending jobs make no queue busy
        make_busy(name)
    store.create_queue("empty", 3)
    store.create_queue("pending", 3)
    store.enqueue_jobs("pending", new_jobs(3) + new_jobs(2, run_after=T0 + 10_000), T0)
    queues = sorted(store.get_queue_names())
    idle = store.monitor_idle(queues, 3)
    # A lapsed hold goes back to PENDING through the monitor on Redis (lib/holds.lua); the SQL
    # stores' jobs stay PENDING under a reservation, which simply lapses.
    expected = {"empty", "pending"} | (set() if type(store).__name__ == "RedisStore" else {"held"})
    assert idle == expected
    assert store.monitor_idle([], 3) == set()
    assert store.monitor_idle(["claimed", "empty"], 1) == {"claimed", "empty"}, "its claim is of priority 2"


# -- errors and lifecycle -----------------------------------------------------------------------

PER_QUEUE_CALLS: dict[str, Callable[[ShardStore], object]] = {
    "enqueue_jobs": lambda s: s.enqueue_jobs("nope", new_jobs(1), T0),
    "dequeue_jobs": lambda s: s.dequeue_jobs("nope", 1, 1, CLAIM, T0, False),
    "dequeue_jobs_dry_run": lambda s: s.dequeue_jobs("nope", 1, 1, CLAIM, T0, True),
    "ack_jobs": lambda s: s.ack_jobs("nope", [AckItem(1, 1)], [], T0),
    "checkpoint_jobs": lambda s: s.checkpoint_jobs("nope", [CheckpointItem(1, 1, T0)], SOURCE, T0),
    "lookup_jobs": lambda s: s.lookup_jobs("nope", [(1, 1)], False),
    "count_jobs": lambda s: s.count_jobs("nope", JobFilter(JobState.PENDING, 1, T0), None),
    "scan_jobs": lambda s: s.scan_jobs("nope", JobFilter(JobState.PENDING, 1, T0), 10),
    "retry_failed_jobs": lambda s: s.retry_failed_jobs("nope", 1, 1, T0, 10, T0),
    "delete_jobs": lambda s: s.delete_jobs("nope", JobFilter(JobState.PENDING, 1, T0, None), 10),
    "resurrect_timed_out_jobs": lambda s: s.resurrect_timed_out_jobs("nope", 1, T0, 10, T0),
    "gc_finished_jobs": lambda s: s.gc_finished_jobs("nope", 1, JobState.SUCCEEDED, T0, 10),
}


@pytest.mark.parametrize("call", PER_QUEUE_CALLS.values(), ids=PER_QUEUE_CALLS.keys())
def test_unknown_queue_raises_queue_not_found(
    store: ShardStore, queue: str, call: Callable[[ShardStore], object]
) -> None:
    with pytest.raises(QueueNotFoundError) as info:
        call(store)
    assert info.value.queue == "nope"


def test_ping_and_close_is_idempotent(store: ShardStore) -> None:
    assert isinstance(store, ShardStore)
    assert store.name == "1"
    store.ping()
    store.close()
    store.close()
