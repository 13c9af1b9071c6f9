"""Dedup keys above the stores (``ShardedBackend.enqueue_keyed_jobs``), over three real embedded
shards: where keys go (their own shard, never a dequeue-only one), a queue missing on a key's
shard, and a request that fails part-way; each through both ways of placing a request, job by
job (``enqueue_keyed_jobs``) and split by the extension (``enqueue_keyed_batch``, the server's).

Through a server: ``tests/server/test_dedup_keys.py``; on Redis, ``test_dedup_keys_redis.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, Protocol, TypeVar

import pytest

from pinlater._pinlater import KeyedJobBatch, encode_descriptor
from pinlater.backends.base import JobFilter, JobState, NewJob
from pinlater.backends.embedded.store import EmbeddedStore
from pinlater.backends.sharded import ShardedBackend, key_shard
from pinlater.backends.shardmap import Shard, ShardMap
from pinlater.clock import ManualClock
from pinlater.errors import QueueNotFoundError, ShardConnectionError

Q = "dedup_sharded"
PRIORITIES = 3
T = TypeVar("T")

Keys = list[tuple[str | None, int, str | None, int | None]]


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[dict[str, EmbeddedStore]]:
    shards = {name: EmbeddedStore(tmp_path, name) for name in ("1", "2", "3")}
    yield shards
    for store in shards.values():
        store.close()


def make_backend(stores: dict[str, EmbeddedStore], dequeue_only: str = "") -> ShardedBackend:
    return ShardedBackend(
        ShardMap(Shard(name, store, name == dequeue_only) for name, store in stores.items()),
        num_priorities=PRIORITIES,
        parallelism=4,
        clock=ManualClock(),
    )


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def jobs_and_keys(*keys: str | None) -> tuple[list[NewJob], Keys]:
    jobs = [NewJob(1, f"body-{i}".encode(), 0, 2) for i in range(len(keys))]
    return jobs, [(key, 0, None, None) for key in keys]


def pending(store: EmbeddedStore) -> int:
    if Q not in store.get_queue_names():
        return 0
    return sum(store.count_jobs(Q, JobFilter(JobState.PENDING, p, 0, future=None), None) for p in (1, 2, 3))


class Place(Protocol):
    def __call__(self, backend: ShardedBackend, jobs: list[NewJob], keys: Keys, now: int) -> list[tuple[str, bool]]: ...


def job_by_job(backend: ShardedBackend, jobs: list[NewJob], keys: Keys, now: int) -> list[tuple[str, bool]]:
    return run(backend.enqueue_keyed_jobs(Q, jobs, keys, now))


def split(backend: ShardedBackend, jobs: list[NewJob], keys: Keys, now: int) -> list[tuple[str, bool]]:
    placed = run(backend.enqueue_keyed_batch(Q, KeyedJobBatch(jobs, keys), now))
    assert placed is not None and not isinstance(placed, tuple), "several shards take new jobs: a split"
    return [(encode_descriptor(Q, shard, p, i), deduplicated) for shard, p, i, deduplicated in placed.to_list()]


@pytest.fixture(params=[job_by_job, split], ids=["job_by_job", "split"])
def place(request: pytest.FixtureRequest) -> Place:
    fn: Place = request.param
    return fn


def keys_on(backend: ShardedBackend, shard: str, count: int, *, among: list[Shard] | None = None) -> list[str]:
    """``count`` keys whose shard (among every shard, or ``among``) is ``shard``."""
    shards = among if among is not None else backend.shards.all()
    found = (f"key-{i}" for i in range(10_000) if key_shard(Q, f"key-{i}", shards).name == shard)
    return [next(found) for _ in range(count)]


def test_each_key_is_placed_on_its_shard_and_found_there(stores: dict[str, EmbeddedStore], place: Place) -> None:
    backend = make_backend(stores)
    try:
        for store in stores.values():
            store.create_queue(Q, PRIORITIES)
        keys = [key for name in ("1", "2", "3") for key in keys_on(backend, name, 2)]
        jobs, spec = jobs_and_keys(*keys)
        placed = place(backend, jobs, spec, 0)
        assert [d.split(":")[1] for d, _ in placed] == ["s1", "s1", "s2", "s2", "s3", "s3"]
        assert place(backend, jobs, spec, 1) == [(d, True) for d, _ in placed]
        assert [pending(stores[name]) for name in ("1", "2", "3")] == [2, 2, 2]
    finally:
        backend.close()


def test_a_dequeue_only_shard_holds_no_keys(stores: dict[str, EmbeddedStore], place: Place) -> None:
    backend = make_backend(stores, dequeue_only="2")
    try:
        for store in stores.values():
            store.create_queue(Q, PRIORITIES)
        takers = [s for s in backend.shards.all() if not s.dequeue_only]
        # keys whose shard, were "2" taking new jobs, would be "2"
        keys = keys_on(backend, "2", 5)
        jobs, spec = jobs_and_keys(*keys)
        placed = place(backend, jobs, spec, 0)
        assert [d.split(":")[1] for d, _ in placed] == [f"s{key_shard(Q, k, takers).name}" for k in keys]
        assert pending(stores["2"]) == 0
    finally:
        backend.close()


def test_a_queue_missing_on_a_keys_shard_is_made_there(stores: dict[str, EmbeddedStore], place: Place) -> None:
    backend = make_backend(stores)
    try:
        stores["2"].create_queue(Q, PRIORITIES)
        (key,) = keys_on(backend, "3", 1)
        jobs, spec = jobs_and_keys(key)
        ((descriptor, deduplicated),) = place(backend, jobs, spec, 0)
        assert descriptor.split(":")[1] == "s3" and not deduplicated
        assert Q in stores["3"].get_queue_names() and pending(stores["3"]) == 1
        assert Q not in stores["1"].get_queue_names()
    finally:
        backend.close()


def test_a_queue_no_shard_has_is_not_made(stores: dict[str, EmbeddedStore], place: Place) -> None:
    backend = make_backend(stores)
    try:
        jobs, spec = jobs_and_keys(*keys_on(backend, "1", 1), None)
        with pytest.raises(QueueNotFoundError):
            place(backend, jobs, spec, 0)
        assert all(Q not in store.get_queue_names() for store in stores.values())
    finally:
        backend.close()


def test_a_request_failing_part_way_leaves_no_keyless_job_and_its_retry_makes_no_duplicate(
    stores: dict[str, EmbeddedStore], tmp_path: Path, place: Place
) -> None:
    backend = make_backend(stores)
    try:
        for store in stores.values():
            store.create_queue(Q, PRIORITIES)
        (on_1,) = keys_on(backend, "1", 1)
        (on_3,) = keys_on(backend, "3", 1)
        jobs, spec = jobs_and_keys(on_1, None, on_3)
        stores["3"].close()  # the shard of one key is down
        with pytest.raises(ShardConnectionError):
            place(backend, jobs, spec, 0)
        assert [pending(stores[name]) for name in ("1", "2")] == [1, 0]  # the key on 1; no keyless job
        stores["3"] = EmbeddedStore(tmp_path, "3")  # back
        retry = make_backend(stores)  # closes the stores when closed
        try:
            placed = place(retry, jobs, spec, 1)
            assert [deduplicated for _, deduplicated in placed] == [True, False, False]
            assert [d.split(":")[1] for d, _ in placed][::2] == ["s1", "s3"]
            assert sum(pending(store) for store in stores.values()) == 3
        finally:
            retry.close()
    finally:
        backend.close()
