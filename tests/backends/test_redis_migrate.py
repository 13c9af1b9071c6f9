"""Moving a shard between the Redis layouts (``backends/redis/migrate.py``, ``lua_migrate/``).

Every test fills a shard through the original store, moves it, and compares what Redis holds in
each layout, read independently of the scripts under test (``tests/support/redis_layouts.py``).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

import pytest
import redis
from tests.support.redis_cluster import cluster_port
from tests.support.redis_layouts import (
    CLAIM,
    RESERVATION,
    T0,
    ShardView,
    both_layouts,
    compact_view,
    fill_shard,
    original_view,
    ready_lists,
    shard_keys,
    text,
    zset,
)
from tests.support.redis_server import RedisServer
from tests.support.wait import wait_for

from pinlater.backends.base import AckItem, JobFilter, JobRecord, JobState, KeyedJob, NewJob
from pinlater.backends.redis import RedisEndpoint, RedisShardConfig, RedisStore
from pinlater.backends.redis.layouts import MIGRATING, layout_key
from pinlater.backends.redis.migrate import MigrationError, QueueProgress, migrate_shard, script_source
from pinlater.backends.redis.scripts import INCLUDE
from pinlater.errors import QueueNotFoundError

pytestmark = pytest.mark.redis

MARKER = layout_key("1")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    with RedisServer(tmp_path / "redis") as srv:
        yield srv


@pytest.fixture
def raw(server: RedisServer) -> Iterator[redis.Redis]:
    client = server.client()
    yield client
    client.close()


def open_store(server: RedisServer, shard: str = "1", layout: str = "original") -> RedisStore:
    return RedisStore(shard, RedisShardConfig(RedisEndpoint(server.host, server.port), layout=layout))


@pytest.fixture
def filled(server: RedisServer) -> ShardView:
    """Shard 1 filled (``fill_shard``), plus shard 2 on the same Redis, which no test moves."""
    for shard in ("1", "2"):
        store = open_store(server, shard)
        fill_shard(store, seed=int(shard))
        store.close()
    client = server.client()
    view = original_view(client, "1")
    client.close()
    return view


def states_of(view: ShardView) -> dict[JobState, int]:
    counts = dict.fromkeys(JobState, 0)
    for job in view.jobs.values():
        counts[JobState(0 if job.where == "h" else int(job.where[1]))] += 1
    return counts


def hashes(raw: redis.Redis, shard: str) -> dict[str, dict[bytes, bytes]]:
    return {key: raw.hgetall(key) for key in shard_keys(raw, f"plh_{shard}_*")}  # type: ignore[misc]


def test_every_job_moves_to_compact_and_back_unchanged(
    server: RedisServer, raw: redis.Redis, filled: ShardView
) -> None:
    assert {job.where for job in filled.jobs.values()} == {"s0", "s1", "s2", "s3", "h"}
    assert filled.holds and filled.counters["gone"] == 4 and "gone" not in filled.names
    scores_before = {key: zset(raw, key) for key in shard_keys(raw, "plq_1_*") if not key.endswith("_o")}
    hashes_before = hashes(raw, "1")
    other_shard = original_view(raw, "2")

    summary = migrate_shard(raw, "1", "compact")

    assert compact_view(raw, "1") == filled
    assert summary.moved.by_state() == states_of(filled)
    assert summary.moved.held == len(filled.holds)
    assert (summary.queues, summary.counters, summary.previous_marker) == (["a", "b"], 1, "original")
    assert text(raw.get(MARKER)) == "compact"
    # What is left of the original: the counters (copied, kept, so that a queue created there
    # again goes on from them), and shard 2.
    assert shard_keys(raw, "pl[hjnq]_1_*") == ["plj_1_a", "plj_1_b", "plj_1_gone"]
    assert {q: int(raw.get(f"plj_1_{q}")) for q in filled.counters} == filled.counters  # type: ignore[arg-type]
    assert not raw.exists("pln_1")
    assert original_view(raw, "2") == other_shard

    summary = migrate_shard(raw, "1", "original")

    assert original_view(raw, "1") == filled
    assert summary.moved.by_state() == states_of(filled)
    assert (summary.queues, summary.previous_marker) == (["a", "b"], "compact")
    assert text(raw.get(MARKER)) == "original"
    # Scores come back as the same doubles; job hashes the same but for ca/ua's text.
    assert {key: zset(raw, key) for key in shard_keys(raw, "plq_1_*") if not key.endswith("_o")} == scores_before
    after = hashes(raw, "1")
    assert after.keys() == hashes_before.keys()
    for key, fields in hashes_before.items():
        assert after[key].keys() == fields.keys()
        for name, value in fields.items():
            if name in (b"ca", b"ua"):
                assert round(float(after[key][name]) * 1000) == round(float(value) * 1000)
            else:
                assert after[key][name] == value, (key, name)
    # Left of the compact layout: the counters only.
    assert shard_keys(raw, "plc:{1*") == ["plc:{1:a}:j", "plc:{1:b}:j", "plc:{1:gone}:j"]
    assert {q: raw.hgetall(f"plc:{{1:{q}}}:j") for q in filled.counters} == {
        q: {b"id": str(n).encode()} for q, n in filled.counters.items()
    }
    assert original_view(raw, "2") == other_shard


def expected_records(view: ShardView, queue: str) -> dict[tuple[int, int], JobRecord]:
    """What a lookup of every job of ``queue`` in ``view`` answers (held jobs are PENDING)."""
    return {
        (p, i): JobRecord(
            priority=p,
            local_id=i,
            state=JobState(0 if job.where == "h" else int(job.where[1])),
            attempts_allowed=job.attempts_allowed,
            attempts_remaining=job.attempts_remaining,
            custom_status=job.custom_status.decode(),
            created_at_ms=job.created_at_ms,
            run_after_ms=job.score_ms,
            updated_at_ms=job.updated_at_ms,
            claim_descriptor=None if job.claim is None else job.claim.decode(),
            body=job.body,
        )
        for (q, p, i), job in view.jobs.items()
        if q == queue
    }


def serves_every_job(store: RedisStore, view: ShardView) -> None:
    """Lookups answer each job as it was; held jobs are claimed by their reservation; PENDING
    jobs dequeue and ack; new ids follow the old ones, in a deleted queue created again too."""
    for queue in ("a", "b"):
        expected = expected_records(view, queue)
        found = store.lookup_jobs(queue, list(expected), True)
        assert {(r.priority, r.local_id): r for r in found} == expected
    held = sorted((p, i) for (_, p, i) in view.holds)
    assert sorted(store.claim_reserved("a", [(p, i, "c") for p, i in held], RESERVATION, T0 + 800)) == held
    claimed = store.dequeue_jobs("b", 7, 10, "c", T0 + 10, False)
    assert sorted(j.local_id for j in claimed) == [1, 2, 3, 4, 5]
    store.ack_jobs("b", [AckItem(7, j.local_id) for j in claimed], [], T0 + 20)
    assert store.count_jobs("b", JobFilter(JobState.SUCCEEDED, 7, T0 + 30), None) == 5
    assert store.enqueue_jobs("a", [NewJob(1, b"n", T0, 1)], T0) == [view.counters["a"] + 1]
    store.create_queue("gone", 1)
    assert store.enqueue_jobs("gone", [NewJob(1, b"x", T0, 1)], T0) == [view.counters["gone"] + 1]


def test_the_shard_moved_back_serves_as_before(server: RedisServer, raw: redis.Redis, filled: ShardView) -> None:
    migrate_shard(raw, "1", "compact")
    migrate_shard(raw, "1", "original")
    store = open_store(server)
    try:
        serves_every_job(store, filled)
    finally:
        store.close()


def test_a_compact_store_serves_the_moved_shard(server: RedisServer, raw: redis.Redis, filled: ShardView) -> None:
    migrate_shard(raw, "1", "compact")
    store = open_store(server, layout="compact")
    try:
        assert store.get_queue_names() == {"a", "b"}
        serves_every_job(store, filled)
    finally:
        store.close()


def test_ids_are_never_reused(server: RedisServer, raw: redis.Redis, filled: ShardView) -> None:
    migrate_shard(raw, "1", "compact")
    assert raw.hget("plc:{1:a}:j", "id") == str(filled.counters["a"]).encode()
    assert raw.hget("plc:{1:gone}:j", "id") == b"4"
    raw.hset("plc:{1:a}:j", "id", filled.counters["a"] + 10)  # the compact layout handed out more ids
    migrate_shard(raw, "1", "original")
    assert int(raw.get("plj_1_a")) == filled.counters["a"] + 10  # type: ignore[arg-type]
    store = open_store(server)
    try:
        store.create_queue("gone", 1)
        assert store.enqueue_jobs("gone", [NewJob(1, b"x", T0, 1)], T0) == [5]
    finally:
        store.close()


class Interrupt(Exception):
    pass


def interrupt_after(calls: int) -> tuple[list[QueueProgress], object]:
    seen: list[QueueProgress] = []

    def on_progress(progress: QueueProgress) -> None:
        seen.append(progress)
        if len(seen) == calls:
            raise Interrupt

    return seen, on_progress


def test_an_interrupted_move_loses_and_duplicates_nothing_and_continues(
    server: RedisServer, raw: redis.Redis, filled: ShardView
) -> None:
    seen, on_progress = interrupt_after(4)
    with pytest.raises(Interrupt):
        migrate_shard(raw, "1", "compact", batch=7, on_progress=on_progress)  # type: ignore[arg-type]
    assert text(raw.get(MARKER)) == MIGRATING
    half = both_layouts(raw)
    assert 0 < len(compact_view(raw, "1").jobs) == seen[-1].moved.jobs < len(filled.jobs)
    assert [p.queue for p in seen] == ["a"] * 4
    assert half.jobs == filled.jobs and half.holds == filled.holds

    # Half-way back, then forward again from there: each run continues the other's work.
    seen, on_progress = interrupt_after(2)
    with pytest.raises(Interrupt):
        migrate_shard(raw, "1", "original", batch=5, on_progress=on_progress)  # type: ignore[arg-type]
    assert both_layouts(raw).jobs == filled.jobs
    summary = migrate_shard(raw, "1", "compact", batch=7)
    assert summary.previous_marker == MIGRATING
    assert compact_view(raw, "1") == filled
    assert text(raw.get(MARKER)) == "compact"


def test_a_redis_crash_during_the_move_loses_nothing(tmp_path: Path) -> None:
    with RedisServer(tmp_path / "redis", appendonly=True, appendfsync="always") as srv:
        store = open_store(srv)
        fill_shard(store)
        store.close()
        client = srv.client()
        try:
            before = original_view(client, "1")
            crashed: list[QueueProgress] = []

            def crash(progress: QueueProgress) -> None:
                crashed.append(progress)
                if len(crashed) == 3:
                    srv.kill()  # SIGKILL: whatever the AOF holds is what the restart finds

            with pytest.raises(redis.ConnectionError):
                migrate_shard(client, "1", "compact", batch=5, on_progress=crash)
            srv.start()
            assert client.get(MARKER) == MIGRATING.encode()
            assert len(compact_view(client, "1").jobs) == crashed[-1].moved.jobs
            assert both_layouts(client).jobs == before.jobs
            migrate_shard(client, "1", "compact", batch=5)
            assert compact_view(client, "1") == before
        finally:
            client.close()


def test_evicted_remains_and_orphan_records_are_dropped_and_counted(
    server: RedisServer, raw: redis.Redis, filled: ShardView
) -> None:
    queue, priority, local_id = next(at for at, j in filled.jobs.items() if j.where == "s0")
    raw.delete(f"plh_1_{queue}.{local_id}")
    summary = migrate_shard(raw, "1", "compact")
    assert summary.moved.evicted == 1
    expected = {at: j for at, j in filled.jobs.items() if at != (queue, priority, local_id)}
    assert compact_view(raw, "1").jobs == expected

    raw.hset("plc:{1:a}:j", "999999", b"\x97" + b"\xc0" * 7)  # in no set: an orphan
    summary = migrate_shard(raw, "1", "original")
    assert (summary.moved.orphans, summary.moved.evicted) == (1, 0)
    assert original_view(raw, "1").jobs == expected


def test_a_hold_without_expiry_or_holder_goes_back_to_pending(
    server: RedisServer, raw: redis.Redis, filled: ShardView
) -> None:
    (queue, priority, local_id) = next(iter(filled.holds))
    raw.hdel(f"plq_1_{queue}.p{priority}_o", str(local_id))
    summary = migrate_shard(raw, "1", "compact")
    assert (summary.moved.unheld, summary.moved.held) == (1, len(filled.holds) - 1)
    moved = compact_view(raw, "1")
    assert moved.jobs[(queue, priority, local_id)].where == "s0"
    assert (queue, priority, local_id) not in moved.holds


def test_a_call_stops_once_its_bodies_reach_the_byte_budget(server: RedisServer, raw: redis.Redis) -> None:
    store = open_store(server)
    store.create_queue("q", 1)
    store.enqueue_jobs("q", [NewJob(1, b"x" * 1000, T0, 1)] * 10, T0)
    store.close()
    calls: list[QueueProgress] = []
    migrate_shard(raw, "1", "compact", batch=100, batch_bytes=2500, on_progress=calls.append)
    assert [c.moved.jobs for c in calls] == [3, 6, 9, 10]
    calls.clear()
    migrate_shard(raw, "1", "original", batch=100, batch_bytes=2500, on_progress=calls.append)
    assert [c.moved.jobs for c in calls] == [3, 6, 9, 10]


def fill_ready(store: RedisStore) -> None:
    """Queue ``r`` of a compact store with most PENDING jobs in its ready lists (run after == the
    enqueue's now, several enqueues at each of three nows, so ids of one marker come from several
    calls), others in the PENDING sets between their scores (a past run after) and after them
    (delayed); priority 1's head dequeued (two acked, two left IN_PROGRESS) and a job deleted in
    place in each list (a tombstone)."""
    store.create_queue("r", 2)
    for k in range(6):
        now = T0 + 10 * (k // 2)
        jobs = [NewJob(1 + i % 2, b"r%d-%d" % (k, i), now, 1 + i % 3, ["", "status"][i % 2]) for i in range(5)]
        jobs += [NewJob(1, b"late%d" % k, now - 5, 2), NewJob(2, b"delayed%d" % k, now + 3_600_000, 1)]
        store.enqueue_jobs("r", jobs, now)
    claimed = store.dequeue_jobs("r", 1, 4, CLAIM, T0 + 100, False)
    assert [j.body for j in claimed] == [b"late0", b"late1", b"r0-0", b"r0-2"]
    store.ack_jobs("r", [AckItem(1, claimed[0].local_id), AckItem(1, claimed[2].local_id)], [], T0 + 110)
    for priority, body in ((1, "r2-4"), (2, "r3-1")):
        where = JobFilter(JobState.PENDING, priority, T0 + 100, None, body_regex=f"^{body}$")
        assert store.delete_jobs("r", where, 10) == 1


def dequeue_order(store: RedisStore) -> list[tuple[int, int, bytes]]:
    """Every PENDING job of queue ``r`` in the order a dequeue takes them (a dry run)."""
    return [(p, j.local_id, j.body) for p in (1, 2) for j in store.dequeue_jobs("r", p, 1000, "", T0 + 10**8, True)]


def tombstones(raw: redis.Redis) -> list[tuple[int, int]]:
    """The ids in queue r's ready lists whose record is a tombstone (a job deleted in place)."""
    lists = ready_lists(raw, "1")
    return [(p, i) for (_, p), ids in lists.items() for i in ids if raw.hget("plc:{1:r}:j", str(i)) == b""]


