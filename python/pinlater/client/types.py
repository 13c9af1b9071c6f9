"""Typed requests and results of the client: dataclasses in place of raw Thrift structs.

Times are milliseconds since the epoch, as on the wire (``*_ms``); delays are seconds (float).
Each result keeps the Thrift struct it came from in ``raw`` (not compared, not printed), and
``PinLaterClient.raw`` makes calls with Thrift structs in and out.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from pinlater.backends.base import JobState

__all__ = [
    "SCAN_END",
    "SCAN_START",
    "Ack",
    "Checkpoint",
    "DequeuedJob",
    "EnqueueResult",
    "Job",
    "JobInfo",
    "JobState",
    "ScanResult",
    "ScheduleInfo",
]

#: The continuation that starts a scan (the contract's ``CONTINUATION_START``).
SCAN_START = "0"
#: The continuation of a scan with nothing left (the contract's ``CONTINUATION_END``).
SCAN_END = "-1"


@dataclass(frozen=True, slots=True)
class Job:
    """A job to enqueue. Defaults are the contract's: priority 1 (highest), 2 attempts.

    The keys are pinlater extensions (``PinLaterJob`` 6-8), sent only when set; the original
    server ignores them. ``dedup_key``: while a job of the queue with this key is PENDING or
    IN_PROGRESS, enqueueing another with it creates nothing and answers the live job's
    descriptor (``EnqueueResult.deduplicated``). ``dedup_window_ms`` > 0 (needs a key) keeps the
    key held that long after the holder's enqueue, even once it has finished. ``group_key``
    (ordered groups): the queue's jobs with one group key are handed out in enqueue order, at
    most the queue's ``groupConcurrency`` (default 1) at once, the next only once the one before
    it has finished; a store that cannot keep groups (MySQL, Redis in the original layout)
    refuses the job (ENQUEUE_REJECTED). With both keys, the dedup key is checked within the
    group's shard.

    ``expire_at_ms`` (``PinLaterJob`` 9, sent only when set): a job still PENDING at that time
    (ms since the epoch) is never handed out; it becomes FAILED with "expired" appended to its
    custom status, as does a failed attempt whose retry would run at or after it. The original
    server ignores it (the job never expires there).
    """

    body: bytes | str
    priority: int = 1
    #: Not eligible for dequeue before this time (ms since the epoch); None: now.
    run_after_ms: int | None = None
    attempts: int = 2
    custom_status: str = ""
    dedup_key: str | None = None
    dedup_window_ms: int = 0
    group_key: str | None = None
    expire_at_ms: int | None = None


class EnqueueResult(list[str]):
    """The descriptors of an enqueue, in the order of its jobs: a ``list[str]`` as before,
    plus ``deduplicated``, a flag per job (same order and length): True where the job was not
    created because its dedup key was held, and the descriptor is the holder's. All False when
    the response left the field out (nothing was deduplicated, or the server is the original).
    It prints and serializes as the plain list it replaced."""

    __slots__ = ("deduplicated",)

    def __init__(self, descriptors: Iterable[str], deduplicated: Iterable[bool] | None = None) -> None:
        super().__init__(descriptors)
        flags = tuple(bool(f) for f in deduplicated) if deduplicated is not None else (False,) * len(self)
        if len(flags) != len(self):
            raise ValueError(f"{len(flags)} deduplicated flags for {len(self)} descriptors")
        self.deduplicated: tuple[bool, ...] = flags

    @property
    def created(self) -> list[str]:
        """The descriptors of the jobs this enqueue created (not deduplicated)."""
        return [d for d, dup in zip(self, self.deduplicated, strict=True) if not dup]


@dataclass(frozen=True, slots=True)
class DequeuedJob:
    """A job claimed by a dequeue (IN_PROGRESS until acked, checkpointed or timed out)."""

    descriptor: str
    body: bytes
    attempts_allowed: int
    attempts_remaining: int

    @property
    def queue(self) -> str:
        return self.descriptor.split(":", 1)[0]

    @property
    def attempt(self) -> int:
        """Which attempt this run is: 1 for the first, ``attempts_allowed`` for the last."""
        return self.attempts_allowed - self.attempts_remaining + 1


@dataclass(frozen=True, slots=True)
class Ack:
    """The outcome of one dequeued job, sent as a ``PinLaterJobAckInfo``."""

    descriptor: str
    #: Appended to the job's custom status (the store truncates the total).
    append_status: str = ""
    #: For a failure with attempts left: seconds until the job is eligible again.
    retry_delay: float = 0.0


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A checkpoint of one IN_PROGRESS job; a no-op once the caller's claim is gone."""

    descriptor: str
    #: Replaces the body. The contract's ``newBody`` is a string: bytes must be UTF-8.
    new_body: str | bytes | None = None
    #: Back to PENDING without charging an attempt: how a worker releases a job it will not run.
    move_to_pending: bool = False
    #: ms since the epoch; the server defaults it to now.
    run_after_ms: int | None = None
    #: Resets both attempts allowed and remaining.
    attempts_allowed: int | None = None
    prepend_status: str | None = None


