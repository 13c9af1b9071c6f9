"""The dequeue walk's empty hints under a queue's rules, in process, on a real store of every kind.

A capped store answers fewer jobs than asked while jobs are ready (the cap is reached), which the
walk takes for an empty place and skips for a while (``EMPTY_RECHECK_MS``, doubling up to
``MAX_EMPTY_RECHECK_MS``). An ack on this server frees room, so it must make the walk look again
at once, every priority (room is the queue's, not a priority's).

(The embedded and Redis kinds pass once their stores keep ``set_queue_rules``.)
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from tests.support.hot import ack, dequeue, enqueue

from pinlater.backends.base import AckItem, CheckpointItem, JobState, KeyedJob, NewJob, QueueRules, ShardStore
from pinlater.backends.sharded import ShardedBackend
from pinlater.backends.shardmap import Shard, ShardMap
from pinlater.clock import ManualClock
from pinlater.monitor import Monitor, MonitorPolicy
from pinlater.server.metrics import Metrics

Q = "capped_hints"


@pytest.fixture
def backend(store: ShardStore) -> Iterator[ShardedBackend]:
    store.create_queue(Q, 3)
    clock = ManualClock()
    backend = ShardedBackend(ShardMap([Shard(store.name, store)]), num_priorities=3, parallelism=4, clock=clock)
    yield backend
    backend._executor.shutdown(wait=True)


def test_an_ack_under_a_cap_makes_the_walk_look_again(store: ShardStore, backend: ShardedBackend) -> None:
    async def scenario() -> None:
        now = backend.clock.now_ms()
        await enqueue(backend, Q, [NewJob(2, b"job-%d" % i, now, 2) for i in range(3)])
        backend.set_queue_rules({Q: QueueRules(max_in_progress=1)})
        (first,) = await dequeue(backend, Q, 5, "worker")
        for _ in range(3):  # at the cap: nothing, and the place is taken for empty, longer each time
            assert await dequeue(backend, Q, 5, "worker") == []
        await ack(backend, Q, succeeded=[(store.name, AckItem(2, first.job.local_id))])
        got = await dequeue(backend, Q, 5, "worker")  # the clock has not moved: only the ack tells
        assert len(got) == 1, "room came back with the ack, and jobs are ready"
        await backend.aclose()

    asyncio.run(scenario())


@pytest.mark.parametrize("how", ["ack", "delete"])
def test_an_ack_or_a_delete_in_a_group_makes_the_walk_look_again(
    store: ShardStore, backend: ShardedBackend, how: str
) -> None:
    """The group's next job moves up when the one before it is acked or deleted (IN_PROGRESS):
    this server made it ready itself, so it is seen at once, not once the walk's empty hint runs
    out (up to 3.2 s; a delete did not end it)."""
    if store.groups_refused is not None:
        pytest.skip(f"this store refuses ordered groups: {store.groups_refused}")

    async def scenario() -> None:
        now = backend.clock.now_ms()
        jobs = [NewJob(2, b"job-%d" % i, now, 2) for i in range(2)]
        await backend.enqueue_keyed_jobs(Q, jobs, [(None, 0, "g", None)] * 2, now)
        (first,) = await dequeue(backend, Q, 5, "worker")
        for _ in range(3):  # the group's next job waits on the first: the place looks empty
            assert await dequeue(backend, Q, 5, "worker") == []
        if how == "ack":
            await ack(backend, Q, succeeded=[(store.name, AckItem(2, first.job.local_id))])
        else:
            assert await backend.delete_jobs(Q, JobState.IN_PROGRESS, 2, None, 10) == 1
        got = await dequeue(backend, Q, 5, "worker")  # the clock has not moved: only the change tells
        assert [j.job.body for j in got] == [b"job-1"], f"the {how} promoted the group's next job"
        await backend.aclose()

    asyncio.run(scenario())


def test_a_cancel_in_a_group_makes_the_walk_look_again(store: ShardStore, backend: ShardedBackend) -> None:
    """The group's active job waits for its retry; cancelled, it ends, and the next job moves up
    and is due now: seen at once, not once the walk's empty hint runs out."""
    if store.groups_refused is not None:
        pytest.skip(f"this store refuses ordered groups: {store.groups_refused}")

    async def scenario() -> None:
        now = backend.clock.now_ms()
        jobs = [NewJob(2, b"job-%d" % i, now, 2) for i in range(2)]
        placed = await backend.enqueue_keyed_jobs(Q, jobs, [(None, 0, "g", None)] * 2, now)
        (first,) = await dequeue(backend, Q, 5, "worker")
        await ack(backend, Q, failed=[(store.name, AckItem(2, first.job.local_id, "", 60_000))])
        for _ in range(3):  # the first waits for its retry, the second behind it: the place looks empty
            assert await dequeue(backend, Q, 5, "worker") == []
        assert await backend.cancel_jobs(Q, [placed[0][0]]) == 1
        got = await dequeue(backend, Q, 5, "worker")  # the clock has not moved: only the cancel tells
        assert [j.job.body for j in got] == [b"job-1"], "the cancel promoted the group's next job"
        await backend.aclose()

    asyncio.run(scenario())


