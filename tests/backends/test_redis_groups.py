"""Ordered groups and queue rules in the Redis store beyond the shared suite: what the compact
layout leaves behind, the original layout's refusal and its max_in_progress, the cluster hash
tag, a long group moved up one job at a time, groupJobsPerSecond, two stores as two servers, and
``pinlater migrate-layout`` refusing grouped jobs."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from tests.support.redis_cluster import shared_cluster
from tests.support.redis_server import RedisServer

from pinlater._pinlater import AckGroup
from pinlater.backends.base import AckItem, GroupCounts, JobFilter, JobState, KeyedJob, NewJob, QueueRules
from pinlater.backends.redis import RedisDriver, RedisEndpoint, RedisShardConfig, RedisStore
from pinlater.backends.redis.keys_compact import GROUPS_PIN
from pinlater.backends.redis.migrate import MigrationError, migrate_shard
from pinlater.backends.redis.scripts import READY_LISTS_ENV
from pinlater.config import Settings

pytestmark = pytest.mark.redis

Q = "gq"
T0 = 1_700_000_000_000


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    with RedisServer(tmp_path / "redis") as srv:
        yield srv


@pytest.fixture
def raw(server: RedisServer) -> Iterator[redis.Redis]:
    client = server.client()
    yield client
    client.close()


def open_store(server: RedisServer, layout: str = "compact") -> RedisStore:
    return RedisStore("1", RedisShardConfig(RedisEndpoint(server.host, server.port), layout=layout))


def grouped(group: str, body: bytes = b"b", priority: int = 1, run_after: int = T0) -> KeyedJob:
    return KeyedJob(NewJob(priority, body, run_after, 1), None, 0, group)


def keys_of(raw: redis.Redis) -> set[str]:
    return {k.decode() for k in raw.keys("*")}


def test_a_finished_group_leaves_no_key_behind(server: RedisServer, raw: redis.Redis) -> None:
    store = open_store(server)
    try:
        store.create_queue(Q, 3)
        store.set_queue_rules({Q: QueueRules(group_concurrency=2)})
        jobs = [grouped("g", b"%d" % i, priority=1 + i % 3) for i in range(7)]
        store.enqueue_keyed_jobs(Q, jobs, T0)
        assert store.group_counts(Q) == GroupCounts(1, 1)
        assert {"plc:{1:gq}:ga", "plc:{1:gq}:gb", "plc:{1:gq}:gw"} <= keys_of(raw)
        assert raw.object("encoding", "plc:{1:gq}:ga") == b"hashtable"  # its pin: lib/groups.lua
        now, done = T0, 0
        while done < 7:
            now += 1000
            claimed = [(p, j.local_id) for p in (1, 2, 3) for j in store.dequeue_jobs(Q, p, 10, "c", now, False)]
            assert 0 < len(claimed) <= 2  # never more than the group's concurrency
            store.ack_jobs(Q, [AckItem(p, i) for p, i in claimed], [], now)
            done += len(claimed)
        assert store.group_counts(Q) == GroupCounts(0, 0)
        left = {k for k in keys_of(raw) if k.startswith("plc:{1:gq}")}
        # the records and the SUCCEEDED sets; nothing of the group
        assert left == {"plc:{1:gq}:j", "plc:{1:gq}:p1:s2", "plc:{1:gq}:p2:s2", "plc:{1:gq}:p3:s2"}
        store.delete_queue(Q)
        assert {k for k in keys_of(raw) if k.startswith("plc:{1:gq}")} == {"plc:{1:gq}:j"}  # the id counter
    finally:
        store.close()


def test_the_original_layout_refuses_groups_and_caps_in_progress(server: RedisServer) -> None:
    store = open_store(server, "original")
    try:
        store.create_queue(Q, 3)
        assert store.groups_refused is not None
        assert "needs the compact Redis layout; shard 1 is in the original one" in store.groups_refused
        assert store.group_counts(Q) == GroupCounts(0, 0)
        store.enqueue_jobs(Q, [NewJob(p, b"x", T0, 1) for p in (1, 2, 3) for _ in range(4)], T0)
        store.set_queue_rules({Q: QueueRules(max_in_progress=5)})
        assert len(store.dequeue_jobs(Q, 1, 3, "c", T0, False)) == 3
        assert len(store.dequeue_jobs(Q, 2, 10, "c", T0, False)) == 2  # 5 IN_PROGRESS over priorities
        assert store.dequeue_jobs(Q, 3, 10, "c", T0, False) == []
        assert len(store.dequeue_jobs(Q, 3, 10, "c", T0, True)) == 4  # dry runs ignore the cap

        async def hot() -> tuple[int, int]:
            first = await store.native.dequeue_jobs(Q, 3, 10, "c", T0, False)
            await store.native.ack_jobs(Q, AckGroup([AckItem(1, 1)], []), T0)
            second = await store.native.dequeue_jobs(Q, 3, 10, "c", T0, False)
            await store.native.aclose()
            return len(first.to_list()), len(second.to_list())

        assert asyncio.run(hot()) == (0, 1)
        held = store.reserve_jobs(Q, 3, 10, "~r|b", T0, 60_000)
        assert held == []  # at the cap: nothing reserved
        store.set_queue_rules({})
        assert len(store.dequeue_jobs(Q, 3, 10, "c", T0, False)) == 3
    finally:
        store.close()


def test_every_key_of_a_group_keeps_the_queue_hash_tag(server: RedisServer, raw: redis.Redis) -> None:
    store = open_store(server)
    try:
        store.create_queue(Q, 2)
        store.set_queue_rules({Q: QueueRules(group_jobs_per_second=0.5)})
        # group names with braces and colons cannot move a key to another slot
        store.enqueue_keyed_jobs(Q, [grouped(g, priority=p) for g in ("{x}", "a:b}", "{") for p in (1, 2)], T0)
        store.dequeue_jobs(Q, 1, 10, "c", T0, False)
        queue_keys = keys_of(raw) - {"pll:{1}", "plc:{1}:q"}  # the layout record, the queue names
        assert {"plc:{1:gq}:gr", "plc:{1:gq}:p2:w"} <= queue_keys
        assert all(k.startswith("plc:{1:gq}:") for k in queue_keys)  # so one slot: the tag is {1:gq}
        assert {r.group_key for r in store.lookup_jobs(Q, [(1, 1), (2, 2), (1, 3)], False)} == {"{x}", "a:b}"}
        # a group's second waiting job goes to the fifo (its first is the group's head, in ga)
        store.enqueue_keyed_jobs(Q, [grouped(g) for g in ("{x}", "a:b}", "{")], T0)
        queue_keys = keys_of(raw) - {"pll:{1}", "plc:{1}:q"}
        assert "plc:{1:gq}:gw" in queue_keys
        assert all(k.startswith("plc:{1:gq}:") for k in queue_keys)
    finally:
        store.close()


def test_a_long_group_is_handed_out_one_job_at_a_time_in_order(server: RedisServer, raw: redis.Redis) -> None:
    store = open_store(server)
    try:
        store.create_queue(Q, 3)
        n = 300
        # priorities mixed: the group's order is the enqueue order whatever the priority
        ids = [
            e.local_id for e in store.enqueue_keyed_jobs(Q, [grouped("big", priority=1 + i % 3) for i in range(n)], T0)
        ]
        store.enqueue_jobs(Q, [NewJob(1, b"plain", T0, 1)], T0)
        pending = sum(store.count_jobs(Q, JobFilter(JobState.PENDING, p, T0, None), None) for p in (1, 2, 3))
        assert pending == n + 1  # waiting jobs are PENDING to counts
        assert store.group_counts(Q) == GroupCounts(1, 1)
        order = []
        for step in range(n):
            raw.config_resetstat()
            claimed = [(p, j.local_id) for p in (1, 2, 3) for j in store.dequeue_jobs(Q, p, 50, "c", T0 + step, False)]
            group_jobs = [c for c in claimed if c[1] in ids]
            assert len(group_jobs) == 1, step
            order.append(group_jobs[0][1])
            store.ack_jobs(Q, [AckItem(p, i) for p, i in claimed], [], T0 + step)
            stats = raw.info("commandstats")
            # the ack moved one job up: bounded work, whatever waits behind it
            assert stats.get("cmdstat_zrangebylex", {}).get("calls", 0) <= 1
        assert order == ids
        assert store.group_counts(Q) == GroupCounts(0, 0)
    finally:
        store.close()


def test_a_group_over_its_rate_is_skipped_and_the_others_served(server: RedisServer) -> None:
    store = open_store(server)
    try:
        store.create_queue(Q, 1)
        store.set_queue_rules({Q: QueueRules(group_concurrency=5, group_jobs_per_second=1.0)})
        store.enqueue_keyed_jobs(Q, [grouped("fast") for _ in range(3)] + [grouped("other")], T0)
        first = store.dequeue_jobs(Q, 1, 10, "c", T0, False)
        assert sorted(j.local_id for j in first) == [1, 4]  # one token each
        assert store.dequeue_jobs(Q, 1, 10, "c", T0 + 500, False) == []
        later = store.dequeue_jobs(Q, 1, 10, "c", T0 + 1000, False)
        assert [j.local_id for j in later] == [2]
        ready = store.count_jobs(Q, JobFilter(JobState.PENDING, 1, T0 + 1000), None)
        assert ready == 0  # the third waits for its token: its run after moved to when it is due
        assert [j.local_id for j in store.dequeue_jobs(Q, 1, 10, "c", T0 + 2000, False)] == [3]
    finally:
        store.close()


def test_a_finished_groups_bucket_is_kept_until_full_then_swept(server: RedisServer, raw: redis.Redis) -> None:
    store = open_store(server)
    try:
        store.create_queue(Q, 1)
        store.set_queue_rules({Q: QueueRules(group_jobs_per_second=0.5)})  # a token every 2 s
        store.enqueue_keyed_jobs(Q, [grouped("a")], T0)
        (job,) = store.dequeue_jobs(Q, 1, 10, "c", T0, False)
        store.ack_jobs(Q, [AckItem(1, job.local_id)], [], T0 + 100)
        assert store.group_counts(Q) == GroupCounts(0, 0)
        # finished with an empty bucket: a new job of the group right away waits for its token
        assert raw.hkeys("plc:{1:gq}:gr") == [b"a"]
        assert raw.zrange("plc:{1:gq}:gz", 0, -1, withscores=True) == [(b"a", T0 + 2000)]
        store.enqueue_keyed_jobs(Q, [grouped("a")], T0 + 200)
        assert raw.zcard("plc:{1:gq}:gz") == 0  # live again
        assert store.dequeue_jobs(Q, 1, 10, "c", T0 + 200, False) == []
        (job,) = store.dequeue_jobs(Q, 1, 10, "c", T0 + 2000, False)
        store.ack_jobs(Q, [AckItem(1, job.local_id)], [], T0 + 2000)
        # once full again, the next change of any group deletes it
        store.enqueue_keyed_jobs(Q, [grouped("b")], T0 + 4000)
        assert raw.hkeys("plc:{1:gq}:gr") == []
        assert raw.exists("plc:{1:gq}:gz") == 0
    finally:
        store.close()


def test_a_group_finished_after_its_rate_went_leaves_no_bucket(server: RedisServer, raw: redis.Redis) -> None:
    """A group that finishes once groupJobsPerSecond is gone (the ack's common leave, which reads
    no bucket) drops whatever bucket it had, and its change sweeps the refills due by then."""
    store = open_store(server)
    try:
        store.create_queue(Q, 1)
        store.set_queue_rules({Q: QueueRules(group_jobs_per_second=0.5)})  # a token every 2 s
        store.enqueue_keyed_jobs(Q, [grouped("a"), grouped("b")], T0)
        claimed = store.dequeue_jobs(Q, 1, 10, "c", T0, False)
        assert len(claimed) == 2
        store.ack_jobs(Q, [AckItem(1, claimed[0].local_id)], [], T0 + 100)  # a: with the rate
        assert raw.zrange("plc:{1:gq}:gz", 0, -1, withscores=True) == [(b"a", T0 + 2000)]
        assert sorted(raw.hkeys("plc:{1:gq}:gr")) == [b"a", b"b"]
        store.set_queue_rules({Q: QueueRules()})
        store.ack_jobs(Q, [AckItem(1, claimed[1].local_id)], [], T0 + 3000)  # b: without
        assert store.group_counts(Q) == GroupCounts(0, 0)
        assert raw.exists("plc:{1:gq}:gr", "plc:{1:gq}:gz", "plc:{1:gq}:ga") == 0
    finally:
        store.close()


def test_groups_and_the_cap_on_a_redis_cluster() -> None:
    nodes = shared_cluster()
    nodes.flush_all()
    shard = {"cluster": [{"host": host, "port": port} for host, port in nodes.seeds[:1]]}
    driver = RedisDriver()
    text = json.dumps({"shards": [{"name": "c", "shardConfig": shard}]})
    store = driver.open_store("c", driver.parse_config(text, "redis.json")["c"], Settings())
    assert isinstance(store, RedisStore)
    try:
        assert store.groups_refused is None
        store.create_queue(Q, 2)
        store.set_queue_rules({Q: QueueRules(max_in_progress=2, group_jobs_per_second=100.0)})
        store.enqueue_keyed_jobs(Q, [grouped("g", b"1"), grouped("g", b"2", priority=2), grouped("h", b"3")], T0)
        assert store.group_counts(Q) == GroupCounts(2, 1)

        async def hot() -> list[bytes]:
            first = await store.native.dequeue_jobs(Q, 1, 10, "c", T0, False)
            bodies = [j[1] for j in first.to_list()]
            await store.native.ack_jobs(Q, AckGroup([AckItem(1, j[0]) for j in first.to_list()], []), T0)
            second = await store.native.dequeue_jobs(Q, 2, 10, "c", T0 + 1000, False)
            await store.native.aclose()
            return bodies + [j[1] for j in second.to_list()]

        assert asyncio.run(hot()) == [b"1", b"3", b"2"]
        assert store.group_counts(Q) == GroupCounts(1, 0)
        store.delete_queue(Q)
    finally:
        store.close()


def test_two_stores_as_two_servers_share_the_groups_and_the_cap(server: RedisServer) -> None:
    a, b = open_store(server), open_store(server)
    try:
        a.create_queue(Q, 2)
        rules = {Q: QueueRules(max_in_progress=2)}
        a.set_queue_rules(rules)
        b.set_queue_rules(rules)
        a.enqueue_keyed_jobs(Q, [grouped("g", b"1"), grouped("g", b"2", priority=2)], T0)
        b.enqueue_keyed_jobs(Q, [grouped("g", b"3"), grouped("h", b"4"), grouped("i", b"5")], T0)
        on_a = a.dequeue_jobs(Q, 1, 10, "a", T0, False)
        assert [j.body for j in on_a] == [b"1", b"4"]  # g's first job and h's; the cap is reached
        assert b.dequeue_jobs(Q, 1, 10, "b", T0, False) == []
        b.ack_jobs(Q, [AckItem(1, on_a[0].local_id)], [], T0)  # g's next is of priority 2
        assert [j.body for j in b.dequeue_jobs(Q, 2, 10, "b", T0, False)] == [b"2"]
        a.ack_jobs(Q, [AckItem(1, on_a[1].local_id)], [], T0)
        assert [j.body for j in a.dequeue_jobs(Q, 1, 10, "a", T0, False)] == [b"5"]
        assert a.group_counts(Q) == b.group_counts(Q) == GroupCounts(2, 1)
    finally:
        a.close()
        b.close()


def test_a_failure_keeps_its_place_and_a_delete_moves_the_next_up(server: RedisServer) -> None:
    store = open_store(server)
    try:
        store.create_queue(Q, 1)
        jobs = [KeyedJob(NewJob(1, b"%d" % i, T0, 2), None, 0, "g") for i in range(4)]
        ids = [e.local_id for e in store.enqueue_keyed_jobs(Q, jobs, T0)]
        (first,) = store.dequeue_jobs(Q, 1, 10, "c", T0, False)
        store.ack_jobs(Q, [], [AckItem(1, first.local_id, retry_delay_ms=100)], T0)
        assert store.dequeue_jobs(Q, 1, 10, "c", T0 + 50, False) == []  # the retry blocks the group
        assert store.resurrect_timed_out_jobs(Q, 1, T0 + 10**6, 10, T0 + 10**6) == 0
        (again,) = store.dequeue_jobs(Q, 1, 10, "c", T0 + 100, False)
        assert again.local_id == ids[0]
        # delete the waiting second job, then the running first: the third moves up
        assert store.delete_jobs(Q, JobFilter(JobState.PENDING, 1, T0, None), 1) == 1
        assert store.lookup_jobs(Q, [(1, ids[1])], False) == []
        assert store.delete_jobs(Q, JobFilter(JobState.IN_PROGRESS, 1, T0 + 200, None), 10) == 1
        (third,) = store.dequeue_jobs(Q, 1, 10, "c", T0 + 200, False)
        assert third.local_id == ids[2]
        # a claim timeout with no attempt left fails it for good: the fourth moves up
        store.ack_jobs(Q, [], [AckItem(1, ids[2])], T0 + 200)
        store.dequeue_jobs(Q, 1, 10, "c", T0 + 200, False)  # the retry of the third
        assert store.resurrect_timed_out_jobs(Q, 1, T0 + 10**6, 10, T0 + 10**6) == 1
        (fourth,) = store.dequeue_jobs(Q, 1, 10, "c", T0 + 10**6, False)
        assert fourth.local_id == ids[3]
        # retried, the third rejoins its group at its old place, and waits: the fourth runs
        assert store.retry_failed_jobs(Q, 1, 1, T0, 10, T0 + 10**6) == 1
        assert store.dequeue_jobs(Q, 1, 10, "c", T0 + 10**6, False) == []
        store.ack_jobs(Q, [AckItem(1, ids[3])], [], T0 + 10**6)
        assert [j.local_id for j in store.dequeue_jobs(Q, 1, 10, "c", T0 + 10**6, False)] == [ids[2]]
    finally:
        store.close()


def ready_ids(raw: redis.Redis, priority: int = 1) -> list[int]:
    """The job ids in a priority's ready list (lib/ready.lua), markers and tombstones left out."""
    entries = [e.decode() for e in raw.lrange(f"plc:{{1:{Q}}}:p{priority}:r", 0, -1)]
    return [int(e) for e in entries if e.isdigit()]


