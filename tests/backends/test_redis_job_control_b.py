"""Paged scans, the oldest ready job and schedules in the Redis store, where the conformance suite
cannot see: the store's own scan order (equal run afters by id as text), the held and waiting
sets and ready lists merged into PENDING pages, the work of a page 100,000 jobs deep (counted in
the members its commands read, from MONITOR), a queue-count-sized number of round trips for
``oldest_ready``, and the schedules' keys on a Redis Cluster (one slot per call) and in the
original layout (keys of our own)."""

from __future__ import annotations

import random
import re
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from tests.support.redis_server import RedisServer
from tests.support.stores import make_store

from pinlater.backends.base import (
    JobFilter,
    JobRecord,
    JobState,
    KeyedJob,
    NewJob,
    QueueRules,
    ScanCursor,
    ScheduleRow,
)
from pinlater.backends.redis import RedisEndpoint, RedisShardConfig, RedisStore
from pinlater.backends.redis.cluster import key_slot
from pinlater.backends.redis.keys import schedule_keys
from pinlater.backends.redis.keys_compact import CompactQueueKeys, compact_names_key, compact_schedule_keys
from pinlater.backends.redis.migrate import migrate_shard
from pinlater.errors import QueueNotFoundError

pytestmark = pytest.mark.redis

T0 = 1_700_000_000_000
Q = "jobs"
KINDS = ["redis", "redis-compact", "redis-cluster"]


@pytest.fixture(params=KINDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[RedisStore]:
    with make_store(request.param, tmp_path) as shard:
        assert isinstance(shard, RedisStore)
        yield shard


@pytest.fixture(params=["original", "compact"])
def server_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[RedisServer, RedisStore]]:
    with RedisServer(tmp_path / "redis") as server:
        shard = RedisStore("1", RedisShardConfig(RedisEndpoint(server.host, server.port), layout=request.param))
        try:
            yield server, shard
        finally:
            shard.close()


def pending(now_ms: int = T0 + 10_000, future: bool | None = None, body_regex: str | None = None) -> JobFilter:
    return JobFilter(JobState.PENDING, 1, now_ms, future, body_regex)


def scan_order(job: JobRecord) -> tuple[int, str]:
    """The Redis store's scan order, read backwards: run after, then the id as text."""
    return (job.run_after_ms, str(job.local_id))


def page_through(store: RedisStore, where: JobFilter, limit: int, between: object = None) -> list[JobRecord]:
    """Every page from the top, each from the last job of the one before; ``between(page)`` runs
    after each page (changes made while the scan goes on)."""
    seen: list[JobRecord] = []
    after: ScanCursor | None = None
    while True:
        page = store.scan_jobs(Q, where, limit, after)
        assert len(page) <= limit
        assert [scan_order(j) for j in page] == sorted((scan_order(j) for j in page), reverse=True)
        seen += page
        if len(page) < limit:
            return seen
        after = ScanCursor(page[-1].run_after_ms, page[-1].local_id)
        if callable(between):
            between(page)


# -- paged scans ----------------------------------------------------------------------------------


def test_pages_return_every_job_once_in_the_sets_order(store: RedisStore) -> None:
    store.create_queue(Q, 1)
    # runs of equal run afters across id lengths (9 < 10 < 100 as numbers, not as text)
    jobs = [NewJob(1, b"j%d" % i, T0 + (i % 5) * 1000, 3) for i in range(230)]
    ids = store.enqueue_jobs(Q, jobs, T0)
    run_after = dict(zip(ids, (j.run_after_ms for j in jobs), strict=True))
    held = store.reserve_jobs(Q, 1, 7, "~r|b", T0 + 10_000, 60_000)  # out of PENDING's set: merged back
    assert len(held) == 7
    everything = store.scan_jobs(Q, pending(), 1000)
    expected = sorted(((run_after[i], str(i)) for i in ids), reverse=True)
    assert [scan_order(j) for j in everything] == expected
    for limit in (1, 7, 23, 100):
        paged = page_through(store, pending(), limit)
        assert [scan_order(j) for j in paged] == expected, limit
    # a page from a point in the middle of a run of ties starts right after it
    middle = everything[101]
    after = store.scan_jobs(Q, pending(), 10, ScanCursor(middle.run_after_ms, middle.local_id))
    assert [j.local_id for j in after] == [j.local_id for j in everything[102:112]]


