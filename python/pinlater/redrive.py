"""Paced redrive: FAILED jobs of a queue moved back to PENDING at a set rate, in the background.

``retry_failed_jobs`` (the admin retry, ``retryFailedJobs``) moves up to its limit at once: a
queue with a million failed jobs and workers waiting on it gets them all at the same moment. A
redrive moves them at ``rate`` jobs per second instead: a token bucket filled at ``rate`` (holding
at most ``BATCH_SECONDS`` worth, and at least one job) is spent every ``TICK_SECONDS`` or so by one
``ShardedBackend.retry_failed_jobs`` call per priority (the one given, or 1, 2, ... in turn)
for what it holds, so no second of the redrive moves more than ``rate`` jobs plus one batch, and a
slow store only slows it down. It ends ``done`` when it reached its ``limit`` (without one: as
many jobs as were FAILED when it started, so jobs that fail again are not moved round for ever) or
a batch found fewer FAILED jobs than it asked for (none left), ``stopped`` when asked, ``failed`` (with the
reason) when the queue is gone or the stores kept failing.

A redrive lives in the memory of the server process that serves the admin port (``Redrives``,
owned by the admin app): it is not stored, so it does NOT survive a restart of that server. If
the server stops, the redrive ends where it was (the jobs it moved stay PENDING, the others stay
FAILED) and nothing resumes it: start it again to go on. ``NOTE`` says so in every answer.

At most one redrive runs per queue at a time on one server (two servers' admin ports can each run
one), and at most ``MAX_RUNNING`` in all; the last
``KEEP_FINISHED`` finished ones stay listed.
"""

from __future__ import annotations

import asyncio
import logging
import math
import secrets
import time
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any

from pinlater.backends.base import JobState
from pinlater.errors import ErrorCode, PinLaterError, QueueNotFoundError

if TYPE_CHECKING:
    from pinlater.backends.sharded import ShardedBackend

log = logging.getLogger(__name__)

#: Said wherever a redrive is shown (API answers, the command, the dashboard).
NOTE = (
    "A redrive runs inside the server process that serves this admin port and is not stored: "
    "it does not survive a restart of that server. If that server stops, the redrive ends where "
    "it was (jobs moved stay PENDING, the rest stay FAILED) and nothing resumes it; start it again to go on."
)
MIN_RATE = 0.1
MAX_RATE = 100_000.0
MAX_ATTEMPTS = 1_000_000
MAX_LIMIT = 1_000_000_000
#: Redrives running at once, over every queue (one per queue).
MAX_RUNNING = 16
#: Finished redrives kept for the listing (the oldest are dropped first).
KEEP_FINISHED = 64
#: How often a redrive spends its tokens (a store call per priority each time) ...
TICK_SECONDS = 0.1
#: ... and the most the bucket holds, in seconds of ``rate``: one batch.
BATCH_SECONDS = 0.2
#: The FAILED count shown is refreshed at most this often (a count per shard and priority).
COUNT_EVERY_SECONDS = 1.0
#: Store failures in a row (a second apart) after which a redrive ends ``failed``.
MAX_ERRORS_IN_A_ROW = 5
ERROR_PAUSE_SECONDS = 1.0


class RedriveState(Enum):
    RUNNING = "running"
    DONE = "done"
    STOPPED = "stopped"
    FAILED = "failed"


