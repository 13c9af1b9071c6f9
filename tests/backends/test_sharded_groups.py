"""Ordered groups and the queue rules above the stores (``ShardedBackend``), over three real
embedded shards: a group lives on one shard, a dedup key with a group is checked there, the
in-progress cap is split between the shards and follows a reload of the shard set, and a group
refused by its shard's store refuses the whole request before anything is written. A request
spread over the shards by the extension (``enqueue_keyed_batch``, what the server runs) lands
where job-by-job placement (``enqueue_keyed_jobs``) puts it.

Through a server: ``tests/server/test_ordered_groups.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from tests.support.redis_server import RedisServer

from pinlater._pinlater import KeyedJobBatch, decode_descriptors
from pinlater.backends.base import JobFilter, JobState, NewJob, QueueRules, ShardStore
from pinlater.backends.embedded.store import EmbeddedStore
from pinlater.backends.redis import RedisEndpoint, RedisShardConfig, RedisStore
from pinlater.backends.sharded import ShardedBackend, key_shard
from pinlater.backends.shardmap import Shard, ShardMap
from pinlater.clock import ManualClock
from pinlater.errors import ErrorCode, PinLaterError

Q = "groups_sharded"
T = TypeVar("T")


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[dict[str, ShardStore]]:
    shards: dict[str, ShardStore] = {name: EmbeddedStore(tmp_path, name) for name in ("1", "2", "3")}
    yield shards
    for store in shards.values():
        store.close()


def make_backend(stores: dict[str, ShardStore]) -> ShardedBackend:
    backend = ShardedBackend(
        ShardMap(Shard(name, store) for name, store in stores.items()),
        num_priorities=2,
        parallelism=4,
        clock=ManualClock(),
    )
    for store in stores.values():
        store.create_queue(Q, 2)
    return backend


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def shard_of(descriptor: str) -> str:
    ((_, shard, _, _),) = decode_descriptors([descriptor])
    return str(shard)


def test_a_group_lives_on_one_shard_with_its_dedup_keys(stores: dict[str, ShardStore]) -> None:
    backend = make_backend(stores)
    groups = [f"group-{i}" for i in range(12)]
    jobs = [NewJob(1, f"{g}-{n}".encode(), 0, 2) for g in groups for n in range(3)]
    keys = [(f"key-{g}" if n == 0 else None, 0, g, None) for g in groups for n in range(3)]
    placed = run(backend.enqueue_keyed_jobs(Q, jobs, keys, 0))
    try:
        where = {g: {shard_of(d) for d, _ in placed[3 * i : 3 * i + 3]} for i, g in enumerate(groups)}
        assert all(len(shards) == 1 for shards in where.values()), where
        shards = list(backend.shards)
        expected = {g: key_shard(Q, g, shards, space="group").name for g in groups}
        assert {g: s.pop() for g, s in where.items()} == expected
        assert len(set(expected.values())) > 1, "groups spread over the shards"

        again = run(backend.enqueue_keyed_jobs(Q, jobs[:1], keys[:1], 1))
        assert again == [(placed[0][0], True)], "the dedup key is found on its group's shard"
    finally:
        backend.close()


def test_the_cap_is_split_between_the_shards_and_follows_a_reload(stores: dict[str, ShardStore]) -> None:
    backend = make_backend(stores)
    try:
        for store in stores.values():
            store.enqueue_jobs(Q, [NewJob(1, b"x", 0, 2) for _ in range(10)], 0)
        backend.set_queue_rules({Q: QueueRules(max_in_progress=7)})
        assert backend.queue_rules == {Q: QueueRules(max_in_progress=7)}, "the whole queue's cap"
        got = run(backend.dequeue_jobs(Q, 100, "worker"))
        assert sum(len(batch.jobs) for batch in got) == 7
        running = {n: s.count_jobs(Q, JobFilter(JobState.IN_PROGRESS, 1, 0, None), None) for n, s in stores.items()}
        assert running == {"1": 3, "2": 2, "3": 2}

        backend.replace_shards(ShardMap([Shard("1", stores["1"]), Shard("2", stores["2"])]))
        again = run(backend.dequeue_jobs(Q, 100, "worker"))
        assert sorted((b.shard, len(b.jobs)) for b in again) == [("1", 1), ("2", 1)], "shares of 4 and 3 now"
    finally:
        backend.close()


Keys = list[tuple[str | None, int, str | None, int | None]]


def enqueue_split(
    backend: ShardedBackend, jobs: list[NewJob], keys: Keys, now: int
) -> list[tuple[str, int, int, bool]]:
    """``enqueue_keyed_batch`` of a request over several shards: ``(shard, priority, id,
    deduplicated)`` per job."""
    placed = run(backend.enqueue_keyed_batch(Q, KeyedJobBatch(jobs, keys), now))
    assert placed is not None and not isinstance(placed, tuple), "several shards take new jobs: a split"
    return placed.to_list()


def test_a_split_request_lands_where_job_by_job_placement_puts_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same request through the extension's split and through ``enqueue_keyed_jobs``, on two
    fresh sets of three shards: every job with a key, a group or an expiry gets the same shard,
    priority, id and flag (a dedup key repeated with another group, or with none, included), again
    when sent twice; the jobs with none of them (which go to any shard) are written once per
    request, at their own priorities."""
    backends = []
    for side in ("python", "split"):
        stores: dict[str, ShardStore] = {n: EmbeddedStore(tmp_path / side, n) for n in ("1", "2", "3")}
        backend = make_backend(stores)
        loose = backend.shards.get("2")
        assert loose is not None

        async def loose_shard(shard: Shard = loose) -> Shard:  # where a job with only an expiry goes
            return shard

        monkeypatch.setattr(backend, "_loose_shard", loose_shard)
        backends.append(backend)
    by_python, by_split = backends
    keys: Keys = [(f"k{i}", 0, None, None) for i in range(24)]
    keys += [(None, 0, f"g{i % 6}", None) for i in range(12)]
    keys += [(f"kg{i}", 0, f"g{i % 4}", None) for i in range(8)]
    keys += [("k3", 0, "g1", None), ("kg2", 0, None, None), ("k5", 0, None, None)]  # repeats
    keys += [(None, 0, None, 10**12), (None, 0, None, None), (None, 0, None, None)]  # expiry, plain
    jobs = [NewJob(1 + i % 2, f"job-{i}".encode(), 0, 2) for i in range(len(keys))]
    placed_by_keys = len(keys) - 2  # the last two go to any shard
    try:
        for round_no in range(2):
            python = run(by_python.enqueue_keyed_jobs(Q, jobs, keys, 1000))
            split = enqueue_split(by_split, jobs, keys, 1000)
            decoded = [(str(s), p, i) for _, s, p, i in decode_descriptors([d for d, _ in python])]
            assert [place[:2] for place in split[:placed_by_keys]] == [d[:2] for d in decoded[:placed_by_keys]]
            # ids too, but for new jobs only while both sides' shards hold the same jobs: the
            # first request's plain jobs went to any shard, on each side its own
            same = [i for i in range(placed_by_keys) if round_no == 0 or split[i][3]]
            assert [split[i][:3] for i in same] == [decoded[i] for i in same]
            assert [place[3] for place in split] == [flag for _, flag in python]
            assert {place[0] for place in split[:44]} == {"1", "2", "3"}, "keys spread over every shard"
            assert split[47][0] == "2", "the job with only an expiry on the loose shard"
            assert split[44][:3] == split[3][:3] and split[45][:3] == split[38][:3] and split[46][:3] == split[5][:3]
            again = round_no == 1  # a dedup key is held the second time; a group alone is no key
            expect = [again] * 24 + [False] * 12 + [again] * 8 + [True] * 3 + [False] * 3
            assert [place[3] for place in split] == expect
            new = [i for i in range(len(keys)) if not split[i][3]]
            assert [split[i][1] for i in new] == [jobs[i].priority for i in new]
            plain = {place[::2] for place in split[placed_by_keys:]}  # (shard, id)
            assert len(plain) == 2 and not plain & {place[::2] for place in split[:placed_by_keys]}, "new jobs"
        for backend in backends:  # the 32 with a dedup key once, the 12 grouped and 3 others twice
            counts = [run(backend.count_jobs(Q, JobState.PENDING, p, False, None)) for p in (1, 2)]
            assert sum(counts) == 32 + 2 * (12 + 3)
    finally:
        for backend in backends:
            backend.close()


