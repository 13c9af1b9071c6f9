"""The compact Redis layout's batched group work (``lua_compact/lib/groups.lua``'s ``begin_batch``
... ``flush_groups``): one keyed enqueue or one ack call that changes many groups, or one group
several times, leaves what the job-at-a-time calls would, in a number of Redis commands that does
not grow with the jobs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from tests.support.redis_server import RedisServer

from pinlater.backends.base import AckItem, GroupCounts, KeyedJob, NewJob, QueueRules
from pinlater.backends.redis import RedisEndpoint, RedisShardConfig, RedisStore

pytestmark = pytest.mark.redis

Q = "bq"
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


@pytest.fixture
def store(server: RedisServer) -> Iterator[RedisStore]:
    opened = RedisStore("1", RedisShardConfig(RedisEndpoint(server.host, server.port), layout="compact"))
    opened.create_queue(Q, 2)
    yield opened
    opened.close()


def job(group: str, key: str | None = None, priority: int = 1) -> KeyedJob:
    return KeyedJob(NewJob(priority, b"b", T0, 1), key, 0 if key is None else 60_000, group)


def claim_all(store: RedisStore, now: int) -> list[tuple[int, int]]:
    return [(p, j.local_id) for p in (1, 2) for j in store.dequeue_jobs(Q, p, 1000, "c", now, False)]


def calls(raw: redis.Redis, command: str) -> int:
    return int(raw.info("commandstats").get(f"cmdstat_{command}", {}).get("calls", 0))


def test_one_ack_call_moves_every_group_up_in_order(store: RedisStore, raw: redis.Redis) -> None:
    store.set_queue_rules({Q: QueueRules(group_concurrency=2)})
    groups = [f"g{i}" for i in range(20)]
    # five jobs a group, interleaved and of both priorities, in one call
    jobs = [job(g, priority=1 + (n + i) % 2) for n in range(5) for i, g in enumerate(groups)]
    placed = store.enqueue_keyed_jobs(Q, jobs, T0)
    line = {g: [(e.priority, e.local_id) for k, e in zip(jobs, placed, strict=True) if k.group == g] for g in groups}
    assert store.group_counts(Q) == GroupCounts(20, 20)
    for step in range(3):  # jobs 1-2, 3-4, then 5 of every group
        claimed = claim_all(store, T0 + step)
        wanted = {pid for g in groups for pid in line[g][2 * step : 2 * step + 2]}
        assert set(claimed) == wanted, step
        raw.config_resetstat()
        store.ack_jobs(Q, [AckItem(p, i) for p, i in claimed], [], T0 + step)
        # per call, not per job: one ZREM of the fifo; per priority one ZMSCORE of the claims
        # and one of the waiting jobs moved up, one ZREM and one ZADD of each set touched
        assert calls(raw, "zrem") <= 1 + 2 * 2 + 2, step
        assert calls(raw, "hset") <= 3 and calls(raw, "hdel") <= 4, step
        assert calls(raw, "zrangebylex") <= len(groups), step  # one per group moved up, at most
    assert store.group_counts(Q) == GroupCounts(0, 0)
    assert not [k for k in raw.keys("plc:{1:bq}:g*")]
    assert raw.zcard("plc:{1:bq}:p1:w") == raw.zcard("plc:{1:bq}:p2:w") == 0


def test_an_enqueue_moves_waiting_jobs_up_before_its_own_join(store: RedisStore, raw: redis.Redis) -> None:
    store.set_queue_rules({Q: QueueRules(group_concurrency=1)})
    first = [e.local_id for e in store.enqueue_keyed_jobs(Q, [job("g"), job("g"), job("g")], T0)]
    assert store.group_counts(Q) == GroupCounts(1, 1)
    store.set_queue_rules({Q: QueueRules(group_concurrency=3)})  # room for the two waiting
    # one call: the two waiting move up, then the new jobs wait behind them (full again)
    later = [e.local_id for e in store.enqueue_keyed_jobs(Q, [job("g", "k1"), job("g", "k2"), job("h")], T0)]
    claimed = claim_all(store, T0)
    assert sorted(i for _, i in claimed) == sorted([*first, later[2]])
    store.ack_jobs(Q, [AckItem(p, i) for p, i in claimed], [], T0)
    assert sorted(i for _, i in claim_all(store, T0 + 1)) == later[:2]
    assert store.group_counts(Q) == GroupCounts(1, 0)


def test_a_job_that_left_its_waiting_set_is_not_counted_active(store: RedisStore, raw: redis.Redis) -> None:
    store.set_queue_rules({Q: QueueRules(group_concurrency=1)})
    ids = [e.local_id for e in store.enqueue_keyed_jobs(Q, [job("g"), job("g"), job("g")], T0)]
    raw.zrem("plc:{1:bq}:p1:w", str(ids[1]))  # behind the fifo's back (cannot happen otherwise)
    claimed = claim_all(store, T0)
    assert claimed == [(1, ids[0])]
    store.ack_jobs(Q, [AckItem(1, ids[0])], [], T0)
    # as unbatched: the member was taken, its job not counted active, the one behind still waits
    assert raw.hget("plc:{1:bq}:ga", "g") == b"0:1"  # none active, one waiting (in the fifo: no head)
    assert raw.get("plc:{1:bq}:gb") == b"1"  # one group blocked
    assert claim_all(store, T0 + 1) == []
    store.enqueue_keyed_jobs(Q, [job("g")], T0 + 2)  # the group's next enqueue moves it up
    assert [i for _, i in claim_all(store, T0 + 2)] == [ids[2]]


def test_a_groups_head_is_kept_in_its_counts_and_the_rest_in_the_fifo(store: RedisStore, raw: redis.Redis) -> None:
    store.set_queue_rules({Q: QueueRules(group_concurrency=1)})
    ids = [e.local_id for e in store.enqueue_keyed_jobs(Q, [job("g") for _ in range(5)], T0)]

    def head(i: int) -> bytes:
        return b"%020d%d:1" % (ids[i], ids[i])

    # one active, the first waiting job the head (in ga only), the three others in the fifo
    assert raw.hget("plc:{1:bq}:ga", "g") == b"1:4:" + head(1)
    assert raw.zcard("plc:{1:bq}:gw") == 3
    assert store.cancel_jobs(Q, [(1, ids[1])], T0) == 1  # the head: none left, the rest in the fifo
    assert raw.hget("plc:{1:bq}:ga", "g") == b"1:3"
    assert store.cancel_jobs(Q, [(1, ids[3])], T0) == 1  # one of the fifo
    assert raw.zcard("plc:{1:bq}:gw") == 2
    assert claim_all(store, T0) == [(1, ids[0])]
    store.ack_jobs(Q, [AckItem(1, ids[0])], [], T0)
    # the fifo's first moved up, the one after it made the head: both out of the fifo
    assert raw.hget("plc:{1:bq}:ga", "g") == b"1:1:" + head(4)
    assert raw.zcard("plc:{1:bq}:gw") == 0
    assert claim_all(store, T0 + 1) == [(1, ids[2])]
    store.ack_jobs(Q, [AckItem(1, ids[2])], [], T0 + 1)
    assert raw.hget("plc:{1:bq}:ga", "g") == b"1"  # the head moved up
    assert claim_all(store, T0 + 2) == [(1, ids[4])]
    store.ack_jobs(Q, [AckItem(1, ids[4])], [], T0 + 2)
    assert store.group_counts(Q) == GroupCounts(0, 0)
    assert not [k for k in raw.keys("plc:{1:bq}:g*")]


def head_of(place: int, priority: int = 1) -> bytes:
    """A group's head as its counts keep it (lib/groups.lua's fifo_suffix): place, id, priority."""
    return b"%020d%d:%d" % (place, place, priority)


@pytest.mark.parametrize("concurrency", [1, 2])
def test_an_ack_moves_each_groups_one_waiting_job_up_in_place(
    store: RedisStore, raw: redis.Redis, concurrency: int
) -> None:
    store.set_queue_rules({Q: QueueRules(group_concurrency=concurrency)})
    groups = [f"g{i}" for i in range(12)]
    # the groups full (their concurrency's jobs active), then one more job each, of both
    # priorities: it waits as its group's head, and nothing else of the group waits
    for n in range(concurrency):
        store.enqueue_keyed_jobs(Q, [job(g, f"a{n}-{g}") for g in groups], T0)
    later = [KeyedJob(NewJob(1 + i % 2, b"b", T0 + 5, 1), f"b-{g}", 60_000, g) for i, g in enumerate(groups)]
    placed = {g: e.local_id for g, e in zip(groups, store.enqueue_keyed_jobs(Q, later, T0 + 1), strict=True)}
    for i, g in enumerate(groups):
        assert raw.hget("plc:{1:bq}:ga", g) == b"%d:1:" % concurrency + head_of(placed[g], 1 + i % 2)
    assert raw.get("plc:{1:bq}:gb") == b"12"
    claimed = claim_all(store, T0 + 10)
    assert len(claimed) == 12 * concurrency and not set(placed.values()) & {i for _, i in claimed}
    first = [(p, i) for p, i in claimed if i <= 12]  # the first job of each group
    raw.config_resetstat()
    store.ack_jobs(Q, [AckItem(p, i) for p, i in first], [], T0 + 10)
    # each head moved up to PENDING with its run after; the counts 'a', nothing blocked or waiting
    assert all(raw.hget("plc:{1:bq}:ga", g) == b"%d" % concurrency for g in groups)
    assert raw.get("plc:{1:bq}:gb") is None
    assert raw.zcard("plc:{1:bq}:p1:w") == raw.zcard("plc:{1:bq}:p2:w") == 0
    for i, g in enumerate(groups):
        assert raw.zscore(f"plc:{{1:bq}}:p{1 + i % 2}:s0", str(placed[g])) == (T0 + 5) / 1000 * 1000
    # per call, not per group: one ZMSCORE of each priority's waiting set, one HSET of the counts
    assert calls(raw, "zmscore") <= 2 and calls(raw, "hset") <= 1 and calls(raw, "zrangebylex") == 0
    assert sorted(i for _, i in claim_all(store, T0 + 10)) == sorted(placed.values())


def test_a_head_that_left_its_waiting_set_is_not_counted_active(store: RedisStore, raw: redis.Redis) -> None:
    store.set_queue_rules({Q: QueueRules(group_concurrency=1)})
    g = [e.local_id for e in store.enqueue_keyed_jobs(Q, [job("g", "k1"), job("g", "k2")], T0)]
    h = [e.local_id for e in store.enqueue_keyed_jobs(Q, [job("h", "k3"), job("h", "k4")], T0)]
    assert raw.hget("plc:{1:bq}:ga", "g") == b"1:1:" + head_of(g[1])
    raw.zrem("plc:{1:bq}:p1:w", str(g[1]))  # behind the group's back (cannot happen otherwise)
    assert sorted(claim_all(store, T0)) == [(1, g[0]), (1, h[0])]
    store.ack_jobs(Q, [AckItem(1, g[0]), AckItem(1, h[0])], [], T0)
    # as the batch would: g has nothing left (forgotten), h's head moved up
    assert raw.hget("plc:{1:bq}:ga", "g") is None and raw.hget("plc:{1:bq}:ga", "h") == b"1"
    assert raw.get("plc:{1:bq}:gb") is None
    assert claim_all(store, T0 + 1) == [(1, h[1])]


@pytest.mark.parametrize("rate", [None, 1.0])
def test_a_uniform_keyed_call_leaves_its_groups_as_a_call_of_one_job_at_a_time(
    server: RedisServer, raw: redis.Redis, rate: float | None
) -> None:
    """A uniform keyed call (dedup.enqueue_keyed_call's, every job keyed: enqueue_fresh) makes the
    job of a full group with none waiting its head without batch state: what it leaves is what a
    call that is not uniform (its jobs' attempts differ: enqueue_common and join_group) leaves."""
    uniform, other = "qu", "qo"
    opened = RedisStore("1", RedisShardConfig(RedisEndpoint(server.host, server.port), layout="compact"))
    try:
        for queue in (uniform, other):
            opened.create_queue(queue, 2)
        calls_made = [
            (2, ["a", "b", "c", "d"]),  # all join at once
            (2, ["a", "b", "c", "c"]),  # a, b: full now; c twice (the batch)
            (2, ["a", "b", "d", "e"]),  # a, b: wait as heads; d: full now
            (2, ["a", "d", "e", "f"]),  # a: behind its head (the fifo); d: a head
            (1, ["e", "f", "g", "h"]),  # e: two running, above the concurrency now, f one: heads
        ]
        for step, (concurrency, names) in enumerate(calls_made):
            rules = QueueRules(group_concurrency=concurrency, group_jobs_per_second=rate)
            opened.set_queue_rules({q: rules for q in (uniform, other)})
            for queue in (uniform, other):
                jobs = [
                    KeyedJob(NewJob(1, b"b", T0 + step, 1 if queue == uniform else 1 + i), f"{step}-{i}", 0, g)
                    for i, g in enumerate(names)
                ]
                opened.enqueue_keyed_jobs(queue, jobs, T0 + step)

        def state(queue: str) -> dict[str, object]:
            prefix = f"plc:{{1:{queue}}}"
            return {
                "ga": raw.hgetall(f"{prefix}:ga"),
                "gb": raw.get(f"{prefix}:gb"),
                "gw": raw.zrange(f"{prefix}:gw", 0, -1),
                "w": raw.zrange(f"{prefix}:p1:w", 0, -1, withscores=True),
                "s0": raw.zrange(f"{prefix}:p1:s0", 0, -1, withscores=True),
                "r": raw.lrange(f"{prefix}:p1:r", 0, -1),
                "buckets": raw.hgetall(f"{prefix}:gr"),
                "refills": raw.zrange(f"{prefix}:gz", 0, -1, withscores=True),
            }

        assert state(uniform) == state(other)
        assert state(uniform)["ga"][b"a"] == b"2:2:" + head_of(9)  # a's third job (call 2's first), the head
        assert state(uniform)["ga"][b"e"] == b"2:1:" + head_of(17)  # call 4's first job
        assert state(uniform)["gb"] == b"6"  # a, b, c, d, e and f wait
        for queue in (uniform, other):  # and it moves on alike
            claimed = [(1, j.local_id) for j in opened.dequeue_jobs(queue, 1, 1000, "c", T0 + 10, False)]
            opened.ack_jobs(queue, [AckItem(p, i) for p, i in claimed], [], T0 + 10)
        assert state(uniform) == state(other)
        if rate:  # the claim spent the groups' tokens, and the groups it finished keep their buckets
            assert state(uniform)["buckets"] and state(uniform)["refills"]
    finally:
        opened.close()


def test_an_ack_under_a_lowered_concurrency_leaves_the_head_waiting(store: RedisStore, raw: redis.Redis) -> None:
    store.set_queue_rules({Q: QueueRules(group_concurrency=2)})
    ids = [e.local_id for e in store.enqueue_keyed_jobs(Q, [job("g", f"k{i}") for i in range(3)], T0)]
    assert raw.hget("plc:{1:bq}:ga", "g") == b"2:1:" + head_of(ids[2])
    claimed = claim_all(store, T0)
    assert sorted(i for _, i in claimed) == ids[:2]
    store.set_queue_rules({Q: QueueRules(group_concurrency=1)})  # one left running is the most
    store.ack_jobs(Q, [AckItem(1, ids[0])], [], T0)
    assert raw.hget("plc:{1:bq}:ga", "g") == b"1:1:" + head_of(ids[2])  # no room: still waiting
    assert raw.get("plc:{1:bq}:gb") == b"1" and claim_all(store, T0 + 1) == []
    store.ack_jobs(Q, [AckItem(1, ids[1])], [], T0 + 1)
    assert raw.hget("plc:{1:bq}:ga", "g") == b"1" and raw.get("plc:{1:bq}:gb") is None
    assert claim_all(store, T0 + 2) == [(1, ids[2])]


def test_an_ack_of_heads_and_of_batched_groups_at_once(store: RedisStore, raw: redis.Redis) -> None:
    store.set_queue_rules({Q: QueueRules(group_concurrency=2)})
    # g: two active, one waiting (its head, then missing from its waiting set: cannot happen);
    # h: two active, one waiting (its head); k: two active, three waiting (batch: the fifo)
    g = [e.local_id for e in store.enqueue_keyed_jobs(Q, [job("g", f"g{i}") for i in range(3)], T0)]
    h = [e.local_id for e in store.enqueue_keyed_jobs(Q, [job("h", f"h{i}") for i in range(3)], T0)]
    k = [e.local_id for e in store.enqueue_keyed_jobs(Q, [job("k", f"k{i}") for i in range(5)], T0)]
    raw.zrem("plc:{1:bq}:p1:w", str(g[2]))
    assert sorted(i for _, i in claim_all(store, T0)) == [*g[:2], *h[:2], *k[:2]]
    # one job of g and of h (each takes the heads' path: h's moves up, g's is gone), both of k (the batch)
    store.ack_jobs(Q, [AckItem(1, i) for i in (g[0], h[0], k[0], k[1])], [], T0)
    assert raw.hget("plc:{1:bq}:ga", "g") == b"1"  # its head was gone: not counted active
    assert raw.hget("plc:{1:bq}:ga", "h") == b"2"
    assert raw.hget("plc:{1:bq}:ga", "k") == b"2:1:" + head_of(k[4])
    assert raw.get("plc:{1:bq}:gb") == b"1"  # k alone still waits
    assert sorted(i for _, i in claim_all(store, T0 + 1)) == [h[2], *k[2:4]]