@pytest.fixture
def ready_filled(
    server: RedisServer, raw: redis.Redis, ready_lists_on: None
) -> tuple[ShardView, list[tuple[int, int, bytes]]]:
    """Shard 1 in the compact layout filled by ``fill_ready``: its view and its dequeue order."""
    store = open_store(server, layout="compact")
    try:
        fill_ready(store)
        order = dequeue_order(store)
    finally:
        store.close()
    lists = ready_lists(raw, "1")
    assert len(lists[("r", 1)]) > 5 and len(lists[("r", 2)]) > 5
    assert len(tombstones(raw)) == 2
    view = compact_view(raw, "1")
    assert {j.where for j in view.jobs.values()} == {"s0", "s1", "s2"}
    assert len(order) == sum(j.where == "s0" for j in view.jobs.values())
    return view, order


def test_ready_lists_move_to_original_and_back_in_order(
    server: RedisServer, raw: redis.Redis, ready_filled: tuple[ShardView, list[tuple[int, int, bytes]]]
) -> None:
    before, order = ready_filled
    buried = tombstones(raw)

    summary = migrate_shard(raw, "1", "original")

    assert original_view(raw, "1") == before  # every job once, list jobs PENDING scored by their ca
    assert summary.moved.by_state() == states_of(before)
    assert (summary.moved.evicted, summary.moved.orphans) == (0, 0)
    assert shard_keys(raw, "plc:{1:*") == ["plc:{1:r}:j"]  # lists, records and t{p} counters gone
    assert raw.hgetall("plc:{1:r}:j") == {b"id": raw.get("plj_1_r")}  # but for the id counter
    assert not any(raw.exists(f"plh_1_r.{i}") for _, i in buried)  # deleted jobs stay deleted
    store = open_store(server)
    try:
        assert dequeue_order(store) == order
    finally:
        store.close()

    summary = migrate_shard(raw, "1", "compact")

    assert compact_view(raw, "1") == before
    assert summary.moved.by_state() == states_of(before)
    assert ready_lists(raw, "1") == {}  # moved PENDING jobs go to the PENDING sets
    store = open_store(server, layout="compact")
    try:
        assert dequeue_order(store) == order
        new = store.enqueue_jobs("r", [NewJob(1, b"new", T0 + 50, 1)], T0 + 50)
        assert new == [before.counters["r"] + 1]
        assert ready_lists(raw, "1") == {("r", 1): new}  # new jobs go to the lists again
        first, second = [x for x in order if x[0] == 1], [x for x in order if x[0] == 2]
        assert dequeue_order(store) == [*first, (1, new[0], b"new"), *second]  # after every job of before
    finally:
        store.close()


