"""Dedup keys on one shard (``ShardStore.enqueue_keyed_jobs``), for every backend kind.

The contract is the seam's docstring: a key is held by the job recorded for it while that job is
PENDING or IN_PROGRESS, and until its enqueue time plus its window whatever its state. Time is
explicit, so nothing sleeps. Every test runs twice: enqueueing through the store's blocking method,
and through its hot path as the server calls it (``HotPath.enqueue_keyed_jobs``, on an event loop;
the embedded store's runs on its Rust writer).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor

import pytest

from pinlater.backends.base import (
    RESERVATION_PREFIX,
    AckItem,
    CheckpointItem,
    Enqueued,
    JobFilter,
    JobState,
    KeyedJob,
    NewJob,
    ShardStore,
)
from pinlater.backends.redis import RedisStore
from pinlater.backends.redis.keys_compact import DEDUP_PIN
from pinlater.backends.sharded import ShardedBackend
from pinlater.backends.shardmap import Shard, ShardMap
from pinlater.clock import ManualClock
from pinlater.errors import QueueNotFoundError
from pinlater.monitor import Monitor, MonitorPolicy
from pinlater.server.metrics import Metrics

Enqueue = Callable[[str, Sequence[KeyedJob], int], list[Enqueued]]

Q = "dedup_queue"
T0 = 1_700_000_000_000
CLAIM = "claim-0001:worker:host-a"


@pytest.fixture
def queue(store: ShardStore) -> str:
    store.create_queue(Q, 3)
    return Q


def keyed(key: str, *, body: bytes = b"b", priority: int = 1, run_after: int = T0, window_ms: int = 0) -> KeyedJob:
    return KeyedJob(NewJob(priority, body, run_after, 2), key, window_ms)


_via: list[Enqueue] = []


@pytest.fixture(autouse=True, params=["store", "hot_path"])
def via(request: pytest.FixtureRequest, store: ShardStore) -> Iterator[Enqueue]:
    """How ``enqueue`` reaches the store: its blocking method, or its hot path on an event loop."""
    if request.param == "store":
        _via[:] = [store.enqueue_keyed_jobs]
        yield store.enqueue_keyed_jobs
        return
    shard = Shard(store.name, store)
    backend = ShardedBackend(ShardMap([shard]), num_priorities=3, parallelism=2)
    loop = asyncio.new_event_loop()
    hot = backend.hot_path(shard)

    def call(queue: str, jobs: Sequence[KeyedJob], now: int) -> list[Enqueued]:
        return loop.run_until_complete(hot.enqueue_keyed_jobs(queue, jobs, now))

    _via[:] = [call]
    try:
        yield call
    finally:
        loop.run_until_complete(backend.aclose())
        loop.close()
        backend._executor.shutdown(wait=True)  # the store fixture closes the store


def keys_in_jobs(store: ShardStore) -> bool:
    """Whether the store keeps a job's dedup key with the job (the compact Redis layout): a
    lookup then shows it for as long as the job exists, even once another job took the key."""
    return isinstance(store, RedisStore) and store.layout.compact


def recorded_keys(store: ShardStore) -> set[bytes]:
    """The keys a compact Redis store holds a record of (its ``dk`` hash, less the pin)."""
    assert isinstance(store, RedisStore)
    return set(store._client.hkeys(store._shard.keys(Q).dedup_keys()[0])) - {DEDUP_PIN}


def enqueue(store: ShardStore, *jobs: KeyedJob, now: int = T0) -> list[Enqueued]:
    return _via[0](Q, list(jobs), now)


def state_of(store: ShardStore, e: Enqueued) -> JobState:
    (record,) = store.lookup_jobs(Q, [(e.priority, e.local_id)], False)
    return record.state


def test_a_new_key_inserts_the_job_and_lookups_show_the_key(store: ShardStore, queue: str) -> None:
    (a,) = enqueue(store, keyed("k1", body=b"first", priority=2))
    assert not a.deduplicated and a.priority == 2
    (record,) = store.lookup_jobs(Q, [(2, a.local_id)], True)
    assert record.body == b"first" and record.state == JobState.PENDING
    assert record.dedup_key == "k1"


def test_a_pending_holder_answers_for_its_key(store: ShardStore, queue: str) -> None:
    (a,) = enqueue(store, keyed("k1", body=b"first"))
    (b,) = enqueue(store, keyed("k1", body=b"second", priority=3), now=T0 + 5)
    assert b == Enqueued(a.priority, a.local_id, True)
    assert store.count_jobs(Q, JobFilter(JobState.PENDING, 1, T0 + 10), None) == 1
    assert store.count_jobs(Q, JobFilter(JobState.PENDING, 3, T0 + 10, future=None), None) == 0


def test_a_future_holder_holds_too(store: ShardStore, queue: str) -> None:
    (a,) = enqueue(store, keyed("k1", run_after=T0 + 3_600_000))
    (b,) = enqueue(store, keyed("k1"))
    assert b.deduplicated and b.local_id == a.local_id


def test_an_in_progress_holder_holds_and_a_finished_one_does_not(store: ShardStore, queue: str) -> None:
    (a,) = enqueue(store, keyed("k1"))
    assert [j.local_id for j in store.dequeue_jobs(Q, 1, 10, CLAIM, T0, False)] == [a.local_id]
    (b,) = enqueue(store, keyed("k1"), now=T0 + 1)
    assert b.deduplicated and b.local_id == a.local_id
    store.ack_jobs(Q, [AckItem(1, a.local_id)], [], T0 + 2)
    (c,) = enqueue(store, keyed("k1", body=b"again"), now=T0 + 3)
    assert not c.deduplicated and c.local_id != a.local_id
    assert state_of(store, c) == JobState.PENDING


def test_a_holder_under_a_brokers_reservation_holds_through_its_claim(store: ShardStore, queue: str) -> None:
    (a,) = enqueue(store, keyed("k1"))
    reservation = RESERVATION_PREFIX + "broker-1"
    assert [j.local_id for j in store.reserve_jobs(Q, 1, 10, reservation, T0, 30_000)] == [a.local_id]
    (b,) = enqueue(store, keyed("k1"), now=T0 + 1)
    assert b == Enqueued(1, a.local_id, True)
    (record,) = store.lookup_jobs(Q, [(1, a.local_id)], False)
    assert record.dedup_key == "k1"
    assert store.claim_reserved(Q, [(1, a.local_id, CLAIM)], reservation, T0 + 2) == [(1, a.local_id)]
    (c,) = enqueue(store, keyed("k1"), now=T0 + 3)
    assert c == Enqueued(1, a.local_id, True)
    assert store.count_jobs(Q, JobFilter(JobState.IN_PROGRESS, 1, T0 + 3), None) == 1
    assert store.count_jobs(Q, JobFilter(JobState.PENDING, 1, T0 + 3, future=None), None) == 0


def test_a_holder_whose_claim_timed_out_holds_until_its_last_attempt_fails(store: ShardStore, queue: str) -> None:
    (a,) = enqueue(store, keyed("k1"))
    store.dequeue_jobs(Q, 1, 10, CLAIM, T0, False)
    assert store.resurrect_timed_out_jobs(Q, 1, T0 + 1, 10, T0 + 2) == 1  # back to PENDING, one attempt left
    (b,) = enqueue(store, keyed("k1"), now=T0 + 3)
    assert b.deduplicated and b.local_id == a.local_id
    store.dequeue_jobs(Q, 1, 10, CLAIM, T0 + 4, False)
    assert store.resurrect_timed_out_jobs(Q, 1, T0 + 5, 10, T0 + 6) == 1  # no attempt left: FAILED
    assert state_of(store, a) == JobState.FAILED
    (c,) = enqueue(store, keyed("k1"), now=T0 + 7)
    assert not c.deduplicated


def test_a_failed_holder_with_a_retry_left_still_holds(store: ShardStore, queue: str) -> None:
    (a,) = enqueue(store, keyed("k1"))
    store.dequeue_jobs(Q, 1, 10, CLAIM, T0, False)
    store.ack_jobs(Q, [], [AckItem(1, a.local_id, "", 60_000)], T0 + 1)  # back to PENDING, later
    (b,) = enqueue(store, keyed("k1"), now=T0 + 2)
    assert b.deduplicated and b.local_id == a.local_id
    store.dequeue_jobs(Q, 1, 10, CLAIM, T0 + 60_001, False)
    store.ack_jobs(Q, [], [AckItem(1, a.local_id)], T0 + 60_002)  # last attempt: FAILED
    assert state_of(store, a) == JobState.FAILED
    (c,) = enqueue(store, keyed("k1"), now=T0 + 60_003)
    assert not c.deduplicated


def test_the_window_holds_after_the_holder_finished(store: ShardStore, queue: str) -> None:
    (a,) = enqueue(store, keyed("k1", window_ms=10_000))
    store.dequeue_jobs(Q, 1, 10, CLAIM, T0, False)
    store.ack_jobs(Q, [AckItem(1, a.local_id)], [], T0 + 1)
    (b,) = enqueue(store, keyed("k1"), now=T0 + 9_999)
    assert b.deduplicated and b.local_id == a.local_id
    (c,) = enqueue(store, keyed("k1"), now=T0 + 10_000)
    assert not c.deduplicated


def test_the_window_of_the_holder_counts_not_that_of_the_newcomer(store: ShardStore, queue: str) -> None:
    (a,) = enqueue(store, keyed("k1"))
    store.dequeue_jobs(Q, 1, 10, CLAIM, T0, False)
    store.ack_jobs(Q, [AckItem(1, a.local_id)], [], T0 + 1)
    (b,) = enqueue(store, keyed("k1", window_ms=3_600_000), now=T0 + 2)
    assert not b.deduplicated  # the finished holder had no window; the newcomer takes the key


def test_a_deleted_holder_frees_its_key(store: ShardStore, queue: str) -> None:
    (a,) = enqueue(store, keyed("k1"))
    assert store.delete_jobs(Q, JobFilter(JobState.PENDING, 1, T0, future=None), 10) == 1
    (b,) = enqueue(store, keyed("k1"), now=T0 + 1)
    assert not b.deduplicated and b.local_id != a.local_id


ENDINGS = [
    "final_failure",
    "claim_timeout",
    "cancel",
    "checkpoint_of_a_cancelled_job",
    "expiry",
    "expiry_met_by_a_dequeue",
    "delete_in_progress",
]


@pytest.mark.parametrize("how", ENDINGS)
def test_a_holder_frees_its_key_however_it_ends(store: ShardStore, queue: str, how: str) -> None:
    """Every way a job ends (one attempt allowed, no window) frees its key at once."""
    expiry = T0 + 10 if how.startswith("expiry") else None
    (a,) = enqueue(store, KeyedJob(NewJob(1, b"a", T0, 1), "k1", 0, None, expiry))
    if how not in ("cancel", "expiry", "expiry_met_by_a_dequeue"):
        assert [j.local_id for j in store.dequeue_jobs(Q, 1, 10, CLAIM, T0, False)] == [a.local_id]
    if how == "final_failure":
        store.ack_jobs(Q, [], [AckItem(1, a.local_id)], T0 + 20)
    elif how == "claim_timeout":
        assert store.resurrect_timed_out_jobs(Q, 1, T0 + 1, 10, T0 + 20) == 1
    elif how == "cancel":
        assert store.cancel_jobs(Q, [(1, a.local_id)], T0 + 20) == 1
    elif how == "checkpoint_of_a_cancelled_job":  # an IN_PROGRESS job cancelled ends at its checkpoint
        assert store.cancel_jobs(Q, [(1, a.local_id)], T0 + 19) == 1
        assert store.checkpoint_jobs(Q, [CheckpointItem(1, a.local_id, T0 + 20, True)], CLAIM, T0 + 20) == 1
    elif how == "expiry":
        assert store.expire_jobs(Q, T0 + 20, 10) == 1
    elif how == "expiry_met_by_a_dequeue":
        assert store.dequeue_jobs(Q, 1, 10, CLAIM, T0 + 20, False) == []
    else:
        assert store.delete_jobs(Q, JobFilter(JobState.IN_PROGRESS, 1, T0 + 20), 10) == 1
    if how != "delete_in_progress":
        assert state_of(store, a) == JobState.FAILED
    if keys_in_jobs(store):
        assert recorded_keys(store) == set(), "the job forgot its key as it ended: nothing left for the GC"
    (b,) = enqueue(store, keyed("k1"), now=T0 + 21)
    assert not b.deduplicated and b.local_id != a.local_id


def test_a_failed_holder_put_back_holds_its_key_again(store: ShardStore, queue: str) -> None:
    (a,) = enqueue(store, KeyedJob(NewJob(1, b"a", T0, 1), "k1"))
    store.dequeue_jobs(Q, 1, 10, CLAIM, T0, False)
    store.ack_jobs(Q, [], [AckItem(1, a.local_id)], T0 + 1)
    assert state_of(store, a) == JobState.FAILED
    assert store.retry_failed_jobs(Q, 1, 1, T0 + 2, 10, T0 + 2) == 1
    if keys_in_jobs(store):
        assert recorded_keys(store) == {b"k1"}, "taken again: the failure had forgotten it"
    (b,) = enqueue(store, keyed("k1"), now=T0 + 3)
    assert b == Enqueued(1, a.local_id, True)


def test_a_failed_holder_put_back_holds_its_key_past_its_window_and_the_gc(store: ShardStore, queue: str) -> None:
    """Its window was still open when it failed: the key stays held while the job runs again,
    after that window and a GC pass."""
    (a,) = enqueue(store, KeyedJob(NewJob(1, b"a", T0, 1), "k1", 60_000))
    store.dequeue_jobs(Q, 1, 10, CLAIM, T0, False)
    store.ack_jobs(Q, [], [AckItem(1, a.local_id)], T0 + 1)
    assert store.retry_failed_jobs(Q, 1, 1, T0 + 2, 10, T0 + 2) == 1
    store.gc_dedup_keys(Q, T0 + 60_000, 100)
    (b,) = enqueue(store, keyed("k1"), now=T0 + 60_001)
    assert b == Enqueued(1, a.local_id, True)


def test_a_failed_holder_put_back_keeps_its_window(store: ShardStore, queue: str) -> None:
    (a,) = enqueue(store, KeyedJob(NewJob(1, b"a", T0, 1), "k1", 3_600_000))
    store.dequeue_jobs(Q, 1, 10, CLAIM, T0, False)
    store.ack_jobs(Q, [], [AckItem(1, a.local_id)], T0 + 1)
    assert store.retry_failed_jobs(Q, 1, 1, T0 + 2, 10, T0 + 2) == 1
    assert [j.local_id for j in store.dequeue_jobs(Q, 1, 10, CLAIM, T0 + 3, False)] == [a.local_id]
    store.ack_jobs(Q, [AckItem(1, a.local_id)], [], T0 + 4)
    store.gc_dedup_keys(Q, T0 + 5, 100)
    (b,) = enqueue(store, keyed("k1"), now=T0 + 6)
    assert b == Enqueued(1, a.local_id, True), "its window, from its enqueue, still holds the key"
    (c,) = enqueue(store, keyed("k1"), now=T0 + 3_600_000)
    assert not c.deduplicated


def test_a_failed_holder_put_back_leaves_its_key_to_a_job_that_took_it(store: ShardStore, queue: str) -> None:
    (a,) = enqueue(store, KeyedJob(NewJob(1, b"a", T0, 1), "k1"))
    store.dequeue_jobs(Q, 1, 10, CLAIM, T0, False)
    store.ack_jobs(Q, [], [AckItem(1, a.local_id)], T0 + 1)
    (b,) = enqueue(store, keyed("k1", run_after=T0 + 3_600_000), now=T0 + 2)
    assert not b.deduplicated
    assert store.retry_failed_jobs(Q, 1, 1, T0 + 3, 10, T0 + 3) == 1
    (c,) = enqueue(store, keyed("k1"), now=T0 + 4)
    assert c == Enqueued(1, b.local_id, True)
    # the job put back ends: the key stays with the job that took it
    assert [j.local_id for j in store.dequeue_jobs(Q, 1, 10, CLAIM, T0 + 5, False)] == [a.local_id]
    store.ack_jobs(Q, [AckItem(1, a.local_id)], [], T0 + 6)
    (d,) = enqueue(store, keyed("k1"), now=T0 + 7)
    assert d == Enqueued(1, b.local_id, True)
    if keys_in_jobs(store):
        assert recorded_keys(store) == {b"k1"}


def test_a_held_key_makes_no_job_at_any_priority(store: ShardStore, queue: str) -> None:
    enqueue(store, keyed("k1", priority=1))
    (b,) = enqueue(store, keyed("k1", priority=2))
    assert b.deduplicated and b.priority == 1
    for priority in (2, 3):
        assert store.count_jobs(Q, JobFilter(JobState.PENDING, priority, T0, future=None), None) == 0


def test_keys_of_one_call_answer_in_order(store: ShardStore, queue: str) -> None:
    (held,) = enqueue(store, keyed("k2"))
    got = enqueue(store, keyed("k1"), keyed("k2"), keyed("k3", priority=2))
    assert [e.deduplicated for e in got] == [False, True, False]
    assert got[1] == Enqueued(1, held.local_id, True)
    assert len({(e.priority, e.local_id) for e in got}) == 3
    keys = {
        r.local_id: r.dedup_key for p in (1, 2) for r in store.lookup_jobs(Q, [(p, e.local_id) for e in got], False)
    }
    assert keys[got[0].local_id] == "k1" and keys[got[2].local_id] == "k3"


def test_keys_are_per_queue(store: ShardStore, queue: str) -> None:
    store.create_queue("other_queue", 3)
    (a,) = enqueue(store, keyed("k1"))
    (b,) = _via[0]("other_queue", [keyed("k1")], T0)
    assert not a.deduplicated and not b.deduplicated


def test_keys_are_text_not_patterns(store: ShardStore, queue: str) -> None:
    keys = ["a:b", "a", "*", "%", "_", "k\u00e9y \u2603", "x" * 1024, "[1]", "a b"]
    got = enqueue(store, *(keyed(k) for k in keys))
    assert not any(e.deduplicated for e in got)
    again = enqueue(store, *(keyed(k) for k in keys), now=T0 + 1)
    assert [(e.local_id, e.deduplicated) for e in again] == [(e.local_id, True) for e in got]
    for key, e in zip(keys, got, strict=True):
        (record,) = store.lookup_jobs(Q, [(1, e.local_id)], False)
        assert record.dedup_key == key


def test_scans_show_the_key_and_plain_jobs_have_none(store: ShardStore, queue: str) -> None:
    (a,) = enqueue(store, keyed("k1"))
    (plain,) = store.enqueue_jobs(Q, [NewJob(1, b"plain", T0, 2)], T0)
    found = {r.local_id: r.dedup_key for r in store.scan_jobs(Q, JobFilter(JobState.PENDING, 1, T0), 10)}
    assert found == {a.local_id: "k1", plain: None}


def test_gc_keeps_a_record_while_its_job_exists_and_its_window_lasts(store: ShardStore, queue: str) -> None:
    done, windowed, pending = enqueue(store, keyed("done"), keyed("windowed", window_ms=60_000), keyed("pending"))
    store.dequeue_jobs(Q, 1, 2, CLAIM, T0, False)  # claims done and windowed (oldest ids first)
    store.ack_jobs(Q, [AckItem(1, done.local_id), AckItem(1, windowed.local_id)], [], T0 + 1)
    assert store.gc_dedup_keys(Q, T0 + 2, 100) == 0, "every job still exists"
    finished = store.lookup_jobs(Q, [(1, done.local_id), (1, windowed.local_id)], False)
    assert {r.local_id: r.dedup_key for r in finished} == {done.local_id: "done", windowed.local_id: "windowed"}
    (fresh,) = enqueue(store, keyed("done", body=b"fresh"), now=T0 + 3)  # a finished job holds no key
    assert not fresh.deduplicated
    shown = store.lookup_jobs(Q, [(1, done.local_id)], False)[0].dedup_key
    assert shown == ("done" if keys_in_jobs(store) else None), "the key went to the new job"
    assert store.gc_finished_jobs(Q, 1, JobState.SUCCEEDED, T0 + 2, 10) == 2  # done and windowed
    assert store.gc_dedup_keys(Q, T0 + 10_000, 100) == 0, "windowed's window lasts; the others' jobs exist"
    assert enqueue(store, keyed("windowed"), keyed("pending"), now=T0 + 10_001) == [
        Enqueued(1, windowed.local_id, True),
        Enqueued(1, pending.local_id, True),
    ]
    assert store.gc_dedup_keys(Q, T0 + 60_000, 100) == 1  # windowed: its window has passed, its job is gone
    (again,) = enqueue(store, keyed("windowed"), now=T0 + 60_001)
    assert not again.deduplicated


def test_gc_is_bounded_by_its_limit(store: ShardStore, queue: str) -> None:
    """Windows of a millisecond: the records outlast their deleted jobs, so the GC forgets them
    in every store (a compact Redis job forgets its key when it ends, if its window is over)."""
    got = enqueue(store, *(keyed(f"k{i}", window_ms=1) for i in range(5)))
    store.delete_jobs(Q, JobFilter(JobState.PENDING, 1, T0, future=None), 10)
    assert store.gc_dedup_keys(Q, T0 + 1, 3) == 3
    assert store.gc_dedup_keys(Q, T0 + 1, 3) == 2
    assert not any(e.deduplicated for e in got)


def test_deleting_the_queue_forgets_its_keys(store: ShardStore, queue: str) -> None:
    """Its window too: a deleted job would free a key without one anyway."""
    (a,) = enqueue(store, keyed("k1", window_ms=60_000))
    store.delete_queue(Q)
    store.create_queue(Q, 3)
    (b,) = enqueue(store, keyed("k1"))
    assert not a.deduplicated and not b.deduplicated


def test_a_missing_queue_is_an_error(store: ShardStore) -> None:
    with pytest.raises(QueueNotFoundError):
        _via[0]("no_such_queue", [keyed("k1")], T0)


def test_concurrent_enqueues_of_one_key_make_one_job(store: ShardStore, queue: str) -> None:
    """Many callers at once, each with its own call: exactly one job is made, and every caller
    is answered with it."""

    def one(i: int) -> Enqueued:
        (e,) = store.enqueue_keyed_jobs(Q, [keyed("contended", body=f"c{i}".encode())], T0)
        return e

    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(one, range(32)))
    assert len({(e.priority, e.local_id) for e in got}) == 1
    assert sum(not e.deduplicated for e in got) == 1
    assert store.count_jobs(Q, JobFilter(JobState.PENDING, 1, T0), None) == 1


def test_a_monitor_pass_forgets_keys_as_fast_as_the_job_gc_deletes_jobs(store: ShardStore, queue: str) -> None:
    """One pass makes as many key GC calls as finished-job GC calls (two per priority, each of
    ``max_per_pass``), so keys of a busy queue do not pile up behind a single call per pass. Windows
    of a millisecond, as in test_gc_is_bounded_by_its_limit."""
    got = enqueue(store, *(keyed(f"k{i}", window_ms=1) for i in range(25)))
    assert store.delete_jobs(Q, JobFilter(JobState.PENDING, 1, T0, future=None), 100) == 25
    backend = ShardedBackend(
        ShardMap([Shard(store.name, store)]), num_priorities=3, parallelism=2, clock=ManualClock(T0 + 1)
    )
    policy = MonitorPolicy(
        interval_seconds=60, max_per_pass=4, claim_timeout_ms=60_000, succeeded_ttl_ms=60_000, failed_ttl_ms=60_000
    )
    try:
        totals = asyncio.run(Monitor(backend, policy, Metrics()).run_once())
    finally:
        backend._executor.shutdown(wait=True)  # the store fixture closes the store
    assert totals["gc_dedup_keys"] == 24  # 6 calls of 4: the rest waits for the next pass
    assert store.gc_dedup_keys(Q, T0 + 2, 100) == 1
    assert not any(e.deduplicated for e in got)
