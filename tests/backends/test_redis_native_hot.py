"""The Redis store's native hot path (``NativeHotPath`` over ``HotClient``): commands packed in
Rust, replies read in Rust, on the store's own pipelined asyncio connection.

Against a real redis-server it must agree with the blocking ``RedisStore`` (same commands byte
for byte, same jobs, same effects, same errors), survive a restart, and pipeline; against a fake
server on loopback (a raw socket speaking just enough RESP) it must fail cleanly, never hang and
never send an enqueue twice.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import random
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from tests.support.redis_server import RedisServer, free_port
from tests.support.wait import wait_for

from pinlater._pinlater import (
    AckGroup,
    ClaimedJobs,
    ClaimItems,
    KeyedJobBatch,
    LocalIds,
    NewJobBatch,
    RedisErrorReply,
    RedisScriptTail,
    redis_ack_command,
    redis_claim_command,
    redis_claimed_reply,
    redis_claimed_split,
    redis_dequeue_command,
    redis_enqueue_command,
    redis_enqueue_keyed_command,
    redis_keyed_placement,
    redis_pack_command,
    redis_reply_end,
    redis_require_queue_command,
)
from pinlater.backends.base import (
    DEQUEUE_BYTES,
    AckItem,
    ClaimedJob,
    JobFilter,
    JobState,
    KeyedJob,
    NewJob,
    QueueRules,
    sort_keyed,
)
from pinlater.backends.pressure import StoreMemoryFullError
from pinlater.backends.redis import RedisEndpoint, RedisShardConfig, RedisStore, dedup, reservations
from pinlater.backends.redis.hot_client import HotClient, Splitter, _Broken, _Connection, script_sha
from pinlater.backends.redis.native_hot import NativeHotPath
from pinlater.backends.redis.rules import GROUPS, build_tail
from pinlater.backends.redis.script_calls import ScriptCall
from pinlater.backends.redis.scripts import source
from pinlater.config import Settings
from pinlater.errors import QueueNotFoundError, ShardConnectionError

pytestmark = pytest.mark.redis

Q = "native"
NOW = 1_700_000_000_123
TIMEOUT = 1.0


def settings(timeout: float = TIMEOUT) -> Settings:
    return Settings().with_values({"backend_socket_timeout_seconds": timeout}, source="test")


def packed(call: ScriptCall[Any], sha: str) -> bytes:
    """What today's redis.asyncio path sends for ``call`` (``PackedConnection.pack_command``)."""
    return redis_pack_command(("EVALSHA", sha, len(call.keys), *call.keys, *call.args))


def batch(jobs: list[NewJob]) -> NewJobBatch:
    return NewJobBatch([(j.priority, j.body, j.run_after_ms, j.attempts_allowed, j.custom_status) for j in jobs])


def acks(succeeded: list[AckItem], failed: list[AckItem]) -> AckGroup:
    def items(group: list[AckItem]) -> list[tuple[int, int, str, int]]:
        return [(a.priority, a.local_id, a.append_custom_status, a.retry_delay_ms) for a in group]

    return AckGroup(items(succeeded), items(failed))


def claimed(jobs: ClaimedJobs) -> list[ClaimedJob]:
    return [ClaimedJob._make(t) for t in jobs.to_list()]


# -- the commands, byte for byte ----------------------------------------------------------------


@pytest.fixture
def offline_store() -> Iterator[RedisStore]:
    """A store nobody connects to: building calls needs no server."""
    store = RedisStore("s_1", RedisShardConfig(RedisEndpoint("127.0.0.1", free_port()), layout="original"), settings())
    yield store
    store.close()


@pytest.fixture(params=["original", "compact"])
def layout_store(request: pytest.FixtureRequest) -> Iterator[RedisStore]:
    """``offline_store`` in each layout."""
    endpoint = RedisEndpoint("127.0.0.1", free_port())
    store = RedisStore("s_1", RedisShardConfig(endpoint, layout=request.param), settings())
    yield store
    store.close()


def test_the_commands_are_todays_byte_for_byte(layout_store: RedisStore) -> None:
    """Byte for byte what the Python store sends, in either layout; in the compact one a batch
    alike but for its bodies, and successes of one priority with no status, go as uniform calls
    (one argument a job), and the rounds send both kinds."""
    layout = "compact" if layout_store.layout.compact else "original"
    kinds: set[tuple[str, bool]] = set()
    rng = random.Random(15)
    times = [0, 1, -1, 999, 1000, 1001, 12_345, 10**12, NOW, -NOW, 2**53 + 1, 2**63 - 1, -(2**63)]
    times += [rng.randrange(-(10**18), 10**18) for _ in range(200)]
    times += [rng.randrange(0, 10**6) for _ in range(200)]
    statuses = ["", "ok", "é" * 2999 + "ü€", "x" * 5000, "\u00e9\r\n\x00"]
    sha = script_sha("enqueue_jobs")
    for queue in ("q", "a_long_queue_Name_9"):
        for round_ in range(20):
            n = rng.choice([0, 1, 3, 100])
            jobs = [
                NewJob(
                    priority=rng.randint(1, 5),
                    body=rng.randbytes(rng.choice([0, 10, 100])),
                    run_after_ms=rng.choice(times),
                    attempts_allowed=rng.choice([0, 1, 10, 2**40]),
                    custom_status=rng.choice(statuses),
                )
                for _ in range(n)
            ]
            if round_ % 2 and jobs:  # alike but for their bodies
                jobs = [jobs[0]._replace(body=job.body) for job in jobs]
            now = times[round_]
            call = layout_store._enqueue_call(queue, jobs, now)
            kinds.add(("enqueue", str(call.args[3]).startswith("u")))
            assert redis_enqueue_command(sha, "s_1", queue, batch(jobs), now, layout) == packed(call, sha)

            for dry_run in (False, True):
                budget = rng.choice((1, 4096, DEQUEUE_BYTES))
                call = layout_store._dequeue_call(queue, 3, 100, "claim|é", now, dry_run, budget)
                got = redis_dequeue_command(sha, "s_1", queue, 3, 100, "claim|é", now, dry_run, budget, layout)
                assert got == packed(call, sha)

            def item() -> AckItem:
                return AckItem(rng.randint(1, 4), rng.randrange(1, 2**62), rng.choice(statuses), rng.choice(times[:12]))

            ok, failed = [item() for _ in range(rng.randint(0, 20))], [item() for _ in range(rng.randint(0, 20))]
            if round_ % 2:  # successes of one priority with no status
                ok, failed = [a._replace(priority=2, append_custom_status="") for a in ok], []
            call_ack = layout_store._ack_call(queue, ok, failed, now)
            kinds.add(("ack", str(call_ack.args[4]).startswith("u")))
            tail = layout_store.rules.native(queue, GROUPS)  # the compact layout's group keys
            got_ack = redis_ack_command(sha, "s_1", queue, acks(ok, failed), now, layout, tail)
            assert got_ack == packed(call_ack, sha)

        for n in (1000, 1001):  # a uniform call holds at most UNIFORM_MAX_JOBS jobs
            alike = [NewJob(1, b"x", NOW, 3, "")] * n
            call = layout_store._enqueue_call(queue, alike, NOW)
            assert str(call.args[3]).startswith("u") == (layout == "compact" and n == 1000)
            assert redis_enqueue_command(sha, "s_1", queue, batch(alike), NOW, layout) == packed(call, sha)
            successes = [AckItem(1, i + 1, "", 0) for i in range(n)]
            call_ack = layout_store._ack_call(queue, successes, [], NOW)
            assert str(call_ack.args[4]).startswith("u") == (layout == "compact" and n == 1000)
            tail = layout_store.rules.native(queue, GROUPS)
            assert redis_ack_command(sha, "s_1", queue, acks(successes, []), NOW, layout, tail) == packed(call_ack, sha)
        require = layout_store._dequeue_call(queue, 1, 0, "c", NOW, False)
        assert redis_require_queue_command(sha, "s_1", queue, layout) == packed(require, sha)
    uniform = layout == "compact"
    assert kinds == {("enqueue", uniform), ("enqueue", False), ("ack", uniform), ("ack", False)}


