"""Job control above the stores (``ShardedBackend``, ``scan_pages``, ``schedules``), over three
real embedded shards and a clock the tests move: scans page over every shard and priority and
return each job once; cancel refuses another queue's jobs; a job with only an expiry lands on one
shard with it; schedules live on one shard and each tick makes one job, however many runners fire
it, through a runner that died half-way, and after a long stop.

Through a server: ``tests/server/test_job_control.py``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Coroutine, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import pytest
from tests.support.hot import ack, dequeue

from pinlater import schedules
from pinlater._pinlater import decode_descriptors
from pinlater.backends import scan_pages, sharded
from pinlater.backends.base import (
    STORE_CALL_JOBS,
    AckItem,
    JobFilter,
    JobRecord,
    JobState,
    LookupOverBudget,
    NewJob,
    ScanCursor,
    ShardStore,
)
from pinlater.backends.embedded.store import EmbeddedStore
from pinlater.backends.scan_pages import ScanQuery
from pinlater.backends.sharded import ShardedBackend
from pinlater.backends.shardmap import Shard, ShardMap
from pinlater.clock import ManualClock
from pinlater.errors import ErrorCode, PinLaterError, QueueNotFoundError

Q = "control_sharded"
T = TypeVar("T")
MINUTE = 60_000


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[dict[str, ShardStore]]:
    shards: dict[str, ShardStore] = {name: EmbeddedStore(tmp_path, name) for name in ("1", "2", "3")}
    yield shards
    for store in shards.values():
        store.close()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def backend(stores: dict[str, ShardStore], clock: ManualClock) -> ShardedBackend:
    made = ShardedBackend(
        ShardMap(Shard(name, store) for name, store in stores.items()),
        num_priorities=2,
        parallelism=4,
        clock=clock,
    )
    for store in stores.values():
        store.create_queue(Q, 2)
    return made


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def shard_of(descriptor: str) -> str:
    ((_, shard, _, _),) = decode_descriptors([descriptor])
    return str(shard)


def spread(stores: dict[str, ShardStore], clock: ManualClock, per_shard: int) -> int:
    """``per_shard`` jobs on each shard, both priorities, many sharing a run_after."""
    now = clock.now_ms()
    for store in stores.values():
        store.enqueue_jobs(
            Q, [NewJob(1 + i % 2, b"job-%d" % i, now - 1_000 * (i % 3), 2) for i in range(per_shard)], now
        )
    return per_shard * len(stores)


# -- scans that page -----------------------------------------------------------------------------


def pages(backend: ShardedBackend, query: ScanQuery, limit: int) -> list[list[tuple[str, JobRecord]]]:
    out: list[list[tuple[str, JobRecord]]] = []
    continuation = scan_pages.START
    while continuation != scan_pages.END:
        page, continuation = run(backend.scan_page(query, limit, continuation))
        out.append(page)
        assert len(out) < 100, "the scan ends"
    return out


def test_a_scan_pages_over_every_shard_and_priority_returning_each_job_once(
    backend: ShardedBackend, stores: dict[str, ShardStore], clock: ManualClock
) -> None:
    total = spread(stores, clock, 17)
    got = pages(backend, ScanQuery(Q, JobState.PENDING, None, False, None), 8)

    descriptors = [d for page in got for d, _ in page]
    assert len(descriptors) == total == len(set(descriptors))
    assert all(len(page) <= 8 for page in got)
    runs = [r.run_after_ms for page in got for _, r in page]
    assert runs == sorted(runs, reverse=True), "newest run_after first across shards"
    assert {shard_of(d) for d in descriptors} == {"1", "2", "3"}


def test_a_walk_reads_no_further_than_a_page_can_hold(
    backend: ShardedBackend, stores: dict[str, ShardStore], clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A page of at most 300,000 bytes of 400-byte jobs holds 750: each of the 6 walks (3 shards,
    2 priorities, 2,500 jobs each) reads 1,000 jobs (a store call's worth) for it, not the page's
    limit of 10,000 (all it holds: statuses and keys of 7 KB made 70 MB a walk). Paging on
    returns every job once, newest first."""
    total = spread(stores, clock, 5000)
    read: list[int] = []
    scan_jobs = EmbeddedStore.scan_jobs

    def counted(self: EmbeddedStore, *args: Any, **kwargs: Any) -> Any:
        records = scan_jobs(self, *args, **kwargs)
        read.append(len(records))
        return records

    monkeypatch.setattr(EmbeddedStore, "scan_jobs", counted)
    query = ScanQuery(Q, JobState.PENDING, None, False, None)

    def page(continuation: str) -> tuple[list[tuple[str, JobRecord]], str]:
        return run(backend.scan_page(query, 10_000, continuation, 300_000, lambda walk, record: 400))

    first, continuation = page(scan_pages.START)
    assert len(first) == 750 and sum(read) == 6 * 1000, read
    descriptors = [d for d, _ in first]
    runs = [r.run_after_ms for _, r in first]
    while continuation != scan_pages.END:
        more, continuation = page(continuation)
        assert 0 < len(more) <= 750
        descriptors += [d for d, _ in more]
        runs += [r.run_after_ms for _, r in more]
    assert len(descriptors) == total == len(set(descriptors))
    assert runs == sorted(runs, reverse=True)


