"""A queue that exists on only some shards, through ``ShardedBackend`` over three real embedded
shards: reads treat a shard without the queue as holding none of its jobs, the queue is missing
only when no shard has it, the dequeue's empty-place hints remember such a shard like any empty
place, and ``create_missing_queues`` puts the queue on the shards that take new jobs.

End to end on Redis and MySQL, with the original's data layouts: ``tests/server/test_partial_queues_server.py``.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.hot import dequeue, enqueue

from pinlater.backends.base import JobFilter, JobState, NewJob
from pinlater.backends.embedded.store import EmbeddedStore
from pinlater.backends.reload import create_missing_queues
from pinlater.backends.sharded import MAX_EMPTY_RECHECK_MS, ShardedBackend
from pinlater.backends.shardmap import Shard, ShardMap
from pinlater.broker import BrokerPolicy, DequeueBroker
from pinlater.clock import ManualClock
from pinlater.errors import QueueNotFoundError, ShardConnectionError
from pinlater.server.metrics import Metrics

Q = "part"
PRIORITIES = 3
HOUR = 3_600_000


@pytest.fixture
def counts() -> Counter[str]:
    return Counter()


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[dict[str, EmbeddedStore]]:
    """Three shards; the queue is on shard 2 only, with jobs in every state it reads."""
    shards = {name: EmbeddedStore(tmp_path, name) for name in ("1", "2", "3")}
    yield shards
    for store in shards.values():
        store.close()


def make_backend(stores: dict[str, EmbeddedStore], counts: Counter[str], dequeue_only: str = "") -> ShardedBackend:
    return ShardedBackend(
        ShardMap(Shard(name, store, name == dequeue_only) for name, store in stores.items()),
        num_priorities=PRIORITIES,
        parallelism=4,
        clock=ManualClock(),
        count=lambda name, by: counts.update({name: by}),
    )


@pytest.fixture
def backend(stores: dict[str, EmbeddedStore], counts: Counter[str]) -> Iterator[ShardedBackend]:
    backend = make_backend(stores, counts)
    on_2 = stores["2"]
    on_2.create_queue(Q, PRIORITIES)
    now = backend.clock.now_ms()
    on_2.enqueue_jobs(Q, [NewJob(1, b"a", now - 10, 2), NewJob(1, b"b", now - 5, 2), NewJob(3, b"c", now, 1)], now)
    on_2.enqueue_jobs(Q, [NewJob(2, b"later", now + 60_000, 2)], now)
    yield backend
    backend.close()


def run(coro: object) -> object:
    return asyncio.run(coro)  # type: ignore[arg-type]


def test_reads_see_the_jobs_of_the_one_shard_that_has_the_queue(backend: ShardedBackend) -> None:
    async def scenario() -> None:
        assert await backend.get_queue_names() == {Q}
        assert await backend.count_jobs(Q, JobState.PENDING, None, False, None) == 3
        assert await backend.count_jobs(Q, JobState.PENDING, 2, True, None) == 1
        assert await backend.count_jobs(Q, JobState.PENDING, None, False, "^b$") == 1
        scanned = await backend.scan_jobs(Q, JobState.PENDING, None, False, 10, None)
        assert [d for d, _ in scanned] == [f"{Q}:s2:p3:3", f"{Q}:s2:p1:2", f"{Q}:s2:p1:1"]
        looked = await backend.lookup_jobs([f"{Q}:s2:p1:1", f"{Q}:s1:p1:1", f"{Q}:s3:p1:1"], True)
        assert list(looked) == [f"{Q}:s2:p1:1"] and looked[f"{Q}:s2:p1:1"].body == b"a"

        dry = await dequeue(backend, Q, 10, "w", dry_run=True)
        assert [j.descriptor for j in dry] == [f"{Q}:s2:p1:1", f"{Q}:s2:p1:2", f"{Q}:s2:p3:3"]
        got = await dequeue(backend, Q, 10, "w")
        assert [j.descriptor for j in got] == [j.descriptor for j in dry]
        assert await backend.count_jobs(Q, JobState.IN_PROGRESS, None, False, None) == 3
        assert await dequeue(backend, Q, 10, "w") == []

        backend.clock.advance(60_000)  # type: ignore[attr-defined]
        [later] = await dequeue(backend, Q, 10, "w", dry_run=True)
        assert later.descriptor == f"{Q}:s2:p2:4"
        assert await backend.delete_jobs(Q, JobState.PENDING, 2, None, 10) == 1
        assert await backend.retry_failed_jobs(Q, 1, 2, None, 10) == 0

    run(scenario())


def test_the_queue_is_missing_only_when_no_shard_has_it(backend: ShardedBackend) -> None:
    async def scenario() -> None:
        for _ in range(2):  # nothing is remembered about a queue no shard has
            with pytest.raises(QueueNotFoundError):
                await dequeue(backend, "nope", 10, "w")
        with pytest.raises(QueueNotFoundError):
            await dequeue(backend, "nope", 10, "w", dry_run=True)
        with pytest.raises(QueueNotFoundError):
            await backend.count_jobs("nope", JobState.PENDING, None, False, None)
        with pytest.raises(QueueNotFoundError):
            await backend.scan_jobs("nope", JobState.PENDING, 1, False, 10, None)
        with pytest.raises(QueueNotFoundError):
            await backend.retry_failed_jobs("nope", 1, 1, None, 10)
        with pytest.raises(QueueNotFoundError):
            await backend.delete_jobs("nope", JobState.FAILED, 1, None, 10)
        assert await backend.lookup_jobs(["nope:s1:p1:1"], False) == {}

    run(scenario())


def test_a_shard_without_the_queue_is_asked_once_a_walk_then_remembered_as_empty(
    backend: ShardedBackend, counts: Counter[str]
) -> None:
    clock = backend.clock
    assert isinstance(clock, ManualClock)

    async def scenario() -> None:
        await dequeue(backend, Q, 10, "w")  # takes the 3 ready jobs of shard 2
        # Shard 2 at three priorities, shards 1 and 3 once each (not again at priorities 2 and 3).
        assert counts["dequeue_store_calls"] == 3 + 2
        counts.clear()
        assert await dequeue(backend, Q, 10, "w") == []
        assert counts["dequeue_store_calls"] == 0, "every place is remembered as empty, shards 1 and 3 too"
        assert counts["dequeue_known_empty_skips"] == 3 * PRIORITIES
        # However the backoffs of the places fall, the queue is never taken for missing: here
        # shard 2's places start again from the first wait (as after the monitor gave jobs
        # back there), so they are often skipped while shards 1 and 3 are asked.
        for step in range(300):
            clock.advance(97)
            if step == 100:
                backend.forget_empty("2")
            assert await dequeue(backend, Q, 10, "w") == []
        assert 0 < counts["dequeue_store_calls"] < 300 * 3 * PRIORITIES / 10

    run(scenario())


def test_a_queue_deleted_everywhere_is_missing_again(backend: ShardedBackend) -> None:
    async def scenario() -> None:
        await dequeue(backend, Q, 10, "w")
        assert await dequeue(backend, Q, 10, "w") == []  # shards 1 and 3 remembered as lacking it
        await backend.delete_queue(Q)
        backend.clock.advance(MAX_EMPTY_RECHECK_MS)  # type: ignore[attr-defined]
        with pytest.raises(QueueNotFoundError):
            await dequeue(backend, Q, 10, "w")

    run(scenario())


def test_the_broker_refills_from_the_shard_that_has_the_queue(backend: ShardedBackend) -> None:
    async def scenario() -> list[str]:
        broker = DequeueBroker(backend, BrokerPolicy(100, 10, 20_000), Metrics())
        try:
            with pytest.raises(QueueNotFoundError):
                await broker.dequeue("nope", 10, "w")
            got = await broker.dequeue(Q, 10, "w")
            await broker.settle([(Q, "2", 1, 1)])
            return [descriptor for descriptor, *_ in got.to_list()]
        finally:
            await broker.stop()

    assert run(scenario()) == [f"{Q}:s2:p1:1", f"{Q}:s2:p1:2", f"{Q}:s2:p3:3"]


def test_missing_queues_are_created_on_the_shards_that_take_new_jobs(
    stores: dict[str, EmbeddedStore], counts: Counter[str], caplog: pytest.LogCaptureFixture
) -> None:
    stores["2"].create_queue(Q, PRIORITIES)
    stores["3"].create_queue("other", PRIORITIES)
    backend = make_backend(stores, counts, dequeue_only="3")
    try:
        with caplog.at_level(logging.INFO, logger="pinlater.backends.sharded"):
            created = run(create_missing_queues(backend, backend.shards.enqueue_candidates()))
            assert sorted(created) == [("other", "1"), ("other", "2"), (Q, "1")]  # type: ignore[arg-type]
            assert run(create_missing_queues(backend, backend.shards.enqueue_candidates())) == []
        assert {name: store.get_queue_names() for name, store in stores.items()} == {
            "1": {Q, "other"},
            "2": {Q, "other"},
            "3": {"other"},  # dequeue-only: takes no new jobs, so needs no queue
        }
        lines = [r.getMessage() for r in caplog.records if "created queue" in r.getMessage()]
        assert sorted(lines) == [
            "created queue other on shard 1: another shard has it",
            "created queue other on shard 2: another shard has it",
            f"created queue {Q} on shard 1: another shard has it",
        ]
        now = backend.clock.now_ms()
        placed = Counter(
            d.split(":")[1] for _ in range(30) for d in run(enqueue(backend, Q, [NewJob(1, b"x", now, 1)]))
        )
        assert set(placed) == {"s1", "s2"}
    finally:
        backend.close()


def test_the_monitor_goes_past_a_queue_deleted_since_it_listed_them(
    backend: ShardedBackend, stores: dict[str, EmbeddedStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A queue that vanished between the listing and its sweep (``a_gone`` sorts first) is
    skipped; the queues after it on that shard are still swept."""
    from pinlater.monitor import Monitor, MonitorPolicy

    on_2 = stores["2"]
    listed = on_2.get_queue_names() | {"a_gone"}
    monkeypatch.setattr(on_2, "get_queue_names", lambda: listed)
    monkeypatch.setattr(on_2, "monitor_idle", lambda queues, num_priorities: set())  # gone after this too
    clock = backend.clock
    assert isinstance(clock, ManualClock)
    claimed = on_2.dequeue_jobs(Q, 1, 2, "worker|host:1", clock.now_ms(), False)
    assert len(claimed) == 2
    clock.advance(10_000)
    policy = MonitorPolicy(
        interval_seconds=60, max_per_pass=100, claim_timeout_ms=1_000, succeeded_ttl_ms=HOUR, failed_ttl_ms=HOUR
    )
    totals = run(Monitor(backend, policy, Metrics()).run_once())
    assert totals == {
        "resurrected": 2,
        "gc_succeeded": 0,
        "gc_failed": 0,
        "gc_dedup_keys": 0,
        "expired": 0,
        "idle_skipped": 0,
    }


