"""The dequeue broker, the walk's known-empty hints and enqueues through the broker's server,
in process, on a real store of every kind.

A dequeue that finds the broker's buffer empty waits for a refill, unless no refill is out and
the hints say every place is empty: then a refill would make no store call, and the dequeue is
answered at once, with nothing. Jobs this server makes ready are never hidden by it (they clear
the hints), and jobs written behind its back wait no longer than the hints last, as they do for
a direct dequeue.

An enqueue through the broker's server, once a dequeue there made the queue's buffer, has the
store reserve jobs for the buffer right behind it where the store can (Redis, one server or a
master: the reserve written behind the enqueue on one connection), so the jobs are in memory
when the enqueue is answered. The other stores enqueue alone, and a refill brings the jobs.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from tests.support.hot import enqueue

from pinlater._pinlater import HandOut, NewJobBatch
from pinlater.backends.base import HotPath, JobFilter, JobState, NewJob, ShardStore
from pinlater.backends.sharded import ShardedBackend
from pinlater.backends.shardmap import Shard, ShardMap
from pinlater.broker import BrokerPolicy, DequeueBroker
from pinlater.clock import ManualClock
from pinlater.server.metrics import Metrics

Q = "hinted_broker"


@pytest.fixture
def metrics() -> Metrics:
    return Metrics()


@pytest.fixture
def backend(store: ShardStore, metrics: Metrics) -> Iterator[ShardedBackend]:
    store.create_queue(Q, 3)
    backend = ShardedBackend(ShardMap([Shard(store.name, store)]), num_priorities=3, parallelism=4, count=metrics.incr)
    # Places found empty stay known empty for a minute: long enough for any machine.
    backend.empty_recheck_ms = backend.max_empty_recheck_ms = 60_000
    yield backend
    backend._executor.shutdown(wait=True)


def bodies(out: object) -> list[bytes]:
    if isinstance(out, HandOut):
        return sorted(body for _, body, _, _ in out.to_list())
    assert out == [], out
    return []


def test_an_empty_buffer_over_known_empty_places_is_answered_without_a_refill(
    store: ShardStore, backend: ShardedBackend, metrics: Metrics
) -> None:
    async def scenario() -> None:
        broker = DequeueBroker(backend, BrokerPolicy(100, 0, 20_000), metrics)
        assert bodies(await broker.dequeue(Q, 10, "worker")) == [], "an empty queue"
        refills, calls = metrics.counters["broker_refills"], metrics.counters["dequeue_store_calls"]
        assert calls == 3, "the first dequeue looked at each priority"

        assert bodies(await broker.dequeue(Q, 10, "worker")) == []
        assert metrics.counters["broker_known_empty"] == 1, "answered from the hints"
        assert metrics.counters["broker_refills"] == refills, "no refill"
        assert metrics.counters["dequeue_store_calls"] == calls, "no store call"

        # A job made ready through this server clears the hints: the next dequeue gets it.
        now = backend.clock.now_ms()
        await enqueue(backend, Q, [NewJob(2, b"ready", now, 1)])
        assert bodies(await broker.dequeue(Q, 10, "worker")) == [b"ready"]

        # A job written behind this server's back waits for the hints to lapse, as it would
        # for a direct dequeue; once they are forgotten, it is found.
        store.enqueue_jobs(Q, [NewJob(1, b"elsewhere", now, 1)], now)
        assert bodies(await broker.dequeue(Q, 10, "worker")) == []
        backend.forget_empty()
        assert bodies(await broker.dequeue(Q, 10, "worker")) == [b"elsewhere"]
        await broker.stop()
        await backend.aclose()

    asyncio.run(scenario())


def test_an_empty_buffer_waits_for_a_refill_already_out(
    store: ShardStore, backend: ShardedBackend, metrics: Metrics
) -> None:
    async def scenario() -> None:
        broker = DequeueBroker(backend, BrokerPolicy(100, 0, 20_000), metrics)
        assert bodies(await broker.dequeue(Q, 10, "worker")) == []  # every place now known empty
        waits = metrics.counters["broker_refill_waits"]
        out = broker._refill_once(Q)  # a refill is out, as one an enqueue here starts
        assert bodies(await broker.dequeue(Q, 10, "worker")) == []
        assert await out == 0
        assert metrics.counters["broker_refill_waits"] == waits + 1, "it waited for the refill out"
        assert metrics.counters.get("broker_known_empty", 0) == 0
        await broker.stop()
        await backend.aclose()

    asyncio.run(scenario())


#: The kinds whose hot path runs an enqueue's reserve right behind it (``call_then``).
PAIRED = ("redis", "redis-compact")


def test_an_enqueue_through_the_server_fills_the_buffer_it_serves(
    request: pytest.FixtureRequest, store: ShardStore, backend: ShardedBackend, metrics: Metrics
) -> None:
    paired = request.node.callspec.params["store"] in PAIRED

    async def scenario() -> None:
        broker = DequeueBroker(backend, BrokerPolicy(100, 0, 20_000), metrics)
        now = backend.clock.now_ms()
        before = NewJobBatch([NewJob(1, b"before", now, 1)])
        await broker.enqueue(Q, before, now)  # no buffer yet: no worker dequeued here
        assert broker.buffered() == 0 and metrics.counters.get("broker_enqueue_reserved", 0) == 0
        assert bodies(await broker.dequeue(Q, 10, "worker")) == [b"before"]
        await broker.settle_queue(Q)
        refills, calls = metrics.counters["broker_refills"], metrics.counters["dequeue_store_calls"]

        batch = NewJobBatch([NewJob(1, b"job-%d" % i, now, 2) for i in range(3)])
        shard, ids = await broker.enqueue(Q, batch, now)
        assert shard == store.name and len(ids) == 3
        if paired:
            assert broker.buffered() == 3, "reserved behind the enqueue"
            assert metrics.counters["broker_enqueue_reserved"] == 3
        got = bodies(await broker.dequeue(Q, 10, "worker"))
        assert got == [b"job-0", b"job-1", b"job-2"], "every job once"
        if paired:
            assert metrics.counters["broker_refills"] == refills, "no refill"
            assert metrics.counters["dequeue_store_calls"] == calls, "no store call for the dequeue"
            assert bodies(await broker.dequeue(Q, 10, "worker")) == []
            assert metrics.counters["broker_known_empty"] == 1, "the reserve found the place drained"
        await broker.settle_queue(Q)
        assert store.count_jobs(Q, JobFilter(JobState.IN_PROGRESS, 1, 0, None), None) == 4
        assert bodies(await broker.dequeue(Q, 10, "worker")) == []
        await broker.stop()
        await backend.aclose()

    asyncio.run(scenario())


def test_an_enqueue_reserves_no_better_job_than_one_left_in_the_store(
    request: pytest.FixtureRequest, store: ShardStore, backend: ShardedBackend, metrics: Metrics
) -> None:
    """The reserve takes the batch's best priority only when every better place is known empty:
    a priority 1 job the hints do not know of is not left behind priority 2 jobs."""

    async def scenario() -> None:
        broker = DequeueBroker(backend, BrokerPolicy(100, 0, 20_000), metrics)
        assert bodies(await broker.dequeue(Q, 10, "worker")) == []  # the buffer exists
        now = backend.clock.now_ms()
        store.enqueue_jobs(Q, [NewJob(1, b"urgent", now, 1)], now)  # behind the hints' back
        backend.mark_ready(store.name, Q, (1,))  # ... and then known to this server
        await broker.enqueue(Q, NewJobBatch([NewJob(2, b"later", now, 1)]), now)
        assert metrics.counters.get("broker_enqueue_reserved", 0) == 0, "nothing reserved past priority 1"
        got = await broker.dequeue(Q, 1, "worker")
        assert bodies(got) == [b"urgent"], "the better job first"
        await broker.stop()
        await backend.aclose()

    asyncio.run(scenario())


async def _until(cond: Callable[[], bool], timeout: float = 10.0) -> None:
    """Await ``cond()``, checked at every turn of the event loop (so the caller goes on at the
    first turn it holds), for up to ``timeout`` seconds: a store call on the thread pool (PyMySQL's,
    in Python) may take many turns, which a bound in turns did not always allow under load."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() >= deadline:
            raise AssertionError("condition never met")
        await asyncio.sleep(0)