def test_a_checkpoint_back_to_pending_under_a_cap_makes_the_walk_look_again(
    store: ShardStore, backend: ShardedBackend
) -> None:
    """At the cap, a job checkpointed back to PENDING (to run later) gives its room back: the
    queue's other ready job is seen at once, not once the walk's empty hint runs out."""

    async def scenario() -> None:
        now = backend.clock.now_ms()
        await enqueue(backend, Q, [NewJob(2, b"job-%d" % i, now, 2) for i in range(2)])
        backend.set_queue_rules({Q: QueueRules(max_in_progress=1)})
        (first,) = await dequeue(backend, Q, 5, "worker")
        for _ in range(3):  # at the cap: nothing, and the place is taken for empty
            assert await dequeue(backend, Q, 5, "worker") == []
        put_back = [(store.name, CheckpointItem(2, first.job.local_id, now + 3_600_000, True))]
        assert await backend.checkpoint_jobs(Q, "worker", put_back) == 1
        got = await dequeue(backend, Q, 5, "worker")  # the clock has not moved: only the checkpoint tells
        assert [j.job.body for j in got] == [b"job-1"], "the checkpoint gave the cap's room back"
        await backend.aclose()

    asyncio.run(scenario())


def test_a_raised_cap_makes_the_walk_look_again(store: ShardStore, backend: ShardedBackend) -> None:
    async def scenario() -> None:
        now = backend.clock.now_ms()
        await enqueue(backend, Q, [NewJob(3, b"job-%d" % i, now, 2) for i in range(3)])
        backend.set_queue_rules({Q: QueueRules(max_in_progress=1)})
        assert len(await dequeue(backend, Q, 5, "worker")) == 1
        for _ in range(3):
            assert await dequeue(backend, Q, 5, "worker") == []
        backend.set_queue_rules({Q: QueueRules(max_in_progress=2)})  # a queue config reload
        assert len(await dequeue(backend, Q, 5, "worker")) == 1, "the new room is used at once"
        backend.set_queue_rules({})  # the cap removed
        assert len(await dequeue(backend, Q, 5, "worker")) == 1
        await backend.aclose()

    asyncio.run(scenario())


def test_groups_another_server_enqueued_are_known_after_a_monitor_pass(
    store: ShardStore, backend: ShardedBackend
) -> None:
    """A server that did not enqueue a queue's grouped jobs (another one did, or it restarted)
    learns from its monitor that the queue holds groups, so its own acks end the hints there."""
    if store.groups_refused is not None:
        pytest.skip(f"this store refuses ordered groups: {store.groups_refused}")
    now = backend.clock.now_ms()
    store.enqueue_keyed_jobs(Q, [KeyedJob(NewJob(2, b"job-%d" % i, now, 2), None, 0, "g") for i in range(2)], now)
    monitor = Monitor(backend, MonitorPolicy(3600, 100, 3_600_000, 3_600_000, 3_600_000), Metrics())

    async def scenario() -> None:
        (first,) = await dequeue(backend, Q, 5, "worker")
        for _ in range(3):
            assert await dequeue(backend, Q, 5, "worker") == []
        await monitor.run_once()
        await ack(backend, Q, succeeded=[(store.name, AckItem(2, first.job.local_id))])
        got = await dequeue(backend, Q, 5, "worker")  # the clock has not moved: only the ack tells
        assert [j.job.body for j in got] == [b"job-1"], "the ack ended the hints: the monitor saw the group"
        await backend.aclose()

    asyncio.run(scenario())