@pytest.mark.usefixtures("ready_lists_on")
def test_a_listed_job_of_a_group_over_its_rate_moves_to_the_set(server: RedisServer, raw: redis.Redis) -> None:
    """A job due now that joins an empty group waits in the ready list; a dequeue or reservation
    that meets it while its group has no token moves it to the PENDING set at the next one."""
    store = open_store(server)
    try:
        store.create_queue(Q, 1)
        store.set_queue_rules({Q: QueueRules(group_jobs_per_second=0.5)})  # a token every 2 s
        (a,) = [e.local_id for e in store.enqueue_keyed_jobs(Q, [grouped("a", run_after=T0)], T0)]
        assert ready_ids(raw) == [a]
        assert [j.local_id for j in store.dequeue_jobs(Q, 1, 10, "c", T0, False)] == [a]  # its token
        store.ack_jobs(Q, [AckItem(1, a)], [], T0 + 100)

        now = T0 + 200
        a2, b = [
            e.local_id
            for e in store.enqueue_keyed_jobs(Q, [grouped("a", run_after=now), grouped("b", run_after=now)], now)
        ]
        assert ready_ids(raw) == [a2, b]
        assert [j.local_id for j in store.dequeue_jobs(Q, 1, 10, "c", now, False)] == [b]
        assert ready_ids(raw) == [] and raw.zrange(f"plc:{{1:{Q}}}:p1:s0", 0, -1, withscores=True) == [
            (str(a2).encode(), T0 + 2000)
        ]
        assert [j.local_id for j in store.dequeue_jobs(Q, 1, 10, "c", T0 + 2000, False)] == [a2]
        store.ack_jobs(Q, [AckItem(1, a2), AckItem(1, b)], [], T0 + 2000)

        now = T0 + 2100  # a's bucket: 0.2 tokens
        (a3,) = [e.local_id for e in store.enqueue_keyed_jobs(Q, [grouped("a", run_after=now)], now)]
        assert ready_ids(raw) == [a3]
        assert store.reserve_jobs(Q, 1, 10, "r", now, 5000) == []
        assert ready_ids(raw) == [] and raw.zscore(f"plc:{{1:{Q}}}:p1:s0", a3) == T0 + 4000
        assert [j.local_id for j in store.reserve_jobs(Q, 1, 10, "r", T0 + 4000, 5000)] == [a3]
    finally:
        store.close()


