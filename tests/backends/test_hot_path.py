"""The hot path as the server runs it, on every backend: ``ShardStore.hot_path`` through
``ShardedBackend`` (on the event loop for Redis, on the thread pool for the blocking stores),
answering and failing as the store's blocking methods of the same names do.

Also the drivers: every backend kind, the embedded one included, is a ``BackendDriver``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from tests.support.hot import dequeue, enqueue

from pinlater._pinlater import AckGroup, ClaimedJobs, ClaimItems, LocalIds, NewJobBatch
from pinlater.backends.base import (
    AckItem,
    BackendDriver,
    ClaimedJob,
    Enqueued,
    HotPath,
    JobState,
    KeyedJob,
    NewJob,
    QueueRules,
    ShardStore,
)
from pinlater.backends.drivers import driver_for
from pinlater.backends.embedded import EmbeddedDriver, EmbeddedStore
from pinlater.backends.sharded import ShardedBackend
from pinlater.backends.shardmap import Shard, ShardMap
from pinlater.config import Settings
from pinlater.errors import ConfigError, QueueNotFoundError, ShardConnectionError, StoreLockedError

Q = "hot"
T0 = 1_700_000_000_000
HOLD_MS = 60_000


def test_the_hot_operations_answer_as_the_blocking_methods(store: ShardStore) -> None:
    store.create_queue(Q, 2)
    shard = Shard(store.name, store)
    backend = ShardedBackend(ShardMap([shard]), num_priorities=2, parallelism=2)

    async def lifecycle() -> tuple[list[int], list[ClaimedJob], list[ClaimedJob], list[tuple[int, int]], int]:
        hot = backend.hot_path(shard)
        assert backend.hot_path(shard) is hot, "made once per shard"
        batch = NewJobBatch([NewJob(1, b"job-%d" % i, T0, 2) for i in range(4)])
        local_ids = await backend.on_shard(shard, hot.enqueue_jobs(Q, batch, T0))
        assert isinstance(local_ids, LocalIds)
        ids = local_ids.to_list()
        got = await hot.dequeue_jobs(Q, 1, 2, "claim|a", T0, False)
        assert isinstance(got, ClaimedJobs) and len(got) == 2
        claimed = [ClaimedJob._make(j) for j in got.to_list()]
        acks = AckGroup([AckItem(1, claimed[0].local_id)], [AckItem(1, claimed[1].local_id, "", 1000)])
        await hot.ack_jobs(Q, acks, T0)
        reserved_jobs = await hot.reserve_jobs(Q, 1, 10, "~r|hot", T0, HOLD_MS)
        assert isinstance(reserved_jobs, ClaimedJobs)
        reserved = [ClaimedJob._make(j) for j in reserved_jobs.to_list()]
        keys = await hot.claim_reserved(Q, ClaimItems([(1, reserved[0].local_id, "claim|b")]), "~r|hot", T0)
        released = await hot.release_reservations(Q, [(1, j.local_id) for j in reserved[1:]], "~r|hot", T0)
        with pytest.raises(QueueNotFoundError):
            await backend.on_shard(shard, hot.dequeue_jobs("nope", 1, 1, "c", T0, False))
        await backend.aclose()
        return ids, claimed, reserved, keys, released

    ids, claimed, reserved, keys, released = asyncio.run(lifecycle())
    backend._executor.shutdown(wait=True)  # the fixture closes the store
    assert len(set(ids)) == 4
    assert [j.local_id for j in claimed] == ids[:2] and claimed[0].body == b"job-0"
    assert [j.local_id for j in reserved] == ids[2:], "the retried job waits for its delay"
    assert keys == [] and released == 1, "every job claimed: none left out"
    records = {r.local_id: r for r in store.lookup_jobs(Q, [(1, i) for i in ids], False)}
    assert [records[i].state for i in ids] == [
        JobState.SUCCEEDED,
        JobState.PENDING,
        JobState.IN_PROGRESS,
        JobState.PENDING,
    ]
    assert records[ids[1]].attempts_remaining == 1 and records[ids[1]].run_after_ms == T0 + 1000
    assert records[ids[2]].claim_descriptor == "claim|b"
    assert records[ids[3]].as_clients_see_it().claim_descriptor is None
    assert shard.healthy


def test_acks_carried_by_a_dequeue_are_applied_before_its_claim(store: ShardStore) -> None:
    """``ack_and_dequeue_jobs``: a job failed with attempts left and no retry delay is claimed
    again by the same call, so the acks ran first; a success is final; a missing queue fails."""
    store.create_queue(Q, 2)
    shard = Shard(store.name, store)
    backend = ShardedBackend(ShardMap([shard]), num_priorities=2, parallelism=2)

    async def run() -> tuple[list[int], list[int]]:
        hot = backend.hot_path(shard)
        batch = NewJobBatch([NewJob(1, b"job-%d" % i, T0, 2) for i in range(3)])
        ids = (await hot.enqueue_jobs(Q, batch, T0)).to_list()
        first = [ClaimedJob._make(j) for j in (await hot.dequeue_jobs(Q, 1, 2, "claim|a", T0, False)).to_list()]
        assert [j.local_id for j in first] == ids[:2]
        acks = AckGroup([AckItem(1, ids[0])], [AckItem(1, ids[1], "", 0)])
        got = await backend.on_shard(shard, hot.ack_and_dequeue_jobs(Q, acks, 1, 10, "claim|b", T0 + 5))
        assert isinstance(got, ClaimedJobs)
        with pytest.raises(QueueNotFoundError):
            await backend.on_shard(shard, hot.ack_and_dequeue_jobs("nope", acks, 1, 1, "claim|c", T0))
        await backend.aclose()
        return ids, [ClaimedJob._make(j).local_id for j in got.to_list()]

    ids, again = asyncio.run(run())
    backend._executor.shutdown(wait=True)
    assert sorted(again) == ids[1:], "the failed job came back before the claim"
    records = {r.local_id: r for r in store.lookup_jobs(Q, [(1, i) for i in ids], False)}
    assert records[ids[0]].state == JobState.SUCCEEDED
    assert [records[i].state for i in ids[1:]] == [JobState.IN_PROGRESS] * 2
    assert records[ids[1]].claim_descriptor == "claim|b" and records[ids[1]].attempts_remaining == 1


class Recorder:
    """A store's hot path that notes the name of each operation called, then calls it."""

    def __init__(self, hot: object) -> None:
        self._hot = hot
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> object:
        attr = getattr(self._hot, name)
        if not callable(attr):
            return attr

        def called(*args: object, **kwargs: object) -> object:
            self.calls.append(name)
            return attr(*args, **kwargs)

        return called


