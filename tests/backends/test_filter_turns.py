"""Body filters share the store threads fairly: at most ``sharded.FILTERED_CALLS`` filtered store
calls run at once, so ordinary calls always find a thread while filters run, and one request's
filtering (a count over shards x priorities, a delete walking the shards) has one deadline,
BODY_FILTER_TIME_BUDGET_SECONDS from its start, passed down in ``JobFilter.deadline``.

Over real embedded shards. Filters are held inside the matcher (``BodyFilter.matching``) until the
test lets them go, so "while a filter runs" is an order of events, not a matter of timing."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from tests.support.hot import dequeue, enqueue

from pinlater.backends.base import JobFilter, JobState, NewJob
from pinlater.backends.body_filter import BodyFilter, BodyFilterBudgetExceeded, BodyFilterBusy
from pinlater.backends.embedded import EmbeddedStore
from pinlater.backends.sharded import FILTERED_CALLS, ShardedBackend
from pinlater.backends.shardmap import Shard, ShardMap

Q = "filtered"
PRIORITIES = 3
WAIT_S = 60.0  # a bound on waiting for an event that should come at once: only a failing test hits it


class Recording:
    """A store that records the ``JobFilter`` of each count, scan and delete, then forwards."""

    def __init__(self, store: EmbeddedStore) -> None:
        self._store = store
        self.filters: list[JobFilter] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def count_jobs(self, queue: str, where: JobFilter, limit: int | None) -> int:
        self.filters.append(where)
        return self._store.count_jobs(queue, where, limit)

    def delete_jobs(self, queue: str, where: JobFilter, limit: int) -> int:
        self.filters.append(where)
        return self._store.delete_jobs(queue, where, limit)


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[list[EmbeddedStore]]:
    opened = [EmbeddedStore(tmp_path / "data", name, body_filter_budget_seconds=600) for name in ("1", "2")]
    try:
        yield opened
    finally:
        for store in opened:
            store.close()


def fill(stores: Sequence[EmbeddedStore]) -> None:
    for store in stores:
        store.create_queue(Q, PRIORITIES)
        jobs = [NewJob(1 + i % PRIORITIES, b"match-%d" % i if i % 2 else b"other", 0, 1) for i in range(30)]
        store.enqueue_jobs(Q, jobs, 0)


def hold_matcher(monkeypatch: pytest.MonkeyPatch) -> tuple[threading.Semaphore, threading.Event]:
    """Hold each filter in the matcher: released once for each that enters, until the event is set."""
    entered = threading.Semaphore(0)
    release = threading.Event()
    matching = BodyFilter.matching

    def held(self: BodyFilter, bodies: Sequence[bytes | None]) -> list[int]:
        entered.release()
        release.wait(WAIT_S)
        return matching(self, bodies)

    monkeypatch.setattr(BodyFilter, "matching", held)
    return entered, release


def test_ordinary_calls_find_threads_while_filters_hold_theirs(
    stores: list[EmbeddedStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Four concurrent filtered counts (24 filtered store calls) on a pool of four threads: two
    run, held in the matcher, the rest wait for a turn, and an enqueue and a dequeue complete
    meanwhile. Without the bound the filters took all four threads and the enqueue waited."""
    fill(stores)
    for store in stores:
        store.create_queue("plain", PRIORITIES)
    entered = threading.Semaphore(0)
    inside = [0]
    release = threading.Event()
    lock = threading.Lock()
    matching = BodyFilter.matching

    def held(self: BodyFilter, bodies: Sequence[bytes | None]) -> list[int]:
        with lock:
            inside[0] += 1
        entered.release()
        release.wait(WAIT_S)
        with lock:
            inside[0] -= 1
        return matching(self, bodies)

    monkeypatch.setattr(BodyFilter, "matching", held)
    shards = ShardMap([Shard(store.name, store) for store in stores])
    backend = ShardedBackend(shards, num_priorities=PRIORITIES, parallelism=4, body_filter_budget_seconds=600)

    async def go() -> None:
        counts = [asyncio.create_task(backend.count_jobs(Q, JobState.PENDING, None, False, "^match")) for _ in range(4)]
        loop = asyncio.get_running_loop()
        for _ in range(FILTERED_CALLS):  # the filters that got a turn are inside the matcher
            assert await loop.run_in_executor(None, entered.acquire, True, WAIT_S)
        descriptors = await asyncio.wait_for(enqueue(backend, "plain", [NewJob(1, b"plain", 0, 1)]), WAIT_S)
        dequeued = await asyncio.wait_for(dequeue(backend, "plain", 100, "test"), WAIT_S)
        assert [job.descriptor for job in dequeued] == descriptors
        assert not any(task.done() for task in counts), "the filters are still held"
        with lock:
            assert inside[0] == FILTERED_CALLS, "only FILTERED_CALLS filtered calls hold a thread"
        release.set()
        assert await asyncio.gather(*counts) == [30] * 4  # 15 matching jobs a shard

    try:
        asyncio.run(go())
    finally:
        release.set()
        backend.close()