@pytest.mark.parametrize("lists", [True, False])
def test_a_dequeue_reschedules_at_most_1000_jobs_over_their_rate(
    server: RedisServer, raw: redis.Redis, monkeypatch: pytest.MonkeyPatch, lists: bool
) -> None:
    """lib/groups.lua's MAX_RATE_SKIPS bounds what one dequeue reschedules, from the ready list
    (to the set) as from the set."""
    if not lists:
        monkeypatch.setenv(READY_LISTS_ENV, "0")
    else:
        monkeypatch.delenv(READY_LISTS_ENV, raising=False)
    store = open_store(server)
    try:
        store.create_queue(Q, 1)
        store.set_queue_rules({Q: QueueRules(group_jobs_per_second=0.5)})
        raw.hset(f"plc:{{1:{Q}}}:j", "id", 10_000)  # ids of five digits: none gains one, all are listed
        groups = [f"g{i}" for i in range(1002)]
        for now in (T0, T0 + 10):  # the second round finds every bucket empty
            ids = []
            for part in (groups[:1000], groups[1000:]):  # (a call of more goes to the general loop: the set)
                ids += [e.local_id for e in store.enqueue_keyed_jobs(Q, [grouped(g, run_after=now) for g in part], now)]
            assert ready_ids(raw) == (ids if lists else [])
            if now == T0:
                assert len(store.dequeue_jobs(Q, 1, 2000, "c", now, False)) == 1002
                store.ack_jobs(Q, [AckItem(1, i) for i in ids], [], now)
        assert store.dequeue_jobs(Q, 1, 10, "c", T0 + 10, False) == []
        due_now = {int(m) for m in raw.zrangebyscore(f"plc:{{1:{Q}}}:p1:s0", "-inf", T0 + 10)}
        rescheduled = raw.zcount(f"plc:{{1:{Q}}}:p1:s0", f"({T0 + 10}", "+inf")
        if lists:
            assert ready_ids(raw) == ids[1000:] and not due_now and rescheduled == 1000
        else:
            assert len(due_now) == 2 and rescheduled == 1000
    finally:
        store.close()