def test_a_scan_survives_changes_between_pages(store: RedisStore) -> None:
    """Jobs that stay PENDING throughout come once, whatever is enqueued, deleted, dequeued or
    held between pages, the point's own job included (gone: its place is still found)."""
    store.create_queue(Q, 1)
    rng = random.Random(5)
    jobs = [NewJob(1, b"x", T0 + rng.randrange(20) * 1000, 3) for _ in range(400)]
    ids = store.enqueue_jobs(Q, jobs, T0)
    dequeued = {j.local_id for j in store.dequeue_jobs(Q, 1, 30, "w", T0 + 10_000, False)}
    stay = set(ids) - dequeued
    touched: set[int] = set()

    def churn(page: list[JobRecord]) -> None:
        last = page[-1]
        # the point's own job goes (deleted: dequeued, then no longer PENDING), and others around
        gone = [j.local_id for j in page[-3:]]
        claimed = store.dequeue_jobs(Q, 1, 5, "w", T0 + 10_000, False)
        touched.update(j.local_id for j in claimed)
        touched.update(gone)
        new = store.enqueue_jobs(
            Q, [NewJob(1, b"n", T0 + rng.randrange(20) * 1000, 1) for _ in range(rng.randrange(1, 15))], T0
        )
        touched.update(new)
        store.reserve_jobs(Q, 1, 3, "~r|c", T0 + 10_000, 60_000)  # held jobs stay PENDING
        keys = store._keys(Q)
        pipe = store.client.pipeline(transaction=False)
        for local_id in gone:  # gone from every PENDING structure, as a delete by id leaves it
            pipe.zrem(keys.set_key(1, JobState.PENDING), local_id)
            pipe.zrem(keys.held_key(1), local_id)
        pipe.execute()
        assert last.local_id in touched

    seen = page_through(store, pending(), 17, churn)
    counts: dict[int, int] = {}
    for job in seen:
        counts[job.local_id] = counts.get(job.local_id, 0) + 1
    assert all(n == 1 for n in counts.values()), "no job twice"
    assert stay - touched <= set(counts), "every job that stayed PENDING throughout"


def test_pages_of_other_states_and_of_future_jobs(store: RedisStore) -> None:
    store.create_queue(Q, 1)
    ready = store.enqueue_jobs(Q, [NewJob(1, b"r", T0 - 5, 1) for _ in range(30)], T0)
    later = store.enqueue_jobs(Q, [NewJob(1, b"l", T0 + 50_000 + i % 3, 1) for i in range(30)], T0)
    claimed = [j.local_id for j in store.dequeue_jobs(Q, 1, 12, "w", T0, False)]
    assert {j.local_id for j in page_through(store, pending(T0, future=True), 4)} == set(later)
    assert {j.local_id for j in page_through(store, pending(T0, future=False), 4)} == set(ready) - set(claimed)
    running = JobFilter(JobState.IN_PROGRESS, 1, T0 + 1, False)
    assert sorted(j.local_id for j in page_through(store, running, 5)) == sorted(claimed)


