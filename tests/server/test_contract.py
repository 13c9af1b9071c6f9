"""Every method of the contract, through a real ``pinlater serve`` and an Apache-generated client."""

from __future__ import annotations

import time
from types import ModuleType
from typing import Any

import pytest
from tests.conftest import ADMIN_PASSWORD

PENDING, IN_PROGRESS, SUCCEEDED, FAILED = 0, 1, 2, 3


def now_ms() -> int:
    return int(time.time() * 1000)


class Api:
    """Thin sugar over the generated client so tests read as the contract does."""

    def __init__(self, client: Any, t: ModuleType, source: str = "tests:localhost") -> None:
        self.c = client
        self.t = t
        self.ctx = t.RequestContext(source=source, requestId="r1")

    def create(self, queue: str) -> None:
        self.c.createQueue(self.ctx, queue)

    def enqueue(self, queue: str, *jobs: Any) -> list[str]:
        return list(
            self.c.enqueueJobs(self.ctx, self.t.PinLaterEnqueueRequest(queueName=queue, jobs=list(jobs))).jobDescriptors
        )

    def job(self, body: bytes, **kw: Any) -> Any:
        return self.t.PinLaterJob(body=body, **kw)

    def dequeue(self, queue: str, limit: int = 10, **kw: Any) -> Any:
        return self.c.dequeueJobs(self.ctx, self.t.PinLaterDequeueRequest(queueName=queue, limit=limit, **kw))

    def ack_request(self, queue: str, ok: list[str] = (), failed: list[Any] = ()) -> Any:  # type: ignore[assignment]
        return self.t.PinLaterJobAckRequest(
            queueName=queue,
            jobsSucceeded=[self.t.PinLaterJobAckInfo(jobDescriptor=d) for d in ok],
            jobsFailed=[f if not isinstance(f, str) else self.t.PinLaterJobAckInfo(jobDescriptor=f) for f in failed],
        )

    def ack(self, queue: str, ok: list[str] = (), failed: list[Any] = ()) -> None:  # type: ignore[assignment]
        self.c.ackDequeuedJobs(self.ctx, self.ack_request(queue, ok, failed))

    def lookup(self, *descriptors: str, body: bool = False) -> dict[str, Any]:
        return dict(
            self.c.lookupJobs(
                self.ctx, self.t.PinLaterLookupJobRequest(jobDescriptors=list(descriptors), includeBody=body)
            )
        )

    def count(self, queue: str, state: int, **kw: Any) -> int:
        return int(
            self.c.getJobCount(self.ctx, self.t.PinLaterGetJobCountRequest(queueName=queue, jobState=state, **kw))
        )

    def scan(self, queue: str, state: int, **kw: Any) -> Any:
        return self.c.scanJobs(self.ctx, self.t.PinLaterScanJobsRequest(queueName=queue, jobState=state, **kw))

    def error_code(self, fn: Any, *args: Any, **kw: Any) -> int:
        with pytest.raises(self.t.PinLaterException) as info:
            fn(*args, **kw)
        assert info.value.message, "every PinLaterException carries a message"
        return int(info.value.errorCode)


@pytest.fixture
def api(client: Any, ttypes: ModuleType) -> Api:
    return Api(client, ttypes)


def test_queues_are_created_idempotently_listed_and_deleted_with_the_password(api: Api) -> None:
    api.create("q_one")
    api.create("q_one")
    api.create("q_two")
    assert set(api.c.getQueueNames(api.ctx)) == {"q_one", "q_two"}
    code = api.error_code(api.c.deleteQueue, api.ctx, "q_one", "wrong password")
    assert code == api.t.ErrorCode.PASSWORD_INVALID
    assert "q_one" in api.c.getQueueNames(api.ctx)
    api.c.deleteQueue(api.ctx, "q_one", ADMIN_PASSWORD)
    api.c.deleteQueue(api.ctx, "q_one", ADMIN_PASSWORD)
    assert set(api.c.getQueueNames(api.ctx)) == {"q_two"}
    assert api.error_code(api.enqueue, "q_one", api.job(b"x")) == api.t.ErrorCode.QUEUE_NOT_FOUND


