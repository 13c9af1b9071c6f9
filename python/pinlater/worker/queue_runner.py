"""``QueueRunner``: the dequeue loop, jobs in hand and pending acks of one registered queue.

See ``runner.py`` for the invariants (cap on jobs in hand, one outcome per job, shutdown).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pinlater.client.calls import AckLike
from pinlater.client.errors import PinLaterConnectionError, QueueNotFound, RateLimited
from pinlater.client.types import Ack, Checkpoint, DequeuedJob
from pinlater.errors import PinLaterError
from pinlater.worker.context import JobContext
from pinlater.worker.retry import RetryPolicy
from pinlater.worker.threads import HandlerThreads, Outcome

if TYPE_CHECKING:
    from pinlater.worker.runner import Worker

log = logging.getLogger("pinlater.worker")

#: ``handler(ctx)``, plain or ``async def``. A returned string is appended to the custom status.
Handler = Callable[[JobContext], Any]


@dataclass(frozen=True, slots=True)
class Registration:
    queue: str
    handler: Handler
    concurrency: int
    batch_size: int
    retry: RetryPolicy
    is_async: bool


@dataclass(slots=True)
class WorkerStats:
    dequeued: int = 0
    succeeded: int = 0
    failed: int = 0
    released: int = 0
    acks_sent: int = 0
    empty_dequeues: int = 0
    rate_limited: int = 0


def failure_status(exc: BaseException, attempt: int, limit: int) -> str:
    """The line appended to a failed job's custom status: ``attempt N: Type: message``."""
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    text = f"attempt {attempt}: {text}"
    if len(text) > limit:
        text = text[: max(0, limit - 3)] + "..."
    return text + "\n"


def is_async(handler: Handler) -> bool:
    call = type(handler).__call__  # a callable object with ``async def __call__``
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(call)


class _Backoff:
    def __init__(self, first: float, most: float) -> None:
        self.first = first
        self.most = most
        self.delay = 0.0

    def next(self) -> float:
        self.delay = self.first if self.delay == 0.0 else min(self.most, self.delay * 2)
        return self.delay

    def reset(self) -> None:
        self.delay = 0.0