class RedriveRefused(Exception):
    """A redrive that cannot start (or be stopped): ``status`` is the HTTP status to answer."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True, slots=True)
class RedrivePlan:
    """What to move: FAILED jobs of ``queue`` (of ``priority``, or all) at ``rate`` jobs/s, at
    most ``limit`` (None: as many as were FAILED at its start), each back to PENDING with ``attempts`` attempts."""

    queue: str
    rate: float
    limit: int | None = None
    priority: int | None = None
    attempts: int = 1

    def check(self, num_priorities: int) -> None:
        """``RedriveRefused`` (400) naming what is out of bounds."""
        if not math.isfinite(self.rate) or not MIN_RATE <= self.rate <= MAX_RATE:
            raise RedriveRefused(400, f"rate must be {MIN_RATE:g} to {MAX_RATE:g} jobs per second, not {self.rate!r}")
        if self.limit is not None and not 1 <= self.limit <= MAX_LIMIT:
            raise RedriveRefused(400, f"limit must be 1 to {MAX_LIMIT}, not {self.limit}")
        if self.priority is not None and not 1 <= self.priority <= num_priorities:
            raise RedriveRefused(400, f"priority must be 1 to {num_priorities}, not {self.priority}")
        if not 1 <= self.attempts <= MAX_ATTEMPTS:
            raise RedriveRefused(400, f"attempts must be 1 to {MAX_ATTEMPTS}, not {self.attempts}")


class TokenBucket:
    """Jobs allowed so far: ``rate`` per second, holding at most ``capacity``."""

    def __init__(self, rate: float, capacity: float, now: float) -> None:
        self.rate = rate
        self.capacity = capacity
        self.tokens = 0.0
        self._at = now

    def fill(self, now: float) -> int:
        """Add what accrued since the last fill; the whole jobs it holds now."""
        self.tokens = min(self.capacity, self.tokens + (now - self._at) * self.rate)
        self._at = now
        return int(self.tokens)

    def spend(self, jobs: int) -> None:
        self.tokens -= jobs

    def wait_for_one(self) -> float:
        """Seconds until the bucket holds a whole job (0 if it does)."""
        return max(0.0, (1.0 - self.tokens) / self.rate)


@dataclass(slots=True)
class Redrive:
    """One redrive and its progress (``as_json`` is what the admin API shows)."""

    id: str
    plan: RedrivePlan
    started_at_ms: int
    failed_at_start: int
    state: RedriveState = RedriveState.RUNNING
    reason: str | None = None
    moved: int = 0
    failed_now: int | None = None
    ended_at_ms: int | None = None
    task: asyncio.Task[None] | None = field(default=None, repr=False)
    #: Set to stop it: the redrive ends between two batches, so ``moved`` counts every job moved.
    stop_asked: asyncio.Event = field(default_factory=asyncio.Event, repr=False)
    stop_reason: str = "stopped by an admin"

    def as_json(self) -> dict[str, Any]:
        plan = self.plan
        end = self.ended_at_ms if self.ended_at_ms is not None else _now_ms()
        elapsed = max(0.001, (end - self.started_at_ms) / 1000)
        return {
            "id": self.id,
            "queue": plan.queue,
            "rate": plan.rate,
            "limit": plan.limit,
            "priority": plan.priority,
            "attempts": plan.attempts,
            "state": self.state.value,
            "reason": self.reason,
            "moved": self.moved,
            "failed_at_start": self.failed_at_start,
            "failed_now": self.failed_now,
            "started_at_ms": self.started_at_ms,
            "ended_at_ms": self.ended_at_ms,
            "elapsed_s": round(elapsed, 3),
            "actual_rate": round(self.moved / elapsed, 3),
            "survives_restart": False,
        }


def _now_ms() -> int:
    return int(time.time() * 1000)


class Redrives:
    """The redrives of one server (see the module doc): start, list, stop."""

    def __init__(self, *, max_running: int = MAX_RUNNING) -> None:
        self.max_running = max_running
        self._all: dict[str, Redrive] = {}

    def running(self) -> list[Redrive]:
        return [r for r in self._all.values() if r.state is RedriveState.RUNNING]

    def listing(self, queue: str | None = None) -> list[Redrive]:
        """Running ones first, then finished ones, newest first."""
        found = [r for r in self._all.values() if queue is None or r.plan.queue == queue]
        return sorted(found, key=lambda r: (r.state is not RedriveState.RUNNING, -r.started_at_ms, r.id))

    def get(self, redrive_id: str) -> Redrive:
        found = self._all.get(redrive_id)
        if found is None:
            raise RedriveRefused(
                404,
                f"no redrive {redrive_id!r} on this server"
                " (redrives do not survive a restart of the server that runs them)",
            )
        return found

    async def start(self, backend: ShardedBackend, plan: RedrivePlan) -> Redrive:
        """Start ``plan`` in the background; ``RedriveRefused`` for a plan out of bounds (400),
        a queue that does not exist (404) or already has one running, or too many (409)."""
        plan.check(backend.num_priorities)
        if plan.queue not in await backend.get_queue_names():
            raise RedriveRefused(404, f"no queue {plan.queue!r}")
        busy = [r for r in self.running() if r.plan.queue == plan.queue]
        if busy:
            raise RedriveRefused(409, f"queue {plan.queue!r} already has redrive {busy[0].id} running: stop it first")
        if len(self.running()) >= self.max_running:
            raise RedriveRefused(409, f"{self.max_running} redrives are running already (the most at once)")
        failed = await _count_failed(backend, plan)
        # Checked again: another start may have got in while the count was out.
        if any(r.plan.queue == plan.queue for r in self.running()) or len(self.running()) >= self.max_running:
            raise RedriveRefused(409, f"another redrive of {plan.queue!r} started meanwhile")
        redrive = Redrive(secrets.token_hex(6), plan, _now_ms(), failed, failed_now=failed)
        self._all[redrive.id] = redrive
        redrive.task = asyncio.create_task(self._run(backend, redrive), name=f"pinlater-redrive-{redrive.id}")
        self._forget_old()
        log.info(
            "redrive %s of %s started: %g jobs/s, limit %s, priority %s, %d attempts; %d FAILED",
            redrive.id,
            plan.queue,
            plan.rate,
            plan.limit,
            plan.priority or "all",
            plan.attempts,
            failed,
        )
        return redrive

    async def stop(self, redrive_id: str, reason: str = "stopped by an admin") -> Redrive:
        """Stop a running redrive, after the batch in flight (a finished one is answered as it is)."""
        redrive = self.get(redrive_id)
        if redrive.state is RedriveState.RUNNING and redrive.task is not None:
            redrive.stop_reason = reason
            redrive.stop_asked.set()
            await asyncio.wait([redrive.task])
        return redrive

    async def aclose(self) -> None:
        """Stop every running redrive (server stop)."""
        for redrive in self.running():
            await self.stop(redrive.id, "the server stopped")

    def _forget_old(self) -> None:
        finished = [r for r in self._all.values() if r.state is not RedriveState.RUNNING]
        finished.sort(key=lambda r: r.ended_at_ms or 0)
        for redrive in finished[: max(0, len(finished) - KEEP_FINISHED)]:
            del self._all[redrive.id]

    def _end(self, redrive: Redrive, state: RedriveState, reason: str) -> None:
        redrive.state = state
        redrive.reason = reason
        redrive.ended_at_ms = _now_ms()
        level = logging.WARNING if state is RedriveState.FAILED else logging.INFO
        log.log(
            level,
            "redrive %s of %s %s: %s; moved %d",
            redrive.id,
            redrive.plan.queue,
            state.value,
            reason,
            redrive.moved,
        )
        self._forget_old()

    async def _run(self, backend: ShardedBackend, redrive: Redrive) -> None:
        try:
            state, reason = await self._move(backend, redrive)
        except asyncio.CancelledError:
            self._end(redrive, RedriveState.STOPPED, "cancelled")
            raise
        except Exception as exc:  # anything unforeseen ends it, said plainly
            log.exception("redrive %s failed", redrive.id)
            state, reason = RedriveState.FAILED, f"{type(exc).__name__}: {exc}"
        try:
            redrive.failed_now = await _count_failed(backend, redrive.plan)
        except Exception as exc:
            log.warning("redrive %s: the last FAILED count failed: %s", redrive.id, exc)
        self._end(redrive, state, reason)

    async def _move(self, backend: ShardedBackend, redrive: Redrive) -> tuple[RedriveState, str]:
        plan = redrive.plan
        bucket = TokenBucket(plan.rate, max(1.0, plan.rate * BATCH_SECONDS), time.monotonic())
        priorities = (
            range(1, backend.num_priorities + 1) if plan.priority is None else range(plan.priority, plan.priority + 1)
        )
        counted_at = time.monotonic()
        errors = 0
        # Without a limit, as many as were FAILED at the start: jobs that fail again after it
        # moved them (or new failures) are not moved round and round for ever.
        limit = plan.limit if plan.limit is not None else redrive.failed_at_start
        while True:
            if redrive.moved >= limit:
                return (
                    RedriveState.DONE,
                    "limit reached" if plan.limit is not None else "moved the jobs FAILED at its start",
                )
            if await _stopped(redrive, max(TICK_SECONDS, bucket.wait_for_one())):
                return RedriveState.STOPPED, redrive.stop_reason
            want = bucket.fill(time.monotonic())
            want = min(want, limit - redrive.moved)
            if want < 1:
                continue
            try:
                moved = 0
                for p in priorities:
                    if moved < want:
                        moved += await backend.retry_failed_jobs(plan.queue, p, plan.attempts, None, want - moved)
            except QueueNotFoundError:
                return RedriveState.FAILED, f"queue {plan.queue!r} no longer exists"
            except PinLaterError as exc:
                if exc.code not in (ErrorCode.SHARD_CONNECTION_FAILED, ErrorCode.NO_HEALTHY_SHARDS):
                    raise
                errors += 1
                if errors >= MAX_ERRORS_IN_A_ROW:
                    return RedriveState.FAILED, f"the stores failed {errors} times in a row: {exc.message}"
                log.warning("redrive %s: %s (try %d of %d)", redrive.id, exc.message, errors, MAX_ERRORS_IN_A_ROW)
                if await _stopped(redrive, ERROR_PAUSE_SECONDS):
                    return RedriveState.STOPPED, redrive.stop_reason
                continue
            errors = 0
            redrive.moved += moved
            bucket.spend(moved)
            if moved < want:
                return RedriveState.DONE, "no FAILED jobs left"
            if time.monotonic() - counted_at >= COUNT_EVERY_SECONDS:
                counted_at = time.monotonic()
                redrive.failed_now = await _count_failed(backend, plan)


async def _stopped(redrive: Redrive, seconds: float) -> bool:
    """Wait ``seconds``, or less if a stop is asked: whether one was."""
    try:
        await asyncio.wait_for(redrive.stop_asked.wait(), seconds)
    except TimeoutError:
        return False
    return True


async def _count_failed(backend: ShardedBackend, plan: RedrivePlan) -> int:
    return await backend.count_jobs(plan.queue, JobState.FAILED, plan.priority, False, None)
