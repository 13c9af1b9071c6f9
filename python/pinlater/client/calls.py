"""Each client method as a ``Call``: the Thrift method, its arguments, whether it is safe to
repeat, and how its result becomes a typed value. The sync and asyncio clients only move calls.

``safe`` means that sending the request twice leaves the store as sending it once would:
reads (lookup, count, scan, getQueueNames, listSchedules, dry-run dequeue), createQueue
(idempotent by contract), cancelJobs (a cancelled job is left alone by the second; only the
count it answers differs), upsertSchedule (the second replaces the schedule with itself, its
next tick counted from the later send) and deleteSchedule. Everything else (enqueue, dequeue,
ack, checkpoint, retry/delete jobs, deleteQueue) is repeated only when the first request
certainly never reached a server.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pinlater.client.errors import ServerError
from pinlater.client.types import (
    SCAN_END,
    SCAN_START,
    Ack,
    Checkpoint,
    DequeuedJob,
    EnqueueResult,
    Job,
    JobInfo,
    JobState,
    ScanResult,
    ScheduleInfo,
)
from pinlater.errors import ErrorCode, PinLaterError
from pinlater.idl import idl

T = TypeVar("T")

#: What ``enqueue`` takes for one job.
JobLike = bytes | str | Job
#: What ``ack`` and ``dequeue`` take for one job's outcome: a descriptor or an ``Ack``.
AckLike = str | Ack
#: What the state-filtered calls take: a ``JobState`` or its name ("failed", "PENDING").
StateLike = JobState | str
#: The longest long poll a dequeue asks for, in seconds (the server's own bound).
MAX_WAIT = 30.0


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    method: str
    #: The arguments after the RequestContext, in the IDL's order.
    args: tuple[Any, ...]
    safe: bool
    convert: Callable[[Any], T]
    #: Seconds the server may hold the call on purpose (a long-poll dequeue), added to the
    #: client's timeout for this call.
    wait: float = 0.0

    def result(self, value: Any) -> T:
        """The reply's result as the call's typed value; a reply holding what this client cannot
        read (a job state it does not know, from a newer or foreign server) is a ``ServerError``,
        as every other failure of a call is a ``PinLaterError``."""
        try:
            return self.convert(value)
        except PinLaterError:  # (a converter's own refusal of the reply, already named)
            raise
        except Exception as exc:
            raise ServerError(ErrorCode.UNKNOWN, f"{self.method}: a reply this client cannot read: {exc!r}") from exc


def job_state(state: StateLike) -> JobState:
    """``state`` as a ``JobState``; a name in any case is taken too. ValueError for anything else."""
    if isinstance(state, str):
        try:
            return JobState[state.strip().upper()]
        except KeyError:
            names = ", ".join(s.name for s in JobState)
            raise ValueError(f"{state!r} is not a job state: {names}") from None
    return JobState(state)


def _none(_: Any) -> None:
    return None


def _int(value: Any) -> int:
    return int(value or 0)


def _thrift_job(job: JobLike) -> Any:
    if isinstance(job, bytes):
        return idl.PinLaterJob(body=job, dedupWindowMillis=None)
    if isinstance(job, str):
        return idl.PinLaterJob(body=job.encode(), dedupWindowMillis=None)
    body = job.body.encode() if isinstance(job.body, str) else job.body
    return idl.PinLaterJob(
        body=body,
        priority=job.priority,
        runAfterTimestampMillis=job.run_after_ms,
        numAttemptsAllowed=job.attempts,
        customStatus=job.custom_status,
        dedupKey=job.dedup_key,
        # None, not the IDL's default 0, leaves field 7 off the wire: a job without a window
        # costs no byte more than before the extension, and the original server sees nothing new
        dedupWindowMillis=job.dedup_window_ms or None,
        groupKey=job.group_key,
        expireAtTimestampMillis=job.expire_at_ms,
    )


def thrift_ack(ack: AckLike) -> Any:
    if isinstance(ack, str):
        return idl.PinLaterJobAckInfo(jobDescriptor=ack)
    return idl.PinLaterJobAckInfo(
        jobDescriptor=ack.descriptor,
        appendCustomStatus=ack.append_status,
        retryDelayMillis=max(0, round(ack.retry_delay * 1000)),
    )


def thrift_ack_request(queue: str, succeeded: Iterable[AckLike], failed: Iterable[AckLike]) -> Any:
    return idl.PinLaterJobAckRequest(
        queueName=queue,
        jobsSucceeded=[thrift_ack(a) for a in succeeded],
        jobsFailed=[thrift_ack(a) for a in failed],
    )


def dequeued_jobs(response: Any) -> list[DequeuedJob]:
    """The jobs of a ``PinLaterDequeueResponse``, in the order the server returned them."""
    jobs: Mapping[str, bytes] = response.jobs or {}
    meta: Mapping[str, Any] = response.jobMetadata or {}
    out = []
    for descriptor, body in jobs.items():
        m = meta.get(descriptor)
        allowed = (m.attemptsAllowed or 0) if m is not None else 0
        remaining = (m.attemptsRemaining or 0) if m is not None else 0
        out.append(DequeuedJob(descriptor, body, allowed, remaining))
    return out


def _enqueue_result(response: Any) -> EnqueueResult:
    """``jobDescriptors`` with ``deduplicated`` (field 2; absent: none was). Flags that do not
    pair up with the descriptors mean the reply cannot be trusted."""
    try:
        return EnqueueResult(response.jobDescriptors, response.deduplicated)
    except ValueError as exc:
        raise ServerError(ErrorCode.UNKNOWN, f"enqueueJobs: {exc}") from None


def _job_infos(found: Mapping[str, Any] | None) -> dict[str, JobInfo]:
    return {d: JobInfo.from_thrift(info) for d, info in (found or {}).items()}


def _scan_result(response: Any) -> ScanResult:
    jobs = [JobInfo.from_thrift(info) for info in response.scannedJobs or []]
    return ScanResult(jobs, response.continuation or SCAN_END, raw=response)


def _schedules(found: Iterable[Any] | None) -> list[ScheduleInfo]:
    return [ScheduleInfo.from_thrift(s) for s in found or ()]


def create_queue(name: str) -> Call[None]:
    return Call("createQueue", (name,), True, _none)


def delete_queue(name: str, password: str) -> Call[None]:
    return Call("deleteQueue", (name, password), False, _none)


def queue_names() -> Call[set[str]]:
    return Call("getQueueNames", (), True, lambda names: set(names or ()))


def enqueue(queue: str, jobs: Iterable[JobLike]) -> Call[EnqueueResult]:
    request = idl.PinLaterEnqueueRequest(queueName=queue, jobs=[_thrift_job(j) for j in jobs])
    return Call("enqueueJobs", (request,), False, _enqueue_result)


def dequeue(
    queue: str,
    limit: int,
    succeeded: Iterable[AckLike] = (),
    failed: Iterable[AckLike] = (),
    dry_run: bool = False,
    coverage: float = 1.0,
    wait: float = 0.0,
) -> Call[list[DequeuedJob]]:
    """``wait`` > 0 asks the server to hold the call up to that many seconds (at most
    ``MAX_WAIT``) until a job is ready (``waitMillis``, field 6: a pinlater extension; the
    original server ignores it and answers at once)."""
    ack_request = thrift_ack_request(queue, succeeded, failed)
    carries_acks = bool(ack_request.jobsSucceeded or ack_request.jobsFailed)
    wait = min(max(wait, 0.0), MAX_WAIT) if not dry_run else 0.0
    wait_ms = round(wait * 1000)
    request = idl.PinLaterDequeueRequest(
        queueName=queue,
        limit=limit,
        jobAckRequest=ack_request if carries_acks else None,
        dryRun=dry_run,
        coverage=coverage,
        waitMillis=wait_ms or None,
    )
    return Call("dequeueJobs", (request,), dry_run and not carries_acks, dequeued_jobs, wait_ms / 1000)


def ack(queue: str, succeeded: Iterable[AckLike] = (), failed: Iterable[AckLike] = ()) -> Call[None]:
    return Call("ackDequeuedJobs", (thrift_ack_request(queue, succeeded, failed),), False, _none)


def _text_body(body: str | bytes | None) -> str | None:
    """A checkpoint's new body as the contract's ``newBody`` (a string): bytes that are not UTF-8
    are refused here, where the server stored U+FFFD in place of each bad byte, unsaid."""
    if not isinstance(body, bytes):
        return body
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"a checkpoint's new_body must be UTF-8 (the contract's newBody is a string): {exc}") from None


def checkpoint(queue: str, checkpoints: Iterable[Checkpoint]) -> Call[None]:
    requests = [
        idl.PinLaterCheckpointJobRequest(
            jobDescriptor=c.descriptor,
            newBody=_text_body(c.new_body),
            moveToPending=c.move_to_pending,
            runAfterTimestampMillis=c.run_after_ms,
            numOfAttemptsAllowed=c.attempts_allowed,
            prependCustomStatus=c.prepend_status,
        )
        for c in checkpoints
    ]
    request = idl.PinLaterCheckpointJobsRequest(queueName=queue, requests=requests)
    return Call("checkpointJobs", (request,), False, _none)


def lookup(descriptors: Iterable[str], include_body: bool = False) -> Call[dict[str, JobInfo]]:
    request = idl.PinLaterLookupJobRequest(jobDescriptors=list(descriptors), includeBody=include_body)
    return Call("lookupJobs", (request,), True, _job_infos)


def count(
    queue: str, state: StateLike, priority: int | None = None, count_future: bool = False, body_regex: str | None = None
) -> Call[int]:
    request = idl.PinLaterGetJobCountRequest(
        queueName=queue,
        jobState=int(job_state(state)),
        priority=priority,
        countFutureJobs=count_future,
        bodyRegexToMatch=body_regex,
    )
    return Call("getJobCount", (request,), True, _int)


def scan(
    queue: str,
    state: StateLike,
    priority: int | None = None,
    scan_future: bool = False,
    limit: int = 100,
    body_regex: str | None = None,
    continuation: str = SCAN_START,
) -> Call[ScanResult]:
    request = idl.PinLaterScanJobsRequest(
        queueName=queue,
        jobState=int(job_state(state)),
        priority=priority,
        scanFutureJobs=scan_future,
        continuation=continuation,
        limit=limit,
        bodyRegexToMatch=body_regex,
    )
    return Call("scanJobs", (request,), True, _scan_result)


def next_page(sent: str, page: ScanResult) -> str | None:
    """The continuation that fetches the page after ``page`` (which answered ``sent``), or None
    when the scan is over. A reply that would repeat itself (no job, the same continuation) is a
    server error rather than a loop without end."""
    if page.done:
        return None
    if not page.jobs and page.continuation == sent:
        raise ServerError(ErrorCode.UNKNOWN, f"scanJobs: no job and no progress from continuation {sent!r}")
    return page.continuation


def retry_failed(
    queue: str, priority: int = 1, attempts: int = 1, run_after_ms: int | None = None, limit: int = 1000
) -> Call[int]:
    request = idl.PinLaterRetryFailedJobsRequest(
        queueName=queue, priority=priority, attemptsToAllow=attempts, runAfterTimestampMillis=run_after_ms, limit=limit
    )
    return Call("retryFailedJobs", (request,), False, _int)


def delete_jobs(
    queue: str, state: StateLike, priority: int = 1, body_regex: str | None = None, limit: int = 1000
) -> Call[int]:
    request = idl.PinLaterDeleteJobsRequest(
        queueName=queue, jobState=int(job_state(state)), priority=priority, bodyRegexToMatch=body_regex, limit=limit
    )
    return Call("deleteJobs", (request,), False, _int)


def cancel(queue: str, descriptors: Iterable[str]) -> Call[int]:
    request = idl.PinLaterCancelJobsRequest(queueName=queue, jobDescriptors=list(descriptors))
    return Call("cancelJobs", (request,), True, _int)


def upsert_schedule(
    queue: str,
    name: str,
    body: bytes | str,
    cron: str | None = None,
    interval_ms: int | None = None,
    priority: int = 1,
    attempts: int = 2,
    custom_status: str = "",
    group_key: str | None = None,
    paused: bool = False,
) -> Call[None]:
    job = idl.PinLaterJob(
        body=body.encode() if isinstance(body, str) else body,
        priority=priority,
        numAttemptsAllowed=attempts,
        customStatus=custom_status,
        groupKey=group_key,
        dedupWindowMillis=None,  # a schedule's job may not carry one; None keeps field 7 off the wire
    )
    schedule = idl.PinLaterSchedule(
        queueName=queue, name=name, cron=cron, intervalMillis=interval_ms, job=job, paused=paused
    )
    return Call("upsertSchedule", (schedule,), True, _none)


def delete_schedule(queue: str, name: str) -> Call[None]:
    return Call("deleteSchedule", (queue, name), True, _none)


def list_schedules(queue: str) -> Call[list[ScheduleInfo]]:
    return Call("listSchedules", (queue,), True, _schedules)


#: Thrift methods that are safe to repeat (see the module's docstring); used by ``client.raw``.
SAFE_METHODS = frozenset(
    {
        "createQueue",
        "getQueueNames",
        "lookupJobs",
        "getJobCount",
        "scanJobs",
        "cancelJobs",
        "upsertSchedule",
        "deleteSchedule",
        "listSchedules",
    }
)


def raw(method: str, args: tuple[Any, ...]) -> Call[Any]:
    """A call with Thrift structs in and out (``client.raw``)."""
    if not hasattr(idl.PinLater, method + "_args"):
        raise AttributeError(f"PinLater has no method {method!r}")
    return Call(method, args, method in SAFE_METHODS, lambda value: value)