def test_full_lifecycle_in_priority_order_with_binary_bodies(api: Api) -> None:
    api.create("life")
    bodies = [bytes([0, 255, 128, i]) for i in range(3)]
    low = api.enqueue("life", api.job(bodies[0], priority=3))
    high = api.enqueue("life", api.job(bodies[1], priority=1, numAttemptsAllowed=5), api.job(bodies[2], priority=2))
    assert len(low) == 1 and len(high) == 2
    assert high[0].startswith("life:s1:p1:") and high[1].startswith("life:s1:p2:") and low[0].startswith("life:s1:p3:")

    first = api.dequeue("life", limit=2)
    assert list(first.jobs) == [high[0], high[1]], "priority 1 first, then 2"
    assert first.jobs[high[0]] == bodies[1]
    assert first.jobMetadata[high[0]].attemptsAllowed == 5
    assert first.jobMetadata[high[0]].attemptsRemaining == 5
    info = api.lookup(high[0])[high[0]]
    assert info.jobState == IN_PROGRESS and info.claimDescriptor and "tests:localhost" in info.claimDescriptor

    api.c.ackDequeuedJobs(
        api.ctx,
        api.t.PinLaterJobAckRequest(
            queueName="life",
            jobsSucceeded=[api.t.PinLaterJobAckInfo(jobDescriptor=high[0], appendCustomStatus=" done")],
        ),
    )
    info = api.lookup(high[0], body=True)[high[0]]
    assert info.jobState == SUCCEEDED
    assert info.customStatus == " done"
    assert info.body == bodies[1]
    assert info.createdAtTimestampMillis <= info.updatedAtTimestampMillis

    rest = api.dequeue("life", limit=10)
    assert list(rest.jobs) == [low[0]]
    assert api.dequeue("life", limit=10).jobs == {}


def test_failure_acks_retry_after_the_delay_then_fail_when_attempts_run_out(api: Api) -> None:
    api.create("retry")
    (d,) = api.enqueue("retry", api.job(b"r", numAttemptsAllowed=2, customStatus="s0"))
    assert list(api.dequeue("retry").jobs) == [d]
    before = now_ms()
    api.ack(
        "retry", failed=[api.t.PinLaterJobAckInfo(jobDescriptor=d, appendCustomStatus="|e1", retryDelayMillis=60_000)]
    )
    info = api.lookup(d)[d]
    assert info.jobState == PENDING and info.attemptsRemaining == 1 and info.attemptsAllowed == 2
    assert info.runAfterTimestampMillis >= before + 60_000
    assert info.customStatus == "s0|e1"
    assert api.dequeue("retry").jobs == {}, "not eligible until the retry delay has passed"
    assert api.count("retry", PENDING, countFutureJobs=True) == 1

    api.ack("retry", failed=[d])  # not IN_PROGRESS: a no-op
    assert api.lookup(d)[d].attemptsRemaining == 1

    (d2,) = api.enqueue("retry", api.job(b"once", numAttemptsAllowed=1))
    assert list(api.dequeue("retry").jobs) == [d2]
    api.ack("retry", failed=[d2])
    info = api.lookup(d2)[d2]
    assert info.jobState == FAILED and info.attemptsRemaining == 0


def test_a_run_after_or_an_expiry_at_the_end_of_i64_reads_back(api: Api) -> None:
    far_jobs_read_back(api)


def test_a_run_after_of_zero_is_now(api: Api) -> None:
    zero_run_after_is_now(api)


def test_attempts_below_one_are_one(api: Api) -> None:
    attempts_below_one_are_one(api)


def attempts_below_one_are_one(api: Api) -> None:
    """numAttemptsAllowed (enqueue, checkpoint) or attemptsToAllow (retryFailedJobs) below 1 is
    one attempt, no retry: as the original's Redis backend ran such a job (its MySQL backend
    left it IN_PROGRESS for good after a failure; we had refused the call)."""
    t = api.t
    api.create("few")
    zero, negative = api.enqueue("few", api.job(b"zero", numAttemptsAllowed=0), api.job(b"neg", numAttemptsAllowed=-3))
    for d in (zero, negative):
        info = api.lookup(d)[d]
        assert (info.attemptsAllowed, info.attemptsRemaining) == (1, 1)
    got = api.dequeue("few")
    assert set(got.jobs) == {zero, negative}
    assert {(m.attemptsAllowed, m.attemptsRemaining) for m in got.jobMetadata.values()} == {(1, 1)}
    api.ack("few", failed=[zero])
    assert api.lookup(zero)[zero].jobState == FAILED, "no retry"
    reset = t.PinLaterCheckpointJobRequest(jobDescriptor=negative, numOfAttemptsAllowed=0)
    api.c.checkpointJobs(api.ctx, t.PinLaterCheckpointJobsRequest(queueName="few", requests=[reset]))
    info = api.lookup(negative)[negative]
    assert (info.jobState, info.attemptsAllowed, info.attemptsRemaining) == (IN_PROGRESS, 1, 1)
    api.ack("few", failed=[negative])
    assert api.count("few", FAILED) == 2
    retry = t.PinLaterRetryFailedJobsRequest(queueName="few", attemptsToAllow=-1)
    assert api.c.retryFailedJobs(api.ctx, retry) == 2
    assert {api.lookup(d)[d].attemptsRemaining for d in (zero, negative)} == {1}
    assert set(api.dequeue("few").jobs) == {zero, negative}