@pytest.mark.usefixtures("ready_lists_on")
@pytest.mark.parametrize("how", ["range", "body regex", "cancel"])
def test_a_listed_job_of_a_group_deleted_or_cancelled_moves_the_next_up(
    server: RedisServer, raw: redis.Redis, how: str
) -> None:
    store = open_store(server)
    try:
        store.create_queue(Q, 1)
        (first,) = [e.local_id for e in store.enqueue_keyed_jobs(Q, [grouped("g", b"one", run_after=T0)], T0)]
        (second,) = [e.local_id for e in store.enqueue_keyed_jobs(Q, [grouped("g", b"two", run_after=T0)], T0)]
        assert ready_ids(raw) == [first]  # the active one; the second waits behind it
        assert store.group_counts(Q) == GroupCounts(1, 1)
        if how == "range":
            assert store.delete_jobs(Q, JobFilter(JobState.PENDING, 1, T0, None), 1) == 1
        elif how == "body regex":
            assert store.delete_jobs(Q, JobFilter(JobState.PENDING, 1, T0, None, body_regex="^one$"), 10) == 1
        else:
            assert store.cancel_jobs(Q, [(1, first)], T0) == 1
        assert store.group_counts(Q) == GroupCounts(1, 0)
        assert [j.local_id for j in store.dequeue_jobs(Q, 1, 10, "c", T0, False)] == [second]
    finally:
        store.close()


