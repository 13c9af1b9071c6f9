"""A queue's slot moves between masters while the store's hot path enqueues, dequeues and acks
on it: no acknowledged job is lost, none is duplicated, every acked job ends SUCCEEDED.

The load is the server's own hot path (``store.native``: the Rust-packed scripts over
``ClusterHotClient``), several producers and consumers on one event loop; half the batches are
enqueued with run after == now, as the server does by default, so the queue's ready list
(``plc:{S:Q}:p1:r``, declared by every script that touches it) moves too. The slot moves as
``redis-cli --cluster reshard`` moves it, twice (to a second master, then a third), while the
load runs: one key per MIGRATE, and the load makes a round of calls between two keys, so the
queue's keys stay split between the masters for a while. The records hash (``plc:{S:Q}:j``,
``KEYS[1]`` of every script, with the queue's existence and id counter) moves first, last, or
where Redis lists it: with it on the other master than the sets, a script must not run on
either (before it was declared, one ran on the source half done, or on the target with a second,
empty records hash).
Calls that fail meanwhile (``ShardConnectionError``: TRYAGAIN past the timeout) are noted: an
enqueue that failed may or may not have applied (it is "uncertain", never acknowledged), a
dequeue that failed claimed nothing we know of, an ack that failed leaves its jobs IN_PROGRESS
until the drain puts them back.

At the end every job is counted by its final state after a drain (claims timed out, pending
jobs dequeued and acked): each acknowledged enqueue is there exactly once and SUCCEEDED, the
only others are uncertain enqueues, and nothing is PENDING, IN_PROGRESS or FAILED.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.redis_cluster import RedisClusterNodes
from tests.support.wait import wait_for

from pinlater._pinlater import AckGroup, NewJobBatch
from pinlater.backends.base import AckItem, ClaimedJob, JobFilter, JobState, NewJob
from pinlater.backends.redis import RedisEndpoint, RedisShardConfig, RedisStore
from pinlater.backends.redis.cluster import key_slot
from pinlater.backends.redis.keys_compact import queue_tag
from pinlater.config import Settings
from pinlater.errors import ShardConnectionError

pytestmark = pytest.mark.redis

QUEUE = "moving"
PRODUCERS = 4
CONSUMERS = 4
BATCH = 20
CALLS_BETWEEN_KEYS = 8
"""Calls the load finishes (or fails) between two keys' MIGRATE."""
TIMEOUT = 1.0
"""The store's socket timeout, so a call waiting out TRYAGAIN gives up soon."""


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[RedisClusterNodes]:
    with RedisClusterNodes(tmp_path / "cluster") as nodes:
        yield nodes


class Load:
    """What the producers and consumers did, by body (every body is unique)."""

    def __init__(self) -> None:
        self.enqueued: dict[int, bytes] = {}  # acknowledged enqueues: local id -> body
        self.uncertain: set[bytes] = set()  # enqueues that failed: applied or not
        self.acked: set[int] = set()  # jobs whose ack succeeded
        self.errors: Counter[str] = Counter()
        self.calls = 0  # calls finished or failed
        self.stop = asyncio.Event()

    def acked_count(self) -> int:
        return len(self.acked)


async def produce(store: RedisStore, load: Load, n: int) -> None:
    seq = 0
    while not load.stop.is_set():
        bodies = [f"{n}-{seq + i}".encode() for i in range(BATCH)]
        seq += BATCH
        now = _now_ms()
        run_after = now if seq // BATCH % 2 else 0  # half to the ready list (run after == now), half to the set
        jobs = NewJobBatch([NewJob(1, body, run_after, 3) for body in bodies])
        try:
            ids = (await store.native.enqueue_jobs(QUEUE, jobs, now)).to_list()
        except ShardConnectionError:
            load.calls += 1
            load.errors["enqueue"] += 1
            load.uncertain.update(bodies)
            await asyncio.sleep(0)  # let the others run: the error came back at once
            continue
        load.calls += 1
        load.enqueued.update(zip(ids, bodies, strict=True))


async def consume(store: RedisStore, load: Load, n: int) -> None:
    while not load.stop.is_set():
        try:
            claimed = await store.native.dequeue_jobs(QUEUE, 1, BATCH, f"consumer-{n}", _now_ms(), False)
        except ShardConnectionError:
            load.calls += 1
            load.errors["dequeue"] += 1
            await asyncio.sleep(0)
            continue
        load.calls += 1
        jobs = [ClaimedJob._make(j) for j in claimed.to_list()]
        if not jobs:
            await asyncio.sleep(0.001)  # producers are behind: yield (the loop polls, as a worker does)
            continue
        try:
            await store.native.ack_jobs(QUEUE, AckGroup([AckItem(1, j.local_id) for j in jobs], []), _now_ms())
        except ShardConnectionError:
            load.calls += 1
            load.errors["ack"] += 1
            continue
        load.calls += 1
        load.acked.update(j.local_id for j in jobs)


def _now_ms() -> int:
    return int(time.time() * 1000)