@pytest.mark.parametrize("layout", ["original", "compact"])
def test_the_keyed_enqueue_command_is_the_python_builders_byte_for_byte(layout: str) -> None:
    """``redis_enqueue_keyed_command`` packs what ``dedup.enqueue_keyed_call`` builds for the
    request's jobs less the repeats of a dedup key, and ``redis_keyed_placement`` gives each
    repeat its first job's place."""
    store = RedisStore("s_1", RedisShardConfig(RedisEndpoint("127.0.0.1", free_port()), layout=layout), settings())
    try:
        rng = random.Random(17)
        sha = script_sha("enqueue_keyed_jobs")
        uniform: set[bool] = set()  # whether each call was a uniform one
        statuses = ["", "ok", "é" * 2999 + "ü€", "x" * 5000]
        windows = [0, 1, -5, 2**62, dedup.HELD_FOREVER_MS]
        for round_ in range(45):
            now = rng.choice([0, 999, NOW, 2**52])
            n = rng.choice([0, 1, 7, 100])
            jobs = [
                NewJob(
                    rng.randint(1, 4),
                    rng.randbytes(rng.choice([0, 10])),
                    rng.choice([now, now + 1500, 3]),
                    3,
                    rng.choice(statuses),
                )
                for _ in range(n)
            ]
            keys = [
                (
                    rng.choice([None, "k1", "k2", f"key-{i}", "ключ"]),
                    rng.choice(windows),
                    rng.choice([None, "g1", f"group-{i % 3}"]),
                    rng.choice([None, NOW + 60_000]),
                )
                for i in range(n)
            ]
            if round_ % 3 == 0:  # jobs alike but for body, key and group: a uniform call
                jobs = [job._replace(priority=jobs[0].priority, run_after_ms=jobs[0].run_after_ms) for job in jobs]
                jobs = [job._replace(custom_status=jobs[0].custom_status) for job in jobs]
                has_group = rng.random() < 0.5
                window = rng.choice(windows)
                keys = [(f"key-{i}", window, f"group-{i % 3}" if has_group else None, None) for i in range(n)]
            keyed = KeyedJobBatch([tuple(j) for j in jobs], keys)
            _, _, repeats = sort_keyed(keys)
            sent = [i for i in range(n) if i not in dict(repeats)]
            m = max([4, *(j.priority for j in jobs)])
            names = store._keys("q")
            tail = build_tail(names, QueueRules(group_concurrency=2), GROUPS, m) if round_ % 2 else ([], [])
            key_list, args = dedup.enqueue_keyed_call(
                names, "q", [KeyedJob(jobs[i], *keys[i]) for i in sent], now, m, tail
            )
            want = redis_pack_command(("EVALSHA", sha, len(key_list), *key_list, *args))
            native_tail = RedisScriptTail(tail[0], [str(a) for a in tail[1]]) if tail[0] or tail[1] else None
            got = redis_enqueue_keyed_command(
                sha,
                dedup.enqueue_keyed_keys(names, m),
                "q",
                names.jobs_arg,
                now,
                m,
                dedup.keys_per_priority(names),
                dedup.HELD_FOREVER_MS,
                keyed,
                native_tail,
                dedup.takes_uniform_calls(names),
            )
            assert got == want
            uniform.add(bool(sent) and str(args[3]).startswith("u"))

            answers = [(rng.randint(1, 4), rng.randrange(1, 2**40), rng.randint(0, 1)) for _ in sent]
            placement, beyond = redis_keyed_placement(keyed, LocalIds([v for a in answers for v in a]), -2)
            assert placement is not None and beyond == 0
            placed = placement.to_list()
            for i, answer in zip(sent, answers, strict=True):
                assert placed[i] == (answer[0], answer[1], answer[2] == 1)
            for i, j in repeats:
                assert placed[i] == (placed[j][0], placed[j][1], True)
        assert uniform == ({True, False} if layout == "compact" else {False})
        one = KeyedJobBatch([(1, b"b", 0, 3, "")], [("k", 0, None, None)])
        assert redis_keyed_placement(one, LocalIds([-2, 7]), -2) == (None, 7)
        with pytest.raises(ValueError, match="4 values for 1 jobs"):
            redis_keyed_placement(one, LocalIds([1, 2, 0, 9]), -2)
    finally:
        store.close()