def pass_over_timed_out_claims(
    backend: ShardedBackend, store: EmbeddedStore, caplog: pytest.LogCaptureFixture
) -> tuple[dict[str, int], list[str]]:
    """Two jobs of ``Q`` on ``store`` claimed, their claims timed out, then one monitor pass: its
    totals and what it logged (warnings and worse)."""
    from pinlater.monitor import Monitor, MonitorPolicy

    clock = backend.clock
    assert isinstance(clock, ManualClock)
    assert len(store.dequeue_jobs(Q, 1, 2, "worker|host:1", clock.now_ms(), False)) == 2
    clock.advance(10_000)
    policy = MonitorPolicy(
        interval_seconds=60, max_per_pass=100, claim_timeout_ms=1_000, succeeded_ttl_ms=HOUR, failed_ttl_ms=HOUR
    )
    with caplog.at_level(logging.WARNING, logger="pinlater.monitor"):
        totals = run(Monitor(backend, policy, Metrics()).run_once())
    return totals, [r.getMessage() for r in caplog.records]


def test_a_monitor_pass_sweeps_every_queue_when_the_idle_check_fails(
    backend: ShardedBackend,
    stores: dict[str, EmbeddedStore],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``monitor_idle`` only spares the sweeps of idle queues: when it fails (a Redis Cluster
    slot migrating, say, which the store reports as a ShardConnectionError), the shard's queues
    are all swept, as before it existed."""
    on_2 = stores["2"]

    def broken(queues: object, num_priorities: int) -> set[str]:
        # What a Redis Cluster migrating a slot of one queue answers the pipeline of them all.
        raise ShardConnectionError("2", "TRYAGAIN Multiple keys request during rehashing of slot")

    monkeypatch.setattr(on_2, "monitor_idle", broken)
    totals, logged = pass_over_timed_out_claims(backend, on_2, caplog)
    assert totals["resurrected"] == 2
    expected = "could not name its idle queues (SHARD_CONNECTION_FAILED: shard 2: TRYAGAIN"
    assert any(expected in m for m in logged), logged


def test_an_enqueue_passes_a_shard_without_the_queue_and_gives_it_the_queue(
    backend: ShardedBackend, stores: dict[str, EmbeddedStore]
) -> None:
    """Nothing is written on a shard that lacks the queue, so the next one is tried; the queue
    is then created there behind the reply (a shard back from an outage, a half-done create)."""

    def everywhere() -> bool:
        return all(Q in store.get_queue_names() for store in stores.values())

    async def scenario() -> list[str]:
        # Shards are tried in random order: enqueue until each shard without the queue came
        # before one with it (ten tries left that to chance: one run in a few hundred failed).
        now = backend.clock.now_ms()
        descriptors: list[str] = []
        while not everywhere() and len(descriptors) < 200:
            descriptors += await enqueue(backend, Q, [NewJob(1, b"x", now, 1)])
            await backend.background_done()
        return descriptors

    def pending() -> int:
        where = JobFilter(priority=1, state=JobState.PENDING, now_ms=backend.clock.now_ms())
        return sum(store.count_jobs(Q, where, None) for store in stores.values() if Q in store.get_queue_names())

    before = pending()
    descriptors = run(scenario())
    assert everywhere(), f"after {len(descriptors)} enqueues"
    assert len(descriptors) < 200 and len(set(descriptors)) == len(descriptors), "each enqueue stored its job once"
    assert pending() == before + len(descriptors)


def test_a_made_up_queue_leaves_no_hint_while_a_shard_cannot_say(
    backend: ShardedBackend, stores: dict[str, EmbeddedStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """While a shard cannot answer (Redis at maxmemory refuses claims) a dequeue of a queue the
    others lack is answered with nothing (that shard may have it), not QUEUE_NOT_FOUND; the
    lacking shards' places were then kept as known empty, and a long poll's event stayed, for
    every name a peer made up, for good."""
    from pinlater.backends.pressure import StoreMemoryFullError

    full = backend.shards.get("2")
    assert full is not None
    real_hot_path = backend.hot_path

    class Full:
        def dequeue_jobs(self, *args: object, **kwargs: object) -> object:
            raise StoreMemoryFullError("2", "OOM command not allowed")

    monkeypatch.setattr(backend, "hot_path", lambda shard: Full() if shard is full else real_hot_path(shard))
    backend._current_hot_paths.clear()

    async def scenario() -> None:
        for i in range(20):
            assert await dequeue(backend, f"junk{i}", 10, "w") == []
        assert await backend.signals.wait("junk0", 0.01) is False
        waits = [backend.signals.wait("junk1", 0.01), backend.signals.wait("junk1", 0.02)]
        assert await asyncio.gather(*waits) == [False, False]

    run(scenario())
    assert not [key for key in backend._lacking if key[1].startswith("junk")]
    assert not [place for place in backend._empty_until if place[1].startswith("junk")]
    assert backend.signals._queues == {} and backend.signals.waiters == 0


@pytest.mark.parametrize("error", ["store", "contention"])
def test_the_monitor_goes_past_a_queue_whose_sweep_fails(
    backend: ShardedBackend,
    stores: dict[str, EmbeddedStore],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    error: str,
) -> None:
    """A queue whose sweep fails (``a_bad`` sorts first: an error of its own data, or its rows
    locked past the retries) is logged and passed over; the claims of the queues after it on
    the shard are still rescued (before, the error ended the shard's pass, every pass)."""
    on_2 = stores["2"]
    on_2.create_queue("a_bad", 3)
    on_2.create_queue("a_bad2", 3)
    monkeypatch.setattr(on_2, "monitor_idle", lambda queues, num_priorities: set())
    resurrect = on_2.resurrect_timed_out_jobs

    def failing(queue: str, *args: object) -> int:
        if queue.startswith("a_bad"):
            if error == "store":
                raise RuntimeError("WRONGTYPE Operation against a key holding the wrong kind of value")
            raise ShardConnectionError("2", "Lock wait timeout exceeded", contention=True)
        return resurrect(queue, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(on_2, "resurrect_timed_out_jobs", failing)
    totals, logged = pass_over_timed_out_claims(backend, on_2, caplog)
    assert totals["resurrected"] == 2
    # one line for the first of each kind of error, one naming them all (one was written per queue)
    named = [m for m in logged if "on shard 2" in m]
    assert len(named) == 2 and named[0].startswith("monitor: queue a_bad on shard 2 skipped this pass: "), logged
    assert named[1] == "monitor: 2 queues on shard 2 skipped this pass: a_bad, a_bad2"
