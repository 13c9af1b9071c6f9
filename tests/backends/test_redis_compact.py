"""Redis-only tests of the compact layout (``keys_compact.py``, ``lua_compact/``): its keys and
records, evicted records, what a batch costs in commands, the script files, times in ms.

The behaviour every backend shares is in ``test_conformance.py`` (kind "redis-compact"), and
``test_redis_layouts_agree.py`` checks that both layouts answer alike. Servers are real
redis-server processes on free loopback ports, one per test.
"""

from __future__ import annotations

import asyncio
import os
import random
import re
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import redis
from tests.support.redis_server import RedisServer

from pinlater._pinlater import NewJobBatch
from pinlater.backends.base import (
    AckItem,
    CheckpointItem,
    CountKey,
    JobFilter,
    JobState,
    KeyedJob,
    NewJob,
    QueueRules,
    ScanCursor,
)
from pinlater.backends.redis import RedisEndpoint, RedisShardConfig, RedisStore
from pinlater.backends.redis import store as store_module
from pinlater.backends.redis.filtered_reads import page, read_sets
from pinlater.backends.redis.scripts import INCLUDE, READY_LISTS_ENV, SCRIPT_NAMES, source
from pinlater.backends.sharded import ShardedBackend
from pinlater.backends.shardmap import Shard, ShardMap
from pinlater.errors import QueueNotFoundError

Q = "q"
T0 = 1_700_000_000_000
CLAIM = "claim-1:worker:host-a"
RES = "~r|host:1:abcd"
K = f"plc:{{1:{Q}}}:"  # every key of queue Q on shard "1"

# A record as stored, as text (numbers with all their digits): bd, al, ar, ca, ua - ca, cs, cd
# ('' if none).
READ_RECORD = """
local packed = redis.call('HGET', KEYS[1], ARGV[1])
if not packed then return false end
local r = cmsgpack.unpack(packed)
local out = {#r}
for i = 1, #r do
  if type(r[i]) == 'number' then out[#out + 1] = string.format('%.17g', r[i])
  elseif r[i] == false then out[#out + 1] = ''
  else out[#out + 1] = r[i] end
end
return out
"""


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
    shard = RedisStore("1", RedisShardConfig(RedisEndpoint(server.host, server.port), layout="compact"))
    shard.create_queue(Q, 3)
    yield shard
    shard.close()


def text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def zset(raw: redis.Redis, key: str) -> dict[str, int]:
    """A sorted set's members and their integer ms scores."""
    pairs: list[tuple[bytes, float]] = raw.zrange(key, 0, -1, withscores=True)  # type: ignore[assignment]
    return {text(member): int(score) for member, score in pairs}


def stored_record(raw: redis.Redis, local_id: int) -> list[str] | None:
    """The record of a job as stored: [bd, al, ar, ca, ua - ca, cs, cd], numbers as text, cd ''
    when false."""
    out = raw.eval(READ_RECORD, 1, K + "j", local_id)
    if out is None:
        return None
    assert int(out[0]) == 7, "a record is an array of exactly 7 items"
    return [text(v) for v in out[1:]]


def record(raw: redis.Redis, local_id: int) -> list[str] | None:
    """The record of a job as the scripts read it: [bd, al, ar, ca, ua, cs, cd] (ua in ms since
    the epoch, as ca)."""
    stored = stored_record(raw, local_id)
    if stored is None:
        return None
    stored[4] = str(int(stored[3]) + int(stored[4]))
    return stored


def all_keys(raw: redis.Redis) -> set[str]:
    return {text(k) for k in raw.keys("*")} - {"pll:{1}"}


def calls(raw: redis.Redis) -> dict[str, int]:
    """Calls per command since the last CONFIG RESETSTAT (script commands included)."""
    stats = raw.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}


# -- the layout ---------------------------------------------------------------------------------


@pytest.mark.redis
def test_layout_after_enqueue_dequeue_and_ack(store: RedisStore, raw: redis.Redis) -> None:
    jobs = [NewJob(1, b"one", T0, 1, "s1"), NewJob(1, b"two", T0, 3), NewJob(2, b"later", T0 + 5000, 2)]
    a, b, c = store.enqueue_jobs(Q, jobs, T0 - 1000)
    meta = raw.hmget(K + "j", "id", "c")  # the queue's own fields, beside the records
    assert meta[0] == b"3" and int(meta[1] or 0) > 0
    assert zset(raw, "plc:{1}:q").keys() == {Q}
    assert zset(raw, K + "p1:s0") == {str(a): T0, str(b): T0}
    assert zset(raw, K + "p2:s0") == {str(c): T0 + 5000}
    assert record(raw, a) == ["one", "1", "1", str(T0 - 1000), str(T0 - 1000), "s1", ""]

    store.dequeue_jobs(Q, 1, 10, CLAIM, T0 + 1, False)
    assert zset(raw, K + "p1:s0") == {}
    assert zset(raw, K + "p1:s1") == {str(a): T0 + 1, str(b): T0 + 1}
    assert record(raw, a) == ["one", "1", "1", str(T0 - 1000), str(T0 + 1), "s1", CLAIM]

    store.ack_jobs(Q, [AckItem(1, a, "ok")], [AckItem(1, b, "x", retry_delay_ms=2500)], T0 + 2)
    assert zset(raw, K + "p1:s2") == {str(a): T0 + 2}
    assert zset(raw, K + "p1:s0") == {str(b): T0 + 2502}  # retry at now + delay
    assert record(raw, a) == ["one", "1", "1", str(T0 - 1000), str(T0 + 2), "s1ok", CLAIM]
    assert record(raw, b) == ["two", "3", "2", str(T0 - 1000), str(T0 + 2), "x", ""]  # claim removed

    store.dequeue_jobs(Q, 1, 10, CLAIM, T0 + 3000, False)
    store.resurrect_timed_out_jobs(Q, 1, T0 + 3001, 10, T0 + 4000)  # 2 attempts left: back to pending
    store.dequeue_jobs(Q, 1, 10, CLAIM, T0 + 4000, False)
    store.ack_jobs(Q, [], [AckItem(1, b)], T0 + 5000)  # the last attempt: FAILED
    assert zset(raw, K + "p1:s3") == {str(b): T0 + 5000}
    assert record(raw, b)[2] == "0"  # type: ignore[index]
    assert all_keys(raw) == {"plc:{1}:q", K + "j", K + "p1:s2", K + "p1:s3", K + "p2:s0"}
    assert raw.hlen(K + "j") == 3 + 2  # one record per job, in one hash, with the fields c and id


@pytest.mark.redis
def test_a_record_stores_updated_at_after_created_at_and_fits_128_bytes(store: RedisStore, raw: redis.Redis) -> None:
    [a] = store.enqueue_jobs(Q, [NewJob(1, b"x" * 100, T0 + 10, 3)], T0)
    assert stored_record(raw, a) == ["x" * 100, "3", "3", str(T0), "0", "", ""]  # ua - ca: 0
    assert raw.hstrlen(K + "j", str(a)) <= 124  # jemalloc's 128-byte class, with the hash's header
    store.dequeue_jobs(Q, 1, 1, CLAIM, T0 + 2500, False)
    assert stored_record(raw, a)[4] == "2500"  # type: ignore[index]
    [job] = store.lookup_jobs(Q, [(1, a)], False)
    assert (job.created_at_ms, job.updated_at_ms) == (T0, T0 + 2500)


@pytest.mark.redis
def test_a_claim_of_several_jobs_makes_the_in_progress_set_a_skiplist(store: RedisStore, raw: redis.Redis) -> None:
    """A claim of SKIPLIST_FROM (8) jobs or more makes the IN_PROGRESS set a skiplist if it is not
    one (lib/sets.lua, zadd_skiplist), new or a listpack, through the dequeue and through the
    broker's claim alike, so acks look its members up by hash, not by a scan of a listpack; a
    smaller claim leaves it as it is. The member that converts it never stays: the set holds the
    claimed jobs only."""
    in_progress = K + "p1:s1"
    few = store.enqueue_jobs(Q, [NewJob(1, b"f", T0, 2)] * 7, T0)
    store.dequeue_jobs(Q, 1, 7, CLAIM, T0 + 1, False)
    assert raw.object("encoding", in_progress) == b"listpack"
    assert zset(raw, in_progress) == dict.fromkeys(map(str, few), T0 + 1)

    more = store.enqueue_jobs(Q, [NewJob(1, b"m", T0, 2)] * 8, T0)
    store.dequeue_jobs(Q, 1, 8, CLAIM, T0 + 3, False)
    assert raw.object("encoding", in_progress) == b"skiplist"
    assert zset(raw, in_progress) == {**dict.fromkeys(map(str, few), T0 + 1), **dict.fromkeys(map(str, more), T0 + 3)}
    store.ack_jobs(Q, [AckItem(1, i) for i in few + more[:7]], [], T0 + 4)
    assert raw.object("encoding", in_progress) == b"skiplist"  # Redis keeps it one while it lives
    assert zset(raw, in_progress) == {str(more[7]): T0 + 3}
    store.ack_jobs(Q, [AckItem(1, more[7])], [], T0 + 4)
    assert not raw.exists(in_progress)

    held = store.enqueue_jobs(Q, [NewJob(1, b"h", T0, 2)] * 9, T0)
    store.reserve_jobs(Q, 1, 9, RES, T0 + 5, 20_000)
    assert store.claim_reserved(Q, [(1, i, CLAIM) for i in held], RES, T0 + 6) == [(1, i) for i in held]
    assert raw.object("encoding", in_progress) == b"skiplist"
    assert zset(raw, in_progress) == dict.fromkeys(map(str, held), T0 + 6)