def test_jobs_that_stay_are_returned_once_while_others_come_and_go(
    backend: ShardedBackend, stores: dict[str, ShardStore], clock: ManualClock
) -> None:
    spread(stores, clock, 12)
    query = ScanQuery(Q, JobState.PENDING, 1, False, None)
    before = {d for d, _ in run(backend.scan_jobs(Q, JobState.PENDING, 1, False, 1_000, None))}
    first, continuation = run(backend.scan_page(query, 5, scan_pages.START))
    gone = [d for d, _ in first[:2]]  # already returned, then cancelled
    run(backend.cancel_jobs(Q, gone))
    stores["2"].enqueue_jobs(Q, [NewJob(1, b"new", clock.now_ms(), 2)], clock.now_ms())

    seen = [d for d, _ in first]
    while continuation != scan_pages.END:
        page, continuation = run(backend.scan_page(query, 5, continuation))
        seen.extend(d for d, _ in page)

    assert len(seen) == len(set(seen)), "nothing twice"
    assert before <= set(seen), "every job there from start to end is returned"


def test_a_scan_ends_when_a_shard_goes_down_half_way_and_a_new_one_sees_it_back(
    backend: ShardedBackend, stores: dict[str, ShardStore], clock: ManualClock
) -> None:
    spread(stores, clock, 6)
    query = ScanQuery(Q, JobState.PENDING, None, False, None)
    first, continuation = run(backend.scan_page(query, 4, scan_pages.START))
    down = backend.shards.get("3")
    assert down is not None
    down.mark_unhealthy("test")

    seen = [d for d, _ in first]
    while continuation != scan_pages.END:  # ends: no empty pages until shard 3 is back
        page, continuation = run(backend.scan_page(query, 4, continuation))
        seen.extend(d for d, _ in page)
    assert len(seen) == len(set(seen))
    assert {shard_of(d) for d in seen} >= {"1", "2"}
    assert len([d for d in seen if shard_of(d) != "3"]) == 12

    down.mark_healthy()
    again, continuation = run(backend.scan_page(query, 4, scan_pages.START))
    while continuation != scan_pages.END:
        page, continuation = run(backend.scan_page(query, 4, continuation))
        again.extend(page)
    assert len(again) == 18


