"""``QueueRunner``: the dequeue loop, jobs in hand and pending acks of one registered queue.

See ``runner.py`` for the invariants (bound on jobs in hand, prefetch, one outcome per job,
shutdown).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pinlater.client.calls import AckLike
from pinlater.client.errors import PinLaterConnectionError, QueueNotFound, RateLimited, ServerUnavailable
from pinlater.client.types import Ack, Checkpoint, DequeuedJob
from pinlater.errors import PinLaterError
from pinlater.worker.context import HandlerTimeout, JobContext
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
    #: Most jobs claimed ahead of free slots: jobs in hand never exceed concurrency + prefetch.
    prefetch: int = 0
    #: Seconds a handler may run before its job fails (``HandlerTimeout``); None: no limit.
    timeout: float | None = None


@dataclass(slots=True)
class WorkerStats:
    dequeued: int = 0
    succeeded: int = 0
    failed: int = 0
    released: int = 0
    #: Prefetched jobs handed back to PENDING unstarted (at stop, or not started in time).
    returned: int = 0
    acks_sent: int = 0
    #: Ack requests sent on their own (timer, before a long poll, at stop); the rest rode on dequeues.
    ack_requests: int = 0
    empty_dequeues: int = 0
    rate_limited: int = 0
    #: Acks dropped: ones the server kept refusing, or no request could carry.
    acks_dropped: int = 0
    #: Claims of running jobs renewed (``Worker.claim_renewal``), one per job per renewal.
    claims_renewed: int = 0
    #: Jobs failed because their handler ran past its timeout (counted in ``failed`` too).
    timed_out: int = 0


#: Longest success status sent (characters): the most any store keeps (the embedded store and
#: MySQL keep 5,000, Redis 3,000). A handler's longer text is cut here, not sent whole: an ack
#: past the server's frame limit would fail again at every flush, and the acks beside it too.
SUCCESS_STATUS_LIMIT = 5000


def status_text(text: str, limit: int) -> str:
    """``text`` as a status the server takes: UTF-8 (a lone surrogate, as ``os.fsdecode`` makes
    of bytes it cannot decode, is written as its escape, ``\\udce9``: the ack could not be
    encoded, and would fail at every flush with the acks beside it) and at most ``limit``
    characters (cut, ending in ``...``)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    if len(text) > limit:
        text = text[: max(0, limit - 3)] + "..."
    return text


def exception_text(exc: BaseException) -> str:
    """``Type: message``, or ``Type`` alone where the message is empty; a message that cannot be
    made (its ``__str__`` raised) is named so, and costs no other job its outcome."""
    try:
        message = str(exc)
    except Exception as failed:
        message = f"<str() of the exception raised {type(failed).__name__}>"
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def failure_status(exc: BaseException, attempt: int, limit: int) -> str:
    """The line appended to a failed job's custom status: ``attempt N: Type: message``, as
    ``status_text`` makes it (UTF-8, at most ``limit`` characters) and a newline."""
    return status_text(f"attempt {attempt}: {exception_text(exc)}", limit) + "\n"


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


#: Times the server may refuse one ack sent alone (an error of its own, not a store it could not
#: reach) over at least ``REFUSED_ACK_SECONDS`` before it is dropped, logged: its job runs again
#: once its claim times out. Sent again for ever, it failed every flush and every dequeue that
#: carried it, and the queue's worker took no job again. (The span: the server answers UNKNOWN
#: for a store out of memory too, which passes.)
REFUSED_ACK_TRIES = 3
REFUSED_ACK_SECONDS = 60.0
#: Acks whose refusals are counted at most (all forgotten beyond it).
MAX_REFUSALS_KEPT = 10_000


def _refusal(error: PinLaterError) -> bool:
    """An error the server answered about the request itself, which sending it again is not
    likely to change: not a store it could not reach, nor a spent rate limit."""
    return not isinstance(error, ServerUnavailable | RateLimited)


def _descriptor_of(ack: AckLike) -> str:
    return ack if isinstance(ack, str) else ack.descriptor


