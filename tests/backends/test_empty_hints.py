"""How often a dequeue looks at a place it found empty, on a real embedded store with a manual
clock: a backoff for places that stay empty, at once for jobs this server makes ready, at their
time for jobs it made ready for later, and one look for many concurrent dequeues."""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.hot import ack, dequeue, enqueue

from pinlater.backends.base import AckItem, CheckpointItem, NewJob
from pinlater.backends.embedded.store import EmbeddedStore
from pinlater.backends.sharded import (
    EMPTY_RECHECK_MS,
    MAX_EMPTY_RECHECK_MS,
    MAX_FUTURE_READY_TIMES,
    ShardedBackend,
)
from pinlater.backends.shardmap import Shard, ShardMap
from pinlater.clock import ManualClock
from pinlater.errors import QueueNotFoundError

Q = "hints"


@pytest.fixture
def counts() -> Counter[str]:
    return Counter()


@pytest.fixture
def backend(tmp_path: Path, counts: Counter[str]) -> Iterator[ShardedBackend]:
    store = EmbeddedStore(tmp_path, "1")
    store.create_queue(Q, 1)
    backend = ShardedBackend(
        ShardMap([Shard("1", store)]),
        num_priorities=1,
        parallelism=2,
        clock=ManualClock(),
        count=lambda name, by: counts.update({name: by}),
    )
    yield backend
    backend.close()


def looks(backend: ShardedBackend, counts: Counter[str], at_ms: list[int]) -> list[int]:
    """Dequeue once at each of these times (ms after now); the times a store call was made."""
    clock = backend.clock
    assert isinstance(clock, ManualClock)
    start, made = clock.now_ms(), []
    for t in at_ms:
        clock.advance(start + t - clock.now_ms())
        before = counts["dequeue_store_calls"]
        asyncio.run(dequeue(backend, Q, 10, "w"))
        if counts["dequeue_store_calls"] > before:
            made.append(t)
    return made


def test_a_place_that_stays_empty_is_looked_at_less_and_less(backend: ShardedBackend, counts: Counter[str]) -> None:
    every_50ms_for_10s = list(range(0, 10_000, 50))
    made = looks(backend, counts, every_50ms_for_10s)
    gaps = [b - a for a, b in itertools.pairwise(made)]
    assert gaps[:6] == [200, 400, 800, 1600, 3200, 3200], gaps  # 200 ms first, doubling, capped
    assert MAX_EMPTY_RECHECK_MS == 3200 and EMPTY_RECHECK_MS == 200
    assert counts["dequeue_store_calls_empty"] == len(made)


def test_this_servers_jobs_are_looked_for_at_once_or_at_their_time(
    backend: ShardedBackend, counts: Counter[str]
) -> None:
    clock = backend.clock
    assert isinstance(clock, ManualClock)
    backoff = [0, 200, 600, 1400, 3000]  # empty each time: the next look would be 3200 ms on

    def put(run_after_ms: int) -> None:
        job = NewJob(priority=1, body=b"job", run_after_ms=run_after_ms, attempts_allowed=2)
        asyncio.run(enqueue(backend, Q, [job]))

    assert looks(backend, counts, backoff) == backoff
    put(clock.now_ms() + 300)  # ready in 300 ms: looked for then, not on the backoff
    assert looks(backend, counts, [100, 299, 300]) == [300]
    [claimed] = asyncio.run(dequeue(backend, Q, 10, "w")) or [None]
    assert claimed is None, "the look at 300 ms claimed it"
    clock.advance(EMPTY_RECHECK_MS)  # a look that found jobs: the first wait again
    assert looks(backend, counts, backoff) == backoff
    # A failure with a retry delay (the job is claimed first): looked for when the delay is up.
    clock.advance(3_300)
    put(clock.now_ms())  # ready now: the hint is dropped at once
    [job] = asyncio.run(dequeue(backend, Q, 10, "w"))
    assert looks(backend, counts, backoff)[-1] == 3000
    asyncio.run(ack(backend, Q, failed=[("1", AckItem(1, job.job.local_id, "", 1_000))]))
    assert looks(backend, counts, [999]) == []
    clock.advance(1)
    assert [j.descriptor for j in asyncio.run(dequeue(backend, Q, 10, "w"))] == [job.descriptor]


def test_concurrent_dequeues_of_one_empty_place_make_one_store_call(
    backend: ShardedBackend, counts: Counter[str]
) -> None:
    async def many() -> list[int]:
        got = await asyncio.gather(*(dequeue(backend, Q, 10, f"w{i}") for i in range(8)))
        return [len(g) for g in got]

    assert asyncio.run(many()) == [0] * 8
    assert counts["dequeue_store_calls"] == 1, "the others waited for the first look and skipped"
    assert counts["dequeue_known_empty_skips"] == 7


