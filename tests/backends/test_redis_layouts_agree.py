"""The compact layout's scripts answer as the original's: the same random operations, evictions
included, on a store of each layout (one redis-server, two shards), with every answer, the
evicted count and, at the end, every job compared; also on a server without ZMSCORE (as before
Redis 6.2), where the compact scripts read scores one at a time.

The operations lean on the scripts' subtle cases: equal run afters beyond the tie bound, ids past
9 (text order), repeated ids in one batch, acks and checkpoints of jobs not in progress or under
another claim, holds that lapse, dry runs over held jobs, body-regex pages, and jobs whose
hash or record is gone (as LRU eviction would leave them).

Each run goes one of two ways:

* "sets": no job is enqueued with run after == now, so the compact layout keeps every PENDING
  job in its sorted set, and the original's orders of equal scores (ids as text beyond the tie
  bound, and in reserves) are met exactly;
* "lists": a good part of the jobs are enqueued with run after == now, which the compact layout
  keeps in its ready lists (``lua_compact/lib/ready.lua``), with tombstones after deletes and
  evicted list entries. A ready list is taken first in, first out, that is by id as a number,
  where the original takes equal scores by id as text past the tie bound (and always in
  reserves): so these runs hand out ids from 100 on (three digits: text and number orders agree).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.support.redis_server import RedisServer

from pinlater.backends.base import AckItem, CheckpointItem, JobFilter, JobState, NewJob
from pinlater.backends.redis import RedisEndpoint, RedisShardConfig, RedisStore
from pinlater.backends.redis import store as store_module

pytestmark = pytest.mark.redis

QUEUES = ("qa", "qb")
PRIORITIES = (1, 2, 3)
CLAIMS = ("w1:a", "w2:b", "w1:c")
SOURCES = ("w1", "w2", ":b", "", "%", "w1:c")
BODIES = (b"alpha", b"beta", b"gamma" * 50, b"", "été".encode(), b"x" * 3000)
STATUSES = ("", "st", "über" * 3)
OPERATIONS = (
    *("enqueue", "dequeue", "ack", "checkpoint", "lookup", "count", "scan", "delete", "retry", "resurrect"),
    *("gc", "evict", "tick", "reserve", "claim", "release", "delete_queue", "queue_counts"),
)


@pytest.fixture(params=["redis", "redis-before-6.2"])
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[RedisStore, RedisStore]]:
    # Before 6.2 Redis has no ZMSCORE, which the compact scripts fall back from (lib/sets.lua).
    extra_args = ("--rename-command", "ZMSCORE", "") if request.param == "redis-before-6.2" else ()
    with RedisServer(tmp_path / "redis", extra_args=extra_args) as server:
        endpoint = RedisEndpoint(server.host, server.port)
        original = RedisStore("o", RedisShardConfig(endpoint, layout="original"))
        compact = RedisStore("c", RedisShardConfig(endpoint, layout="compact"))
        try:
            yield original, compact
        finally:
            original.close()
            compact.close()


class Run:
    """One random run: picks operations, applies each to both stores, compares the answers."""

    def __init__(self, seed: int, original: RedisStore, compact: RedisStore, lists: bool = True) -> None:
        self.rng = random.Random(seed)
        self.lists = lists
        self.first_id = 100 if lists else 1  # see the module docstring
        self.original, self.compact = original, compact
        self.now = 1_700_000_000_000
        self.hold_ms = 1000
        self.queue = QUEUES[0]
        self.recent: list[tuple[str, int, int]] = []  # (queue, priority, id) dequeued or reserved
        self.step = 0

    def both(self, what: str, call: Callable[[RedisStore], Any]) -> Any:
        answers = []
        for store in (self.original, self.compact):
            try:
                answers.append(("answer", call(store)))
            except Exception as exc:  # the same error either way is the point
                answers.append(("error", type(exc).__name__))
        assert answers[0] == answers[1], f"step {self.step}: {what}"
        assert self.original.evicted_jobs == self.compact.evicted_jobs, f"step {self.step}: {what}: evicted"
        return answers[0][1]

    def job_key(self) -> tuple[int, int]:
        """Mostly a job recently dequeued or reserved in the queue, else any id."""
        mine = [r for r in self.recent if r[0] == self.queue]
        if mine and self.rng.random() < 0.85:
            _, priority, local_id = self.rng.choice(mine)
            return (self.rng.choice(PRIORITIES) if self.rng.random() < 0.05 else priority), local_id
        return self.rng.choice(PRIORITIES), self.first_id + self.rng.randint(0, 59)

    def took(self, priority: int, jobs: Any) -> None:
        if isinstance(jobs, list):
            self.recent += [(self.queue, priority, job.local_id) for job in jobs]
            del self.recent[:-40]

    def evict(self) -> None:
        _, local_id = self.job_key()
        self.original.client.delete(self.original._shard.keys(self.queue).jobs_arg + str(local_id))
        self.compact.client.hdel(self.compact._shard.keys(self.queue).jobs_arg, str(local_id))

    def operation(self) -> None:
        rng, now, q = self.rng, self.now, self.queue
        p = rng.choice(PRIORITIES)
        name = rng.choices(OPERATIONS, weights=[14, 11, 8, 6, 4, 5, 4, 4, 2, 2, 2, 2, 4, 4, 4, 2, 0.3, 1])[0]
        if name == "enqueue":
            jobs = [
                NewJob(
                    rng.choice(PRIORITIES),
                    rng.choice(BODIES),
                    now + rng.choice([-2000, -1000, *([0, 0, 0] if self.lists else [-1, -1, -1]), 500, 3000]),
                    rng.choice([1, 2, 3]),
                    rng.choice(STATUSES),
                )
                for _ in range(rng.choice([0, 1, 3, 12, 30]))
            ]
            self.both(name, lambda s: s.enqueue_jobs(q, jobs, now))
        elif name == "dequeue":
            limit, claim, dry_run = rng.choice([0, 1, 2, 3, 5, 10, 40]), rng.choice(CLAIMS), rng.random() < 0.25
            self.took(p, self.both(name, lambda s: s.dequeue_jobs(q, p, limit, claim, now, dry_run)))
        elif name == "ack":
            succeeded = [AckItem(*self.job_key(), rng.choice(["", "ok", "é" * 5])) for _ in range(rng.randint(0, 6))]
            failed = [AckItem(*self.job_key(), "bad", rng.choice([0, 1000])) for _ in range(rng.randint(0, 6))]
            failed += succeeded[:1]  # the same job twice in one batch
            self.both(name, lambda s: s.ack_jobs(q, succeeded, failed, now))
        elif name == "checkpoint":
            items = []
            for _ in range(rng.randint(1, 6)):
                priority, local_id = self.job_key()
                items.append(
                    CheckpointItem(
                        priority,
                        local_id,
                        now + rng.choice([0, 1500]),
                        rng.random() < 0.4,
                        rng.choice([None, b"new body"]),
                        rng.choice([None, 5]),
                        rng.choice([None, "pre", "é" * 3]),
                    )
                )
                if rng.random() < 0.3:
                    items.append(items[-1])
            source = rng.choice(SOURCES)
            self.both(name, lambda s: s.checkpoint_jobs(q, items, source, now))
        elif name == "lookup":
            keys = [self.job_key() for _ in range(rng.randint(1, 10))]
            with_body = rng.random() < 0.5
            self.both(name, lambda s: s.lookup_jobs(q, keys, with_body))
        elif name in ("count", "scan", "delete"):
            where = JobFilter(
                rng.choice(list(JobState)),
                p,
                now,
                rng.choice([False, True, None]),
                rng.choice([None, None, "a", "^$"]),
            )
            limit = rng.choice([0, 1, 3, 10, 100])
            if name == "count":
                most = rng.choice([None, 2, 100])
                self.both(name, lambda s: s.count_jobs(q, where, most))
            elif name == "scan":
                self.both(name, lambda s: s.scan_jobs(q, where, limit))
            else:
                self.both(name, lambda s: s.delete_jobs(q, where, limit))
        elif name == "retry":
            limit = rng.choice([0, 1, 5, 50])
            self.both(name, lambda s: s.retry_failed_jobs(q, p, 2, now + 100, limit, now))
        elif name in ("resurrect", "gc"):
            limit, before = rng.choice([0, 1, 5, 50]), now - rng.choice([0, 1000, 5000])
            if name == "resurrect":
                self.both(name, lambda s: s.resurrect_timed_out_jobs(q, p, before, limit, now))
            else:
                state = rng.choice([JobState.SUCCEEDED, JobState.FAILED])
                self.both(name, lambda s: s.gc_finished_jobs(q, p, state, before, limit))
        elif name == "evict":
            self.evict()
        elif name == "tick":
            self.now += rng.choice([1, 500, 1000, 2500, 10000])
            self.hold_ms = rng.choice([0, 1000, 3000])
            self.queue = rng.choice(QUEUES)
        elif name == "reserve":
            limit, reservation, hold = rng.choice([0, 1, 3, 10]), rng.choice(["r1", "r2"]), self.hold_ms
            self.took(p, self.both(name, lambda s: s.reserve_jobs(q, p, limit, reservation, now, hold)))
        elif name == "claim":
            claims = [(*self.job_key(), rng.choice(CLAIMS)) for _ in range(rng.randint(1, 8))]
            claims += claims[:1]
            reservation = rng.choice(["r1", "r2"])
            self.both(name, lambda s: s.claim_reserved(q, claims, reservation, now))
        elif name == "release":
            keys = [self.job_key() for _ in range(rng.randint(1, 8))]
            reservation = rng.choice(["r1", "r2"])
            self.both(name, lambda s: s.release_reservations(q, keys, reservation, now))
        elif name == "delete_queue":
            self.both(name, lambda s: s.delete_queue(q))
            self.both("create_queue", lambda s: s.create_queue(q, 3))
        else:
            self.both(name, lambda s: s.queue_counts(3, now))

    def every_job(self) -> None:
        """Every job of every queue, with its body, the same in both layouts."""
        keys = [(p, local_id) for p in PRIORITIES for local_id in range(self.first_id, self.first_id + 600)]
        for queue in QUEUES:
            self.both(f"every job of {queue}", lookup_in(queue, keys))

    def create_queues(self) -> None:
        for queue in QUEUES:
            self.both(f"create {queue}", creates(queue))
            # ids from first_id on: each layout's counter (kept by delete_queue)
            self.original.client.set(self.original._shard.keys(queue).id_key, self.first_id - 1)
            self.compact.client.hset(self.compact._shard.keys(queue).id_key, "id", self.first_id - 1)


def lookup_in(queue: str, keys: list[tuple[int, int]]) -> Callable[[RedisStore], Any]:
    return lambda store: store.lookup_jobs(queue, keys, True)


def creates(queue: str) -> Callable[[RedisStore], Any]:
    return lambda store: store.create_queue(queue, 3)


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("pending_in", ["sets", "lists"])
def test_the_layouts_answer_alike(
    stores: tuple[RedisStore, RedisStore], seed: int, pending_in: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_module, "MAX_TIES_REORDERED", 4)  # groups of equal run afters go past it
    run = Run(seed, *stores, lists=pending_in == "lists")
    run.create_queues()
    for run.step in range(400):
        run.operation()
    run.every_job()


def test_batches_past_a_chunk_answer_alike(stores: tuple[RedisStore, RedisStore]) -> None:
    """Batches of more than the 1000 members a variadic command takes at once (sets.lua), with
    the jobs enqueued at now in the ready lists (ids of four digits, see the module docstring)."""
    run = Run(0, *stores)
    run.first_id = 1000
    run.create_queues()
    now = run.now
    jobs = [NewJob(1 + i % 2, b"b%d" % i, now - (i % 3) * 1000, 2, "s") for i in range(2600)]
    jobs += [NewJob(1 + i % 2, b"r%d" % i, now, 2, "s") for i in range(2600)]
    ids = run.both("enqueue", lambda s: s.enqueue_jobs("qa", jobs, now))
    keys = [(1 + i % 2, local_id) for i, local_id in enumerate(ids)]
    run.both("reserve", lambda s: s.reserve_jobs("qa", 2, 1200, "r1", now, 1000))
    run.both("dry run over held jobs", lambda s: s.dequeue_jobs("qa", 2, 2000, "w:x", now, True))
    run.both("claim", lambda s: s.claim_reserved("qa", [(2, i, "w:2") for i in ids[1::2][:1100]], "r1", now))
    run.both("dequeue", lambda s: s.dequeue_jobs("qa", 1, 2000, "w:1", now, False))
    run.both("dequeue, holds lapsed", lambda s: s.dequeue_jobs("qa", 2, 2000, "w:2", now + 5000, False))
    checkpoints = [CheckpointItem(p, i, now + 10, i % 3 == 0, None, None, "pre") for p, i in keys]
    run.both("checkpoint", lambda s: s.checkpoint_jobs("qa", checkpoints, "w", now + 6000))
    acks = [AckItem(p, i, "ok") for p, i in keys]
    run.both("ack", lambda s: s.ack_jobs("qa", acks[::2], acks[1::2], now + 7000))
    run.both("lookup", lambda s: s.lookup_jobs("qa", keys, True))
    where = JobFilter(JobState.PENDING, 1, now + 10000, None)
    run.both("delete", lambda s: s.delete_jobs("qa", where, 1500))
    run.both("delete queue", lambda s: s.delete_queue("qa"))
    run.both("lookup after", lambda s: s.lookup_jobs("qa", keys, True))
