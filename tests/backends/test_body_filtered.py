"""Body-filtered count, scan and delete on every store (each matches bodies itself, never in the
database): batches that split ties and stop at a byte bound, the attack pattern, refusals and the
time budget."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from pinlater.backends.base import JobFilter, JobState, NewJob, ScanCursor, ShardStore
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
    if kind == "mysql":
        from tests.support.mariadb_server import shared_server

        from pinlater.backends.mysql import Endpoint, MySQLShardConfig, MySQLStore

        mariadb = shared_server()
        mariadb.drop_queue_databases()
        config = MySQLShardConfig(Endpoint(mariadb.host, mariadb.port), mariadb.user, mariadb.password)
        mysql_store = MySQLStore("1", config, body_filter_budget_seconds=budget)
        try:
            yield mysql_store
        finally:
            mysql_store.close()
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


KINDS = ["embedded", pytest.param("redis", marks=pytest.mark.redis), pytest.param("mysql", marks=pytest.mark.mysql)]


def pending(body_regex: str, future: bool | None = None) -> JobFilter:
    return JobFilter(JobState.PENDING, 1, T0 + 1000, future, body_regex)


@pytest.mark.parametrize("kind", KINDS)
def test_batches_split_ties_and_stop_at_a_byte_bound(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if kind == "embedded":
        monkeypatch.setattr(body_filtered, "BATCH_ROWS", 7)
        monkeypatch.setattr(body_filtered, "BATCH_BYTES", 40)  # about 3 bodies of 15 bytes
    elif kind == "mysql":
        from pinlater.backends.mysql import body_filtered as mysql_filtered

        monkeypatch.setattr(mysql_filtered, "BATCH_ROWS", 7)
        monkeypatch.setattr(mysql_filtered, "SHORT_BODY_BYTES", 13)  # every body read by id,
        monkeypatch.setattr(mysql_filtered, "BATCH_BYTES", 40)  # two or three at a time
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
def test_a_match_past_heavy_backtracking_is_found(kind: str, tmp_path: Path) -> None:
    """A backtracking engine gives up on this body before it finds the match at its end
    (MariaDB's REGEXP: "match limit exceeded", a warning, and the row counted as not matching)."""
    with open_store(kind, tmp_path) as store:
        store.create_queue(Q, 1)
        [found] = store.enqueue_jobs(Q, [NewJob(1, ATTACK + b"ab", T0, 1), NewJob(1, ATTACK, T0, 1)], T0)[:1]
        assert store.count_jobs(Q, pending("(a+)+b"), None) == 1
        assert [job.local_id for job in store.scan_jobs(Q, pending("(a+)+b"), 10)] == [found]
        assert store.delete_jobs(Q, JobFilter(JobState.PENDING, 1, T0, None, "(a+)+b"), 10) == 1
        assert store.count_jobs(Q, pending("a"), None) == 1


@pytest.mark.mysql
def test_mysql_reads_long_bodies_apart_and_keeps_the_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Short bodies come with their rows, longer ones by id in groups bounded in bytes; matches
    keep the walk's order whichever way their bodies came, and a limit cuts in that order."""
    from pinlater.backends.mysql import body_filtered as mysql_filtered

    monkeypatch.setattr(mysql_filtered, "BATCH_ROWS", 10)
    monkeypatch.setattr(mysql_filtered, "SHORT_BODY_BYTES", 20)
    monkeypatch.setattr(mysql_filtered, "BATCH_BYTES", 250)  # two long bodies a group
    groups: list[int] = []  # the long bodies of each group read by id
    grouped = mysql_filtered._groups

    def recorded(rows: Any, indices: Any) -> Iterator[list[int]]:
        for group in grouped(rows, indices):
            groups.append(sum(rows[i][3] is None for i in group))
            yield group

    monkeypatch.setattr(mysql_filtered, "_groups", recorded)
    with open_store("mysql", tmp_path) as store:
        store.create_queue(Q, 1)
        # Every third body is long; every other one (short or long) has "hit" in it.
        bodies = [
            (b"hit-%03d" if i % 2 == 0 else b"miss-%03d") % i + (b"." * 100 if i % 3 == 0 else b"") for i in range(23)
        ]
        ids = store.enqueue_jobs(Q, [NewJob(1, body, T0 + i, 1) for i, body in enumerate(bodies)], T0)
        hits = [local_id for local_id, body in zip(ids, bodies, strict=True) if body.startswith(b"hit")]
        assert store.count_jobs(Q, pending("^hit"), None) == 12
        assert store.count_jobs(Q, pending("^hit"), 5) == 5
        assert [job.local_id for job in store.scan_jobs(Q, pending("^hit"), 100)] == hits[::-1]
        assert [job.local_id for job in store.scan_jobs(Q, pending("hit.*[.]$"), 3)] == [ids[18], ids[12], ids[6]]
        assert store.delete_jobs(Q, JobFilter(JobState.PENDING, 1, T0, None, "^hit"), 7) == 7
        left = {job.local_id for job in store.scan_jobs(Q, JobFilter(JobState.PENDING, 1, T0 + 1000, None), 100)}
        assert left == set(ids) - set(hits[:7])
        # Jobs at the ends of TIMESTAMP's range (run afters clamped there) are inside every walk.
        low, high = store.enqueue_jobs(Q, [NewJob(1, b"edge-low", 0, 1), NewJob(1, b"edge-high", 2**62, 1)], T0)
        everywhen = JobFilter(JobState.PENDING, 1, T0, None, "^edge")
        assert store.count_jobs(Q, everywhen, None) == 2
        assert [job.local_id for job in store.scan_jobs(Q, everywhen, 10)] == [high, low]
        assert store.delete_jobs(Q, everywhen, 10) == 2
    assert groups and max(groups) == 2


@pytest.mark.parametrize("kind", KINDS)
def test_now_is_ready_and_a_millisecond_on_is_future(kind: str, tmp_path: Path) -> None:
    """The filter's range holds at its ends (MySQL's walk once took the jobs at its start
    position whatever the range: those at now among the future ones, at now + 1 ms among the
    ready ones)."""
    now = T0 + 1000
    with open_store(kind, tmp_path) as store:
        store.create_queue(Q, 1)
        ready, future = store.enqueue_jobs(Q, [NewJob(1, b"at now", now, 1), NewJob(1, b"just after", now + 1, 1)], T0)
        assert store.count_jobs(Q, pending("a", future=True), None) == 1
        assert store.count_jobs(Q, pending("a", future=False), None) == 1
        assert [job.local_id for job in store.scan_jobs(Q, pending("a", future=True), 10)] == [future]
        assert [job.local_id for job in store.scan_jobs(Q, pending("a", future=False), 10)] == [ready]
        # A page after a cursor below the range (now moved on between pages) finds nothing there.
        assert store.scan_jobs(Q, pending("a", future=True), 10, ScanCursor(now, ready + 1)) == []


@pytest.mark.mysql
def test_mysql_deletes_only_what_matches_when_it_is_deleted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A checkpoint may give a job a new body between the batch's snapshot and its delete: the
    delete reads its matches again under lock and leaves the one that no longer matches."""
    from pinlater.backends.base import CheckpointItem
    from pinlater.backends.mysql import body_filtered as mysql_filtered

    with open_store("mysql", tmp_path) as store:
        store.create_queue(Q, 1)
        changed, kept = store.enqueue_jobs(Q, [NewJob(1, b"old-1", T0, 1), NewJob(1, b"old-2", T0, 1)], T0)
        claimed = store.dequeue_jobs(Q, 1, 10, "worker:1", T0 + 1000, False)
        assert {job.local_id for job in claimed} == {changed, kept}
        matching = mysql_filtered._matching

        def then_checkpointed(*args: Any) -> list[int]:
            found = matching(*args)  # the snapshot's matches; then, from another connection:
            item = CheckpointItem(1, changed, T0 + 1000, move_to_pending=False, new_body=b"new")
            assert store.checkpoint_jobs(Q, [item], "worker", T0 + 1000) == 1
            return found

        monkeypatch.setattr(mysql_filtered, "_matching", then_checkpointed)
        in_progress = JobFilter(JobState.IN_PROGRESS, 1, T0 + 1000, None, "^old")
        assert store.delete_jobs(Q, in_progress, 10) == 1
        left = store.scan_jobs(Q, JobFilter(JobState.IN_PROGRESS, 1, T0 + 1000, None), 10)
        assert [job.local_id for job in left] == [changed]


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