@pytest.mark.redis
def test_layout_of_the_brokers_holds(store: RedisStore, raw: redis.Redis) -> None:
    a, b = store.enqueue_jobs(Q, [NewJob(1, b"a", T0 - 10, 2), NewJob(1, b"b", T0 - 5, 2)], T0 - 20)
    before = record(raw, a)
    store.reserve_jobs(Q, 1, 5, RES, T0, 20_000)
    assert zset(raw, K + "p1:s0") == {}
    assert zset(raw, K + "p1:h") == {str(a): T0 - 10, str(b): T0 - 5}
    assert zset(raw, K + "p1:x") == {str(a): T0 + 20_000, str(b): T0 + 20_000}
    assert raw.hgetall(K + "p1:o") == {str(a).encode(): RES.encode(), str(b).encode(): RES.encode()}
    assert record(raw, a) == before  # the record is not touched
    assert store.claim_reserved(Q, [(1, a, CLAIM)], RES, T0 + 1) == [(1, a)]
    assert zset(raw, K + "p1:s1") == {str(a): T0 + 1}
    assert record(raw, a)[6] == CLAIM  # type: ignore[index]
    assert zset(raw, K + "p1:h") == {str(b): T0 - 5}
    # the monitor returns a lapsed hold to PENDING, in its old place, when nothing else runs
    assert store.resurrect_timed_out_jobs(Q, 1, T0, 10, T0 + 20_000) == 0
    assert zset(raw, K + "p1:s0") == {str(b): T0 - 5}
    assert not raw.exists(K + "p1:h", K + "p1:x", K + "p1:o")
    store.reserve_jobs(Q, 1, 5, RES, T0 + 20_000, 20_000)
    store.delete_queue(Q)
    assert all_keys(raw) == {K + "j"}  # the id counter is kept
    assert raw.hgetall(K + "j") == {b"id": b"2"}


@pytest.mark.redis
def test_times_keep_every_millisecond(store: RedisStore) -> None:
    times = [0, 1, 999, -1, -1500, -999_999, 2**40 + 7, 10**15 + 7, 2**53]
    ids = store.enqueue_jobs(Q, [NewJob(1, b"t", t, 1) for t in times], -1500)
    records = store.lookup_jobs(Q, [(1, i) for i in ids], False)
    assert [r.run_after_ms for r in records] == times
    assert {r.created_at_ms for r in records} == {-1500}
    assert store.count_jobs(Q, JobFilter(JobState.PENDING, 1, -1), None) == 3
    assert store.count_jobs(Q, JobFilter(JobState.PENDING, 1, -1, future=True), None) == 6
    claimed = store.dequeue_jobs(Q, 1, 100, CLAIM, 2**53, False)
    assert [(j.created_at_ms, j.updated_at_ms) for j in claimed] == [(-1500, 2**53)] * len(times)
    scanned = store.scan_jobs(Q, JobFilter(JobState.IN_PROGRESS, 1, 2**53, None), 100)
    assert {job.run_after_ms for job in scanned} == {2**53}


# -- evicted records ----------------------------------------------------------------------------


@pytest.mark.redis
def test_evicted_records_are_removed_and_counted(store: RedisStore, raw: redis.Redis) -> None:
    ids = store.enqueue_jobs(Q, [NewJob(1, b"job%d" % i, T0, 2) for i in range(6)], T0 - 1)  # in PENDING
    raw.hdel(K + "j", ids[0], ids[1], ids[2])

    assert store.dequeue_jobs(Q, 1, 3, CLAIM, T0, True) == []  # a dry run skips them and changes nothing
    assert store.evicted_jobs == 0
    claimed = store.dequeue_jobs(Q, 1, 2, CLAIM, T0, False)
    assert [job.local_id for job in claimed] == ids[3:5]  # evicted ones skipped, others taken instead
    assert store.evicted_jobs == 3
    assert zset(raw, K + "p1:s0") == {str(ids[5]): T0}

    raw.hdel(K + "j", ids[3])  # evicted while in progress
    store.ack_jobs(Q, [AckItem(1, ids[3])], [AckItem(1, ids[3])], T0)  # twice: removed and counted once
    assert store.evicted_jobs == 4
    assert raw.zcard(K + "p1:s1") == 1 and raw.zcard(K + "p1:s2") == 0

    raw.hdel(K + "j", ids[5])
    assert store.lookup_jobs(Q, [(1, ids[5]), (1, ids[5])], True) == []
    assert store.scan_jobs(Q, JobFilter(JobState.PENDING, 1, T0), 10) == []
    assert store.evicted_jobs == 5
    raw.hdel(K + "j", ids[4])
    assert store.checkpoint_jobs(Q, [CheckpointItem(1, ids[4], T0)], "", T0) == 0
    assert store.evicted_jobs == 6
    assert raw.zcard(K + "p1:s1") == 0 and raw.hlen(K + "j") == 2  # c and id


@pytest.mark.redis
def test_a_uniform_ack_the_common_path_gives_up_on_is_acked_whole(store: RedisStore, raw: redis.Redis) -> None:
    """Successes of one priority that append no status go as one argument a job (ack_jobs.lua's
    uniform call). Where its common path gives up (here: a job with an expiry, so the queue keeps
    its expiry index, and a record gone), the call is expanded for the general loop, which acks
    the rest, counts the gone one, changes an id acked twice once and an id of no job not at all."""
    ids = store.enqueue_jobs(Q, [NewJob(1, b"job%d" % i, T0, 2) for i in range(4)], T0)
    expiring = KeyedJob(NewJob(1, b"e", T0, 2), None, expire_at_ms=T0 + 10**6)
    [(_, exp, _)] = store.enqueue_keyed_jobs(Q, [expiring], T0)
    claimed = store.dequeue_jobs(Q, 1, 10, CLAIM, T0, False)
    assert sorted(job.local_id for job in claimed) == sorted([*ids, exp])
    raw.hdel(K + "j", ids[0])
    never = exp + 100  # no such job
    acks = [AckItem(1, i) for i in (ids[0], ids[1], ids[2], ids[2], exp, never)]
    assert store._ack_call(Q, acks, [], T0 + 5).args[4] == "u6"
    store.ack_jobs(Q, acks, [], T0 + 5)
    assert store.evicted_jobs == 1
    assert zset(raw, K + "p1:s2") == {str(ids[1]): T0 + 5, str(ids[2]): T0 + 5, str(exp): T0 + 5}
    assert zset(raw, K + "p1:s1") == {str(ids[3]): T0}  # not acked: still in progress
    assert not raw.exists(K + "xe")  # the finished job left the expiry index


@pytest.mark.redis
def test_a_held_job_whose_record_is_gone_is_claimed_then_counted(store: RedisStore, raw: redis.Redis) -> None:
    a, b = store.enqueue_jobs(Q, [NewJob(1, b"a", T0, 2), NewJob(1, b"b", T0, 2)], T0)
    store.reserve_jobs(Q, 1, 5, RES, T0, 60_000)
    raw.hdel(K + "j", a)
    assert store.claim_reserved(Q, [(1, a, CLAIM), (1, b, CLAIM)], RES, T0) == [(1, a), (1, b)]
    assert zset(raw, K + "p1:s1") == {str(a): T0, str(b): T0}
    assert record(raw, a) is None  # no partial record: the next script to meet it counts it
    resurrected = store.resurrect_timed_out_jobs(Q, 1, T0 + 1, 10, T0 + 1)
    assert (resurrected, resurrected.retried, resurrected.evicted) == (1, 1, 1)
    assert store.evicted_jobs == 1


# -- what a batch costs -------------------------------------------------------------------------


@pytest.mark.usefixtures("ready_lists_on")
@pytest.mark.redis
def test_a_batch_reads_and_writes_its_records_in_one_command_each(store: RedisStore, raw: redis.Redis) -> None:
    store.enqueue_jobs(Q, [NewJob(1, b"warm-up", T0, 1)], T0)  # the first call may have loaded the script
    store.dequeue_jobs(Q, 1, 1, CLAIM, T0, False)
    store.ack_jobs(Q, [AckItem(1, 1)], [], T0)
    jobs = [NewJob(1 + i % 3, b"x" * 100, T0, 2) for i in range(900)]
    by_priority: dict[int, int] = {}

    raw.config_resetstat()
    for local_id, job in zip(store.enqueue_jobs(Q, jobs, T0 - 1), jobs, strict=True):  # run after T0: PENDING sets
        by_priority[local_id] = job.priority
    assert {k: calls(raw).get(k, 0) for k in ("evalsha", "hset", "zadd", "hincrby", "rpush")} == {
        "evalsha": 1, "hset": 1, "zadd": 3, "hincrby": 1, "rpush": 0,
    }  # fmt: skip
    raw.hset(K + "j", "id", 1000)  # ids from 1001: none gains a digit, which would end a list's run (ready.lua)
    raw.config_resetstat()
    ready = store.enqueue_jobs(Q, [NewJob(1 + i % 3, b"x" * 100, T0, 2) for i in range(900)], T0)  # ready lists
    # per list one RPUSH, and one HINCRBY of t{p} for its marker; the id counter's HINCRBY
    assert {k: calls(raw).get(k, 0) for k in ("evalsha", "hset", "zadd", "hincrby", "rpush")} == {
        "evalsha": 1, "hset": 1, "zadd": 0, "hincrby": 4, "rpush": 3,
    }  # fmt: skip

    raw.config_resetstat()
    assert len(store.dequeue_jobs(Q, 1, 1000, CLAIM, T0, False)) == 600  # from the set and the list
    assert {k: calls(raw).get(k, 0) for k in ("hmget", "hset", "zadd", "zrem", "lrange", "ltrim")} == {
        "hmget": 2, "hset": 1, "zadd": 1, "zrem": 1, "lrange": 1, "ltrim": 1,
    }  # fmt: skip
    store.ack_jobs(Q, [AckItem(1, i) for i in ready[::3]], [], T0)
    store.dequeue_jobs(Q, 2, 1000, CLAIM, T0, False)
    store.dequeue_jobs(Q, 3, 1000, CLAIM, T0, False)

    raw.config_resetstat()
    ids = list(by_priority)
    store.ack_jobs(
        Q, [AckItem(by_priority[i], i) for i in ids[:450]], [AckItem(by_priority[i], i) for i in ids[450:]], T0
    )
    stats = calls(raw)
    assert (stats.get("hmget"), stats.get("hset"), stats.get("zmscore")) == (1, 1, None)
    # per priority: a ZADD NX that finds every id IN_PROGRESS (lib/claimed.lua), out of IN_PROGRESS,
    # into two sets
    assert stats.get("zrem") == 3 and stats.get("zadd") == 9

    raw.config_resetstat()
    found = store.lookup_jobs(Q, [(by_priority[i], i) for i in ids], True)
    assert len(found) == 900
    # the records, and the dedup keys of the jobs found; six sets per priority (the state sets,
    # the held set and the waiting set of ordered groups)
    assert (calls(raw).get("hmget"), calls(raw).get("zmscore")) == (2, 18)


