"""Every queue's job counts in one pass per shard (``ShardStore.queue_counts`` through
``ShardedBackend.queue_counts``), on every backend kind over two real shards: the numbers equal
the per-queue counts (``count_jobs``, what getJobCount answers) for every queue, state, priority
and ready/future, held (reserved) jobs and MYSQL_COUNT_LIMIT's cap included; a queue that is on
one shard only counts that shard; and the store calls of a queue-list load do not grow with the
number of queues."""

from __future__ import annotations

import asyncio
import functools
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from pinlater.backends.base import RESERVATION_PREFIX, AckItem, CountKey, JobState, NewJob, ShardStore
from pinlater.backends.sharded import ShardedBackend
from pinlater.backends.shardmap import Shard, ShardMap
from pinlater.clock import ManualClock
from pinlater.errors import QueueNotFoundError
from pinlater.server.admin_api import COUNT_COLUMNS, count_columns
from pinlater.server.queue_counts import QueueCounts

T0 = 1_700_000_000_000
PRIORITIES = 3
SHARD_NAMES = ("1", "2")
_PARAMS = ["embedded", pytest.param("redis", marks=pytest.mark.redis), pytest.param("mysql", marks=pytest.mark.mysql)]


@contextmanager
def two_shards(kind: str, tmp_path: Path) -> Iterator[list[ShardStore]]:
    """Two empty shards "1" and "2" of ``kind`` (one server holds both where there is one)."""
    stores: list[ShardStore] = []
    if kind == "embedded":
        from pinlater.backends.embedded import EmbeddedStore

        stores = [EmbeddedStore(tmp_path / "data", name) for name in SHARD_NAMES]
        try:
            yield stores
        finally:
            for store in stores:
                store.close()
    elif kind == "redis":
        from tests.support.redis_server import RedisServer

        from pinlater.backends.redis import RedisEndpoint, RedisShardConfig, RedisStore

        with RedisServer(tmp_path / "redis") as server:
            config = RedisShardConfig(RedisEndpoint(server.host, server.port), layout="original")
            stores = [RedisStore(name, config) for name in SHARD_NAMES]
            try:
                yield stores
            finally:
                for store in stores:
                    store.close()
    else:
        from tests.support.mariadb_server import shared_server

        from pinlater.backends.mysql import Endpoint, MySQLShardConfig, MySQLStore

        db = shared_server()
        db.drop_queue_databases()
        config = MySQLShardConfig(Endpoint(db.host, db.port), db.user, db.password)
        stores = [MySQLStore(name, config) for name in SHARD_NAMES]
        try:
            yield stores
        finally:
            for store in stores:
                store.close()


class CountingStore:
    """A real store whose method calls are counted by name (a spy: every call reaches the store)."""

    def __init__(self, store: ShardStore, calls: Counter[str]) -> None:
        self._store = store
        self._calls = calls

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._store, name)
        if not callable(attr):
            return attr

        @functools.wraps(attr)
        def counted(*args: Any) -> Any:
            self._calls[name] += 1
            return attr(*args)

        return counted


@pytest.fixture(params=_PARAMS)
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[list[ShardStore]]:
    with two_shards(request.param, tmp_path) as found:
        yield found


def backend_over(stores: list[Any], **kw: Any) -> ShardedBackend:
    shards = ShardMap([Shard(store.name, store) for store in stores])
    return ShardedBackend(shards, num_priorities=PRIORITIES, parallelism=4, clock=ManualClock(T0), **kw)


def fill(store: ShardStore, queue: str, seed: int) -> None:
    """A mix of every state, priority and ready/future on one shard, different for each seed."""
    jobs = [  # priority 3 with one attempt: a failure there is final
        NewJob(
            1 + i % PRIORITIES, b"body-%d" % i, T0 + (60_000 if i % 4 == 3 else -1000 * (i % 3)), 3 - 2 * (i % 3 == 2)
        )
        for i in range(6 + seed)
    ]
    jobs.append(NewJob(2, b"at-now", T0, 3))  # run_after == now: ready, not future
    store.enqueue_jobs(queue, jobs, T0 - 5000)
    claimed = store.dequeue_jobs(queue, 1, 2 + seed % 2, "claim-1:host", T0, False)
    ids = [job.local_id for job in claimed]
    if len(ids) >= 2:
        # One succeeds; one fails with attempts left, back to PENDING for later.
        store.ack_jobs(queue, [AckItem(1, ids[0])], [AckItem(1, ids[1], retry_delay_ms=30_000)], T0)
    last = store.dequeue_jobs(queue, 3, 1, "claim-2:host", T0, False)
    if last:
        store.ack_jobs(queue, [], [AckItem(3, last[0].local_id)], T0)  # no attempt left: FAILED
    # A held (reserved) job is PENDING to every read (Redis keeps it out of the PENDING set).
    store.reserve_jobs(queue, 2, 1, f"{RESERVATION_PREFIX}bench-holder", T0, 60_000)