def recorded(backend: ShardedBackend) -> dict[str, Recorder]:
    """Every hot path ``backend`` hands out, recorded, by shard name."""
    recorders: dict[str, Recorder] = {}
    real = backend.hot_path

    def hot_path(shard: Shard) -> HotPath:
        if shard.name not in recorders:
            recorders[shard.name] = Recorder(real(shard))
        # (where the walk and the enqueue look first, without calling ``hot_path``)
        backend._current_hot_paths[shard] = recorders[shard.name]  # type: ignore[assignment]
        return recorders[shard.name]  # type: ignore[return-value]  # a stand-in that forwards

    backend.hot_path = hot_path  # type: ignore[method-assign]
    return recorders


def test_a_dequeue_carries_its_acks_or_sends_them_alone(store: ShardStore) -> None:
    """``ShardedBackend.dequeue_jobs(acks=...)``: successes go with the walk's store call on
    their shard, or alone when the walk skips it (known empty); ``on_acked`` runs either way."""
    store.create_queue(Q, 2)
    shard = Shard(store.name, store)
    backend = ShardedBackend(ShardMap([shard]), num_priorities=2, parallelism=2)
    recorders = recorded(backend)
    acked: list[int] = []

    async def run() -> tuple[list[int], int, int]:
        batch = NewJobBatch([NewJob(1, b"job-%d" % i, T0, 2) for i in range(3)])
        ids = (await backend.hot_path(shard).enqueue_jobs(Q, batch, T0)).to_list()
        assert len(await dequeue(backend, Q, 1, "src")) == 1  # ids[0]
        calls = recorders[shard.name].calls
        del calls[:]
        first = AckGroup([AckItem(1, ids[0])], [])
        carried = await backend.dequeue_jobs(Q, 1, "src", acks=[(shard.name, first)], on_acked=lambda: acked.append(1))
        assert calls == ["ack_and_dequeue_jobs"], calls
        assert len(await dequeue(backend, Q, 10, "src")) == 1  # ids[2]; the places are noted empty
        del calls[:]
        second = AckGroup([AckItem(1, ids[1])], [])
        alone = await backend.dequeue_jobs(Q, 10, "src", acks=[(shard.name, second)], on_acked=lambda: acked.append(2))
        assert calls == ["ack_jobs"], "no store call of the walk: the acks alone"
        await backend.aclose()
        return ids, sum(len(b.jobs) for b in carried), sum(len(b.jobs) for b in alone)

    ids, carried, alone = asyncio.run(run())
    backend._executor.shutdown(wait=True)
    assert (carried, alone) == (1, 0) and acked == [1, 2]
    records = {r.local_id: r for r in store.lookup_jobs(Q, [(1, i) for i in ids], False)}
    assert [records[i].state for i in ids] == [JobState.SUCCEEDED, JobState.SUCCEEDED, JobState.IN_PROGRESS]


