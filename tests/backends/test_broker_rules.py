"""The dequeue broker and a queue's ``maxInProgress``, in process, on a real store of every kind.

The broker hands jobs out from its buffer before their claims are written, so a claim the cap
cuts would leave a worker running a job the store still holds as PENDING (to be delivered again,
and past the cap meanwhile). A capped queue is therefore dequeued directly, not through the
buffer, and the broker keeps no reservation of it.

(The embedded and Redis kinds pass once their stores keep ``set_queue_rules``.)
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from tests.support.hot import enqueue

from pinlater._pinlater import HandOut
from pinlater.backends.base import JobFilter, JobState, NewJob, QueueRules, ShardStore
from pinlater.backends.sharded import ShardedBackend
from pinlater.backends.shardmap import Shard, ShardMap
from pinlater.broker import BrokerPolicy, DequeueBroker
from pinlater.server.metrics import Metrics

Q = "capped_broker"


@pytest.fixture
def backend(store: ShardStore) -> Iterator[ShardedBackend]:
    store.create_queue(Q, 3)
    backend = ShardedBackend(ShardMap([Shard(store.name, store)]), num_priorities=3, parallelism=4)
    yield backend
    backend._executor.shutdown(wait=True)


def handed(out: object) -> int:
    if isinstance(out, HandOut):
        return len(out)
    assert isinstance(out, list)
    return sum(len(batch.jobs) for batch in out)


def test_a_capped_queue_is_never_handed_out_past_its_cap(store: ShardStore, backend: ShardedBackend) -> None:
    metrics = Metrics()

    async def scenario() -> None:
        now = backend.clock.now_ms()
        # Jobs of two priorities: one refill walks both, each reservation within the room.
        jobs = [NewJob(priority, b"job-%d" % i, now, 2) for priority in (1, 2) for i in range(3)]
        await enqueue(backend, Q, jobs)
        backend.set_queue_rules({Q: QueueRules(max_in_progress=2)})
        broker = DequeueBroker(backend, BrokerPolicy(100, 0, 20_000), metrics)
        assert handed(await broker.dequeue(Q, 5, "worker-a")) == 2, "no more jobs handed out than the cap"
        await broker.settle_queue(Q)
        assert sum(store.count_jobs(Q, JobFilter(JobState.IN_PROGRESS, p, 0, None), None) for p in (1, 2)) == 2
        assert handed(await broker.dequeue(Q, 5, "worker-c")) == 0, "at the cap"
        assert broker.buffered() == 0, "nothing of a capped queue is held in reserve"
        await broker.stop()
        await backend.aclose()

    asyncio.run(scenario())
    assert metrics.counters.get("broker_lapsed", 0) == 0, "no job handed out went unclaimed"


def test_a_cap_set_later_releases_what_the_broker_holds(store: ShardStore, backend: ShardedBackend) -> None:
    metrics = Metrics()
    ready = JobFilter(JobState.PENDING, 1, 0, None)

    async def scenario() -> None:
        now = backend.clock.now_ms()
        await enqueue(backend, Q, [NewJob(1, b"job-%d" % i, now, 2) for i in range(6)])
        broker = DequeueBroker(backend, BrokerPolicy(100, 0, 20_000), metrics)
        assert handed(await broker.dequeue(Q, 1, "worker-a")) == 1
        await broker.settle_queue(Q)
        assert broker.buffered() == 5, "the rest reserved ahead of demand"
        backend.set_queue_rules({Q: QueueRules(max_in_progress=3)})  # a reload caps the queue
        got = await broker.dequeue(Q, 5, "worker-b")
        assert handed(got) == 2, "the reservations were handed back and the cap holds"
        assert broker.buffered() == 0
        await broker.settle_queue(Q)
        assert store.count_jobs(Q, ready, None) == 3
        await broker.stop()
        await backend.aclose()

    asyncio.run(scenario())
    assert metrics.counters.get("broker_lapsed", 0) == 0
