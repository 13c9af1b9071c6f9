"""Job control through real servers and a client generated from the IDL by Apache Thrift: cancel,
expiry, scans that page, schedules (embedded store, broker off and on), ticks fired once by two
servers sharing a Redis, and queue depth in ``/metrics``."""

from __future__ import annotations

import itertools
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.server.test_contract import FAILED, IN_PROGRESS, PENDING, Api, now_ms
from tests.server.test_redis_server import (
    redis_servers,  # noqa: F401 (a fixture)
    serve,
    write_config,
)
from tests.support.pinlater_server import ServerProcess
from tests.support.redis_server import RedisServer

Q = "control"


@pytest.fixture
def api(client: Any, ttypes: Any) -> Api:
    return Api(client, ttypes)


def wait_for(condition: Callable[[], Any], seconds: float = 15.0, what: str = "the condition") -> Any:
    deadline = time.monotonic() + seconds
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {seconds:g} s")
        time.sleep(0.05)


def cancel(api: Api, queue: str, *descriptors: str) -> int:
    return int(
        api.c.cancelJobs(api.ctx, api.t.PinLaterCancelJobsRequest(queueName=queue, jobDescriptors=list(descriptors)))
    )


def schedule(api: Api, name: str, **kw: Any) -> Any:
    job = kw.pop("job", api.job(b"tick"))
    return api.t.PinLaterSchedule(queueName=Q, name=name, job=job, **kw)


def test_cancel_ends_pending_jobs_and_the_next_failure_of_running_ones(api: Api) -> None:
    api.create(Q)
    running, waiting, later = api.enqueue(
        Q,
        api.job(b"run", numAttemptsAllowed=5),
        api.job(b"wait"),
        api.job(b"later", runAfterTimestampMillis=now_ms() + 60_000),
    )
    assert list(api.dequeue(Q, limit=1).jobs) == [running]

    assert cancel(api, Q, running, waiting, later, f"{Q}:s1:p1:999999") == 3
    found = api.lookup(running, waiting, later)
    assert [found[d].jobState for d in (running, waiting, later)] == [IN_PROGRESS, FAILED, FAILED]
    assert found[waiting].customStatus == "cancelled" and found[waiting].attemptsRemaining == 0

    api.ack(Q, failed=[api.t.PinLaterJobAckInfo(jobDescriptor=running, appendCustomStatus="oops", retryDelayMillis=0)])
    info = api.lookup(running)[running]
    assert (info.jobState, info.customStatus) == (FAILED, "oops cancelled")
    assert api.dequeue(Q).jobs == {}
    assert cancel(api, Q, running) == 0, "a finished job changes nothing"


def test_cancel_refuses_a_descriptor_of_another_queue_and_an_unknown_queue(api: Api) -> None:
    api.create(Q)
    api.create("elsewhere")
    (other,) = api.enqueue("elsewhere", api.job(b"x"))
    assert api.error_code(cancel, api, Q, other) == api.t.ErrorCode.UNKNOWN
    assert api.error_code(cancel, api, Q, "not a descriptor") == api.t.ErrorCode.UNKNOWN
    assert api.error_code(cancel, api, "missing", "missing:s1:p1:1") == api.t.ErrorCode.QUEUE_NOT_FOUND
    assert api.lookup(other)[other].jobState == PENDING


def test_an_expired_job_is_never_handed_out(api: Api) -> None:
    api.create(Q)
    past, future = api.enqueue(
        Q,
        api.job(b"too late", expireAtTimestampMillis=now_ms() - 1),
        api.job(b"in time", expireAtTimestampMillis=now_ms() + 3_600_000),
    )
    got = api.dequeue(Q, limit=10)
    assert list(got.jobs) == [future]

    info = api.lookup(past)[past]
    assert info.expireAtTimestampMillis is not None
    # A dequeue may expire it at once; the monitor does otherwise. Either way it is never handed out.
    assert info.jobState in (PENDING, FAILED)
    refused = api.error_code(api.enqueue, Q, api.job(b"x", expireAtTimestampMillis=-5))
    assert refused == api.t.ErrorCode.ENQUEUE_REJECTED