def zero_run_after_is_now(api: Api) -> None:
    """An enqueue's runAfter 0 is now, as the original's Redis backend read it: the job is queued
    behind those enqueued before it, not ahead of them all with a run-after in 1970."""
    api.create("zero")
    (first,) = api.enqueue("zero", api.job(b"first"))
    before = now_ms()
    (zero,) = api.enqueue("zero", api.job(b"zero", runAfterTimestampMillis=0))
    assert api.lookup(zero)[zero].runAfterTimestampMillis >= before
    assert list(api.dequeue("zero", limit=1).jobs) == [first]
    assert list(api.dequeue("zero", limit=1).jobs) == [zero]


def far_jobs_read_back(api: Api) -> None:
    """A run-after or expiry past the year 9999 is cut to its last millisecond: a Redis score is a
    double, and one near i64's end read back past it, so lookups and scans of the job failed
    (``test_redis_server.py`` runs this on both Redis layouts)."""
    year_9999_end = 253_402_300_799_999
    api.create("far")
    (d,) = api.enqueue("far", api.job(b"far", runAfterTimestampMillis=2**63 - 1))
    info = api.lookup(d)[d]
    assert now_ms() + 10 * 365 * 24 * 3600 * 1000 < info.runAfterTimestampMillis <= year_9999_end
    assert [j.jobDescriptor for j in api.scan("far", PENDING, scanFutureJobs=True).scannedJobs] == [d]
    (e,) = api.enqueue("far", api.job(b"expiring", expireAtTimestampMillis=2**63 - 1))
    assert api.lookup(e)[e].expireAtTimestampMillis == year_9999_end
    assert list(api.dequeue("far").jobs) == [e]
    # A checkpoint's and a retry's run-after are cut alike (they were stored whole, and on Redis
    # every lookup naming the job and every scan of the queue's future jobs then failed).
    t = api.t
    put_back = t.PinLaterCheckpointJobRequest(jobDescriptor=e, moveToPending=True, runAfterTimestampMillis=2**63 - 1)
    api.c.checkpointJobs(api.ctx, t.PinLaterCheckpointJobsRequest(queueName="far", requests=[put_back]))
    assert api.lookup(e)[e].runAfterTimestampMillis == year_9999_end
    (f,) = api.enqueue("far", api.job(b"fails", numAttemptsAllowed=1))
    assert list(api.dequeue("far").jobs) == [f]
    api.ack("far", failed=[t.PinLaterJobAckInfo(jobDescriptor=f)])
    retry = t.PinLaterRetryFailedJobsRequest(queueName="far", runAfterTimestampMillis=2**63 - 1)
    assert api.c.retryFailedJobs(api.ctx, retry) == 1
    assert api.lookup(f)[f].runAfterTimestampMillis == year_9999_end
    scanned = api.scan("far", PENDING, scanFutureJobs=True).scannedJobs
    assert {j.jobDescriptor: j.runAfterTimestampMillis for j in scanned if j.jobDescriptor != d} == {
        e: year_9999_end,
        f: year_9999_end,
    }