def acks_to_resend(
    succeeded: list[AckLike], failed: list[AckLike], error: BaseException
) -> tuple[list[AckLike], list[AckLike]]:
    """Of the acks of a request that failed with ``error``, those to send again.

    None after ``RateLimited``: the server applies a dequeue's acks before its rate limit. A
    success ack sent twice changes nothing the first did not (an ack of a job no longer
    IN_PROGRESS is a no-op, and a job that ran again after its claim timed out did succeed). A
    failure ack is sent again only if its request cannot have reached the server (a connection
    refused, a request that could not be made): applied once, it may apply again after its retry
    delay let another worker claim the job, and charge that run an attempt or end the job FAILED
    while it runs (and that run's success then counts for nothing). So after a timeout, a
    connection lost with the request sent, any answer of the server's (which may follow acks it
    applied) or a cancel mid-request, the failure acks are dropped: a job whose failure ack did
    not arrive runs again at its claim timeout, which charges the attempt as the ack would."""
    if isinstance(error, RateLimited):
        return [], []
    if isinstance(error, PinLaterConnectionError):
        maybe_arrived = error.sent
    elif isinstance(error, PinLaterError):
        # An answer of the server's may follow acks it applied: a dequeue applies its acks
        # before its walk, and an ack of several shards, or one whose store call timed out
        # after the store applied it (SHARD_CONNECTION_FAILED), may have applied some.
        maybe_arrived = True
    else:
        maybe_arrived = not isinstance(error, Exception)  # cancelled mid-request; else never made
    return succeeded, [] if maybe_arrived else failed