@pytest.mark.parametrize("finished", [False, True])
@pytest.mark.parametrize("extra", ["", "a dedup key", "an expiry"])
def test_migrating_grouped_jobs_to_the_original_layout_is_refused(
    server: RedisServer, raw: redis.Redis, finished: bool, extra: str
) -> None:
    """Whatever else the grouped job's record holds (a dedup key or an expiry after its group)."""
    job = grouped("g")
    if extra == "a dedup key":
        job = job._replace(key="k")
    elif extra == "an expiry":
        job = job._replace(expire_at_ms=T0 + 10**9)
    store = open_store(server)
    try:
        store.create_queue("plain", 1)
        store.enqueue_jobs("plain", [NewJob(1, b"x", T0, 1) for _ in range(3000)], T0)
        store.create_queue(Q, 1)
        store.enqueue_jobs(Q, [NewJob(1, b"x", T0, 1) for _ in range(2500)], T0)
        store.enqueue_keyed_jobs(Q, [job], T0)
        if finished:  # a FAILED job of a group: a retry would put it back in its group
            (job,) = [j for j in store.dequeue_jobs(Q, 1, 3000, "c", T0, False) if j.body == b"b"]
            store.ack_jobs(Q, [], [AckItem(1, job.local_id)], T0)
            assert store.group_counts(Q) == GroupCounts(0, 0)
    finally:
        store.close()
    before = keys_of(raw)
    with pytest.raises(MigrationError, match=f"^queue {Q} holds jobs of ordered groups"):
        migrate_shard(raw, "1", "original", force=True)
    assert raw.get("pll:{1}") == b"compact"  # nothing was written
    assert keys_of(raw) == before