def test_ids_past_i64_name_no_job_in_any_call(api: Api) -> None:
    """A descriptor's id may be any u64, but no job has one past i64: a checkpoint of one was an
    internal error on the embedded store (SQLite's INTEGER is an i64), as an ack is not."""
    t = api.t
    api.create("big")
    (d,) = api.enqueue("big", api.job(b"x"))
    assert list(api.dequeue("big").jobs) == [d]
    for local_id in (2**63, 2**64 - 1):
        big = f"big:s1:p1:{local_id}"
        put_back = t.PinLaterCheckpointJobRequest(jobDescriptor=big, moveToPending=True)
        api.c.checkpointJobs(api.ctx, t.PinLaterCheckpointJobsRequest(queueName="big", requests=[put_back]))
        api.ack("big", ok=[big])
        assert api.c.cancelJobs(api.ctx, t.PinLaterCancelJobsRequest(queueName="big", jobDescriptors=[big])) == 0
        assert api.lookup(big) == {}
    assert api.lookup(d)[d].jobState == IN_PROGRESS


def test_a_retry_delay_past_ten_years_is_cut_to_ten_years(api: Api) -> None:
    """``now + retryDelayMillis`` must not overflow: SQLite stored the sum as a float, which no
    lookup could then read back as an i64, and the job was lost to counts and scans."""
    ten_years = 10 * 365 * 24 * 3600 * 1000
    api.create("far")
    far, near = api.enqueue("far", api.job(b"far", numAttemptsAllowed=3), api.job(b"near", numAttemptsAllowed=3))
    assert set(api.dequeue("far").jobs) == {far, near}
    before = now_ms()
    api.ack(
        "far",
        failed=[
            api.t.PinLaterJobAckInfo(jobDescriptor=far, retryDelayMillis=2**63 - 1),
            api.t.PinLaterJobAckInfo(jobDescriptor=near, retryDelayMillis=-5),
        ],
    )
    after = now_ms()
    found = api.lookup(far, near)
    assert before + ten_years <= found[far].runAfterTimestampMillis <= after + ten_years
    assert before <= found[near].runAfterTimestampMillis <= after
    assert api.count("far", PENDING, countFutureJobs=True) == 1
    assert list(api.dequeue("far").jobs) == [near]


def test_a_dry_run_shows_as_many_ready_jobs_as_asked(api: Api) -> None:
    """As the original's one query did: a dry run of 2,500 on one shard showed 1,000 (its one
    store call a place asked for no more)."""
    api.create("peek")
    descriptors = api.enqueue("peek", *[api.job(b"j%d" % i) for i in range(2500)])
    assert set(api.dequeue("peek", limit=2500, dryRun=True).jobs) == set(descriptors)
    assert api.count("peek", PENDING) == 2500, "a dry run claims nothing"


def test_run_after_dry_run_and_acks_piggybacked_on_dequeue(api: Api) -> None:
    api.create("sched")
    (later,) = api.enqueue("sched", api.job(b"later", runAfterTimestampMillis=now_ms() + 3_600_000))
    a, b = api.enqueue("sched", api.job(b"a"), api.job(b"b"))
    dry = api.dequeue("sched", limit=10, dryRun=True)
    assert set(dry.jobs) == {a, b}
    assert api.count("sched", PENDING) == 2, "a dry run claims nothing"
    assert api.count("sched", PENDING, countFutureJobs=True) == 1

    got = api.dequeue("sched", limit=1)
    (first,) = got.jobs
    second = api.dequeue("sched", limit=1, jobAckRequest=api.ack_request("sched", ok=[first]))
    assert list(second.jobs) == [b if first == a else a]
    assert api.lookup(first)[first].jobState == SUCCEEDED
    assert later not in second.jobs


def test_checkpoint_is_applied_only_under_the_callers_claim(api: Api, client: Any, ttypes: ModuleType) -> None:
    api.create("cp")
    d1, d2 = api.enqueue("cp", api.job(b"one"), api.job(b"two"))
    assert set(api.dequeue("cp").jobs) == {d1, d2}
    other = Api(client, ttypes, source="someone-else:host2")
    other.c.checkpointJobs(
        other.ctx,
        ttypes.PinLaterCheckpointJobsRequest(
            queueName="cp", requests=[ttypes.PinLaterCheckpointJobRequest(jobDescriptor=d1, newBody="stolen")]
        ),
    )
    assert api.lookup(d1, body=True)[d1].body == b"one", "a checkpoint from another claimant is a no-op"

    run_after = now_ms() + 3_600_000
    api.c.checkpointJobs(
        api.ctx,
        ttypes.PinLaterCheckpointJobsRequest(
            queueName="cp",
            requests=[
                ttypes.PinLaterCheckpointJobRequest(
                    jobDescriptor=d1,
                    newBody="step 2",
                    numOfAttemptsAllowed=7,
                    prependCustomStatus="cp1;",
                    moveToPending=True,
                    runAfterTimestampMillis=run_after,
                ),
                ttypes.PinLaterCheckpointJobRequest(jobDescriptor=d2, prependCustomStatus="alive;"),
            ],
        ),
    )
    info = api.lookup(d1, body=True)[d1]
    assert info.jobState == PENDING and info.body == b"step 2"
    assert info.attemptsAllowed == 7 and info.attemptsRemaining == 7
    assert info.customStatus == "cp1;" and info.runAfterTimestampMillis == run_after
    info2 = api.lookup(d2)[d2]
    assert info2.jobState == IN_PROGRESS and info2.customStatus == "alive;"


