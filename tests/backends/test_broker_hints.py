"""The dequeue broker and the walk's known-empty hints, in process, on a real store of every kind.

A dequeue that finds the broker's buffer empty waits for a refill, unless no refill is out and
the hints say every place is empty: then a refill would make no store call, and the dequeue is
answered at once, with nothing. Jobs this server makes ready are never hidden by it (they clear
the hints), and jobs written behind its back wait no longer than the hints last, as they do for
a direct dequeue.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from tests.support.hot import enqueue

from pinlater._pinlater import HandOut
from pinlater.backends.base import NewJob, ShardStore
from pinlater.backends.sharded import ShardedBackend
from pinlater.backends.shardmap import Shard, ShardMap
from pinlater.broker import BrokerPolicy, DequeueBroker
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