def test_an_ack_under_a_cap_frees_room_for_the_dequeue_that_carries_it(store: ShardStore) -> None:
    """A queue at its ``maxInProgress``: the success a dequeue carries makes room that the same
    dequeue fills, though the walk had noted the place empty at the cap."""
    store.create_queue(Q, 2)
    shard = Shard(store.name, store)
    backend = ShardedBackend(ShardMap([shard]), num_priorities=2, parallelism=2)
    backend.set_queue_rules({Q: QueueRules(max_in_progress=1)})

    async def run() -> tuple[list[int], list[int]]:
        batch = NewJobBatch([NewJob(1, b"job-%d" % i, T0, 2) for i in range(3)])
        ids = (await backend.hot_path(shard).enqueue_jobs(Q, batch, T0)).to_list()
        (first,) = await dequeue(backend, Q, 5, "src")
        assert await dequeue(backend, Q, 5, "src") == [], "at the cap"
        acks = AckGroup([AckItem(1, first.job.local_id)], [])
        got = await backend.dequeue_jobs(Q, 5, "src", acks=[(shard.name, acks)])
        await backend.aclose()
        return ids, [ClaimedJob._make(j).local_id for b in got for j in b.jobs.to_list()]

    ids, again = asyncio.run(run())
    backend._executor.shutdown(wait=True)
    assert again == [ids[1]]


def test_a_failed_ack_sent_alone_claims_nothing_elsewhere(tmp_path: Path) -> None:
    """Acks whose shard the walk does not look at go alone before its first store call on
    another shard; when they fail, the dequeue fails with nothing claimed there."""
    stores = [EmbeddedStore(tmp_path / name, name) for name in ("a", "b")]
    for s in stores:
        s.create_queue(Q, 1)
    shards = [Shard(s.name, s) for s in stores]
    backend = ShardedBackend(ShardMap(shards), num_priorities=1, parallelism=2)

    async def run() -> list[int]:
        batch = NewJobBatch([NewJob(1, b"job-%d" % i, T0, 2) for i in range(3)])
        ids = (await backend.hot_path(shards[1]).enqueue_jobs(Q, batch, T0)).to_list()
        shards[0].mark_unhealthy("down for the test")  # the walk skips it
        stores[0].close()  # and an ack there fails
        with pytest.raises(ShardConnectionError):
            await backend.dequeue_jobs(Q, 3, "src", acks=[("a", AckGroup([AckItem(1, 1)], []))])
        await backend.aclose()
        return ids

    try:
        ids = asyncio.run(run())
        records = stores[1].lookup_jobs(Q, [(1, i) for i in ids], False)
        assert [r.state for r in records] == [JobState.PENDING] * 3, "nothing claimed on b"
    finally:
        backend.close()