def test_scans_page_until_the_end(api: Api) -> None:
    api.create(Q)
    base = now_ms() - 100_000
    made = set(api.enqueue(Q, *[api.job(b"%d" % i, runAfterTimestampMillis=base + i // 3) for i in range(25)]))
    seen: list[str] = []
    continuation = "0"
    pages = 0
    while continuation != "-1":
        reply = api.scan(Q, PENDING, limit=10, continuation=continuation)
        seen.extend(j.jobDescriptor for j in reply.scannedJobs)
        continuation = reply.continuation
        pages += 1
    assert pages == 3
    assert sorted(seen) == sorted(made)
    first = api.scan(Q, PENDING, limit=10)
    assert api.error_code(api.scan, Q, FAILED, continuation=first.continuation) == api.t.ErrorCode.CONTINUATION_INVALID
    assert api.error_code(api.scan, Q, PENDING, continuation="1.abc.def") == api.t.ErrorCode.CONTINUATION_INVALID
    for limit in (0, -5):  # no page can be read: the scan ends (a loop to CONTINUATION_END asked for ever)
        empty = api.scan(Q, PENDING, limit=limit, continuation=first.continuation)
        assert (empty.scannedJobs, empty.continuation) == ([], "-1")
    assert api.error_code(api.scan, Q, PENDING, limit=0, continuation="x") == api.t.ErrorCode.CONTINUATION_INVALID


def test_schedules_are_kept_listed_fired_and_deleted(api: Api) -> None:
    api.create(Q)
    api.c.upsertSchedule(api.ctx, schedule(api, "every-second", intervalMillis=1_000, job=api.job(b"tick", priority=2)))
    api.c.upsertSchedule(api.ctx, schedule(api, "nightly", cron="0 3 * * *", paused=True))

    listed = api.c.listSchedules(api.ctx, Q)
    assert [s.name for s in listed] == ["every-second", "nightly"]
    assert listed[0].intervalMillis == 1_000 and listed[0].job.priority == 2
    assert listed[1].cron == "0 3 * * *" and listed[1].paused
    assert all(s.nextRunTimestampMillis > now_ms() - 5_000 for s in listed)

    wait_for(lambda: api.count(Q, PENDING, priority=2) >= 2, what="two ticks' jobs")
    api.c.deleteSchedule(api.ctx, Q, "every-second")
    api.c.deleteSchedule(api.ctx, Q, "every-second")  # unknown names are a no-op
    assert [s.name for s in api.c.listSchedules(api.ctx, Q)] == ["nightly"]
    jobs = api.scan(Q, PENDING, priority=2).scannedJobs
    keys = [j.dedupKey for j in jobs]
    assert len(set(keys)) == len(keys) and all(k.startswith("pinlater:schedule:every-second:") for k in keys)


@pytest.mark.parametrize(
    ("kw", "reason"),
    [
        ({"cron": "61 * * * *"}, "minute: 61"),
        ({"cron": "* * * * *", "intervalMillis": 1_000}, "exactly one"),
        ({}, "exactly one"),
    ],
)
def test_a_bad_schedule_is_refused_with_the_reason(api: Api, kw: dict[str, Any], reason: str) -> None:
    api.create(Q)
    with pytest.raises(api.t.PinLaterException) as info:
        api.c.upsertSchedule(api.ctx, schedule(api, "bad", **kw))
    assert info.value.errorCode == api.t.ErrorCode.ENQUEUE_REJECTED
    assert reason in info.value.message


def test_a_schedules_group_key_with_a_nul_character_is_refused(api: Api) -> None:
    """As an enqueue's: the embedded store reads group keys through SQLite's JSON, which cuts a
    string at U+0000, and such a group never let its next job go."""
    api.create(Q)
    with pytest.raises(api.t.PinLaterException) as info:
        api.c.upsertSchedule(api.ctx, schedule(api, "nul", cron="@daily", job=api.job(b"t", groupKey="acct\0007")))
    assert info.value.errorCode == api.t.ErrorCode.ENQUEUE_REJECTED
    assert "groupKey must not contain a NUL character" in info.value.message
    assert api.c.listSchedules(api.ctx, Q) == []


def test_a_schedules_status_is_cut_and_a_queues_schedules_are_bounded_in_all(api: Api) -> None:
    """A schedule's job status is cut as an enqueue's is (the runner reads its row each tick), and
    the queue's schedules together hold at most MAX_QUEUE_SCHEDULE_BYTES (8 MiB), so that
    listSchedules answers them in one frame: the upsert that would pass it is refused, naming the
    schedule shortened, and a schedule replaced counts once."""
    api.create(Q)
    api.c.upsertSchedule(api.ctx, schedule(api, "chatty", cron="@daily", job=api.job(b"t", customStatus="s" * 20_000)))
    (listed,) = api.c.listSchedules(api.ctx, Q)
    assert listed.job.customStatus == "s" * 5000

    mib = b"x" * (1024 * 1024)
    for i in range(7):
        api.c.upsertSchedule(api.ctx, schedule(api, f"big{i}", cron="@daily", job=api.job(mib)))
    api.c.upsertSchedule(api.ctx, schedule(api, "big0", cron="@hourly", job=api.job(mib)))  # replaced
    name = "n" * 150
    with pytest.raises(api.t.PinLaterException) as info:
        api.c.upsertSchedule(api.ctx, schedule(api, name, cron="@daily", job=api.job(mib)))
    assert info.value.errorCode == api.t.ErrorCode.ENQUEUE_REJECTED
    assert "at most 8388608 (MAX_QUEUE_SCHEDULE_BYTES)" in info.value.message
    assert f"{'n' * 80!r}... (150 characters)" in info.value.message and name not in info.value.message
    listed = api.c.listSchedules(api.ctx, Q)
    assert sorted(s.name for s in listed) == ["big0", "big1", "big2", "big3", "big4", "big5", "big6", "chatty"]
    assert next(s for s in listed if s.name == "big0").cron == "@hourly"


@pytest.mark.parametrize(
    "descriptor",
    [f"{Q}:" + "x" * 10_000, f"{Q}:s1:p1:" + "9" * 10_000, "other" + "y" * 10_000 + ":s1:p1:1"],
)
def test_an_error_repeats_only_the_start_of_a_huge_descriptor(api: Api, descriptor: str) -> None:
    api.create(Q)
    with pytest.raises(api.t.PinLaterException) as info:
        cancel(api, Q, descriptor)
    message = str(info.value.message)
    assert len(message) < 500 and descriptor[:80] in message, message


def test_schedules_of_an_unknown_queue(api: Api) -> None:
    assert api.error_code(api.c.listSchedules, api.ctx, "nope") == api.t.ErrorCode.QUEUE_NOT_FOUND
    assert api.error_code(api.c.deleteSchedule, api.ctx, "nope", "x") == api.t.ErrorCode.QUEUE_NOT_FOUND
    with pytest.raises(api.t.PinLaterException) as info:
        api.c.upsertSchedule(
            api.ctx, api.t.PinLaterSchedule(queueName="nope", name="x", job=api.job(b"x"), intervalMillis=1_000)
        )
    assert info.value.errorCode == api.t.ErrorCode.QUEUE_NOT_FOUND


def metrics(server: ServerProcess) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.admin_port}/metrics", timeout=10) as response:
        return str(response.read().decode())


def test_metrics_show_depth_by_priority_the_oldest_ready_age_and_expired_jobs(
    start_server: Callable[..., ServerProcess], open_client: Callable[[ServerProcess], Any], ttypes: Any
) -> None:
    server = start_server(properties={"BACKEND_MONITOR_THREAD_DELAY_SECONDS": 1})
    api = Api(open_client(server), ttypes)
    api.create(Q)
    api.enqueue(Q, api.job(b"old", runAfterTimestampMillis=now_ms() - 120_000), api.job(b"p2", priority=2))
    api.enqueue(Q, api.job(b"gone", expireAtTimestampMillis=now_ms() - 1))
    api.dequeue(Q, limit=1, dryRun=True)

    def scraped() -> str | None:
        text = metrics(server)
        expired = f'pinlater_queue_expired_jobs_total{{queue="{Q}"}} 1.0' in text
        return text if expired else None

    text = wait_for(scraped, 30, "the expired job counted in /metrics")
    assert f'pinlater_queue_jobs_by_priority{{priority="2",queue="{Q}",state="pending"}} 1.0' in text
    line = next(x for x in text.splitlines() if x.startswith(f'pinlater_queue_oldest_ready_age_seconds{{queue="{Q}"}}'))
    assert float(line.split()[-1]) >= 119


@pytest.mark.redis
def test_two_servers_on_one_redis_fire_each_tick_once(
    tmp_path: Path,
    redis_servers: Callable[..., RedisServer],  # noqa: F811
    start_server: Callable[..., ServerProcess],
    open_client: Callable[[ServerProcess], Any],
    ttypes: Any,
) -> None:
    config = tmp_path / "redis.json"
    write_config(config, {"a": (redis_servers("a"), False)}, "compact")
    servers = [serve(start_server, config) for _ in range(2)]
    api = Api(open_client(servers[0]), ttypes)
    api.create(Q)
    api.c.upsertSchedule(api.ctx, schedule(api, "shared", intervalMillis=1_000))

    jobs = wait_for(lambda: (j := api.scan(Q, PENDING).scannedJobs) and len(j) >= 4 and j, 30, "four ticks")
    keys = [j.dedupKey for j in jobs]
    assert len(keys) == len(set(keys)), "each tick once, though two servers fire it"
    ticks = sorted(int(k.rsplit(":", 1)[1]) for k in keys)
    assert all(b - a >= 1_000 for a, b in itertools.pairwise(ticks)), "one job per tick"