def test_the_broker_claim_command_is_todays_byte_for_byte(offline_store: RedisStore) -> None:
    """``redis_claim_command`` packs a ``ClaimItems`` as ``reservations.claim_call`` does: groups
    of consecutive jobs sharing a priority and a claim."""
    rng = random.Random(16)
    sha = script_sha("claim_reserved")
    for _ in range(300):
        items: list[tuple[int, int, str]] = []
        for _run in range(rng.choice([1, 2, 5])):
            claim = rng.choice(["w|1", "w|2", "é|3"])
            items += [(rng.choice([1, 1, 2, 3]), rng.randrange(1, 2**62), claim) for _ in range(rng.randint(1, 30))]
        now = rng.choice([NOW, 0, 1001, rng.randrange(0, 10**13)])
        want = packed(reservations.claim_call(offline_store._shard, "q_2", items, "~r|h:1:ab", now), sha)
        assert redis_claim_command(sha, "s_1", "q_2", ClaimItems(items), "~r|h:1:ab", now) == want


def test_script_shas_are_what_redis_names_them(server: RedisServer) -> None:
    client = server.client()
    for name in ("enqueue_jobs", "dequeue_jobs", "ack_jobs", "count_jobs", "reserve_jobs", "claim_reserved"):
        assert client.script_load(source(name)) == script_sha(name)
        assert script_sha(name) == hashlib.sha1(source(name).encode()).hexdigest()


# -- against a real server ------------------------------------------------------------------------


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    with RedisServer(tmp_path / "redis", appendonly=True, appendfsync="always") as srv:
        yield srv


@pytest.fixture
def store(server: RedisServer) -> Iterator[RedisStore]:
    shard = RedisStore("1", RedisShardConfig(RedisEndpoint(server.host, server.port), layout="original"), settings())
    shard.create_queue(Q, 3)
    shard.create_queue("blocking", 3)
    yield shard
    shard.close()


def run(store: RedisStore, body: Callable[[NativeHotPath], Awaitable[Any]]) -> Any:
    """``body(hot path)`` on a fresh event loop, the store's connections closed after."""

    async def main() -> Any:
        try:
            return await body(store.hot_path(None))  # type: ignore[arg-type]  # offload unused
        finally:
            await store.aclose()

    return asyncio.run(main())


def test_the_lifecycle_agrees_with_the_blocking_store(store: RedisStore) -> None:
    jobs = [
        NewJob(priority=p, body=b"job-%d" % i, run_after_ms=NOW - 1000 + (i % 3), attempts_allowed=1 + i % 3)
        for i, p in enumerate([2, 1, 1, 3, 2, 1, 1, 2])
    ]
    jobs.append(NewJob(priority=1, body=b"later", run_after_ms=NOW + 60_000, attempts_allowed=2, custom_status="s"))

    async def lifecycle(hot: NativeHotPath) -> dict[str, Any]:
        out: dict[str, Any] = {"ids": (await hot.enqueue_jobs(Q, batch(jobs), NOW)).to_list()}
        out["dry"] = claimed(await hot.dequeue_jobs(Q, 1, 10, "w|1", NOW, True))
        out["p1"] = claimed(await hot.dequeue_jobs(Q, 1, 3, "w|1", NOW, False))
        out["p2"] = claimed(await hot.dequeue_jobs(Q, 2, 10, "w|1", NOW + 5, False))
        out["none"] = claimed(await hot.dequeue_jobs(Q, 2, 0, "w|1", NOW, False))
        ok = [AckItem(1, out["p1"][0].local_id, "|done")]
        failed = [AckItem(2, j.local_id, "|boom", 5000) for j in out["p2"]]
        await hot.ack_jobs(Q, acks(ok, failed), NOW + 10)
        out["again"] = claimed(await hot.dequeue_jobs(Q, 1, 10, "w|2", NOW + 20, False))
        return out

    native = run(store, lifecycle)

    # The same calls through the blocking store, on a queue of their own (ids count per queue).
    b = "blocking"
    want: dict[str, Any] = {"ids": store.enqueue_jobs(b, jobs, NOW)}
    want["dry"] = store.dequeue_jobs(b, 1, 10, "w|1", NOW, True)
    want["p1"] = store.dequeue_jobs(b, 1, 3, "w|1", NOW, False)
    want["p2"] = store.dequeue_jobs(b, 2, 10, "w|1", NOW + 5, False)
    want["none"] = store.dequeue_jobs(b, 2, 0, "w|1", NOW, False)
    ok = [AckItem(1, want["p1"][0].local_id, "|done")]
    store.ack_jobs(b, ok, [AckItem(2, j.local_id, "|boom", 5000) for j in want["p2"]], NOW + 10)
    want["again"] = store.dequeue_jobs(b, 1, 10, "w|2", NOW + 20, False)

    assert native == want
    assert native["ids"] == list(range(1, 10))
    assert [j.local_id for j in native["p1"]] == [7, 2, 3], "run after, then id"
    assert len(native["again"]) == 1

    keys = [(j.priority, i) for j, i in zip(jobs, native["ids"], strict=True)]
    got = store.lookup_jobs(Q, keys, True)
    expected = store.lookup_jobs(b, keys, True)
    assert got == expected
    states = {r.local_id: r for r in got}
    acked = states[native["p1"][0].local_id]
    assert acked.state == JobState.SUCCEEDED and acked.custom_status == "|done"
    failed_ids = {j.local_id for j in native["p2"]}
    assert {states[i].state for i in failed_ids} <= {JobState.PENDING, JobState.FAILED}
    assert any(states[i].run_after_ms == NOW + 10 + 5000 for i in failed_ids), "a retry at now + delay"