def test_a_move_of_ready_lists_interrupted_half_way_continues_either_way(
    server: RedisServer, raw: redis.Redis, ready_filled: tuple[ShardView, list[tuple[int, int, bytes]]]
) -> None:
    before, order = ready_filled
    lists = ready_lists(raw, "1")
    seen, on_progress = interrupt_after(3)
    with pytest.raises(Interrupt):
        migrate_shard(raw, "1", "original", batch=4, on_progress=on_progress)  # type: ignore[arg-type]
    assert text(raw.get(MARKER)) == MIGRATING
    half = ready_lists(raw, "1")  # priority 1's list is half moved (its sets went first)
    assert 0 < len(half[("r", 1)]) < len(lists[("r", 1)]) and half[("r", 2)] == lists[("r", 2)]
    assert half[("r", 1)] == lists[("r", 1)][-len(half[("r", 1)]) :]  # taken from the head
    assert both_layouts(raw).jobs == before.jobs  # none lost, none in both; the lists' invariants hold
    assert len(original_view(raw, "1").jobs) == seen[-1].moved.jobs

    # Back to compact from there: the moved jobs go to the PENDING sets, the rest stay listed.
    migrate_shard(raw, "1", "compact", batch=4)
    assert compact_view(raw, "1") == before
    assert ready_lists(raw, "1") == half
    store = open_store(server, layout="compact")
    try:
        assert dequeue_order(store) == order  # the sets and the lists merge as before
    finally:
        store.close()

    # And to original again, interrupted in priority 2's list this time, then finished.
    seen, on_progress = interrupt_after(6)
    with pytest.raises(Interrupt):
        migrate_shard(raw, "1", "original", batch=5, on_progress=on_progress)  # type: ignore[arg-type]
    assert both_layouts(raw).jobs == before.jobs
    summary = migrate_shard(raw, "1", "original", batch=5)
    assert summary.previous_marker == MIGRATING
    assert original_view(raw, "1") == before
    assert shard_keys(raw, "plc:{1:*") == ["plc:{1:r}:j"]
    store = open_store(server)
    try:
        assert dequeue_order(store) == order
    finally:
        store.close()


