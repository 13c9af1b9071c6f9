"""Cancel and expiry in the Redis store beyond the shared suite (``test_job_control_conformance.py``):
where they live in each layout and what the original server sees of them, that a plain job costs
nothing more, the expiry index's bounded sweep, the dequeue that expires what it meets, a grouped
job met without the group keys, holds that never outlast an expiry, ``delete_queue`` dropping
the new keys, ``pinlater migrate-layout`` carrying them, and expired counts of queues on several
cluster masters."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from tests.support.redis_server import RedisServer
from tests.support.stores import make_store

from pinlater._pinlater import AckGroup
from pinlater.backends.base import (
    AckItem,
    CheckpointItem,
    JobFilter,
    JobRecord,
    JobState,
    KeyedJob,
    NewJob,
    QueueRules,
)
from pinlater.backends.redis import RedisEndpoint, RedisShardConfig, RedisStore
from pinlater.backends.redis.cluster import key_slot
from pinlater.backends.redis.migrate import migrate_shard

pytestmark = pytest.mark.redis

Q = "jc"
T0 = 1_700_000_000_000
CLAIM = "claim-0001:worker:host-a"
RESERVATION = "~r|broker-1"
LAYOUTS = ["original", "compact"]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    with RedisServer(tmp_path / "redis") as srv:
        yield srv


@pytest.fixture
def raw(server: RedisServer) -> Iterator[redis.Redis]:
    client = server.client()
    yield client
    client.close()


@pytest.fixture(params=LAYOUTS)
def store(request: pytest.FixtureRequest, server: RedisServer) -> Iterator[RedisStore]:
    shard = RedisStore("1", RedisShardConfig(RedisEndpoint(server.host, server.port), layout=request.param))
    shard.create_queue(Q, 3)
    try:
        yield shard
    finally:
        shard.close()


def expiring(
    expire_at: int, *, priority: int = 1, run_after: int = T0, attempts: int = 3, group: str | None = None
) -> KeyedJob:
    return KeyedJob(NewJob(priority, b"body", run_after, attempts, "st"), None, 0, group, expire_at)


def enqueue(store: RedisStore, *jobs: KeyedJob, now: int = T0) -> list[int]:
    return [e.local_id for e in store.enqueue_keyed_jobs(Q, list(jobs), now)]


def index_and_count(store: RedisStore) -> tuple[str, str]:
    index, count = store._keys(Q).expiry_keys()
    return index, count


def state_of(store: RedisStore, local_id: int, priority: int = 1) -> JobRecord:
    (record,) = store.lookup_jobs(Q, [(priority, local_id)], False)
    return record


# -- the original server's view ------------------------------------------------------------------


def test_original_layout_keeps_expiry_in_a_field_of_its_own_and_cancel_as_a_plain_failure(
    server: RedisServer, raw: redis.Redis
) -> None:
    store = RedisStore("1", RedisShardConfig(RedisEndpoint(server.host, server.port), layout="original"))
    try:
        store.create_queue(Q, 3)
        plain = store.enqueue_jobs(Q, [NewJob(1, b"plain", T0, 3)], T0)[0]
        a, b = enqueue(store, expiring(T0 + 1000), expiring(T0 + 2000))
        # the fields the original server reads, plus ours, only on the job that has an expiry
        assert set(raw.hgetall(f"plh_1_{Q}.{plain}")) == {b"bd", b"al", b"ar", b"ca", b"ua", b"cs"}
        assert raw.hget(f"plh_1_{Q}.{a}", "ex") == str(T0 + 1000).encode()
        assert raw.zrange(f"pld_1_{Q}.e", 0, -1, withscores=True) == [
            (str(a).encode(), T0 + 1000.0),
            (str(b).encode(), T0 + 2000.0),
        ]
        # a cancelled PENDING job is an ordinary failed job to the original: in _s3, ar 0, status
        assert store.cancel_jobs(Q, [(1, a)], T0 + 5) == 1
        assert raw.zscore(f"plq_1_{Q}.p1_s3", a) == (T0 + 5) / 1000
        assert raw.hmget(f"plh_1_{Q}.{a}", "ar", "cs", "ua") == [b"0", b"st cancelled", str((T0 + 5) / 1000).encode()]
        assert raw.zscore(f"pld_1_{Q}.e", a) is None  # ended: out of the index
        # retry_failed_jobs clears the expiry from the hash and the index
        store.expire_jobs(Q, T0 + 3000, 10)
        assert raw.hget(f"plh_1_{Q}.{b}", "cs") == b"st expired" and raw.get(f"pld_1_{Q}.n") == b"1"
        assert store.retry_failed_jobs(Q, 1, 2, T0 + 4000, 10, T0 + 4000) == 2
        assert raw.hget(f"plh_1_{Q}.{b}", "ex") is None and raw.zcard(f"pld_1_{Q}.e") == 0
        assert state_of(store, b).expire_at_ms is None
    finally:
        store.close()


def test_compact_records_of_jobs_without_expiry_are_unchanged(server: RedisServer, raw: redis.Redis) -> None:
    store = RedisStore("1", RedisShardConfig(RedisEndpoint(server.host, server.port), layout="compact"))
    try:
        store.create_queue(Q, 3)
        plain = store.enqueue_jobs(Q, [NewJob(1, b"plain", T0, 3)], T0)[0]
        (a,) = enqueue(store, expiring(T0 + 1000))
        records = f"plc:{{1:{Q}}}:j"
        assert raw.hget(records, str(plain))[0] == 0x97  # seven items, as before expiry existed
        assert raw.hget(records, str(a))[0] == 0x9A  # ten: the group's two false, then the expiry
        assert state_of(store, a).expire_at_ms == T0 + 1000 and state_of(store, plain).expire_at_ms is None
        assert raw.zrange(f"plc:{{1:{Q}}}:xe", 0, -1, withscores=True) == [(str(a).encode(), T0 + 1000.0)]
    finally:
        store.close()


# -- the plain path costs nothing more -----------------------------------------------------------


def test_plain_jobs_touch_no_expiry_key(store: RedisStore, raw: redis.Redis) -> None:
    ids = store.enqueue_jobs(Q, [NewJob(1, b"a", T0, 2), NewJob(1, b"b", T0, 2)], T0)
    claimed = store.dequeue_jobs(Q, 1, 10, CLAIM, T0, False)
    store.ack_jobs(Q, [AckItem(1, claimed[0].local_id)], [AckItem(1, claimed[1].local_id, "", 0)], T0 + 1)
    store.resurrect_timed_out_jobs(Q, 1, T0 + 10**6, 10, T0 + 10**6)
    index, count = index_and_count(store)
    assert not raw.exists(index) and not raw.exists(count)
    assert store.expired_counts() == {}
    assert [state_of(store, i).expire_at_ms for i in ids] == [None, None]


# -- expiry ----------------------------------------------------------------------------------------


def test_a_dequeue_expires_what_it_meets_and_counts_it(store: RedisStore, raw: redis.Redis) -> None:
    a, b = enqueue(store, expiring(T0 + 10), expiring(T0 + 10))
    (c,) = store.enqueue_jobs(Q, [NewJob(1, b"plain", T0 + 1, 2)], T0)
    dry = store.dequeue_jobs(Q, 1, 10, CLAIM, T0 + 10, True)  # dry runs skip them
    assert [j.local_id for j in dry] == [c]
    assert state_of(store, a).state == JobState.PENDING  # a dry run changes nothing
    got = store.dequeue_jobs(Q, 1, 1, CLAIM, T0 + 10, False)
    assert [j.local_id for j in got] == [c]  # the expired ones made way
    for local_id in (a, b):
        record = state_of(store, local_id)
        assert (record.state, record.attempts_remaining, record.custom_status) == (JobState.FAILED, 0, "st expired")
        assert record.updated_at_ms == T0 + 10
    assert store.expired_counts() == {Q: 2}
    index, _count = index_and_count(store)
    assert raw.zcard(index) == 0
    assert store.expire_jobs(Q, T0 + 20, 10) == 0  # nothing left to sweep


def test_expire_jobs_looks_at_a_bounded_number_of_entries(store: RedisStore, raw: redis.Redis) -> None:
    gone = [KeyedJob(NewJob(1, b"gone", T0, 3, "st"), None, 0, None, T0 + 10 + i) for i in range(25)]
    ids = enqueue(store, *gone, *[expiring(T0 + 50 + i) for i in range(5)])
    # jobs deleted leave their index entries behind: expire_jobs drops them, a bounded number a call
    assert store.delete_jobs(Q, JobFilter(JobState.PENDING, 1, T0, None, body_regex="^gone$"), 100) == 25
    index, _count = index_and_count(store)
    assert raw.zcard(index) == 30
    assert store.expire_jobs(Q, T0 + 100, 2) == 0
    assert raw.zcard(index) == 30 - 8  # at most 4 * limit looked at
    assert store.expire_jobs(Q, T0 + 100, 2) == 0
    assert raw.zcard(index) == 30 - 16
    assert store.expire_jobs(Q, T0 + 100, 100) == 5
    assert raw.zcard(index) == 0
    assert {state_of(store, i).state for i in ids[25:]} == {JobState.FAILED}


def test_an_expired_job_in_progress_back_to_pending_is_indexed_again(store: RedisStore, raw: redis.Redis) -> None:
    (a,) = enqueue(store, expiring(T0 + 100))
    store.dequeue_jobs(Q, 1, 1, CLAIM, T0, False)
    assert store.expire_jobs(Q, T0 + 200, 10) == 0  # IN_PROGRESS: never expires; its entry goes
    index, _count = index_and_count(store)
    assert raw.zcard(index) == 0
    back = CheckpointItem(1, a, T0 + 300, move_to_pending=True)
    assert store.checkpoint_jobs(Q, [back], "worker", T0 + 250) == 1
    assert raw.zscore(index, a) == T0 + 100
    assert store.expire_jobs(Q, T0 + 400, 10) == 1
    assert state_of(store, a).custom_status == "st expired"


def test_reservations_skip_jobs_expiring_within_the_hold_a_bounded_number_a_call(
    store: RedisStore, raw: redis.Redis
) -> None:
    soon = enqueue(store, *[expiring(T0 + 50) for _ in range(1200)])
    (later,) = enqueue(store, expiring(T0 + 10**6, run_after=T0 + 1))
    # the 1200 expiring within the hold come first: a call skips 1000 at most, then stops
    assert store.reserve_jobs(Q, 1, 10, RESERVATION, T0 + 1, 60_000) == []
    pending = store._keys(Q).set_key(1, JobState.PENDING)
    assert raw.zcard(pending) == 1201  # all left PENDING, for direct dequeues
    held = store.reserve_jobs(Q, 1, 10, RESERVATION, T0 + 1, 10)  # a hold that ends in time
    assert {j.local_id for j in held} == set(sorted(soon, key=str)[:10])  # Redis' order of equal scores
    store.release_reservations(Q, [(1, j.local_id) for j in held], RESERVATION, T0 + 1)
    assert len(store.dequeue_jobs(Q, 1, 1200, CLAIM, T0, False)) == 1200  # in time
    assert [j.local_id for j in store.reserve_jobs(Q, 1, 10, RESERVATION, T0 + 1, 60_000)] == [later]


def test_the_hot_path_acks_end_cancelled_and_expiring_retries(store: RedisStore) -> None:
    a, b, c = enqueue(store, expiring(T0 + 10**6), expiring(T0 + 500), expiring(T0 + 10**6))

    async def run() -> None:
        hot = store.native
        claimed = await hot.dequeue_jobs(Q, 1, 10, CLAIM, T0, False)
        assert sorted(j[0] for j in claimed.to_list()) == [a, b, c]
        assert store.cancel_jobs(Q, [(1, a)], T0 + 1) == 1
        failed = [AckItem(1, a, " x", 0), AckItem(1, b, " y", 1000), AckItem(1, c, " z", 1000)]
        await hot.ack_jobs(Q, AckGroup([], failed), T0 + 2)
        await hot.aclose()

    asyncio.run(run())
    records = [state_of(store, i) for i in (a, b, c)]
    assert [(r.state, r.attempts_remaining, r.custom_status) for r in records] == [
        (JobState.FAILED, 0, "st x cancelled"),
        (JobState.FAILED, 0, "st y expired"),
        (JobState.PENDING, 2, "st z"),
    ]
    assert store.expired_counts() == {Q: 1}


def test_delete_queue_drops_the_expiry_keys(store: RedisStore, raw: redis.Redis) -> None:
    enqueue(store, expiring(T0 + 10), expiring(T0 + 10**6))
    assert store.expire_jobs(Q, T0 + 10, 10) == 1
    index, count = index_and_count(store)
    assert raw.exists(index) and raw.exists(count)
    store.delete_queue(Q)
    assert not raw.exists(index) and not raw.exists(count)
    store.create_queue(Q, 3)
    assert store.expired_counts() == {}


# -- ordered groups (compact) ---------------------------------------------------------------------


def test_a_grouped_job_met_expired_without_the_group_keys_waits_for_the_sweep(
    server: RedisServer, raw: redis.Redis
) -> None:
    store = RedisStore("1", RedisShardConfig(RedisEndpoint(server.host, server.port), layout="compact"))
    try:
        store.create_queue(Q, 3)
        head, nxt = enqueue(store, expiring(T0 + 10, group="g"), expiring(T0 + 10**6, group="g"))
        # no rule for dequeues: the dequeue has no group keys, so it moves the head aside
        assert store.dequeue_jobs(Q, 1, 10, CLAIM, T0 + 10, False) == []
        pending = store._keys(Q).set_key(1, JobState.PENDING)
        assert raw.zscore(pending, head) == T0 + 10 + 60_000
        assert state_of(store, nxt).state == JobState.PENDING
        assert store.expire_jobs(Q, T0 + 20, 10) == 1  # the sweep has them: the group moves on
        assert state_of(store, head).custom_status == "st expired"
        assert [j.local_id for j in store.dequeue_jobs(Q, 1, 10, CLAIM, T0 + 20, False)] == [nxt]
        # with a rule for dequeues the keys come along, and the dequeue ends it itself
        store.set_queue_rules({Q: QueueRules(max_in_progress=100)})
        third, fourth = enqueue(store, expiring(T0 + 30, group="h"), expiring(T0 + 10**6, group="h"), now=T0 + 20)
        got = store.dequeue_jobs(Q, 1, 10, CLAIM, T0 + 30, False)
        assert [j.local_id for j in got] == [fourth]
        assert state_of(store, third).custom_status == "st expired"
        assert store.expired_counts() == {Q: 2}
    finally:
        store.close()


def test_cancelling_waiting_grouped_jobs_leaves_the_group_counts_right(server: RedisServer) -> None:
    store = RedisStore("1", RedisShardConfig(RedisEndpoint(server.host, server.port), layout="compact"))
    try:
        store.create_queue(Q, 3)
        a, b, c = enqueue(store, *[expiring(T0 + 10**6, group="g") for _ in range(3)])
        assert store.group_counts(Q) == (1, 1)
        assert store.cancel_jobs(Q, [(1, b), (1, c)], T0) == 2  # both waiting
        assert store.group_counts(Q) == (1, 0)
        assert store.cancel_jobs(Q, [(1, a)], T0) == 1
        assert store.group_counts(Q) == (0, 0)
    finally:
        store.close()


# -- Redis Cluster ----------------------------------------------------------------------------------


def test_expired_counts_of_queues_on_several_masters(tmp_path: Path) -> None:
    with make_store("redis-cluster", tmp_path) as shard:
        assert isinstance(shard, RedisStore)
        queues = [f"q{i}" for i in range(12)]
        slots = {key_slot(shard._keys(q).expiry_keys()[1].encode()) for q in queues}
        assert len(slots) > 1
        for i, q in enumerate(queues):
            shard.create_queue(q, 3)
            jobs = [KeyedJob(NewJob(1, b"x", T0, 2), None, 0, None, T0 + 10) for _ in range(i % 3)]
            if jobs:
                shard.enqueue_keyed_jobs(q, jobs, T0)
                assert shard.expire_jobs(q, T0 + 10, 10) == len(jobs)
        assert shard.expired_counts() == {q: i % 3 for i, q in enumerate(queues) if i % 3}
        (job,) = shard.enqueue_keyed_jobs("q0", [KeyedJob(NewJob(1, b"x", T0, 2), None, 0, None, T0 + 10)], T0)
        assert shard.cancel_jobs("q0", [(1, job.local_id)], T0) == 1
        shard.delete_queue("q1")
        assert "q1" not in shard.expired_counts()


# -- pinlater migrate-layout ------------------------------------------------------------------------


def test_migrating_the_layout_carries_expiries_and_counts_both_ways(server: RedisServer, raw: redis.Redis) -> None:
    store = RedisStore("1", RedisShardConfig(RedisEndpoint(server.host, server.port), layout="original"))
    try:
        store.create_queue(Q, 3)
        a, b, c = enqueue(store, expiring(T0 + 10), expiring(T0 + 5000), expiring(T0 + 9000))
        assert store.expire_jobs(Q, T0 + 10, 10) == 1
    finally:
        store.close()
    now = T0 + 10
    for layout in ("compact", "original"):
        migrate_shard(raw, "1", layout)
        other = "pld_1_jc.[en]" if layout == "compact" else "plc:{1:jc}:x*"
        assert raw.keys(other) == [], layout
        moved = RedisStore("1", RedisShardConfig(RedisEndpoint(server.host, server.port), layout=layout))
        try:
            assert [r.expire_at_ms for r in moved.lookup_jobs(Q, [(1, a), (1, b), (1, c)], False)] == [
                T0 + 10,
                T0 + 5000,
                T0 + 9000,
            ]
            now += 5000
            assert moved.expire_jobs(Q, now, 10) == 1, layout  # the index came along
            assert moved.expired_counts() == {Q: 2 if layout == "compact" else 3}, layout
        finally:
            moved.close()