def test_the_broker_reserve_agrees_with_the_blocking_store(store: RedisStore) -> None:
    """The broker's refill reads the reserve script's reply in Rust, as dequeue's: the same jobs
    in the same (run after, id) order as the blocking store's reserve, the same holds."""
    jobs = [
        NewJob(priority=p, body=b"job-%d" % i, run_after_ms=NOW - 1000 + (i % 3), attempts_allowed=1 + i % 3)
        for i, p in enumerate([2, 1, 1, 3, 2, 1, 1, 2])
    ]
    hold = 20_000

    async def reserve(hot: NativeHotPath) -> list[list[ClaimedJob]]:
        await hot.enqueue_jobs(Q, batch(jobs), NOW)
        out = [claimed(await hot.reserve_jobs(Q, 1, 3, "~r|a", NOW, hold))]
        out.append(claimed(await hot.reserve_jobs(Q, 1, 10, "~r|b", NOW + 1, hold)))  # the rest
        out.append(claimed(await hot.reserve_jobs(Q, 1, 10, "~r|a", NOW + 2, hold)))  # none left
        out.append(claimed(await hot.reserve_jobs(Q, 2, 0, "~r|a", NOW + 2, hold)))
        with pytest.raises(QueueNotFoundError):
            await hot.reserve_jobs("nope", 1, 5, "~r|a", NOW, hold)
        with pytest.raises(QueueNotFoundError):
            await hot.reserve_jobs("nope", 1, 0, "~r|a", NOW, hold)
        return out

    native = run(store, reserve)
    b = "blocking"
    store.enqueue_jobs(b, jobs, NOW)
    want = [
        store.reserve_jobs(b, 1, 3, "~r|a", NOW, hold),
        store.reserve_jobs(b, 1, 10, "~r|b", NOW + 1, hold),
        store.reserve_jobs(b, 1, 10, "~r|a", NOW + 2, hold),
        store.reserve_jobs(b, 2, 0, "~r|a", NOW + 2, hold),
    ]
    assert native == want
    assert [len(r) for r in native] == [3, 1, 0, 0]
    assert [j.local_id for j in native[0]] == [7, 2, 3], "run after, then id"
    # held, not claimed: still PENDING, and a claim under the holder's reservation takes them
    pending = JobFilter(JobState.PENDING, 1, NOW + 3)
    assert store.count_jobs(Q, pending, None) == 4

    async def claim(hot: NativeHotPath) -> list[list[int]]:
        # a's three and b's one, under a's reservation: only a's are claimed
        items = [(1, j.local_id, "w|1") for j in native[0]] + [(1, native[1][0].local_id, "w|2")]
        out = [await hot.claim_reserved(Q, ClaimItems(items), "~r|a", NOW + 3)]
        out.append(await hot.claim_reserved(Q, ClaimItems(items), "~r|a", NOW + 4))  # sent again
        with pytest.raises(QueueNotFoundError):
            await hot.claim_reserved("nope", ClaimItems(items), "~r|a", NOW + 4)
        return out

    # b's job is not claimed; sent again (its reply lost), the call answers a's three as claimed
    # (IN_PROGRESS under their claims), not b's
    assert run(store, claim) == [[3], [3]]
    found = store.lookup_jobs(Q, [(1, j.local_id) for j in native[0] + native[1]], False)
    assert [(r.state, r.claim_descriptor) for r in found] == [(JobState.IN_PROGRESS, "w|1")] * 3 + [
        (JobState.PENDING, None)
    ]


def test_a_missing_queue_raises_queue_not_found(store: RedisStore) -> None:
    async def each(hot: NativeHotPath) -> list[str]:
        calls = [
            hot.enqueue_jobs("nope", batch([NewJob(1, b"x", NOW, 1)]), NOW),
            hot.dequeue_jobs("nope", 1, 5, "c", NOW, False),
            hot.dequeue_jobs("nope", 1, 0, "c", NOW, False),
            hot.ack_jobs("nope", acks([AckItem(1, 1)], []), NOW),
        ]
        seen = []
        for call in calls:
            with pytest.raises(QueueNotFoundError) as info:
                await call
            seen.append(str(info.value))
        return seen

    assert len(run(store, each)) == 4


def test_evicted_jobs_are_counted(store: RedisStore, server: RedisServer) -> None:
    ids = store.enqueue_jobs(Q, [NewJob(1, b"a", NOW, 1), NewJob(1, b"b", NOW, 1)], NOW)
    server.client().delete(f"plh_1_{Q}.{ids[0]}")

    async def dequeue(hot: NativeHotPath) -> list[ClaimedJob]:
        return claimed(await hot.dequeue_jobs(Q, 1, 5, "c", NOW, False))

    got = run(store, dequeue)
    assert [j.local_id for j in got] == [ids[1]]
    assert store.evicted_jobs == 1


def test_oom_raises_store_memory_full(store: RedisStore, server: RedisServer) -> None:
    admin = server.client()
    admin.config_set("maxmemory-policy", "noeviction")
    admin.config_set("maxmemory", "1")

    async def enqueue(hot: NativeHotPath) -> None:
        await hot.enqueue_jobs(Q, batch([NewJob(1, b"x" * 100, NOW, 1)]), NOW)

    try:
        with pytest.raises(StoreMemoryFullError):
            run(store, enqueue)
        with pytest.raises(StoreMemoryFullError):  # the blocking store agrees
            store.enqueue_jobs(Q, [NewJob(1, b"x" * 100, NOW, 1)], NOW)
    finally:
        admin.config_set("maxmemory", "0")
    assert store.count_jobs(Q, JobFilter(priority=1, state=JobState.PENDING, now_ms=NOW), None) == 0


def test_a_flushed_script_is_loaded_again(store: RedisStore, server: RedisServer) -> None:
    async def twice(hot: NativeHotPath) -> list[int]:
        first = (await hot.enqueue_jobs(Q, batch([NewJob(1, b"a", NOW, 1)]), NOW)).to_list()
        server.client().script_flush()
        second = (await hot.enqueue_jobs(Q, batch([NewJob(1, b"b", NOW, 1)]), NOW)).to_list()
        return first + second

    assert run(store, twice) == [1, 2]


def test_a_flushed_script_is_loaded_again_for_an_ack_and_dequeue(store: RedisStore, server: RedisServer) -> None:
    async def after_flush(hot: NativeHotPath) -> tuple[list[int], list[int]]:
        ids = (await hot.enqueue_jobs(Q, batch([NewJob(1, b"a", NOW, 2), NewJob(1, b"b", NOW, 2)]), NOW)).to_list()
        first = claimed(await hot.dequeue_jobs(Q, 1, 1, "c1", NOW, False))
        server.client().script_flush()
        failed = acks([], [AckItem(1, first[0].local_id)])
        again = claimed(await hot.ack_and_dequeue_jobs(Q, failed, 1, 5, "c2", NOW))
        return ids, [j.local_id for j in again]

    ids, again = run(store, after_flush)
    assert sorted(again) == ids, "the failed job was retried before the claim, which took both"


def test_a_restart_is_survived_and_the_connection_named(store: RedisStore, server: RedisServer) -> None:
    async def across(hot: NativeHotPath) -> list[int]:
        before = ours(server)
        first = (await hot.enqueue_jobs(Q, batch([NewJob(1, b"a", NOW, 1)]), NOW)).to_list()
        assert ours(server) == before + 1, "one connection, named as the pools name theirs"
        server.kill()
        server.restart()
        # The idle connection is dead: seen before the enqueue is written, so it is sent once
        # on a new connection and succeeds.
        second = (await hot.enqueue_jobs(Q, batch([NewJob(1, b"b", NOW, 1)]), NOW)).to_list()
        jobs = claimed(await hot.dequeue_jobs(Q, 1, 10, "c", NOW, False))
        return first + second + [j.local_id for j in jobs]

    assert run(store, across) == [1, 2, 1, 2]