def test_one_request_has_one_deadline_for_all_its_store_calls(stores: list[EmbeddedStore]) -> None:
    """A filtered count over 2 shards x 3 priorities, and a filtered delete walking the shards,
    give every store call the same deadline: the budget from the request's start. Unfiltered
    calls carry none."""
    fill(stores)
    recording = [Recording(store) for store in stores]
    shards = ShardMap([Shard(store.name, store) for store in recording])  # type: ignore[arg-type]
    backend = ShardedBackend(shards, num_priorities=PRIORITIES, parallelism=4, body_filter_budget_seconds=30)

    async def go() -> None:
        before = time.monotonic()
        assert await backend.count_jobs(Q, JobState.PENDING, None, False, "^match") == 30
        after = time.monotonic()
        filters = [f for r in recording for f in r.filters]
        assert len(filters) == 2 * PRIORITIES
        deadlines = {f.deadline for f in filters}
        assert len(deadlines) == 1
        (deadline,) = deadlines
        assert deadline is not None and before + 30 <= deadline <= after + 30

        for r in recording:
            r.filters.clear()
        assert await backend.delete_jobs(Q, JobState.PENDING, 1, "^match", 1000) == 10
        assert len({f.deadline for r in recording for f in r.filters}) == 1 and len(recording[1].filters) == 1

        for r in recording:
            r.filters.clear()
        await backend.count_jobs(Q, JobState.PENDING, None, False, None)
        assert all(f.deadline is None for r in recording for f in r.filters)

    try:
        asyncio.run(go())
    finally:
        backend.close()


def test_a_request_past_its_deadline_gets_no_turn(stores: list[EmbeddedStore], monkeypatch: pytest.MonkeyPatch) -> None:
    """While the filter turns are taken, a filtered request whose budget runs out waiting for one
    fails with the budget's error, and never runs."""
    fill(stores)
    entered, release = hold_matcher(monkeypatch)
    shards = ShardMap([Shard(store.name, store) for store in stores])
    slow = ShardedBackend(shards, num_priorities=PRIORITIES, parallelism=4, body_filter_budget_seconds=600)
    quick = ShardedBackend(shards, num_priorities=PRIORITIES, parallelism=4, body_filter_budget_seconds=0.2)
    quick._filter_slots = slow._filter_slots  # one server's turns, two budgets

    async def go() -> None:
        holding = asyncio.create_task(slow.count_jobs(Q, JobState.PENDING, None, False, "^match"))
        loop = asyncio.get_running_loop()
        for _ in range(FILTERED_CALLS):
            assert await loop.run_in_executor(None, entered.acquire, True, WAIT_S)
        # (BodyFilterBusy: shed load, which the admin port answers 503, not a filter too slow)
        with pytest.raises(BodyFilterBusy, match="BODY_FILTER_TIME_BUDGET_SECONDS"):
            await quick.count_jobs(Q, JobState.PENDING, 1, False, "^match")
        release.set()
        assert await holding == 30

    try:
        asyncio.run(go())
    finally:
        release.set()
        slow.close()
        quick.close()


