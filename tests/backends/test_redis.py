"""Redis-only tests: the original's data layout, evicted hashes, script costs, faults, config.

The behaviour every backend shares is in ``test_conformance.py`` (which runs for kind "redis"
too). Here: what only Redis has. Servers are real redis-server processes on free loopback
ports, one per test (``tests/support/redis_server.py``).
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import redis
from tests.support.redis_server import RedisServer

from pinlater.backends.base import AckItem, CheckpointItem, JobFilter, JobState, NewJob, ShardStore
from pinlater.backends.redis import (
    RedisDriver,
    RedisEndpoint,
    RedisShardConfig,
    RedisStore,
    durability_warnings,
    parse_redis_config,
)
from pinlater.backends.redis import scripts as scripts_module
from pinlater.backends.redis import store as store_module
from pinlater.backends.redis.filtered_reads import page, read_sets
from pinlater.backends.redis.keys import JobField, seconds_arg
from pinlater.backends.redis.scripts import SCRIPT_NAMES, source
from pinlater.config import Settings
from pinlater.errors import ConfigError, ShardConnectionError

Q = "q"
T0 = 1_700_000_000_000
CLAIM = "claim-1:worker:host-a"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    with RedisServer(tmp_path / "redis", appendonly=True, appendfsync="always") as srv:
        yield srv


@pytest.fixture
def raw(server: RedisServer) -> Iterator[redis.Redis]:
    client = server.client()
    yield client
    client.close()


def open_store(server: RedisServer, settings: Settings | None = None) -> RedisStore:
    return RedisStore("1", RedisShardConfig(RedisEndpoint(server.host, server.port), layout="original"), settings)


@pytest.fixture
def store(server: RedisServer) -> Iterator[RedisStore]:
    shard = open_store(server)
    shard.create_queue(Q, 3)
    yield shard
    shard.close()


def text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def zset(raw: redis.Redis, key: str) -> dict[str, float]:
    pairs: list[tuple[bytes, float]] = raw.zrange(key, 0, -1, withscores=True)  # type: ignore[assignment]
    return {text(member): score for member, score in pairs}


def job_hash(raw: redis.Redis, local_id: int) -> dict[str, str]:
    fields: dict[bytes, bytes] = raw.hgetall(f"plh_1_{Q}.{local_id}")  # type: ignore[assignment]
    return {text(k): text(v) for k, v in fields.items()}


def all_keys(raw: redis.Redis) -> set[str]:
    """Every key of the original layout (the shard's layout record, ``pll:{S}``, left out)."""
    return {text(k) for k in raw.keys("*")} - {"pll:{1}"}


def evalsha_calls(raw: redis.Redis) -> int:
    stats = raw.info("commandstats")
    assert "cmdstat_eval" not in stats, "scripts must run by EVALSHA"
    return int(stats.get("cmdstat_evalsha", {}).get("calls", 0))


# -- the original layout ------------------------------------------------------------------------


@pytest.mark.redis
def test_layout_after_enqueue_dequeue_and_ack(store: RedisStore, raw: redis.Redis) -> None:
    jobs = [NewJob(1, b"one", T0, 1, "s1"), NewJob(1, b"two", T0, 3), NewJob(2, b"later", T0 + 5000, 2)]
    a, b, c = store.enqueue_jobs(Q, jobs, T0 - 1000)
    assert raw.get(f"plj_1_{Q}") == b"3"
    assert zset(raw, "pln_1").keys() == {Q}
    assert zset(raw, f"plq_1_{Q}.p1_s0") == {str(a): T0 / 1000, str(b): T0 / 1000}
    assert zset(raw, f"plq_1_{Q}.p2_s0") == {str(c): (T0 + 5000) / 1000}
    assert job_hash(raw, a) == {
        "bd": "one",
        "al": "1",
        "ar": "1",
        "ca": "1699999999.0",
        "ua": "1699999999.0",
        "cs": "s1",
    }

    store.dequeue_jobs(Q, 1, 10, CLAIM, T0 + 1, False)
    assert zset(raw, f"plq_1_{Q}.p1_s0") == {}
    assert zset(raw, f"plq_1_{Q}.p1_s1") == {str(a): 1_700_000_000.001, str(b): 1_700_000_000.001}
    assert job_hash(raw, a)["cd"] == CLAIM
    assert job_hash(raw, a)["ua"] == "1700000000.001"

    store.ack_jobs(Q, [AckItem(1, a, "ok")], [AckItem(1, b, "x", retry_delay_ms=2500)], T0 + 2)
    assert zset(raw, f"plq_1_{Q}.p1_s2") == {str(a): 1_700_000_000.002}
    assert zset(raw, f"plq_1_{Q}.p1_s0") == {str(b): 1_700_000_002.502}  # retry at now + delay
    assert job_hash(raw, a) == {
        "bd": "one", "al": "1", "ar": "1", "ca": "1699999999.0", "ua": "1700000000.002", "cs": "s1ok", "cd": CLAIM,
    }  # fmt: skip
    assert job_hash(raw, b)["ar"] == "2"
    assert "cd" not in job_hash(raw, b)

    store.dequeue_jobs(Q, 1, 10, CLAIM, T0 + 3000, False)
    store.resurrect_timed_out_jobs(Q, 1, T0 + 3001, 10, T0 + 4000)  # 2 attempts left: back to pending
    store.dequeue_jobs(Q, 1, 10, CLAIM, T0 + 4000, False)
    store.ack_jobs(Q, [], [AckItem(1, b)], T0 + 5000)  # the last attempt: FAILED
    assert zset(raw, f"plq_1_{Q}.p1_s3") == {str(b): 1_700_000_005.0}
    assert job_hash(raw, b)["ar"] == "0"
    assert all_keys(raw) == {
        "pln_1", f"plj_1_{Q}", f"plq_1_{Q}.p1_s2", f"plq_1_{Q}.p1_s3", f"plq_1_{Q}.p2_s0",
        f"plh_1_{Q}.{a}", f"plh_1_{Q}.{b}", f"plh_1_{Q}.{c}",
    }  # fmt: skip


RES = "~r|host:1:abcd"


@pytest.mark.redis
def test_layout_of_the_brokers_holds(store: RedisStore, raw: redis.Redis) -> None:
    a, b = store.enqueue_jobs(Q, [NewJob(1, b"a", T0 - 10, 2), NewJob(1, b"b", T0 - 5, 2)], T0 - 20)
    before = job_hash(raw, a)
    store.reserve_jobs(Q, 1, 5, RES, T0, 20_000)
    # out of PENDING, in the held set with its run after, expiry and holder beside it
    assert zset(raw, f"plq_1_{Q}.p1_s0") == {}
    assert zset(raw, f"plq_1_{Q}.p1_h") == {str(a): (T0 - 10) / 1000, str(b): (T0 - 5) / 1000}
    assert zset(raw, f"plq_1_{Q}.p1_x") == {str(a): (T0 + 20_000) / 1000, str(b): (T0 + 20_000) / 1000}
    assert raw.hgetall(f"plq_1_{Q}.p1_o") == {str(a).encode(): RES.encode(), str(b).encode(): RES.encode()}
    assert job_hash(raw, a) == before  # the hash is not touched
    assert store.claim_reserved(Q, [(1, a, CLAIM)], RES, T0 + 1) == [(1, a)]
    assert zset(raw, f"plq_1_{Q}.p1_s1") == {str(a): (T0 + 1) / 1000}
    assert job_hash(raw, a)["cd"] == CLAIM
    assert zset(raw, f"plq_1_{Q}.p1_h") == {str(b): (T0 - 5) / 1000}
    assert raw.hkeys(f"plq_1_{Q}.p1_o") == [str(b).encode()]
    # the monitor returns a lapsed hold to PENDING, in its old place, when nothing else runs
    assert store.resurrect_timed_out_jobs(Q, 1, T0, 10, T0 + 20_000) == 0
    assert zset(raw, f"plq_1_{Q}.p1_s0") == {str(b): (T0 - 5) / 1000}
    assert not raw.exists(f"plq_1_{Q}.p1_h", f"plq_1_{Q}.p1_x", f"plq_1_{Q}.p1_o")
    store.reserve_jobs(Q, 1, 5, RES, T0 + 20_000, 20_000)
    store.delete_queue(Q)
    assert all_keys(raw) == {f"plj_1_{Q}"}  # the id counter is kept


@pytest.mark.redis
@pytest.mark.parametrize("newest_first", [False, True])
def test_scan_pages_merge_held_jobs_in_redis_order(store: RedisStore, raw: redis.Redis, newest_first: bool) -> None:
    rng = random.Random(7)
    now = T0
    for _ in range(6):  # held jobs land among pending ones: later enqueues run before them
        store.enqueue_jobs(Q, [NewJob(1, b"x", now - rng.randrange(30), 2) for _ in range(12)], now)
        store.reserve_jobs(Q, 1, rng.randrange(1, 6), RES, now, 60_000)
        now += 3
    held = zset(raw, f"plq_1_{Q}.p1_h")
    pending = zset(raw, f"plq_1_{Q}.p1_s0")
    assert len(held) > 5 and len(pending) > 30
    merged = sorted([*held.items(), *pending.items()], key=lambda m: (m[1], m[0]), reverse=newest_first)
    sets = read_sets(store._shard.keys(Q), JobFilter(JobState.PENDING, 1, now))
    high = seconds_arg(now - 10)
    in_range = [m for m in merged if m[1] <= float(high)]
    for count in (1, 3, 8):
        for offset in range(len(in_range) + 2):
            got = page(store._shard, Q, sets, "-inf", high, offset, count, False, newest_first)
            want = in_range[offset : offset + count]
            assert (got.evicted, got.looked, got.last) == (0, len(want), offset + count > len(in_range))
            assert [(text(r[0]), float(r[1])) for r in got.rows] == want, (offset, count)


@pytest.mark.redis
def test_reads_and_runs_jobs_written_by_the_original(server: RedisServer, raw: redis.Redis) -> None:
    # What the original server wrote (Java's Double.toString gives 1.7000000001E9 notation).
    raw.zadd("pln_1", {"legacy": 1.4e9})
    raw.set("plj_1_legacy", 41)
    raw.hset("plh_1_legacy.40", mapping={"bd": "old body", "al": "3", "ar": "3", "ca": "1.69999999E9",
                                         "ua": "1.69999999E9", "cs": ""})  # fmt: skip
    raw.zadd("plq_1_legacy.p1_s0", {"40": 1_699_999_990.5})
    raw.hset("plh_1_legacy.41", mapping={"bd": "busy", "al": "2", "ar": "2", "ca": "1.6999999E9",
                                         "ua": "1.7E9", "cs": "note", "cd": "c:1:old-host"})  # fmt: skip
    raw.zadd("plq_1_legacy.p2_s1", {"41": 1.7e9})
    store = open_store(server)
    try:
        assert store.get_queue_names() == {"legacy"}
        [pending, busy] = store.lookup_jobs("legacy", [(1, 40), (2, 41)], True)
        assert (pending.state, pending.body, pending.attempts_remaining) == (JobState.PENDING, b"old body", 3)
        assert (pending.created_at_ms, pending.run_after_ms) == (1_699_999_990_000, 1_699_999_990_500)
        assert (busy.state, busy.claim_descriptor, busy.custom_status) == (JobState.IN_PROGRESS, "c:1:old-host", "note")
        assert store.count_jobs("legacy", JobFilter(JobState.PENDING, 1, T0), None) == 1
        [job] = store.dequeue_jobs("legacy", 1, 10, CLAIM, T0, False)
        assert (job.local_id, job.body, job.attempts_allowed) == (40, b"old body", 3)
        store.ack_jobs("legacy", [AckItem(1, 40, "done")], [], T0)
        assert store.lookup_jobs("legacy", [(1, 40)], False)[0].state == JobState.SUCCEEDED
        assert store.checkpoint_jobs("legacy", [CheckpointItem(2, 41, T0, move_to_pending=True)], "old-host", T0) == 1
        assert store.enqueue_jobs("legacy", [NewJob(1, b"new", T0, 1)], T0) == [42]  # the counter carries on
    finally:
        store.close()


@pytest.mark.redis
def test_dequeue_takes_equal_run_afters_in_id_order(store: RedisStore) -> None:
    ids = store.enqueue_jobs(Q, [NewJob(1, b"x", T0, 1) for _ in range(25)], T0)  # "10" < "9" as text
    assert [job.local_id for job in store.dequeue_jobs(Q, 1, 12, CLAIM, T0, True)] == ids[:12]
    assert [job.local_id for job in store.dequeue_jobs(Q, 1, 12, CLAIM, T0, False)] == ids[:12]
    assert [job.local_id for job in store.dequeue_jobs(Q, 1, 12, CLAIM, T0, False)] == ids[12:24]


@pytest.mark.redis
def test_a_huge_group_of_equal_run_afters_keeps_redis_order(store: RedisStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store_module, "MAX_TIES_REORDERED", 5)  # bounds the work per dequeue
    store.enqueue_jobs(Q, [NewJob(1, b"x", T0, 1) for _ in range(12)], T0)
    claimed = store.dequeue_jobs(Q, 1, 3, CLAIM, T0, False)
    assert [job.local_id for job in claimed] == [1, 10, 11]  # members sort as text in Redis


# -- evicted hashes -----------------------------------------------------------------------------


@pytest.mark.redis
def test_evicted_hashes_are_removed_and_counted(store: RedisStore, raw: redis.Redis) -> None:
    ids = store.enqueue_jobs(Q, [NewJob(1, b"job%d" % i, T0, 2) for i in range(6)], T0)
    raw.delete(f"plh_1_{Q}.{ids[0]}", f"plh_1_{Q}.{ids[1]}")
    raw.delete(f"plh_1_{Q}.{ids[2]}")
    raw.hset(f"plh_1_{Q}.{ids[2]}", mapping={"cs": "x", "ua": "1.0"})  # what the original's ack re-created

    assert store.dequeue_jobs(Q, 1, 3, CLAIM, T0, True) == []  # a dry run skips them and changes nothing
    assert store.evicted_jobs == 0
    claimed = store.dequeue_jobs(Q, 1, 2, CLAIM, T0, False)
    assert [job.local_id for job in claimed] == ids[3:5]  # evicted ones skipped, others taken instead
    assert store.evicted_jobs == 3
    assert str(ids[0]).encode() not in raw.zrange(f"plq_1_{Q}.p1_s0", 0, -1)
    assert not raw.exists(f"plh_1_{Q}.{ids[2]}")

    raw.delete(f"plh_1_{Q}.{ids[3]}")  # evicted while in progress
    store.ack_jobs(Q, [AckItem(1, ids[3])], [], T0)
    assert store.evicted_jobs == 4
    assert raw.zcard(f"plq_1_{Q}.p1_s1") == 1 and raw.zcard(f"plq_1_{Q}.p1_s2") == 0

    raw.delete(f"plh_1_{Q}.{ids[5]}")
    assert store.lookup_jobs(Q, [(1, ids[5])], True) == []
    assert store.scan_jobs(Q, JobFilter(JobState.PENDING, 1, T0), 10) == []
    assert store.evicted_jobs == 5
    raw.delete(f"plh_1_{Q}.{ids[4]}")
    resurrected = store.resurrect_timed_out_jobs(Q, 1, T0 + 1, 10, T0 + 1)
    assert (resurrected, resurrected.evicted) == (0, 1), "the monitor's {queue}_timeout_evict"
    assert store.evicted_jobs == 6
    assert raw.zcard(f"plq_1_{Q}.p1_s1") == 0


# -- scripts ------------------------------------------------------------------------------------


def lua_files() -> dict[str, str]:
    folder = resources.files("pinlater.backends.redis").joinpath("lua")
    return {
        p.name.removesuffix(".lua"): p.read_text(encoding="utf-8") for p in folder.iterdir() if p.name.endswith(".lua")
    }


@pytest.mark.redis
def test_every_lua_file_loads_on_a_real_server(raw: redis.Redis) -> None:
    files = lua_files()
    assert set(files) == set(SCRIPT_NAMES)
    for name in files:
        assert raw.script_load(source(name)), name  # with its includes


def test_includes_are_expanded() -> None:
    assert "--@include holds" in lua_files()["reserve_jobs"]
    expanded = source("reserve_jobs")
    assert not scripts_module.INCLUDE.search(expanded)
    assert "local function sweep_lapsed(" in expanded


def test_lua_files_have_headers_and_use_only_known_fields() -> None:
    known = {v for k, v in vars(JobField).items() if k.isupper()}
    for name, text in lua_files().items():
        assert text.startswith(f"--[[ {name}:"), f"{name}.lua: the header names the script first"
        assert "KEYS[1]" in text.split("]]")[0] and "Returns" in text.split("]]")[0], f"{name}.lua: header"
        used = set(re.findall(r"'([a-z]{2})'", text))
        assert used <= known, f"{name}.lua uses unknown hash fields {used - known}"
        assert not re.search(r"'pl[qhjn]_", text), f"{name}.lua hard-codes a key name"


@pytest.mark.redis
def test_a_batch_costs_one_script_call(store: RedisStore, raw: redis.Redis) -> None:
    store.enqueue_jobs(Q, [NewJob(1, b"warm-up", T0, 1)], T0)  # the first call may have loaded the script
    store.dequeue_jobs(Q, 1, 1, CLAIM, T0, False)
    store.ack_jobs(Q, [AckItem(1, 1)], [], T0)
    raw.config_resetstat()
    jobs = [NewJob(1 + i % 3, b"x" * 100, T0, 2) for i in range(300)]
    ids = store.enqueue_jobs(Q, jobs, T0)
    assert evalsha_calls(raw) == 1
    claimed = [store.dequeue_jobs(Q, p, 1000, CLAIM, T0, False) for p in (1, 2, 3)]
    assert evalsha_calls(raw) == 4
    assert sum(len(c) for c in claimed) == 300
    by_priority = dict(zip(ids, [job.priority for job in jobs], strict=True))
    store.ack_jobs(
        Q, [AckItem(by_priority[i], i) for i in ids[:150]], [AckItem(by_priority[i], i) for i in ids[150:]], T0
    )
    assert evalsha_calls(raw) == 5
    assert store.count_jobs(Q, JobFilter(JobState.SUCCEEDED, 1, T0 + 1), None) == 50 + 1  # and the warm-up


@pytest.mark.redis
def test_scripts_reload_after_script_flush(store: RedisStore, raw: redis.Redis) -> None:
    store.enqueue_jobs(Q, [NewJob(1, b"a", T0, 1)], T0)
    raw.script_flush()
    assert store.enqueue_jobs(Q, [NewJob(1, b"b", T0, 1)], T0) == [2]


@pytest.mark.redis
def test_checkpoint_source_is_a_plain_substring(store: RedisStore) -> None:
    [local_id] = store.enqueue_jobs(Q, [NewJob(1, b"a", T0, 1)], T0)
    store.dequeue_jobs(Q, 1, 1, "c:worker:host-(%a", T0, False)
    item = CheckpointItem(1, local_id, T0, new_body=b"b")
    assert store.checkpoint_jobs(Q, [item], ".", T0) == 0  # a Lua pattern would match anything
    assert store.checkpoint_jobs(Q, [item], "host-(%a", T0) == 1  # and this is a malformed pattern


@pytest.mark.redis
def test_custom_status_is_cut_by_characters(store: RedisStore) -> None:
    limit = store.custom_status_limit
    [local_id] = store.enqueue_jobs(Q, [NewJob(1, b"a", T0, 1, "a" * (limit - 1))], T0)
    store.dequeue_jobs(Q, 1, 1, CLAIM, T0, False)
    store.ack_jobs(Q, [AckItem(1, local_id, "ééé")], [], T0)
    assert store.lookup_jobs(Q, [(1, local_id)], False)[0].custom_status == "a" * (limit - 1) + "é"


@pytest.mark.redis
def test_body_regex_pages_through_many_candidates(store: RedisStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store_module, "REGEX_PAGE_SIZE", 7)
    store.enqueue_jobs(Q, [NewJob(1, b"even" if i % 2 == 0 else b"odd", T0 + i, 1) for i in range(40)], T0)
    every = JobFilter(JobState.PENDING, 1, T0 + 100, body_regex="^even$")
    assert store.count_jobs(Q, every, None) == 20
    assert store.count_jobs(Q, every, 5) == 5
    scanned = store.scan_jobs(Q, every, 9)
    assert [job.run_after_ms for job in scanned] == [T0 + i for i in range(38, 20, -2)]
    assert store.delete_jobs(Q, JobFilter(JobState.PENDING, 1, T0, None, "^even$"), 13) == 13
    assert store.delete_jobs(Q, JobFilter(JobState.PENDING, 1, T0, None, "^even$"), 100) == 7
    assert store.count_jobs(Q, JobFilter(JobState.PENDING, 1, T0, None), None) == 20


@pytest.mark.redis
@pytest.mark.parametrize("newest_first", [False, True])
def test_a_page_with_bodies_stops_at_its_byte_budget(store: RedisStore, raw: redis.Redis, newest_first: bool) -> None:
    rng = random.Random(5)
    sizes: dict[str, int] = {}
    now = T0
    for _ in range(5):  # held jobs among pending ones, as in the test above
        jobs = [NewJob(1, b"b" * rng.randrange(1, 30), now - rng.randrange(20), 2) for _ in range(8)]
        for local_id, job in zip(store.enqueue_jobs(Q, jobs, now), jobs, strict=True):
            sizes[str(local_id)] = len(job.body)
        store.reserve_jobs(Q, 1, rng.randrange(1, 4), RES, now, 60_000)
        now += 3
    sets = read_sets(store._shard.keys(Q), JobFilter(JobState.PENDING, 1, now))
    merged = sorted(
        [*zset(raw, f"plq_1_{Q}.p1_h").items(), *zset(raw, f"plq_1_{Q}.p1_s0").items()],
        key=lambda m: (m[1], m[0]),
        reverse=newest_first,
    )
    for count in (1, 4, 9):
        for budget in (1, 25, 60):
            for offset in range(len(merged) + 1):
                got = page(store._shard, Q, sets, "-inf", "+inf", offset, count, True, newest_first, budget)
                want = merged[offset : offset + count]
                n, taken = 0, 0
                while n < len(want) and (n == 0 or taken < budget):
                    taken += sizes[want[n][0]]
                    n += 1
                assert [(text(r[0]), float(r[1])) for r in got.rows] == want[:n], (count, budget, offset)
                assert [len(r[8]) for r in got.rows] == [sizes[m[0]] for m in want[:n]]
                assert (got.evicted, got.looked, got.last) == (0, n, n == len(want) < count)


@pytest.mark.redis
def test_body_regex_pages_of_large_bodies_stay_within_the_byte_budget(
    store: RedisStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    budget = 3 << 20
    monkeypatch.setattr(store_module, "REGEX_PAGE_BYTES", budget)
    rng = random.Random(11)
    bodies: dict[int, bytes] = {}
    run_after: dict[int, int] = {}
    jobs = []
    for i in range(30):  # up to 1 MiB each, some small; run afters in ties of three
        size = rng.choice([rng.randrange(16, 1024), rng.randrange(1 << 18, (1 << 20) + 1)])
        jobs.append(NewJob(1, (b"keep" if rng.random() < 0.5 else b"drop") + b"." * size, T0 + i // 3, 1))
    for local_id, job in zip(store.enqueue_jobs(Q, jobs, T0), jobs, strict=True):
        bodies[local_id], run_after[local_id] = job.body, job.run_after_ms
    store.reserve_jobs(Q, 1, 4, RES, T0 + 100, 60_000)  # the four oldest are held: still PENDING
    oldest_first = sorted(bodies, key=lambda j: (run_after[j], str(j)))  # Redis' order: ties by id as text
    keep = [j for j in oldest_first if bodies[j].startswith(b"keep")]
    assert 8 < len(keep) < 22

    fetched: list[list[tuple[int, int]]] = []  # each scan_jobs page: (id, body length) per row
    run_in_queue = store._shard.run_in_queue

    def spy(script: str, queue: str, keys: Any, args: Any) -> Any:
        out = run_in_queue(script, queue, keys, args)
        if script == "scan_jobs" and args[6] == "1":  # with bodies
            # rows of 11 values (the body 9th; store.scan_jobs, filtered_reads.pages)
            end = len(out) - (2 if len(args) > 9 else 0)  # a scan from a point ends with the next point
            fetched.append([(int(out[i]), len(out[i + 8])) for i in range(3, end, 11)])
        return out

    monkeypatch.setattr(store._shard, "run_in_queue", spy)

    def seen_once() -> list[int]:
        """The ids of the pages fetched since the last call, checking each page's bytes."""
        for rows in fetched:
            assert rows, "every page moves on"
            assert sum(size for _, size in rows[:-1]) < budget  # so within the budget plus one body
        seen = [local_id for rows in fetched for local_id, _ in rows]
        assert len(seen) == len(set(seen)), "no row is fetched twice"
        fetched.clear()
        return seen

    every = JobFilter(JobState.PENDING, 1, T0 + 1000, body_regex="^keep")
    assert store.count_jobs(Q, every, None) == len(keep)
    assert seen_once() == oldest_first
    assert store.count_jobs(Q, every, 3) == 3
    seen_once()
    assert {job.local_id for job in store.scan_jobs(Q, every, 5)} == set(keep[-5:])
    seen = seen_once()  # newest first, up to the page holding the fifth match
    assert seen == oldest_first[::-1][: len(seen)] and keep[-5] in seen

    anytime = JobFilter(JobState.PENDING, 1, T0, None, "^keep")
    assert store.delete_jobs(Q, anytime, 4) == 4
    seen = seen_once()
    assert seen == oldest_first[: len(seen)] and keep[3] in seen
    left = oldest_first[:]
    for local_id in keep[:4]:
        left.remove(local_id)
    assert store.delete_jobs(Q, anytime, 100) == len(keep) - 4
    assert seen_once() == left  # every remaining job once, though rows went between pages
    unfiltered = store.scan_jobs(Q, JobFilter(JobState.PENDING, 1, T0 + 1000), 100)
    assert {job.local_id for job in unfiltered} == set(oldest_first) - set(keep)


@pytest.mark.redis
def test_delete_queue_deletes_in_batches_and_keeps_the_counter(
    store: RedisStore, raw: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_module, "DELETE_QUEUE_BATCH", 4)
    store.create_queue("other", 3)
    store.enqueue_jobs("other", [NewJob(1, b"keep", T0, 1)], T0)
    ids = store.enqueue_jobs(Q, [NewJob(1 + i % 3, b"x", T0, 1) for i in range(30)], T0)
    store.dequeue_jobs(Q, 1, 5, CLAIM, T0, False)
    store.ack_jobs(Q, [AckItem(1, i) for i in ids[:6]], [], T0)
    store.delete_queue(Q)
    assert store.get_queue_names() == {"other"}
    assert all_keys(raw) == {"pln_1", f"plj_1_{Q}", "plj_1_other", "plq_1_other.p1_s0", "plh_1_other.1"}


# -- faults -------------------------------------------------------------------------------------


@pytest.mark.redis
def test_a_killed_server_raises_shard_connection_error_and_recovers(server: RedisServer) -> None:
    store = open_store(server, Settings(backend_socket_timeout_seconds=1.0))
    try:
        store.create_queue(Q, 3)
        [local_id] = store.enqueue_jobs(Q, [NewJob(1, b"durable", T0, 1)], T0)
        server.kill()
        calls: list[Callable[[], object]] = [
            store.ping,
            lambda: store.enqueue_jobs(Q, [NewJob(1, b"x", T0, 1)], T0),
            lambda: store.dequeue_jobs(Q, 1, 1, CLAIM, T0, False),
            lambda: store.get_queue_names(),
        ]
        for call in calls:
            with pytest.raises(ShardConnectionError) as info:
                call()
            assert info.value.shard == "1"
        server.restart()  # same port; appendfsync always kept the job; the script cache is empty
        [job] = store.dequeue_jobs(Q, 1, 1, CLAIM, T0, False)
        assert (job.local_id, job.body) == (local_id, b"durable")
    finally:
        store.close()


@pytest.mark.redis
def test_pool_uses_the_settings(server: RedisServer) -> None:
    store = open_store(server, Settings(backend_connections_per_shard=3, backend_socket_timeout_seconds=2.5))
    try:
        pool = store.client.connection_pool
        assert pool.max_connections == 3
        assert pool.connection_kwargs["socket_timeout"] == 2.5
        assert isinstance(store, ShardStore)
    finally:
        store.close()


# -- durability ---------------------------------------------------------------------------------


@pytest.mark.redis
def test_durability_warnings(tmp_path: Path) -> None:
    with RedisServer(tmp_path / "safe", appendonly=True, appendfsync="always") as safe:
        store = open_store(safe)
        assert durability_warnings(store) == []
        store.client.config_set("maxmemory-policy", "allkeys-lru")
        store.client.config_set("appendfsync", "no")
        warnings = durability_warnings(store)
        assert len(warnings) == 2
        assert all(w.startswith(f"redis shard 1 (127.0.0.1:{safe.port})") for w in warnings)
        assert "appendfsync is no" in warnings[0] and "allkeys-lru" in warnings[1]
        store.close()
    with RedisServer(tmp_path / "unsafe") as unsafe:
        store = open_store(unsafe)
        [warning] = durability_warnings(store)
        assert "appendonly is no" in warning
        unsafe.kill()
        [warning] = durability_warnings(store)
        assert "did not answer" in warning
        store.close()


# -- config -------------------------------------------------------------------------------------

ORIGINAL_CONFIG = """
{"shards": [
  {"name": "1", "shardConfig": {"master": {"host": "10.0.0.1", "port": 6379},
                                "slave": {"host": "10.0.0.2", "port": 6380}}},
  {"name": "2", "shardConfig": {"master": {"host": "10.0.0.3", "port": 6379}, "dequeueOnly": true}}
]}
"""


def test_parse_the_original_config() -> None:
    shards = parse_redis_config(ORIGINAL_CONFIG, "redis.json")
    assert shards == {
        "1": RedisShardConfig(RedisEndpoint("10.0.0.1", 6379), RedisEndpoint("10.0.0.2", 6380)),
        "2": RedisShardConfig(RedisEndpoint("10.0.0.3", 6379), dequeue_only=True),
    }
    assert not shards["1"].dequeue_only and shards["2"].dequeue_only
    # dequeue_only is compared separately: flipping it keeps the open store
    assert shards["2"] == RedisShardConfig(RedisEndpoint("10.0.0.3", 6379), dequeue_only=False)
    assert RedisDriver().parse_config(ORIGINAL_CONFIG, "redis.json") == shards
    assert RedisDriver.kind == "redis"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("{", "not valid JSON"),
        ("[]", "must be a JSON object"),
        ('{"shards": {}}', "must be a list"),
        ('{"shards": [{"name": "1"}]}', "missing 'shardConfig'"),
        ('{"shards": [{"name": "a:b", "shardConfig": {"master": {"host": "h", "port": 1}}}]}', "letters, digits"),
        ('{"shards": [{"name": "1", "shardConfig": {"master": {"host": "h", "port": 0}}}]}', "port must be"),
        ('{"shards": [{"name": "1", "shardConfig": {"master": {"host": "h"}}}]}', "missing 'port'"),
        ('{"shards": [{"name": "1", "shardConfig": {"master": {"host": "h", "port": 1}, "dequeueonly": true}}]}',
         "unknown field(s) 'dequeueonly'"),
        ('{"shards": [{"name": "1", "shardConfig": {"master": {"host": "h", "port": 1}, "dequeueOnly": "yes"}}]}',
         "true or false"),
        ('{"shards": [{"name": "1", "shardConfig": {"master": {"host": "h", "port": 1}}},'
         ' {"name": "1", "shardConfig": {"master": {"host": "h", "port": 2}}}]}', "appears twice"),
    ],
)  # fmt: skip
def test_a_bad_config_names_the_file_and_the_reason(text: str, reason: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_redis_config(text, "/etc/pinlater/redis.json")
    message = str(info.value)
    assert message.startswith("/etc/pinlater/redis.json: ") and reason in message and "\n" not in message


@pytest.mark.redis
def test_driver_opens_a_store(server: RedisServer) -> None:
    config = (
        f'{{"shards": [{{"name": "7", "shardConfig": {{"master": {{"host": "127.0.0.1", "port": {server.port}}}}}}}]}}'
    )
    driver = RedisDriver()
    shards = driver.parse_config(config, "redis.json")
    store = driver.open_store("7", shards["7"], Settings())
    try:
        assert isinstance(store, RedisStore) and store.name == "7"
        store.ping()
    finally:
        store.close()