def test_a_ready_list_job_without_its_record_is_dropped_as_evicted(
    server: RedisServer, raw: redis.Redis, ready_filled: tuple[ShardView, list[tuple[int, int, bytes]]]
) -> None:
    before, _ = ready_filled
    buried = tombstones(raw)
    local_id = next(i for i in ready_lists(raw, "1")[("r", 2)] if (2, i) not in buried)
    raw.hdel("plc:{1:r}:j", str(local_id))
    summary = migrate_shard(raw, "1", "original")
    assert (summary.moved.evicted, summary.moved.orphans) == (1, 0)
    assert original_view(raw, "1").jobs == {at: j for at, j in before.jobs.items() if at != ("r", 2, local_id)}


@pytest.mark.usefixtures("ready_lists_on")
def test_a_call_stops_once_its_bodies_reach_the_byte_budget_in_a_ready_list(
    server: RedisServer, raw: redis.Redis
) -> None:
    store = open_store(server, layout="compact")
    store.create_queue("q", 1)
    raw.hset("plc:{1:q}:j", "id", 10)  # ids from 11: none gains a digit, which would end the list's run
    store.enqueue_jobs("q", [NewJob(1, b"x" * 1000, T0, 1)] * 10, T0)
    store.close()
    assert len(ready_lists(raw, "1")[("q", 1)]) == 10
    calls: list[QueueProgress] = []
    migrate_shard(raw, "1", "original", batch=100, batch_bytes=2500, on_progress=calls.append)
    assert [c.moved.jobs for c in calls] == [3, 6, 9, 10]


