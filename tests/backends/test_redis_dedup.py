"""Dedup keys in the Redis store beyond the shared suite (``test_dedup_conformance.py``): where
the records live in each layout, what they cost, broker holds, priorities beyond the store's,
and ``pinlater migrate-layout`` carrying them both ways."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from tests.support.redis_server import RedisServer
from tests.support.wait import wait_for

from pinlater.backends.base import AckItem, Enqueued, JobFilter, JobState, KeyedJob, NewJob
from pinlater.backends.redis import RedisEndpoint, RedisShardConfig, RedisStore
from pinlater.backends.redis.keys_compact import DEDUP_PIN
from pinlater.backends.redis.migrate import migrate_shard, script_source
from pinlater.backends.sharded import ShardedBackend
from pinlater.backends.shardmap import Shard, ShardMap
from pinlater.config import Settings

pytestmark = pytest.mark.redis

Q = "dq"
T0 = 1_700_000_000_000
CLAIM = "claim-0001:worker:host-a"
RESERVATION = "~r|broker-1"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    with RedisServer(tmp_path / "redis") as srv:
        yield srv


@pytest.fixture
def raw(server: RedisServer) -> Iterator[redis.Redis]:
    client = server.client()
    yield client
    client.close()


def open_store(server: RedisServer, layout: str, settings: Settings | None = None) -> RedisStore:
    return RedisStore("1", RedisShardConfig(RedisEndpoint(server.host, server.port), layout=layout), settings)


def keyed(key: str, *, priority: int = 1, window_ms: int = 0, run_after: int = T0) -> KeyedJob:
    return KeyedJob(NewJob(priority, b"body", run_after, 2), key, window_ms)


@pytest.mark.parametrize("layout", ["original", "compact"])
def test_a_job_held_by_a_broker_holds_its_key_and_shows_it(server: RedisServer, layout: str) -> None:
    store = open_store(server, layout)
    try:
        store.create_queue(Q, 3)
        (a,) = store.enqueue_keyed_jobs(Q, [keyed("k")], T0)
        assert [j.local_id for j in store.reserve_jobs(Q, 1, 10, RESERVATION, T0, 60_000)] == [a.local_id]
        (b,) = store.enqueue_keyed_jobs(Q, [keyed("k")], T0 + 1)
        assert b == Enqueued(1, a.local_id, True)
        (found,) = store.scan_jobs(Q, JobFilter(JobState.PENDING, 1, T0 + 1), 10)
        assert (found.local_id, found.dedup_key) == (a.local_id, "k")
        assert store.claim_reserved(Q, [(1, a.local_id, CLAIM)], RESERVATION, T0 + 2) == [(1, a.local_id)]
        store.ack_jobs(Q, [AckItem(1, a.local_id)], [], T0 + 3)
        (c,) = store.enqueue_keyed_jobs(Q, [keyed("k")], T0 + 4)
        assert not c.deduplicated
        # the original layout shows a job's key while the key's record names it; the compact one
        # keeps the key in the job's record, so the finished job shows it still
        records = store.lookup_jobs(Q, [(1, a.local_id), (1, c.local_id)], False)
        shown = "k" if layout == "compact" else None
        assert [(r.local_id, r.dedup_key) for r in records] == [(a.local_id, shown), (c.local_id, "k")]
    finally:
        store.close()


@pytest.mark.parametrize("layout", ["original", "compact"])
def test_a_record_of_a_priority_above_the_stores_is_read_with_a_second_call(server: RedisServer, layout: str) -> None:
    wide = open_store(server, layout, Settings(num_priority_levels=5))
    narrow = open_store(server, layout, Settings(num_priority_levels=2))
    try:
        wide.create_queue(Q, 5)
        (a,) = wide.enqueue_keyed_jobs(Q, [keyed("k", priority=5)], T0)
        (b,) = narrow.enqueue_keyed_jobs(Q, [keyed("k", priority=1)], T0 + 1)
        assert b == Enqueued(5, a.local_id, True)
        assert wide.delete_jobs(Q, JobFilter(JobState.PENDING, 5, T0 + 2, future=None), 10) == 1
        # the job is gone: the GC forgets its key (the compact job forgot it as it was deleted)
        assert narrow.gc_dedup_keys(Q, T0 + 4, 10) == (0 if layout == "compact" else 1)
        (c,) = narrow.enqueue_keyed_jobs(Q, [keyed("k", priority=1)], T0 + 5)
        assert not c.deduplicated
    finally:
        wide.close()
        narrow.close()


def test_the_original_layout_keeps_records_under_a_prefix_of_their_own(server: RedisServer, raw: redis.Redis) -> None:
    store = open_store(server, "original")
    try:
        store.create_queue(Q, 3)
        (a,) = store.enqueue_keyed_jobs(Q, [keyed("a:b_c*?", window_ms=7)], T0)
    finally:
        store.close()
    assert sorted(raw.keys("pld_*")) == [b"pld_1_dq.i", b"pld_1_dq.k", b"pld_1_dq.r"]
    assert raw.hgetall("pld_1_dq.k") == {b"a:b_c*?": f"1:{a.local_id}:{T0 + 7}".encode()}
    assert raw.hgetall("pld_1_dq.i") == {str(a.local_id).encode(): b"a:b_c*?"}
    assert raw.zrange("pld_1_dq.r", 0, -1, withscores=True) == [(str(a.local_id).encode(), float(T0 + 7))]
    # the job's hash has the original's fields only, which the Java server reads
    assert sorted(raw.hkeys(f"plh_1_dq.{a.local_id}")) == sorted([b"bd", b"al", b"ar", b"ca", b"ua", b"cs"])


def test_dedup_records_move_with_the_shard_both_ways(server: RedisServer, raw: redis.Redis) -> None:
    store = open_store(server, "original")
    try:
        store.create_queue(Q, 3)
        pending, done = store.enqueue_keyed_jobs(Q, [keyed("pending:1"), keyed("done_2", window_ms=60_000)], T0)
        store.dequeue_jobs(Q, 1, 1, CLAIM, T0, False)  # takes "pending:1" (the older id)
        store.dequeue_jobs(Q, 1, 1, CLAIM, T0, False)
        store.ack_jobs(Q, [AckItem(1, done.local_id)], [], T0 + 1)
    finally:
        store.close()

    for layout in ("compact", "original"):
        summary = migrate_shard(raw, "1", layout)
        assert summary.dedup_records == 2
        other = "pld_*" if layout == "compact" else "plc:{1:dq}:d*"
        assert raw.keys(other) == [], layout
        moved = open_store(server, layout)
        try:
            got = moved.enqueue_keyed_jobs(Q, [keyed("pending:1"), keyed("done_2")], T0 + 2)
            assert got == [Enqueued(1, pending.local_id, True), Enqueued(1, done.local_id, True)], layout
            found = moved.lookup_jobs(Q, [(1, pending.local_id), (1, done.local_id)], False)
            assert [r.dedup_key for r in found] == ["pending:1", "done_2"], layout
        finally:
            moved.close()

    store = open_store(server, "original")
    try:
        assert store.gc_dedup_keys(Q, T0 + 60_000, 10) == 0, "both jobs still exist"
        assert store.gc_finished_jobs(Q, 1, JobState.SUCCEEDED, T0 + 2, 10) == 1
        # looked at again once its next look comes (at most an hour on)
        assert store.gc_dedup_keys(Q, T0 + 60_000 + 3_600_000, 10) == 1  # "done_2": window passed, job gone
    finally:
        store.close()


@pytest.mark.parametrize("layout", ["original", "compact"])
def test_a_record_costs_little_memory(server: RedisServer, raw: redis.Redis, layout: str) -> None:
    """Bytes per record of the three structures, with 36-byte keys (a UUID), measured with
    MEMORY USAGE (the value reported in the Redis store's notes)."""
    n = 2000
    store = open_store(server, layout)
    try:
        store.create_queue(Q, 3)
        for start in range(0, n, 500):
            store.enqueue_keyed_jobs(Q, [keyed(str(uuid.uuid4())) for _ in range(500)], T0 + start)
        keys = store._shard.keys(Q).dedup_keys()
    finally:
        store.close()
    each = [int(raw.memory_usage(key, samples=0) or 0) / n for key in keys]
    print(f"{layout}: {sum(each):.0f} bytes per dedup record (36-byte keys): " + ", ".join(f"{b:.0f}" for b in each))
    assert sum(each) < 400


@pytest.mark.parametrize("layout", ["original"])
def test_records_of_active_jobs_do_not_stop_the_gc(server: RedisServer, layout: str) -> None:
    """The GC looks at ``limit`` records at most; those whose job is still active are looked at
    again later, so the next call reaches the records behind them. (A compact job's key has no
    gc entry while the job is active: test_a_compact_job_forgets_its_key_when_it_ends.)"""
    store = open_store(server, layout)
    try:
        store.create_queue(Q, 3)
        active = store.enqueue_keyed_jobs(Q, [keyed(f"a{i}") for i in range(3)], T0)
        gone = store.enqueue_keyed_jobs(Q, [keyed(f"g{i}", priority=2) for i in range(2)], T0 + 1)
        assert store.delete_jobs(Q, JobFilter(JobState.PENDING, 2, T0 + 1, future=None), 10) == 2
        assert store.gc_dedup_keys(Q, T0 + 10, 3) == 0  # the three oldest records: jobs still PENDING
        assert store.gc_dedup_keys(Q, T0 + 10, 3) == 2
        assert store.gc_dedup_keys(Q, T0 + 10, 3) == 0
        again = store.enqueue_keyed_jobs(Q, [keyed("a0"), keyed("g0")], T0 + 11)
        assert again[0] == Enqueued(1, active[0].local_id, True)
        assert not again[1].deduplicated and again[1].local_id != gone[0].local_id
    finally:
        store.close()


def test_a_migration_merges_records_the_target_already_holds_keeping_the_later_holder(
    server: RedisServer, raw: redis.Redis
) -> None:
    store = open_store(server, "original")
    try:
        store.create_queue(Q, 3)
        x, y = store.enqueue_keyed_jobs(Q, [keyed("x"), keyed("y")], T0)
    finally:
        store.close()
    # records a server wrote in the compact layout meanwhile: "x" by a later job, "z" only there
    later = y.local_id + 10
    raw.hset("plc:{1:dq}:dk", mapping={"x": f"1:{later}:{T0}", "z": f"1:{later + 1}:{T0}"})
    raw.hset("plc:{1:dq}:di", mapping={str(later): "x", str(later + 1): "z"})
    raw.zadd("plc:{1:dq}:dg", {str(later): T0, str(later + 1): T0})

    summary = migrate_shard(raw, "1", "compact")
    assert summary.dedup_records == 1  # "y"; "x" was there, and its later holder kept
    assert raw.hgetall("plc:{1:dq}:dk") == {
        b"x": f"1:{later}:{T0}".encode(),
        b"y": f"1:{y.local_id}:{T0}".encode(),
        b"z": f"1:{later + 1}:{T0}".encode(),
    }
    assert raw.hgetall("plc:{1:dq}:di") == {
        str(later).encode(): b"x",
        str(y.local_id).encode(): b"y",
        str(later + 1).encode(): b"z",
    }
    assert sorted(raw.zrange("plc:{1:dq}:dg", 0, -1)) == sorted(str(i).encode() for i in (later, y.local_id, later + 1))
    assert raw.keys("pld_*") == [] and x.local_id != later


@pytest.mark.parametrize("layout", ["original", "compact"])
@pytest.mark.parametrize("window_ms", [2**63 - 1, 2**62])
def test_a_window_of_any_length_holds_the_key_once_the_job_has_finished(
    server: RedisServer, layout: str, window_ms: int
) -> None:
    """``dedupWindowMillis`` is a Thrift i64: a window that reaches past what Lua's numbers hold
    (``Long.MAX_VALUE``, "for ever") keeps the key held, as the SQL stores do."""
    store = open_store(server, layout)
    try:
        store.create_queue(Q, 3)
        (a,) = store.enqueue_keyed_jobs(Q, [keyed("k", window_ms=window_ms)], T0)
        store.dequeue_jobs(Q, 1, 1, CLAIM, T0 + 1, False)
        store.ack_jobs(Q, [AckItem(1, a.local_id)], [], T0 + 2)
        assert store.enqueue_keyed_jobs(Q, [keyed("k")], T0 + 3) == [Enqueued(1, a.local_id, True)]
        assert store.gc_dedup_keys(Q, T0 + 3, 10) == 0
    finally:
        store.close()


@pytest.mark.parametrize("layout", ["original", "compact"])
def test_delete_queue_frees_the_records_off_the_main_thread(server: RedisServer, raw: redis.Redis, layout: str) -> None:
    """A queue's records go in its last delete_queue call, whole: two structures of as many
    entries as keys held (a million takes Redis about half a second to free in a DEL, ~0.18 s
    here for 310,000). UNLINK frees them on Redis's lazyfree thread, so the call stays short."""
    store = open_store(server, layout)
    try:
        store.create_queue(Q, 3)
        store.enqueue_keyed_jobs(Q, [keyed(f"k{i}", window_ms=60_000) for i in range(600)], T0)
        before = int(raw.info("memory")["lazyfreed_objects"])
        store.delete_queue(Q)
        assert store.get_queue_names() == set()
    finally:
        store.close()
    assert raw.keys("pld_*") + raw.keys("plc:{1:dq}:d*") == []
    # the lazyfree thread counts an object once it has freed it
    memory = wait_for(lambda: (m := raw.info("memory"))["lazyfree_pending_objects"] == 0 and m, what="lazyfree")
    # the records and ids (the gc set holds one run); the compact layout writes no ids
    assert int(memory["lazyfreed_objects"]) - before >= (2 if layout == "original" else 1)


def test_a_migration_merge_moves_a_bounded_number_of_records_per_call(raw: redis.Redis) -> None:
    """``lua_migrate/dedup_records.lua`` merging into a target that holds records takes at most
    ``ARGV[1]`` ids of the source's per call and says how many entries are left (a million
    records in one call would stall Redis for seconds); ``migrate_shard`` calls it until none
    are. A run of the source's runs set moves as the records it stands for, each with a gc entry
    of its own in the destination."""
    source = [f"pld_1_{Q}.k", f"pld_1_{Q}.i", f"pld_1_{Q}.g", f"pld_1_{Q}.r"]
    target = [f"plc:{{1:{Q}}}:dk", f"plc:{{1:{Q}}}:di", f"plc:{{1:{Q}}}:dg", f"plc:{{1:{Q}}}:dr"]
    for i in range(1, 9):
        raw.hset(source[0], f"s{i}", f"1:{i}:{T0}")
        raw.hset(source[1], str(i), f"s{i}")
        if i <= 5:
            raw.zadd(source[2], {str(i): T0})
    raw.zadd(source[3], {"6-8": T0})
    raw.hset(target[0], "t", f"1:100:{T0}")
    raw.hset(target[1], "100", "t")
    raw.zadd(target[2], {"100": T0})
    merge = raw.register_script(script_source("dedup_records"))
    assert [int(v) for v in merge([*source, *target], [2])] == [2, 4]  # 3 gc entries and a run left
    assert raw.hlen(source[0]) == 6 and raw.hlen(target[0]) == 3
    assert [int(v) for v in merge([*source, *target], [10])] == [6, 0]
    assert raw.exists(*source) == 0
    assert raw.hlen(target[0]) == raw.hlen(target[1]) == raw.zcard(target[2]) == 9
    assert raw.zscore(target[2], "7") == T0 and raw.exists(target[3]) == 0


def test_the_memory_estimate_between_readings_counts_the_dedup_records(server: RedisServer) -> None:
    """Between two readings the probe adds what this server enqueued (``memory.py``), so a burst
    cannot run far past the high-water mark; a keyed job's record (its key twice, ~220 bytes
    beside) costs several times a small job, and counts too."""
    store = open_store(server, "original")
    backend = ShardedBackend(ShardMap([Shard(store.name, store)]), num_priorities=3, parallelism=2)
    loop = asyncio.new_event_loop()
    try:
        store.create_queue(Q, 3)
        before = store.memory.refresh().used_bytes
        jobs = [NewJob(1, b"b" * 50, T0, 2) for _ in range(2000)]
        keys = [(f"{i:06d}" + "k" * 250, 0, None, None) for i in range(2000)]
        loop.run_until_complete(backend.enqueue_keyed_jobs(Q, jobs, keys, T0))
        latest = store.memory.latest
        assert latest is not None
        estimated = latest.used_bytes - before
        grown = store.memory.refresh().used_bytes - before
        assert 0.8 * grown <= estimated <= 1.5 * grown, (estimated, grown)
    finally:
        loop.run_until_complete(backend.aclose())
        loop.close()
        backend._executor.shutdown(wait=True)
        store.close()


def runs_set(layout: str) -> str:
    return "pld_1_dq.r" if layout == "original" else "plc:{1:dq}:dr"


def store_keys(layout: str) -> list[str]:
    """The dedup records, ids hash and gc set of queue Q on shard 1."""
    if layout == "original":
        return ["pld_1_dq.k", "pld_1_dq.i", "pld_1_dq.g"]
    return ["plc:{1:dq}:dk", "plc:{1:dq}:di", "plc:{1:dq}:dg"]


@pytest.mark.parametrize("layout", ["original"])
def test_an_enqueue_writes_one_gc_entry_per_run_of_its_keys(server: RedisServer, raw: redis.Redis, layout: str) -> None:
    """The records a keyed enqueue writes with one held-until share one entry, the run of their ids
    in the runs set (lib/dedup.lua), not a gc entry each; the GC reads a run id by id, forgets the
    records whose jobs are gone, keeps the run for those left (looked at again as long after now
    as their windows have been over), and splits a run that does not fit its limit. The gc set,
    where an earlier build would read a run as a stray, stays empty."""
    records_key, ids_key, gc_key = store_keys(layout)
    store = open_store(server, layout)
    try:
        store.create_queue(Q, 3)
        plain = KeyedJob(NewJob(1, b"p", T0, 1), None, 0, None, T0 + 10**9)  # in the call, not keyed
        jobs = [KeyedJob(NewJob(1, k.encode(), T0, 1), k, 5) for k in "abc"]
        got = store.enqueue_keyed_jobs(Q, [*jobs[:2], plain, jobs[2]], T0)
        a, b, c = got[0].local_id, got[1].local_id, got[3].local_id
        assert (b, c) == (a + 1, a + 3)
        assert raw.zrange(runs_set(layout), 0, -1, withscores=True) == [(f"{a}-{c}".encode(), float(T0 + 5))]
        assert store.delete_jobs(Q, JobFilter(JobState.PENDING, 1, T0 + 1, body_regex="^[ac]$"), 100) == 2
        assert store.gc_dedup_keys(Q, T0 + 4, 10) == 0  # not due before the window is over
        assert store.gc_dedup_keys(Q, T0 + 3005, 10) == 2  # a and c; b's job still exists
        assert raw.zrange(runs_set(layout), 0, -1, withscores=True) == [(f"{a}-{c}".encode(), float(T0 + 6005))]
        again = store.enqueue_keyed_jobs(Q, [keyed("b"), keyed("a")], T0 + 3006)
        assert [e.deduplicated for e in again] == [True, False]
        assert store.gc_dedup_keys(Q, T0 + 3006, 10) == 0  # the new a's job exists: looked at a second on
        # a run of four whose jobs are all gone, read two ids at a time
        first = store.enqueue_keyed_jobs(Q, [keyed(f"r{i}") for i in range(4)], T0 + 4000)[0].local_id
        assert store.delete_jobs(Q, JobFilter(JobState.PENDING, 1, T0 + 4001), 100) == 7  # b, plain, a, r0-r3
        assert store.gc_dedup_keys(Q, T0 + 4001, 2) == 2
        entries = dict(raw.zrange(runs_set(layout), 0, -1, withscores=True))
        assert entries == {
            f"{a}-{c}".encode(): T0 + 6005,
            str(again[1].local_id).encode(): T0 + 4006,
            f"{first + 2}-{first + 3}".encode(): T0 + 4000,  # still due
        }
        assert store.gc_dedup_keys(Q, T0 + 4001, 2) == 2
        assert raw.zcard(runs_set(layout)) == 2 and raw.hexists(records_key, "r3") == 0
        assert raw.exists(gc_key) == 0
        # the ids hash names the records left, of b and of the new a, due later
        assert set(raw.hkeys(ids_key)) == {str(b).encode(), str(again[1].local_id).encode()}
        # an earlier build's gc entry (the id alone, in the gc set) is read beside the runs
        (old,) = store.enqueue_keyed_jobs(Q, [KeyedJob(NewJob(1, b"old", T0, 1), "old")], T0 + 5000)
        raw.zrem(runs_set(layout), str(old.local_id))
        raw.zadd(gc_key, {str(old.local_id): T0 + 5000})
        assert store.delete_jobs(Q, JobFilter(JobState.PENDING, 1, T0 + 5001, body_regex="^old$"), 10) == 1
        assert store.gc_dedup_keys(Q, T0 + 5001, 10) == 2  # and the new a's (due at T0 + 4006, job gone)
        assert raw.exists(gc_key) == 0 and raw.hmget(records_key, ["old", "a"]) == [None, None]
        assert set(raw.hkeys(ids_key)) == {str(b).encode()}
    finally:
        store.close()


def test_a_compact_job_forgets_its_key_when_it_ends(server: RedisServer, raw: redis.Redis) -> None:
    """A compact job's record keeps its dedup key, so the enqueue writes the key's record alone (no
    id or gc entry) and the job forgets the key when it ends: at once if its window is over, else
    through a deferred entry in the runs set, which the GC forgets when due if the record still
    names the job. Lookups read a job's key from its record."""
    records_key, ids_key, gc_key = store_keys("compact")
    runs_key = runs_set("compact")
    store = open_store(server, "compact")
    try:
        store.create_queue(Q, 3)
        plain, windowed, taken = store.enqueue_keyed_jobs(
            Q, [keyed("plain"), keyed("windowed", window_ms=60_000), keyed("taken", window_ms=10)], T0
        )
        assert raw.exists(ids_key, gc_key, runs_key) == 0
        assert len(store.dequeue_jobs(Q, 1, 3, CLAIM, T0, False)) == 3
        ids = [plain.local_id, windowed.local_id, taken.local_id]
        store.ack_jobs(Q, [AckItem(1, i) for i in ids], [], T0 + 1)
        assert set(raw.hkeys(records_key)) == {b"windowed", b"taken", DEDUP_PIN}
        assert raw.object("encoding", records_key) == b"hashtable"  # the pin: see lib/dedup.lua
        deferred = {
            b"@" + raw.hget(records_key, key) + b":" + key: float(until)  # type: ignore[operator]
            for key, until in ((b"windowed", T0 + 60_000), (b"taken", T0 + 10))
        }
        assert dict(raw.zrange(runs_key, 0, -1, withscores=True)) == deferred
        # "taken": its window passed, a new job takes it before the GC came; "windowed" still holds
        again = store.enqueue_keyed_jobs(Q, [keyed("taken"), keyed("windowed")], T0 + 11)
        assert not again[0].deduplicated and again[1] == Enqueued(1, windowed.local_id, True)
        assert store.gc_dedup_keys(Q, T0 + 59_999, 10) == 0  # taken's entry dropped: the record names the new job
        assert raw.hget(records_key, "taken") == f"1:{again[0].local_id}:{T0 + 11}".encode()
        assert raw.zrange(runs_key, 0, -1) == [b"@" + raw.hget(records_key, "windowed") + b":windowed"]  # type: ignore[operator]
        assert store.gc_dedup_keys(Q, T0 + 60_000, 10) == 1
        assert set(raw.hkeys(records_key)) == {b"taken", DEDUP_PIN} and raw.exists(runs_key) == 0
        found = store.lookup_jobs(Q, [(1, i) for i in ids], False)
        assert [r.dedup_key for r in found] == ["plain", "windowed", "taken"]
        (scanned,) = store.scan_jobs(Q, JobFilter(JobState.PENDING, 1, T0 + 11), 10)
        assert (scanned.local_id, scanned.dedup_key) == (again[0].local_id, "taken")
    finally:
        store.close()


def test_compact_records_an_earlier_build_wrote_are_still_forgotten_by_the_gc(
    server: RedisServer, raw: redis.Redis
) -> None:
    """Before job records kept their keys, a compact enqueue wrote an id entry and a run for each
    key and the GC forgot the record once the job was gone; such records are served as before."""
    records_key, ids_key, _ = store_keys("compact")
    store = open_store(server, "compact")
    try:
        store.create_queue(Q, 3)
        old, live = store.enqueue_keyed_jobs(Q, [keyed("old"), keyed("live")], T0)
        for job, key in ((old, "old"), (live, "live")):  # as that build left them
            field = str(job.local_id)
            record = raw.hget("plc:{1:dq}:j", field)
            assert record is not None and record[0] == 0x9B
            raw.hset("plc:{1:dq}:j", field, b"\x97" + record[1 : -(4 + len(key))])
            raw.hset(ids_key, field, key)
        raw.zadd(runs_set("compact"), {f"{old.local_id}-{live.local_id}": T0})
        found = store.lookup_jobs(Q, [(1, old.local_id), (1, live.local_id)], False)
        assert [r.dedup_key for r in found] == ["old", "live"]  # from the ids hash
        assert store.delete_jobs(Q, JobFilter(JobState.PENDING, 1, T0, body_regex="^body$"), 1) == 1  # old
        assert raw.hexists(records_key, "old")  # the job did not know its key: the GC forgets it
        assert store.gc_dedup_keys(Q, T0 + 1, 10) == 1
        assert set(raw.hkeys(records_key)) == {b"live", DEDUP_PIN}
        assert raw.hkeys(ids_key) == [str(live.local_id).encode()]
        assert store.enqueue_keyed_jobs(Q, [keyed("live")], T0 + 2) == [Enqueued(1, live.local_id, True)]
    finally:
        store.close()


def test_compact_jobs_keep_their_keys_through_a_move_to_the_original_layout_and_back(
    server: RedisServer, raw: redis.Redis
) -> None:
    """The original layout's job hashes hold no key: the move gives each keyed job an id entry and
    a gc entry, so the original's lookups show the key and its GC forgets it once the job is
    gone; a deferred entry moves with the runs and is forgotten by the original's GC too."""
    store = open_store(server, "compact")
    try:
        store.create_queue(Q, 3)
        pending, done = store.enqueue_keyed_jobs(Q, [keyed("pending:1"), keyed("done_2", window_ms=60_000)], T0)
        store.dequeue_jobs(Q, 1, 1, CLAIM, T0, False)
        store.dequeue_jobs(Q, 1, 1, CLAIM, T0, False)
        store.ack_jobs(Q, [AckItem(1, done.local_id)], [], T0 + 1)  # done_2: a deferred entry
    finally:
        store.close()
    summary = migrate_shard(raw, "1", "original")
    assert summary.dedup_records == 2
    assert raw.keys("plc:{1:dq}:d*") == []
    original = open_store(server, "original")
    try:
        found = original.lookup_jobs(Q, [(1, pending.local_id), (1, done.local_id)], False)
        assert [r.dedup_key for r in found] == ["pending:1", "done_2"]
        got = original.enqueue_keyed_jobs(Q, [keyed("pending:1"), keyed("done_2")], T0 + 2)
        assert got == [Enqueued(1, pending.local_id, True), Enqueued(1, done.local_id, True)]
        assert original.gc_dedup_keys(Q, T0 + 60_000, 10) == 1  # done_2's deferred entry
        assert original.enqueue_keyed_jobs(Q, [keyed("done_2")], T0 + 60_001)[0].deduplicated is False
    finally:
        original.close()
    migrate_shard(raw, "1", "compact")
    back = open_store(server, "compact")
    try:
        assert back.enqueue_keyed_jobs(Q, [keyed("pending:1")], T0 + 60_002) == [Enqueued(1, pending.local_id, True)]
    finally:
        back.close()


def test_a_migration_merge_into_the_original_layout_moves_compact_records_and_not_the_pin(
    server: RedisServer, raw: redis.Redis
) -> None:
    """A compact job's key gets its id and gc entries as the job moves (so the merge reads it by
    them); the records hash's pin is no record: not merged, not counted."""
    store = open_store(server, "compact")
    try:
        store.create_queue(Q, 3)
        (a,) = store.enqueue_keyed_jobs(Q, [keyed("a")], T0)
    finally:
        store.close()
    later = a.local_id + 50  # a record an original-layout server wrote meanwhile
    raw.hset("pld_1_dq.k", "other", f"1:{later}:{T0}")
    raw.hset("pld_1_dq.i", str(later), "other")
    raw.zadd("pld_1_dq.g", {str(later): T0})
    summary = migrate_shard(raw, "1", "original")
    assert summary.dedup_records == 1
    assert raw.hgetall("pld_1_dq.k") == {b"a": f"1:{a.local_id}:{T0}".encode(), b"other": f"1:{later}:{T0}".encode()}
    assert raw.keys("plc:{1:dq}:d*") == []
    original = open_store(server, "original")
    try:
        assert original.enqueue_keyed_jobs(Q, [keyed("a")], T0 + 1) == [Enqueued(1, a.local_id, True)]
    finally:
        original.close()
