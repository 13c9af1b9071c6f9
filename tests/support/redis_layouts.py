"""Reading a shard's jobs straight from Redis in either layout, for the migration tests.

``original_view`` reads the original layout's keys (``keys.py``), ``compact_view`` the compact
one's (``keys_compact.py``), decoding each record with Lua's own ``cmsgpack.unpack``
through EVAL, independently of the scripts under test. A job in a compact ready list
(``lua_compact/lib/ready.lua``: markers ``@ms`` giving the score of the ids after them) is
PENDING (``s0``) with its marker's score, as the original's PENDING set would hold it;
tombstones (deleted jobs: record ``''``) are no jobs; ``ready_lists`` gives the lists' order.
Both give the same ``ShardView``: times in integer ms, so equal views mean the same jobs with
the same fields, states, scores and holds.
``fill_shard`` writes a shard with jobs in every state through the original store.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Any

import redis

from pinlater.backends.base import AckItem, CheckpointItem, NewJob
from pinlater.backends.redis import RedisStore
from pinlater.backends.redis.keys import ms_from_seconds

T0 = 1_700_000_000_000
CLAIM = "claim-1:worker:host-a"
RESERVATION = "reservation-1"
SETS = ("s0", "s1", "s2", "s3", "h")


@dataclass(frozen=True, slots=True)
class Job:
    """One job as either layout holds it. ``where``: s0..s3 (by state) or h (held)."""

    where: str
    score_ms: int
    body: bytes
    attempts_allowed: int
    attempts_remaining: int
    created_at_ms: int
    updated_at_ms: int
    custom_status: bytes
    claim: bytes | None


@dataclass(slots=True)
class ShardView:
    """Every queue name (creation ms), counter, job and hold of one shard in one layout."""

    names: dict[str, int] = field(default_factory=dict)
    counters: dict[str, int] = field(default_factory=dict)
    jobs: dict[tuple[str, int, int], Job] = field(default_factory=dict)
    holds: dict[tuple[str, int, int], tuple[int, bytes]] = field(default_factory=dict)


def text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def zset(raw: redis.Redis, key: str) -> list[tuple[bytes, float]]:
    pairs: list[tuple[bytes, float]] = raw.zrange(key, 0, -1, withscores=True)  # type: ignore[assignment]
    return pairs


def shard_keys(raw: redis.Redis, pattern: str) -> list[str]:
    return sorted(text(k) for k in raw.scan_iter(match=pattern, count=1000))


def original_view(raw: redis.Redis, shard: str) -> ShardView:
    view = ShardView()
    view.names = {text(q): ms_from_seconds(s) for q, s in zset(raw, f"pln_{shard}")}
    for key in shard_keys(raw, f"plj_{shard}_*"):
        view.counters[key[len(f"plj_{shard}_") :]] = int(raw.get(key))  # type: ignore[arg-type]
    pattern = re.compile(rf"plq_{shard}_(\w+)\.p(\d+)_(s[0-3]|h|x|o)")
    expiries: dict[tuple[str, int, int], int] = {}
    holders: dict[tuple[str, int, int], bytes] = {}
    for key in shard_keys(raw, f"plq_{shard}_*"):
        match = pattern.fullmatch(key)
        assert match, f"unexpected key {key}"
        queue, priority, kind = match.group(1), int(match.group(2)), match.group(3)
        if kind == "o":
            fields: dict[bytes, bytes] = raw.hgetall(key)  # type: ignore[assignment]
            holders.update({(queue, priority, int(i)): h for i, h in fields.items()})
            continue
        for member, score in zset(raw, key):
            at = (queue, priority, int(member))
            if kind == "x":
                expiries[at] = ms_from_seconds(score)
                continue
            job: dict[bytes, bytes] = raw.hgetall(f"plh_{shard}_{queue}.{int(member)}")  # type: ignore[assignment]
            assert at not in view.jobs, f"{at} is in two sets"
            assert set(job) <= {b"bd", b"al", b"ar", b"ca", b"ua", b"cs", b"cd"}, job
            view.jobs[at] = Job(
                kind,
                ms_from_seconds(score),
                job[b"bd"],
                int(job[b"al"]),
                int(job[b"ar"]),
                ms_from_seconds(job[b"ca"]),
                ms_from_seconds(job[b"ua"]),
                job.get(b"cs", b""),
                job.get(b"cd"),
            )
    view.holds = {at: (expiries[at], holders[at]) for at in expiries}
    assert set(holders) == set(expiries), "expiry and holder sets differ"
    return view


# Decodes records with the server's own cmsgpack: {items, bd, al, ar, ca, ua - ca, cs, has cd, cd}
# (records.lua keeps ua as ms after ca).
DECODE = """
local out = {}
for i, id in ipairs(ARGV) do
  local r = cmsgpack.unpack(redis.call('HGET', KEYS[1], id))
  local has_cd = 0
  if r[7] then has_cd = 1 end
  out[i] = {#r, r[1], r[2], r[3], r[4], r[5], r[6], has_cd, r[7] or ''}
end
return out
"""


def compact_view(raw: redis.Redis, shard: str) -> ShardView:
    view = ShardView()
    view.names = {text(q): int(s) for q, s in zset(raw, f"plc:{{{shard}}}:q")}
    pattern = re.compile(rf"plc:\{{{shard}:(\w+)\}}:(j|p(\d+):(s[0-3]|h|x|o|r))")
    placed: dict[str, dict[tuple[int, int], tuple[str, int]]] = {}
    expiries: dict[tuple[str, int, int], int] = {}
    holders: dict[tuple[str, int, int], bytes] = {}
    records: dict[str, int] = {}  # queue -> how many records its hash holds
    extra: dict[tuple[str, int], int] = {}  # the records hash's t{p}: markers and tombstones in a list
    listed: dict[tuple[str, int], list[tuple[int, int, bool]]] = {}  # a ready list's ids, scores, "-"s
    markers: dict[tuple[str, int], int] = {}
    for key in shard_keys(raw, f"plc:{{{shard}:*"):
        match = pattern.fullmatch(key)
        assert match, f"unexpected key {key}"
        queue = match.group(1)
        if match.group(2) == "j":  # the records, and the queue's own fields c and id
            created, counter = raw.hmget(key, "c", "id")
            if counter is not None:
                view.counters[queue] = int(counter)
            if created is not None:
                assert view.names.get(queue) == int(created), f"{queue}: c and the names set differ"
            else:
                assert queue not in view.names, f"{queue} is named but has no c"
            names: list[bytes] = raw.hkeys(key)  # type: ignore[assignment]
            counts = [name for name in names if re.fullmatch(rb"t\d+", name)]
            for name in counts:
                extra[(queue, int(name[1:]))] = int(raw.hget(key, name))  # type: ignore[arg-type]
            records[queue] = len(names) - (created is not None) - (counter is not None) - len(counts)
            continue
        priority, kind = int(match.group(3)), match.group(4)
        if kind == "r":
            entries, score = read_list(raw, key)
            listed[(queue, priority)] = entries
            markers[(queue, priority)] = score
            continue
        if kind == "o":
            fields: dict[bytes, bytes] = raw.hgetall(key)  # type: ignore[assignment]
            holders.update({(queue, priority, int(i)): h for i, h in fields.items()})
            continue
        for member, score in zset(raw, key):
            assert score == int(score), f"{key}: score {score} is not whole ms"
            if kind == "x":
                expiries[(queue, priority, int(member))] = int(score)
                continue
            at = (priority, int(member))
            assert at not in placed.setdefault(queue, {}), f"{queue} {at} is in two sets"
            placed[queue][at] = (kind, int(score))
    buried: dict[str, int] = {}  # queue -> tombstones in its lists
    for (queue, priority), entries in listed.items():
        key = f"plc:{{{shard}:{queue}}}:j"
        ids = [f"-{i}" if cancelled else str(i) for i, _, cancelled in entries]
        tombstones = 0
        for (local_id, score, cancelled), packed in zip(entries, raw.hmget(key, ids) if ids else [], strict=True):
            assert packed is not None, f"{queue} {local_id}: in a ready list without a record"
            if packed == b"":
                tombstones += 1
                continue
            assert not cancelled, f"{queue} -{local_id}: a cancelled job's entry without its tombstone"
            at = (priority, local_id)
            assert at not in placed.setdefault(queue, {}), f"{queue} {at} is in two sets"
            placed[queue][at] = ("s0", score)
        buried[queue] = buried.get(queue, 0) + tombstones
        expected = markers[(queue, priority)] + tombstones
        assert extra.pop((queue, priority), 0) == expected, f"{queue} p{priority}: t{priority} is not {expected}"
    assert not extra, f"counters t{{p}} without a list: {extra}"
    for queue, jobs in placed.items():
        ids = [str(i) for _, i in jobs]
        key = f"plc:{{{shard}:{queue}}}:j"
        for i, packed in zip(ids, raw.hmget(key, ids), strict=True):
            assert packed is not None, f"{queue} {i}: no record"
            assert packed[:1] == b"\x97", f"{queue} {i}: not a msgpack array of 7 items"
        rows: list[list[Any]] = raw.eval(DECODE, 1, key, *ids)
        assert records.get(queue) == len(ids) + buried.get(queue, 0), f"{queue}: records in no set"
        for (priority, local_id), row in zip(jobs, rows, strict=True):
            items, bd, al, ar, ca, ua_after_ca, cs, has_cd, cd = row
            assert items == 7
            kind, score = jobs[(priority, local_id)]
            updated = score if kind == "s2" else ca + ua_after_ca  # a SUCCEEDED job's: its score (records.lua)
            job = Job(kind, score, bd, al, ar, ca, updated, cs, cd if has_cd else None)
            view.jobs[(queue, priority, local_id)] = job
    assert not {q for q, n in records.items() if n and n != buried.get(q, 0) and q not in placed}, (
        "records of queues without jobs"
    )
    view.holds = {at: (expiries[at], holders[at]) for at in expiries}
    assert set(holders) == set(expiries), "expiry and holder sets differ"
    return view


def read_list(raw: redis.Redis, key: str) -> tuple[list[tuple[int, int, bool]], int]:
    """A ready list's ids with their scores (their markers') and whether each is the place of a
    job cancelled in place (``-<id>``), in list order, and how many markers it holds; asserting
    its invariants: a marker at its head, scores that never go down, ids that go up as numbers,
    and among those of one score as text too (the order a sorted set keeps), at most 256 ids
    after a marker."""
    entries: list[bytes] = raw.lrange(key, 0, -1)  # type: ignore[assignment]
    assert entries, f"{key}: an empty list exists"
    assert entries[0][:1] == b"@", f"{key}: no marker at its head"
    out: list[tuple[int, int, bool]] = []
    score, markers, run = 0, 0, 0
    before: bytes | None = None  # the id before, of this score
    for entry in entries:
        if entry[:1] == b"@":
            assert not markers or int(entry[1:]) >= score, f"{key}: scores go down"
            if int(entry[1:]) != score:
                before = None
            score, markers, run = int(entry[1:]), markers + 1, 0
            continue
        run += 1
        assert run <= 256, f"{key}: more than 256 ids after a marker"
        cancelled = entry[:1] == b"-"
        local_id = entry[1:] if cancelled else entry
        assert not out or int(local_id) > out[-1][0], f"{key}: {entry!r} after {out[-1][0]} (not up as numbers)"
        assert before is None or local_id > before, f"{key}: {entry!r} after {before!r} in one run (not up as text)"
        before = local_id
        out.append((int(local_id), score, cancelled))
    return out, markers


def ready_lists(raw: redis.Redis, shard: str) -> dict[tuple[str, int], list[int]]:
    """The ids in each compact ready list of ``shard`` (tombstones included), by (queue, priority)."""
    pattern = re.compile(rf"plc:\{{{shard}:(\w+)\}}:p(\d+):r")
    lists = {}
    for key in shard_keys(raw, f"plc:{{{shard}:*}}:p*:r"):
        match = pattern.fullmatch(key)
        assert match, key
        lists[(match.group(1), int(match.group(2)))] = [i for i, _, _ in read_list(raw, key)[0]]
    return lists


def both_layouts(raw: redis.Redis, shard: str = "1") -> ShardView:
    """The union of both layouts' jobs, asserting that none is in both."""
    old, new = original_view(raw, shard), compact_view(raw, shard)
    assert not old.jobs.keys() & new.jobs.keys(), "a job is in both layouts"
    merged = ShardView(names={**new.names, **old.names})
    merged.jobs = {**old.jobs, **new.jobs}
    merged.holds = {**old.holds, **new.holds}
    for counters in (old.counters, new.counters):
        for queue, n in counters.items():
            merged.counters[queue] = max(n, merged.counters.get(queue, 0))
    return merged


