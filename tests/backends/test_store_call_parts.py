"""A request larger than one store call (``STORE_CALL_JOBS``) goes to its store in parts, in
turn, so one request cannot hold a store (a Redis every queue and server shares) for seconds:
enqueues, dequeues, acks, keyed enqueues, lookups and checkpoints, on every backend through
``ShardedBackend``, are served whole and in order; on Redis each script call carries at most
that many jobs, and a part that fails after others were stored says so."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest
import redis
from tests.support.hot import ack, dequeue, enqueue
from tests.support.redis_server import RedisServer

from pinlater._pinlater import AckGroup, KeyedJobBatch, KeyedPlacement, LocalIds, NewJobBatch, decode_descriptor
from pinlater.backends.base import (
    STORE_CALL_JOBS,
    AckItem,
    CheckpointItem,
    JobFilter,
    JobState,
    NewJob,
    ShardStore,
)
from pinlater.backends.redis import RedisEndpoint, RedisShardConfig, RedisStore
from pinlater.backends.redis.keys import job_hash_key
from pinlater.backends.sharded import ShardedBackend
from pinlater.backends.shardmap import Shard, ShardMap
from pinlater.errors import ErrorCode, PinLaterError, ShardConnectionError

T = TypeVar("T")

Q = "parts"
T0 = 1_700_000_000_000
N = 2 * STORE_CALL_JOBS + 500  # three parts: two whole, one not


def backend_of(*stores: ShardStore) -> ShardedBackend:
    for store in stores:
        store.create_queue(Q, 2)
    return ShardedBackend(ShardMap([Shard(s.name, s) for s in stores]), num_priorities=2, parallelism=2)


def test_the_extension_cuts_batches_into_parts_and_joins_their_answers() -> None:
    jobs = [NewJob(1, b"%d" % i, T0, 1) for i in range(5)]
    parts = NewJobBatch(jobs).chunks(2)
    assert [[j[1] for j in p.to_list()] for p in parts] == [[b"0", b"1"], [b"2", b"3"], [b"4"]]
    keys = ["k0", None, "k1", "k0", "k2", "k1", "k3"]  # two repeats, left out of the parts
    keyed, repeats = KeyedJobBatch(jobs + jobs[:2], [(k, 0, None, None) for k in keys]).chunks(2)
    assert [[k[0] for k in p.keys()] for p in keyed] == [["k0", None], ["k1", "k2"], ["k3"]]
    assert repeats == [(3, 0), (5, 2)]
    assert LocalIds.concat([LocalIds([1, 2]), LocalIds([]), LocalIds([7])]).to_list() == [1, 2, 7]
    answers = [KeyedPlacement([(1, 4, False), (1, 5, False)]), KeyedPlacement([(2, 9, True), (1, 6, False)])]
    placed = KeyedPlacement.concat([*answers, KeyedPlacement([(1, 7, False)])], repeats)
    assert placed.to_list() == [
        (1, 4, False),
        (1, 5, False),
        (2, 9, True),
        (1, 4, True),
        (1, 6, False),
        (2, 9, True),
        (1, 7, False),
    ]
    with pytest.raises(ValueError, match="not before it"):
        KeyedPlacement.concat(answers, [(1, 3)])
    with pytest.raises(ValueError, match="beyond"):
        KeyedPlacement.concat(answers, [(9, 0)])
    acks = AckGroup([AckItem(1, i) for i in (1, 2, 3)], [AckItem(2, 4, "x", 5)]).chunks(2)
    assert [(a.succeeded(), a.failed()) for a in acks] == [
        ([(1, 1, "", 0), (1, 2, "", 0)], []),
        ([(1, 3, "", 0)], [(2, 4, "x", 5)]),
    ]


def test_a_request_of_several_parts_is_served_whole_and_in_order(store: ShardStore) -> None:
    backend = backend_of(store)

    async def run() -> tuple[list[str], dict[str, bytes], list[str], int, dict[str, JobState]]:
        jobs = [NewJob(1 + i % 2, b"job-%d" % i, T0, 2) for i in range(N)]
        descriptors = await enqueue(backend, Q, jobs)
        found = await backend.lookup_jobs(descriptors, True)
        bodies = {d: r.body for d, r in found.items() if r.body is not None}
        got = await dequeue(backend, Q, N + 10, "parts-test")
        claimed = [d.descriptor for d in got]
        items = [(store.name, CheckpointItem(decode_descriptor(d)[2], decode_descriptor(d)[3], T0)) for d in claimed]
        checkpointed = await backend.checkpoint_jobs(Q, "parts-test", items)
        await ack(backend, Q, succeeded=[(store.name, AckItem(i.priority, i.local_id)) for _, i in items])
        after = await backend.lookup_jobs(descriptors, False)
        await backend.aclose()
        return descriptors, bodies, claimed, checkpointed, {d: r.state for d, r in after.items()}

    descriptors, bodies, claimed, checkpointed, states = asyncio.run(run())
    backend._executor.shutdown(wait=True)
    assert len(set(descriptors)) == N
    assert [decode_descriptor(d)[2] for d in descriptors] == [1 + i % 2 for i in range(N)]
    assert [bodies[d] for d in descriptors] == [b"job-%d" % i for i in range(N)], "each descriptor its own job"
    assert sorted(claimed) == sorted(descriptors), "one dequeue claimed every job, once"
    assert checkpointed == N
    assert set(states.values()) == {JobState.SUCCEEDED}, "every part of the ack applied"


def test_a_keyed_request_of_several_parts_finds_its_own_keys_and_keeps_group_order(store: ShardStore) -> None:
    backend = backend_of(store)
    grouped = store.groups_refused is None
    jobs = [NewJob(1, b"keyed-%d" % i, T0, 2) for i in range(N)]
    keys = [(f"key-{i}", 0, f"g{i % 3}" if grouped else None, None) for i in range(N)]
    keys[N - 1] = ("key-5", 0, keys[N - 1][2], None)  # in the last part: the first part's job 5 holds it

    async def run() -> tuple[list[tuple[int, int, bool]], list[bytes]]:
        placed = await backend.enqueue_keyed_batch(Q, KeyedJobBatch(jobs, keys), T0)
        assert isinstance(placed, tuple)
        got = await dequeue(backend, Q, 10 if grouped else N, "parts-test")
        await backend.aclose()
        return placed[1].to_list(), [d.job.body for d in got]

    placements, bodies = asyncio.run(run())
    backend._executor.shutdown(wait=True)
    assert len(placements) == N
    assert placements[N - 1] == (placements[5][0], placements[5][1], True), "deduplicated to its holder"
    assert not any(dedup for _, _, dedup in placements[: N - 1])
    assert len({local_id for _, local_id, _ in placements}) == N - 1
    if grouped:  # each group hands out its first job in request order, whatever part it was in
        assert sorted(bodies) == [b"keyed-0", b"keyed-1", b"keyed-2"]
    else:
        assert len(bodies) == N - 1


async def failed_jobs(backend: ShardedBackend, shard: str) -> list[str]:
    """``N`` jobs failed for good (one attempt allowed, acked as a failure): their descriptors."""
    await enqueue(backend, Q, [NewJob(1, b"fail-%d" % i, T0, 1) for i in range(N)])
    got = await dequeue(backend, Q, N, "parts-test")
    await ack(backend, Q, failed=[(shard, AckItem(1, decode_descriptor(d.descriptor)[3])) for d in got])
    return [d.descriptor for d in got]


def test_retries_and_deletes_of_several_parts_take_every_job(store: ShardStore) -> None:
    backend = backend_of(store)

    async def run() -> tuple[list[str], int, int, int]:
        descriptors = await failed_jobs(backend, store.name)
        retried = await backend.retry_failed_jobs(Q, 1, 2, T0, N + 10)
        deleted = await backend.delete_jobs(Q, JobState.PENDING, 1, None, N + 10)
        left = len(await backend.lookup_jobs(descriptors, False))
        await backend.aclose()
        return descriptors, retried, deleted, left

    descriptors, retried, deleted, left = asyncio.run(run())
    backend._executor.shutdown(wait=True)
    assert len(descriptors) == N
    assert (retried, deleted, left) == (N, N, 0)


class FailingAt:
    """A real store whose ``method`` fails with ``error`` at its ``at``-th call (from 1); every
    other call reaches the store."""

    def __init__(self, store: ShardStore, method: str, at: int, error: Exception) -> None:
        self._store, self._method, self._at, self._error = store, method, at, error
        self.calls = 0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._store, name)
        if name != self._method:
            return attr

        def failing(*args: Any) -> Any:
            self.calls += 1
            if self.calls == self._at:
                raise self._error
            return attr(*args)

        return failing


def over(store: ShardStore, method: str, at: int, error: Exception) -> tuple[ShardedBackend, FailingAt]:
    failing = FailingAt(store, method, at, error)
    backend = ShardedBackend(ShardMap([Shard(store.name, failing)]), num_priorities=2, parallelism=2)  # type: ignore[arg-type]
    return backend, failing


def test_a_retry_or_delete_failing_after_a_part_says_what_the_parts_before_did(store: ShardStore) -> None:
    backend = backend_of(store)

    def count(state: JobState) -> int:
        return store.count_jobs(Q, JobFilter(state, 1, 2**52), None)  # (a FAILED job is scored by when it failed)

    async def run() -> tuple[PinLaterError, PinLaterError, list[int]]:
        await failed_jobs(backend, store.name)
        await backend.aclose()
        retrying, _ = over(store, "retry_failed_jobs", 2, ShardConnectionError(store.name, "injected"))
        with pytest.raises(PinLaterError) as retry_failed:
            await retrying.retry_failed_jobs(Q, 1, 2, T0, N)
        await retrying.aclose()
        counts = [count(JobState.PENDING), count(JobState.FAILED)]
        deleting, _ = over(store, "delete_jobs", 2, RuntimeError("injected"))
        with pytest.raises(PinLaterError) as delete_failed:
            await deleting.delete_jobs(Q, JobState.FAILED, 1, None, N)
        await deleting.aclose()
        return retry_failed.value, delete_failed.value, [*counts, count(JobState.PENDING), count(JobState.FAILED)]

    retry_error, delete_error, counts = asyncio.run(run())
    assert isinstance(retry_error, ShardConnectionError) and retry_error.maybe_applied
    assert f"{STORE_CALL_JOBS} failed jobs were retried before a store call failed: injected" in retry_error.message
    assert delete_error.code == ErrorCode.UNKNOWN
    assert f"{STORE_CALL_JOBS} jobs were deleted before a store call failed: RuntimeError('injected')" in (
        delete_error.message
    )
    left = N - 2 * STORE_CALL_JOBS
    assert counts == [STORE_CALL_JOBS, N - STORE_CALL_JOBS, STORE_CALL_JOBS, left], "what the messages say happened"


def test_a_dequeue_walk_whose_later_call_fails_unexpectedly_answers_the_jobs_it_claimed(store: ShardStore) -> None:
    backend = backend_of(store)
    asked: list[int] = []

    def fetch(shard: Shard, priority: int, want: int, now: int, max_bytes: int) -> Awaitable[Any]:
        asked.append(want)
        if len(asked) == 2:
            raise RuntimeError("injected")
        return backend.hot_path(shard).dequeue_jobs(Q, priority, want, "parts-test", now, False)

    async def run() -> tuple[int, int]:
        await enqueue(backend, Q, [NewJob(1, b"x", T0, 2) for _ in range(N)])
        batches = await backend.walk_ready(Q, N, fetch)
        claimed = sum(len(batch.jobs.to_list()) for batch in batches)
        later = len(await dequeue(backend, Q, N, "parts-test"))
        await backend.aclose()
        return claimed, later

    claimed, later = asyncio.run(run())
    backend._executor.shutdown(wait=True)
    assert claimed == STORE_CALL_JOBS, "the first call's jobs are answered"
    assert asked == [STORE_CALL_JOBS, STORE_CALL_JOBS], "the shard is not asked again in that walk"
    assert later == N - STORE_CALL_JOBS, "the rest stay PENDING, and the next dequeue finds them"


def test_a_dequeue_walk_whose_first_call_fails_unexpectedly_raises(store: ShardStore) -> None:
    backend = backend_of(store)

    def fetch(shard: Shard, priority: int, want: int, now: int, max_bytes: int) -> Awaitable[Any]:
        raise RuntimeError("injected")

    async def run() -> None:
        await enqueue(backend, Q, [NewJob(1, b"x", T0, 2)])
        try:
            with pytest.raises(RuntimeError, match="injected"):
                await backend.walk_ready(Q, 10, fetch)
        finally:
            await backend.aclose()

    asyncio.run(run())
    backend._executor.shutdown(wait=True)


@pytest.fixture
def redis_store(tmp_path: Path) -> Iterator[tuple[RedisStore, redis.Redis]]:
    with RedisServer(tmp_path / "redis") as server:
        store = RedisStore("1", RedisShardConfig(RedisEndpoint(server.host, server.port), layout="compact"))
        raw = redis.Redis(server.host, server.port)
        try:
            yield store, raw
        finally:
            raw.close()
            store.close()


def script_calls(raw: redis.Redis) -> int:
    """Script calls Redis ran (a first one that found its script not loaded yet is a failed one)."""
    stats = raw.info("commandstats").get("cmdstat_evalsha", {"calls": 0, "failed_calls": 0})
    return int(stats["calls"]) - int(stats["failed_calls"])


async def scripts_run(raw: redis.Redis, call: Awaitable[T]) -> tuple[T, int]:
    """What ``call`` answered, and the script calls Redis ran for it."""
    before = script_calls(raw)
    answer = await call
    return answer, script_calls(raw) - before


@pytest.mark.redis
def test_on_redis_no_script_call_carries_more_than_one_parts_jobs(redis_store: tuple[RedisStore, redis.Redis]) -> None:
    store, raw = redis_store
    backend = backend_of(store)
    calls: list[int] = []

    async def run() -> None:
        jobs = [NewJob(1, b"x", T0, 2) for _ in range(N)]
        calls.append((await scripts_run(raw, enqueue(backend, Q, jobs)))[1])
        got, count = await scripts_run(raw, dequeue(backend, Q, N, "parts-test"))
        calls.append(count)
        ids = [decode_descriptor(d.descriptor)[3] for d in got]
        calls.append((await scripts_run(raw, backend.lookup_jobs([d.descriptor for d in got], False)))[1])
        items = [(store.name, CheckpointItem(1, i, T0)) for i in ids]
        calls.append((await scripts_run(raw, backend.checkpoint_jobs(Q, "parts-test", items)))[1])
        acks = [(store.name, AckItem(1, i)) for i in ids]
        calls.append((await scripts_run(raw, ack(backend, Q, succeeded=acks)))[1])
        keyed = KeyedJobBatch(jobs, [(f"key-{i}", 0, f"g{i}", None) for i in range(N)])
        calls.append((await scripts_run(raw, backend.enqueue_keyed_batch(Q, keyed, T0)))[1])
        await backend.aclose()

    asyncio.run(run())
    backend._executor.shutdown(wait=True)
    assert calls == [3] * 6, "enqueue, dequeue, lookup, checkpoint, ack, keyed enqueue: a script call per part"


@pytest.mark.redis
def test_on_redis_retries_and_deletes_go_a_part_a_script(redis_store: tuple[RedisStore, redis.Redis]) -> None:
    store, raw = redis_store
    backend = backend_of(store)
    calls: list[int] = []

    async def run() -> None:
        await failed_jobs(backend, store.name)
        calls.append((await scripts_run(raw, backend.retry_failed_jobs(Q, 1, 2, T0, N)))[1])
        calls.append((await scripts_run(raw, backend.delete_jobs(Q, JobState.PENDING, 1, None, N)))[1])
        await backend.aclose()

    asyncio.run(run())
    backend._executor.shutdown(wait=True)
    assert calls == [3, 3], "a retry and a delete: a script call per part"


@pytest.mark.redis
def test_a_part_refused_after_others_were_stored_says_so(redis_store: tuple[RedisStore, redis.Redis]) -> None:
    store, raw = redis_store
    backend = backend_of(store)
    body = b"y" * 2048  # a part's command and what it stores: 2 MB and more each

    async def run() -> tuple[PinLaterError, int]:
        await enqueue(backend, Q, [NewJob(1, b"first", T0, 2)])  # the server's connections are open
        assert len(await dequeue(backend, Q, 10, "parts-test")) == 1  # the place is now known empty
        # Redis counts a command's arguments as it runs it: room for the first part's, not for
        # the second's once the first part's jobs are stored (2.4 to 5.4 MB more than now did
        # that here), and below the server's high-water mark
        raw.config_set("maxmemory", int(raw.info("memory")["used_memory"]) + 4_000_000)
        with pytest.raises(PinLaterError) as refused:
            await enqueue(backend, Q, [NewJob(1, body, T0, 2) for _ in range(N)])
        raw.config_set("maxmemory", 0)
        after = len(await dequeue(backend, Q, N, "parts-test"))  # no hint hides the stored part
        await backend.aclose()
        return refused.value, after

    error, dequeued = asyncio.run(run())
    backend._executor.shutdown(wait=True)
    assert error.code == ErrorCode.ENQUEUE_REJECTED
    assert (
        f"{STORE_CALL_JOBS} of the {N} jobs sent to shard 1 were stored before a part of them failed" in error.message
    )
    assert dequeued == STORE_CALL_JOBS, "the part stored is there, and found"


@pytest.mark.redis
def test_a_retry_of_several_parts_goes_on_past_evicted_records(redis_store: tuple[RedisStore, redis.Redis]) -> None:
    store, raw = redis_store
    backend = backend_of(store)
    failed_set, records = f"plc:{{1:{Q}}}:p1:s3", f"plc:{{1:{Q}}}:j"

    async def run() -> int:
        await failed_jobs(backend, store.name)
        raw.hdel(records, *raw.zrange(failed_set, 0, 4))  # the first part's oldest: evicted
        retried = await backend.retry_failed_jobs(Q, 1, 2, T0, N + 10)
        await backend.aclose()
        return retried

    retried = asyncio.run(run())
    backend._executor.shutdown(wait=True)
    assert retried == N - 5, "the parts after the first, which met the evicted, were retried too"
    assert raw.zcard(failed_set) == 0
    assert store.evicted_jobs == 5


class _SecondRetryScriptFails(RedisStore):
    """A real Redis store whose second ``retry_failed_jobs`` script call fails (the first runs)."""

    retry_scripts = 0

    def _run_in_queue(self, script: str, queue: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        if script == "retry_failed_jobs":
            self.retry_scripts += 1
            if self.retry_scripts == 2:
                raise ShardConnectionError(self.name, "injected")
        return super()._run_in_queue(script, queue, keys, args)


@pytest.mark.redis
@pytest.mark.parametrize("layout", ["original", "compact"])
def test_a_retry_past_evicted_records_that_then_fails_says_what_it_retried(tmp_path: Path, layout: str) -> None:
    with RedisServer(tmp_path / "redis") as server:
        store = _SecondRetryScriptFails("1", RedisShardConfig(RedisEndpoint(server.host, server.port), layout=layout))
        raw = redis.Redis(server.host, server.port)
        try:
            store.create_queue(Q, 1)
            ids = store.enqueue_jobs(Q, [NewJob(1, b"j%d" % i, T0, 1) for i in range(20)], T0)
            store.dequeue_jobs(Q, 1, 20, "parts-test", T0, False)
            store.ack_jobs(Q, [], [AckItem(1, i) for i in ids], T0)
            (failed_set,) = [key for key in raw.keys("*") if raw.type(key) == b"zset" and raw.zcard(key) == 20]
            evicted = raw.zrange(failed_set, 0, 2)
            if layout == "original":  # a hash per job
                raw.delete(*(job_hash_key("1", Q, int(member)) for member in evicted))
            else:  # a field per job
                raw.hdel(f"plc:{{1:{Q}}}:j", *evicted)
            with pytest.raises(ShardConnectionError) as failed:
                store.retry_failed_jobs(Q, 1, 2, T0, 10, T0)
            pending = store.count_jobs(Q, JobFilter(JobState.PENDING, 1, 2**52), None)
        finally:
            raw.close()
            store.close()
    assert failed.value.maybe_applied
    assert failed.value.message == "shard 1: 7 failed jobs were retried before a call failed: injected"
    assert pending == 7, "the first call's jobs, those the message counts"