def test_the_group_counts_stay_a_hash_table_and_their_pin_goes_with_the_last_group(
    server: RedisServer, raw: redis.Redis
) -> None:
    """A queue's ``ga`` holds a pin field besides its groups, which keeps it a hash table (a
    listpack costs a scan of every field per write); counts leave it out, and the key goes with
    the last group, whether a batch (an ack) or a single change (a delete) removes it."""
    store = open_store(server)
    try:
        store.create_queue(Q, 1)
        [a, b, c] = [e.local_id for e in store.enqueue_keyed_jobs(Q, [grouped(g) for g in "abc"], T0)]
        assert raw.object("encoding", "plc:{1:gq}:ga") == b"hashtable"
        assert raw.hlen("plc:{1:gq}:ga") == 4 and store.group_counts(Q) == GroupCounts(3, 0)
        assert store.cancel_jobs(Q, [(1, a)], T0) == 1  # a single change: the group goes, the pin stays
        assert store.group_counts(Q) == GroupCounts(2, 0) and raw.hexists("plc:{1:gq}:ga", GROUPS_PIN)
        claimed = store.dequeue_jobs(Q, 1, 10, "c", T0, False)
        assert sorted(j.local_id for j in claimed) == [b, c]
        store.ack_jobs(Q, [AckItem(1, b)], [], T0)  # a batch
        assert store.group_counts(Q) == GroupCounts(1, 0)
        store.ack_jobs(Q, [AckItem(1, c)], [], T0)  # the last group: the pin and the key go too
        assert store.group_counts(Q) == GroupCounts(0, 0) and not raw.exists("plc:{1:gq}:ga")
        store.enqueue_keyed_jobs(Q, [grouped("d")], T0)
        [d] = store.dequeue_jobs(Q, 1, 10, "c", T0, False)
        assert raw.hlen("plc:{1:gq}:ga") == 2
        assert store.cancel_jobs(Q, [(1, d.local_id)], T0) == 1  # in progress: it keeps running
        store.ack_jobs(Q, [], [AckItem(1, d.local_id)], T0)  # a failure that ends it
        assert not raw.exists("plc:{1:gq}:ga")
        [e] = store.enqueue_keyed_jobs(Q, [grouped("e")], T0)
        assert store.cancel_jobs(Q, [(1, e.local_id)], T0) == 1  # the last group, in a single change
        assert not raw.exists("plc:{1:gq}:ga")
    finally:
        store.close()