def per_queue_count(stores: list[ShardStore], queue: str, key: CountKey, limit: int | None) -> int:
    """``count_jobs`` on each shard that has the queue, summed (a shard without it holds none)."""
    from pinlater.backends.base import JobFilter

    total = 0
    for store in stores:
        try:
            total += store.count_jobs(queue, JobFilter(key.state, key.priority, T0, key.future), limit)
        except QueueNotFoundError:
            continue
    return total


def every_key(queues: list[str]) -> Iterator[CountKey]:
    for queue in queues:
        for p in range(1, PRIORITIES + 1):
            for state in JobState:
                for future in (False, True):
                    yield CountKey(queue, p, state, future)


def test_one_pass_counts_equal_the_per_queue_counts(stores: list[ShardStore]) -> None:
    first, second = stores
    everywhere = ["alpha", "beta_2", "gamma"]
    for i, queue in enumerate(everywhere):
        for store in stores:
            store.create_queue(queue, PRIORITIES)
        fill(first, queue, i)
        fill(second, queue, i + 1)
    for store in stores:
        store.create_queue("empty", PRIORITIES)
    second.create_queue("one_shard", PRIORITIES)  # on shard 2 only, as a shard added later
    fill(second, "one_shard", 2)

    backend = backend_over(stores)
    try:
        counts = asyncio.run(backend.queue_counts())
        compared = nonzero = 0
        for key in every_key([*everywhere, "empty", "one_shard"]):
            expected = per_queue_count(stores, key.queue, key, None)
            assert counts.get(key, 0) == expected, key
            compared += 1
            nonzero += expected > 0
        for key in every_key(everywhere):  # getJobCount's own path, where every shard has the queue
            assert counts.get(key, 0) == asyncio.run(
                backend.count_jobs(key.queue, key.state, key.priority, key.future, None)
            ), key
        assert nonzero >= 15, "the data must give many cells something to count"
        assert {key.state for key, n in counts.items() if n} == set(JobState)
        assert compared == 5 * PRIORITIES * len(JobState) * 2
        assert {key.queue for key in counts} == {*everywhere, "one_shard"}
        assert sum(n for key, n in counts.items() if key.state == JobState.PENDING and key.future) > 0
        held = CountKey("alpha", 2, JobState.PENDING, False)
        assert counts[held] >= 2  # a held job on each shard, counted as PENDING

        backend.count_limit = 1  # MYSQL_COUNT_LIMIT: each shard's count per priority is capped
        capped = asyncio.run(backend.queue_counts())
        for key in every_key(everywhere):
            assert capped.get(key, 0) == asyncio.run(
                backend.count_jobs(key.queue, key.state, key.priority, key.future, None)
            ), key
            assert capped.get(key, 0) <= len(stores)
        assert max(capped.values()) == 2 and max(counts.values()) > 2
    finally:
        backend.close()


def test_queue_list_store_calls_do_not_grow_with_the_queues(stores: list[ShardStore]) -> None:
    calls: Counter[str] = Counter()
    stats: Counter[str] = Counter()
    backend = backend_over(
        [CountingStore(store, calls) for store in stores], count=lambda name, by: stats.update({name: by})
    )

    def load() -> tuple[Counter[str], dict[str, dict[str, list[int]]]]:
        """Store calls made by one load of the dashboard's queue list, and what it shows."""
        calls.clear()
        stats.clear()

        async def go() -> dict[str, dict[str, list[int]]]:
            snapshot = await QueueCounts(backend).read()  # as /api/queues and /metrics read them
            return count_columns(snapshot.counts, sorted(snapshot.names), PRIORITIES)

        shown = asyncio.run(go())
        return Counter(calls), shown

    def add_queues(names: Callable[[int], str], n: int) -> None:
        for i in range(n):
            asyncio.run(backend.create_queue(names(i)))
            stores[i % 2].enqueue_jobs(names(i), [NewJob(1, b"x", T0, 1), NewJob(3, b"y", T0 + 1, 1)], T0)

    try:
        add_queues(lambda i: f"few_{i}", 3)
        few_calls, few = load()
        few_stats = Counter(stats)
        add_queues(lambda i: f"many_{i}", 40)
        many_calls, many = load()
        assert len(few) == 3 and len(many) == 43
        assert many_calls == few_calls
        # One pass per shard of each method the pass calls (oldest_ready and expired_counts too,
        # on a store that has them).
        assert {"get_queue_names", "queue_counts"} <= set(few_calls), few_calls
        assert set(few_calls) <= {"get_queue_names", "queue_counts", "oldest_ready", "expired_counts"}, few_calls
        assert set(few_calls.values()) == {len(stores)}, "one pass per shard"
        assert stats["queue_counts_store_calls"] == few_stats["queue_counts_store_calls"] == len(stores)
        column = {name: (state, future) for name, state, future in COUNT_COLUMNS}
        assert column["pending"] == (JobState.PENDING, False)
        assert many["many_7"]["pending"] == [1, 0, 0] and many["many_7"]["pending_future"] == [0, 0, 1]
        assert all(sum(sum(c) for c in cols.values()) == 2 for cols in many.values())
    finally:
        backend.close()


