"""``Worker``: runs handlers for PinLater queues until told to stop.

One asyncio loop drives everything. Per queue, a dequeue loop claims jobs in batches and hands
them to the handler: ``async def`` handlers as tasks on the loop, plain functions on that
queue's handler threads. Outcomes become acks, piggy-backed on the queue's next dequeue and also
flushed every ``ack_interval`` seconds so a quiet queue still acks.

Invariants:

* Jobs in hand (claimed, not yet acked, released or handed back) never exceed the queue's
  ``concurrency + prefetch``; at most ``concurrency`` of them run, the rest wait in a local
  buffer (prefetched). The next dequeue goes out while the jobs in hand run, so a quick handler
  never waits on a round trip, and it carries the acks due.
* A prefetched job still ages toward the server's claim timeout (180 s by default), after which
  it is handed to another worker and runs twice; and idle workers elsewhere cannot have it. So
  the worker prefetches only what the handler is expected to start within ``prefetch_horizon``
  seconds, judged by its recent durations (none before a job has finished: a slow handler gets
  no prefetch), and hands back to PENDING, no attempt charged, any prefetched job that has not
  started ``prefetch_timeout`` seconds after its claim (slow jobs holding every slot); after
  that it prefetches again only once jobs prove quick.
* A job that runs long keeps its claim: every ``claim_renewal`` seconds (60 by default, a third
  of the server's default claim timeout) a checkpoint that changes only their run-after (now,
  or a later one the handler gave) renews the claims of the jobs running that long since their
  claim or its last renewal, so the server does not hand a long job to another worker while it
  runs. A handler ``timeout`` (none by
  default) bounds that: a job whose handler runs past it fails (an async handler is cancelled;
  a sync handler's thread cannot be, so its job is failed, no longer renewed, and its slot stays
  busy until it returns).
* Every job in hand ends in exactly one of: a success ack, a failure ack carrying the retry
  policy's delay and the error text, or a release (checkpoint with ``moveToPending``: back to
  PENDING, no attempt charged) by the handler, by the prefetch timeout, or at shutdown.
* Stop (SIGTERM/SIGINT under ``run``) ends dequeuing and hands back the prefetched jobs at once
  (those beyond the free slots: none of them starts after the signal), waits up to
  ``grace_period`` for the jobs in hand, releases the rest, then sends every pending ack. A
  second signal skips the wait. A stop ends within ``grace_period`` plus ``timeout`` whatever
  the server does (a hung one had held it for a reply timeout per request: two minutes at a
  grace period of 5 s), and within ``HURRY_SECONDS`` of a second signal: what it could not send
  by then is logged, and those jobs run again once their claims time out.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import signal
import threading
import time
from collections.abc import Awaitable, Iterable
from enum import Enum
from typing import Any, Final, Literal

from pinlater.client.aio import AsyncPinLaterClient
from pinlater.client.calls import MAX_WAIT
from pinlater.client.servers import Address, ServerSet, make_server_set
from pinlater.client.sync import PinLaterClient, default_source
from pinlater.worker.queue_runner import Handler, QueueRunner, Registration, WorkerStats, is_async
from pinlater.worker.retry import RetryPolicy, linear

log = logging.getLogger("pinlater.worker")

#: The default ``prefetch``: enough no-op jobs to cover a round trip to the server (measured by
#: ``benches/worker_vs_huey.py``); only a quick handler ever gets that many (``prefetch_horizon``).
DEFAULT_PREFETCH = 256
#: Most jobs of one queue running at once (a sync handler's threads): 100 million were made up
#: front, and the process was killed for memory at 23 GB.
MAX_CONCURRENCY = 10_000
#: Seconds a stop may still take after a second signal: the releases and acks still go to a
#: server that answers, and a hung one is given up on.
HURRY_SECONDS = 2.0


class _Default(Enum):
    WORKER = "the worker's"


#: ``register(timeout=WORKER_DEFAULT)``, the default: the worker's ``handler_timeout``.
WORKER_DEFAULT: Final = _Default.WORKER


def worker_source() -> str:
    """``{program}:{hostname}[{pid}]``: the bracket keeps pid 12's source out of pid 123's."""
    return f"{default_source()}[{os.getpid()}]"


class Worker:
    """Handlers for PinLater queues. ``run()`` blocks until SIGTERM/SIGINT and returns 0.

    ``servers``/``server_set`` are as for the clients; ``source`` defaults to the clients' default
    with this process's id in brackets (``{program}:{hostname}[{pid}]``): a checkpoint applies
    only under a claim that contains the caller's source, so sibling worker processes on one host
    must not share it, or one could hand back a job the other has claimed since. Per queue (overridable in
    ``register``): ``concurrency`` (jobs running at once, and handler threads for a sync
    handler), ``prefetch`` (most jobs claimed ahead of free slots, default 256;
    0: none, jobs in hand never exceed ``concurrency``), ``batch_size`` (most jobs per dequeue;
    default half of ``concurrency + prefetch``), ``retry`` (default the original's linear 1 s x
    attempt). Prefetch adapts: only what the handler should start within ``prefetch_horizon``
    seconds, and a prefetched job not started ``prefetch_timeout`` seconds after its claim goes
    back to PENDING (keep it well under the server's claim timeout).

    With no job in hand, a dequeue asks a pinlater server to hold it up to ``long_poll`` seconds
    until a job is ready (0: never), so an idle worker gets a new job at once without polling;
    ``poll_interval`` (first, most) bounds the wait after an empty dequeue that was not held
    (the original server, or jobs in hand); errors back off up to ``error_backoff``.
    ``status_limit`` caps the error text appended to a failed job's custom status.

    ``claim_renewal``: seconds between renewals of a running job's claim (a checkpoint, which
    restarts the server's claim timeout, ``BACKEND_MONITOR_JOB_CLAIMED_TIMEOUT_SECONDS``: keep it
    well under that); None never renews, as the original's workers did not (a job running past
    the claim timeout then runs twice). ``handler_timeout`` (per queue in ``register`` as
    ``timeout``): seconds a handler may run before its job fails; None, the default, sets no
    limit, so a handler that never returns holds its job while the worker runs.
    """

    def __init__(
        self,
        servers: str | Iterable[str | Address] | ServerSet | None = None,
        *,
        server_set: str | os.PathLike[str] | None = None,
        source: str | None = None,
        concurrency: int = 8,
        prefetch: int | None = None,
        batch_size: int | None = None,
        retry: RetryPolicy | None = None,
        prefetch_horizon: float = 0.25,
        prefetch_timeout: float = 5.0,
        ack_interval: float = 1.0,
        poll_interval: tuple[float, float] = (0.005, 1.0),
        long_poll: float = 1.0,
        error_backoff: float = 5.0,
        grace_period: float = 30.0,
        status_limit: int = 500,
        timeout: float = 30.0,
        claim_renewal: float | None = 60.0,
        handler_timeout: float | None = None,
    ) -> None:
        # (0 would spin: an ack flush, an error's back-off, a reply's timeout of no time; an
        # infinite ack interval flushes with dequeues and at stop only, an infinite grace period
        # waits for the jobs in hand however long they run)
        if not ack_interval > 0:
            raise ValueError(f"ack_interval must be positive, not {ack_interval}")
        if not 1 <= concurrency <= MAX_CONCURRENCY:
            raise ValueError(f"concurrency must be in 1..{MAX_CONCURRENCY}, not {concurrency}")
        for name, value in (("error_backoff", error_backoff), ("timeout", timeout)):
            if not 0 < value < math.inf:
                raise ValueError(f"{name} must be positive and finite, not {value}")
        if not grace_period >= 0:
            raise ValueError(f"grace_period must be at least 0, not {grace_period}")
        for name, limit in (("claim_renewal", claim_renewal), ("handler_timeout", handler_timeout)):
            if limit is not None and not 0 < limit < math.inf:
                raise ValueError(f"{name} must be positive and finite (or None), not {limit}")
        self.claim_renewal = claim_renewal
        self.handler_timeout = handler_timeout
        first_poll, most_poll = poll_interval
        # (a first wait of 0 made every back-off 0: a worker hammered a server that was down)
        if not 0 < first_poll <= most_poll < math.inf:
            raise ValueError(f"poll_interval must be (first, most) with 0 < first <= most, finite; not {poll_interval}")
        self.servers = make_server_set(servers, server_set)
        self.source = source or worker_source()
        self.client = AsyncPinLaterClient(self.servers, source=self.source, timeout=timeout)
        self._sync_client: PinLaterClient | None = None
        self._sync_lock = threading.Lock()
        self.timeout = timeout
        self.concurrency = concurrency
        if prefetch is not None and prefetch < 0:
            raise ValueError(f"prefetch must be at least 0, not {prefetch}")
        self.prefetch = prefetch
        if not (0 < prefetch_horizon < math.inf and 0 < prefetch_timeout < math.inf):
            raise ValueError("prefetch_horizon and prefetch_timeout must be positive and finite")
        self.prefetch_horizon = prefetch_horizon
        self.prefetch_timeout = prefetch_timeout
        self.batch_size = batch_size
        self.retry = retry or linear(1.0)
        self.ack_interval = ack_interval
        self.poll_interval = poll_interval
        if not 0 <= long_poll <= MAX_WAIT:
            raise ValueError(f"long_poll must be in 0..{MAX_WAIT:g} seconds, not {long_poll}")
        self.long_poll = long_poll
        self.error_backoff = error_backoff
        self.grace_period = grace_period
        self.status_limit = status_limit
        self.registrations: dict[str, Registration] = {}
        self.stats = WorkerStats()
        self.runners: list[QueueRunner] = []
        self.stopping = False
        self._stop_requested = False
        self._served = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_event: asyncio.Event | None = None
        self._hurry = False
        self.changed = asyncio.Event()
        #: Loop time by which a stop ends (``_bounded``): set at the first signal, brought in
        #: at the second; None while serving.
        self._stop_deadline: float | None = None
        self._deadline_moved = asyncio.Event()

    @property
    def sync_client(self) -> PinLaterClient:
        """A thread-safe client for handler threads (``JobContext.checkpoint``), made on first use."""
        with self._sync_lock:
            if self._sync_client is None:
                self._sync_client = PinLaterClient(self.servers, source=self.source, timeout=self.timeout)
            return self._sync_client

    def register(
        self,
        queue: str,
        handler: Handler | None = None,
        *,
        concurrency: int | None = None,
        prefetch: int | None = None,
        batch_size: int | None = None,
        retry: RetryPolicy | None = None,
        timeout: float | Literal[_Default.WORKER] | None = WORKER_DEFAULT,
    ) -> Any:
        """Run ``handler`` for the jobs of ``queue``; without a handler, a decorator. ``timeout``:
        seconds the handler may run; None: no limit; by default the worker's ``handler_timeout``."""
        if timeout is WORKER_DEFAULT:
            timeout = self.handler_timeout
        elif timeout is not None and not 0 < timeout < math.inf:
            raise ValueError(f"timeout must be positive and finite (or None), not {timeout}")

        def add(fn: Handler) -> Handler:
            size = concurrency if concurrency is not None else self.concurrency  # (0 is refused, not the default)
            if not 1 <= size <= MAX_CONCURRENCY:
                raise ValueError(f"concurrency must be in 1..{MAX_CONCURRENCY}, not {size}")
            ahead = next(p for p in (prefetch, self.prefetch, DEFAULT_PREFETCH) if p is not None)
            if ahead < 0:
                raise ValueError(f"prefetch must be at least 0, not {ahead}")
            bound = size + ahead
            # Default half the bound: the next batch is fetched while the other half still runs.
            if batch_size is not None and batch_size < 1:
                raise ValueError(f"batch_size must be at least 1, not {batch_size}")
            batch = max(1, min(bound, batch_size or self.batch_size or bound // 2))
            self.registrations[queue] = Registration(
                queue,
                fn,
                size,
                batch,
                retry or self.retry,
                is_async(fn),
                prefetch=ahead,
                timeout=timeout,
            )
            return fn

        return add if handler is None else add(handler)

    # -- running ----------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop gracefully; a second call skips the grace period. Safe from any thread."""
        loop = self._loop
        if loop is None:
            self._stop_requested = True
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._request_stop()
        else:
            with contextlib.suppress(RuntimeError):  # the loop already finished
                loop.call_soon_threadsafe(self._request_stop)

    def _request_stop(self) -> None:
        now = asyncio.get_running_loop().time()
        if not self.stopping:
            self.stopping = True
            self._stop_deadline = now + self.grace_period + self.timeout
            for runner in self.runners:  # none of them starts: handed back in serve()
                runner.returning.extend(runner.take_prefetched())
            held = sum(len(r.in_hand) for r in self.runners)
            log.info("stopping: finishing %d job(s) in hand (grace period %gs)", held, self.grace_period)
            for runner in self.runners:
                runner.slot_freed.set()
            if self._stop_event is not None:
                self._stop_event.set()
        else:
            log.info("stopping now: releasing jobs in hand")
            self._hurry = True
            assert self._stop_deadline is not None
            self._stop_deadline = min(self._stop_deadline, now + HURRY_SECONDS)
            self._deadline_moved.set()
        self.changed.set()

    async def _bounded(self, what: str, step: Awaitable[object]) -> bool:
        """``step`` of a stop, given up (cancelled, and logged) once the stop's deadline passes:
        False then. A step with nothing to do finishes in its first run, which it always gets.
        Outside a stop (``serve`` ending on an error) the deadline is one timeout from now."""
        loop = asyncio.get_running_loop()
        fallback = loop.time() + self.timeout
        task = asyncio.ensure_future(step)
        try:
            await asyncio.sleep(0)  # its first run
            while not task.done():
                deadline = self._stop_deadline if self._stop_deadline is not None else fallback
                remaining = deadline - loop.time()
                if remaining <= 0:
                    task.cancel()
                    try:
                        await task
                    except asyncio.CancelledError:
                        current = asyncio.current_task()
                        if current is not None and current.cancelling():  # serve() itself is cancelled
                            raise
                    log.error("stopping: gave up %s (out of time for the stop)", what)
                    return False
                self._deadline_moved.clear()
                moved = asyncio.ensure_future(self._deadline_moved.wait())
                try:
                    await asyncio.wait({task, moved}, timeout=None if remaining == math.inf else remaining,
                                       return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
                finally:
                    moved.cancel()
        finally:
            if not task.done():  # serve() cancelled while it waited
                task.cancel()
        task.result()
        return True

    async def sleep(self, delay: float) -> None:
        """Sleep that ends early when the worker stops."""
        assert self._stop_event is not None
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(delay):
                await self._stop_event.wait()

    async def serve(self) -> None:
        """Run until ``stop()``; then finish or release jobs in hand and send every ack."""
        if not self.registrations:
            raise ValueError("no handler registered")
        if self._served:  # (its client is closed, and its stop state stays: it hung, deaf to signals)
            raise RuntimeError("this Worker has served already: make a new one to serve again")
        self._served = True
        # A long poll per queue holds a connection for up to ``long_poll`` seconds: with more
        # queues than the pool's 8 connections, polls queued for one (an idle worker of 150
        # queues took 15 s to pick up a job). One a queue, and two for acks and renewals.
        self.client.max_connections = max(self.client.max_connections, len(self.registrations) + 2)
        self._loop = asyncio.get_running_loop()
        self._stop_event = asyncio.Event()
        self.changed = asyncio.Event()
        self._deadline_moved = asyncio.Event()
        self.runners = [QueueRunner(self, reg) for reg in self.registrations.values()]
        if self._stop_requested:
            self._request_stop()
        loops = [asyncio.create_task(r.dequeue_loop(), name=f"dequeue:{r.queue}") for r in self.runners]
        flusher = asyncio.create_task(self._flush_loop(), name="ack-flusher")
        watch = asyncio.create_task(self._long_runs_loop(), name="long-runs")
        cancelled = False
        try:
            try:
                await self._stop_event.wait()
            except asyncio.CancelledError:
                # serve() cancelled (an app's shutdown): a stop in a hurry, then the cancel goes
                # on. It had returned at once, its jobs in hand neither released nor acked: they
                # ran again after the claim timeout, an attempt charged.
                cancelled = True
                current = asyncio.current_task()
                if current is not None:
                    current.uncancel()
                if not self.stopping:
                    self._request_stop()
                self._request_stop()  # (the second: hurry)
            prefetched = asyncio.gather(*(r.return_prefetched() for r in self.runners))
            await self._bounded("handing back prefetched jobs", prefetched)
            await self._bounded("the dequeues in flight", asyncio.gather(*loops))
            await self._wait_for_jobs()
            await self._bounded("releasing jobs in hand", asyncio.gather(*(r.release_all() for r in self.runners)))
        finally:
            for background in (flusher, watch):
                background.cancel()
                try:
                    await background
                except asyncio.CancelledError:
                    pass
                except Exception:  # (it died earlier: the stop's acks and releases must still go)
                    log.exception("the worker's %s task had failed", background.get_name())
            for task in loops:
                task.cancel()
            if not await self._bounded("sending acks", self._final_flush()):
                lost = sum(len(r.succeeded) + len(r.failed) for r in self.runners)
                if lost:
                    log.error("%d ack(s) were not sent; those jobs will be retried after the claim timeout", lost)
            for runner in self.runners:
                runner.stop_threads()
            self.client.close()
            if self._sync_client is not None:
                self._sync_client.close()
        s = self.stats
        log.info(
            "stopped: %d succeeded, %d failed, %d released, %d prefetched handed back",
            s.succeeded, s.failed, s.released, s.returned,
        )  # fmt: skip
        if cancelled:
            raise asyncio.CancelledError

    async def _wait_for_jobs(self) -> None:
        assert self._stop_deadline is not None
        deadline = self._stop_deadline - self.timeout  # the grace period, from the first signal
        while any(r.in_hand for r in self.runners) and not self._hurry:
            self.changed.clear()
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                return
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(None if remaining == math.inf else remaining):
                    await self.changed.wait()

    async def _long_runs_loop(self) -> None:
        """Fail the jobs past their handlers' timeouts and renew the claims of long runs
        (``QueueRunner.expire_handlers``, ``QueueRunner.renew_claims``), a few times per period."""
        renewal = self.claim_renewal
        limits = [r.reg.timeout for r in self.runners if r.reg.timeout is not None]
        periods = [p for p in (renewal, *limits) if p is not None]
        if not periods:
            return
        tick = max(0.01, min(1.0, min(periods) / 4))
        while True:
            await asyncio.sleep(tick)
            for runner in self.runners:
                try:
                    runner.expire_handlers(time.monotonic())
                except Exception:  # (the loop must go on: renewals and timeouts for every queue)
                    log.exception("%s: failing jobs past their timeout failed", runner.queue)
            if renewal is not None:
                for runner in self.runners:
                    await runner.renew_claims(time.monotonic(), renewal)

    async def _flush_loop(self) -> None:
        while True:
            await asyncio.sleep(self.ack_interval)
            for runner in self.runners:
                await runner.flush_acks()

    async def _final_flush(self) -> None:
        """Send every ack left, again and again (0.2 s, then twice as long, at most 2 s apart) until
        all are sent; ``_bounded`` gives up at the stop's deadline. It gave up after three tries
        within 0.6 s, while a server redeployed with the worker came back a few seconds later."""
        pause = 0.2
        while [r for r in self.runners if not await r.flush_acks()]:
            await asyncio.sleep(pause)
            pause = min(2 * pause, 2.0)

    def run(self, install_signal_handlers: bool = True) -> int:
        """Serve until SIGTERM/SIGINT (the first finishes jobs in hand, the second hurries); 0 on success."""

        async def main() -> None:
            if install_signal_handlers and threading.current_thread() is threading.main_thread():
                loop = asyncio.get_running_loop()
                for sig in (signal.SIGTERM, signal.SIGINT):
                    loop.add_signal_handler(sig, self.stop)
            await self.serve()

        asyncio.run(main())
        return 0