def test_lookup_leaves_out_missing_jobs_and_rejects_malformed_descriptors(api: Api) -> None:
    api.create("look")
    (d,) = api.enqueue("look", api.job(b"body"))
    missing = d.rsplit(":", 1)[0] + ":999999"
    found = api.lookup(d, missing, "look:s77:p1:1", "nosuchqueue:s1:p1:1")
    assert list(found) == [d]
    assert found[d].body is None, "no body unless asked for"
    assert api.error_code(api.lookup, "not-a-descriptor") == api.t.ErrorCode.UNKNOWN
    assert api.error_code(api.ack, "look", ["look:s1:pX:1"]) == api.t.ErrorCode.UNKNOWN


def test_lookup_keys_each_job_by_the_descriptor_as_sent(api: Api) -> None:
    """As the original did: a descriptor spelled otherwise than the server writes it (a leading
    zero) is the key its job comes back under; the job's info keeps the written one."""
    api.create("spelled")
    (d,) = api.enqueue("spelled", api.job(b"body"))
    head, local_id = d.rsplit(":", 1)
    zeroed = f"{head}:00{local_id}"
    found = api.lookup(zeroed)
    assert list(found) == [zeroed]
    assert found[zeroed].jobDescriptor == d
    both = api.lookup(d, zeroed, zeroed)
    assert sorted(both) == sorted([d, zeroed]) and both[zeroed].jobDescriptor == d
    # Each spelling is a copy of the job in the reply, counted in its size: 20 of a 1 MiB job
    # pass what a reply may hold (16 MiB), where the check saw one job.
    (big,) = api.enqueue("spelled", api.job(b"x" * (1 << 20)))
    head, local_id = big.rsplit(":", 1)
    many = [f"{head}:{'0' * k}{local_id}" for k in range(1, 21)]
    assert len(api.lookup(*many[:3], body=True)) == 3
    with pytest.raises(api.t.PinLaterException, match="look up fewer jobs at a time"):
        api.lookup(*many, body=True)


def test_counts_and_scans_by_state_priority_time_and_body_regex(api: Api) -> None:
    api.create("cnt")
    base = now_ms() - 10_000
    descriptors = api.enqueue(
        "cnt",
        *[api.job(f"user-{i}".encode(), priority=1 + i % 2, runAfterTimestampMillis=base + i) for i in range(6)],
        api.job(b"future", runAfterTimestampMillis=now_ms() + 3_600_000),
    )
    assert api.count("cnt", PENDING) == 6
    assert api.count("cnt", PENDING, priority=2) == 3
    assert api.count("cnt", PENDING, countFutureJobs=True) == 1
    assert api.count("cnt", PENDING, bodyRegexToMatch="user-[0-2]$") == 3
    assert api.count("cnt", SUCCEEDED) == 0

    scanned = api.scan("cnt", PENDING, limit=4)
    assert [j.jobDescriptor for j in scanned.scannedJobs] == [descriptors[i] for i in (5, 4, 3, 2)], "newest first"
    assert all(j.body is None for j in scanned.scannedJobs)
    # pinlater pages (the original answered CONTINUATION_END and had no second page)
    assert scanned.continuation != "-1"
    rest = api.scan("cnt", PENDING, limit=4, continuation=scanned.continuation)
    assert [j.jobDescriptor for j in rest.scannedJobs] == [descriptors[i] for i in (1, 0)]
    assert rest.continuation == "-1"
    assert [j.jobDescriptor for j in api.scan("cnt", PENDING, priority=1).scannedJobs] == [
        descriptors[i] for i in (4, 2, 0)
    ]
    assert [j.jobDescriptor for j in api.scan("cnt", PENDING, scanFutureJobs=True).scannedJobs] == [descriptors[6]]
    assert len(api.scan("cnt", PENDING, bodyRegexToMatch="user-5").scannedJobs) == 1
    code = api.error_code(api.scan, "cnt", PENDING, continuation="42")
    assert code == api.t.ErrorCode.CONTINUATION_INVALID


