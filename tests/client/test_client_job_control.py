"""Job control (#18) in the clients: what an expiry puts on the wire, the typed results of
lookups, scans and schedules, and the sync and asyncio clients against a real server (an expired
job never handed out, cancel, scans that page, schedules that fire, errors typed)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from pinlater.client import (
    SCAN_END,
    AsyncPinLaterClient,
    EnqueueRejected,
    ErrorCode,
    InvalidRequest,
    Job,
    JobInfo,
    JobState,
    PinLaterClient,
    QueueNotFound,
    ScanResult,
    ScheduleInfo,
    ServerError,
    calls,
)
from pinlater.client.codec import encode
from pinlater.idl import idl
from tests.client.fixtures import shared_server
from tests.support.pinlater_server import ServerProcess
from tests.support.wait import wait_for

# Field header in the binary protocol: type byte (i64 = 0x0a), then the field id (i16, big-endian).
EXPIRE_AT_FIELD = b"\x0a\x00\x09"


@pytest.fixture(scope="module", params=["direct", "broker"])
def srv(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """The module's server, twice: dequeues straight from the store, and through the broker
    (which holds reserved jobs that a cancel or an expiry must still reach)."""
    yield from shared_server(tmp_path_factory, broker=request.param == "broker")


def now_ms() -> int:
    return int(time.time() * 1000)


def enqueue_frame(*jobs: calls.JobLike) -> bytes:
    call = calls.enqueue("q", jobs)
    return encode(call.method, 1, idl.RequestContext(source="t"), call.args)


# -- no server --------------------------------------------------------------------------------


@pytest.mark.parametrize("job", [b"body", "body", Job(b"body"), Job("body", group_key="g", dedup_key="d")])
def test_a_job_without_expiry_puts_no_field_9_on_the_wire(job: calls.JobLike) -> None:
    assert EXPIRE_AT_FIELD not in enqueue_frame(job)


def test_an_expiry_is_sent_as_field_9() -> None:
    frame = enqueue_frame(Job(b"body", expire_at_ms=1_700_000_000_123))
    assert EXPIRE_AT_FIELD + (1_700_000_000_123).to_bytes(8, "big") in frame


def test_job_info_carries_the_expiry() -> None:
    def info(expire: int | None) -> Any:
        return idl.PinLaterJobInfo(
            jobDescriptor="q:s1:p1:1",
            jobState=0,
            attemptsAllowed=2,
            attemptsRemaining=2,
            customStatus="",
            createdAtTimestampMillis=1,
            expireAtTimestampMillis=expire,
        )

    assert JobInfo.from_thrift(info(42)).expire_at_ms == 42
    assert JobInfo.from_thrift(info(None)).expire_at_ms is None


def test_schedule_info_from_the_wire_with_the_contract_defaults() -> None:
    wire = idl.PinLaterSchedule(
        queueName="q",
        name="digest",
        cron="0 8 * * *",
        job=idl.PinLaterJob(body=b"d", priority=None, numAttemptsAllowed=None, customStatus=None),
        paused=None,
        nextRunTimestampMillis=123,
    )
    s = ScheduleInfo.from_thrift(wire)
    assert (s.queue, s.name, s.cron, s.interval_ms, s.body) == ("q", "digest", "0 8 * * *", None, b"d")
    assert (s.priority, s.attempts, s.custom_status, s.group_key, s.paused) == (1, 2, "", None, False)
    assert s.next_run_ms == 123 and s.raw is wire


def test_a_schedule_job_leaves_the_dedup_window_off_the_wire() -> None:
    call = calls.upsert_schedule("q", "n", b"body", interval_ms=1000)
    frame = encode(call.method, 1, idl.RequestContext(source="t"), call.args)
    assert b"\x0a\x00\x07" not in frame, "i64 field 7: neither the job's dedupWindowMillis nor nextRun"


def test_job_control_calls_are_safe_to_repeat_and_raw_knows_it() -> None:
    for call in (
        calls.cancel("q", ["q:s1:p1:1"]),
        calls.upsert_schedule("q", "n", b"b", cron="* * * * *"),
        calls.delete_schedule("q", "n"),
        calls.list_schedules("q"),
    ):
        assert call.safe, call.method
        assert calls.raw(call.method, call.args).safe, call.method


def test_next_page_ends_follows_or_refuses_a_reply_without_progress() -> None:
    job = JobInfo("q:s1:p1:1", JobState.PENDING, 2, 2, "", 1)
    assert calls.next_page("0", ScanResult([job], SCAN_END)) is None
    assert calls.next_page("0", ScanResult([job], "abc")) == "abc"
    assert calls.next_page("abc", ScanResult([], "def")) == "def"
    with pytest.raises(ServerError, match="no progress"):
        calls.next_page("abc", ScanResult([], "abc"))


def test_a_state_may_be_named() -> None:
    assert calls.job_state("failed") is JobState.FAILED and calls.job_state(" In_Progress ") is JobState.IN_PROGRESS
    assert calls.job_state(JobState.PENDING) is JobState.PENDING
    assert calls.scan("q", "succeeded").args[0].jobState == 2
    with pytest.raises(ValueError, match="'done' is not a job state: PENDING, IN_PROGRESS, SUCCEEDED, FAILED"):
        calls.count("q", "done")


def test_a_scan_reply_without_continuation_is_the_end() -> None:
    page = calls.scan("q", JobState.PENDING).convert(SimpleNamespace(scannedJobs=[], continuation=None))
    assert page.continuation == SCAN_END and page.done


def test_scan_all_refuses_an_empty_page_size() -> None:
    with PinLaterClient("127.0.0.1:1") as client, pytest.raises(ValueError, match="page_size"):
        next(client.scan_all("q", JobState.PENDING, page_size=0))


# -- a real server ----------------------------------------------------------------------------


def test_an_expired_job_is_never_handed_out(pl: PinLaterClient, queue: str) -> None:
    later = now_ms() + 3_600_000
    expired, live, lasting = pl.enqueue(
        queue, [Job(b"late", expire_at_ms=now_ms() - 1), b"plain", Job(b"lasting", expire_at_ms=later)]
    )
    got = pl.dequeue(queue, 10)
    assert {j.descriptor for j in got} == {live, lasting}
    assert pl.dequeue(queue, 10) == []
    found = pl.lookup([expired, lasting, live])
    assert found[expired].state == JobState.FAILED and found[expired].attempts_remaining == 0
    assert "expired" in found[expired].custom_status
    assert found[lasting].expire_at_ms == later and found[lasting].state == JobState.IN_PROGRESS
    assert found[live].expire_at_ms is None


def test_a_pending_job_with_an_expiry_shows_it_in_scans(pl: PinLaterClient, queue: str) -> None:
    at = now_ms() + 600_000
    [d] = pl.enqueue(queue, [Job(b"x", expire_at_ms=at)])
    [info] = pl.scan(queue, JobState.PENDING).jobs
    assert info.descriptor == d and info.expire_at_ms == at


def test_cancel_fails_pending_jobs_and_ends_running_ones_after_their_attempt(pl: PinLaterClient, queue: str) -> None:
    [running] = pl.enqueue(queue, [Job(b"run", attempts=3)])
    assert [j.descriptor for j in pl.dequeue(queue, 1)] == [running]
    future = now_ms() + 3_600_000
    waiting, later, kept = pl.enqueue(
        queue, [Job(b"wait", priority=2), Job(b"later", run_after_ms=future), Job(b"keep")]
    )
    unknown = running.rsplit(":", 1)[0] + ":999999"
    assert pl.cancel(queue, [running, waiting, later, unknown]) == 3

    found = pl.lookup([waiting, later, kept])
    for d in (waiting, later):
        assert found[d].state == JobState.FAILED and found[d].attempts_remaining == 0
        assert found[d].custom_status.endswith("cancelled"), found[d].custom_status
    assert found[kept].state == JobState.PENDING
    assert [j.descriptor for j in pl.dequeue(queue, 10)] == [kept], "cancelled jobs are not handed out"

    pl.ack(queue, failed=[running])  # it had 2 attempts left: cancelled, it gets none
    ended = pl.lookup([running])[running]
    assert ended.state == JobState.FAILED and "cancelled" in ended.custom_status
    assert pl.cancel(queue, [waiting, later]) == 0, "finished jobs are left alone"


def test_a_success_ack_still_counts_after_a_cancel(pl: PinLaterClient, queue: str) -> None:
    [d] = pl.enqueue(queue, [b"x"])
    pl.dequeue(queue, 1)
    pl.cancel(queue, [d])
    pl.ack(queue, succeeded=[d])
    assert pl.lookup([d])[d].state == JobState.SUCCEEDED


def test_scan_all_returns_every_job_once_over_many_pages(pl: PinLaterClient, queue: str) -> None:
    n = 130
    made = pl.enqueue(queue, [Job(b"%d" % i, priority=1 + i % 2) for i in range(n)])
    first = pl.scan(queue, JobState.PENDING, limit=25)
    assert len(first.jobs) == 25 and not first.done
    second = pl.scan(queue, JobState.PENDING, limit=25, continuation=first.continuation)
    assert len(second.jobs) == 25
    assert not {j.descriptor for j in first.jobs} & {j.descriptor for j in second.jobs}

    seen = [j.descriptor for j in pl.scan_all(queue, state="pending", page_size=25)]
    assert len(seen) == n and set(seen) == set(made)
    one_priority = [j.descriptor for j in pl.scan_all(queue, JobState.PENDING, 2, page_size=7)]
    assert sorted(one_priority) == sorted(made[1::2])
    resumed = [j.descriptor for j in pl.scan_all(queue, JobState.PENDING, continuation=first.continuation)]
    assert len(resumed) == n - 25 and not set(resumed) & {j.descriptor for j in first.jobs}


def test_a_scan_that_fits_one_page_ends_at_once(pl: PinLaterClient, queue: str) -> None:
    pl.enqueue(queue, [b"a", b"b"])
    page = pl.scan(queue, JobState.PENDING, limit=10)
    assert len(page.jobs) == 2 and page.done and page.continuation == SCAN_END


def test_a_forged_continuation_is_an_invalid_request(pl: PinLaterClient, queue: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        pl.scan(queue, JobState.PENDING, continuation="not-a-continuation")
    assert caught.value.code == ErrorCode.CONTINUATION_INVALID


def test_a_continuation_of_another_query_is_refused(pl: PinLaterClient, queue: str) -> None:
    pl.enqueue(queue, [b"a", b"b", b"c"])
    page = pl.scan(queue, JobState.PENDING, limit=1)
    assert not page.done
    with pytest.raises(InvalidRequest) as caught:
        pl.scan(queue, JobState.FAILED, limit=1, continuation=page.continuation)
    assert caught.value.code == ErrorCode.CONTINUATION_INVALID


def test_an_interval_schedule_enqueues_jobs_until_deleted(pl: PinLaterClient, queue: str) -> None:
    before = now_ms()
    pl.upsert_schedule(queue, "tick", interval_ms=1000, body=b"tick!", priority=2, attempts=3, custom_status="s:")
    [s] = pl.list_schedules(queue)
    assert (s.queue, s.name, s.interval_ms, s.cron, s.body) == (queue, "tick", 1000, None, b"tick!")
    assert (s.priority, s.attempts, s.custom_status, s.paused) == (2, 3, "s:", False)
    assert s.next_run_ms is not None and before < s.next_run_ms <= now_ms() + 1000

    wait_for(lambda: pl.count(queue, JobState.PENDING, 2) >= 2, timeout=15, what="two ticks' jobs")
    [job, *_] = pl.dequeue(queue, 10)
    assert job.body == b"tick!" and job.attempts_allowed == 3
    pl.delete_schedule(queue, "tick")
    assert pl.list_schedules(queue) == []
    pl.delete_schedule(queue, "tick")  # an unknown name is a no-op


def test_a_paused_schedule_is_listed_and_a_cron_one_next_runs_on_a_minute(pl: PinLaterClient, queue: str) -> None:
    pl.upsert_schedule(queue, "b-paused", interval_ms=1000, body=b"p", paused=True)
    pl.upsert_schedule(queue, "a-cron", cron="*/5 * * * *", body="text body", group_key="g")
    cron, paused = pl.list_schedules(queue)
    assert (cron.name, paused.name) == ("a-cron", "b-paused"), "by name"
    assert paused.paused and cron.group_key == "g" and cron.body == b"text body"
    assert cron.next_run_ms is not None and cron.next_run_ms % 300_000 == 0
    pl.upsert_schedule(queue, "b-paused", interval_ms=2000, body=b"p2")  # replaces
    assert [(s.name, s.interval_ms, s.paused) for s in pl.list_schedules(queue)][1] == ("b-paused", 2000, False)


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"cron": "61 * * * *"}, "61"),
        ({"cron": "not a cron"}, ""),
        ({}, "exactly one of cron and intervalMillis"),
        ({"cron": "* * * * *", "interval_ms": 1000}, "exactly one of cron and intervalMillis"),
        ({"interval_ms": 10}, "intervalMillis"),
    ],
)
def test_a_bad_schedule_is_enqueue_rejected(pl: PinLaterClient, queue: str, kwargs: Any, reason: str) -> None:
    with pytest.raises(EnqueueRejected) as caught:
        pl.upsert_schedule(queue, "bad", body=b"x", **kwargs)
    assert caught.value.code == ErrorCode.ENQUEUE_REJECTED and reason in caught.value.message
    assert pl.list_schedules(queue) == []


def test_schedules_of_a_missing_queue_are_queue_not_found(pl: PinLaterClient) -> None:
    for call in (
        lambda: pl.list_schedules("no_such_queue"),
        lambda: pl.delete_schedule("no_such_queue", "x"),
        lambda: pl.upsert_schedule("no_such_queue", "x", interval_ms=1000, body=b"x"),
    ):
        with pytest.raises(QueueNotFound):
            call()


def test_the_async_client_answers_the_same(address: str, queue: str) -> None:
    async def main() -> None:
        async with AsyncPinLaterClient(address) as client:
            at = now_ms() + 600_000
            made = await client.enqueue(queue, [Job(b"%d" % i, expire_at_ms=at) for i in range(12)])
            assert (await client.lookup(made[:1]))[made[0]].expire_at_ms == at
            seen = [j.descriptor async for j in client.scan_all(queue, JobState.PENDING, page_size=5)]
            assert sorted(seen) == sorted(made)
            page = await client.scan(queue, JobState.PENDING, limit=5)
            assert len(page.jobs) == 5 and not page.done

            assert await client.cancel(queue, made[:3]) == 3
            assert await client.count(queue, JobState.FAILED) == 3

            await client.upsert_schedule(queue, "hourly", cron="0 * * * *", body=b"h")
            [s] = await client.list_schedules(queue)
            assert s.name == "hourly" and s.next_run_ms is not None and s.next_run_ms % 3_600_000 == 0
            with pytest.raises(EnqueueRejected):
                await client.upsert_schedule(queue, "bad", cron="* * *", body=b"x")
            await client.delete_schedule(queue, "hourly")
            assert await client.list_schedules(queue) == []

    asyncio.run(main())