def test_a_dequeue_while_an_enqueue_reserves_still_gets_a_ready_job(
    store: ShardStore, backend: ShardedBackend, metrics: Metrics
) -> None:
    """The room an enqueue's reserve asks for is the batch's (at least a top-up), held only
    while it is out: a refill meanwhile still has room for a job another server wrote."""

    async def scenario() -> None:
        clock = backend.clock = ManualClock(backend.clock.now_ms())
        broker = DequeueBroker(backend, BrokerPolicy(100, 0, 20_000), metrics)
        assert bodies(await broker.dequeue(Q, 10, "worker")) == []  # the buffer exists
        await _until(lambda: not broker._background and not broker._refilling(Q))
        clock.advance(60_001)  # the hints lapse, with no refill woken
        now = backend.clock.now_ms()
        store.enqueue_jobs(Q, [NewJob(2, b"waiting", now, 1)], now)  # another server's job
        enqueue = asyncio.ensure_future(broker.enqueue(Q, NewJobBatch([NewJob(1, b"new", now, 1)]), now))
        await _until(lambda: Q in broker._reserving or enqueue.done())
        first = bodies(await broker.dequeue(Q, 10, "worker"))
        await enqueue
        rest = bodies(await broker.dequeue(Q, 10, "worker"))
        assert b"waiting" in first, (first, rest)
        assert sorted(first + rest) == [b"new", b"waiting"], "each once"
        await broker.stop()
        await backend.aclose()

    asyncio.run(scenario())


