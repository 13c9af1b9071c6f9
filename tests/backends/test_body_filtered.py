"""Body-filtered count, scan and delete on the stores that match bodies themselves (embedded,
Redis): batches that split ties and stop at a byte bound, the attack pattern, refusals and the
time budget. MySQL runs REGEXP in the database; the conformance suite covers its results."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from pinlater.backends.base import JobFilter, JobState, NewJob, ShardStore
from pinlater.backends.body_filter import BodyFilter, BodyFilterBudgetExceeded, BodyPatternError
from pinlater.backends.embedded import EmbeddedStore, body_filtered
from pinlater.config import Settings

Q = "filtered"
T0 = 1_700_000_000_000
ATTACK = b"a" * 40 + b"!"


@contextmanager
def open_store(kind: str, tmp_path: Path, budget: float = 10.0) -> Iterator[ShardStore]:
    if kind == "embedded":
        embedded = EmbeddedStore(tmp_path / "data", "1", body_filter_budget_seconds=budget)
        try:
            yield embedded
        finally:
            embedded.close()
        return
    from tests.support.redis_server import RedisServer

    from pinlater.backends.redis import RedisEndpoint, RedisShardConfig, RedisStore

    with RedisServer(tmp_path / "redis") as server:
        settings = Settings(body_filter_time_budget_seconds=budget)
        redis_store = RedisStore(
            "1", RedisShardConfig(RedisEndpoint(server.host, server.port), layout="original"), settings
        )
        try:
            yield redis_store
        finally:
            redis_store.close()


KINDS = ["embedded", pytest.param("redis", marks=pytest.mark.redis)]


def pending(body_regex: str, future: bool | None = None) -> JobFilter:
    return JobFilter(JobState.PENDING, 1, T0 + 1000, future, body_regex)


@pytest.mark.parametrize("kind", KINDS)
def test_batches_split_ties_and_stop_at_a_byte_bound(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if kind == "embedded":
        monkeypatch.setattr(body_filtered, "BATCH_ROWS", 7)
        monkeypatch.setattr(body_filtered, "BATCH_BYTES", 40)  # about 3 bodies of 15 bytes
    else:
        from pinlater.backends.redis import store as redis_store

        monkeypatch.setattr(redis_store, "REGEX_PAGE_SIZE", 7)
        monkeypatch.setattr(redis_store, "REGEX_PAGE_BYTES", 40)
    with open_store(kind, tmp_path) as store:
        store.create_queue(Q, 1)
        # Runs after in groups of 4 equal values, so batches end inside a group of ties.
        bodies = [(b"even-%09d" if i % 2 == 0 else b"odd--%09d") % i for i in range(60)]
        ids = store.enqueue_jobs(Q, [NewJob(1, body, T0 + i // 4, 1) for i, body in enumerate(bodies)], T0)
        evens = {local_id for local_id, body in zip(ids, bodies, strict=True) if body.startswith(b"even")}
        assert store.count_jobs(Q, pending("^even"), None) == 30
        assert store.count_jobs(Q, pending("^even"), 11) == 11
        assert store.count_jobs(Q, pending("^even", future=False), None) == 30
        assert store.count_jobs(Q, pending("^even", future=True), None) == 0
        scanned = store.scan_jobs(Q, pending("^even"), 100)
        assert {job.local_id for job in scanned} == evens
        # equal run afters: ids descending (Redis: as text, its sorted sets' order; base.scan_jobs)
        order = [(job.run_after_ms, str(job.local_id) if kind == "redis" else job.local_id) for job in scanned]
        assert order == sorted(order, reverse=True)
        assert [job.local_id for job in store.scan_jobs(Q, pending("^even"), 9)] == [j.local_id for j in scanned[:9]]
        assert all(job.body is None for job in scanned)
        anytime = JobFilter(JobState.PENDING, 1, T0, None, "^even")
        assert store.delete_jobs(Q, anytime, 13) == 13
        assert store.delete_jobs(Q, anytime, 100) == 17
        left = store.scan_jobs(Q, JobFilter(JobState.PENDING, 1, T0 + 1000, None), 100)
        assert {job.local_id for job in left} == set(ids) - evens


@pytest.mark.parametrize("kind", KINDS)
def test_the_attack_pattern_is_answered_correctly(kind: str, tmp_path: Path) -> None:
    with open_store(kind, tmp_path) as store:
        store.create_queue(Q, 1)
        attack_id, plain_id = store.enqueue_jobs(Q, [NewJob(1, ATTACK, T0, 1), NewJob(1, b"aaaa", T0, 1)], T0)
        assert store.count_jobs(Q, pending("(a+)+$"), None) == 1
        assert [job.local_id for job in store.scan_jobs(Q, pending("(a+)+$"), 10)] == [plain_id]
        assert store.count_jobs(Q, pending("^(a+)+!$"), None) == 1
        assert store.delete_jobs(Q, JobFilter(JobState.PENDING, 1, T0, None, "(a+)+$"), 10) == 1
        assert [job.local_id for job in store.scan_jobs(Q, pending(".*"), 10)] == [attack_id]


@pytest.mark.parametrize("kind", KINDS)
def test_refused_patterns_are_value_errors_naming_the_reason(kind: str, tmp_path: Path) -> None:
    with open_store(kind, tmp_path) as store:
        store.create_queue(Q, 1)
        store.enqueue_jobs(Q, [NewJob(1, b"abab", T0, 1)], T0)
        with pytest.raises(BodyPatternError, match="backreferences are not supported"):
            store.count_jobs(Q, pending(r"(ab)\1"), None)
        with pytest.raises(ValueError, match="look-around"):
            store.scan_jobs(Q, pending("a(?=b)"), 10)
        with pytest.raises(ValueError, match="body regex"):
            store.delete_jobs(Q, JobFilter(JobState.PENDING, 1, T0, None, "(ab"), 10)
        assert store.count_jobs(Q, pending("(ab){2}"), None) == 1


@pytest.mark.parametrize("kind", KINDS)
def test_a_spent_budget_fails_the_call_instead_of_answering_part(kind: str, tmp_path: Path) -> None:
    with open_store(kind, tmp_path, budget=1e-9) as store:
        store.create_queue(Q, 1)
        store.enqueue_jobs(Q, [NewJob(1, b"body-%d" % i, T0, 1) for i in range(20)], T0)
        calls = [
            lambda: store.count_jobs(Q, pending("body"), None),
            lambda: store.scan_jobs(Q, pending("body"), 10),
            lambda: store.delete_jobs(Q, JobFilter(JobState.PENDING, 1, T0, None, "body"), 10),
        ]
        for call in calls:
            with pytest.raises(BodyFilterBudgetExceeded, match="BODY_FILTER_TIME_BUDGET_SECONDS"):
                call()
        # Nothing was deleted, and unfiltered calls are not budgeted.
        assert store.count_jobs(Q, JobFilter(JobState.PENDING, 1, T0, None), None) == 20


def test_filtered_reads_never_run_on_the_event_loop() -> None:
    from pinlater.backends.redis.store import AsyncHotPath

    # Only the hot path (``HotPath``) runs on the loop, and filtered reads are not part of it.
    assert not any(hasattr(AsyncHotPath, name) for name in ("count_jobs", "scan_jobs", "delete_jobs"))

    async def on_the_loop() -> None:
        BodyFilter("x", 1.0)

    with pytest.raises(RuntimeError, match="never on the event loop"):
        asyncio.run(on_the_loop())
    assert BodyFilter("x", 1.0).matching([b"x"]) == [0]