def test_a_continuation_is_good_only_for_its_own_query(backend: ShardedBackend, stores: dict[str, ShardStore]) -> None:
    spread(stores, ManualClock(), 5)
    query = ScanQuery(Q, JobState.PENDING, None, False, None)
    _, continuation = run(backend.scan_page(query, 3, scan_pages.START))
    assert continuation != scan_pages.END

    for other in (query._replace(state=JobState.FAILED), query._replace(body_regex="x"), query._replace(priority=1)):
        with pytest.raises(PinLaterError) as info:
            run(backend.scan_page(other, 3, continuation))
        assert info.value.code == ErrorCode.CONTINUATION_INVALID
    version, payload, check = continuation.split(".")
    tampered = f"{version}.{payload}.{'B' if check[0] == 'A' else 'A'}{check[1:]}"
    # the check is no secret: a stop past i64 with a good check is refused, not sent to a store
    shard = next(iter(scan_pages.decode(query, continuation)))[0]
    past_i64 = [
        scan_pages.encode(query, {(shard, 1): ScanCursor(run_after, local_id)})
        for run_after, local_id in ((2**80, 1), (-(2**80), 1), (1, 2**63), (1, -1))
    ]
    nested = b"[" * 2000  # with a good check: json's recursion limit, once an internal error
    deep = f"1.{scan_pages._b64(nested)}.{scan_pages._b64(scan_pages._check(nested))}"
    for made_up in ("1", "abc", tampered, f"{continuation}.x", "1.e30.AAAA", "x" * 70_000, *past_i64, deep):
        with pytest.raises(PinLaterError) as info:
            run(backend.scan_page(query, 3, made_up))
        assert info.value.code == ErrorCode.CONTINUATION_INVALID


# -- cancel and expiry routing -------------------------------------------------------------------


def test_cancel_refuses_another_queues_jobs_and_ignores_unknown_shards(
    backend: ShardedBackend, stores: dict[str, ShardStore]
) -> None:
    stores["1"].create_queue("other", 2)
    (mine,) = stores["1"].enqueue_jobs(Q, [NewJob(1, b"m", 0, 2)], 0)
    (theirs,) = stores["1"].enqueue_jobs("other", [NewJob(1, b"t", 0, 2)], 0)

    with pytest.raises(PinLaterError, match="other"):
        run(backend.cancel_jobs(Q, [f"{Q}:s1:p1:{mine}", f"other:s1:p1:{theirs}"]))
    assert stores["1"].lookup_jobs(Q, [(1, mine)], False)[0].state == JobState.PENDING, "nothing changed"

    assert run(backend.cancel_jobs(Q, [f"{Q}:s1:p1:{mine}", f"{Q}:s9:p1:1"])) == 1
    with pytest.raises(QueueNotFoundError):
        run(backend.cancel_jobs("missing", ["missing:s1:p1:1"]))