def test_refuses_while_servers_of_the_shard_are_connected(
    server: RedisServer, raw: redis.Redis, filled: ShardView
) -> None:
    other = open_store(server, "2")
    other.ping()  # a server of another shard on the same Redis does not matter
    store = open_store(server)
    store.ping()
    try:
        with pytest.raises(MigrationError, match=r"named pinlater-shard-1 are open .* --force"):
            migrate_shard(raw, "1", "compact")
        assert raw.get(MARKER) == b"original"
        assert original_view(raw, "1") == filled
        migrate_shard(raw, "1", "compact", force=True)
        assert compact_view(raw, "1") == filled
    finally:
        store.close()
        other.close()
    migrate_shard(raw, "1", "original")  # the store closed its connections
    assert original_view(raw, "1") == filled


def test_refuses_a_cluster_node(tmp_path: Path) -> None:
    cluster = ("--cluster-enabled", "yes", "--cluster-config-file", str(tmp_path / "nodes.conf"))
    # a port whose cluster bus (port + 10000) is free too
    with RedisServer(tmp_path / "redis", extra_args=cluster, port=cluster_port()) as srv:
        client = srv.client()
        try:
            with pytest.raises(MigrationError, match="cluster"):
                migrate_shard(client, "1", "compact")
        finally:
            client.close()


def test_refuses_bad_arguments(raw: redis.Redis) -> None:
    with pytest.raises(MigrationError, match="unknown layout"):
        migrate_shard(raw, "1", "tiny")  # type: ignore[arg-type]
    with pytest.raises(MigrationError, match="shard names"):
        migrate_shard(raw, "1}x", "compact")
    assert raw.dbsize() == 0


def test_times_before_the_epoch_come_back_unchanged(server: RedisServer, raw: redis.Redis) -> None:
    store = open_store(server)
    store.create_queue("q", 1)
    store.enqueue_jobs("q", [NewJob(1, b"x", -1, 1), NewJob(1, b"y", -1500, 1)], T0)
    store.close()
    before = original_view(raw, "1")
    migrate_shard(raw, "1", "compact")
    migrate_shard(raw, "1", "original")
    assert original_view(raw, "1") == before


def test_every_migration_script_loads_and_says_what_it_takes(raw: redis.Redis) -> None:
    folder = resources.files("pinlater.backends.redis").joinpath("lua_migrate")
    names = sorted(p.name.removesuffix(".lua") for p in folder.iterdir() if p.name.endswith(".lua"))
    assert names == ["dedup_records", "grouped_records", "schedules", "to_compact", "to_original"]
    for name in names:
        text = script_source(name)
        assert not INCLUDE.search(text), name
        if name.startswith("to_"):
            assert "local function to_ms" in text and "local function zadd_pairs" in text, name
        elif name == "dedup_records":
            assert "local function parse_holder" in text, name
        header = text.split("]]")[0]
        assert header.startswith(f"--[[ {name}:") and "KEYS[1]" in header and "Returns" in header, name
        assert not re.search(r"'pl[qhjnlc][_:]", text), f"{name}.lua hard-codes a key name"
        assert raw.script_load(text), name


def test_compact_queues_are_found_by_their_meta_not_only_by_name(
    server: RedisServer, raw: redis.Redis, filled: ShardView
) -> None:
    migrate_shard(raw, "1", "compact")
    raw.zrem("plc:{1}:q", "b")  # a crash between create_queue's two writes: meta c, no name
    raw.zadd("plc:{1}:q", {"ghost": T0})  # and the other way round: a name without c
    summary = migrate_shard(raw, "1", "original")
    assert sorted(summary.queues) == ["a", "b"]
    assert original_view(raw, "1") == filled
    assert not raw.exists("plc:{1}:q")


def test_a_queue_created_in_the_source_during_the_move_fails_the_run_until_moved_too(
    server: RedisServer, raw: redis.Redis, filled: ShardView
) -> None:
    def create_late(progress: QueueProgress) -> None:  # as a server still running (forced) would
        raw.zadd("pln_1", {"late": 1_700_000_000.5}, nx=True)

    with pytest.raises(MigrationError, match=r"queue\(s\) late appeared in the original layout during the move"):
        migrate_shard(raw, "1", "compact", on_progress=create_late)
    assert raw.get(MARKER) == MIGRATING.encode()
    summary = migrate_shard(raw, "1", "compact")
    assert summary.queues == ["late"]
    expected = ShardView({**filled.names, "late": T0 + 500}, filled.counters, filled.jobs, filled.holds)
    assert compact_view(raw, "1") == expected


