"""The client tool's load modes (the original's ``PinLaterQueryIssuer``): enqueue and dequeue.

``--concurrency`` asyncio tasks share one ``AsyncPinLaterClient`` and issue ``--num_queries``
requests in all (-1: until interrupted). As the original did:

* **enqueue**: each query enqueues ``--batch_size`` jobs with bodies ``task_<random>`` (or the
  ``--body`` / ``--body_size`` given) at ``--priority``, each with ``--dedup-key``,
  ``--dedup-window-ms``, ``--group-key`` and an expiry (``--expire-at``, or ``--expire-in``
  counted from the query) when given (one key for every job of the run: the summary says how
  many were deduplicated and which descriptors answered for the key);
* **dequeue**: each query dequeues up to ``--batch_size`` jobs, then acks each one as succeeded
  with a chance of ``--dequeue_success_percent`` percent and as failed otherwise, in one
  ``ackDequeuedJobs`` call. Its latency is the dequeue and the ack together.

A line about once a second gives the request rate, jobs/s, p50/p99 latency and errors of that
second; the summary at the end covers the whole run, with the first message of each error code.
Errors that are the caller's fault (no such queue, bad priority, ...) end the run at once: every
later request would fail the same way.
"""

from __future__ import annotations

import asyncio
import random
import signal
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TextIO

from pinlater.bench.stats import Histogram, ms, si
from pinlater.client import AsyncPinLaterClient, Job
from pinlater.errors import ErrorCode, PinLaterError

#: Errors that end a load run: the request itself is wrong, so repeating it cannot succeed.
FATAL_CODES = frozenset(
    {
        ErrorCode.CONTINUATION_INVALID,
        ErrorCode.PASSWORD_INVALID,
        ErrorCode.QUEUE_NAME_INVALID,
        ErrorCode.QUEUE_NAME_TOO_LONG,
        ErrorCode.QUEUE_NOT_FOUND,
        ErrorCode.PRIORITY_NOT_SUPPORTED,
    }
)


#: The most descriptors answering for ``--dedup-key`` that the summary lists.
MAX_HOLDERS_SHOWN = 10


@dataclass(frozen=True)
class LoadOptions:
    mode: str  # "enqueue" or "dequeue"
    queue: str
    concurrency: int = 1
    batch_size: int = 1
    #: Queries to issue in all; -1: until interrupted (SIGINT/SIGTERM).
    num_queries: int = 1
    dequeue_success_percent: int = 100
    priority: int = 1
    attempts: int = 2
    #: The body of every job; None: ``task_<random>`` as the original, padded to ``body_size``.
    body: bytes | None = None
    body_size: int | None = None
    #: Sent on every enqueued job when set (``Job.dedup_key``, ``dedup_window_ms``, ``group_key``).
    dedup_key: str | None = None
    dedup_window_ms: int = 0
    group_key: str | None = None
    #: Every job's expiry: at this time (ms since the epoch), or this long after its enqueue.
    expire_at_ms: int | None = None
    expire_in_ms: int | None = None
    report_interval: float = 1.0


@dataclass
class Tally:
    """What a run (or one interval of it) did."""

    requests: int = 0
    jobs: int = 0
    #: Enqueued jobs that were not created: their dedup key was held (``deduplicated``).
    deduplicated: int = 0
    succeeded: int = 0
    failed: int = 0
    empty: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    #: The first message of each error code in ``errors``.
    messages: dict[str, str] = field(default_factory=dict)
    latency: Histogram = field(default_factory=Histogram)

    def add(self, other: Tally) -> None:
        self.requests += other.requests
        self.jobs += other.jobs
        self.deduplicated += other.deduplicated
        self.succeeded += other.succeeded
        self.failed += other.failed
        self.empty += other.empty
        self.errors.update(other.errors)
        for code, message in other.messages.items():
            self.messages.setdefault(code, message)
        self.latency.merge(other.latency)