def test_a_store_call_stops_at_the_deadline_it_is_given(stores: list[EmbeddedStore]) -> None:
    """The store's own budget (600 s here) does not apply when the request's deadline is given."""
    fill(stores)
    spent = JobFilter(JobState.PENDING, 1, 0, False, "^match", time.monotonic() - 1)
    with pytest.raises(BodyFilterBudgetExceeded):
        stores[0].count_jobs(Q, spent, None)
    with pytest.raises(BodyFilterBudgetExceeded):
        stores[0].delete_jobs(Q, spent, 10)
    fresh = JobFilter(JobState.PENDING, 1, 0, False, "^match", time.monotonic() + 600)
    assert stores[0].count_jobs(Q, fresh, None) == 5


def test_requests_waiting_for_a_filter_turn_hold_no_request_slot(
    stores: list[EmbeddedStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Four filtered counts through the handler, on a server of two request slots: two of their
    store calls hold the filter turns (held in the matcher), the rest wait for one; none holds a
    request slot meanwhile, so an unfiltered count is served at once. Each filtered request held
    a slot while it waited, and a peer sending thousands left no slot for any other call."""
    from pinlater.idl import idl
    from pinlater.server.handler import PinLaterHandler
    from pinlater.server.lease import RequestLease, current_lease
    from pinlater.server.metrics import Metrics
    from pinlater.server.transport import RequestSlots

    fill(stores)
    entered, release = hold_matcher(monkeypatch)
    shards = ShardMap([Shard(store.name, store) for store in stores])
    backend = ShardedBackend(shards, num_priorities=PRIORITIES, parallelism=4, body_filter_budget_seconds=600)
    handler = PinLaterHandler(backend, Metrics())
    slots = RequestSlots(2)
    context = idl.RequestContext(source="test")

    leases: list[RequestLease] = []

    async def request(regex: str | None) -> int:
        """One request as a connection serves it: a slot taken, in line, for the call."""
        lease = RequestLease(slots)
        leases.append(lease)
        current_lease.set(lease)
        if not lease.take_now():
            await lease.take()
        try:
            ask = idl.PinLaterGetJobCountRequest(queueName=Q, jobState=0, bodyRegexToMatch=regex)
            return int(await handler.get_job_count(context, ask))
        finally:
            lease.end()

    async def go() -> None:
        filtered = [asyncio.create_task(request("^match")) for _ in range(4)]
        loop = asyncio.get_running_loop()
        for _ in range(FILTERED_CALLS):
            assert await loop.run_in_executor(None, entered.acquire, True, WAIT_S)
        assert (slots.held, slots.resting, slots.filtering) == (0, 0, 4), "filtering, not long polls waiting"
        assert not any(lease.idle for lease in leases), "working, not idle: a lost connection does not cancel it"
        assert await asyncio.wait_for(request(None), WAIT_S) == 60, "served while the filters wait"
        assert not any(task.done() for task in filtered)
        release.set()
        assert await asyncio.gather(*filtered) == [30] * 4
        assert (slots.held, slots.resting, slots.filtering) == (0, 0, 0)

    try:
        asyncio.run(go())
    finally:
        release.set()
        backend.close()


def test_a_cancelled_filtered_call_keeps_its_turn_until_its_thread_is_done(
    stores: list[EmbeddedStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A filtered count cancelled while its store calls run (its request gone): the calls go on
    on their threads, and keep their turns until they end, so no other filter joins them past
    FILTERED_CALLS (the turns were given back at the cancel, and the filters took every thread)."""
    fill(stores)
    entered, release = hold_matcher(monkeypatch)
    shards = ShardMap([Shard(store.name, store) for store in stores])
    backend = ShardedBackend(shards, num_priorities=PRIORITIES, parallelism=4, body_filter_budget_seconds=600)

    async def go() -> None:
        loop = asyncio.get_running_loop()
        first = asyncio.create_task(backend.count_jobs(Q, JobState.PENDING, None, False, "^match"))
        for _ in range(FILTERED_CALLS):
            assert await loop.run_in_executor(None, entered.acquire, True, WAIT_S)
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        assert backend._filter_slots.locked(), "the turns are held while the calls run"
        second = asyncio.create_task(backend.count_jobs(Q, JobState.PENDING, None, False, "^match"))
        assert not await loop.run_in_executor(None, entered.acquire, True, 0.3), "no other filter joined them"
        release.set()
        assert await asyncio.wait_for(second, WAIT_S) == 30

    try:
        asyncio.run(go())
    finally:
        release.set()
        backend.close()