@pytest.mark.redis
@pytest.mark.parametrize("other", ["none", "a dedup key", "a group", "an expiry"])
def test_success_acks_of_a_plain_queue_read_no_record(store: RedisStore, raw: redis.Redis, other: str) -> None:
    """ack_jobs.lua's plain_queue: successes that append no status, in a queue where no
    unfinished job has a group, a dedup key or an expiry (none of ga, dk, xe exists), move the
    jobs without reading their records; otherwise the records are read and acted on."""
    ids = store.enqueue_jobs(Q, [NewJob(1, b"x", T0, 1) for _ in range(4)], T0)
    assert len(store.dequeue_jobs(Q, 1, 4, CLAIM, T0, False)) == 4
    if other != "none":
        extra = KeyedJob(
            NewJob(2, b"other", T0, 1),
            "k" if other == "a dedup key" else None,
            0,
            "g" if other == "a group" else None,
            T0 + 10**6 if other == "an expiry" else None,
        )
        assert len(store.enqueue_keyed_jobs(Q, [extra], T0)) == 1
        assert raw.exists(K + "dk", K + "ga", K + "xe") == 1
    before = record(raw, ids[0])

    raw.config_resetstat()
    store.ack_jobs(Q, [AckItem(1, i) for i in ids[:2]], [], T0 + 5)
    read = calls(raw).get("hmget")
    assert read == (None if other == "none" else 1)
    assert zset(raw, K + "p1:s2") == {str(ids[0]): T0 + 5, str(ids[1]): T0 + 5}
    assert sorted(zset(raw, K + "p1:s1")) == sorted(map(str, ids[2:]))
    assert record(raw, ids[0]) == before  # as the claim wrote it: its updated time is its score

    # A status to append reads the records, whatever the queue holds.
    raw.config_resetstat()
    store.ack_jobs(Q, [AckItem(1, ids[2], "done")], [], T0 + 6)
    assert calls(raw).get("hmget") == 1 and record(raw, ids[2])[5] == "done"  # type: ignore[index]

    # A record deleted by hand under a job IN_PROGRESS: the record path counts it evicted at the
    # ack; without it the job goes to SUCCEEDED, and a lookup meets it there and counts it.
    raw.hdel(K + "j", ids[3])
    store.ack_jobs(Q, [AckItem(1, ids[3])], [], T0 + 7)
    if other == "none":
        assert store.evicted_jobs == 0 and zset(raw, K + "p1:s2")[str(ids[3])] == T0 + 7
        assert store.lookup_jobs(Q, [(1, ids[3])], False) == []
    assert store.evicted_jobs == 1 and str(ids[3]) not in zset(raw, K + "p1:s1")


@pytest.mark.redis
@pytest.mark.parametrize("kind", ["plain", "keyed and grouped", "out of memory"])
def test_an_ack_finds_its_in_progress_jobs_without_reading_their_scores(
    store: RedisStore, raw: redis.Redis, kind: str
) -> None:
    """ack_jobs.lua's common path asks which acked ids are IN_PROGRESS with a ZADD NX at -inf, not
    with ZMSCORE (whose formatting of each score cost a fifth of a plain ack): a batch all
    IN_PROGRESS adds nothing, writes nothing back and sends no ZMSCORE. A batch with ids that are
    not there (acked before, still PENDING, of no job; one of them, or three) has them taken out
    again and ZMSCORE sort it out, as it does where Redis, out of memory, refuses the ZADD. Only
    IN_PROGRESS jobs move; the set keeps its other jobs with their claim times, and no member at
    -inf; an ack at a priority with no IN_PROGRESS set leaves none behind."""
    if kind == "keyed and grouped":
        keyed = [KeyedJob(NewJob(1, b"x", T0, 1), f"k{i}", 0, f"g{i}", None) for i in range(6)]
        ids = [local_id for _, local_id, _ in store.enqueue_keyed_jobs(Q, keyed, T0)]
    else:
        ids = store.enqueue_jobs(Q, [NewJob(1, b"x", T0, 1) for _ in range(6)], T0)
    assert sorted(job.local_id for job in store.dequeue_jobs(Q, 1, 4, CLAIM, T0, False)) == ids[:4]
    policy = raw.config_get("maxmemory-policy")["maxmemory-policy"]
    if kind == "out of memory":
        raw.config_set("maxmemory-policy", "noeviction")
        raw.config_set("maxmemory", "1")
    try:
        raw.config_resetstat()
        store.ack_jobs(Q, [AckItem(1, i) for i in ids[:2]], [], T0 + 5)
        stats = calls(raw)
        assert stats.get("zmscore") == (1 if kind == "out of memory" else None)
        assert stats.get("zrem") == 1  # out of IN_PROGRESS
        if kind != "keyed and grouped":  # (whose groups' leaving looks at due refills)
            assert stats.get("zrangebyscore") is None  # no ids to take out again
        assert zset(raw, K + "p1:s1") == {str(ids[2]): T0, str(ids[3]): T0}

        raw.config_resetstat()
        store.ack_jobs(Q, [AckItem(1, i) for i in (ids[2], ids[4])], [], T0 + 6)  # one not there
        assert calls(raw).get("zmscore") == 1

        raw.config_resetstat()
        never = ids[-1] + 100  # no such job
        store.ack_jobs(Q, [AckItem(1, i) for i in (ids[0], ids[3], ids[4], never)], [], T0 + 7)
        assert calls(raw).get("zmscore") == 1
        store.ack_jobs(Q, [AckItem(2, ids[5])], [], T0 + 7)  # priority 2 has no IN_PROGRESS set
    finally:
        raw.config_set("maxmemory", "0")
        raw.config_set("maxmemory-policy", policy)
    assert zset(raw, K + "p1:s1") == {}
    assert not raw.exists(K + "p2:s1")
    assert zset(raw, K + "p1:s2") == {
        str(ids[0]): T0 + 5,
        str(ids[1]): T0 + 5,
        str(ids[2]): T0 + 6,
        str(ids[3]): T0 + 7,
    }
    pending = JobFilter(priority=1, state=JobState.PENDING, now_ms=T0 + 7)
    assert store.count_jobs(Q, pending, None) == 2  # ids[4] and ids[5], not moved
    assert store.evicted_jobs == 0
    if kind == "keyed and grouped":
        assert store.group_counts(Q).groups == 2  # g4 and g5 PENDING
        assert sorted(text(key) for key in raw.hkeys(K + "dk") if key != b"\xff") == ["k4", "k5"]


@pytest.mark.usefixtures("ready_lists_on")  # ids[3], never claimed, waits in the list, not the set
@pytest.mark.redis
def test_failures_and_checkpoints_find_their_in_progress_jobs_as_the_common_ack_does(
    store: RedisStore, raw: redis.Redis
) -> None:
    """lib/claimed.lua (the general ack loop's and checkpoint_jobs.lua's membership) asks with a
    ZADD NX at -inf too: a batch all IN_PROGRESS sends no ZMSCORE; one with ids that are not there
    (retried already, never claimed) has them taken out again and ZMSCORE decide, and only its
    IN_PROGRESS jobs change."""
    ids = store.enqueue_jobs(Q, [NewJob(1, b"x", T0, 2) for _ in range(4)], T0)
    assert sorted(job.local_id for job in store.dequeue_jobs(Q, 1, 3, CLAIM, T0, False)) == ids[:3]

    raw.config_resetstat()
    store.ack_jobs(Q, [], [AckItem(1, ids[0], retry_delay_ms=100)], T0 + 5)
    assert calls(raw).get("zmscore") is None
    raw.config_resetstat()
    store.ack_jobs(Q, [], [AckItem(1, i, retry_delay_ms=100) for i in (ids[0], ids[1], ids[3])], T0 + 6)
    assert calls(raw).get("zmscore") == 1
    assert zset(raw, K + "p1:s1") == {str(ids[2]): T0}
    assert zset(raw, K + "p1:s0") == {str(ids[0]): T0 + 105, str(ids[1]): T0 + 106}  # once each

    raw.config_resetstat()
    assert store.checkpoint_jobs(Q, [CheckpointItem(1, ids[2], T0 + 7)], "claim-1", T0 + 7) == 1
    assert calls(raw).get("zmscore") is None
    raw.config_resetstat()
    assert store.checkpoint_jobs(Q, [CheckpointItem(1, i, T0 + 8) for i in (ids[2], ids[3])], "claim-1", T0 + 8) == 1
    assert calls(raw).get("zmscore") == 1
    assert zset(raw, K + "p1:s1") == {str(ids[2]): T0 + 8}  # the claim extended, nothing at -inf
    assert [job.attempts_remaining for job in store.lookup_jobs(Q, [(1, i) for i in ids[:2]], False)] == [1, 1]

    # More than a chunk (1,000) of acks, past the common path: an id not there in the first chunk
    # and a second chunk all IN_PROGRESS still take the ZMSCORE path.
    many = store.enqueue_jobs(Q, [NewJob(2, b"y", T0, 1) for _ in range(1001)], T0)
    claimed = store.dequeue_jobs(Q, 2, 1000, CLAIM, T0, False) + store.dequeue_jobs(Q, 2, 1, CLAIM, T0, False)
    assert len(claimed) == 1001
    raw.config_resetstat()
    store.ack_jobs(Q, [AckItem(2, i) for i in (many[-1] + 1, *many)], [], T0 + 9)
    assert calls(raw).get("zmscore") == 2  # a chunk each
    assert not raw.exists(K + "p2:s1") and len(zset(raw, K + "p2:s2")) == 1001
    assert store.evicted_jobs == 0