def test_a_lookups_body_budget_holds_over_its_shards_and_store_calls(
    backend: ShardedBackend, stores: dict[str, ShardStore], clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three shards of 3,000 bytes of bodies each, looked up at once: refused under 8,999 bytes
    (each store call alone fits what was left when it began), answered at 9,000; and over the
    store calls of one shard (STORE_CALL_JOBS a call), the second call is given what the first
    left, and refused. Once a call is refused, no other is made."""
    now = clock.now_ms()
    descriptors = []
    for name, store in stores.items():
        ids = store.enqueue_jobs(Q, [NewJob(1, b"b" * 1000, now, 2)] * 3, now)
        descriptors += [f"{Q}:s{name}:p1:{local_id}" for local_id in ids]
    with pytest.raises(LookupOverBudget, match="\\(8999, MAX_FRAME_BYTES\\)"):
        run(backend.lookup_jobs(descriptors, True, 8999))
    assert sorted(run(backend.lookup_jobs(descriptors, True, 9000))) == sorted(descriptors)
    assert len(run(backend.lookup_jobs(descriptors, False, 1))) == 9

    # one at a time: once a call is refused, no other is made
    asked = []
    for name, store in stores.items():
        real = store.lookup_jobs

        def spy(*args: Any, real: Any = real, name: str = name) -> Any:
            asked.append(name)
            return real(*args)

        monkeypatch.setattr(store, "lookup_jobs", spy)
    monkeypatch.setattr(sharded, "LOOKUP_CALLS_AT_ONCE", 1)
    with pytest.raises(LookupOverBudget):
        run(backend.lookup_jobs(descriptors, True, 2999))
    assert len(asked) == 1, asked
    monkeypatch.undo()

    store = stores["1"]
    many = store.enqueue_jobs(Q, [NewJob(1, b"s", now, 2)] * STORE_CALL_JOBS, now)
    [last] = store.enqueue_jobs(Q, [NewJob(1, b"b" * 1000, now, 2)], now)
    some = [f"{Q}:s1:p1:{local_id}" for local_id in [*many, last]]
    with pytest.raises(LookupOverBudget):
        run(backend.lookup_jobs(some, True, STORE_CALL_JOBS + 999))
    assert len(run(backend.lookup_jobs(some, True, STORE_CALL_JOBS + 1000))) == STORE_CALL_JOBS + 1


def test_a_job_with_only_an_expiry_keeps_it(backend: ShardedBackend, clock: ManualClock) -> None:
    now = clock.now_ms()
    jobs = [NewJob(1, b"x", now, 2), NewJob(2, b"y", now, 2)]
    placed = run(backend.enqueue_keyed_jobs(Q, jobs, [(None, 0, None, now + 5_000), (None, 0, None, None)], now))

    found = run(backend.lookup_jobs([d for d, _ in placed], False))
    assert [found[d].expire_at_ms for d, _ in placed] == [now + 5_000, None]
    assert not any(dedup for _, dedup in placed)


# -- schedules -----------------------------------------------------------------------------------


def every(name: str, interval_ms: int = MINUTE, **job: Any) -> schedules.Schedule:
    return schedules.Schedule(Q, name, schedules.ScheduledJob(b"tick", **job), interval_ms=interval_ms)


def jobs_of(backend: ShardedBackend) -> list[JobRecord]:
    return [r for _, r in run(backend.scan_jobs(Q, JobState.PENDING, None, False, 1_000, None))]


def rows(stores: dict[str, ShardStore]) -> dict[str, list[str]]:
    return {name: [r.name for r in store.list_schedules(Q)] for name, store in stores.items()}


def test_a_schedule_lives_on_one_shard_and_is_listed_once(
    backend: ShardedBackend, stores: dict[str, ShardStore], clock: ManualClock
) -> None:
    stored = run(schedules.upsert(backend, every("nightly")))
    assert stored.next_run_ms == clock.now_ms() + MINUTE
    assert sorted(n for names in rows(stores).values() for n in names) == ["nightly"]

    replaced = run(schedules.upsert(backend, schedules.Schedule(Q, "nightly", stored.job, cron="0 3 * * *")))
    (listed,) = run(schedules.listing(backend, Q))
    assert (listed.cron, listed.interval_ms, listed.next_run_ms) == ("0 3 * * *", None, replaced.next_run_ms)
    assert run(schedules.delete(backend, Q, "nightly")) is True
    assert run(schedules.delete(backend, Q, "nightly")) is False
    assert run(schedules.listing(backend, Q)) == []
    with pytest.raises(QueueNotFoundError):
        run(schedules.listing(backend, "missing"))


def test_a_queue_keeps_at_most_max_queue_schedules(backend: ShardedBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each schedule fires on its own, for as long as it is kept: their number per queue is
    bounded, as their bytes are; replacing one at the cap is still taken."""
    monkeypatch.setattr(schedules, "MAX_QUEUE_SCHEDULES", 3)
    for name in ("a", "b", "c"):
        run(schedules.upsert(backend, every(name)))
    refusal = r"'d': the queue has 3 schedules, at most 3 \(MAX_QUEUE_SCHEDULES\)"
    with pytest.raises(PinLaterError, match=refusal) as info:
        run(schedules.upsert(backend, every("d")))
    assert info.value.code == ErrorCode.ENQUEUE_REJECTED
    run(schedules.upsert(backend, every("b", interval_ms=2 * MINUTE)))  # replaced at the cap
    assert [(s.name, s.interval_ms) for s in run(schedules.listing(backend, Q))] == [
        ("a", MINUTE),
        ("b", 2 * MINUTE),
        ("c", MINUTE),
    ]


def test_a_large_due_row_is_read_off_the_event_loop(
    backend: ShardedBackend, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A due row's spec is JSON and base64 of up to 1 MiB of body: some 5 ms to read, and a
    page of 500 of them held the event loop seconds a pass. A large one is read on a thread."""
    big = b"x" * 200_000
    run(schedules.upsert(backend, schedules.Schedule(Q, "big", schedules.ScheduledJob(big), interval_ms=MINUTE)))
    run(schedules.upsert(backend, every("small")))
    threads: dict[str, int] = {}
    real = schedules.Schedule.from_row

    def spy(row: Any) -> schedules.Schedule:
        threads[row.name] = threading.get_ident()
        return real(row)

    monkeypatch.setattr(schedules.Schedule, "from_row", staticmethod(spy))
    clock.advance(MINUTE)

    async def fire() -> int:
        made = await schedules.ScheduleRunner(backend).run_once()
        assert threads["small"] == threading.get_ident(), "a small row is read on the loop"
        assert threads["big"] != threading.get_ident()
        return made

    assert run(fire()) == 2
    assert len(jobs_of(backend)) == 2


@pytest.mark.parametrize(
    ("schedule", "reason"),
    [
        (schedules.Schedule(Q, "s", schedules.ScheduledJob(b"x")), "exactly one of cron and intervalMillis"),
        (schedules.Schedule(Q, "s", schedules.ScheduledJob(b"x"), cron="* * * * *", interval_ms=MINUTE), "exactly one"),
        (schedules.Schedule(Q, "s", schedules.ScheduledJob(b"x"), cron="61 * * * *"), "minute: 61 is not in 0-59"),
        (schedules.Schedule(Q, "s", schedules.ScheduledJob(b"x"), interval_ms=10), "intervalMillis must be"),
        (schedules.Schedule(Q, "", schedules.ScheduledJob(b"x"), interval_ms=MINUTE), "name must be"),
        (schedules.Schedule(Q, "s", schedules.ScheduledJob(b"x", priority=3), interval_ms=MINUTE), "priority 3"),
        (
            schedules.Schedule(Q, "s", schedules.ScheduledJob(b"x", custom_status="\ud800"), interval_ms=MINUTE),
            "customStatus is not text",
        ),
        (
            schedules.Schedule(Q, "s", schedules.ScheduledJob(b"x", group_key="g\udfff"), interval_ms=MINUTE),
            "groupKey is not text",
        ),
    ],
)
def test_a_schedule_that_cannot_run_is_refused_with_the_reason(
    backend: ShardedBackend, schedule: schedules.Schedule, reason: str
) -> None:
    with pytest.raises(PinLaterError, match=reason) as info:
        run(schedules.upsert(backend, schedule))
    assert info.value.code == ErrorCode.ENQUEUE_REJECTED


def test_each_tick_makes_one_job_and_missed_ticks_make_one(backend: ShardedBackend, clock: ManualClock) -> None:
    run(schedules.upsert(backend, every("tick", priority=2, attempts_allowed=4, custom_status="from schedule")))
    runner = schedules.ScheduleRunner(backend)
    assert run(runner.run_once()) == 0, "not due yet"

    clock.advance(MINUTE)
    assert run(runner.run_once()) == 1
    assert run(runner.run_once()) == 0, "the tick moved on"
    (made,) = jobs_of(backend)
    assert (made.priority, made.attempts_allowed, made.custom_status) == (2, 4, "from schedule")
    assert made.dedup_key is not None and made.dedup_key.startswith("pinlater:schedule:tick:")

    clock.advance(10 * MINUTE + 5)  # ten ticks missed while nothing ran
    assert run(runner.run_once()) == 1
    assert run(runner.run_once()) == 0
    (listed,) = run(schedules.listing(backend, Q))
    assert listed.next_run_ms == clock.now_ms() - 5 + MINUTE, "the next tick on the grid, after now"
    assert len(jobs_of(backend)) == 2


def test_a_row_that_fails_to_fire_is_put_off_and_the_others_fire(
    backend: ShardedBackend,
    stores: dict[str, ShardStore],
    clock: ManualClock,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A row no check foresaw (written by an older server: a status that is not text) fails to
    fire; the runner passes it over for a minute, its tick unchanged, and the rows due after it
    fire (before, it stayed the shard's earliest due row and failed every pass first: no
    schedule of the shard fired)."""
    good = run(schedules.upsert(backend, every("good")))
    home = schedules._home(backend, Q, "good")
    # a name whose home is the good one's, so that the bad row is due first there
    name = next(f"bad-{i}" for i in range(100) if schedules._home(backend, Q, f"bad-{i}") is home)
    bad = schedules.Schedule(Q, name, schedules.ScheduledJob(b"x", custom_status="\ud800"), interval_ms=MINUTE)
    bad_tick = clock.now_ms() + 1
    home.store.put_schedule(replace(bad, next_run_ms=bad_tick).row())
    clock.advance(MINUTE)
    # One due row a pass: the rows passed over, the earliest due, must not fill the page.
    monkeypatch.setattr(schedules, "DUE_PER_PASS", 1)
    runner = schedules.ScheduleRunner(backend)
    caplog.set_level(logging.DEBUG, logger="pinlater.schedules")

    def failures() -> int:
        return sum("failed to fire" in record.getMessage() for record in caplog.records)

    assert run(runner.run_once()) == 0 and failures() == 1, "the bad row came first and failed"
    assert run(runner.run_once()) == 1, "the good schedule fired: the bad row passed over"
    assert run(runner.run_once()) == 0 and failures() == 1, "passed over, not tried every pass"
    assert [job.dedup_key for job in jobs_of(backend)] == [schedules.tick_key("good", good.next_run_ms or 0)]
    (failed,) = [row for row in home.store.list_schedules(Q) if row.name == name]
    assert failed.next_run_ms == bad_tick, "its tick is kept: a job it made before failing is deduplicated"
    clock.advance(MINUTE)
    assert run(runner.run_once()) == 1, "still"
    assert failures() == 2, "tried again a minute on"


def test_two_runners_and_a_runner_that_died_half_way_make_one_job_per_tick(
    backend: ShardedBackend, stores: dict[str, ShardStore], clock: ManualClock
) -> None:
    run(schedules.upsert(backend, every("tick")))
    clock.advance(MINUTE)
    home = next(s for s in backend.shards.all() if s.store.list_schedules(Q))
    (due,) = home.store.due_schedules(clock.now_ms(), 10)

    async def both() -> list[int]:
        first, second = schedules.ScheduleRunner(backend), schedules.ScheduleRunner(backend)
        return list(await asyncio.gather(first.run_once(), second.run_once()))

    assert sum(run(both())) == 1
    # A runner that enqueued the tick and died before moving it: the row still says that tick.
    home.store.put_schedule(due)
    assert run(schedules.ScheduleRunner(backend).run_once()) == 0, "the tick's job exists: deduplicated"
    assert len(jobs_of(backend)) == 1
    assert home.store.list_schedules(Q)[0].next_run_ms == due.next_run_ms + MINUTE


def test_a_ticks_key_is_held_for_a_hundred_ticks_from_an_hour_to_a_day(
    backend: ShardedBackend, clock: ManualClock
) -> None:
    """A tick fired again (its runner died before moving the row) within its key's window makes
    no second job, past it one: a schedule of one tick a second holds each key an hour (a day's
    had kept 86,400 keys of it), one of a tick an hour a day."""
    assert [schedules.tick_key_window(0, gap) for gap in (1_000, 60_000, 3_600_000)] == [
        3_600_000,
        6_000_000,
        24 * 3_600_000,
    ]
    run(schedules.upsert(backend, every("fast", interval_ms=1_000)))
    clock.advance(1_000)
    home = next(s for s in backend.shards.all() if s.store.list_schedules(Q))
    (due,) = home.store.due_schedules(clock.now_ms(), 10)
    assert run(schedules.ScheduleRunner(backend).run_once()) == 1
    [job] = run(dequeue(backend, Q, 10, "worker"))  # (a key is held while its job runs, too)
    run(ack(backend, Q, succeeded=[(shard_of(job.descriptor), AckItem(1, job.job.local_id))]))
    for minutes, made in ((59, 0), (2, 1)):  # an hour after the tick's enqueue, its key is let go
        clock.advance(minutes * MINUTE)
        home.store.put_schedule(due)  # the row back at that tick, as a runner that died leaves it
        assert run(schedules.ScheduleRunner(backend).run_once()) == made, minutes


def test_paused_schedules_do_not_fire_and_a_deleted_queue_takes_its_schedules(
    backend: ShardedBackend, stores: dict[str, ShardStore], clock: ManualClock
) -> None:
    paused = every("paused")
    run(schedules.upsert(backend, schedules.Schedule(Q, "paused", paused.job, interval_ms=MINUTE, paused=True)))
    clock.advance(5 * MINUTE)
    assert run(schedules.ScheduleRunner(backend).run_once()) == 0

    run(schedules.upsert(backend, every("live")))
    run(backend.delete_queue(Q))
    assert all(not s.list_schedules(Q) for s in stores.values())


def test_schedule_writes_refuse_while_a_shard_is_down(backend: ShardedBackend) -> None:
    run(schedules.upsert(backend, every("kept")))
    down = backend.shards.get("2")
    assert down is not None
    down.mark_unhealthy("test")

    for write in (schedules.delete(backend, Q, "kept"), schedules.upsert(backend, every("other"))):
        with pytest.raises(PinLaterError) as info:
            run(write)
        assert info.value.code == ErrorCode.SHARD_CONNECTION_FAILED
    down.mark_healthy()
    assert [s.name for s in run(schedules.listing(backend, Q))] == ["kept"], "nothing removed, nothing half-written"


def test_a_shard_that_answers_slowly_leaves_the_others_store_threads(
    backend: ShardedBackend, stores: dict[str, ShardStore]
) -> None:
    """Eight calls to a shard whose store answers slowly (held here) on a pool of four threads:
    three hold threads, the rest wait, and a call to another shard is answered meanwhile; all of
    them took the pool, and every shard's calls waited behind the slow one's."""
    slow = stores["1"]
    entered = threading.Semaphore(0)
    release = threading.Event()
    count_jobs = slow.count_jobs

    def held(*args: Any) -> int:
        entered.release()
        release.wait(60)
        return count_jobs(*args)

    slow.count_jobs = held  # type: ignore[method-assign]
    where = JobFilter(JobState.PENDING, 1, 0, None)
    [one] = [s for s in backend._shards if s.name == "1"]
    [two] = [s for s in backend._shards if s.name == "2"]

    async def go() -> None:
        loop = asyncio.get_running_loop()
        calls = [asyncio.ensure_future(backend.call_store(one, slow.count_jobs, Q, where, None)) for _ in range(8)]
        for _ in range(3):
            assert await loop.run_in_executor(None, entered.acquire, True, 60)
        assert not await loop.run_in_executor(None, entered.acquire, True, 0.2), "three threads at most"
        other = stores["2"]
        assert await asyncio.wait_for(backend.call_store(two, other.count_jobs, Q, where, None), 30) == 0
        release.set()
        assert await asyncio.gather(*calls) == [0] * 8

    try:
        run(go())
    finally:
        release.set()