class QueueRunner:
    """The jobs in hand and pending acks of one registered queue.

    ``in_hand`` holds every claimed job not yet acked, released or handed back; ``waiting``
    those of them not started yet (prefetched, or just dequeued), with the loop time of their
    claim, oldest first. A job leaves ``waiting`` exactly once: started by a handler thread or
    task, or handed back to the server (see ``threads.py``).
    """

    def __init__(self, worker: Worker, reg: Registration) -> None:
        self.worker = worker
        self.reg = reg
        self.queue = reg.queue
        self.in_hand: set[JobContext] = set()
        self.waiting: dict[JobContext, float] = {}
        self.succeeded: list[AckLike] = []
        self.failed: list[AckLike] = []
        #: Refusals of acks sent alone, by descriptor: how many, and when the first came
        #: (``REFUSED_ACK_TRIES``).
        self.refusals: dict[str, tuple[int, float]] = {}
        self.slot_freed = asyncio.Event()
        self.tasks: dict[JobContext, asyncio.Task[None]] = {}
        self.backlog: deque[JobContext] = deque()  # async handlers: dequeued, not yet a task
        self.loop = asyncio.get_running_loop()
        #: Handler seconds per job, a moving average; None until a job finished.
        self.avg_duration: float | None = None
        #: The most jobs this queue had in hand at once.
        self.peak_in_hand = 0
        #: Taken out of ``waiting`` at stop, to be handed back by ``return_prefetched``.
        self.returning: list[JobContext] = []
        self.threads: HandlerThreads | None = None
        if not reg.is_async:
            self.threads = HandlerThreads(
                f"pinlater-{reg.queue}", reg.concurrency, reg.handler, self.loop, self._finished, self.waiting
            )

    # -- acks -------------------------------------------------------------------------------

    def take_acks(self) -> tuple[list[AckLike], list[AckLike]]:
        succeeded, failed = self.succeeded, self.failed
        self.succeeded, self.failed = [], []
        return succeeded, failed

    def put_back(self, succeeded: list[AckLike], failed: list[AckLike], error: BaseException) -> None:
        """Acks whose request failed with ``error``, to send again as ``acks_to_resend`` says."""
        again, failed_again = acks_to_resend(succeeded, failed, error)
        if len(failed_again) < len(failed) and not isinstance(error, RateLimited):
            log.warning(
                "%s: %d failure ack(s) may have reached the server (%s): not sent again; a job whose ack"
                " did not arrive runs again at its claim timeout",
                self.queue,
                len(failed) - len(failed_again),
                error,
            )
        self.succeeded[:0] = again
        self.failed[:0] = failed_again

    async def flush_acks(self) -> bool:
        succeeded, failed = self.take_acks()
        if not succeeded and not failed:
            return True
        try:
            await self.worker.client.ack(self.queue, succeeded, failed)
        except PinLaterError as exc:
            if _refusal(exc) and acks_to_resend(succeeded, failed, exc) == (succeeded, failed):
                # (refused, and surely not applied: each alone, so that one the server keeps
                # refusing is found, and in the end dropped, not the others held with it)
                log.warning(
                    "%s: the server refused %d ack(s): %s; sending each alone",
                    self.queue,
                    len(succeeded) + len(failed),
                    exc,
                )
                return await self._send_singly(succeeded, failed)
            self.put_back(succeeded, failed, exc)
            log.warning("%s: sending %d ack(s) failed: %s", self.queue, len(succeeded) + len(failed), exc)
            return False
        except Exception:  # not the server's answer: the request could not be made of them
            log.exception(
                "%s: %d ack(s) could not be sent together; sending each alone", self.queue, len(succeeded) + len(failed)
            )
            return await self._send_singly(succeeded, failed)
        except BaseException as exc:  # cancelled mid-request (at stop): the final flush sends them again
            self.put_back(succeeded, failed, exc)
            raise
        self.worker.stats.acks_sent += len(succeeded) + len(failed)
        self.worker.stats.ack_requests += 1
        return True

    async def _send_singly(self, succeeded: list[AckLike], failed: list[AckLike]) -> bool:
        """Each ack in a request of its own, so that one no request can carry (which no check
        foresaw), or one the server refused ``REFUSED_ACK_TRIES`` times alone, is dropped alone,
        logged: its job runs again once its claim times out. The others go, or, at the server's
        first other failure, wait with the rest for the next flush."""
        acks = [(ack, True) for ack in succeeded] + [(ack, False) for ack in failed]
        for i, (ack, success) in enumerate(acks):
            try:
                await self.worker.client.ack(self.queue, [ack] if success else [], [] if success else [ack])
            except PinLaterError as exc:
                if _refusal(exc) and self._refused_for_good(_descriptor_of(ack), exc):
                    continue
                rest = acks[i:]
                self.put_back([a for a, ok in rest if ok], [a for a, ok in rest if not ok], exc)
                log.warning("%s: sending %d ack(s) failed: %s", self.queue, len(rest), exc)
                return False
            except Exception:
                log.exception("%s: dropped an ack that cannot be sent: %r", self.queue, ack)
                self.worker.stats.acks_dropped += 1
                continue
            except BaseException as exc:
                rest = acks[i:]
                self.put_back([a for a, ok in rest if ok], [a for a, ok in rest if not ok], exc)
                raise
            self.worker.stats.acks_sent += 1
            self.worker.stats.ack_requests += 1
            if self.refusals:
                self.refusals.pop(_descriptor_of(ack), None)
        return True

    def _refused_for_good(self, descriptor: str, error: PinLaterError) -> bool:
        """Count a refusal of this ack sent alone; whether it is now dropped (logged)."""
        if len(self.refusals) >= MAX_REFUSALS_KEPT and descriptor not in self.refusals:
            self.refusals.clear()
        now = time.monotonic()
        times, since = self.refusals.get(descriptor, (0, now))
        times += 1
        self.refusals[descriptor] = (times, since)
        if times < REFUSED_ACK_TRIES or now - since < REFUSED_ACK_SECONDS:
            return False
        del self.refusals[descriptor]
        self.worker.stats.acks_dropped += 1
        log.error(
            "%s: dropped the ack of %s, which the server refused %d times alone (%s); its job runs again"
            " once its claim times out",
            self.queue,
            descriptor,
            times,
            error,
        )
        return True

    # -- prefetch ---------------------------------------------------------------------------

    def prefetch_allowance(self) -> int:
        """Jobs to claim ahead of free slots now: as many as the handler is expected to start
        within ``prefetch_horizon`` seconds, judged by its recent durations, up to the bound.
        None before a job has finished here: a handler of unknown speed gets no prefetch."""
        avg = self.avg_duration
        if avg is None or not self.reg.prefetch:
            return 0
        fits = self.worker.prefetch_horizon * self.reg.concurrency / max(avg, 1e-6)
        return min(self.reg.prefetch, int(fits))

    def _waiting_items(self) -> list[tuple[JobContext, float]]:
        # Handler threads pop from ``waiting`` meanwhile; a copy made in C under the GIL is
        # consistent, and the retry covers an interpreter where it is not.
        while True:
            with contextlib.suppress(RuntimeError):
                return list(self.waiting.items())

    def _oldest_claim(self) -> float | None:
        try:
            return next(iter(self.waiting.values()))
        except (StopIteration, RuntimeError):
            return None

    def take_waiting(self, keep: int = 0) -> list[JobContext]:
        """The jobs not started yet but the ``keep`` oldest, out of ``waiting`` and ``in_hand``:
        none of them will start."""
        taken = []
        for ctx, _ in self._waiting_items()[keep:]:
            if self.waiting.pop(ctx, None) is not None:
                taken.append(ctx)
                self.in_hand.discard(ctx)
        return taken

    def take_prefetched(self) -> list[JobContext]:
        """At stop: the jobs waiting beyond the free slots. Those a free slot is about to start
        (a sync handler's thread has yet to pick them up) stay in hand, as jobs running do."""
        running = len(self.in_hand) - len(self.waiting)
        return self.take_waiting(keep=max(0, self.reg.concurrency - running))

    async def hand_back(self, held: list[JobContext], why: str) -> None:
        """Back to PENDING, no attempt charged, for jobs that never started (or were released).
        Sent once (the client repeats it only when it certainly never reached a server): sent
        again after a failure that may have been applied, it could put back a job another worker
        with the same source has claimed since."""
        if not held:
            return
        for ctx in held:
            ctx.released = True
        releases = [Checkpoint(c.descriptor, move_to_pending=True) for c in held]
        try:
            await self.worker.client.checkpoint(self.queue, releases)
        except PinLaterError as exc:
            log.error(
                "%s: handing back %d job(s) %s failed (the claim timeout will): %s", self.queue, len(held), why, exc
            )
            return
        self.worker.stats.returned += len(held)
        log.info("%s: handed back %d prefetched job(s) %s", self.queue, len(held), why)

    async def return_stale(self, now: float) -> None:
        """Hand back the prefetched jobs claimed ``prefetch_timeout`` ago or more and not started
        (slots held by slow jobs), before they come near the server's claim timeout; and stop
        prefetching until jobs prove fast again."""
        timeout = self.worker.prefetch_timeout
        stale = []
        for ctx, claimed in self._waiting_items():
            if now - claimed < timeout:
                break
            if self.waiting.pop(ctx, None) is not None:
                stale.append(ctx)
                self.in_hand.discard(ctx)
        if stale:
            self.avg_duration = max(self.avg_duration or 0.0, timeout)
            await self.hand_back(stale, f"not started within {timeout:g}s")
            self.worker.changed.set()

    async def return_prefetched(self) -> None:
        """At stop: hand back the prefetched jobs ``take_prefetched`` took."""
        held, self.returning = self.returning, []
        await self.hand_back(held, "at stop")

    # -- dequeue ----------------------------------------------------------------------------

    async def _wait_for_room(self) -> None:
        """Until a slot frees, or the oldest prefetched job is due to go back."""
        self.slot_freed.clear()
        oldest = self._oldest_claim()
        delay = None if oldest is None else max(0.0, oldest + self.worker.prefetch_timeout - self.loop.time())
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(delay):
                await self.slot_freed.wait()
        await asyncio.sleep(0)  # let outcomes already on the loop free more slots first

    async def dequeue_loop(self) -> None:
        worker, reg = self.worker, self.reg
        idle = _Backoff(worker.poll_interval[0], worker.poll_interval[1])
        trouble = _Backoff(worker.poll_interval[0] * 2, worker.error_backoff)
        full = False  # the last dequeue got as many jobs as it asked for
        while not worker.stopping:
            oldest = self._oldest_claim()
            if oldest is not None and self.loop.time() - oldest >= worker.prefetch_timeout:
                await self.return_stale(self.loop.time())
                continue
            held = len(self.in_hand)
            bound = reg.concurrency + self.prefetch_allowance()
            room = bound - held
            # An idle slot always asks for work. A dequeue only to refill the prefetch (every
            # slot busy) waits for half a batch of room: a round trip for a job or two would
            # cost more than it saves.
            if held >= reg.concurrency and 2 * room < min(reg.batch_size, bound):
                await self._wait_for_room()
                continue
            # Hold the call on the server only with nothing in hand, whose acks would wait, and
            # when the last dequeue found the queue short (a full batch means more is ready: no
            # need to send the acks on their own for a call that will not be held); and send
            # the acks due first, so that they are not held (nor counted late) with it.
            wait = 0.0 if self.in_hand or full else worker.long_poll
            if wait and (self.succeeded or self.failed) and not await self.flush_acks():
                wait = 0.0  # they failed to go alone: they ride on a dequeue that is not held
            succeeded, failed = self.take_acks()
            started = self.loop.time()
            try:
                limit = min(reg.batch_size, room)
                jobs = await worker.client.dequeue(self.queue, limit, succeeded=succeeded, failed=failed, wait=wait)
            except Exception as exc:  # the loop must survive anything; errors are logged and waited out
                self.put_back(succeeded, failed, exc)
                full = False
                if isinstance(exc, RateLimited):
                    worker.stats.rate_limited += 1
                    log.debug("%s: rate limited", self.queue)
                elif isinstance(exc, QueueNotFound | PinLaterConnectionError):
                    log.warning("%s: dequeue failed: %s", self.queue, exc)
                else:
                    log.error("%s: dequeue failed", self.queue, exc_info=exc)
                    if succeeded or failed:  # the acks it carried go alone, which isolates a bad one
                        await self.flush_acks()
                await worker.sleep(trouble.next())
                continue
            except BaseException as exc:  # cancelled (a stop out of time): the final flush sends them
                self.put_back(succeeded, failed, exc)
                raise
            trouble.reset()
            worker.stats.acks_sent += len(succeeded) + len(failed)
            full = len(jobs) >= limit
            if not jobs:
                worker.stats.empty_dequeues += 1
                if self.loop.time() - started < wait / 2 or not wait:  # not held: an original server
                    await worker.sleep(idle.next())
                continue
            idle.reset()
            worker.stats.dequeued += len(jobs)
            if len(jobs) > limit:  # (a server that answered more than asked: jobs in hand stay bounded)
                await self.hand_back([JobContext(self, job) for job in jobs[limit:]], "past the limit asked for")
                jobs = jobs[:limit]
            if worker.stopping:  # the stop came while this dequeue was out: none of them starts
                await self.hand_back([JobContext(self, job) for job in jobs], "at stop")
                break
            self._start(jobs)

    def _start(self, jobs: list[DequeuedJob]) -> None:
        now = self.loop.time()
        claimed = time.monotonic()
        for job in jobs:
            ctx = JobContext(self, job, claimed)
            self.in_hand.add(ctx)
            self.waiting[ctx] = now
            if self.threads is not None:
                self.threads.submit(ctx)
            else:
                self.backlog.append(ctx)
        self.peak_in_hand = max(self.peak_in_hand, len(self.in_hand))
        if self.threads is None:
            self._start_tasks()

    def _start_tasks(self) -> None:
        """Async handlers: a task for each job of the backlog that a free slot can take."""
        while self.backlog and len(self.tasks) < self.reg.concurrency:
            ctx = self.backlog.popleft()
            if self.waiting.pop(ctx, None) is not None:  # else handed back meanwhile
                self.tasks[ctx] = self.loop.create_task(self._run_async(ctx))

    async def _run_async(self, ctx: JobContext) -> None:
        ctx.started = time.monotonic()
        started = time.perf_counter()
        limit = self.reg.timeout
        try:
            if limit is None:
                result = await self.reg.handler(ctx)
            else:
                scope = asyncio.timeout(limit)
                try:
                    async with scope:
                        result = await self.reg.handler(ctx)
                except Exception:
                    if not scope.expired():  # (the handler's own error, a TimeoutError of its own too)
                        raise
                    raise HandlerTimeout.after(limit) from None
                if scope.expired():  # it swallowed its cancellation and returned: that counts for nothing
                    raise HandlerTimeout.after(limit)
            outcome: Outcome = (ctx, None, result, time.perf_counter() - started)
        except BaseException as exc:  # CancelledError included: a cancelled job was released at shutdown
            outcome = (ctx, exc, None, time.perf_counter() - started)
        self.tasks.pop(ctx, None)  # cheaper than a done callback per job
        self._finished([outcome])

    def _finished(self, outcomes: list[Outcome]) -> None:
        worker = self.worker
        total = 0.0
        for ctx, exc, result, seconds in outcomes:
            total += seconds
            if ctx not in self.in_hand:  # released at shutdown while it ran
                continue
            self.in_hand.discard(ctx)
            if ctx.timed_out:  # its failure was acked when its timeout passed (``expire_handlers``)
                continue
            if ctx.released:
                worker.stats.released += 1
            elif exc is None:
                worker.stats.succeeded += 1
                status = status_text(result, SUCCESS_STATUS_LIMIT) if isinstance(result, str) else ""
                self.succeeded.append(Ack(ctx.descriptor, status) if status else ctx.descriptor)
            else:
                worker.stats.failed += 1
                worker.stats.timed_out += isinstance(exc, HandlerTimeout)
                self.failed.append(self._failure_ack(ctx, exc))
        mean = total / len(outcomes)
        avg = self.avg_duration
        self.avg_duration = mean if avg is None else avg + (mean - avg) * min(0.5, 0.05 * len(outcomes))
        if self.backlog:
            self._start_tasks()
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
            "%s: job %s failed (attempt %d of %d, %s): %s",
            self.queue, ctx.descriptor, attempt, ctx.attempts_allowed, what, exception_text(exc),
            exc_info=exc if log.isEnabledFor(logging.DEBUG) else None,
        )  # fmt: skip
        return Ack(ctx.descriptor, failure_status(exc, attempt, self.worker.status_limit), delay)

    # -- long runs --------------------------------------------------------------------------

    def expire_handlers(self, now: float) -> None:
        """Fail the jobs whose handler has run past its timeout. A sync handler's thread cannot be
        stopped, and an async handler (cancelled at its timeout: ``_run_async``) may swallow its
        cancellation and run on: the job's failure is acked now (so its retry may start while the
        handler still runs), and the job stays in hand until the handler returns, keeping its
        slot busy, and what it returns then is ignored. (An async handler that ends on its
        cancellation, as most do, is failed by ``_run_async``, mostly before this runs.)"""
        limit = self.reg.timeout
        if limit is None:
            return
        for ctx in list(self.in_hand):
            started = ctx.started
            if started is None or ctx.timed_out or ctx.released or now - started < limit:
                continue
            ctx.timed_out = True
            self.worker.stats.failed += 1
            self.worker.stats.timed_out += 1
            self.failed.append(self._failure_ack(ctx, HandlerTimeout.after(limit)))
            log.warning(
                "%s: job %s ran past its timeout of %gs: failed; its handler is still running,"
                " and its slot stays busy until it returns",
                self.queue,
                ctx.descriptor,
                limit,
            )
            self.worker.changed.set()

    async def renew_claims(self, now: float, every: float) -> None:
        """Renew the claims of the jobs whose handlers have run ``every`` seconds since their
        claim or its last renewal (their own checkpoints count), by one checkpoint that changes
        only the job's run-after: now, which restarts the server's claim timeout (updated now on
        the SQL stores, the IN_PROGRESS score on Redis), so a job that runs longer is not handed to
        another worker; or a later one the handler's own checkpoint gave (``lease_ms``: a lease
        it took on Redis, kept)."""
        due = [
            ctx
            for ctx in list(self.in_hand)
            if ctx.started is not None and not (ctx.released or ctx.timed_out) and now - ctx.renewed >= every
        ]
        if not due:
            return
        wall_ms = int(time.time() * 1000)
        renewals = [
            Checkpoint(ctx.descriptor, run_after_ms=None if ctx.lease_ms is None else max(ctx.lease_ms, wall_ms))
            for ctx in due
        ]
        try:
            await self.worker.client.checkpoint(self.queue, renewals)
        except Exception as exc:  # tried again at the next tick (any error: the loop must go on)
            log.warning("%s: renewing the claims of %d running job(s) failed: %s", self.queue, len(due), exc)
            return
        for ctx in due:
            ctx.renewed = now
        self.worker.stats.claims_renewed += len(due)

    # -- shutdown ---------------------------------------------------------------------------

    async def release_all(self) -> None:
        """Back to PENDING, no attempt charged, for every job still in hand (but those whose
        timeout passed: their failure acks are on their way)."""
        held = [ctx for ctx in self.in_hand if not ctx.timed_out]
        self.in_hand.clear()
        if not held:
            return
        for ctx in held:
            self.waiting.pop(ctx, None)  # not started: it never will be
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