def test_forced_with_a_server_still_running_nothing_it_stored_is_lost(server: RedisServer, raw: redis.Redis) -> None:
    store = open_store(server)
    store.create_queue("q", 2)
    stored = set(store.enqueue_jobs("q", [NewJob(1 + i % 2, b"%d" % i, T0, 3) for i in range(1000)], T0))
    rounds: list[int] = []
    refused = threading.Event()
    stop = threading.Event()

    def keep_serving() -> None:  # enqueues, dequeues and acks on the old layout, as fast as it can
        while not stop.is_set():
            try:
                stored.update(store.enqueue_jobs("q", [NewJob(1, b"late", T0, 3)] * 5, T0))
                claimed = store.dequeue_jobs("q", 1, 3, "c", T0 + 1, False)
                store.ack_jobs("q", [AckItem(1, j.local_id) for j in claimed], [], T0 + 2)
                rounds.append(len(claimed))
            except QueueNotFoundError:
                refused.set()  # the queue has moved: its clients are told so
                return

    def interleave(progress: QueueProgress) -> None:  # the server works between these calls, surely
        if progress.batches in (1, 10, 20):
            seen = len(rounds)
            wait_for(lambda: len(rounds) > seen, what="the server to work during the move")

    worker = threading.Thread(target=keep_serving)
    worker.start()
    try:
        migrate_shard(raw, "1", "compact", batch=20, force=True, on_progress=interleave)
        wait_for(refused.is_set, what="the old layout to answer QUEUE_NOT_FOUND")
    finally:
        stop.set()
        worker.join()
        store.close()
    moved = compact_view(raw, "1")
    assert len(stored) > 1000 and sum(rounds) > 0
    assert sorted(i for _, _, i in moved.jobs) == sorted(stored)
    assert moved.counters["q"] == max(stored)
    assert shard_keys(raw, "pl[hq]_1_*") == []
    assert int(raw.get("plj_1_q")) == max(stored)  # type: ignore[arg-type]  # kept, for a re-created queue


def test_jobs_of_groups_made_during_a_forced_move_to_original_stop_it_and_are_kept(
    server: RedisServer, raw: redis.Redis
) -> None:
    """The original layout has no place for a group: a compact server still running (forced)
    that makes jobs of a group during the move stops the run before the queue is finished, and
    the job waiting in its group keeps its record (it was deleted with the records hash as an
    orphan: lost)."""
    store = open_store(server, layout="compact")
    store.create_queue("q", 1)
    store.enqueue_jobs("q", [NewJob(1, b"%d" % i, T0, 3) for i in range(6)], T0)
    made: list[int] = []

    def enqueue_grouped(progress: QueueProgress) -> None:
        if not made:
            jobs = [KeyedJob(NewJob(1, b"g%d" % i, T0, 3), None, 0, "g") for i in range(2)]
            made.extend(e.local_id for e in store.enqueue_keyed_jobs("q", jobs, T0))

    try:
        with pytest.raises(MigrationError, match="holds jobs of ordered groups"):
            migrate_shard(raw, "1", "original", batch=2, force=True, on_progress=enqueue_grouped)
        waiting = made[1]  # (the first is active: it moved as a plain job)
        assert raw.hexists("plc:{1:q}:j", str(waiting)), "the waiting job's record is kept"
        assert raw.zscore("plc:{1:q}:p1:w", str(waiting)) is not None
        assert raw.get(MARKER) == MIGRATING.encode()
    finally:
        store.close()


def test_a_queue_unnamed_in_the_compact_layout_with_jobs_of_groups_is_refused_before_the_move(
    server: RedisServer, raw: redis.Redis
) -> None:
    """The check for groups before a move to original looks at every queue the move takes, the
    ones found by their records hash alone too (a crash between create_queue's two writes)."""
    store = open_store(server, layout="compact")
    try:
        store.create_queue("q", 1)
        store.enqueue_keyed_jobs("q", [KeyedJob(NewJob(1, b"g", T0, 3), None, 0, "g")], T0)
    finally:
        store.close()
    raw.zrem("plc:{1}:q", "q")
    with pytest.raises(MigrationError, match="queue q holds jobs of ordered groups"):
        migrate_shard(raw, "1", "original", force=True)
    assert raw.hexists("plc:{1:q}:j", "c"), "nothing moved"


def test_an_expiry_index_in_both_layouts_is_merged_a_batch_at_a_time_keeping_the_lower_score(
    server: RedisServer, raw: redis.Redis
) -> None:
    """An expiry index the target already holds (a run that stopped in its last steps) is merged
    ``--batch`` entries a transaction, the lower score kept: one ZUNIONSTORE of the whole index,
    made again at every run even with no source left, held Redis 3.2 s for a million entries."""
    from pinlater.backends.redis.keys import QueueKeys
    from pinlater.backends.redis.keys_compact import CompactQueueKeys

    store = open_store(server)
    try:
        store.create_queue("q", 1)
        jobs = [KeyedJob(NewJob(1, b"e%d" % i, T0, 2), None, expire_at_ms=T0 + 10_000 + i) for i in range(5)]
        ids = [e.local_id for e in store.enqueue_keyed_jobs("q", jobs, T0)]
    finally:
        store.close()
    source, target = QueueKeys("1", "q").expiry_keys()[0], CompactQueueKeys("1", "q").expiry_keys()[0]
    moved = {member: score for member, score in raw.zrange(source, 0, -1, withscores=True)}
    assert len(moved) == 5
    first = raw.zrange(source, 0, 0)[0]
    raw.zadd(target, {first: 1.0, b"elsewhere": 2.0})  # lower than the source's score: kept
    raw.config_resetstat()
    migrate_shard(raw, "1", "compact", batch=2)
    assert "cmdstat_zunionstore" not in raw.info("commandstats")
    assert not raw.exists(source)
    assert dict(raw.zrange(target, 0, -1, withscores=True)) == {**moved, first: 1.0, b"elsewhere": 2.0}
    assert len(ids) == 5