def test_an_ack_and_dequeue_on_a_connection_dead_while_idle_go_again_on_a_new_one(
    store: RedisStore, server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    async def across(hot: NativeHotPath) -> tuple[list[int], int, list[int]]:
        jobs = [NewJob(1, b"a", NOW, 1), NewJob(1, b"b", NOW, 1)]
        ids = (await hot.enqueue_jobs(Q, batch(jobs), NOW)).to_list()
        first = claimed(await hot.dequeue_jobs(Q, 1, 1, "c", NOW, False))[0].local_id
        server.kill()
        server.restart()
        # A pair is written without polling the idle connection first (both may run again):
        # the write or its reply finds it dead, and the pair goes again on a new connection.
        pair = await hot.ack_and_dequeue_jobs(Q, acks([AckItem(1, first)], []), 1, 5, "c2", NOW)
        return ids, first, [j.local_id for j in claimed(pair)]

    with caplog.at_level(logging.INFO, logger="pinlater.backends.redis.hot_client"):
        ids, first, again = run(store, across)
    assert first == ids[0] and again == [ids[1]], "the other job claimed, the acked one not again"
    (record,) = store.lookup_jobs(Q, [(1, first)], False)
    assert record.state == JobState.SUCCEEDED
    assert "ack_jobs and dequeue_jobs again one by one" in caplog.text, "the pair was written first"


async def until_written(hot: NativeHotPath) -> None:
    """Until the hot client has a command on the wire with no reply yet (it writes as it sends,
    so this takes a loop step or two)."""
    for _ in range(1000):
        conn = hot._client._conn
        if conn is not None and conn._waiters:
            return
        await asyncio.sleep(0)
    raise AssertionError("nothing was written")


@pytest.mark.parametrize("operation", ["enqueue", "dequeue"])
def test_a_restart_mid_call_never_repeats_an_enqueue(store: RedisStore, server: RedisServer, operation: str) -> None:
    store.enqueue_jobs(Q, [NewJob(1, b"old", NOW, 1)], NOW)

    async def across(hot: NativeHotPath) -> Any:
        await hot.dequeue_jobs(Q, 2, 1, "c", NOW, False)  # connected, scripts loaded
        server.client().client_pause(20_000)  # Redis holds what comes
        call: asyncio.Future[Any]
        if operation == "enqueue":
            call = asyncio.ensure_future(hot.enqueue_jobs(Q, batch([NewJob(1, b"new", NOW, 1)]), NOW))
        else:
            call = asyncio.ensure_future(hot.dequeue_jobs(Q, 1, 5, "c", NOW, False))
        await until_written(hot)
        server.kill()  # with the command read or not: it was written
        server.restart()
        try:
            return claimed(await call)
        except ShardConnectionError as exc:
            return exc

    result = run(store, across)
    pending = store.count_jobs(Q, JobFilter(priority=1, state=JobState.PENDING, now_ms=NOW), None)
    if operation == "enqueue":
        assert isinstance(result, ShardConnectionError) and result.maybe_applied
        assert pending == 1, "the enqueue was not sent again to the restarted server"
    else:
        assert [j.body for j in result] == [b"old"], "repeated once, on a fresh connection"


def ours(server: RedisServer) -> int:
    return sum(1 for c in server.client().client_list() if c["name"] == "pinlater-shard-1")


def test_a_dead_server_fails_with_shard_connection_error(store: RedisStore, server: RedisServer) -> None:
    async def dead(hot: NativeHotPath) -> ShardConnectionError:
        await hot.dequeue_jobs(Q, 1, 1, "c", NOW, False)
        server.kill()
        with pytest.raises(ShardConnectionError) as info:
            await hot.enqueue_jobs(Q, batch([NewJob(1, b"a", NOW, 1)]), NOW)
        return info.value

    error = run(store, dead)
    assert error.shard == "1" and not error.maybe_applied, "nothing was written: the connect failed"


def test_many_concurrent_calls_pipeline_on_one_connection(store: RedisStore, server: RedisServer) -> None:
    async def burst(hot: NativeHotPath) -> tuple[list[int], list[int]]:
        before = ours(server)
        enqueues = [hot.enqueue_jobs(Q, batch([NewJob(1, b"%d" % i, NOW, 1)] * 3), NOW) for i in range(200)]
        ids = [i for got in await asyncio.gather(*enqueues) for i in got.to_list()]
        assert ours(server) == before + 1, "one connection, pipelined"
        dequeues = [hot.dequeue_jobs(Q, 1, 7, "c", NOW, False) for _ in range(100)]
        got = [j.local_id for batch_ in await asyncio.gather(*dequeues) for j in claimed(batch_)]
        return ids, got

    ids, got = run(store, burst)
    assert sorted(ids) == list(range(1, 601))
    assert sorted(got) == list(range(1, 601)), "every job claimed once"


# -- against a fake server ------------------------------------------------------------------------


def _bulks(command: bytes) -> list[bytes]:
    """The arguments of one RESP command (an array of bulk strings)."""
    lines = command.split(b"\r\n", 1)
    n, rest, args = int(lines[0][1:]), lines[1], []
    for _ in range(n):
        head, rest = rest.split(b"\r\n", 1)
        size = int(head[1:])
        args.append(rest[:size])
        rest = rest[size + 2 :]
    return args


Behaviour = Callable[[int, list[bytes]], Awaitable[bytes | None]]
"""(connection number, EVALSHA arguments) -> bytes to answer, or None to close the connection."""


class FakeRedis:
    """A loopback server that answers the client's set-up as Redis does and each EVALSHA as
    ``behaviour`` says; it records every EVALSHA it read."""

    def __init__(self, behaviour: Behaviour, refuse_from: int | None = None) -> None:
        self.behaviour = behaviour
        self.evalshas: list[tuple[int, bytes]] = []  # (connection number, script sha)
        self.connections = 0
        #: connections numbered from this one are closed at once, before the client's set-up
        self.refuse_from = refuse_from
        self.server: asyncio.Server | None = None

    async def start(self) -> RedisShardConfig:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return RedisShardConfig(RedisEndpoint("127.0.0.1", port), layout="original")

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        number, buf = self.connections, b""
        try:
            if self.refuse_from is not None and number >= self.refuse_from:
                return
            while True:
                end = redis_reply_end(buf, 0, 1 << 30) if buf else -1
                if end < 0:
                    data = await reader.read(65536)
                    if not data:
                        return
                    buf += data
                    continue
                args, buf = _bulks(buf[:end]), buf[end:]
                if args[0] in (b"CLIENT", b"SET"):  # SET: the layout record the store writes
                    writer.write(b"+OK\r\n")
                elif args[0] == b"HELLO":  # redis-py's blocking pool speaks RESP3
                    writer.write(b"%1\r\n+proto\r\n:3\r\n")
                elif args[0] == b"GET":  # no layout record yet
                    writer.write(b"$-1\r\n")
                elif args[0] == b"EXISTS":  # no queue of either layout
                    writer.write(b":0\r\n")
                elif args[0] == b"SCAN":  # no id counter of a deleted queue either
                    writer.write(b"*2\r\n$1\r\n0\r\n*0\r\n")
                elif args[0] == b"SCRIPT":
                    sha = hashlib.sha1(args[2]).hexdigest().encode()
                    writer.write(b"$40\r\n" + sha + b"\r\n")
                else:
                    self.evalshas.append((number, args[1]))
                    answer = await self.behaviour(number, args)
                    if answer is None:
                        writer.close()
                        return
                    writer.write(answer)
                await writer.drain()
        except ConnectionError:
            return
        finally:
            writer.close()

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()


def fake_run(
    behaviour: Behaviour,
    body: Callable[[NativeHotPath], Awaitable[Any]],
    timeout: float = 0.5,
    refuse_from: int | None = None,
) -> Any:
    """``body`` against a ``FakeRedis``; returns (body's result or exception, the fake)."""

    async def main() -> tuple[Any, FakeRedis]:
        fake = FakeRedis(behaviour)
        config = await fake.start()
        # Opening reads the shard's layout record over a blocking connection: from a thread, so
        # the fake (on this loop) can answer it.
        store = await asyncio.to_thread(RedisStore, "f", config, settings(timeout))
        fake.connections = 0  # the tests number the hot path's connections from 1
        fake.refuse_from = refuse_from
        try:
            hot = store.hot_path(None)  # type: ignore[arg-type]  # offload unused
            try:
                result: Any = await asyncio.wait_for(body(hot), 10)
            except Exception as exc:  # the tests look at the exception
                result = exc
            await store.aclose()
            return result, fake
        finally:
            store.close()
            await fake.stop()

    return asyncio.run(main())


async def enqueue_one(hot: NativeHotPath) -> Any:
    return (await hot.enqueue_jobs(Q, batch([NewJob(1, b"x", NOW, 1)]), NOW)).to_list()


async def dequeue_some(hot: NativeHotPath) -> Any:
    return claimed(await hot.dequeue_jobs(Q, 1, 5, "c", NOW, False))


def answer(data: bytes) -> Behaviour:
    async def behaviour(_n: int, _args: list[bytes]) -> bytes | None:
        return data

    return behaviour


@pytest.mark.parametrize(
    "reply",
    [
        b"?garbage\r\n",
        b"+OK\r\n",  # RESP, but not the script's reply
        b"*2\r\n$1\r\nx\r\n$1\r\ny\r\n",  # an array of the wrong things
        b"$99999999999\r\n",  # announces more than a reply may be
        b"*1\r\n" * 20,  # nested too deep
        b":12\r\n:13\r\n",  # a second reply nobody asked for
    ],
)
def test_garbage_from_the_server_is_a_connection_error(reply: bytes) -> None:
    error, fake = fake_run(answer(reply), enqueue_one)
    assert isinstance(error, ShardConnectionError), error
    assert error.maybe_applied, "the command was written"
    assert len(fake.evalshas) == 1, "an enqueue is never sent twice"


def test_a_claim_written_then_lost_may_have_been_applied_though_its_repeat_never_left() -> None:
    """A broker's claim written, its connection closed before the answer, and the repeat's
    connection refused: the error says the claim may have landed (the first attempt wrote it).
    The repeat's own failure had said it did not, and the broker withheld the jobs, which ran at
    no worker's hands until their claim timed out and took an attempt (FAILED, if their last)."""

    async def close(_n: int, _args: list[bytes]) -> bytes | None:
        return None

    async def claim(hot: NativeHotPath) -> Any:
        return await hot.claim_reserved(Q, ClaimItems([(1, 1, "w|1")]), "~r|a", NOW)

    error, fake = fake_run(close, claim, refuse_from=2)
    assert isinstance(error, ShardConnectionError), error
    assert error.maybe_applied, "the first attempt wrote the claim"
    assert [n for n, _ in fake.evalshas] == [1], "repeated on a fresh connection, which was refused"


def test_a_reply_that_never_ends_times_out() -> None:
    error, fake = fake_run(answer(b"*8\r\n:0\r\n$1\r\n1"), dequeue_some, timeout=0.3)
    assert isinstance(error, ShardConnectionError), error
    assert "Timeout" in error.detail
    assert len(fake.evalshas) == 1, "a timeout is not repeated"


def test_a_close_mid_reply_repeats_a_dequeue_once_but_never_an_enqueue() -> None:
    async def half_then_close(_n: int, _args: list[bytes]) -> bytes | None:
        return None  # close without answering

    error, fake = fake_run(half_then_close, enqueue_one)
    assert isinstance(error, ShardConnectionError) and error.maybe_applied
    assert [n for n, _ in fake.evalshas] == [1], "never repeated once written"

    error, fake = fake_run(half_then_close, dequeue_some)
    assert isinstance(error, ShardConnectionError) and error.maybe_applied
    assert [n for n, _ in fake.evalshas] == [1, 2], "repeated once, on a fresh connection"

    async def close_first(n: int, _args: list[bytes]) -> bytes | None:
        return None if n == 1 else b"*2\r\n:0\r\n:0\r\n"

    result, fake = fake_run(close_first, dequeue_some)
    assert result == [] and fake.connections == 2


async def ack_and_dequeue(hot: NativeHotPath) -> Any:
    """A dequeue first (the connection up, as it is at a pair's every call but the first), then
    an ack and dequeue, written at once."""
    await dequeue_some(hot)
    return claimed(await hot.ack_and_dequeue_jobs(Q, acks([AckItem(1, 7)], []), 1, 5, "c", NOW))


def test_an_ack_and_dequeue_lost_with_its_connection_are_sent_again_one_by_one() -> None:
    # the first dequeue's, then (the pair is lost) the ack's and the dequeue's
    answers = iter([b"*2\r\n:0\r\n:0\r\n", None, b"*2\r\n:1\r\n:0\r\n", b"*2\r\n:0\r\n:0\r\n"])

    async def behaviour(_n: int, _args: list[bytes]) -> bytes | None:
        return next(answers)

    result, fake = fake_run(behaviour, ack_and_dequeue)
    assert result == [] and fake.connections == 2
    assert [n for n, _ in fake.evalshas] == [1, 1, 2, 2], "both again, in order, on a fresh connection"
    shas = [sha for _, sha in fake.evalshas]
    assert shas[1] == shas[2] != shas[3] == shas[0], "the ack first, then the dequeue"


def test_a_failed_ack_of_a_pair_is_raised_and_the_connection_stays_in_step() -> None:
    no_jobs = b"*2\r\n:0\r\n:0\r\n"
    answers = iter([no_jobs, b"-ERR Error running script: boom\r\n", no_jobs, no_jobs])

    async def behaviour(_n: int, _args: list[bytes]) -> bytes | None:
        return next(answers)

    async def pair_then_dequeue(hot: NativeHotPath) -> Any:
        with pytest.raises(redis.ResponseError, match="boom"):
            await ack_and_dequeue(hot)
        return await dequeue_some(hot)

    result, fake = fake_run(behaviour, pair_then_dequeue)
    assert result == [], result
    assert fake.connections == 1 and len(fake.evalshas) == 4, "the pair's dequeue answer was read"


async def enqueue_and_reserve(hot: NativeHotPath) -> Any:
    """A dequeue first (the connection up), then an enqueue with a reserve written behind it."""
    await dequeue_some(hot)
    ids, reserved = await hot.enqueue_and_reserve_jobs(Q, batch([NewJob(1, b"x", NOW, 1)]), NOW, 1, 10, "r", 5_000)
    return ids.to_list(), None if reserved is None else claimed(reserved)


def test_an_enqueue_and_its_reserve_are_answered_together() -> None:
    answers = iter([b"*2\r\n:0\r\n:0\r\n", b"*1\r\n:41\r\n", dequeue_reply(41, b"x")])

    async def behaviour(_n: int, _args: list[bytes]) -> bytes | None:
        return next(answers)

    (ids, reserved), fake = fake_run(behaviour, enqueue_and_reserve)
    assert ids == [41] and [job.local_id for job in reserved] == [41]
    assert [sha for _, sha in fake.evalshas[1:]] == [script_sha(s).encode() for s in ("enqueue_jobs", "reserve_jobs")]
    assert fake.connections == 1


def test_an_enqueue_lost_with_its_reserve_behind_it_is_never_sent_again() -> None:
    answers = iter([b"*2\r\n:0\r\n:0\r\n", None])  # the connection closes on reading the enqueue

    async def behaviour(_n: int, _args: list[bytes]) -> bytes | None:
        return next(answers)

    error, fake = fake_run(behaviour, enqueue_and_reserve)
    assert isinstance(error, ShardConnectionError) and error.maybe_applied, error
    assert [n for n, _ in fake.evalshas] == [1, 1], "written once, never repeated"


def test_a_failed_reserve_behind_an_enqueue_is_no_error_and_the_connection_stays_in_step() -> None:
    no_jobs = b"*2\r\n:0\r\n:0\r\n"
    answers = iter([no_jobs, b"*1\r\n:41\r\n", b"-ERR Error running script: boom\r\n", no_jobs])

    async def behaviour(_n: int, _args: list[bytes]) -> bytes | None:
        return next(answers)

    async def pair_then_dequeue(hot: NativeHotPath) -> Any:
        assert await enqueue_and_reserve(hot) == ([41], None), "the enqueue's ids; nothing reserved"
        return await dequeue_some(hot)

    result, fake = fake_run(behaviour, pair_then_dequeue)
    assert result == [], result
    assert fake.connections == 1 and len(fake.evalshas) == 4


@pytest.mark.parametrize(
    ("reply", "kind"),
    [
        (b"-OOM command not allowed when used memory > 'maxmemory'.\r\n", StoreMemoryFullError),
        (b"-LOADING Redis is loading the dataset in memory\r\n", ShardConnectionError),
        (b"-BUSY Redis is busy running a script.\r\n", ShardConnectionError),
        (b"-MISCONF Errors writing to the AOF file\r\n", ShardConnectionError),
        (b"-READONLY You can't write against a read only replica.\r\n", ShardConnectionError),
        (b"-TRYAGAIN Multiple keys request during rehashing of slot\r\n", ShardConnectionError),
        (b"-ERR Error running script: boom\r\n", redis.ResponseError),
    ],
)
def test_error_replies_map_as_on_the_pool(reply: bytes, kind: type[Exception]) -> None:
    error, fake = fake_run(answer(reply), enqueue_one)
    assert isinstance(error, kind), error
    assert len(fake.evalshas) == 1
    if kind is redis.ResponseError:
        assert str(error) == "Error running script: boom", "as redis-py words it"


def test_the_fake_answers_a_good_enqueue() -> None:
    result, fake = fake_run(answer(b"*1\r\n:41\r\n"), enqueue_one)
    assert result == [41]
    assert fake.evalshas == [(1, script_sha("enqueue_jobs").encode())]


class LoopbackTransport(asyncio.Transport):
    """Just enough transport for ``_Connection`` fed by hand: writes are kept, abort noted."""

    def __init__(self) -> None:
        super().__init__()
        self.written: list[bytes] = []
        self.aborted = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written.append(bytes(data))

    def abort(self) -> None:
        self.aborted = True

    def is_closing(self) -> bool:
        return self.aborted


def dequeue_reply(local_id: int, body: bytes, cut: int = 0) -> bytes:
    row = [b"%d" % local_id, b"1700000000.5", body, b"3", b"2", b"1700000000.0", b"1700000001.0"]
    return b"*9\r\n:0\r\n:%d\r\n" % cut + b"".join(b"$%d\r\n%s\r\n" % (len(v), v) for v in row)


def test_pipelined_replies_in_any_pieces_go_to_their_callers_in_order() -> None:
    replies = [dequeue_reply(i, bytes(range(256)) * i) for i in range(1, 30)] + [b"-ERR x\r\n", b":5\r\n"]
    stream = b"".join(replies)
    rng = random.Random(7)

    async def feed(cuts: list[int]) -> list[bytes]:
        conn = _Connection(1 << 20)
        conn.connection_made(LoopbackTransport())
        waiters = [conn.send(b"cmd") for _ in replies]
        for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True):
            conn.data_received(stream[a:b])
        assert conn.broken is None
        return [w.result() for w in waiters]

    for cuts in (
        [],
        list(range(1, len(stream))),  # byte by byte
        sorted(rng.sample(range(1, len(stream)), 50)),
        sorted(rng.sample(range(1, len(stream)), 500)),
    ):
        assert asyncio.run(feed(cuts)) == replies