def test_a_checkpoint_back_to_pending_later_is_looked_for_at_its_time(
    backend: ShardedBackend, counts: Counter[str]
) -> None:
    clock = backend.clock
    assert isinstance(clock, ManualClock)
    job = NewJob(priority=1, body=b"job", run_after_ms=clock.now_ms(), attempts_allowed=2)
    asyncio.run(enqueue(backend, Q, [job]))
    [got] = asyncio.run(dequeue(backend, Q, 10, "w"))
    clock.advance(EMPTY_RECHECK_MS)
    backoff = [0, 200, 600, 1400, 3000]  # empty each time: the next look would be 3200 ms on
    assert looks(backend, counts, backoff) == backoff
    later = clock.now_ms() + 500
    item = CheckpointItem(priority=1, local_id=got.job.local_id, run_after_ms=later, move_to_pending=True)
    assert asyncio.run(backend.checkpoint_jobs(Q, "w", [("1", item)])) == 1
    assert looks(backend, counts, [499]) == []
    clock.advance(1)
    assert [j.descriptor for j in asyncio.run(dequeue(backend, Q, 10, "w"))] == [got.descriptor]


def test_a_checkpoint_of_many_moves_gives_one_hint_a_place_and_time(
    backend: ShardedBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """10,000 moves to PENDING of one job, now or at two later times: the queue's walk is woken
    once for the place and told its two times, where each move woke the waiters and the broker
    once, on the event loop, in one request."""
    now = backend.clock.now_ms()
    woken: list[tuple[str, str, tuple[int, ...]]] = []
    mark_ready = backend.mark_ready

    def spy(shard: str, queue: str, priorities: tuple[int, ...]) -> None:
        woken.append((shard, queue, tuple(priorities)))
        mark_ready(shard, queue, priorities)

    monkeypatch.setattr(backend, "mark_ready", spy)
    moves = [("1", CheckpointItem(1, 7, now + (0, 500, 900)[i % 3], move_to_pending=True)) for i in range(10_000)]
    asyncio.run(backend.checkpoint_jobs(Q, "w", moves))
    assert woken == [("1", Q, (1,))]
    assert sorted(backend._future_ready[("1", Q, 1)]) == [now + 500, now + 900]


def test_a_checkpoint_of_many_later_times_hints_the_earliest(backend: ShardedBackend) -> None:
    """Moves to PENDING at more distinct later times than a place keeps (MAX_FUTURE_READY_TIMES)
    hint the earliest of them, whatever their order in the request: the first met were kept, so
    a job due sooner, later in the request, waited for the walk to look there at a later time."""
    now = backend.clock.now_ms()
    times = [now + 10_000 - 10 * i for i in range(3 * MAX_FUTURE_READY_TIMES)]  # latest first
    moves = [("1", CheckpointItem(1, 7, t, move_to_pending=True)) for t in times]
    asyncio.run(backend.checkpoint_jobs(Q, "w", moves))
    assert sorted(backend._future_ready[("1", Q, 1)]) == sorted(times)[:MAX_FUTURE_READY_TIMES]


def test_acks_of_made_up_shards_are_ignored_in_one_line_and_leave_no_hint(
    backend: ShardedBackend, caplog: pytest.LogCaptureFixture
) -> None:
    """Any name is a descriptor's shard on the wire: 500 failures of as many made-up shards, each
    with a retry delay, used to log a line each and keep a hint each for good (where the job
    would come back), a peer's names growing the server without bound; so did a checkpoint's
    move to PENDING."""
    [real] = asyncio.run(enqueue(backend, Q, [NewJob(1, b"x", 0, 2)]))
    made_up = [(f"nope{i}", AckItem(1, i, "", 60_000)) for i in range(500)]
    with caplog.at_level("WARNING", logger="pinlater.backends.sharded"):
        asyncio.run(ack(backend, Q, failed=made_up))
    (line,) = [r.getMessage() for r in caplog.records if "unknown shard" in r.getMessage()]
    assert line == "ack names 500 unknown shard(s) ('nope0', ...); ignored (500 jobs)"
    moves = [("nope-too", CheckpointItem(1, 7, 60_000, move_to_pending=True))]
    assert asyncio.run(backend.checkpoint_jobs(Q, "w", moves)) == 0
    assert not any(place[0].startswith("nope") for place in backend._future_ready)
    assert [job.descriptor for job in asyncio.run(dequeue(backend, Q, 10, "w"))] == [real]


def test_acks_and_checkpoints_of_a_made_up_queue_leave_no_hint(backend: ShardedBackend) -> None:
    """The queue's name is the peer's too: failures with a retry delay and moves to PENDING of a
    queue the store does not have are refused (QUEUE_NOT_FOUND), and kept a hint per queue name
    and priority for good before (about 300 bytes a name, from a request of a hundred)."""
    for i in range(50):
        with pytest.raises(QueueNotFoundError):
            asyncio.run(ack(backend, f"junk{i}", failed=[("1", AckItem(p, 1, "", 60_000)) for p in (1, 2, 3)]))
        move = CheckpointItem(1, 7, backend.clock.now_ms() + 60_000, move_to_pending=True)
        with pytest.raises(QueueNotFoundError):
            asyncio.run(backend.checkpoint_jobs(f"junkc{i}", "w", [("1", move)]))
    assert not any(place[1].startswith("junk") for place in backend._future_ready)
    # A queue that exists still gets its hint.
    assert len(asyncio.run(enqueue(backend, Q, [NewJob(1, b"x", backend.clock.now_ms(), 2)]))) == 1
    [claimed] = asyncio.run(dequeue(backend, Q, 10, "w"))
    asyncio.run(ack(backend, Q, failed=[("1", AckItem(1, claimed.job.local_id, "", 60_000))]))
    assert ("1", Q, 1) in backend._future_ready


def test_acks_of_priorities_past_the_walks_leave_no_hint(backend: ShardedBackend) -> None:
    """The walk visits priorities 1..num_priorities only: a hint for p4 to p127 (a descriptor
    says any) was never taken back, 64 ready times a place kept for good."""
    failed = [("1", AckItem(p, 1, "", 60_000)) for p in range(2, 128)]
    asyncio.run(ack(backend, Q, failed=failed))
    move = [("1", CheckpointItem(p, 7, backend.clock.now_ms() + 60_000, move_to_pending=True)) for p in (2, 50)]
    asyncio.run(backend.checkpoint_jobs(Q, "w", move))
    assert not [place for place in backend._future_ready if place[2] > backend.num_priorities]


def test_a_lookup_asks_each_job_once_and_names_a_bounded_number_of_places(
    backend: ShardedBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One descriptor 100,000 times with its body made a store reply of 100,000 bodies; 100,000
    descriptors of as many made-up queues started as many store calls at once."""
    from pinlater.backends import sharded
    from pinlater.errors import PinLaterError

    [descriptor] = asyncio.run(enqueue(backend, Q, [NewJob(1, b"body", 0, 1)]))
    store = backend.shards.all()[0].store
    asked: list[int] = []
    in_flight, most = [0], [0]
    real = store.lookup_jobs

    def spy(queue: str, keys: list[tuple[int, int]], include_body: bool, max_body_bytes: int | None = None) -> object:
        asked.append(len(keys))
        in_flight[0] += 1
        most[0] = max(most[0], in_flight[0])
        try:
            return real(queue, keys, include_body, max_body_bytes)
        finally:
            in_flight[0] -= 1

    monkeypatch.setattr(store, "lookup_jobs", spy)
    found = asyncio.run(backend.lookup_jobs([descriptor] * 5_000, True))
    assert list(found) == [descriptor] and found[descriptor].body == b"body"
    assert asked == [1], "the job looked up once"

    asked.clear()
    monkeypatch.setattr(sharded, "MAX_LOOKUP_PAIRS", 40)
    made_up = [f"q{i}:s1:p1:1" for i in range(40)]
    assert asyncio.run(backend.lookup_jobs(made_up, False)) == {}
    assert len(asked) == 40 and most[0] <= sharded.LOOKUP_CALLS_AT_ONCE
    asked.clear()
    with pytest.raises(PinLaterError, match=r"41 \(queue, shard\) pairs; a lookup takes at most 40"):
        asyncio.run(backend.lookup_jobs([*made_up, "q40:s1:p1:1"], False))
    assert asked == [], "refused before any store call"


def test_a_deleted_queue_is_not_answered_empty_from_its_hints(backend: ShardedBackend) -> None:
    """A dequeue of a queue this server found empty, then deleted, asks the store again (and is
    QUEUE_NOT_FOUND), where the hint answered it empty for up to MAX_EMPTY_RECHECK_MS."""
    assert asyncio.run(dequeue(backend, Q, 10, "w")) == []  # the place is known empty now
    assert ("1", Q, 1) in backend._empty_until
    asyncio.run(backend.delete_queue(Q))
    assert not [place for place in backend._empty_until if place[1] == Q]
    with pytest.raises(QueueNotFoundError):
        asyncio.run(dequeue(backend, Q, 10, "w"))