def test_a_body_regex_pages_from_a_point_too(store: RedisStore) -> None:
    store.create_queue(Q, 1)
    bodies = [b"keep" if i % 3 == 0 else b"drop" for i in range(120)]
    ids = store.enqueue_jobs(Q, [NewJob(1, b, T0 + i // 10, 1) for i, b in enumerate(bodies)], T0)
    keep = {i for i, b in zip(ids, bodies, strict=True) if b == b"keep"}
    seen = page_through(store, pending(body_regex="^keep"), 6)
    assert [j.local_id for j in seen if j.local_id in keep] == [j.local_id for j in seen]
    assert sorted(j.local_id for j in seen) == sorted(keep)


def test_waiting_group_jobs_and_ready_lists_page_as_pending(tmp_path: Path, ready_lists_on: None) -> None:
    """Compact only: a group's waiting jobs (their own set) and the ready lists
    (run after == the enqueue's now) are PENDING pages' members in the same order."""
    with make_store("redis-compact", tmp_path) as store:
        assert isinstance(store, RedisStore)
        store.create_queue(Q, 1)
        store.set_queue_rules({Q: QueueRules(group_concurrency=1)})
        # ids 1-9 in the set, so that the list's ids have two digits (a run in the list ends where an
        # id gains one: lib/ready.lua)
        early = store.enqueue_jobs(Q, [NewJob(1, b"e", T0 - 50, 1) for _ in range(9)], T0)
        listed = store.enqueue_jobs(Q, [NewJob(1, b"l", T0, 1) for _ in range(25)], T0)  # ready list
        listed += store.enqueue_jobs(Q, [NewJob(1, b"m", T0 + 7, 1) for _ in range(12)], T0 + 7)
        keys = store._keys(Q)
        assert isinstance(keys, CompactQueueKeys)
        assert store.client.llen(keys.ready_key(1)) > 30
        grouped = [KeyedJob(NewJob(1, b"g", T0, 1), None, 0, "g") for _ in range(6)]
        in_group = [e.local_id for e in store.enqueue_keyed_jobs(Q, grouped, T0)]  # five wait
        assert store.client.zcard(keys.waiting_key(1)) == 5
        plain = store.enqueue_jobs(Q, [NewJob(1, b"p", T0 + 3, 1) for _ in range(15)], T0 - 100)
        everything = store.scan_jobs(Q, pending(), 1000)
        assert sorted(j.local_id for j in everything) == sorted(early + listed + in_group + plain)
        assert [scan_order(j) for j in everything] == sorted((scan_order(j) for j in everything), reverse=True)
        for limit in (1, 4, 11):
            assert [j.local_id for j in page_through(store, pending(), limit)] == [j.local_id for j in everything]


# -- a deep page's work ------------------------------------------------------------------------------

_MONITOR_LINE = re.compile(rb"^\d+\.\d+ \[\d+ ([^\]]*)\] (.*)$", re.DOTALL)
_ARG = re.compile(rb'"((?:[^"\\]|\\.)*)"')


def members_read(lines: list[bytes]) -> int:
    """What the scripts' commands read, in members: a range its length (and its offset: a LIMIT
    offset is walked), an HMGET its fields (of a job's hash: one job), a list range its length,
    a lookup by score, rank or member (ZCOUNT, ZRANK, ZSCORE, HGET, ...) one."""
    total = 0
    for line in lines:
        match = _MONITOR_LINE.match(line)
        if not match or match.group(1) != b"lua":
            continue
        args = _ARG.findall(match.group(2))
        command = args[0].lower()
        if command in (b"zrange", b"lrange"):
            start, stop = int(args[2]), int(args[3])
            total += max(1, stop - start + 1) if start >= 0 and stop >= 0 else 256
        elif command in (b"zrangebyscore", b"zrevrangebyscore"):
            limit = [i for i, a in enumerate(args) if a.lower() == b"limit"]
            total += int(args[limit[0] + 1]) + int(args[limit[0] + 2]) if limit else 10**9
        elif command == b"hmget":  # a job's hash (the original layout) is one job
            total += 1 if args[1].startswith(b"plh_") else len(args) - 2
        else:
            total += 1
    return total


def watched(server: RedisServer, run: object) -> list[bytes]:
    """MONITOR's lines while ``run()`` runs."""
    stop = b"job-control-b-stop"
    watcher = server.client()
    lines: list[bytes] = []
    monitor = watcher.monitor()
    connection = monitor.__enter__()

    def watch() -> None:
        while True:
            line = connection.connection.read_response()
            lines.append(line)
            if stop in line:
                return

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        assert callable(run)
        run()
    finally:
        with server.client() as client:
            client.echo(stop)
        thread.join(10)
        monitor.__exit__(None, None, None)
        watcher.close()
    assert not thread.is_alive()
    return lines


def test_a_page_100k_deep_reads_about_its_limit(server_store: tuple[RedisServer, RedisStore]) -> None:
    server, store = server_store
    store.create_queue(Q, 1)
    total, limit = 100_000, 50
    for start in range(0, total, 10_000):  # runs of 10,000 equal run afters: the search is in a run
        store.enqueue_jobs(Q, [NewJob(1, b"x", T0 + (start + i) // 10_000, 1) for i in range(10_000)], T0)
    held = store.reserve_jobs(Q, 1, 20, "~r|deep", T0 + 1000, 60_000)  # a held set to merge too
    assert len(held) == 20
    oldest_run = sorted((str(i) for i in range(1, 10_001)), reverse=True)  # ties: ids as text
    # the point: 95,000 jobs deep, in the oldest run (run after T0), then a point that is gone
    deep = ScanCursor(T0, int(oldest_run[5_000 - 1]))
    gone = ScanCursor(T0 + 3, 9_999_999)  # no such job: its place is still found (above "39999")
    pages: list[list[JobRecord]] = []

    def scan() -> None:
        pages.append(store.scan_jobs(Q, pending(T0 + 1000), limit, deep))
        pages.append(store.scan_jobs(Q, pending(T0 + 1000), limit, gone))

    lines = watched(server, scan)
    assert [str(j.local_id) for j in pages[0]] == oldest_run[5_000 : 5_000 + limit]
    assert all(j.run_after_ms == T0 for j in pages[0])
    fourth_run = sorted((str(i) for i in range(30_001, 40_001)), reverse=True)
    assert [str(j.local_id) for j in pages[1]] == fourth_run[:limit]
    read = members_read(lines)
    # two pages of 50 from two sets (ranges, records, dedup keys), with two searches by halving
    # through runs of 10,000 (about 14 probes each): a few hundred members, where reading from
    # the top would be 95,000
    assert read < 12 * limit, read


def test_a_page_deep_in_a_ready_list_reads_about_its_limit(tmp_path: Path, ready_lists_on: None) -> None:
    """The compact layout's ready list is in (run after, id as text) order, so a scan's point is
    found in it by halving (lib/ready.lua's ready_index), not by reading it from its tail."""
    with RedisServer(tmp_path / "redis") as server:
        store = RedisStore("1", RedisShardConfig(RedisEndpoint(server.host, server.port), layout="compact"))
        try:
            store.create_queue(Q, 1)
            store.client.hset(f"plc:{{1:{Q}}}:j", "id", 100_000)  # six-digit ids: one run per enqueue
            runs, size, limit = 4, 10_000, 50
            for run in range(runs):  # four runs in the list, a ms apart
                store.enqueue_jobs(Q, [NewJob(1, b"x", T0 + run, 1) for _ in range(size)], T0 + run)
            keys = store._keys(Q)
            assert isinstance(keys, CompactQueueKeys)
            assert store.client.llen(keys.ready_key(1)) == runs * (size + size // 256 + 1)  # a marker a 256 ids
            deep = ScanCursor(T0 + 1, 115_000)  # in the second run, 25,000 from the tail
            gone = ScanCursor(T0 + 2, 999_999)  # no such job: its place is still found (after the third run)
            pages: list[list[JobRecord]] = []

            def scan() -> None:
                pages.append(store.scan_jobs(Q, pending(T0 + 1000), limit, deep))
                pages.append(store.scan_jobs(Q, pending(T0 + 1000), limit, gone))

            lines = watched(server, scan)
        finally:
            store.close()
    assert [j.local_id for j in pages[0]] == list(range(114_999, 114_999 - limit, -1))
    assert all(j.run_after_ms == T0 + 1 for j in pages[0])
    assert [j.local_id for j in pages[1]] == list(range(130_000, 130_000 - limit, -1))
    read = members_read(lines)
    # per page: two searches by halving (about 16 probes each, an LINDEX and an HGET a probe),
    # then about the limit read backwards with its records, and the rows' records
    assert read < 12 * limit, read


# -- the oldest ready job ------------------------------------------------------------------------------


def test_oldest_ready_per_queue_and_priority(store: RedisStore) -> None:
    for name in ("a", "b", "c"):
        store.create_queue(name, 3)
    store.enqueue_jobs("a", [NewJob(1, b"x", T0 - 500, 1), NewJob(1, b"y", T0 - 100, 1), NewJob(2, b"z", T0, 1)], T0)
    store.enqueue_jobs("a", [NewJob(3, b"later", T0 + 1, 1)], T0)  # not ready yet
    store.enqueue_jobs("b", [NewJob(2, b"x", T0 - 7, 1), NewJob(2, b"y", T0 - 9, 1)], T0)
    [claimed] = store.dequeue_jobs("b", 2, 1, "w", T0, False)  # the oldest is IN_PROGRESS now
    assert claimed.local_id == 2
    assert store.oldest_ready(3, T0) == {("a", 1): T0 - 500, ("a", 2): T0, ("b", 2): T0 - 7}
    assert store.oldest_ready(3, T0 + 1)[("a", 3)] == T0 + 1
    assert store.oldest_ready(3, T0 - 1000) == {}


def test_oldest_ready_leaves_out_waiting_group_jobs(tmp_path: Path) -> None:
    with make_store("redis-compact", tmp_path) as store:
        store.create_queue(Q, 1)
        grouped = [KeyedJob(NewJob(1, b"g", T0 - 100 + i, 1), None, 0, "g") for i in range(3)]
        store.enqueue_keyed_jobs(Q, grouped, T0)
        assert store.oldest_ready(1, T0) == {(Q, 1): T0 - 100}
        store.dequeue_jobs(Q, 1, 10, "w", T0, False)  # the active one; the others wait behind it
        assert store.oldest_ready(1, T0) == {}


def test_oldest_ready_of_many_queues_is_one_pipeline(tmp_path: Path) -> None:
    with RedisServer(tmp_path / "redis") as server:
        for layout in ("original", "compact"):
            store = RedisStore(layout, RedisShardConfig(RedisEndpoint(server.host, server.port), layout=layout))
            try:
                for q in range(200):
                    store.create_queue(f"q{q}", 3)
                    store.enqueue_jobs(f"q{q}", [NewJob(1 + q % 3, b"x", T0 - q, 1)], T0)
                store.oldest_ready(3, T0)  # the script loaded
                raw = server.client()
                raw.config_resetstat()
                oldest = store.oldest_ready(3, T0)
                stats = raw.info("commandstats")
                raw.close()
                assert oldest == {(f"q{q}", 1 + q % 3): T0 - q for q in range(200)}
                # 600 sets in one call (and the original's queue names, read by a script of its own)
                assert stats["cmdstat_evalsha"]["calls"] == (2 if layout == "original" else 1), stats
            finally:
                store.close()


# -- schedules -----------------------------------------------------------------------------------------


def test_schedules_put_list_due_advance_delete(store: RedisStore) -> None:
    store.create_queue(Q, 1)
    store.create_queue("other", 1)
    with pytest.raises(QueueNotFoundError):
        store.put_schedule(ScheduleRow("missing", "s", "{}", T0))
    rows = [
        ScheduleRow(Q, "b:with|odd chars", "spec|b\n", T0 + 10),
        ScheduleRow(Q, "a", "spec-a", T0),
        ScheduleRow(Q, "paused", "p", T0 - 5, paused=True),
        ScheduleRow("other", "a", "o", T0 + 1),
    ]
    for row in rows:
        store.put_schedule(row)
    assert store.list_schedules(Q) == sorted(rows[:3], key=lambda r: r.name)
    assert store.list_schedules("missing") == []
    assert store.due_schedules(T0 + 100, 10) == [rows[1], rows[3], rows[0]]  # paused: never due
    assert store.due_schedules(T0 + 100, 2) == [rows[1], rows[3]]
    assert store.due_schedules(T0 - 1, 10) == []
    assert not store.advance_schedule(Q, "a", T0 - 1, T0 + 60_000)  # not the expected tick
    assert store.advance_schedule(Q, "a", T0, T0 + 60_000)
    assert not store.advance_schedule(Q, "a", T0, T0 + 60_000)  # the second server's try
    assert not store.advance_schedule(Q, "nope", T0, T0 + 1)
    assert store.due_schedules(T0 + 100, 10) == [rows[3], rows[0]]
    assert store.advance_schedule(Q, "paused", T0 - 5, T0 - 1)  # moves, still paused
    assert store.due_schedules(T0 + 100, 10) == [rows[3], rows[0]]
    store.put_schedule(rows[2]._replace(paused=False))  # unpaused: due
    assert store.due_schedules(T0 + 100, 1) == [rows[2]._replace(paused=False)]
    assert store.delete_schedule(Q, "a") and not store.delete_schedule(Q, "a")
    assert not store.delete_schedule("missing", "a")
    assert [r.name for r in store.list_schedules(Q)] == ["b:with|odd chars", "paused"]


def test_delete_queue_drops_its_schedules_only(store: RedisStore) -> None:
    store.create_queue(Q, 1)
    store.create_queue("jobs2", 1)  # a name that starts with the other's
    store.put_schedule(ScheduleRow(Q, "s", "x", T0))
    store.put_schedule(ScheduleRow("jobs2", "s", "y", T0))
    store.delete_queue(Q)
    assert store.due_schedules(T0, 10) == [ScheduleRow("jobs2", "s", "y", T0)]
    with pytest.raises(QueueNotFoundError):  # a firing server's put after the delete
        store.put_schedule(ScheduleRow(Q, "s", "x", T0))
    store.create_queue(Q, 1)
    assert store.list_schedules(Q) == []


def test_a_cluster_keeps_schedules_in_the_names_sets_slot(tmp_path: Path) -> None:
    with make_store("redis-cluster", tmp_path) as store:
        assert isinstance(store, RedisStore)
        keys = [compact_names_key("1"), *compact_schedule_keys("1")]
        assert len({key_slot(k.encode()) for k in keys}) == 1
        for q in range(12):  # queues in other slots, on every master
            store.create_queue(f"q{q}", 1)
            store.put_schedule(ScheduleRow(f"q{q}", "s", "x", T0 + q))
        assert [r.queue for r in store.due_schedules(T0 + 100, 100)] == [f"q{q}" for q in range(12)]
        store.delete_queue("q3")
        assert len(store.due_schedules(T0 + 100, 100)) == 11


def test_the_original_layout_keeps_schedules_in_keys_of_its_own(tmp_path: Path) -> None:
    """The original server reads plq_/plh_/plj_/pln_ keys only: the schedules' pls_ keys are
    beside them, and its queue names set gains nothing."""
    with RedisServer(tmp_path / "redis") as server:
        store = RedisStore("1", RedisShardConfig(RedisEndpoint(server.host, server.port), layout="original"))
        try:
            store.create_queue(Q, 1)
            raw: redis.Redis = server.client()
            before = set(raw.keys("*"))
            store.put_schedule(ScheduleRow(Q, "s", "x", T0))
            added = set(raw.keys("*")) - before
            assert added == {k.encode() for k in schedule_keys("1")}
            assert raw.zrange("pln_1", 0, -1) == [Q.encode()]
            raw.close()
        finally:
            store.close()


def test_schedules_move_with_the_layout_both_ways(tmp_path: Path) -> None:
    """``pinlater migrate-layout`` moves the schedules' keys (renamed, or merged into schedules
    the destination already holds, which keep their rows there)."""
    with RedisServer(tmp_path / "redis") as server:
        raw = server.client()
        endpoint = RedisEndpoint(server.host, server.port)
        store = RedisStore("1", RedisShardConfig(endpoint, layout="original"))
        try:
            store.create_queue(Q, 1)
            rows = [ScheduleRow(Q, "a", "x", T0), ScheduleRow(Q, "p", "y", T0 - 1, paused=True)]
            for row in rows:
                store.put_schedule(row)
        finally:
            store.close()
        summary = migrate_shard(raw, "1", "compact")
        assert summary.schedules == 2
        assert not any(raw.exists(k) for k in schedule_keys("1"))
        store = RedisStore("1", RedisShardConfig(endpoint, layout="compact"))
        try:
            assert store.list_schedules(Q) == rows
            assert store.due_schedules(T0, 10) == [rows[0]]
            store.put_schedule(ScheduleRow(Q, "b", "z", T0 + 5))
        finally:
            store.close()
        # schedules left in the original layout's keys (a server that wrote them meanwhile): merged
        raw.hset(schedule_keys("1")[0], f"{Q}:a", f"{T0 + 99}|0|stale")
        raw.zadd(schedule_keys("1")[2], {f"{Q}:a": 0, f"{Q}:c": 0})
        raw.hset(schedule_keys("1")[0], f"{Q}:c", f"{T0 + 7}|0|c")
        raw.zadd(schedule_keys("1")[1], {f"{Q}:a": T0 + 99, f"{Q}:c": T0 + 7})
        summary = migrate_shard(raw, "1", "original")
        assert summary.schedules == 2  # b and p added; a's row replaced by the source's
        assert not any(raw.exists(k) for k in compact_schedule_keys("1"))
        store = RedisStore("1", RedisShardConfig(endpoint, layout="original"))
        try:
            assert [r.name for r in store.list_schedules(Q)] == ["a", "b", "c", "p"]
            assert store.list_schedules(Q)[0] == rows[0]  # the source's row, not the one left behind
            assert [r.name for r in store.due_schedules(T0 + 10, 10)] == ["a", "b", "c"]
        finally:
            store.close()
        raw.close()


def evict(store: RedisStore, local_id: int) -> None:
    """The job's hash (original) or record (compact) gone, as LRU eviction leaves a member."""
    keys = store._keys(Q)
    if isinstance(keys, CompactQueueKeys):
        store.client.hdel(keys.jobs_arg, str(local_id))
    else:
        store.client.delete(f"{keys.jobs_arg}{local_id}")


def test_a_page_over_evicted_members_still_fills_up(store: RedisStore) -> None:
    store.create_queue(Q, 1)
    ids = store.enqueue_jobs(Q, [NewJob(1, b"x", T0 - i, 1) for i in range(40)], T0)  # newest: ids[0]
    for local_id in ids[5:15]:
        evict(store, local_id)
    first = store.scan_jobs(Q, pending(), 5)
    assert [j.local_id for j in first] == ids[:5]
    # the next page meets the ten evicted members first: removed, counted, and read past
    second = store.scan_jobs(Q, pending(), 8, ScanCursor(first[-1].run_after_ms, first[-1].local_id))
    assert [j.local_id for j in second] == ids[15:23]
    assert store.evicted_jobs == 10
    assert store.count_jobs(Q, pending(), None) == 30