@pytest.mark.redis
def test_a_checkpoint_refused_for_want_of_the_group_keys_leaves_the_expiry_index_as_it_was(
    store: RedisStore, raw: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """checkpoint_jobs.lua returns an error, and changes nothing, when a cancelled job of an
    ordered group would end without the groups' keys (no server of this build omits them; one
    of an earlier build, or a raw call, may). Its expiry index writes come after that check:
    Redis keeps what a script wrote before it returns an error."""
    jobs = [
        KeyedJob(NewJob(1, b"g", T0, 2), None, 0, "g", T0 + 10**6),  # cancelled below: it would end
        KeyedJob(NewJob(1, b"e", T0, 2), None, 0, None, T0 + 10**6),  # moved to PENDING: back in xe
    ]
    ids = [local_id for _, local_id, _ in store.enqueue_keyed_jobs(Q, jobs, T0)]
    assert sorted(job.local_id for job in store.dequeue_jobs(Q, 1, 2, CLAIM, T0, False)) == ids
    assert store.cancel_jobs(Q, [(1, ids[0])], T0 + 1) == 1
    index = zset(raw, K + "xe")
    monkeypatch.setattr(store.rules, "tail", lambda queue, kind: ([], []))
    items = [CheckpointItem(1, i, T0 + 2, move_to_pending=True) for i in ids]
    with pytest.raises(redis.ResponseError, match="without the group keys"):
        store.checkpoint_jobs(Q, items, "claim-1", T0 + 2)
    assert zset(raw, K + "xe") == index
    assert zset(raw, K + "p1:s1") == {str(ids[0]): T0, str(ids[1]): T0}
    monkeypatch.undo()
    assert store.checkpoint_jobs(Q, items, "claim-1", T0 + 2) == 2
    assert str(ids[0]) not in zset(raw, K + "xe") and zset(raw, K + "xe")[str(ids[1])] == T0 + 10**6
    assert zset(raw, K + "p1:s3") == {str(ids[0]): T0 + 2} and zset(raw, K + "p1:s0") == {str(ids[1]): T0 + 2}


# -- the script files ---------------------------------------------------------------------------


def compact_files(*folder: str) -> dict[str, str]:
    root = resources.files("pinlater.backends.redis").joinpath("lua_compact", *folder)
    return {
        p.name.removesuffix(".lua"): p.read_text(encoding="utf-8") for p in root.iterdir() if p.name.endswith(".lua")
    }


@pytest.mark.redis
def test_every_compact_lua_file_loads_on_a_real_server(raw: redis.Redis) -> None:
    files = compact_files()
    assert set(files) == set(SCRIPT_NAMES)
    for name in files:
        assert raw.script_load(source(name, "compact")), name  # with its includes


def test_compact_lua_files_have_headers_and_share_the_record_code() -> None:
    libs = compact_files("lib")
    assert {"records", "sets", "holds"} <= set(libs)
    original_libs = [  # what the compact layout has no file of its own for (scripts.py)
        p.name.removesuffix(".lua")
        for p in resources.files("pinlater.backends.redis").joinpath("lua", "lib").iterdir()
        if p.name.endswith(".lua")
    ]
    for name, text in compact_files().items():
        header = text.split("]]")[0]
        assert text.startswith(f"--[[ {name}:"), f"{name}.lua: the header names the script first"
        assert "KEYS[1]" in header and "Returns" in header, f"{name}.lua: header"
        assert f"lua/{name}.lua" in header, f"{name}.lua: the header names the original it follows"
        includes = INCLUDE.findall(text)
        assert set(includes) <= set(libs) | set(original_libs), name
        if "holds" in includes:  # holds.lua uses the helpers of sets.lua
            assert includes.index("sets") < includes.index("holds"), name
        assert "cmsgpack" not in text, f"{name}.lua: only records.lua packs and unpacks records"
        assert not re.search(r"'pl[cqhjnl][:_]", text), f"{name}.lua hard-codes a key name"
        assert not INCLUDE.search(source(name, "compact")), name


# -- behaviours the original's tests pin --------------------------------------------------------


@pytest.mark.redis
def test_dequeue_takes_equal_run_afters_in_id_order(store: RedisStore) -> None:
    ids = store.enqueue_jobs(Q, [NewJob(1, b"x", T0, 1) for _ in range(25)], T0)  # "10" < "9" as text
    assert [job.local_id for job in store.dequeue_jobs(Q, 1, 12, CLAIM, T0, True)] == ids[:12]
    assert [job.local_id for job in store.dequeue_jobs(Q, 1, 12, CLAIM, T0, False)] == ids[:12]
    assert [job.local_id for job in store.dequeue_jobs(Q, 1, 12, CLAIM, T0, False)] == ids[12:24]


@pytest.mark.redis
def test_a_huge_group_of_equal_run_afters_keeps_redis_order(store: RedisStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store_module, "MAX_TIES_REORDERED", 5)  # bounds the work per dequeue
    store.enqueue_jobs(Q, [NewJob(1, b"x", T0, 1) for _ in range(12)], T0 - 1)  # in the PENDING set
    claimed = store.dequeue_jobs(Q, 1, 3, CLAIM, T0, False)
    assert [job.local_id for job in claimed] == [1, 10, 11]  # members sort as text in Redis
    store.enqueue_jobs(Q, [NewJob(2, b"x", T0, 1) for _ in range(12)], T0)  # in the ready list
    claimed = store.dequeue_jobs(Q, 2, 3, CLAIM, T0, False)
    assert [job.local_id for job in claimed] == [13, 14, 15]  # first in, first out, whatever the group


@pytest.mark.redis
def test_checkpoint_source_is_a_plain_substring_and_applies_in_order(store: RedisStore) -> None:
    [local_id] = store.enqueue_jobs(Q, [NewJob(1, b"a", T0, 1, "s")], T0)
    store.dequeue_jobs(Q, 1, 1, "c:worker:host-(%a", T0, False)
    item = CheckpointItem(1, local_id, T0, new_body=b"b")
    assert store.checkpoint_jobs(Q, [item], ".", T0) == 0  # a Lua pattern would match anything
    assert store.checkpoint_jobs(Q, [item], "host-(%a", T0) == 1  # and this is a malformed pattern
    twice = CheckpointItem(1, local_id, T0, prepend_custom_status="p")
    moved = CheckpointItem(1, local_id, T0 + 50, move_to_pending=True)
    assert store.checkpoint_jobs(Q, [twice, twice, moved, twice], "host", T0 + 1) == 3  # not after the move
    [job] = store.lookup_jobs(Q, [(1, local_id)], True)
    assert (job.state, job.custom_status, job.body, job.run_after_ms) == (JobState.PENDING, "pps", b"b", T0 + 50)
    assert job.claim_descriptor is None


@pytest.mark.redis
def test_custom_status_is_cut_by_characters(store: RedisStore) -> None:
    limit = store.custom_status_limit
    [local_id] = store.enqueue_jobs(Q, [NewJob(1, b"a", T0, 1, "a" * (limit - 1))], T0)
    store.dequeue_jobs(Q, 1, 1, CLAIM, T0, False)
    store.ack_jobs(Q, [AckItem(1, local_id, "ééé")], [], T0)
    assert store.lookup_jobs(Q, [(1, local_id)], False)[0].custom_status == "a" * (limit - 1) + "é"


@pytest.mark.usefixtures("ready_lists_on")
@pytest.mark.redis
@pytest.mark.parametrize("newest_first", [False, True])
def test_a_page_with_bodies_stops_at_its_byte_budget(store: RedisStore, raw: redis.Redis, newest_first: bool) -> None:
    rng = random.Random(5)
    sizes: dict[str, int] = {}
    now = T0
    for _ in range(5):  # held jobs among pending ones
        jobs = [NewJob(1, b"b" * rng.randrange(1, 30), now - rng.randrange(20), 2) for _ in range(8)]
        for local_id, job in zip(store.enqueue_jobs(Q, jobs, now), jobs, strict=True):
            sizes[str(local_id)] = len(job.body)
        store.reserve_jobs(Q, 1, rng.randrange(1, 4), RES, now, 60_000)
        now += 3
    sets = read_sets(store._shard.keys(Q), JobFilter(JobState.PENDING, 1, now))
    assert raw.llen(K + "p1:r") > 0 and raw.zcard(K + "p1:s0") > 0 and raw.zcard(K + "p1:h") > 0
    pending = store.lookup_jobs(Q, [(1, int(i)) for i in sizes], False)  # the set's, the held and the list's
    merged = sorted(
        [(str(job.local_id), job.run_after_ms) for job in pending],
        key=lambda m: (m[1], m[0]),
        reverse=newest_first,
    )
    for count in (1, 4, 9, 50):
        for budget in (1, 25, 60):
            for offset in range(len(merged) + 1):
                got = page(store._shard, Q, sets, "-inf", "+inf", offset, count, True, newest_first, budget)
                want = merged[offset : offset + count]
                n, taken = 0, 0
                while n < len(want) and (n == 0 or taken < budget):
                    taken += sizes[want[n][0]]
                    n += 1
                assert [(text(r[0]), round(float(r[1]) * 1000)) for r in got.rows] == want[:n], (count, budget, offset)
                assert [len(r[8]) for r in got.rows] == [sizes[m[0]] for m in want[:n]]
                assert (got.evicted, got.looked, got.last) == (0, n, n == len(want) < count)


@pytest.mark.redis
def test_delete_queue_deletes_in_batches_and_keeps_the_counter(
    store: RedisStore, raw: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_module, "DELETE_QUEUE_BATCH", 4)
    store.create_queue("other", 3)
    store.enqueue_jobs("other", [NewJob(1, b"keep", T0, 1)], T0)
    ids = store.enqueue_jobs(Q, [NewJob(1 + i % 3, b"x", T0, 1) for i in range(30)], T0)
    store.dequeue_jobs(Q, 1, 5, CLAIM, T0, False)
    store.reserve_jobs(Q, 2, 3, RES, T0, 60_000)
    store.ack_jobs(Q, [AckItem(1, i) for i in ids[:6]], [], T0)
    raw.hset(K + "j", "999", "a record no set names")  # deleted with the records hash at the end
    store.delete_queue("never-created")  # loads the script
    raw.config_resetstat()
    store.delete_queue(Q)
    assert calls(raw)["evalsha"] == 9 + 1  # 30 jobs and 3 hold expiries, 4 members a call; the schedules
    assert store.get_queue_names() == {"other"}
    assert {k for k in all_keys(raw) if k.startswith(K)} == {K + "j"}
    assert raw.hgetall(K + "j") == {b"id": b"30"}
    store.create_queue(Q, 3)
    assert store.enqueue_jobs(Q, [NewJob(1, b"new", T0, 1)], T0) == [31]  # ids are never handed out twice


def test_a_queue_half_created_or_half_deleted_takes_no_job_under_no_name(
    store: RedisStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The names set (which the monitor walks) is written beside the scripts, not in them (a
    cluster keeps it in another slot). Stopped between the two, a queue must never take jobs
    under no name: the monitor would never visit it, and a claim lost there stayed IN_PROGRESS
    for good. Named first, deleted first: stopped between, the name lists a queue that takes no
    job, and the call sent again finishes it."""
    stopped = RuntimeError("the server stopped here")
    run = store._run

    def create_stops(script: str, *args: Any) -> Any:
        if script == "create_queue":
            raise stopped
        return run(script, *args)

    monkeypatch.setattr(store, "_run", create_stops)
    with pytest.raises(RuntimeError):
        store.create_queue("half", 3)
    monkeypatch.undo()
    assert "half" in store.get_queue_names()
    with pytest.raises(QueueNotFoundError):
        store.enqueue_jobs("half", [NewJob(1, b"x", T0, 1)], T0)
    store.create_queue("half", 3)
    assert store.enqueue_jobs("half", [NewJob(1, b"x", T0, 1)], T0) == [1]

    command = store._shard.command

    def unnaming_stops(*args: Any) -> Any:
        if args[0] == "ZREM":
            raise stopped
        return command(*args)

    monkeypatch.setattr(store._shard, "command", unnaming_stops)
    with pytest.raises(RuntimeError):
        store.delete_queue("half")
    monkeypatch.undo()
    assert "half" in store.get_queue_names()
    with pytest.raises(QueueNotFoundError):
        store.enqueue_jobs("half", [NewJob(1, b"y", T0, 1)], T0)
    store.delete_queue("half")
    assert "half" not in store.get_queue_names()


# -- the ready lists (lib/ready.lua) --------------------------------------------------------------


def ready_list(raw: redis.Redis, priority: int = 1) -> list[str]:
    return [text(entry) for entry in raw.lrange(K + f"p{priority}:r", 0, -1)]


def extra(raw: redis.Redis, priority: int = 1) -> int:
    """The list's markers and tombstones, as the records hash's field t{p} counts them."""
    return int(raw.hget(K + "j", f"t{priority}") or 0)


@pytest.mark.usefixtures("ready_lists_off")
def test_without_ready_lists_every_pending_job_goes_to_its_set(store: RedisStore, raw: redis.Redis) -> None:
    """PINLATER_READY_LISTS=0 turns the ready lists off (scripts.py)."""
    assert os.environ.get(READY_LISTS_ENV) == "0"
    a, b = store.enqueue_jobs(Q, [NewJob(1, b"now", T0, 2), NewJob(1, b"later", T0 + 5, 2)], T0)
    assert zset(raw, K + "p1:s0") == {str(a): T0, str(b): T0 + 5}
    assert not raw.exists(K + "p1:r")
    assert [job.local_id for job in store.dequeue_jobs(Q, 1, 10, "c", T0 + 5, False)] == [a, b]


@pytest.mark.usefixtures("ready_lists_on")
@pytest.mark.redis
def test_jobs_enqueued_to_run_now_go_to_the_ready_list(store: RedisStore, raw: redis.Redis) -> None:
    jobs = [NewJob(1, b"now", T0, 2), NewJob(1, b"later", T0 + 5, 2), NewJob(2, b"now2", T0, 2), NewJob(1, b"n", T0, 2)]
    a, b, c, d = store.enqueue_jobs(Q, jobs, T0)
    assert ready_list(raw) == [f"@{T0}", str(a), str(d)] and ready_list(raw, 2) == [f"@{T0}", str(c)]
    assert zset(raw, K + "p1:s0") == {str(b): T0 + 5} and not raw.exists(K + "p2:s0")
    assert (extra(raw), extra(raw, 2)) == (1, 1)  # one marker each
    [e] = store.enqueue_jobs(Q, [NewJob(1, b"same ms", T0, 2)], T0)
    [f] = store.enqueue_jobs(Q, [NewJob(1, b"next ms", T0 + 1, 2)], T0 + 1)
    # a marker at each append (and each 256 ids), of its score
    assert ready_list(raw) == [f"@{T0}", str(a), str(d), f"@{T0}", str(e), f"@{T0 + 1}", str(f)]
    assert extra(raw) == 3
    found = store.lookup_jobs(Q, [(1, a), (2, c), (1, f), (2, a)], True)  # not under another priority
    assert [(j.local_id, j.state, j.run_after_ms, j.body) for j in found] == [
        (a, JobState.PENDING, T0, b"now"),
        (c, JobState.PENDING, T0, b"now2"),
        (f, JobState.PENDING, T0 + 1, b"next ms"),
    ]
    assert store.count_jobs(Q, JobFilter(JobState.PENDING, 1, T0 + 1), None) == 4
    assert store.count_jobs(Q, JobFilter(JobState.PENDING, 1, T0 + 1, future=True), None) == 1
    counts = store.queue_counts(3, T0 + 1)
    assert counts[CountKey(Q, 1, JobState.PENDING, False)] == 4
    assert counts[CountKey(Q, 1, JobState.PENDING, True)] == 1
    assert counts[CountKey(Q, 2, JobState.PENDING, False)] == 1


@pytest.mark.usefixtures("ready_lists_on")
@pytest.mark.redis
def test_dequeue_merges_the_list_and_the_set_by_score_then_id(store: RedisStore, raw: redis.Redis) -> None:
    [a] = store.enqueue_jobs(Q, [NewJob(1, b"a", T0, 1)], T0)  # list, score T0
    [b] = store.enqueue_jobs(Q, [NewJob(1, b"b", T0 - 5, 1)], T0 + 10)  # set, earlier
    [c] = store.enqueue_jobs(Q, [NewJob(1, b"c", T0 + 10, 1)], T0 + 10)  # list, score T0 + 10
    [d] = store.enqueue_jobs(Q, [NewJob(1, b"d", T0, 1)], T0 + 20)  # set, score T0, after a by id
    assert len(ready_list(raw)) == 4 and raw.zcard(K + "p1:s0") == 2
    dry = store.dequeue_jobs(Q, 1, 3, CLAIM, T0 + 20, True)
    assert sorted(job.local_id for job in dry) == sorted([b, a, d])
    order = [[job.local_id for job in store.dequeue_jobs(Q, 1, 1, CLAIM, T0 + 20, False)] for _ in range(5)]
    assert order == [[b], [a], [d], [c], []]
    assert not raw.exists(K + "p1:r") and extra(raw) == 0 and not raw.hexists(K + "j", "t1")
    assert zset(raw, K + "p1:s1") == dict.fromkeys(map(str, (a, b, c, d)), T0 + 20)


def queue_state(raw: redis.Redis, queue: str) -> dict[str, Any]:
    """Every key of ``queue`` on shard "1" and what it holds, the queue's name left out."""
    prefix = f"plc:{{1:{queue}}}:"
    state: dict[str, Any] = {}
    for key in map(text, raw.keys(prefix + "*")):
        kind = text(raw.type(key))
        if kind == "list":
            value: Any = [text(v) for v in raw.lrange(key, 0, -1)]
        elif kind == "zset":
            value = zset(raw, key)
        elif kind == "hash":
            value = {text(k): v for k, v in raw.hgetall(key).items()}
            if key == prefix + "j":
                value.pop("c")  # the queue's creation time, in wall-clock ms
        else:
            value = raw.get(key)
        state[key.removeprefix(prefix)] = value
    return state


@pytest.mark.usefixtures("ready_lists_on")
@pytest.mark.redis
def test_a_dequeue_from_the_list_and_the_set_claims_as_the_general_loop(store: RedisStore, raw: redis.Redis) -> None:
    """Where both the ready list and the PENDING set hold due jobs, the common path merges them
    (claim_merged in dequeue_jobs.lua) with one HMGET; a queue with a group rate always takes
    the general loop, which for jobs of no group claims alike. Random histories of enqueues
    (due now: the list; earlier, later, or ids gaining a digit: the set), dequeues and failed
    acks (retries: the set, often at a list's score), dequeues before the last enqueue's now
    (markers in the future), jobs with an expiry, cancels (a place left in the list) and
    evicted records (which the merge leaves to the general loop) run on both queues side by
    side: every dequeue answers alike and leaves every key alike. The same history with jobs in
    ordered groups runs on a third queue (where a group rate would change what is claimed): each
    dequeue claims what a dry run (the general loop) just before it shows."""
    a, b, g = "a", "b", "g"
    for queue in (a, b, g):
        store.create_queue(queue, 1)
    store.set_queue_rules({b: QueueRules(group_jobs_per_second=1000.0), g: QueueRules(group_concurrency=2)})
    merged = {a: 0, g: 0}
    last_id = 0
    for seed in range(30):
        rng = random.Random(seed)
        now = T0 + 1_000 * seed
        for _ in range(24):
            now += rng.randint(0, 2)
            op = rng.random()
            if op < 0.45:
                jobs = [
                    NewJob(1, b"%d" % rng.randint(0, 9), rng.choice([now, now, now - rng.randint(0, 4), now + 2]), 2)
                    for _ in range(rng.randint(1, 30))
                ]
                if rng.random() < 0.2:  # with an expiry (never in the list; a dequeue past it expires them)
                    keyed = [KeyedJob(job, None, expire_at_ms=now + rng.randint(-2, 4)) for job in jobs]
                    placed = store.enqueue_keyed_jobs(a, keyed, now)
                    assert placed == store.enqueue_keyed_jobs(b, keyed, now)
                    last_id = max(last_id, *(place.local_id for place in placed))
                else:
                    ids = store.enqueue_jobs(a, jobs, now)
                    assert ids == store.enqueue_jobs(b, jobs, now)
                    last_id = max(last_id, *ids)
                store.enqueue_keyed_jobs(g, [KeyedJob(job, None, group=f"g{rng.randint(0, 40)}") for job in jobs], now)
                continue
            if op < 0.55 and last_id:  # a cancel: in the list, a cancelled job's place stays behind
                victim = rng.randint(1, last_id)
                assert store.cancel_jobs(a, [(1, victim)], now) == store.cancel_jobs(b, [(1, victim)], now)
                continue
            if op < 0.6 and last_id:  # a record evicted: the merge leaves it to the general loop
                field = str(rng.randint(1, last_id))
                assert raw.hdel(f"plc:{{1:{a}}}:j", field) == raw.hdel(f"plc:{{1:{b}}}:j", field)
                continue
            limit, at = rng.randint(1, 40), now + rng.randint(-3, 3)
            raw.config_resetstat()
            got = store.dequeue_jobs(a, 1, limit, CLAIM, at, False)
            used = calls(raw)
            assert got == store.dequeue_jobs(b, 1, limit, CLAIM, at, False)
            shown = [job.local_id for job in store.dequeue_jobs(g, 1, limit, CLAIM, at, True)]
            raw.config_resetstat()
            claimed = [job.local_id for job in store.dequeue_jobs(g, 1, limit, CLAIM, at, False)]
            assert claimed == shown
            for queue, calls_made, n in ((a, used, len(got)), (g, calls(raw), len(claimed))):
                # both read, one read of records (two past 8 jobs: claim_rows reads 8 first)
                records = 1 if n <= 8 else 2
                if calls_made.get("hmget") == records and calls_made.get("zrem") and calls_made.get("lrange"):
                    merged[queue] += 1
            for queues, ids in (((a, b), [job.local_id for job in got]), ((g,), claimed)):
                failed = [AckItem(1, i, "", rng.choice([0, 1, 2])) for i in ids if rng.random() < 0.4]
                done = {f.local_id for f in failed}
                # a's and b's jobs may stay claimed; g's all end or retry, or their groups block
                succeeded = [AckItem(1, i) for i in ids if i not in done and (g in queues or rng.random() < 0.5)]
                for queue in queues:
                    store.ack_jobs(queue, succeeded, failed, at)
            assert queue_state(raw, a) == queue_state(raw, b)
    assert min(merged.values()) >= 30  # the merged path ran, not only its fall back to the general loop
    # a list of single-job runs, whose page (limit + 8 entries) ends before the limit is met:
    # what follows it in the list comes before the set's member, so the general loop claims
    for queue in (a, b):
        store.dequeue_jobs(queue, 1, 1000, CLAIM, now + 10, False)  # empty both
        store.enqueue_jobs(queue, [NewJob(1, b"s", now + 50, 1)], now + 10)
        for i in range(20):
            store.enqueue_jobs(queue, [NewJob(1, b"l", now + 11 + i, 1)], now + 11 + i)
    got = store.dequeue_jobs(a, 1, 10, CLAIM, now + 60, False)
    assert [job.body for job in got] == [b"l"] * 10 and got == store.dequeue_jobs(b, 1, 10, CLAIM, now + 60, False)
    assert queue_state(raw, a) == queue_state(raw, b)
    # one score in both, ids of different lengths: the list's 9 before the set's 10, as numbers
    c = "c"
    store.create_queue(c, 1)
    assert store.enqueue_jobs(c, [NewJob(1, b"l", T0, 1)] * 9, T0) == list(range(1, 10))  # the list
    assert store.enqueue_jobs(c, [NewJob(1, b"s", T0, 1)], T0 + 1) == [10]  # the set: run after < now
    assert [job.local_id for job in store.dequeue_jobs(c, 1, 8, CLAIM, T0 + 1, False)] == list(range(1, 9))
    assert [job.local_id for job in store.dequeue_jobs(c, 1, 1, CLAIM, T0 + 1, False)] == [9]
    # the limit cuts through the set's one score (ids from 6, "10" before "6" as text), after the
    # list's jobs: the merge takes that score's numerically lowest ids, as the general loop's
    # pick() does, and reads records once, whether it stays below that score or reaches it
    store.set_queue_rules({queue: QueueRules(group_jobs_per_second=1000.0) for queue in ("e", "h")})
    for merges, general, in_set, limit in (("d", "e", 6, 3), ("f", "h", 12, 7)):
        for queue in (merges, general):
            store.create_queue(queue, 1)
            store.enqueue_jobs(queue, [NewJob(1, b"l", T0, 1)] * 5, T0)  # the list: 1 to 5
            store.enqueue_jobs(queue, [NewJob(1, b"s", T0 + 5, 1)] * in_set, T0 + 10)  # the set
        raw.config_resetstat()
        got = store.dequeue_jobs(merges, 1, limit, CLAIM, T0 + 10, False)
        assert calls(raw)["hmget"] == 1
        assert [job.local_id for job in got] == list(range(1, limit + 1))
        assert got == store.dequeue_jobs(general, 1, limit, CLAIM, T0 + 10, False)
        assert queue_state(raw, merges) == queue_state(raw, general)
    # a cut score that the list's next job shares: that score's lowest ids as numbers first (here
    # the retried 2, in the set after "10" and "11" as text, before the list's 3)
    store.set_queue_rules({"k": QueueRules(group_jobs_per_second=1000.0)})
    for queue in ("j", "k"):
        store.create_queue(queue, 1)
        store.enqueue_jobs(queue, [NewJob(1, b"l", T0, 2)] * 9, T0)  # the list: 1 to 9
        store.enqueue_jobs(queue, [NewJob(1, b"s", T0, 2)] * 2, T0)  # 10 and 11 would gain a digit: the set
        assert [job.local_id for job in store.dequeue_jobs(queue, 1, 2, CLAIM, T0, False)] == [1, 2]
        store.ack_jobs(queue, [], [AckItem(1, 2, "", 0)], T0)  # retried at once: the set, as "2"
    raw.config_resetstat()
    got = store.dequeue_jobs("j", 1, 2, CLAIM, T0, False)
    assert calls(raw)["hmget"] == 1
    assert [job.local_id for job in got] == [2, 3] and got == store.dequeue_jobs("k", 1, 2, CLAIM, T0, False)
    assert queue_state(raw, "j") == queue_state(raw, "k")


@pytest.mark.usefixtures("ready_lists_on")
@pytest.mark.redis
def test_a_merge_into_a_huge_group_of_equal_run_afters_keeps_redis_order(
    store: RedisStore, raw: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past MAX_TIES_REORDERED members of one score, the general loop takes them in Redis' order
    (as text), and so does a dequeue that merges them with the ready list."""
    monkeypatch.setattr(store_module, "MAX_TIES_REORDERED", 5)
    store.set_queue_rules({"n": QueueRules(group_jobs_per_second=1000.0)})  # the general loop
    for queue in ("m", "n"):
        store.create_queue(queue, 1)
        assert store.enqueue_jobs(queue, [NewJob(1, b"l", T0, 1)] * 3, T0) == [1, 2, 3]  # the list
        store.enqueue_jobs(queue, [NewJob(1, b"s", T0, 1)] * 12, T0 + 1)  # the set: 4 to 15, at T0
    got = store.dequeue_jobs("m", 1, 5, CLAIM, T0 + 1, False)
    assert [job.local_id for job in got] == [1, 2, 3, 10, 11]
    assert got == store.dequeue_jobs("n", 1, 5, CLAIM, T0 + 1, False)
    assert queue_state(raw, "m") == queue_state(raw, "n")


@pytest.mark.usefixtures("ready_lists_on")
@pytest.mark.redis
def test_reserve_takes_from_the_list_and_a_released_hold_goes_to_the_set(store: RedisStore, raw: redis.Redis) -> None:
    a, b, c = store.enqueue_jobs(Q, [NewJob(1, b"x", T0, 1)] * 3, T0)
    held = store.reserve_jobs(Q, 1, 2, RES, T0, 60_000)
    assert [job.local_id for job in held] == [a, b]
    assert ready_list(raw) == [f"@{T0}", str(c)] and zset(raw, K + "p1:h") == {str(a): T0, str(b): T0}
    assert store.release_reservations(Q, [(1, a)], RES, T0) == 1
    assert zset(raw, K + "p1:s0") == {str(a): T0}
    assert store.count_jobs(Q, JobFilter(JobState.PENDING, 1, T0), None) == 3  # set, held, list


@pytest.mark.usefixtures("ready_lists_on")
@pytest.mark.redis
def test_an_enqueue_behind_the_lists_last_score_goes_to_the_set(store: RedisStore, raw: redis.Redis) -> None:
    [a] = store.enqueue_jobs(Q, [NewJob(1, b"ahead", T0 + 100, 1)], T0 + 100)  # a server whose clock is ahead
    [b] = store.enqueue_jobs(Q, [NewJob(1, b"behind", T0, 1)], T0)
    assert ready_list(raw) == [f"@{T0 + 100}", str(a)] and zset(raw, K + "p1:s0") == {str(b): T0}
    # counted where their scores put them, at a now before the list's last score
    assert store.count_jobs(Q, JobFilter(JobState.PENDING, 1, T0 + 50), None) == 1
    assert store.count_jobs(Q, JobFilter(JobState.PENDING, 1, T0 + 50, future=True), None) == 1
    counts = store.queue_counts(3, T0 + 50)
    assert (counts[CountKey(Q, 1, JobState.PENDING, False)], counts[CountKey(Q, 1, JobState.PENDING, True)]) == (1, 1)
    assert [job.local_id for job in store.dequeue_jobs(Q, 1, 5, CLAIM, T0 + 50, False)] == [b]  # a is not due
    assert [job.local_id for job in store.dequeue_jobs(Q, 1, 5, CLAIM, T0 + 100, False)] == [a]


@pytest.mark.usefixtures("ready_lists_on")
@pytest.mark.redis
def test_deleted_list_jobs_leave_the_head_at_once_and_are_tombstones_behind_a_job(
    store: RedisStore, raw: redis.Redis
) -> None:
    ids = store.enqueue_jobs(Q, [NewJob(1, b"job%d" % i, T0, 1) for i in range(6)], T0)
    pending = JobFilter(JobState.PENDING, 1, T0)
    assert store.delete_jobs(Q, pending, 2) == 2  # the lowest: the list's head, dropped with their records
    assert raw.hmget(K + "j", str(ids[0]), str(ids[1])) == [None, None] and extra(raw) == 1  # the marker
    assert ready_list(raw) == [f"@{T0}", *map(str, ids[2:])]
    assert store.delete_jobs(Q, JobFilter(JobState.PENDING, 1, T0, body_regex="job3"), 10) == 1  # behind ids[2]
    assert raw.hget(K + "j", str(ids[3])) == b"" and extra(raw) == 2  # deleted in place: a tombstone
    assert ready_list(raw) == [f"@{T0}", *map(str, ids[2:])]
    assert store.count_jobs(Q, pending, None) == 3
    assert store.queue_counts(3, T0)[CountKey(Q, 1, JobState.PENDING, False)] == 3
    assert [job.local_id for job in store.scan_jobs(Q, pending, 10)] == [ids[5], ids[4], ids[2]]
    assert store.lookup_jobs(Q, [(1, i) for i in ids], False) == store.lookup_jobs(
        Q, [(1, ids[2]), (1, ids[4]), (1, ids[5])], False
    )
    assert [job.local_id for job in store.dequeue_jobs(Q, 1, 10, CLAIM, T0, True)] == [ids[2], ids[4], ids[5]]
    assert [job.local_id for job in store.dequeue_jobs(Q, 1, 1, CLAIM, T0, False)] == [ids[2]]
    assert ready_list(raw) == [f"@{T0}", *map(str, ids[3:])]  # the tombstone is at the head now, a marker before it
    assert extra(raw) == 2
    # a delete of the lowest job passes the tombstone before it and drops both
    assert store.delete_jobs(Q, pending, 1) == 1
    assert ready_list(raw) == [f"@{T0}", str(ids[5])] and extra(raw) == 1
    assert raw.hmget(K + "j", str(ids[3]), str(ids[4])) == [None, None]
    assert [job.local_id for job in store.dequeue_jobs(Q, 1, 1, CLAIM, T0, False)] == [ids[5]]
    assert not raw.exists(K + "p1:r") and not raw.hexists(K + "j", "t1")
    assert store.evicted_jobs == 0  # tombstones are no evictions


@pytest.mark.usefixtures("ready_lists_on")
@pytest.mark.redis
def test_evicted_list_jobs_are_counted_where_met(store: RedisStore, raw: redis.Redis) -> None:
    ids = store.enqueue_jobs(Q, [NewJob(1, b"job%d" % i, T0, 2) for i in range(8)], T0)
    raw.hdel(K + "j", str(ids[1]), str(ids[5]), str(ids[6]), str(ids[7]))
    assert [job.local_id for job in store.dequeue_jobs(Q, 1, 2, CLAIM, T0, True)] == [ids[0]]  # two places
    assert store.evicted_jobs == 0
    assert [job.local_id for job in store.dequeue_jobs(Q, 1, 2, CLAIM, T0, False)] == [ids[0], ids[2]]
    assert store.evicted_jobs == 1 and ready_list(raw) == [f"@{T0}", *map(str, ids[3:])]
    assert store.count_jobs(Q, JobFilter(JobState.PENDING, 1, T0), None) == 5  # evicted ones count, as ZCOUNT's
    # newest first: the evicted ones at the tail are met (counted, and tombstones from then on), then ids[4]
    assert [job.local_id for job in store.scan_jobs(Q, JobFilter(JobState.PENDING, 1, T0), 1)] == [ids[4]]
    assert store.evicted_jobs == 4 and ready_list(raw) == [f"@{T0}", *map(str, ids[3:])]
    assert raw.hmget(K + "j", *map(str, ids[5:])) == [b""] * 3 and extra(raw) == 4
    assert store.count_jobs(Q, JobFilter(JobState.PENDING, 1, T0), None) == 2
    raw.hdel(K + "j", str(ids[3]))
    # a lookup finds the list's entry (a search by halving) with no record: counted once
    assert store.lookup_jobs(Q, [(1, ids[3]), (1, ids[3])], False) == []
    assert store.evicted_jobs == 5 and raw.hget(K + "j", str(ids[3])) == b"" and extra(raw) == 5
    assert store.lookup_jobs(Q, [(1, ids[4]), (1, 10_000), (1, 0)], False)[0].local_id == ids[4]
    assert store.evicted_jobs == 5
    assert [job.local_id for job in store.reserve_jobs(Q, 1, 5, RES, T0, 1000)] == [ids[4]]
    assert store.evicted_jobs == 5  # the tombstones are passed, not counted again
    assert not raw.exists(K + "p1:r") and extra(raw) == 0


@pytest.mark.usefixtures("ready_lists_on")
@pytest.mark.redis
def test_delete_queue_empties_the_lists_and_their_counts(store: RedisStore, raw: redis.Redis) -> None:
    ids = store.enqueue_jobs(Q, [NewJob(1 + i % 2, b"x%d" % i, T0, 1) for i in range(10)], T0)
    store.delete_jobs(Q, JobFilter(JobState.PENDING, 1, T0, body_regex="x4"), 2)  # behind x0 and x2: a tombstone
    assert extra(raw) == 2 and extra(raw, 2) == 1
    store.delete_queue(Q)
    assert {k for k in all_keys(raw) if k.startswith(K)} == {K + "j"}
    assert raw.hgetall(K + "j") == {b"id": str(ids[-1]).encode()}


@pytest.mark.usefixtures("ready_lists_on")
@pytest.mark.redis
def test_a_list_job_cancelled_in_place_leaves_a_tombstone_and_is_never_handed_out(
    store: RedisStore, raw: redis.Redis
) -> None:
    a, b, c = store.enqueue_jobs(Q, [NewJob(1, b"job%d" % i, T0, 2) for i in range(3)], T0)
    assert store.cancel_jobs(Q, [(1, b)], T0 + 1) == 1
    assert ready_list(raw) == [f"@{T0}", str(a), f"-{b}", str(c)]  # found by halving, renamed in place
    assert raw.hget(K + "j", f"-{b}") == b"" and extra(raw) == 2  # a tombstone to every reader
    assert zset(raw, K + "p1:s3") == {str(b): T0 + 1}
    [info] = store.lookup_jobs(Q, [(1, b)], False)
    assert (info.state, info.attempts_remaining) == (JobState.FAILED, 0)
    assert store.count_jobs(Q, JobFilter(JobState.PENDING, 1, T0 + 1), None) == 2
    assert [job.local_id for job in store.scan_jobs(Q, JobFilter(JobState.PENDING, 1, T0 + 1), 10)] == [c, a]
    assert store.cancel_jobs(Q, [(1, b)], T0 + 2) == 0  # FAILED now: left alone
    # put back: PENDING in its set; its old place in the list is passed, not handed out again
    assert store.retry_failed_jobs(Q, 1, 2, T0 + 3, 10, T0 + 3) == 1
    assert zset(raw, K + "p1:s0") == {str(b): T0 + 3}
    got = [job.local_id for job in store.dequeue_jobs(Q, 1, 10, CLAIM, T0 + 3, False)]
    assert sorted(got) == [a, b, c] and len(got) == 3
    assert not raw.exists(K + "p1:r") and extra(raw) == 0 and not raw.hexists(K + "j", f"-{b}")


@pytest.mark.usefixtures("ready_lists_on")
@pytest.mark.redis
def test_a_dequeue_passes_a_bounded_number_of_tombstones_per_call(store: RedisStore, raw: redis.Redis) -> None:
    n = 5000  # more than ready.lua's READY_SKIP_BUDGET (4096)
    raw.hset(K + "j", "id", 10_000)  # five-digit ids throughout: one run
    ids = store.enqueue_jobs(Q, [NewJob(1, b"keep" if i in (0, n + 1) else b"drop", T0, 1) for i in range(n + 2)], T0)
    assert store.delete_jobs(Q, JobFilter(JobState.PENDING, 1, T0, body_regex="^drop$"), n) == n  # behind ids[0]
    markers = -(-(n + 2) // 256)  # one before each 256 ids
    assert raw.llen(K + "p1:r") == n + 2 + markers and extra(raw) == n + markers
    [late] = store.enqueue_jobs(Q, [NewJob(1, b"late", T0 + 500, 1)], T0)  # in the set, due after ids[-1]
    now = T0 + 1000
    # the budget spent: the set's job is not taken past the list's unread part (its next job is older)
    assert [job.local_id for job in store.dequeue_jobs(Q, 1, 2, CLAIM, now, False)] == [ids[0]]
    left = [entry for entry in ready_list(raw) if not entry.startswith("@")]
    assert left[:-1] == [str(i) for i in ids[1 + 4096 : -1]] and left[-1] == str(ids[-1])  # 4,096 passed
    assert extra(raw) == raw.llen(K + "p1:r") - 1  # every entry but the last job: markers, tombstones
    assert store.count_jobs(Q, JobFilter(JobState.PENDING, 1, now), None) == 2
    assert [job.local_id for job in store.dequeue_jobs(Q, 1, 2, CLAIM, now, False)] == [ids[-1], late]
    assert not raw.exists(K + "p1:r") and extra(raw) == 0 and raw.hlen(K + "j") == 2 + 3  # c, id, three records


@pytest.mark.usefixtures("ready_lists_on")
@pytest.mark.redis
def test_an_enqueue_of_twenty_thousand_whose_ids_gain_a_digit(store: RedisStore, raw: redis.Redis) -> None:
    raw.hset(K + "j", "id", 80_000)  # ids 80001 to 100000: the last gains a digit within the run
    ids = store.enqueue_jobs(Q, [NewJob(1 + i % 2, b"x", T0, 1) for i in range(20_000)], T0)
    assert ids == list(range(80_001, 100_001))
    listed = {p: [e for e in ready_list(raw, p) if not e.startswith("@")] for p in (1, 2)}
    assert listed[1] == [str(i) for i in ids[0:-1:2]]  # a prefix of 9,999 (more than Lua's unpack takes)
    assert listed[2] == [str(i) for i in ids[1:-1:2]]
    assert zset(raw, K + "p2:s0") == {"100000": T0} and not raw.exists(K + "p1:s0")
    assert store.count_jobs(Q, JobFilter(JobState.PENDING, 2, T0), None) == 10_000


@pytest.mark.usefixtures("ready_lists_on")
@pytest.mark.redis
def test_a_scan_meets_a_job_cancelled_in_the_list_and_put_back_in_the_set_once(
    store: RedisStore, raw: redis.Redis
) -> None:
    ids = store.enqueue_jobs(Q, [NewJob(1, b"x", T0, 2) for _ in range(4)], T0)
    assert store.cancel_jobs(Q, [(1, ids[2]), (1, ids[3])], T0) == 2
    assert store.retry_failed_jobs(Q, 1, 2, T0, 10, T0) == 2  # back in the set: the same score and id
    assert ready_list(raw) == [f"@{T0}", str(ids[0]), str(ids[1]), f"-{ids[2]}", f"-{ids[3]}"]
    where = JobFilter(JobState.PENDING, 1, T0)
    assert store.count_jobs(Q, where, None) == 4
    everything = [ids[3], ids[2], ids[1], ids[0]]
    assert [job.local_id for job in store.scan_jobs(Q, where, 10)] == everything
    for limit in (1, 2, 3):
        seen, after = [], None
        while page := store.scan_jobs(Q, where, limit, after):
            seen += [job.local_id for job in page]
            after = ScanCursor(page[-1].run_after_ms, page[-1].local_id)
        assert seen == everything, limit


@pytest.mark.usefixtures("ready_lists_on")
@pytest.mark.redis
def test_a_run_of_one_ms_keeps_the_order_of_ids_as_text(store: RedisStore, raw: redis.Redis) -> None:
    ids = store.enqueue_jobs(Q, [NewJob(1, b"x", T0, 1) for _ in range(12)], T0)  # 1 to 12: "10" gains a digit
    assert ready_list(raw) == [f"@{T0}", *map(str, ids[:9])]
    assert zset(raw, K + "p1:s0") == dict.fromkeys(map(str, ids[9:]), T0)  # the rest of the run: the set
    [more] = store.enqueue_jobs(Q, [NewJob(1, b"x", T0, 1)], T0)  # the same ms: after "9" as text? no
    assert raw.zscore(K + "p1:s0", str(more)) == T0
    [later] = store.enqueue_jobs(Q, [NewJob(1, b"x", T0 + 1, 1)], T0 + 1)  # a new run
    assert ready_list(raw)[-2:] == [f"@{T0 + 1}", str(later)]
    # newest first, a page at a time, in the sets' order: run after, then id as text
    everything = sorted([*ids, more, later], key=lambda i: (T0 + (i == later), str(i)), reverse=True)
    where = JobFilter(JobState.PENDING, 1, T0 + 1)
    seen, after = [], None
    while page := store.scan_jobs(Q, where, 4, after):
        seen += [job.local_id for job in page]
        after = ScanCursor(page[-1].run_after_ms, page[-1].local_id)
    assert seen == everything
    assert [job.local_id for job in store.scan_jobs(Q, where, 20)] == everything
    # a dequeue takes a run by id as a number (first in, first out), from the list and the set
    assert [job.local_id for job in store.dequeue_jobs(Q, 1, 20, CLAIM, T0 + 1, False)] == [*ids, more, later]


@pytest.mark.usefixtures("ready_lists_on")
@pytest.mark.redis
def test_counts_up_to_a_score_within_the_list_leave_out_only_the_runs_after_it(
    store: RedisStore, raw: redis.Redis
) -> None:
    for ms in range(4):  # four runs of two, a ms apart
        store.enqueue_jobs(Q, [NewJob(1, b"x", T0 + ms, 1)] * 2, T0 + ms)
    assert len(ready_list(raw)) == 4 * 3
    for now, due in ((T0 - 1, 0), (T0, 2), (T0 + 1, 4), (T0 + 2, 6), (T0 + 3, 8)):
        assert store.count_jobs(Q, JobFilter(JobState.PENDING, 1, now), None) == due, now
        assert store.count_jobs(Q, JobFilter(JobState.PENDING, 1, now, future=True), None) == 8 - due, now
        assert store.queue_counts(3, now)[CountKey(Q, 1, JobState.PENDING, False)] == due, now


@pytest.mark.usefixtures("ready_lists_on")
@pytest.mark.redis
def test_a_run_of_one_ms_longer_than_256_ids_pages_through_its_markers(store: RedisStore, raw: redis.Redis) -> None:
    raw.hset(K + "j", "id", 1_000_000)
    ids = store.enqueue_jobs(Q, [NewJob(1, b"keep" if i % 100 == 0 else b"drop", T0, 1) for i in range(600)], T0)
    assert [e for e in ready_list(raw) if e.startswith("@")] == [f"@{T0}"] * 3  # before ids 1, 257 and 513
    where = JobFilter(JobState.PENDING, 1, T0)
    for limit in (7, 100):
        seen, after = [], None
        while page := store.scan_jobs(Q, where, limit, after):
            seen += [job.local_id for job in page]
            after = ScanCursor(page[-1].run_after_ms, page[-1].local_id)
        assert seen == ids[::-1], limit
    # deleted in place behind the oldest: pages of tombstones, each from the point the last one reached
    assert store.delete_jobs(Q, JobFilter(JobState.PENDING, 1, T0, body_regex="^drop$"), 600) == 594
    assert [job.local_id for job in store.scan_jobs(Q, where, 10)] == ids[::100][::-1]


class TickingClock:
    """A clock one millisecond later at every reading, as a busy server's is between two reads."""

    def __init__(self) -> None:
        self.now = T0

    def now_ms(self) -> int:
        self.now += 1
        return self.now


@pytest.mark.usefixtures("ready_lists_on")
@pytest.mark.redis
def test_the_sharded_backend_gives_the_store_the_now_the_run_afters_were_defaulted_to(
    store: RedisStore, raw: redis.Redis
) -> None:
    clock = TickingClock()
    backend = ShardedBackend(ShardMap([Shard("1", store)]), num_priorities=3, parallelism=2, clock=clock)

    async def enqueue_twice() -> tuple[list[int], list[int]]:
        try:
            now = clock.now_ms()  # as the handler: run afters defaulted to now, then the store's now
            _, first = await backend.enqueue_jobs(Q, NewJobBatch([NewJob(1, b"a", now, 1)]), now)
            now = clock.now_ms()
            _, second = await backend.enqueue_jobs(Q, NewJobBatch([NewJob(1, b"b", now, 1)]))  # the clock read again
            return first.to_list(), second.to_list()
        finally:
            await store.aclose()  # the hot path's connection, on this loop

    try:
        [a], [b] = asyncio.run(enqueue_twice())
    finally:
        backend.close()
    assert ready_list(raw) == [f"@{T0 + 1}", str(a)]
    assert zset(raw, K + "p1:s0") == {str(b): T0 + 2}


# 8 pairs for zadd_skiplist, the last with a score that is not a number
ZADD_SKIPLIST_FAILING = """
local pairs = {}
for i = 1, 8 do
  pairs[#pairs + 1], pairs[#pairs + 2] = i, 'm' .. i
end
pairs[15] = 'not a score'
zadd_skiplist(KEYS[1], 8, zadd_pairs, pairs)
"""


@pytest.mark.redis
def test_a_failed_write_through_zadd_skiplist_leaves_no_pin(raw: redis.Redis) -> None:
    """A write through lib/sets.lua's zadd_skiplist that fails (a score that is not a number,
    which ZADD refuses before writing any member) still removes the member that converts the set,
    and the script fails with the write's error: no reader ever sees that member."""
    from pinlater.backends.redis import scripts

    source = scripts._library("lua_compact", "sets") + ZADD_SKIPLIST_FAILING
    with pytest.raises(redis.ResponseError, match="not a valid float"):
        raw.eval(source, 1, "plc:{1:q}:p1:w")
    assert raw.zrange("plc:{1:q}:p1:w", 0, -1) == []


@pytest.mark.parametrize("side", ["ready list", "sorted set"])
@pytest.mark.parametrize("how", ["dry run", "reserve"])
def test_a_dry_run_or_a_reserve_reads_no_records_far_past_its_byte_budget(
    store: RedisStore, raw: redis.Redis, side: str, how: str
) -> None:
    """A dry run or a broker's reserve takes no more bodies than its byte budget, and it reads no
    more either: 40 jobs of 1 MiB peeked at under a budget of 2 MiB grew Redis' peak memory by the
    40 records read at once (a page of the ready list, the sorted set's whole page), where a claim
    reads them in step with the budget; a reserve read 33 of the list's at once; now a few."""
    body = b"b" * (1 << 20)
    for i in range(40):  # one a call: the enqueues' own arguments stay small
        now = T0 - 100 + i  # due at its enqueue: the ready list (each its own run); else the set
        store.enqueue_jobs(Q, [NewJob(1, body, now if side == "ready list" else now - 1, 2)], now)
    lengths = raw.llen(K + "p1:r"), raw.zcard(K + "p1:s0")
    assert lengths == ((80, 0) if side == "ready list" else (0, 40)), lengths  # (a marker a run)
    before = int(raw.info("memory")["used_memory_peak"])
    if how == "dry run":
        peeked = store.dequeue_jobs(Q, 1, 40, CLAIM, T0 + 1, True, max_bytes=2 << 20)
    else:
        peeked = store.reserve_jobs(Q, 1, 40, RES, T0 + 1, 60_000, max_bytes=2 << 20)
    grown = int(raw.info("memory")["used_memory_peak"]) - before
    assert len(peeked) == 2, "bodies while those before hold fewer than the budget's bytes"
    assert grown < 12 << 20, f"Redis' peak grew by {grown >> 20} MiB"
    if how == "dry run":
        assert len(store.dequeue_jobs(Q, 1, 40, CLAIM, T0 + 1, True, max_bytes=100 << 20)) == 40
