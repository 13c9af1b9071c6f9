"""``lua_compact/lib/records.lua``: the compact layout's records, packed by concatenation (and by
the scripts' common paths, which build the same bytes inline), run in a real Redis's Lua against
what ``cmsgpack.pack`` of the record's array gives, which is what earlier builds wrote."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import redis
from tests.support.redis_server import RedisServer

from pinlater.backends.base import AckItem, JobFilter, JobState, KeyedJob, NewJob, QueueRules
from pinlater.backends.redis import RedisEndpoint, RedisShardConfig, RedisStore, dedup, scripts

pytestmark = pytest.mark.redis

# ARGV: body, then the other items as Lua literals (a table constructor's fields, in order)
PACK_BOTH = """
local job = loadstring('return ' .. ARGV[2])()
job.bd = ARGV[1]
local items = {job.bd, job.al, job.ar, job.ca, job.ua - job.ca, job.cs or '', job.cd or false}
if job.gr or job.ex then
  items[8], items[9] = job.gr or false, job.gq or false
end
if job.ex then
  items[10] = job.ex
end
local ours = pack_record(job)
local back = unpack_record(ours)
for _, k in ipairs({'bd', 'al', 'ar', 'ca', 'ua', 'cs', 'gr', 'gq', 'ex'}) do
  assert(back[k] == job[k] or (k == 'cs' and job.cs == nil and back.cs == ''), k)