@pytest.mark.usefixtures("ready_lists_on")
def test_a_batch_of_new_keys_places_its_jobs_as_any_keyed_batch(server: RedisServer, raw: redis.Redis) -> None:
    """A uniform call of keyed jobs whose keys are all new (enqueue_keyed_jobs.lua's
    ``enqueue_fresh``) places them as the common path does: a job that joins an idle group alone
    is active in the ready list; of a group that several join, the first is active in the PENDING
    set and the rest wait; a later job of a group with an unfinished job waits (the groups' counts
    were written). Each key's record names its job, and each job's record its key and group."""
    store = open_store(server)
    try:
        store.create_queue(Q, 1)

        def keyed(key: str, group: str) -> KeyedJob:
            return KeyedJob(NewJob(1, f"body-{key}".encode(), T0, 2), key, 0, group)

        a, b1, b2, b3, c = [
            e.local_id
            for e in store.enqueue_keyed_jobs(
                Q, [keyed("ka", "a"), keyed("kb1", "b"), keyed("kb2", "b"), keyed("kb3", "b"), keyed("kc", "c")], T0
            )
        ]
        (a2,) = [e.local_id for e in store.enqueue_keyed_jobs(Q, [keyed("ka2", "a")], T0)]
        assert ready_ids(raw) == [a, c]
        assert raw.zrange(f"plc:{{1:{Q}}}:p1:s0", 0, -1) == [str(b1).encode()]
        assert sorted(int(i) for i in raw.zrange(f"plc:{{1:{Q}}}:p1:w", 0, -1)) == [b2, b3, a2]
        assert store.group_counts(Q) == GroupCounts(groups=3, blocked=2)
        records = raw.hmget(f"plc:{{1:{Q}}}:dk", ["ka", "kb2", "ka2"])
        assert records == [f"1:{a}:{T0}".encode(), f"1:{b2}:{T0}".encode(), f"1:{a2}:{T0}".encode()]
        found = store.lookup_jobs(Q, [(1, i) for i in (a, b2, a2)], True)
        assert [(r.body, r.dedup_key, r.group_key) for r in found] == [
            (b"body-ka", "ka", "a"),
            (b"body-kb2", "kb2", "b"),
            (b"body-ka2", "ka2", "a"),
        ]
        again = store.enqueue_keyed_jobs(Q, [keyed("kb2", "b"), keyed("kd", "d")], T0)
        assert (again[0].local_id, again[0].deduplicated) == (b2, True), "a held key answers its holder"

        order = []
        for step in range(4):
            claimed = [j.local_id for j in store.dequeue_jobs(Q, 1, 10, "c", T0 + step, False)]
            order.append(sorted(claimed))
            store.ack_jobs(Q, [AckItem(1, i) for i in claimed], [], T0 + step)
        d = again[1].local_id
        assert order == [sorted([a, b1, c, d]), sorted([a2, b2]), [b3], []]
        assert raw.hlen(f"plc:{{1:{Q}}}:dk") <= 1, "the finished jobs forgot their keys (the pin stays)"
    finally:
        store.close()


