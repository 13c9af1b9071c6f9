"""A dequeue's byte budget, on every backend: a store call takes jobs while the bodies it took
hold fewer bytes than it was given (``within_bytes``; its first job always), through the
blocking store and the hot path the server uses, for claims, dry runs and reservations; and
the walk over shards and priorities stops once the request's budget is spent.

(300 jobs of 2 MiB asked for at once grew a server by 2.5 GB for a reply its client refused.)
"""

from __future__ import annotations

import asyncio

from pinlater._pinlater import AckGroup, ClaimedJobs, HandOut
from pinlater.backends.base import (
    DEQUEUE_BYTES,
    AckItem,
    ClaimedJob,
    JobFilter,
    JobState,
    NewJob,
    ShardStore,
    within_bytes,
)
from pinlater.backends.sharded import ShardedBackend
from pinlater.backends.shardmap import Shard, ShardMap
from pinlater.broker import BrokerPolicy, DequeueBroker
from pinlater.server.metrics import Metrics

Q = "bytes_q"
T0 = 1_700_000_000_000
BODY = 1000  # bytes per job


def body(i: int) -> bytes:
    return (b"%04d" % i) * (BODY // 4)


def ids_of(jobs: list[ClaimedJob] | ClaimedJobs) -> list[int]:
    if isinstance(jobs, ClaimedJobs):
        return [j[0] for j in jobs.to_list()]
    return [j.local_id for j in jobs]


def test_within_bytes_takes_while_under_the_budget_and_always_the_first() -> None:
    assert within_bytes([4, 4, 4], 8) == 2
    assert within_bytes([4, 4, 4], 9) == 3
    assert within_bytes([100, 1], 8) == 1
    assert within_bytes([], 8) == 0


def test_each_store_call_stops_at_its_byte_budget(store: ShardStore) -> None:
    store.create_queue(Q, 2)
    ids = store.enqueue_jobs(Q, [NewJob(1, body(i), T0, 3) for i in range(12)], T0)
    shard = Shard(store.name, store)
    backend = ShardedBackend(ShardMap([shard]), num_priorities=2, parallelism=2)

    # A dry run shows what fits, and changes nothing.
    peeked = store.dequeue_jobs(Q, 1, 12, "", T0, True, 2500)
    assert ids_of(peeked) == ids[:3], "1000, 2000 under 2500: the third goes too, then no more"

    claimed = store.dequeue_jobs(Q, 1, 12, "claim|a", T0, False, 2500)
    assert ids_of(claimed) == ids[:3] and [j.body for j in claimed] == [body(i) for i in range(3)]

    async def hot_calls() -> tuple[ClaimedJobs, ClaimedJobs, ClaimedJobs, ClaimedJobs]:
        hot = backend.hot_path(shard)
        dry = await hot.dequeue_jobs(Q, 1, 12, "", T0, True, 1500)
        alone = await hot.dequeue_jobs(Q, 1, 12, "claim|b", T0, False, 1)
        acks = AckGroup([AckItem(1, i) for i in ids[:3]], [])
        with_acks = await hot.ack_and_dequeue_jobs(Q, acks, 1, 12, "claim|c", T0, 2001)
        reserved = await hot.reserve_jobs(Q, 1, 12, "~r|bytes", T0, 60_000, 1500)
        await backend.aclose()
        return dry, alone, with_acks, reserved

    dry, alone, with_acks, reserved = asyncio.run(hot_calls())
    backend._executor.shutdown(wait=True)
    assert ids_of(dry) == ids[3:5] and dry.body_bytes == 2 * BODY
    assert ids_of(alone) == [ids[3]], "a budget below one body still takes the first job"
    assert ids_of(with_acks) == ids[4:7], "2000 < 2001: a third job"
    # (a reservation takes equal run-afters in any order: the original Redis layout's text order)
    assert len(reserved) == 2 and set(ids_of(reserved)) < set(ids[7:])
    left = store.reserve_jobs(Q, 1, 12, "~r|bytes2", T0, 60_000, 1)
    assert len(left) == 1 and set(ids_of(left)) < set(ids[7:]) - set(ids_of(reserved))

    states = {r.local_id: r.state for r in store.lookup_jobs(Q, [(1, i) for i in ids], False)}
    assert [states[i] for i in ids] == (
        [JobState.SUCCEEDED] * 3 + [JobState.IN_PROGRESS] * 4 + [JobState.PENDING] * 5
    ), "jobs past a budget are left as they were"
    rest = store.dequeue_jobs(Q, 1, 12, "claim|d", T0, False)
    held = set(ids_of(reserved)) | set(ids_of(left))
    assert ids_of(rest) == [i for i in ids[7:] if i not in held], "held jobs wait; a later call claims the rest"


def test_a_dequeue_walk_stops_once_its_budget_is_spent(store: ShardStore) -> None:
    store.create_queue(Q, 2)
    first = store.enqueue_jobs(Q, [NewJob(1, body(i), T0, 3) for i in range(3)], T0)
    second = store.enqueue_jobs(Q, [NewJob(2, body(i), T0, 3) for i in range(3)], T0)
    shard = Shard(store.name, store)
    backend = ShardedBackend(ShardMap([shard]), num_priorities=2, parallelism=2)

    async def walks() -> tuple[list[tuple[int, list[int]]], list[tuple[int, list[int]]]]:
        limited = await backend.dequeue_jobs(Q, 10, "src", max_bytes=4 * BODY)
        rest = await backend.dequeue_jobs(Q, 10, "src", max_bytes=DEQUEUE_BYTES)
        await backend.aclose()
        return ([(b.priority, ids_of(b.jobs)) for b in limited], [(b.priority, ids_of(b.jobs)) for b in rest])

    limited, rest = asyncio.run(walks())
    backend._executor.shutdown(wait=True)
    # priority 1 took 3000 bytes; priority 2's call was given the 1000 left: one job
    assert limited == [(1, first), (2, second[:1])]
    assert rest == [(2, second[1:])], "the place the budget stopped at was not taken for empty"


def test_the_broker_buffer_and_its_hand_outs_are_bounded_in_bytes(store: ShardStore) -> None:
    store.create_queue(Q, 1)
    store.enqueue_jobs(Q, [NewJob(1, body(i), T0, 3) for i in range(10)], T0)
    backend = ShardedBackend(ShardMap([Shard(store.name, store)]), num_priorities=1, parallelism=2)

    async def scenario() -> tuple[list[int], int, list[int], int]:
        # room for 100 jobs, but bodies of 2500 bytes: a refill takes three (two are 2000)
        broker = DequeueBroker(backend, BrokerPolicy(100, 0, 60_000, buffer_bytes=2500), Metrics())
        first = await broker.dequeue(Q, 10, "worker", 1500)
        assert isinstance(first, HandOut)
        await wait_idle(broker)
        buffer = broker.buffer(Q)
        held = (len(buffer), buffer.bytes)
        sizes = [len(b) for _, b, _, _ in first.to_list()]
        later = await broker.dequeue(Q, 10, "worker", DEQUEUE_BYTES)
        assert isinstance(later, HandOut)
        later_sizes = [len(b) for _, b, _, _ in later.to_list()]
        await broker.stop()
        await backend.aclose()
        return sizes, held[1], later_sizes, held[0]

    sizes, held_bytes, later_sizes, held = asyncio.run(scenario())
    backend._executor.shutdown(wait=True)
    assert sizes == [BODY, BODY], "1000 < 1500: two jobs handed out, then no more"
    # the refill reserved three (2000 < 2500), two went out, and the top-up behind the hand-out
    # reserved two more (its room: 1500)
    assert (held, held_bytes) == (3, 3 * BODY), "the buffer holds a few jobs, not a hundred"
    assert later_sizes and sum(later_sizes[:-1]) < 2500, "what the refills reserved, bounded"
    in_progress = store.count_jobs(Q, JobFilter(JobState.IN_PROGRESS, 1, T0, None), None)
    assert in_progress == len(sizes) + len(later_sizes)


async def wait_idle(broker: DequeueBroker) -> None:
    """Until the broker's background refills are done (the next dequeue then sees their jobs)."""
    while pending := [t for t in (*broker._refills.values(), *broker._background) if not t.done()]:
        await asyncio.gather(*pending, return_exceptions=True)