end
assert(back.cd == (job.cd or false), 'cd')
return {ours, cmsgpack.pack(items)}
"""

BODY_LENGTHS = (0, 1, 31, 32, 100, 255, 256, 65_535, 65_536)
NUMBERS = (0, 1, 127, 128, 255, 256, 65_535, 65_536, 2**32, 1_700_000_000_123, -1, -33, -129, -40_000)


@pytest.fixture
def raw(tmp_path: Path) -> Iterator[redis.Redis]:
    with RedisServer(tmp_path / "redis") as server:
        client = server.client()
        yield client
        client.close()


def packed(raw: redis.Redis, body: bytes, fields: str) -> tuple[bytes, bytes]:
    source = scripts._library("lua_compact", "records") + PACK_BOTH
    ours, theirs = raw.eval(source, 0, body, "{" + fields + "}")
    return ours, theirs


def test_a_record_is_packed_to_the_bytes_of_cmsgpack(raw: redis.Redis) -> None:
    for n in BODY_LENGTHS:  # every string header: fixstr, str8, str16, str32
        ours, theirs = packed(raw, b"b" * n, "al = 3, ar = 3, ca = 1700000000000, ua = 1700000000000")
        assert ours == theirs and len(ours) >= n + 8
    for a, b in itertools.product(NUMBERS, repeat=2):  # every integer encoding, in each numeric item
        fields = f"al = {a}, ar = {b}, ca = {b}, ua = {a + b}"
        assert packed(raw, b"x", fields)[0] == packed(raw, b"x", fields)[1], fields


@pytest.mark.parametrize(
    "fields",
    [
        "al = 2, ar = 1, ca = 5, ua = 9, cs = 'done', cd = 'host:1:claim'",
        "al = 2, ar = 1, ca = 5, ua = 4, cs = '" + "s" * 300 + "', cd = false",  # updated before created
        "al = 1, ar = 1, ca = 5, ua = 5, gr = 'tenant-7', gq = 12",
        "al = 1, ar = 1, ca = 5, ua = 5, gr = 'g', gq = 1e15, cd = 'c'",
        "al = 1, ar = 0, ca = 5, ua = 6, ex = 1700000000999",
        "al = 1, ar = 0, ca = 5, ua = 6, gr = 'g', gq = 3, ex = 7",
        "al = 1, ar = 1, ca = 5, ua = 5, cs = 'é ü', cd = 'x'",
    ],
)
def test_records_with_status_claim_group_or_expiry_pack_alike(raw: redis.Redis, fields: str) -> None:
    ours, theirs = packed(raw, b"body", fields)
    assert ours == theirs


def test_the_common_paths_write_the_records_the_general_ones_do(tmp_path: Path) -> None:
    """An enqueue, a claim and a success through the scripts' common paths store byte for byte
    what the general paths store for the same jobs, except that a success appending no status
    keeps its record (a SUCCEEDED job's updated time is its score), and lookups and scans read
    the same jobs either way. Queue "a" takes the common paths; queue "b" the general ones: its
    jobs carry dedup keys (the keyed insert), it has a group rate (the general claim) and its
    ack has a failure (of no job)."""
    with RedisServer(tmp_path / "redis") as server:
        raw = server.client()
        store = RedisStore("1", RedisShardConfig(RedisEndpoint(server.host, server.port), layout="compact"))
        t0 = 1_700_000_000_000
        for queue in ("a", "b"):
            store.create_queue(queue, 1)
        store.set_queue_rules({"b": QueueRules(group_jobs_per_second=1000.0)})
        jobs = [NewJob(1, b"x" * n, t0 - n, 1 + n % 3, "s" * (n % 2)) for n in (0, 5, 40, 300)]
        ids = {"a": store.enqueue_jobs("a", jobs, t0)}
        placed = store.enqueue_keyed_jobs("b", [KeyedJob(job, f"key{i}") for i, job in enumerate(jobs)], t0)
        ids["b"] = [p.local_id for p in placed]
        assert ids["a"] == ids["b"]

        def records(queue: str) -> list[bytes | None]:
            got = list(raw.hmget(f"plc:{{1:{queue}}}:j", [str(i) for i in ids[queue]]))
            if queue == "b":  # b's records end with their keys (dk), a's are the same bytes before it
                got = [without_key(record, f"key{i}") for i, record in enumerate(got)]
            return got

        assert records("a") == records("b") and None not in records("a")
        claimed = {q: store.dequeue_jobs(q, 1, 10, "worker:1", t0 + 5, False) for q in ("a", "b")}
        assert claimed["a"] == claimed["b"] and len(claimed["a"]) == len(jobs)
        assert records("a") == records("b")
        claimed_records = records("a")
        # the first two with a status, the others without: the common path leaves their records
        statuses = ["ok", "ok", "", ""]
        again = AckItem(1, ids["a"][0], "again")  # acked twice in one call: once
        store.ack_jobs("a", [AckItem(1, i, st) for i, st in zip(ids["a"], statuses, strict=True)] + [again], [], t0 + 9)
        failure = AckItem(1, 999)  # of no job
        store.ack_jobs("b", [AckItem(1, i, st) for i, st in zip(ids["b"], statuses, strict=True)], [failure], t0 + 9)
        assert records("a")[:2] == records("b")[:2]
        assert records("a")[2:] == claimed_records[2:] != records("b")[2:]  # b's general path wrote ua
        found = {  # b's jobs have dedup keys besides
            q: [replace(j, dedup_key=None) for j in store.lookup_jobs(q, [(1, i) for i in ids[q]], False)]
            for q in ("a", "b")
        }
        assert found["a"] == found["b"] and {j.updated_at_ms for j in found["a"]} == {t0 + 9}
        scanned = {
            q: [replace(j, dedup_key=None) for j in store.scan_jobs(q, JobFilter(JobState.SUCCEEDED, 1, t0 + 10), 10)]
            for q in ("a", "b")
        }
        assert scanned["a"] == scanned["b"] and {j.updated_at_ms for j in scanned["a"]} == {t0 + 9}
        assert len(scanned["a"]) == len(found["a"]) == len(jobs)
        assert [raw.zrange(f"plc:{{1:{q}}}:p1:s2", 0, -1, withscores=True) for q in "ab"] == [
            [(str(i).encode(), float(t0 + 9)) for i in ids["a"]]
        ] * 2
        assert raw.zcard("plc:{1:a}:p1:s1") == raw.zcard("plc:{1:b}:p1:s1") == 0
        store.close()
        raw.close()


def without_key(record: bytes | None, key: str) -> bytes | None:
    """A compact record of no group and no expiry with dedup key ``key`` (eleven items: three
    falses, then the key) as the record of the same job without the key (seven items)."""
    if record is None:
        return None
    tail = b"\xc2\xc2\xc2" + bytes([0xA0 + len(key)]) + key.encode()
    assert record[0] == 0x9B and record.endswith(tail), record
    return b"\x97" + record[1 : -len(tail)]


def queue_dump(raw: redis.Redis, queue: str) -> dict[bytes, object]:
    """Every key of a compact queue on shard 1 with what it holds, named without the queue."""
    prefix = f"plc:{{1:{queue}}}:".encode()
    out: dict[bytes, object] = {}
    for key in raw.scan_iter(match=prefix + b"*"):
        kind = raw.type(key)
        value: object
        if kind == b"hash":
            value = raw.hgetall(key)
        elif kind == b"zset":
            value = raw.zrange(key, 0, -1, withscores=True)
        elif kind == b"list":
            value = raw.lrange(key, 0, -1)
        else:
            value = raw.get(key)
        out[key[len(prefix) :]] = value
    return out


def held_and_gone(store: RedisStore, queue: str, t0: int) -> None:
    """Queue ``queue`` made, with the key "held" held by a PENDING job, and the key "gone" recorded
    for a deleted job whose window of 1 ms keeps its record (a deferred entry) until t0 + 1."""
    store.create_queue(queue, 2)
    store.enqueue_keyed_jobs(queue, [KeyedJob(NewJob(1, b"holder", t0, 1), "held")], t0)
    store.enqueue_keyed_jobs(queue, [KeyedJob(NewJob(1, b"gone", t0, 1), "gone", 1)], t0)
    assert store.delete_jobs(queue, JobFilter(JobState.PENDING, 1, t0, body_regex="^gone$"), 10) == 1


def test_a_keyed_enqueue_s_common_path_writes_what_its_general_one_does(tmp_path: Path) -> None:
    """enqueue_keyed_jobs.lua's common path (no expiry) leaves every key of the queue as its
    general loop does for the same jobs: records, PENDING and waiting sets, the groups' counts,
    heads and fifo, and the dedup records, a held key answering its holder and a recorded one
    whose job is gone taken over. Queue "b"'s call also carries a last job with an expiry, which
    sends the whole call down the general loop; its own traces are left out of the comparison."""
    with RedisServer(tmp_path / "redis") as server:
        raw = server.client()
        store = RedisStore("1", RedisShardConfig(RedisEndpoint(server.host, server.port), layout="compact"))
        t0 = 1_700_000_000_000
        for queue in ("a", "b"):
            held_and_gone(store, queue, t0)
        jobs = []
        for n in range(40):
            job = NewJob(1 + n % 2, b"b" * (n * 7 % 50), t0 + (n % 3) * 1000, 1 + n % 4, "s" * (n % 5 == 0))
            key = {10: "held", 20: "gone"}.get(n, f"key{n}") if n % 3 else None
            group = f"g{n % 7}" if n % 2 else None
            if key is None and group is None:
                group = "solo"
            jobs.append(KeyedJob(job, key, 1000 * (n % 4), group))
        expiring = KeyedJob(NewJob(1, b"expiring", t0, 1), None, 0, None, t0 + 10**9)
        placed = {
            "a": store.enqueue_keyed_jobs("a", jobs, t0 + 1),
            "b": store.enqueue_keyed_jobs("b", [*jobs, expiring], t0 + 1),
        }
        assert placed["a"] == placed["b"][:-1]
        assert [i for i, p in enumerate(placed["a"]) if p.deduplicated] == [10]
        dumps = {q: queue_dump(raw, q) for q in ("a", "b")}
        extra = str(placed["b"][-1].local_id).encode()
        for dump in dumps.values():
            records = dump[b"j"]
            assert isinstance(records, dict)
            for field in (b"c", b"id", extra):  # when the queue was made; its id counter; b's extra
                records.pop(field, None)
        pending = dumps["b"][b"p1:s0"]
        assert isinstance(pending, list)
        dumps["b"][b"p1:s0"] = [(member, score) for member, score in pending if member != extra]
        assert dumps["b"].pop(b"xe") == [(extra, float(t0 + 10**9))]
        assert dumps["a"] == dumps["b"]
        assert {b"j", b"ga", b"gw", b"p1:w", b"p2:w", b"dk", b"dr", b"p1:s0", b"p2:s0"} <= set(dumps["a"])
        assert b"di" not in dumps["a"] and b"dg" not in dumps["a"]  # the job records name their keys
        store.close()
        raw.close()


def test_a_uniform_keyed_enqueue_writes_what_one_of_ten_values_a_job_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A uniform call of enqueue_keyed_jobs.lua (jobs alike but for body, dedup key and group:
    three values a job, dedup.enqueue_keyed_call) leaves every key of the queue as the same jobs
    sent with ten values each do: records, sets, groups, dedup records, a held key answering its
    holder and a recorded one taken over."""
    with RedisServer(tmp_path / "redis") as server:
        raw = server.client()
        store = RedisStore("1", RedisShardConfig(RedisEndpoint(server.host, server.port), layout="compact"))
        t0 = 1_700_000_000_000
        for queue in ("a", "b"):
            held_and_gone(store, queue, t0)
        keys = {10: "held", 20: "gone"}
        jobs = [
            KeyedJob(NewJob(2, b"b" * (n * 7 % 50), t0 + 1000, 3, "s"), keys.get(n, f"key{n}"), 500, f"g{n % 7}")
            for n in range(40)
        ]
        names = store._shard.keys("a")
        _, args = dedup.enqueue_keyed_call(names, "a", jobs, t0 + 1, 2, ([], []))
        assert args[3] == "u40" and len(args) == 16 + 3 * 40
        placed = {"a": store.enqueue_keyed_jobs("a", jobs, t0 + 1)}
        monkeypatch.setattr(dedup, "UNIFORM_MAX_JOBS", 0)  # ten values a job
        placed["b"] = store.enqueue_keyed_jobs("b", jobs, t0 + 1)
        assert placed["a"] == placed["b"]
        assert [i for i, p in enumerate(placed["a"]) if p.deduplicated] == [10]
        dumps = {q: queue_dump(raw, q) for q in ("a", "b")}
        for dump in dumps.values():
            records = dump[b"j"]
            assert isinstance(records, dict)
            records.pop(b"c")
        assert dumps["a"] == dumps["b"]
        assert {b"j", b"ga", b"gw", b"p2:w", b"dk", b"dr", b"p2:s0"} <= set(dumps["a"])
        store.close()
        raw.close()