def test_slow_passes_are_served_from_while_the_next_one_runs(tmp_path: Path) -> None:
    """Once passes take longer than the budget (here: a clock on which each takes a second),
    reads answer from the last pass and the next one runs behind them; until then, and again
    once a pass is quick, every read waits for a fresh pass."""
    with two_shards("embedded", tmp_path) as found:
        backend = backend_over(found)
        ticks = iter(range(1_000_000))
        slow = QueueCounts(backend, fresh_budget_s=0.5, clock=lambda: float(next(ticks)))  # a pass: 1 s
        key = CountKey("q", 1, JobState.PENDING, False)

        async def go() -> None:
            await backend.create_queue("q")
            for n in range(1, 4):  # three slow passes, each read waiting for its own
                found[0].enqueue_jobs("q", [NewJob(1, b"x", T0, 1)], T0)
                assert not slow.serving_last
                assert (await slow.read()).counts[key] == n
            assert slow.serving_last
            found[0].enqueue_jobs("q", [NewJob(1, b"x", T0, 1)], T0)
            next(ticks), next(ticks)  # two seconds pass: twice the last pass, so the next may start
            last = slow.last
            assert await slow.read() is last and last is not None and last.counts[key] == 3
            settled = await slow.settled()  # the pass that read started
            assert settled is not None and settled is not last and settled.counts[key] == 4
            assert (await slow.read()).counts[key] == 4

            quick = QueueCounts(backend, fresh_budget_s=10.0, clock=lambda: float(next(ticks)))
            for n in range(5, 9):
                found[1].enqueue_jobs("q", [NewJob(1, b"x", T0, 1)], T0)
                assert (await quick.read()).counts[key] == n and not quick.serving_last

            very_slow = QueueCounts(backend, fresh_budget_s=0.05, clock=lambda: float(next(ticks)))
            assert (await very_slow.read()).counts[key] == 8
            assert very_slow.serving_last, "one pass of 20 times the budget is enough"

        try:
            asyncio.run(go())
        finally:
            backend.close()


def test_passes_served_from_are_spaced_by_twice_their_duration_or_the_floor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While reads answer from the last pass, the next pass starts only once max(the floor, twice
    the last pass's duration) has passed since the last one ended: reads in between start none.
    The clock moves only while a pass counts (by ``took[0]`` a pass) and where the test moves it."""
    with two_shards("embedded", tmp_path) as found:
        backend = backend_over(found)
        now = [100.0]
        took = [3.0]
        real = backend.queue_counts

        async def timed_pass() -> dict[CountKey, int]:
            now[0] += took[0]
            return await real()

        monkeypatch.setattr(backend, "queue_counts", timed_pass)
        counts = QueueCounts(backend, fresh_budget_s=0.01, min_interval_s=1.0, clock=lambda: now[0])
        key = CountKey("q", 1, JobState.PENDING, False)

        async def go() -> None:
            await backend.create_queue("q")
            first = await counts.read()  # 3 s: 300 times the budget, so served from from now on
            assert counts.serving_last and now[0] == 103.0
            found[0].enqueue_jobs("q", [NewJob(1, b"x", T0, 1)], T0)
            for at in (103.0, 106.0, 108.99):  # before 2 x 3 s after the pass ended: no pass
                now[0] = at
                assert await counts.read() is first
                assert await counts.settled() is first, f"a pass started at {at}"
            now[0] = 109.0
            assert await counts.read() is first  # answered from the last; starts the next
            second = await counts.settled()
            assert second is not None and second is not first and second.counts[key] == 1

            took[0] = 0.2  # short passes: the floor (1 s) spaces them, not 2 x 0.2 s
            now[0] = 200.0
            assert await counts.read() is second
            third = await counts.settled()
            assert third is not None and third is not second and now[0] == 200.2
            now[0] = 201.19
            assert await counts.read() is third and await counts.settled() is third
            now[0] = 201.2
            await counts.read()
            assert await counts.settled() is not third

        try:
            asyncio.run(go())
        finally:
            backend.close()


def test_a_pass_started_ahead_serves_the_first_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``start`` (at server start) runs a pass before anyone reads: a read during it waits for
    that pass rather than start another, and once a slow first pass is done reads answer from it
    at once."""
    with two_shards("embedded", tmp_path) as found:
        backend = backend_over(found)
        now = [0.0]
        passes = [0]
        real = backend.queue_counts

        async def timed_pass() -> dict[CountKey, int]:
            passes[0] += 1
            now[0] += 3.0
            return await real()

        monkeypatch.setattr(backend, "queue_counts", timed_pass)
        counts = QueueCounts(backend, clock=lambda: now[0])

        async def go() -> None:
            await backend.create_queue("q")
            counts.start()
            assert counts.last is None
            during = await counts.read()  # waits for the pass start began
            assert passes[0] == 1 and counts.last is during and "q" in during.names
            assert await counts.read() is during and passes[0] == 1
            await counts.aclose()

        try:
            asyncio.run(go())
        finally:
            backend.close()
