"""The dequeue broker's claims, in process, on a real store of every kind.

A hand-out is taken from memory; its claims are written by the next flush, one store call for
every hand-out of that turn of the loop, and the dequeue answers once they are written (an ack
through another server would otherwise find its jobs still PENDING). A claim that cannot be
written leaves its job PENDING, delivered again; a shard's whose claim call failed are withheld
from the reply.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from tests.support.hot import dequeue, enqueue

from pinlater._pinlater import decode_descriptors
from pinlater.backends.base import JobFilter, JobState, NewJob, ShardStore
from pinlater.backends.sharded import ShardedBackend
from pinlater.backends.shardmap import Shard, ShardMap
from pinlater.broker import BrokerPolicy, DequeueBroker
from pinlater.errors import ShardConnectionError
from pinlater.server.metrics import Metrics

Q = "claims"


@pytest.fixture
def backend(store: ShardStore) -> Iterator[ShardedBackend]:
    store.create_queue(Q, 3)
    backend = ShardedBackend(ShardMap([Shard(store.name, store)]), num_priorities=3, parallelism=4)
    yield backend
    backend._executor.shutdown(wait=True)


async def enqueue_n(backend: ShardedBackend, n: int) -> list[str]:
    now = backend.clock.now_ms()
    jobs = [NewJob(priority=1, body=b"job-%d" % i, run_after_ms=now, attempts_allowed=2) for i in range(n)]
    return await enqueue(backend, Q, jobs)


def states(store: ShardStore, descriptors: list[str]) -> list[tuple[JobState, str | None]]:
    keys = [(p, i) for _q, _s, p, i in decode_descriptors(descriptors)]
    by_id = {r.local_id: r for r in store.lookup_jobs(Q, keys, False)}
    return [(by_id[i].state, by_id[i].claim_descriptor) for _p, i in keys]


def test_a_hand_out_answers_once_its_claims_are_written_and_concurrent_ones_share_a_flush(
    store: ShardStore, backend: ShardedBackend
) -> None:
    metrics = Metrics()

    async def scenario() -> None:
        await enqueue_n(backend, 6)
        broker = DequeueBroker(backend, BrokerPolicy(100, 0, 20_000), metrics)
        # both wait for one refill, then hand out from memory in the same turn of the loop
        first, second = await asyncio.gather(broker.dequeue(Q, 2, "worker-a"), broker.dequeue(Q, 3, "worker-b"))
        assert not broker.settling, "nothing left to write once the dequeues answered"
        handed = [d for d, *_ in first.to_list() + second.to_list()]
        found = states(store, handed)
        assert [s for s, _ in found] == [JobState.IN_PROGRESS] * 5
        claims = [c or "" for _, c in found]
        assert all(c.startswith("worker-a|") for c in claims[:2]), claims
        assert all(c.startswith("worker-b|") for c in claims[2:]), claims
        assert len(set(claims[:2])) == 1 and claims[0] != claims[2], "one claim per dequeue"
        assert metrics.counters["broker_claim_calls"] == 1, "both hand-outs shared one flush"
        assert metrics.counters["broker_refills"] == 1
        third = await broker.dequeue(Q, 1, "worker-c")  # from memory: answered once claimed
        assert [s for s, _ in states(store, [d for d, *_ in third.to_list()])] == [JobState.IN_PROGRESS]
        await broker.stop()
        await backend.aclose()
        assert store.count_jobs(Q, JobFilter(JobState.PENDING, 1, backend.clock.now_ms()), None) == 0

    asyncio.run(scenario())
    assert metrics.counters["broker_claimed"] == 6
    assert metrics.counters["broker_lapsed"] == 0


def test_a_claim_that_cannot_be_written_is_counted_and_the_job_is_withheld_not_lost(
    store: ShardStore, backend: ShardedBackend
) -> None:
    """A worker given a job whose claim the store refused would run it while it is PENDING,
    delivered again to another worker: it is withheld from the reply, and delivered once, later."""
    metrics = Metrics()

    async def scenario() -> tuple[list[str], list[str]]:
        enqueued = await enqueue_n(backend, 3)
        broker = DequeueBroker(backend, BrokerPolicy(100, 0, 20_000), metrics)
        handed = [d for d, *_ in (await broker.dequeue(Q, 1, "worker-a")).to_list()]  # 2 stay buffered
        gone = [d for d in enqueued if d not in handed][:1]
        [(_q, _s, priority, local_id)] = decode_descriptors(gone)
        # An administrator's retry-style move of a buffered job back to plain PENDING (its
        # reservation released) before it is handed out: its claim must not be written.
        assert store.release_reservations(Q, [(priority, local_id)], broker.reservation, backend.clock.now_ms()) == 1
        rest = [d for d, *_ in (await broker.dequeue(Q, 5, "worker-a")).to_list()]
        assert gone[0] not in rest and len(rest) == 1
        handed += rest
        await broker.stop()
        assert states(store, gone) == [(JobState.PENDING, None)], "dequeuable again: at least once"
        assert [s for s, _ in states(store, handed)] == [JobState.IN_PROGRESS] * 2
        backend.forget_empty()  # the release above went around the backend, which would note it
        again = [j.descriptor for j in await dequeue(backend, Q, 10, "worker-b")]
        await backend.aclose()
        return gone, again

    gone, again = asyncio.run(scenario())
    assert metrics.counters["broker_claimed"] == 2
    assert metrics.counters["broker_lapsed"] == 1
    assert metrics.counters["broker_withheld"] == 1
    assert again == gone


def test_a_job_deleted_behind_the_broker_is_not_handed_out(store: ShardStore, backend: ShardedBackend) -> None:
    """Another server's deleteJobs (or cancel) removes jobs this server holds in its buffer: a
    worker given one would run a deleted job. The store does not claim it, so it is withheld."""
    metrics = Metrics()

    async def scenario() -> tuple[list[str], list[str], list[str]]:
        enqueued = await enqueue_n(backend, 4)
        broker = DequeueBroker(backend, BrokerPolicy(100, 0, 20_000), metrics)
        first = [d for d, *_ in (await broker.dequeue(Q, 1, "worker-a")).to_list()]  # 3 stay buffered
        now = backend.clock.now_ms()
        # as another server on the same store deletes them: not through this backend or broker
        assert store.delete_jobs(Q, JobFilter(JobState.PENDING, 1, now, future=None), 100) == 3
        rest = [d for d, *_ in (await broker.dequeue(Q, 5, "worker-a")).to_list()]
        await broker.stop()
        await backend.aclose()
        return enqueued, first, rest

    enqueued, first, rest = asyncio.run(scenario())
    assert rest == [], "no deleted job goes to a worker"
    assert len(first) == 1 and first[0] in enqueued
    assert metrics.counters["broker_withheld"] == 3
    assert metrics.counters["broker_claimed"] == 1
    assert metrics.counters["broker_handed_out"] == 1, "the withheld were not handed out"


async def _quiet(broker: DequeueBroker) -> None:
    """Until the broker has no refill out and nothing in the background (5 s at most)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 5
    while True:
        await asyncio.sleep(0)  # scheduled top-ups become tasks first
        busy = [*broker._background, *(t for t in broker._refills.values() if not t.done())]
        if not busy:
            return
        assert loop.time() < deadline, "the broker kept refilling"
        await asyncio.wait(busy, timeout=deadline - loop.time())