class Issuer:
    def __init__(self, client: AsyncPinLaterClient, options: LoadOptions, out: TextIO) -> None:
        self.client = client
        self.options = options
        self.out = out
        self.total = Tally()
        self.interval = Tally()
        self.issued = 0
        self.stop = asyncio.Event()
        self.fatal: PinLaterError | None = None
        self.started = 0.0
        self.elapsed = 0.0
        #: The descriptors that answered for ``--dedup-key`` (created or deduplicated), in order
        #: of first answer, at most ``MAX_HOLDERS_SHOWN``; ``more_holders`` counts the rest.
        self.holders: dict[str, None] = {}
        self.more_holders = 0

    def _body(self) -> bytes:
        if self.options.body is not None:
            return self.options.body
        body = f"task_{random.randrange(2**31 - 1)}".encode()
        size = self.options.body_size
        if size is not None:
            body = body[:size].ljust(size, b"x")
        return body

    def _next_query(self) -> bool:
        if self.stop.is_set() or (0 <= self.options.num_queries <= self.issued):
            return False
        self.issued += 1
        return True

    async def _enqueue_once(self, tally: Tally) -> None:
        o = self.options
        expire_at_ms = o.expire_at_ms
        if o.expire_in_ms is not None:
            expire_at_ms = int(time.time() * 1000) + o.expire_in_ms
        jobs = [
            Job(
                self._body(),
                priority=o.priority,
                attempts=o.attempts,
                dedup_key=o.dedup_key,
                dedup_window_ms=o.dedup_window_ms,
                group_key=o.group_key,
                expire_at_ms=expire_at_ms,
            )
            for _ in range(o.batch_size)
        ]
        result = await self.client.enqueue(o.queue, jobs)
        tally.jobs += len(result)
        tally.deduplicated += sum(result.deduplicated)
        if o.dedup_key is not None:
            for descriptor in result:
                if descriptor in self.holders:
                    continue
                if len(self.holders) < MAX_HOLDERS_SHOWN:
                    self.holders[descriptor] = None
                else:
                    self.more_holders += 1

    async def _dequeue_once(self, tally: Tally) -> None:
        o = self.options
        jobs = await self.client.dequeue(o.queue, o.batch_size)
        if not jobs:
            tally.empty += 1
            return
        succeeded: list[str] = []
        failed: list[str] = []
        for job in jobs:
            (succeeded if random.randrange(100) < o.dequeue_success_percent else failed).append(job.descriptor)
        await self.client.ack(o.queue, succeeded, failed)
        tally.jobs += len(jobs)
        tally.succeeded += len(succeeded)
        tally.failed += len(failed)

    async def _worker(self) -> None:
        once = self._enqueue_once if self.options.mode == "enqueue" else self._dequeue_once
        while self._next_query():
            tally = Tally(requests=1)
            began = time.perf_counter()
            try:
                await once(tally)
            except PinLaterError as exc:
                tally.errors[exc.code.name] += 1
                tally.messages.setdefault(exc.code.name, " ".join(exc.message.split()))
                if exc.code in FATAL_CODES and self.fatal is None:
                    self.fatal = exc
                    self.stop.set()
            tally.latency.add((time.perf_counter() - began) * 1000)
            self.interval.add(tally)

    async def _reporter(self) -> None:
        last = time.monotonic()
        while not self.stop.is_set():
            try:
                await asyncio.wait_for(self.stop.wait(), self.options.report_interval)
            except TimeoutError:
                pass
            now = time.monotonic()
            self._report_interval(now - last)
            last = now

    def _report_interval(self, seconds: float) -> None:
        tally, self.interval = self.interval, Tally()
        self.total.add(tally)
        if self.stop.is_set() and not tally.requests:
            return
        seconds = max(seconds, 1e-9)
        errors = sum(tally.errors.values())
        print(
            f"[{time.monotonic() - self.started:6.1f}s] {self.options.mode}: "
            f"{tally.requests / seconds:8.1f} req/s  {tally.jobs / seconds:9.1f} jobs/s  "
            f"p50 {ms(tally.latency.quantile(0.5))}  p99 {ms(tally.latency.quantile(0.99))}  "
            f"errors {errors}  issued {self.issued}"
            + (f"  deduplicated {tally.deduplicated}" if self.options.dedup_key is not None else ""),
            file=self.out,
            flush=True,
        )

    async def run(self) -> Tally:
        """Issue the queries; returns the totals (``self.fatal`` set if a fatal error ended it)."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self.stop.set)
        self.started = time.monotonic()
        reporter = asyncio.create_task(self._reporter())
        try:
            await asyncio.gather(*(self._worker() for _ in range(self.options.concurrency)))
        finally:
            self.elapsed = time.monotonic() - self.started
            self.stop.set()
            await reporter
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)
        self.total.add(self.interval)
        return self.total

    def print_summary(self) -> None:
        t, o, secs = self.total, self.options, max(self.elapsed, 1e-9)
        errors = sum(t.errors.values())
        lines = [
            f"summary: {o.mode} on queue {o.queue}, concurrency {o.concurrency}, batch size {o.batch_size}",
            f"  requests: {t.requests} in {self.elapsed:.2f}s ({t.requests / secs:.1f} req/s), errors: {errors}",
            f"  jobs: {t.jobs} ({t.jobs / secs:.1f} jobs/s, {si(t.jobs / secs * 60)}/min)",
        ]
        if o.mode == "dequeue":
            lines.append(f"  acked: {t.succeeded} succeeded, {t.failed} failed; empty dequeues: {t.empty}")
        if o.mode == "enqueue" and o.dedup_key is not None:
            lines.append(f"  deduplicated: {t.deduplicated} of {t.jobs} jobs (not created: the key was held)")
            held = ", ".join(self.holders) or "-"
            more = f" and {self.more_holders} more" if self.more_holders else ""
            lines.append(f"  dedup key {o.dedup_key!r} answered by: {held}{more}")
        lat = t.latency.summary()
        lines.append(
            f"  latency: p50 {ms(lat['p50'])}  p99 {ms(lat['p99'])}  p999 {ms(lat['p999'])}  max {ms(lat['max'])}"
        )
        lines += [f"  errors: {code} {n} (first: {t.messages.get(code, '')})" for code, n in sorted(t.errors.items())]
        print("\n".join(lines), file=self.out, flush=True)