def test_the_embedded_store_runs_its_hot_path_on_its_native_writer(tmp_path: Path) -> None:
    store = EmbeddedStore(tmp_path / "data", "1")
    store.create_queue(Q, 1)
    shard = Shard("1", store)
    backend = ShardedBackend(ShardMap([shard]), num_priorities=1, parallelism=2)

    async def enqueue_one() -> list[str]:
        return await enqueue(backend, Q, [NewJob(1, b"x", 0, 1)])

    try:
        assert len(asyncio.run(enqueue_one())) == 1
        assert not backend._executor._threads, "not on the backend's pool"
        assert store.native_hot_path(backend._offload).commits == 1, "its Rust writer committed it"
    finally:
        backend.close()


def test_the_embedded_store_runs_keyed_enqueues_on_its_native_writer(tmp_path: Path) -> None:
    store = EmbeddedStore(tmp_path / "data", "1")
    store.create_queue(Q, 1)
    shard = Shard("1", store)
    backend = ShardedBackend(ShardMap([shard]), num_priorities=1, parallelism=2)
    jobs = [KeyedJob(NewJob(1, b"x", 0, 1), "k", 0), KeyedJob(NewJob(1, b"y", 0, 1), "l", 5)]

    async def twice() -> tuple[list[Enqueued], list[Enqueued]]:
        hot = backend.hot_path(shard)
        return await hot.enqueue_keyed_jobs(Q, jobs, T0), await hot.enqueue_keyed_jobs(Q, jobs, T0)

    try:
        first, second = asyncio.run(twice())
        assert not backend._executor._threads, "not on the backend's pool"
        assert store.native_hot_path(backend._offload).commits == 2, "its Rust writer committed both"
        assert [e.deduplicated for e in first] == [False, False]
        assert second == [e._replace(deduplicated=True) for e in first]
        records = store.lookup_jobs(Q, [(1, e.local_id) for e in first], True)
        assert sorted((r.body, r.dedup_key) for r in records) == [(b"x", "k"), (b"y", "l")]
    finally:
        backend.close()


def test_every_backend_kind_is_a_driver(tmp_path: Path) -> None:
    shards_file = tmp_path / "shards.json"

    def settings(kind: str, **values: object) -> Settings:
        where = {"data_dir": tmp_path / "data"} if kind == "embedded" else {"backend_config_path": shards_file}
        return Settings().with_values({"backend": kind, **where, **values}, source="test")

    kinds: list[BackendDriver] = [driver_for(settings(kind)) for kind in ("embedded", "redis", "mysql")]
    assert [d.kind for d in kinds] == ["embedded", "redis", "mysql"]
    assert [d.count_limit(settings(d.kind, mysql_count_limit=7)) for d in kinds] == [None, None, 7]
    embedded = kinds[0]
    assert embedded.config_path(settings("embedded")) is None
    assert list(embedded.shard_configs(settings("embedded", embedded_num_shards=3))) == ["1", "2", "3"]
    with pytest.raises(ConfigError, match="no backend config file"):
        embedded.parse_config("{}", "shards.json")
    redis = kinds[1]
    assert redis.config_path(settings("redis")) == shards_file
    with pytest.raises(ConfigError, match="cannot read backend config"):
        redis.shard_configs(settings("redis"))
    shards_file.write_text('{"shards": []}', encoding="utf-8")
    with pytest.raises(ConfigError, match="no shards configured"):
        redis.shard_configs(settings("redis"))
    shards_file.write_text('{"shards": [{"name": "7", "shardConfig": {"master": {"host": "h", "port": 1}}}]}')
    assert list(redis.shard_configs(settings("redis"))) == ["7"]


def test_the_embedded_driver_holds_the_data_dir_alone(tmp_path: Path) -> None:
    settings = Settings().with_values({"data_dir": tmp_path / "data"}, source="test")
    first, second = EmbeddedDriver(), EmbeddedDriver()
    first.acquire(settings)
    try:
        with pytest.raises(StoreLockedError):
            second.acquire(settings)
        store = first.open_store("1", first.shard_configs(settings)["1"], settings)
        assert store.path.parent == tmp_path / "data" and first.warnings(store) == []
        store.close()
    finally:
        first.release()
        first.release()  # idempotent
    second.acquire(settings)
    second.release()