class QueueRunner:
    """The jobs in hand and pending acks of one registered queue."""

    def __init__(self, worker: Worker, reg: Registration) -> None:
        self.worker = worker
        self.reg = reg
        self.queue = reg.queue
        self.in_hand: set[JobContext] = set()
        self.succeeded: list[AckLike] = []
        self.failed: list[AckLike] = []
        self.slot_freed = asyncio.Event()
        self.tasks: dict[JobContext, asyncio.Task[None]] = {}
        self.loop = asyncio.get_running_loop()
        self.threads: HandlerThreads | None = None
        if not reg.is_async:
            self.threads = HandlerThreads(
                f"pinlater-{reg.queue}", reg.concurrency, reg.handler, self.loop, self._finished
            )

    # -- acks -------------------------------------------------------------------------------

    def take_acks(self) -> tuple[list[AckLike], list[AckLike]]:
        succeeded, failed = self.succeeded, self.failed
        self.succeeded, self.failed = [], []
        return succeeded, failed

    def put_back(self, succeeded: list[AckLike], failed: list[AckLike]) -> None:
        """Acks whose request failed are sent again: an ack of a job no longer IN_PROGRESS is a no-op."""
        self.succeeded[:0] = succeeded
        self.failed[:0] = failed

    async def flush_acks(self) -> bool:
        succeeded, failed = self.take_acks()
        if not succeeded and not failed:
            return True
        try:
            await self.worker.client.ack(self.queue, succeeded, failed)
        except PinLaterError as exc:
            self.put_back(succeeded, failed)
            log.warning("%s: sending %d ack(s) failed: %s", self.queue, len(succeeded) + len(failed), exc)
            return False
        self.worker.stats.acks_sent += len(succeeded) + len(failed)
        return True

    # -- dequeue ----------------------------------------------------------------------------

    async def dequeue_loop(self) -> None:
        worker, reg = self.worker, self.reg
        idle = _Backoff(worker.poll_interval[0], worker.poll_interval[1])
        trouble = _Backoff(worker.poll_interval[0] * 2, worker.error_backoff)
        while not worker.stopping:
            free = reg.concurrency - len(self.in_hand)
            if free <= 0:
                self.slot_freed.clear()
                await self.slot_freed.wait()
                await asyncio.sleep(0)  # let outcomes already on the loop free more slots first
                continue
            # Hold the call on the server only with nothing in hand, whose acks would wait; and
            # send the acks due first, so that they are not held (nor counted late) with it.
            wait = 0.0 if self.in_hand else worker.long_poll
            if wait and (self.succeeded or self.failed) and not await self.flush_acks():
                wait = 0.0  # they failed to go alone: they ride on a dequeue that is not held
            succeeded, failed = self.take_acks()
            started = self.loop.time()
            try:
                limit = min(reg.batch_size, free)
                jobs = await worker.client.dequeue(self.queue, limit, succeeded=succeeded, failed=failed, wait=wait)
            except Exception as exc:  # the loop must survive anything; errors are logged and waited out
                self.put_back(succeeded, failed)
                if isinstance(exc, RateLimited):
                    worker.stats.rate_limited += 1
                    log.debug("%s: rate limited", self.queue)
                elif isinstance(exc, QueueNotFound | PinLaterConnectionError):
                    log.warning("%s: dequeue failed: %s", self.queue, exc)
                else:
                    log.error("%s: dequeue failed", self.queue, exc_info=exc)
                await worker.sleep(trouble.next())
                continue
            trouble.reset()
            worker.stats.acks_sent += len(succeeded) + len(failed)
            if not jobs:
                worker.stats.empty_dequeues += 1
                if self.loop.time() - started < wait / 2 or not wait:  # not held: an original server
                    await worker.sleep(idle.next())
                continue
            idle.reset()
            worker.stats.dequeued += len(jobs)
            for job in jobs:
                self._start(job)

    def _start(self, job: DequeuedJob) -> None:
        ctx = JobContext(self, job)
        self.in_hand.add(ctx)
        if self.threads is not None:
            self.threads.submit(ctx)
        else:
            self.tasks[ctx] = self.loop.create_task(self._run_async(ctx))

    async def _run_async(self, ctx: JobContext) -> None:
        try:
            outcome: Outcome = (ctx, None, await self.reg.handler(ctx))
        except BaseException as exc:  # CancelledError included: a cancelled job was released at shutdown
            outcome = (ctx, exc, None)
        self.tasks.pop(ctx, None)  # cheaper than a done callback per job
        self._finished([outcome])

    def _finished(self, outcomes: list[Outcome]) -> None:
        worker = self.worker
        for ctx, exc, result in outcomes:
            if ctx not in self.in_hand:  # released at shutdown while it ran
                continue
            self.in_hand.discard(ctx)
            if ctx.released:
                worker.stats.released += 1
            elif exc is None:
                worker.stats.succeeded += 1
                status = result if isinstance(result, str) else ""
                self.succeeded.append(Ack(ctx.descriptor, status) if status else ctx.descriptor)
            else:
                worker.stats.failed += 1
                self.failed.append(self._failure_ack(ctx, exc))
        self.slot_freed.set()
        worker.changed.set()

    def _failure_ack(self, ctx: JobContext, exc: BaseException) -> Ack:
        attempt = ctx.attempt
        last = ctx.attempts_remaining <= 1
        try:
            delay = 0.0 if last else max(0.0, float(self.reg.retry(attempt)))
        except Exception:
            log.exception("%s: retry policy failed; retrying %s without delay", self.queue, ctx.descriptor)
            delay = 0.0
        what = "giving up" if last else f"retry in {delay:.3g}s"
        log.warning(
            "%s: job %s failed (attempt %d of %d, %s): %s: %s",
            self.queue, ctx.descriptor, attempt, ctx.attempts_allowed, what, type(exc).__name__, exc,
            exc_info=exc if log.isEnabledFor(logging.DEBUG) else None,
        )  # fmt: skip
        return Ack(ctx.descriptor, failure_status(exc, attempt, self.worker.status_limit), delay)

    # -- shutdown ---------------------------------------------------------------------------

    async def release_all(self) -> None:
        """Back to PENDING, no attempt charged, for every job still in hand."""
        if not self.in_hand:
            return
        held = list(self.in_hand)
        self.in_hand.clear()
        for ctx in held:
            ctx.released = True
        for task in list(self.tasks.values()):
            task.cancel()
        try:
            releases = [Checkpoint(c.descriptor, move_to_pending=True) for c in held]
            await self.worker.client.checkpoint(self.queue, releases)
        except PinLaterError as exc:
            log.error("%s: releasing %d job(s) failed (the claim timeout will): %s", self.queue, len(held), exc)
            return
        self.worker.stats.released += len(held)
        log.info("%s: released %d unfinished job(s) back to PENDING", self.queue, len(held))

    def stop_threads(self) -> None:
        if self.threads is not None:
            self.threads.stop()