def test_a_refill_that_got_all_it_asked_for_is_topped_up_at_once(store: ShardStore, backend: ShardedBackend) -> None:
    """Under load dequeues drain the buffer while a refill is out. While the store has more, the
    broker tops the buffer up after a take, without waiting for the low-water mark."""
    metrics = Metrics()

    async def scenario() -> None:
        await enqueue_n(backend, 300)
        broker = DequeueBroker(backend, BrokerPolicy(100, 0, 20_000), metrics)  # no low-water refills
        assert len(await broker.dequeue(Q, 60, "worker")) == 60  # a refill of 100, 40 left
        await _quiet(broker)
        assert len(broker.buffer(Q)) == 100, "topped up to capacity without another dequeue"
        assert metrics.counters["broker_refills"] == 2
        await broker.stop()
        await backend.aclose()

    asyncio.run(scenario())


def test_a_refill_that_found_fewer_jobs_than_room_is_not_repeated(store: ShardStore, backend: ShardedBackend) -> None:
    """A sparse queue must not pay an empty store call after every refill."""
    metrics = Metrics()

    async def scenario() -> None:
        await enqueue_n(backend, 30)
        broker = DequeueBroker(backend, BrokerPolicy(100, 0, 20_000), metrics)
        assert len(await broker.dequeue(Q, 10, "worker")) == 10
        await _quiet(broker)
        assert len(broker.buffer(Q)) == 20
        assert metrics.counters["broker_refills"] == 1
        await broker.stop()
        await backend.aclose()

    asyncio.run(scenario())


def test_a_dequeue_waits_for_its_own_queues_claims_not_another_queues(
    store: ShardStore, backend: ShardedBackend
) -> None:
    """The claims of one turn of the loop are written together, but a dequeue answers once its
    own queue's are: another queue's claim write meeting a failing shard (here, one held back
    for a second) does not hold it."""
    metrics = Metrics()
    store.create_queue("other", 3)

    async def scenario() -> tuple[float, float]:
        now = backend.clock.now_ms()
        await enqueue_n(backend, 4)
        await enqueue(backend, "other", [NewJob(1, b"other-%d" % i, now, 2) for i in range(4)])
        broker = DequeueBroker(backend, BrokerPolicy(100, 0, 20_000), metrics)
        await asyncio.gather(broker.dequeue(Q, 1, "w"), broker.dequeue("other", 1, "w"))  # both buffered
        hot_path = backend.hot_path

        class HeldBack:  # the store's hot path, its claims of "other" a second late
            def __init__(self, hot: Any) -> None:
                self._hot = hot

            def __getattr__(self, name: str) -> Any:
                return getattr(self._hot, name)

            async def claim_reserved(self, queue: str, *args: Any) -> list[int]:
                if queue == "other":
                    await asyncio.sleep(1.0)
                return list(await self._hot.claim_reserved(queue, *args))

        backend.hot_path = lambda shard: HeldBack(hot_path(shard))  # type: ignore[method-assign]
        loop = asyncio.get_running_loop()
        started = loop.time()

        async def timed(queue: str) -> float:
            assert len(await broker.dequeue(queue, 1, "w")) == 1
            return loop.time() - started

        fast, slow = await asyncio.gather(timed(Q), timed("other"))
        await broker.stop()
        await backend.aclose()
        return fast, slow

    fast, slow = asyncio.run(scenario())
    assert slow >= 1.0 and fast < 0.5, (fast, slow)
    assert metrics.counters.get("broker_lapsed", 0) == 0