def test_dequeue_replies_read_as_they_are_split_answer_as_read_after() -> None:
    """A call that reads a dequeue reply (``redis_claimed_split``) gets what reading the reply's
    bytes afterwards gives, in whatever pieces the stream comes; other replies (an error, one the
    parser refuses, one of another call) come as their bytes, and the stream stays in step."""
    bad_al = dequeue_reply(13, b"xy").replace(b"$1\r\n3\r\n", b"$1\r\nq\r\n")
    replies = [dequeue_reply(i, bytes(range(256)) * i, i % 2) for i in range(1, 12)] + [
        b":-1\r\n",
        b"-NOSCRIPT No matching script\r\n",
        b"*3\r\n:0\r\n:0\r\n:1\r\n",  # not 2 + 7 per job
        bad_al,  # a job's attempts allowed that is not a count
        b":5\r\n",  # another call's
        dequeue_reply(9, b""),
    ]
    split_of: list[Splitter | None] = [redis_claimed_split] * len(replies)
    split_of[-2] = None  # the other call reads bytes
    stream = b"".join(replies)
    rng = random.Random(11)

    async def feed(cuts: list[int]) -> list[Any]:
        conn = _Connection(1 << 20)
        conn.connection_made(LoopbackTransport())
        waiters = [conn.send_split(b"cmd", None, split) for split in split_of]
        for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True):
            conn.data_received(stream[a:b])
        assert conn.broken is None
        return [w.result() for w in waiters]

    def as_read(reply: bytes) -> Any:
        try:
            value = redis_claimed_reply(reply)
        except (RedisErrorReply, ValueError):
            return reply  # read after, by the caller, as before
        return None if value is None else (value[0].to_list(), value[0].cut, value[1])

    want = [as_read(r) for r in replies[:-2]] + [replies[-2], as_read(replies[-1])]
    assert want[-1] != replies[-1] and want[11] is None and want[12:15] == replies[12:15], "the cases are what they say"
    assert {w[1] for w in want[:11]} == {False, True}, "cut read both ways"
    for cuts in ([], list(range(1, len(stream))), sorted(rng.sample(range(1, len(stream)), 300))):
        got = asyncio.run(feed(cuts))
        seen = [
            r if isinstance(r, bytes) else (None if r[1] is None else (r[1][0].to_list(), r[1][0].cut, r[1][1]))
            for r in got
        ]
        assert seen == want


