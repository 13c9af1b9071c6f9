"""Descriptors whose priority is past a queue's levels, and queues with more levels than the
server, through ``ShardedBackend`` on a real store of every kind.

A descriptor may name any priority up to 127. One the queue has no place for names no job:
acking, checkpointing or cancelling it changes nothing, as for any job not IN_PROGRESS, and the
jobs named beside it are served (a MySQL queue has no table for it, and the whole call failed
with QUEUE_NOT_FOUND: a worker whose dequeues carried such an ack could dequeue no more). But a
queue may have more levels than this server (made by another, or before a rollout lowered
``NUM_PRIORITY_LEVELS``): its jobs of the higher ones are acked, checkpointed and cancelled here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from tests.support.hot import dequeue, enqueue, one_shard

from pinlater._pinlater import AckGroup, encode_descriptors
from pinlater.backends.base import CheckpointItem, JobState, NewJob, ShardStore
from pinlater.backends.sharded import ShardedBackend

Q = "past_levels"
WIDE = "five_levels"


@pytest.fixture
def backend(store: ShardStore) -> Iterator[ShardedBackend]:
    with one_shard(store, Q) as backend:
        yield backend


def test_acks_checkpoints_and_cancels_past_the_levels_change_nothing(
    store: ShardStore, backend: ShardedBackend
) -> None:
    async def scenario() -> None:
        now = backend.clock.now_ms()
        await enqueue(backend, Q, [NewJob(1, b"job-%d" % i, now, 2) for i in range(3)])
        first, second, third = await dequeue(backend, Q, 3, "worker")
        past = (9, first.job.local_id, "", 0)

        await backend.ack_jobs(Q, [(store.name, AckGroup([past, (1, first.job.local_id, "", 0)], [past]))], ())
        carried = [(store.name, AckGroup([past, (1, second.job.local_id, "", 0)], []))]
        assert await dequeue_with(backend, carried) == []
        put_back = [(store.name, CheckpointItem(p, third.job.local_id, now, True)) for p in (9, 1)]
        assert await backend.checkpoint_jobs(Q, "worker", put_back) == 1
        assert await backend.cancel_jobs(Q, [f"{Q}:s{store.name}:p9:{third.job.local_id}"]) == 0

        found = await backend.lookup_jobs([first.descriptor, second.descriptor, third.descriptor], False)
        states = [found[d].state for d in (first.descriptor, second.descriptor, third.descriptor)]
        assert states == [JobState.SUCCEEDED, JobState.SUCCEEDED, JobState.PENDING]
        await backend.aclose()

    asyncio.run(scenario())


async def dequeue_with(backend: ShardedBackend, acks: list[tuple[str, AckGroup]]) -> list[object]:
    """A dequeue carrying ``acks`` (successes), as the server sends one; its jobs."""
    return [j for batch in await backend.dequeue_jobs(Q, 5, "worker", acks=acks) for j in batch.jobs.to_list()]


def test_a_job_of_a_priority_past_this_servers_levels_is_acked_where_the_queue_has_it(
    store: ShardStore, backend: ShardedBackend
) -> None:
    """A server with fewer levels than the queue (a rollout that lowers NUM_PRIORITY_LEVELS, a
    queue another server made) still acks, checkpoints and cancels its jobs of the higher ones."""

    async def scenario() -> None:
        now = backend.clock.now_ms()
        store.create_queue(WIDE, 5)
        fourth, done, cancelled = store.enqueue_jobs(WIDE, [NewJob(4, b"p4-%d" % i, now, 2) for i in range(3)], now)
        assert [j.local_id for j in store.dequeue_jobs(WIDE, 4, 2, "worker|x", now, False)] == [fourth, done]
        [d4, d_done, d_cancelled] = encode_descriptors(WIDE, store.name, [4, 4, 4], [fourth, done, cancelled])
        await backend.ack_jobs(WIDE, [(store.name, AckGroup([(4, done, "", 0)], []))], ())
        put_back = [(store.name, CheckpointItem(4, fourth, now, True))]
        assert await backend.checkpoint_jobs(WIDE, "worker", put_back) == 1
        assert await backend.cancel_jobs(WIDE, [d_cancelled]) == 1
        found = await backend.lookup_jobs([d4, d_done, d_cancelled], False)
        assert [found[d].state for d in (d4, d_done, d_cancelled)] == [
            JobState.PENDING,
            JobState.SUCCEEDED,
            JobState.FAILED,
        ]
        await backend.aclose()

    asyncio.run(scenario())