def fill_shard(store: RedisStore, seed: int = 7, jobs: int = 60) -> None:
    """Queues ``a`` (priorities 1-3: every state, claims, holds, statuses, bodies of any bytes),
    ``b`` (priority 7 only) and ``gone`` (deleted: only its counter is left)."""
    rng = random.Random(seed)
    store.create_queue("a", 3)
    bodies = [b"", b"\x00\xff\r\n" * 3, bytes(range(256)), rng.randbytes(100_000)]
    bodies += [rng.randbytes(rng.randrange(1, 300)) for _ in range(jobs - len(bodies))]
    new = [
        NewJob(
            priority=1 + i % 3,
            body=body,
            run_after_ms=T0 - 5_000 + i if i % 5 else T0 + 3_600_000 + i,
            attempts_allowed=1 + i % 3,
            custom_status=["", "status ü", "x" * 50][i % 3],
        )
        for i, body in enumerate(bodies)
    ]
    store.enqueue_jobs("a", new, T0 - 10_000)
    claimed = store.dequeue_jobs("a", 1, 10, CLAIM, T0, False)
    assert len(claimed) >= 6
    ids = [job.local_id for job in claimed]
    store.ack_jobs(
        "a",
        [AckItem(1, ids[0], "done!"), AckItem(1, ids[1])],
        [AckItem(1, ids[2], "boom", 60_000), AckItem(1, ids[3], "", 0)],
        T0 + 100,
    )
    store.checkpoint_jobs("a", [CheckpointItem(1, ids[4], T0 + 200, new_body=b"new\x00body")], "worker", T0 + 150)
    store.checkpoint_jobs("a", [CheckpointItem(1, ids[5], T0 + 300, move_to_pending=True)], "worker", T0 + 160)
    for priority in (2, 3):
        failed = store.dequeue_jobs("a", priority, 3, CLAIM, T0 + 500, False)
        store.ack_jobs("a", [], [AckItem(priority, j.local_id, "fail") for j in failed], T0 + 600)
    held = store.reserve_jobs("a", 2, 4, RESERVATION, T0 + 700, 60_000)
    assert held
    store.create_queue("b", 7)
    store.enqueue_jobs("b", [NewJob(7, b"b%d" % i, T0 + i, 2, "") for i in range(5)], T0)
    store.create_queue("gone", 1)
    store.enqueue_jobs("gone", [NewJob(1, b"g", T0, 1, "")] * 4, T0)
    store.delete_queue("gone")