def test_a_reply_past_the_limit_breaks_the_connection_and_fails_every_caller() -> None:
    async def feed() -> tuple[list[BaseException | None], bool]:
        conn = _Connection(1000)
        transport = LoopbackTransport()
        conn.connection_made(transport)
        waiters = [conn.send(b"cmd") for _ in range(3)]
        conn.data_received(b":1\r\n")
        conn.data_received(b"$2000\r\n")  # announces more than 1000 bytes
        with pytest.raises(_Broken):
            conn.send(b"more")
        return [w.exception() if not w.cancelled() and w.done() and w.exception() else None for w in waiters], (
            transport.aborted
        )

    errors, aborted = asyncio.run(feed())
    assert errors[0] is None, "the first reply was whole"
    assert all(isinstance(e, _Broken) and "Protocol error" in str(e) for e in errors[1:])
    assert aborted


def test_a_cancelled_call_leaves_the_connection_in_step() -> None:
    seen, gate = asyncio.Event(), asyncio.Event()

    async def slow_first(_n: int, args: list[bytes]) -> bytes | None:
        if args[-4] == b"c0":  # the claim of the first dequeue
            seen.set()
            await gate.wait()
            return b"*2\r\n:0\r\n:0\r\n"
        return dequeue_reply(5, b"b")

    async def body(hot: NativeHotPath) -> Any:
        first = asyncio.ensure_future(hot.dequeue_jobs(Q, 1, 5, "c0", NOW, False))
        await seen.wait()
        second = asyncio.ensure_future(hot.dequeue_jobs(Q, 1, 5, "c1", NOW, False))
        first.cancel()
        gate.set()
        jobs = [j.local_id for j in claimed(await second)]
        assert first.cancelled()
        return jobs

    result, _ = fake_run(slow_first, body)
    assert result == [5]