def test_retry_failed_jobs_and_delete_jobs_return_counts(api: Api) -> None:
    api.create("adm")
    descriptors = api.enqueue("adm", *[api.job(f"job-{i}".encode(), numAttemptsAllowed=1) for i in range(5)])
    assert len(api.dequeue("adm", limit=5).jobs) == 5
    api.ack("adm", failed=descriptors)
    assert api.count("adm", FAILED) == 5

    retried = api.c.retryFailedJobs(
        api.ctx, api.t.PinLaterRetryFailedJobsRequest(queueName="adm", attemptsToAllow=3, limit=2)
    )
    assert retried == 2
    assert api.count("adm", FAILED) == 3 and api.count("adm", PENDING) == 2
    pending = [d for d, info in api.lookup(*descriptors).items() if info.jobState == PENDING]
    assert all(api.lookup(d)[d].attemptsRemaining == 3 for d in pending)

    deleted = api.c.deleteJobs(
        api.ctx,
        api.t.PinLaterDeleteJobsRequest(queueName="adm", jobState=FAILED, bodyRegexToMatch="job-[0-9]", limit=2),
    )
    assert deleted == 2
    assert api.count("adm", FAILED) == 1
    assert api.c.deleteJobs(api.ctx, api.t.PinLaterDeleteJobsRequest(queueName="adm", jobState=PENDING)) == 2
    assert api.count("adm", PENDING) == 0


def test_each_client_error_has_its_contract_code(api: Api) -> None:
    e = api.t.ErrorCode
    api.create("errs")
    assert api.error_code(api.create, "bad-name!") == e.QUEUE_NAME_INVALID
    assert api.error_code(api.create, "") == e.QUEUE_NAME_INVALID
    assert api.error_code(api.create, "q" * 129) == e.QUEUE_NAME_TOO_LONG
    assert api.error_code(api.enqueue, "nope", api.job(b"x")) == e.QUEUE_NOT_FOUND
    assert api.error_code(api.dequeue, "nope") == e.QUEUE_NOT_FOUND
    for limit in (0, -5):  # no job asked for: the original still asked a shard, which said so
        assert api.error_code(api.dequeue, "nope", limit=limit) == e.QUEUE_NOT_FOUND
        assert len(api.dequeue("errs", limit=limit).jobs) == 0
    assert api.error_code(api.enqueue, "errs", api.job(b"x", priority=4)) == e.PRIORITY_NOT_SUPPORTED
    assert api.error_code(api.enqueue, "errs", api.job(b"x", priority=0)) == e.PRIORITY_NOT_SUPPORTED
    assert api.error_code(api.count, "errs", PENDING, priority=9) == e.PRIORITY_NOT_SUPPORTED
    assert api.error_code(api.count, "errs", PENDING, bodyRegexToMatch="(unclosed") == e.UNKNOWN
    assert api.count("errs", PENDING) == 0, "nothing of a rejected batch was stored"
    assert api.enqueue("errs") == [], "an enqueue of no jobs is answered, with no descriptor"
    assert api.error_code(api.enqueue, "nope") == e.QUEUE_NOT_FOUND, "of no jobs, to a queue that does not exist"
    with pytest.raises(api.t.PinLaterException) as info:  # acked alone or piggy-backed on a dequeue
        api.c.ackDequeuedJobs(api.ctx, api.ack_request("errs", ok=["errs:s1:p1:1"], failed=["not a descriptor"]))
    assert info.value.errorCode == e.UNKNOWN and info.value.message.startswith("invalid job descriptor: ")
    with pytest.raises(api.t.PinLaterException) as info:
        api.dequeue("errs", jobAckRequest=api.ack_request("errs", ok=["errs:p1:1"]))
    assert info.value.errorCode == e.UNKNOWN and info.value.message.startswith("invalid job descriptor: ")
    made_up = [f"errs:s{i}:p1:1" for i in range(10_001)]  # (each a group of the server's)
    with pytest.raises(api.t.PinLaterException, match="the acks name more than 10000 shards"):
        api.c.ackDequeuedJobs(api.ctx, api.ack_request("errs", ok=made_up))