@pytest.mark.parametrize("records", ["listed", "first", "last"])
def test_a_slot_moves_twice_under_load_and_no_acknowledged_job_is_lost(
    cluster: RedisClusterNodes, records: str
) -> None:
    seeds = tuple(RedisEndpoint(h, p) for h, p in cluster.seeds)
    config = RedisShardConfig(seeds[0], layout="compact", cluster=seeds)
    store = RedisStore("m", config, Settings(backend_socket_timeout_seconds=TIMEOUT))
    slot = key_slot(queue_tag("m", QUEUE).encode())
    records_key = f"plc:{queue_tag('m', QUEUE)}:j".encode()
    first = cluster.owner(slot)
    second = cluster.other_than(first)
    third = next(n for n in cluster.nodes if n is not first and n is not second)
    moves: list[tuple[int, int]] = []
    load = Load()
    try:
        store.create_queue(QUEUE, 1)

        def move(source_port: int, target_port: int) -> None:
            source = next(n for n in cluster.nodes if n.port == source_port)
            target = next(n for n in cluster.nodes if n.port == target_port)
            with source.client() as client:
                keys: list[bytes] = client.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 1000)
            others = [key for key in keys if key != records_key]
            order = {"listed": keys, "first": [records_key, *others], "last": [*others, records_key]}[records]
            cluster.begin_migration(slot, source, target)
            moved = 0
            for key in order:
                calls = load.calls
                moved += cluster.migrate_keys(slot, source, target, keys=[key])
                wait_for(lambda calls=calls: load.calls >= calls + CALLS_BETWEEN_KEYS, 30, what="the load to go on")  # type: ignore[misc]
            while batch := cluster.migrate_keys(slot, source, target, batch=1):  # made on the source meanwhile
                moved += batch
            cluster.finish_migration(slot, source, target)
            moves.append((target_port, moved))

        async def run() -> None:
            loop = asyncio.get_running_loop()
            tasks = [loop.create_task(produce(store, load, n)) for n in range(PRODUCERS)]
            tasks += [loop.create_task(consume(store, load, n)) for n in range(CONSUMERS)]
            try:
                for source, target in ((first, second), (second, third)):
                    await _acked_at_least(load, load.acked_count() + 300, tasks)  # the load is running
                    await asyncio.to_thread(move, source.port, target.port)  # under it
                await _acked_at_least(load, load.acked_count() + 300, tasks)  # and goes on after
            finally:
                load.stop.set()
                ended = await asyncio.gather(*tasks, return_exceptions=True)
                await store.aclose()
            for outcome in ended:  # a load task that died says why
                if isinstance(outcome, BaseException):
                    raise outcome

        asyncio.run(run())
        assert [port for port, _ in moves] == [second.port, third.port]
        assert all(moved >= 3 for _, moved in moves), moves  # the queue's keys did move, one by one
        assert cluster.owner(slot) is third

        # Drain: claims that were not acked time out, pending jobs are dequeued and acked.
        store.resurrect_timed_out_jobs(QUEUE, 1, _now_ms() + 1, 1_000_000, _now_ms())
        while jobs := store.dequeue_jobs(QUEUE, 1, 500, "drain", _now_ms(), False):
            store.ack_jobs(QUEUE, [AckItem(1, j.local_id) for j in jobs], [], _now_ms())

        counts = {state: store.count_jobs(QUEUE, JobFilter(state, 1, _now_ms(), None), None) for state in JobState}
        assert counts[JobState.PENDING] == counts[JobState.IN_PROGRESS] == counts[JobState.FAILED] == 0, counts
        found = store.lookup_jobs(QUEUE, [(1, i) for i in sorted(load.enqueued)], include_body=True)
        assert len(found) == len(load.enqueued)  # every acknowledged enqueue is there
        assert all(job.state == JobState.SUCCEEDED for job in found)
        assert {job.local_id: job.body for job in found} == load.enqueued
        assert load.acked <= {job.local_id for job in found} | _ids_of_uncertain(store, load)
        succeeded = _succeeded_bodies(store, counts[JobState.SUCCEEDED])
        assert len(succeeded) == counts[JobState.SUCCEEDED]
        duplicates = [body for body, n in Counter(succeeded).items() if n > 1]
        assert not duplicates  # no enqueue applied twice
        others = set(succeeded) - set(load.enqueued.values())
        assert others <= load.uncertain  # the only other jobs are enqueues whose outcome was unknown
        assert len(load.enqueued) >= 1000
    finally:
        store.close()


async def _acked_at_least(load: Load, n: int, tasks: list[asyncio.Task[None]], timeout: float = 60.0) -> None:
    """Await ``n`` acked jobs while the load runs (polling the counter on the loop), failing at
    once if a load task died."""
    deadline = time.monotonic() + timeout
    while load.acked_count() < n:
        for task in tasks:
            if task.done():
                task.result()  # raises what killed it
                raise AssertionError("a load task stopped")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for the load")
        await asyncio.sleep(0.01)


def _succeeded_bodies(store: RedisStore, expected: int) -> list[bytes]:
    jobs = store.scan_jobs(QUEUE, JobFilter(JobState.SUCCEEDED, 1, _now_ms(), None), expected + 10)
    ids = [(1, job.local_id) for job in jobs]
    return [job.body or b"" for job in store.lookup_jobs(QUEUE, ids, include_body=True)]


def _ids_of_uncertain(store: RedisStore, load: Load) -> set[int]:
    jobs = store.scan_jobs(QUEUE, JobFilter(JobState.SUCCEEDED, 1, _now_ms(), None), 10_000_000)
    return {job.local_id for job in jobs if job.local_id not in load.enqueued}