def test_an_unreachable_server_fails_fast_and_unapplied() -> None:
    config = RedisShardConfig(RedisEndpoint("127.0.0.1", free_port()))
    client = HotClient("x", config, 0.5)

    async def call() -> None:
        await client.call("enqueue_jobs", b"*1\r\n$4\r\nPING\r\n", lambda reply: reply)

    with pytest.raises(ShardConnectionError) as info:
        asyncio.run(call())
    assert not info.value.maybe_applied


def test_each_event_loop_gets_its_connection_and_aclose_closes_it(store: RedisStore, server: RedisServer) -> None:
    hot = store.hot_path(None)  # type: ignore[arg-type]  # offload unused
    before = ours(server)
    made: list[object] = []

    async def once(body: bytes) -> list[int]:
        ids = (await hot.enqueue_jobs(Q, batch([NewJob(1, body, NOW, 1)]), NOW)).to_list()
        assert ours(server) == before + 1
        made.append(hot._client._conn)
        await store.aclose()
        return ids

    assert asyncio.run(once(b"a")) == [1]
    wait_for(lambda: ours(server) == before, what="the connection closed by aclose")
    assert asyncio.run(once(b"b")) == [2]
    wait_for(lambda: ours(server) == before, what="the connection closed by aclose")
    assert made[0] is not made[1], "a new loop, a new connection"