@pytest.mark.redis
@pytest.mark.parametrize("split", [False, True], ids=["job_by_job", "split"])
def test_a_group_its_shard_refuses_refuses_the_request_and_writes_nothing(tmp_path: Path, split: bool) -> None:
    with RedisServer(tmp_path / "redis") as server:
        endpoint = RedisEndpoint(server.host, server.port)
        original = RedisStore("r", RedisShardConfig(endpoint, layout="original"))
        embedded = EmbeddedStore(tmp_path, "e")
        stores: dict[str, ShardStore] = {"e": embedded, "r": original}
        stores["s"] = RedisStore("s", RedisShardConfig(endpoint, layout="original"))  # refuses too
        backend = make_backend(stores)
        try:
            shards = list(backend.shards)

            def group_on(shard: str) -> str:
                return next(f"g{i}" for i in range(100) if key_shard(Q, f"g{i}", shards, space="group").name == shard)

            # the first refused job in request order is named, whichever shard refuses it
            jobs = [NewJob(1, b"plain", 0, 2), NewJob(1, b"keyed", 0, 2), NewJob(1, b"grouped", 0, 2)]
            jobs += [NewJob(1, b"grouped on e", 0, 2), NewJob(1, b"grouped on s", 0, 2)]
            keys: Keys = [(None, 0, None, None), ("k", 0, None, None), (None, 0, group_on("r"), None)]
            keys += [(None, 0, group_on("e"), None), (None, 0, group_on("s"), None)]
            if split:  # the other way round too: the job of s first
                jobs[2], jobs[4], keys[2], keys[4] = jobs[4], jobs[2], keys[4], keys[2]
            with pytest.raises(PinLaterError) as info:
                if split:
                    enqueue_split(backend, jobs, keys, 0)
                else:
                    run(backend.enqueue_keyed_jobs(Q, jobs, keys, 0))
            assert info.value.code == ErrorCode.ENQUEUE_REJECTED
            assert info.value.message.startswith("jobs[2]: groupKey (ordered groups) ")
            reason = stores["s" if split else "r"].groups_refused  # (it names its shard)
            assert reason is not None and info.value.message.endswith(reason)
            pending = JobFilter(JobState.PENDING, 1, 0, None)
            assert [s.count_jobs(Q, pending, None) for s in stores.values()] == [0, 0, 0]
        finally:
            backend.close()