class _SlowAnswer:
    """A shard's hot path whose enqueue-and-reserve answers only once ``gate`` is set: the pair
    ran in the store, and the server has not read its reply yet."""

    def __init__(self, hot: HotPath) -> None:
        self._hot = hot
        self.ran = asyncio.Event()
        self.gate = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._hot, name)

    async def enqueue_and_reserve_jobs(self, *args: Any) -> Any:
        out = await self._hot.enqueue_and_reserve_jobs(*args)
        self.ran.set()
        await self.gate.wait()
        return out


@pytest.mark.parametrize("store", PAIRED, indirect=True)
def test_what_an_enqueue_reserved_for_a_buffer_dropped_meanwhile_is_released(
    store: ShardStore, backend: ShardedBackend, metrics: Metrics
) -> None:
    """A cancel through this server drops the queue's buffer (``forget``) while an enqueue's
    reserve is out; a dequeue makes a new buffer. The reserve's jobs, the cancelled one among
    them, go back to the store, not into the new buffer."""

    async def scenario() -> list[bytes]:
        clock = backend.clock = ManualClock(backend.clock.now_ms())
        broker = DequeueBroker(backend, BrokerPolicy(100, 0, 20_000), metrics)
        assert bodies(await broker.dequeue(Q, 10, "worker")) == []  # the buffer exists
        await _until(lambda: not broker._background and not broker._refilling(Q))
        clock.advance(60_001)  # the hints lapse, with no refill woken
        now = backend.clock.now_ms()
        [cancelled] = store.enqueue_jobs(Q, [NewJob(1, b"to-cancel", now, 1)], now)  # another server's
        shard = backend.shards.get(store.name)
        assert shard is not None
        slow = backend._current_hot_paths[shard] = _SlowAnswer(backend.hot_path(shard))  # type: ignore[assignment]
        enqueue = asyncio.ensure_future(broker.enqueue(Q, NewJobBatch([NewJob(1, b"new", now, 1)]), now))
        await slow.ran.wait()  # the reserve holds both
        await broker.forget(Q)  # as the handler's cancel does, around the store's cancel
        assert store.cancel_jobs(Q, [(1, cancelled)], now) == 1
        handed = bodies(await broker.dequeue(Q, 10, "worker"))  # a new buffer
        slow.gate.set()
        await enqueue
        handed += bodies(await broker.dequeue(Q, 10, "worker"))
        await broker.stop()
        await backend.aclose()
        return handed

    handed = asyncio.run(scenario())
    assert b"to-cancel" not in handed, handed
    assert b"new" in handed, "released, then found by a later look"


def test_refills_of_made_up_queues_are_not_kept(store: ShardStore, backend: ShardedBackend, metrics: Metrics) -> None:
    """A refill done is forgotten: each queue name a peer's dequeue made up kept its refill's
    task, error and traceback in the broker for good."""
    from pinlater.errors import QueueNotFoundError

    async def scenario() -> None:
        broker = DequeueBroker(backend, BrokerPolicy(100, 0, 20_000), metrics)
        for i in range(20):
            with pytest.raises(QueueNotFoundError):
                await broker.dequeue(f"junk{i}", 10, "worker")
        assert bodies(await broker.dequeue(Q, 10, "worker")) == []
        await asyncio.sleep(0)  # (a task's done callbacks run on the loop's next turn)
        assert broker._refills == {}
        assert not [queue for queue in broker._buffers if queue.startswith("junk")]
        await broker.stop()
        await backend.aclose()

    asyncio.run(scenario())