def test_jobs_whose_claims_cannot_be_written_are_withheld_not_handed_out(
    store: ShardStore, backend: ShardedBackend
) -> None:
    """A worker given a job whose claim failed would run it, and again whoever gets it once its
    reservation lapses (its ack finding it not IN_PROGRESS changes nothing): the dequeue
    answers without it instead, and it is delivered once, later."""
    metrics = Metrics()

    async def scenario() -> tuple[int, list[tuple[JobState, str | None]], list[str]]:
        enqueued = await enqueue_n(backend, 3)
        broker = DequeueBroker(backend, BrokerPolicy(100, 0, 20_000), metrics)
        hot_path = backend.hot_path

        class Failing:  # the store's hot path, its claim writes failing as a store that went away
            def __init__(self, hot: Any) -> None:
                self._hot = hot

            def __getattr__(self, name: str) -> Any:
                return getattr(self._hot, name)

            async def claim_reserved(self, queue: str, *args: Any) -> list[int]:
                raise ShardConnectionError(store.name, "injected: the store went away")

        backend.hot_path = lambda shard: Failing(hot_path(shard))  # type: ignore[method-assign]
        out = await broker.dequeue(Q, 2, "worker-a")
        backend.hot_path = hot_path  # type: ignore[method-assign]
        for shard in backend.shards:
            shard.mark_healthy()
        found = states(store, enqueued)
        await _quiet(broker)  # the withheld jobs' reservations released
        await broker.stop()  # and the one still buffered
        again = [j.descriptor for j in await dequeue(backend, Q, 10, "worker-b")]
        await backend.aclose()
        return len(out), found, again

    handed, found, again = asyncio.run(scenario())
    assert handed == 0, "nothing whose claim failed goes out"
    assert metrics.counters["broker_withheld"] == 2
    assert [state for state, _ in found] == [JobState.PENDING] * 3, "none claimed"
    assert len(again) == 3, "every job is delivered, once the broker lets go of it"


def test_claims_that_may_have_landed_before_a_retry_was_answered_are_handed_out(
    store: ShardStore, backend: ShardedBackend
) -> None:
    """A claim call that failed after its writes may have landed (its reply lost) and was tried
    again: the second answer finds the jobs no longer under the reservation (claimed by the first)
    and says so. They are handed out, as claims that may be in: withheld, they would sit
    IN_PROGRESS at no worker's hands until their claim timeout took an attempt."""
    metrics = Metrics()

    async def scenario() -> tuple[list[str], list[tuple[JobState, str | None]], int]:
        await enqueue_n(backend, 3)
        broker = DequeueBroker(backend, BrokerPolicy(100, 0, 20_000), metrics)
        hot_path = backend.hot_path
        calls = [0]

        class LostReply:  # the store's hot path, the first claim's reply lost after it landed
            def __init__(self, hot: Any) -> None:
                self._hot = hot

            def __getattr__(self, name: str) -> Any:
                return getattr(self._hot, name)

            async def claim_reserved(self, queue: str, *args: Any) -> list[int]:
                calls[0] += 1
                unclaimed = list(await self._hot.claim_reserved(queue, *args))
                if calls[0] == 1:
                    raise ShardConnectionError(store.name, "injected: reply lost", maybe_applied=True)
                return unclaimed

        backend.hot_path = lambda shard: LostReply(hot_path(shard))  # type: ignore[method-assign]
        out = [d for d, *_ in (await broker.dequeue(Q, 2, "worker-a")).to_list()]
        backend.hot_path = hot_path  # type: ignore[method-assign]
        for shard in backend.shards:
            shard.mark_healthy()
        found = states(store, out)
        await broker.stop()
        await backend.aclose()
        return out, found, calls[0]

    out, found, calls = asyncio.run(scenario())
    assert calls == 2, "tried again after the quick failure"
    assert len(out) == 2, "handed out: their claims are in"
    assert [state for state, _ in found] == [JobState.IN_PROGRESS] * 2
    assert metrics.counters.get("broker_withheld", 0) == 0