@dataclass(frozen=True, slots=True)
class JobInfo:
    """What lookup and scan report about one job."""

    descriptor: str
    state: JobState
    attempts_allowed: int
    attempts_remaining: int
    custom_status: str
    created_at_ms: int
    run_after_ms: int | None = None
    updated_at_ms: int | None = None
    claim_descriptor: str | None = None
    #: Only when asked for (``include_body=True``).
    body: bytes | None = None
    #: The job's dedup key while it holds it (pinlater extension, ``PinLaterJobInfo`` 11).
    dedup_key: str | None = None
    #: The job's group key (pinlater extension, ``PinLaterJobInfo`` 12).
    group_key: str | None = None
    #: When the job expires if still PENDING (pinlater extension, ``PinLaterJobInfo`` 13).
    expire_at_ms: int | None = None
    raw: Any = field(default=None, repr=False, compare=False)

    @classmethod
    def from_thrift(cls, info: Any) -> JobInfo:
        return cls(
            descriptor=info.jobDescriptor,
            state=JobState(info.jobState),
            attempts_allowed=info.attemptsAllowed,
            attempts_remaining=info.attemptsRemaining,
            custom_status=info.customStatus or "",
            created_at_ms=info.createdAtTimestampMillis,
            run_after_ms=info.runAfterTimestampMillis,
            updated_at_ms=info.updatedAtTimestampMillis,
            claim_descriptor=info.claimDescriptor,
            body=info.body,
            dedup_key=info.dedupKey,
            group_key=info.groupKey,
            expire_at_ms=info.expireAtTimestampMillis,
            raw=info,
        )


@dataclass(frozen=True, slots=True)
class ScanResult:
    """One page of a scan. ``continuation`` is opaque: sent back with the same query (queue,
    state, priority, future or not, body regex) it resumes after the last job of this page; it
    is "-1" (``SCAN_END``) when nothing is left. The original server ends every scan at once."""

    jobs: list[JobInfo]
    continuation: str = SCAN_END
    raw: Any = field(default=None, repr=False, compare=False)

    @property
    def done(self) -> bool:
        """Nothing is left after this page."""
        return self.continuation == SCAN_END


@dataclass(frozen=True, slots=True)
class ScheduleInfo:
    """A schedule kept by the server (pinlater extension, ``PinLaterSchedule``): a job enqueued
    into ``queue`` at each tick of ``cron`` (five fields, UTC) or every ``interval_ms``, exactly
    one of the two. The job fields are ``Job``'s; each tick's job runs at once and carries a
    dedup key of the server's making, so one tick makes one job however many servers run."""

    queue: str
    name: str
    body: bytes
    cron: str | None = None
    interval_ms: int | None = None
    priority: int = 1
    attempts: int = 2
    custom_status: str = ""
    group_key: str | None = None
    #: A paused schedule keeps its row but enqueues nothing.
    paused: bool = False
    #: The next tick (ms since the epoch), as the server last moved it.
    next_run_ms: int | None = None
    raw: Any = field(default=None, repr=False, compare=False)

    @classmethod
    def from_thrift(cls, schedule: Any) -> ScheduleInfo:
        job = schedule.job
        body = job.body if isinstance(job.body, bytes) else str(job.body or "").encode()
        return cls(
            queue=schedule.queueName,
            name=schedule.name,
            body=body,
            cron=schedule.cron,
            interval_ms=schedule.intervalMillis,
            priority=1 if job.priority is None else job.priority,
            attempts=2 if job.numAttemptsAllowed is None else job.numAttemptsAllowed,
            custom_status=job.customStatus or "",
            group_key=job.groupKey,
            paused=bool(schedule.paused),
            next_run_ms=schedule.nextRunTimestampMillis,
            raw=schedule,
        )