def open_source(server: RedisServer, source: str) -> RedisStore:
    return open_store(server, layout=source)


def view_of(raw: redis.Redis, layout: str) -> ShardView:
    return compact_view(raw, "1") if layout == "compact" else original_view(raw, "1")


@pytest.mark.parametrize(("source", "target"), [("original", "compact"), ("compact", "original")])
def test_a_queue_created_again_in_the_source_during_the_move_goes_on_from_its_ids_and_is_reported(
    server: RedisServer, raw: redis.Redis, source: str, target: str
) -> None:
    """A server still writing the source (forced, or one the connection check cannot see)
    creates a queue again after it moved: its ids go on from the kept counter, the run says so
    instead of folding it in, and the next run moves it over nothing."""
    store = open_source(server, source)
    store.create_queue("q", 1)
    assert store.enqueue_jobs("q", [NewJob(1, b"old-%d" % i, T0, 1) for i in range(3)], T0) == [1, 2, 3]

    def recreate(progress: QueueProgress) -> None:
        if progress.done:  # the queue is gone from the source: its server creates it again
            store.create_queue("q", 1)
            assert store.enqueue_jobs("q", [NewJob(1, b"new", T0, 1)], T0) == [4]

    try:
        with pytest.raises(MigrationError, match=rf"queue\(s\) q appeared in the {source} layout during the move"):
            migrate_shard(raw, "1", target, force=True, on_progress=recreate)  # type: ignore[arg-type]
    finally:
        store.close()
    assert raw.get(MARKER) == MIGRATING.encode()
    summary = migrate_shard(raw, "1", target)  # type: ignore[arg-type]
    assert (summary.queues, summary.moved.jobs, summary.counters) == (["q"], 1, 0)
    moved = view_of(raw, target)
    assert sorted((i, job.body) for (_, _, i), job in moved.jobs.items()) == [
        (1, b"old-0"),
        (2, b"old-1"),
        (3, b"old-2"),
        (4, b"new"),
    ]
    assert moved.counters["q"] == 4


@pytest.mark.parametrize(("source", "target"), [("original", "compact"), ("compact", "original")])
def test_a_job_in_both_layouts_stops_the_run_and_both_copies_stay(
    server: RedisServer, raw: redis.Redis, source: str, target: str
) -> None:
    """Servers writing both layouts at once (forced) hand out an id twice: the run stops naming
    the job, and neither copy is written over or deleted."""
    old = open_source(server, source)  # opened before the move: it goes on writing the source
    old.create_queue("q", 1)
    old.enqueue_jobs("q", [NewJob(1, b"a%d" % i, T0, 1) for i in range(3)], T0)
    migrate_shard(raw, "1", target, force=True)  # type: ignore[arg-type]
    new = open_store(server, layout=target)
    try:
        assert new.enqueue_jobs("q", [NewJob(1, b"in target", T0, 1)], T0) == [4]
        old.create_queue("q", 1)
        assert old.enqueue_jobs("q", [NewJob(1, b"s%d" % i, T0, 1) for i in range(2)], T0) == [4, 5]
    finally:
        new.close()
        old.close()
    with pytest.raises(MigrationError, match=r"queue q: job 4 is in both layouts .* nothing was overwritten"):
        migrate_shard(raw, "1", target, force=True)  # type: ignore[arg-type]
    assert {i: j.body for (_, _, i), j in view_of(raw, target).jobs.items()} == {
        1: b"a0",
        2: b"a1",
        3: b"a2",
        4: b"in target",
    }
    assert {i: j.body for (_, _, i), j in view_of(raw, source).jobs.items()} == {4: b"s0", 5: b"s1"}


def test_counters_of_another_shard_are_not_copied_into_this_one(server: RedisServer, raw: redis.Redis) -> None:
    """``plj_1_*`` also matches shard 1_x's counters (``plj_1_x_q``): a counter is another
    shard's when that shard shows itself on the Redis; otherwise it is this shard's."""
    other = open_store(server, shard="1_x")
    other.create_queue("q", 1)
    other.enqueue_jobs("q", [NewJob(1, b"x", T0, 1)], T0)
    other.close()
    raw.set("plj_1_y_q", 7)  # a deleted queue y_q of shard 1 (no shard 1_y here)
    store = open_store(server)
    store.create_queue("a", 1)
    store.close()
    summary = migrate_shard(raw, "1", "compact")
    assert summary.counters == 1
    assert not raw.exists("plc:{1:x_q}:j")
    assert raw.hgetall("plc:{1:y_q}:j") == {b"id": b"7"}
    assert original_view(raw, "1_x").counters == {"q": 1}


LOCK = "pll-lock:{1}"