@pytest.mark.usefixtures("ready_lists_on")
def test_a_batch_of_new_keys_asks_the_ready_list_about_its_first_listed_job(
    server: RedisServer, raw: redis.Redis
) -> None:
    """Whether the ready list takes a batch's jobs is asked of the first job it would list, as the
    common path asks: here the batch's first ids (100-109, joining a busy group, so never listed)
    sort before the list's last id 11 as text, its listed ones (110, 111) after it."""
    store = open_store(server)
    try:
        store.create_queue(Q, 1)
        raw.hset(f"plc:{{1:{Q}}}:j", "id", 10)
        (first,) = store.enqueue_keyed_jobs(Q, [KeyedJob(NewJob(1, b"x", T0, 2), "k0", 0, None)], T0)
        assert ready_ids(raw) == [first.local_id] == [11]
        raw.hset(f"plc:{{1:{Q}}}:j", "id", 99)
        jobs = [KeyedJob(NewJob(1, b"b%d" % i, T0, 2), f"k{i + 1}", 0, "busy") for i in range(10)]
        jobs += [KeyedJob(NewJob(1, b"x", T0, 2), "kx", 0, "x"), KeyedJob(NewJob(1, b"y", T0, 2), "ky", 0, "y")]
        placed = [e.local_id for e in store.enqueue_keyed_jobs(Q, jobs, T0)]
        assert placed == list(range(100, 112))
        assert ready_ids(raw) == [11, 110, 111]
        assert raw.zrange(f"plc:{{1:{Q}}}:p1:s0", 0, -1) == [b"100"]
    finally:
        store.close()


def test_a_call_that_makes_eight_jobs_wait_makes_the_waiting_set_a_skiplist(
    server: RedisServer, raw: redis.Redis
) -> None:
    """Jobs that go to wait 8 or more at a time (SKIPLIST_FROM) make their waiting set a skiplist
    if it is not one (lib/sets.lua, zadd_skiplist), so moving them up looks them up by hash, not
    by a scan of a listpack; fewer leave it as it is. The member that converts it never stays."""
    store = open_store(server)
    waiting = f"plc:{{1:{Q}}}:p1:w"
    try:
        store.create_queue(Q, 1)
        store.enqueue_keyed_jobs(Q, [grouped(f"g{i}") for i in range(20)], T0)  # each group busy
        few = [e.local_id for e in store.enqueue_keyed_jobs(Q, [grouped(f"g{i}") for i in range(7)], T0)]
        assert raw.object("encoding", waiting) == b"listpack"
        more = [e.local_id for e in store.enqueue_keyed_jobs(Q, [grouped(f"g{i}") for i in range(7, 15)], T0)]
        assert raw.object("encoding", waiting) == b"skiplist"
        assert sorted(int(m) for m in raw.zrange(waiting, 0, -1)) == sorted(few + more)
        assert store.group_counts(Q) == GroupCounts(groups=20, blocked=15)
    finally:
        store.close()