def test_a_second_run_of_the_shard_is_refused_naming_the_first(
    server: RedisServer, raw: redis.Redis, filled: ShardView
) -> None:
    refusals: list[str] = []

    def second_run(progress: QueueProgress) -> None:
        if progress.batches == 1 and not refusals:
            other = server.client()
            try:
                with pytest.raises(MigrationError) as refused:
                    migrate_shard(other, "1", "original")  # the other direction, at the same time
                refusals.append(str(refused.value))
            finally:
                other.close()

    migrate_shard(raw, "1", "compact", batch=3, on_progress=second_run)
    assert len(refusals) == 1
    assert re.fullmatch(
        r"another run holds pll-lock:\{1\}: pinlater-migrate-1 to compact, pid \d+ on \S+, client \d+ of redis run "
        r"[0-9a-f]{40}, "
        r"started \S+; wait for it to finish",
        refusals[0],
    )
    assert compact_view(raw, "1") == filled
    assert not raw.exists(LOCK)  # released at the end


def test_the_lock_of_a_run_whose_connection_is_gone_is_taken_over(server: RedisServer, raw: redis.Redis) -> None:
    gone = server.client()
    gone_id = gone.client_id()
    gone.close()
    raw.set(LOCK, f"pinlater-migrate-1 to compact, pid 1 on h, client {gone_id}, started x", ex=30)
    migrate_shard(raw, "1", "compact")
    assert not raw.exists(LOCK)
    raw.set(LOCK, "written by hand", ex=30)  # no connection named: refused until it expires
    with pytest.raises(MigrationError, match=r"another run holds pll-lock:\{1\}: written by hand"):
        migrate_shard(raw, "1", "original")
    assert raw.get(LOCK) == b"written by hand"


def test_the_lock_of_a_run_on_a_redis_that_restarted_is_taken_over(server: RedisServer, raw: redis.Redis) -> None:
    """Redis numbers connections from 1 again at each start, so after a restart the dead run's
    client id names a live connection: the lock was refused until its TTL ran out (30 s). The
    lock names the Redis process too (its run_id)."""
    old_run = raw.info("server")["run_id"]
    holder = raw.client_id()
    server.restart()  # the run's Redis restarted (kill -9 and start from its AOF, in the probe)
    raw.connection_pool.disconnect()
    live = [server.client() for _ in range(holder + 2)]  # one of them now has the dead run's id
    try:
        assert any(c.client_id() == holder for c in live)
        assert raw.info("server")["run_id"] != old_run
        raw.set(LOCK, f"pinlater-migrate-1 to compact, pid 1, client {holder} of redis run {old_run}, started x", ex=30)
        migrate_shard(raw, "1", "compact")
        assert not raw.exists(LOCK)
        # a lock of this very Redis run whose holder's connection is live is refused, as before
        holder_now = live[0].client_id()
        run = raw.info("server")["run_id"]
        raw.set(LOCK, f"pinlater-migrate-1 to original, client {holder_now} of redis run {run}, started x", ex=30)
        with pytest.raises(MigrationError, match=r"another run holds pll-lock:\{1\}"):
            migrate_shard(raw, "1", "original")
    finally:
        for c in live:
            c.close()


def test_refuses_a_marker_that_names_no_layout(raw: redis.Redis, filled: ShardView) -> None:
    raw.set(MARKER, "garbage")
    with pytest.raises(MigrationError, match=r"^pll:\{1\} holds 'garbage', which is no layout"):
        migrate_shard(raw, "1", "compact")
    assert raw.get(MARKER) == b"garbage"
    assert original_view(raw, "1") == filled


def test_refuses_a_batch_above_the_cap(raw: redis.Redis) -> None:
    with pytest.raises(MigrationError, match="at most 10000"):
        migrate_shard(raw, "1", "compact", batch=10_001)
    assert raw.dbsize() == 0


def test_a_queue_name_that_is_not_utf8_is_one_line(raw: redis.Redis) -> None:
    raw.zadd("pln_1", {b"\xff": T0})
    with pytest.raises(MigrationError, match=r"pln_1 names a queue that is not UTF-8 text \(b'\\xff'\)"):
        migrate_shard(raw, "1", "compact")


def test_a_call_that_moves_nothing_stops_the_run_naming_the_queue(
    raw: redis.Redis, filled: ShardView, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pinlater.backends.redis import migrate

    monkeypatch.setattr(migrate, "script_source", lambda name: "return {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}")
    with pytest.raises(MigrationError, match="queue a: a call moved nothing while jobs are left"):
        migrate_shard(raw, "1", "compact")


@pytest.mark.usefixtures("ready_lists_on")
def test_a_call_that_only_drops_tombstones_makes_progress(server: RedisServer, raw: redis.Redis) -> None:
    store = open_store(server, layout="compact")
    try:
        store.create_queue("q", 1)
        store.enqueue_jobs("q", [NewJob(1, b"j%d" % i, T0, 1) for i in range(3)], T0)
        where = JobFilter(JobState.PENDING, 1, T0 + 1, None, body_regex="^j[12]$")
        assert store.delete_jobs("q", where, 10) == 2  # behind j0: tombstones
    finally:
        store.close()
    summary = migrate_shard(raw, "1", "original", batch=1)
    assert (summary.moved.jobs, summary.moved.tombstones) == (1, 2)
    assert [j.body for j in original_view(raw, "1").jobs.values()] == [b"j0"]
