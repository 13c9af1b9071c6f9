"""The dequeue broker: per queue, jobs reserved ahead of demand and handed to workers from memory.

One ``DequeueBroker`` per server. Per queue it keeps a bounded ``JobBuffer`` (Rust) of jobs it
has *reserved* in the store (``ShardStore.reserve_jobs``): a reserved job stays PENDING, so
counts, scans and lookups show it as PENDING, no attempt is charged for it, and a crash needs no
cleanup, because a reservation lapses by itself after the hold.

A dequeue is served from the buffer: the jobs are taken (a ``HandOut``, held in Rust like the
buffer: no Python object per job) and the extension writes the reply from it once their claims
are written (``claim_reserved``, the normal unique claim for the worker's source, so checkpoint
guards, acks and claim timeouts work exactly as without the broker): every hand-out queues its
claims, and a flush at the next turn of the event loop writes all that queued in that turn, one
store call per (queue, shard), each job with its own worker's claim. Concurrent dequeues so
share store calls twice: one refill serves them all, and so does one claim flush. The reply
waits for its flush because a client may ack through another server (``PinLaterClient`` given
several spreads its calls over them), whose ack would find a job whose claim was still to be
written PENDING and change nothing: answered OK, the job ran again at its claim timeout (6% of
a probe's batches, when the reply went out before its claims). A flush's claims are a
``ClaimFlush`` (Rust): per (queue, shard) a ``ClaimItems`` the store call takes whole, and which
jobs it names, for ``settle``. Invariants:

* A reservation is live when its job is handed out: entries older than half the hold are never
  handed out but released (and a loop releases them in the background), and the claim is written
  within one flush, well inside the other half.
* Acks, checkpoints and lookups on this server first wait for the claims of the jobs they name
  (``settle``), and counts and scans for the queue's pending claims: a reply waits for its
  claims, but a dequeue cancelled meanwhile (a stop past its grace) leaves them being written.
  A dequeue waits for its own queue's claims of the flush only, and a claim write that failed
  slowly (a store that does not answer) is not tried again, so a failing shard holds the
  dequeues of the queues it has jobs of for one socket timeout, not those of other queues.
* A claim that cannot be written (the shard is down past a few retries, or the job was deleted,
  cancelled or retried meanwhile, through another server, say) is counted (``broker_lapsed``) and
  logged, and its job is withheld from the reply (``broker_withheld``): one that is still PENDING
  is delivered again once its reservation lapses, at least once, never lost; one that is gone is
  not run. Only a claim call that failed after it may have been applied hands its jobs out, as
  their claims may be in.
* Reservations exclude each other, so several servers on one store reserve distinct jobs.
* ``stop`` writes every queued claim, then releases every buffered reservation at once.
* Refills are single-flight per queue: concurrent dequeues await the same refill rather than
  each walking every shard. A take that leaves the buffer below the low-water mark, and any
  job made ready on this server, start a refill in the background. While the last refill got
  all it asked for (the store may hold more), so does the end of that refill and any take that
  leaves a tenth of the buffer free: under load, dequeues drain the buffer while a refill is out,
  and waiting for the low-water mark let it run dry.

An enqueue through this server (``enqueue``), once a dequeue here made the queue's buffer and
while the store is found drained, has the store reserve jobs for the buffer right behind it
where the store can (``HotPath.enqueue_and_reserve_jobs``; Redis writes both scripts at once on
one connection; the others enqueue alone): the jobs are in memory when the enqueue is answered,
where a refill started then would leave a worker that finds the buffer empty meanwhile waiting
for its store call. A reserve that got fewer than it asked for took every ready job of its
place, which the walk's hints then know to be empty; so a worker finding the buffer empty is
answered at once (above) rather than wait. It asks for the batch's size and a top-up more, and
while it is out a refill asks for the rest of the room: the two never ask for the same room.
What it got is put in the buffer it was asked for, or released if a cancel or a cap dropped that
buffer meanwhile.

A queue with a ``maxInProgress`` (``ShardedBackend.queue_rules``) is not brokered: its dequeues
are direct (``ShardedBackend.dequeue_jobs``) and the broker holds no reservation of it (what it
held when a reload set the cap is released at the next dequeue or release-loop tick). A hand-out
is taken from memory before its claim is written, so at the cap each dequeue would take jobs
whose claims the cap then refuses, withheld from its reply: a worker would get nothing while
the buffer churned.

The walk over priorities and shards (and its known-empty hints) is ``ShardedBackend.walk_ready``,
the same one the direct dequeue uses. dryRun and coverage < 1 bypass the broker (the handler
calls the backend directly): a dry run answers from the store and shows buffered jobs too.

Priority: the buffer hands out priority 1 first, but a higher-priority job made ready elsewhere
while the buffer is full of lower-priority ones waits until the buffer drains below the
low-water mark (at most ``buffer_size`` jobs); on this server a refill starts at once.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import secrets
import socket
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pinlater._pinlater import ClaimedJobs, ClaimFlush, ClaimItems, HandOut, JobBuffer, LocalIds, NewJobBatch
from pinlater.backends.base import DEFAULT_RULES, DEQUEUE_BYTES, RESERVATION_PREFIX
from pinlater.backends.sharded import ReadyBatch, ReserveAsk, ShardedBackend
from pinlater.backends.shardmap import Shard
from pinlater.config import Settings
from pinlater.counters import Counters
from pinlater.errors import QueueNotFoundError, ShardConnectionError

log = logging.getLogger(__name__)

#: (shard, priority, local_id, body, attempts_allowed, attempts_remaining, reserved_at_ms)
Entry = tuple[str, int, int, bytes, int, int, int]

#: A claim write that meets a failing shard is tried this many times in all, the waits between
#: growing by this many seconds each time; all of it well inside half the reservation hold.
CLAIM_ATTEMPTS = 3
CLAIM_RETRY_SECONDS = 0.05
#: A claim write is tried again only after a failure this quick: the dequeues of its queue wait
#: for it (one that waited out the socket timeout is not repeated).
CLAIM_QUICK_FAILURE_SECONDS = 0.5


@dataclass(frozen=True, slots=True)
class Unwritten:
    """A queue's claims in one flush that were not written: every job on ``shards`` (their claim
    calls failed) and the ``(shard, priority, local_id)`` ``jobs`` a store that answered did not
    claim (their reservations lapsed, or they were taken or deleted meanwhile)."""

    shards: frozenset[str] = frozenset()
    jobs: frozenset[tuple[str, int, int]] = frozenset()

    def __bool__(self) -> bool:
        return bool(self.shards or self.jobs)

    def __or__(self, other: Unwritten) -> Unwritten:
        return Unwritten(self.shards | other.shards, self.jobs | other.jobs)


#: Every claim written.
ALL_WRITTEN = Unwritten()


@dataclass(frozen=True, slots=True)
class BrokerPolicy:
    buffer_size: int
    low_water: int
    hold_ms: int
    #: A refill reserves while the buffer's bodies hold fewer bytes than this (by less than one
    #: body more: ``walk_ready``), so a queue of large bodies does not fill the server's memory.
    buffer_bytes: int = 64 * 1024 * 1024

    @classmethod
    def from_settings(cls, settings: Settings) -> BrokerPolicy:
        size = settings.broker_buffer_size
        low_water = int(size * settings.broker_low_water_fraction)
        return cls(size, low_water, settings.broker_hold_ms, settings.broker_buffer_bytes)

    @property
    def min_top_up(self) -> int:
        """A refill that got all it asked for is followed by another while this much is free."""
        return max(self.buffer_size // 10, 1)

    @property
    def max_age_ms(self) -> int:
        """Entries older than this are released: half the hold, so the reservation is still live."""
        return max(self.hold_ms // 2, 1)


class DequeueBroker:
    def __init__(self, backend: ShardedBackend, policy: BrokerPolicy, metrics: Counters) -> None:
        self.backend = backend
        self.policy = policy
        self.metrics = metrics
        host = socket.gethostname()[:40]
        #: This server's reservation string, unique per process start.
        self.reservation = f"{RESERVATION_PREFIX}{host}:{os.getpid()}:{secrets.token_hex(4)}"
        self._buffers: dict[str, JobBuffer] = {}
        self._refills: dict[str, asyncio.Task[int]] = {}
        #: Queues whose last refill got all it asked for: the store may hold more.
        self._more: set[str] = set()
        #: Jobs asked for by an enqueue's reserve while it is out, per queue (``enqueue``): a
        #: refill meanwhile asks for the rest of the room only.
        self._reserving: dict[str, tuple[int, int]] = {}  # (jobs, bytes) asked for
        self._background: set[asyncio.Task[Any]] = set()
        self._release_task: asyncio.Task[None] | None = None
        # The claims the next flush writes, and the future it resolves once they are written.
        self._next_flush: tuple[ClaimFlush, asyncio.Future[None]] | None = None
        # Per queue, the future the next flush resolves once that queue's claims are written:
        # what a dequeue waits for (not another queue's claims, which may meet a failing shard).
        # Its result: the claims of that queue that were not written.
        self._next_queues: dict[str, asyncio.Future[Unwritten]] = {}
        # Every flush whose claims are not written yet (the next one included), for ``settle``.
        self._unsettled: list[tuple[ClaimFlush, asyncio.Future[None]]] = []
        self._flush_scheduled = False
        self._flushes: set[asyncio.Task[None]] = set()
        self._closed = False
        self._releasing = False
        backend.signals.listeners.append(self._on_ready)

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        self._release_task = asyncio.create_task(self._release_loop(), name="pinlater-broker-release")

    async def stop(self) -> None:
        """Stop refilling, write every queued claim, and release every buffered reservation."""
        self._closed = True
        while self._flushes:
            await asyncio.wait(list(self._flushes))
            self._flushes.difference_update([t for t in self._flushes if t.done()])
        if self._release_task is not None:
            self._release_task.cancel()
            try:
                await self._release_task
            except asyncio.CancelledError:
                pass
        for task in list(self._background):
            task.cancel()
        pending = [t for t in self._refills.values() if not t.done()]
        if pending:  # their reservations land in the buffers, then are released below
            await asyncio.gather(*pending, return_exceptions=True)
        await asyncio.gather(*(self._release(q, b.drain()) for q, b in self._buffers.items()))

    @property
    def settling(self) -> bool:
        """Whether claims handed out by this server are still being written (``settle`` has
        something to wait for), so a caller builds the keys to settle only then."""
        return bool(self._unsettled)

    def buffered(self) -> int:
        """Jobs held in every buffer now."""
        return sum(len(b) for b in self._buffers.values())

    def buffer(self, queue: str) -> JobBuffer:
        buffer = self._buffers.get(queue)
        if buffer is None:
            buffer = self._buffers[queue] = JobBuffer(self.policy.buffer_size)
        return buffer

    # -- dequeue --------------------------------------------------------------------------------

    def serves(self, queue: str) -> bool:
        """Whether the queue's dequeues go through the buffer: not when it has a
        ``maxInProgress`` (see the module's docstring)."""
        return self.backend.queue_rules.get(queue, DEFAULT_RULES).max_in_progress is None

    async def dequeue(
        self, queue: str, limit: int, source: str, max_bytes: int = DEQUEUE_BYTES
    ) -> HandOut | list[ReadyBatch[ClaimedJobs]]:
        """Up to ``limit`` jobs from the queue's buffer, refilled first only if it is empty, each
        while the bodies before it hold fewer than ``max_bytes`` bytes (the first always).

        No store call but the claims' unless the buffer is empty: what it holds is handed out at
        once (a refill starts in the background below the low-water mark), and the reply waits
        for the flush that writes its claims. An empty buffer is answered at once too, with
        nothing, when no refill is out and the walk's hints say every place is empty
        (``ShardedBackend.known_empty``): a refill would make no store call, and waiting for it
        would only cost turns of the loop.
        The ``HandOut`` is the reply's jobs (``encode_dequeue_handout``). A queue the broker does
        not serve (``serves``) is dequeued directly, its reservations released first (they would
        hide its jobs until they lapse)."""
        if not self.serves(queue):
            await self._drop_buffer(queue)
            return await self.backend.dequeue_jobs(queue, limit, source, max_bytes=max_bytes)
        start = time.perf_counter()
        buffer = self.buffer(queue)
        if not len(buffer):
            if not self._refilling(queue) and self.backend.known_empty(queue):
                # Nothing to wait for: a refill would find every place known to be empty.
                self._more.discard(queue)
                self.metrics.incr("broker_known_empty")
                self.metrics.timing("broker_dequeue", (time.perf_counter() - start) * 1000.0, True)
                return []
            self.metrics.incr("broker_refill_waits")
            try:
                await self._refill_once(queue)
            except QueueNotFoundError:
                self._buffers.pop(queue, None)
                raise
            except Exception:
                self._forget_if_empty(queue, buffer)
                raise
        now = self.backend.clock.now_ms()
        # Entries older than half the hold are never handed out (the release loop lagged):
        # their reservations may be about to lapse. They are released instead.
        out = buffer.hand_out(queue, limit, max_bytes, now - self.policy.max_age_ms)
        if out.stale_count:
            self._spawn(self._release(queue, out.stale()))
        claimed = self._queue_claims(out, source) if out else None
        if len(buffer) <= self.policy.low_water or (queue in self._more and buffer.room >= self.policy.min_top_up):
            self._refill_in_background(queue)
        if claimed is not None:
            # The reply goes out once its claims are written: an ack through another server
            # (a client that spreads its calls, as PinLaterClient given several servers does)
            # would otherwise find the job still PENDING and change nothing, and the job, acked
            # OK, ran again at its claim timeout (FAILED if that was its last attempt).
            await _wait_for({claimed})
            unwritten = claimed.result()
            if unwritten:
                # Jobs whose claims were not written are withheld. On a failing shard they are
                # still PENDING (reserved) and delivered again once their reservations lapse,
                # where a worker given them now would run them twice, its ack finding them not
                # IN_PROGRESS. A job the store did not claim was deleted or cancelled (through
                # another server: this one drops its buffer around its own), or its reservation
                # lapsed and it is PENDING or another worker's: not this worker's to run.
                kept = out.withholding(unwritten.shards, unwritten.jobs)
                self.metrics.incr("broker_withheld", kept.stale_count)
                self._spawn(self._release(queue, kept.stale()))  # (they lapse if this fails too)
                out = kept
        self.metrics.incr("broker_handed_out", len(out))  # (the withheld left out)
        self.metrics.timing("broker_dequeue", (time.perf_counter() - start) * 1000.0, True)
        return out

    async def enqueue(self, queue: str, jobs: NewJobBatch, now_ms: int) -> tuple[str, LocalIds]:
        """An enqueue through this server (``ShardedBackend.enqueue_jobs``). When the queue's
        buffer is in use here (a dequeue made it) and has room, the store was found drained
        (the last refill got less than it asked for), and no refill or other such reserve is
        out, the store reserves jobs for the buffer right behind the enqueue where it can
        (``HotPath.enqueue_and_reserve_jobs``): the new jobs are in the buffer when the enqueue
        is answered, where they would wait for the refill the enqueue starts (and a worker
        finding the buffer empty meanwhile would wait for that refill's store call). It asks
        for the batch's size and a top-up more (at most the room): a drained store holds little
        more, the enqueue's answer waits for the reserve's, and a reserve that got all it asked
        for says the store may hold more (no such reserve then, until a refill finds it drained)."""
        buffer = self._buffers.get(queue)
        if (
            buffer is None
            or self._closed
            or queue in self._more
            or queue in self._reserving
            or self._refilling(queue)
            or buffer.room < self.policy.min_top_up
            or buffer.bytes >= self.policy.buffer_bytes
            or not self.serves(queue)
        ):
            return await self.backend.enqueue_jobs(queue, jobs, now_ms)
        got: list[ReadyBatch[ClaimedJobs]] = []
        limit = min(buffer.room, len(jobs) + self.policy.min_top_up)
        # its share of the byte room, as of the room (a refill meanwhile takes the rest)
        max_bytes = max(1, (self.policy.buffer_bytes - buffer.bytes) * limit // max(buffer.room, 1))

        def out(going: bool) -> None:  # the room it asks for is not a refill's while it is out
            if going:
                self._reserving[queue] = (limit, max_bytes)
            else:
                self._reserving.pop(queue, None)

        placed = await self.backend.enqueue_jobs(
            queue,
            jobs,
            now_ms,
            reserve=ReserveAsk(limit, self.reservation, self.policy.hold_ms, got.append, out, max_bytes),
        )
        for batch in got:
            await self._keep(queue, buffer, batch, limit, max_bytes)
        return placed

    async def _keep(
        self, queue: str, buffer: JobBuffer, batch: ReadyBatch[ClaimedJobs], asked: int, max_bytes: int
    ) -> None:
        """Put what an enqueue reserved into the buffer it was asked for; released if that
        buffer is gone meanwhile (a cancel or a cap dropped it: a new one may hold other rules)."""
        if self._buffers.get(queue) is not buffer or self._closed:
            ids = [job[0] for job in batch.jobs.to_list()]
            await self._release(queue, [(batch.shard, batch.priority, i, b"", 0, 0, batch.now_ms) for i in ids])
            return
        rejected = buffer.push(batch.shard, batch.priority, batch.jobs, batch.now_ms)
        kept = len(batch.jobs) - len(rejected)
        self.metrics.incr("broker_enqueue_reserved", kept)
        if rejected:  # cannot happen while refills ask for the rest of the room; release, never leak
            await self._release(queue, [(batch.shard, batch.priority, i, b"", 0, 0, batch.now_ms) for i in rejected])
        if len(batch.jobs) >= asked or batch.jobs.body_bytes >= max_bytes:
            self._more.add(queue)  # all it asked for (or all the bytes): the store may hold more
        if kept:
            self.backend.signals.notify(queue, kept)  # wake long polls: there is something to take

    def _queue_claims(self, out: HandOut, source: str) -> asyncio.Future[Unwritten]:
        """Queue the claims of the jobs handed out for the next flush, under a new claim; the
        future of the queue's claims in that flush, done once they were written (or given up:
        ``_claim_on``), with those that were not."""
        claim = self.backend.new_claim(source)
        pending = self._next_flush
        if pending is None:
            pending = self._next_flush = (ClaimFlush(), asyncio.get_running_loop().create_future())
            self._unsettled.append(pending)
        pending[0].add(claim, out)
        mine = self._next_queues.get(out.queue)
        if mine is None:
            mine = self._next_queues[out.queue] = asyncio.get_running_loop().create_future()
        if not self._flush_scheduled:
            self._flush_scheduled = True
            task = asyncio.create_task(self._flush_claims(), name="pinlater-broker-claims")
            self._flushes.add(task)
            task.add_done_callback(self._flushes.discard)
        return mine

    # -- claims ---------------------------------------------------------------------------------

    async def settle(self, jobs: Iterable[tuple[str, str, int, int]]) -> None:
        """Wait until the claims of these ``(queue, shard, priority, local_id)`` jobs handed out
        by this server are written (decoded descriptors are such tuples)."""
        unsettled = self._unsettled
        if not unsettled:
            return
        held = ClaimFlush.holding([ledger for ledger, _ in unsettled], list(jobs))
        await _wait_for({unsettled[at][1] for at in held})

    async def settle_queue(self, queue: str) -> None:
        """Wait until every claim of the queue queued so far is written."""
        if self._unsettled:
            await _wait_for({f for ledger, f in self._unsettled if ledger.holds_queue(queue)})

    async def _flush_claims(self) -> None:
        """Write the claims queued by every hand-out of this turn of the loop: one store call
        per (queue, shard). It does not wait for an earlier flush still in flight (they touch
        distinct jobs), so a claim is on its way within one turn of the loop. Each queue's
        future is resolved once that queue's calls are done, the flush's once all are (for
        ``settle``); both whatever happens, cancellation included."""
        try:
            await asyncio.sleep(0)  # let hand-outs of this turn of the loop join
        finally:  # (cancelled here, nothing is written: the jobs' reservations lapse)
            self._flush_scheduled = False
            pending, self._next_flush = self._next_flush, None
            queues, self._next_queues = self._next_queues, {}
            if pending is not None and asyncio.current_task().cancelling():  # type: ignore[union-attr]
                self._unsettled.remove(pending)
                _resolve(pending[1])
                for mine in queues.values():  # nothing written: every shard's claims failed
                    _resolve_queue(mine, Unwritten(frozenset(shard for _, shard, _ in pending[0].batches())))
        if pending is None:
            return
        ledger, flush = pending
        by_queue: dict[str, list[tuple[str, ClaimItems]]] = defaultdict(list)
        for q, shard, items in ledger.batches():
            by_queue[q].append((shard, items))

        async def claim_queue(queue: str, batches: list[tuple[str, ClaimItems]]) -> None:
            unwritten = Unwritten(frozenset(shard for shard, _ in batches))  # until written
            try:
                written = await asyncio.gather(*(self._claim_on(queue, shard, items) for shard, items in batches))
                unwritten = functools.reduce(Unwritten.__or__, written, ALL_WRITTEN)
            finally:
                _resolve_queue(queues[queue], unwritten)  # (every queue of the ledger has one)

        try:
            await asyncio.gather(*(claim_queue(q, batches) for q, batches in by_queue.items()))
        finally:
            self._unsettled.remove(pending)
            _resolve(flush)
            for mine in queues.values():
                _resolve_queue(mine, ALL_WRITTEN)

    async def _claim_on(self, queue: str, shard_name: str, items: ClaimItems) -> Unwritten:
        """Claim handed-out jobs on one shard, retrying a failing shard a few times; the claims
        known not to be written. Answered, those of the jobs the store did not claim (deleted
        meanwhile, say); failed, all of them (the shard), unless the writes may have landed (a
        reply lost after the command was sent): only claims known not written are withheld
        (``dequeue``), as a job whose claim landed unseen is IN_PROGRESS, and withheld it would
        run at no worker's hands before its claim timeout took an attempt (FAILED, if its last)."""
        self.metrics.incr("broker_claim_calls")
        unclaimed: list[int] = list(range(len(items)))
        answered = False
        unknown = False  # a failure after which the claims may be in
        for attempt in range(CLAIM_ATTEMPTS):
            shard = self.backend.shards.get(shard_name)
            if shard is None:  # removed by a config reload: its reservations simply lapse
                break
            now = self.backend.clock.now_ms()
            started = time.monotonic()
            try:
                hot = self.backend.hot_path(shard)
                unclaimed = await self.backend.on_shard(shard, hot.claim_reserved(queue, items, self.reservation, now))
                answered = True
            except ShardConnectionError as exc:
                unknown = unknown or exc.maybe_applied
                # again only after a quick failure (a dropped connection): one that waited out
                # the socket timeout would hold this queue's dequeues that long each time
                if attempt + 1 < CLAIM_ATTEMPTS and time.monotonic() - started < CLAIM_QUICK_FAILURE_SECONDS:
                    await asyncio.sleep(CLAIM_RETRY_SECONDS * (attempt + 1))
                    continue
                log.warning("broker: claiming %d jobs of %s on shard %s failed: %s", len(items), queue, shard_name, exc)
                break
            except QueueNotFoundError:
                break
            except Exception:
                log.exception("broker: claiming %d jobs of %s on shard %s failed", len(items), queue, shard_name)
                unknown = True
                break
            break
        self.metrics.incr("broker_claimed", len(items) - len(unclaimed))
        if unclaimed:  # withheld; one still PENDING is delivered again once its reservation lapses
            self.metrics.incr("broker_lapsed", len(unclaimed))
            log.warning(
                "broker: %d of %d jobs of %s handed out on shard %s could not be claimed (gone, or still"
                " PENDING: delivered again)",
                len(unclaimed),
                len(items),
                queue,
                shard_name,
            )
        if unknown or not unclaimed:
            # (an attempt that failed after its writes may have landed, even one answered after
            # it: the stores answer a job IN_PROGRESS under the claim given as claimed, but a
            # job of the first attempt acked or timed out meanwhile is not. A job among them that
            # was gone may then run, or twice: at least once, as before.)
            return ALL_WRITTEN
        if not answered:
            return Unwritten(shards=frozenset({shard_name}))
        listed = items.to_list()
        return Unwritten(jobs=frozenset((shard_name, listed[at][0], listed[at][1]) for at in unclaimed))

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # -- refills --------------------------------------------------------------------------------

    def _refill_once(self, queue: str) -> Awaitable[int]:
        """The queue's refill in flight, or a new one: concurrent callers share it."""
        task = self._refills.get(queue)
        if task is None or task.done():
            task = self._refills[queue] = asyncio.create_task(self._refill(queue), name=f"pinlater-refill-{queue}")
            task.add_done_callback(functools.partial(self._refill_done, queue))
        return asyncio.shield(task)

    def _refill_done(self, queue: str, task: asyncio.Task[int]) -> None:
        """A finished refill is forgotten (every reader takes a done one for none): kept, each
        queue name a peer's dequeue made up held its task, error and traceback for good."""
        if self._refills.get(queue) is task:
            del self._refills[queue]

    def _refilling(self, queue: str) -> bool:
        task = self._refills.get(queue)
        return task is not None and not task.done()

    def _refill_in_background(self, queue: str) -> None:
        if self._closed or self._refilling(queue) or self.backend.known_empty(queue):
            return  # (known empty: it would make no store call)
        self._spawn(self._background_refill(queue))

    async def _background_refill(self, queue: str) -> None:
        try:
            await self._refill_once(queue)
        except QueueNotFoundError:
            self._buffers.pop(queue, None)
        except Exception as exc:
            log.warning("broker: background refill of %s failed: %s", queue, exc)
            self._forget_if_empty(queue, self._buffers.get(queue))

    def _forget_if_empty(self, queue: str, buffer: JobBuffer | None) -> None:
        """After a failed refill: drop ``buffer`` if it is still the queue's, empty, and nothing is
        out to fill it (the next dequeue makes another). While a store could not answer, each
        queue name a peer's dequeues made up kept an empty buffer here for good."""
        if (
            buffer is not None
            and self._buffers.get(queue) is buffer
            and not len(buffer)
            and not self._refilling(queue)
            and queue not in self._reserving
        ):
            del self._buffers[queue]
            self._more.discard(queue)

    def _on_ready(self, queue: str) -> None:
        """Jobs became ready on this server: top the buffer up (a better priority may be among them)."""
        buffer = self._buffers.get(queue)
        if buffer is not None and buffer.room > 0 and not self._releasing and self.serves(queue):
            self._refill_in_background(queue)

    async def _refill(self, queue: str) -> int:
        """Reserve up to the buffer's room, walking priorities and shards like a dequeue."""
        if self._closed or not self.serves(queue):
            return 0
        buffer = self.buffer(queue)
        out_jobs, out_bytes = self._reserving.get(queue, (0, 0))
        room = buffer.room - out_jobs
        byte_room = self.policy.buffer_bytes - buffer.bytes - out_bytes
        if room <= 0 or byte_room <= 0:
            return 0
        hold_ms = self.policy.hold_ms

        def fetch(shard: Shard, priority: int, want: int, now: int, max_bytes: int) -> Awaitable[ClaimedJobs]:
            hot = self.backend.hot_path(shard)
            # (walk_ready marks the shard on a connection failure)
            return hot.reserve_jobs(queue, priority, want, self.reservation, now, hold_ms, max_bytes)

        batches = await self.backend.walk_ready(queue, room, fetch, max_bytes=byte_room)
        self.metrics.incr("broker_refills")
        total = got_bytes = 0
        for batch in batches:
            got_bytes += batch.jobs.body_bytes
            rejected = buffer.push(batch.shard, batch.priority, batch.jobs, batch.now_ms)
            total += len(batch.jobs) - len(rejected)
            if rejected:  # cannot happen while refills are single-flight; release, never leak
                entries = [(batch.shard, batch.priority, i, b"", 0, 0, batch.now_ms) for i in rejected]
                await self._release(queue, entries)
        self.metrics.incr("broker_refill_jobs", total)
        if total:
            self.backend.signals.notify(queue, total)  # wake long polls: there is something to take
        if got_bytes >= byte_room:
            # All the bytes it asked for: the store may hold more, taken as dequeues make room.
            self._more.add(queue)
        elif total >= room:
            # All it asked for: the store may hold more, so the buffer is kept topped up, here
            # (dequeues took from it while this refill was out) and after each take.
            self._more.add(queue)
            asyncio.get_running_loop().call_soon(self._top_up, queue)
        else:
            self._more.discard(queue)
        return total

    def _top_up(self, queue: str) -> None:
        buffer = self._buffers.get(queue)
        if buffer is not None and buffer.room >= self.policy.min_top_up:
            self._refill_in_background(queue)

    # -- releases -------------------------------------------------------------------------------

    async def _release_loop(self) -> None:
        interval = max(self.policy.max_age_ms / 4000.0, 0.005)
        while True:
            await asyncio.sleep(interval)
            try:
                await self.release_old()
            except Exception:
                log.exception("broker: releasing old reservations failed")

    async def release_old(self) -> int:
        """Release every buffered entry older than half the hold; return how many."""
        cutoff = self.backend.clock.now_ms() - self.policy.max_age_ms
        total = 0
        for queue, buffer in list(self._buffers.items()):
            if not self.serves(queue):  # capped by a reload: everything goes back
                total += await self._drop_buffer(queue)
                continue
            old = buffer.take_older_than(cutoff)
            if old:
                total += await self._release(queue, old)
        return total

    async def forget(self, queue: str) -> int:
        """Release every job of the queue this server holds, so that none of them is handed out
        from memory after a change the buffer cannot see (jobs cancelled or deleted): the next
        dequeue reserves afresh. Return how many were released."""
        return await self._drop_buffer(queue)

    async def around_delete(self, queue: str, delete: Callable[[], Awaitable[int]]) -> int:
        """Await ``delete()``, a delete of PENDING jobs of the queue (its count of jobs deleted):
        the jobs this server holds are PENDING in the store, and one deleted there is withheld
        from the dequeue that takes it (its claim finds nothing), so the buffer is dropped (its
        reservations released) after a delete of any, rather than answer dequeues with fewer
        jobs than the store holds. A delete of none leaves it alone: a peer repeating one made
        the buffer refill from the store each time."""
        return await _around(lambda: self.forget(queue), delete)

    async def around_cancel(
        self, queue: str, jobs: list[tuple[str, str, int, int]], cancel: Callable[[], Awaitable[int]]
    ) -> int:
        """Await ``cancel()``, a cancel of these ``(queue, shard, priority, local_id)`` jobs (its
        count of jobs changed), once their claims on this server are written (``settle``). One
        handed out meanwhile is withheld (its claim finds it cancelled); they are taken out of
        the buffer (``withdraw``) after a cancel of any. (The whole buffer was dropped, and
        refilled from the store, at each cancel a peer sent.)"""
        await self.settle(jobs)
        return await _around(lambda: self.withdraw(queue, jobs), cancel)

    async def withdraw(self, queue: str, jobs: Iterable[tuple[str, str, int, int]]) -> int:
        """Release these ``(queue, shard, priority, local_id)`` jobs of the queue if this server
        holds them (after a refill still out lands), so that none is handed out from memory
        after a change the buffer cannot see (a cancel); the rest of the buffer stays. Return
        how many were released."""
        names = [(shard, priority, local_id) for q, shard, priority, local_id in jobs if q == queue]
        # (taken out before a refill still out lands too: dequeues meanwhile must not hand them out)
        named = self._take_named(queue, names)
        if await self._refill_landed(queue):
            named += self._take_named(queue, names)
        return await self._release(queue, named) if named else 0

    async def _refill_landed(self, queue: str) -> bool:
        """Wait for the queue's refill still out, if one is (it may fail: its entries simply do
        not land); whether there was one."""
        refill = self._refills.get(queue)
        if refill is None or refill.done():
            return False
        await asyncio.gather(refill, return_exceptions=True)
        return True

    def _take_named(self, queue: str, names: list[tuple[str, int, int]]) -> list[Entry]:
        buffer = self._buffers.get(queue)
        return buffer.take_named(names) if buffer is not None and len(buffer) else []

    async def _drop_buffer(self, queue: str) -> int:
        """Forget a queue's buffer, releasing what it holds (and, once a refill still out lands
        in it, that too: none of it is handed out meanwhile); return how many were released."""
        held = self._buffers.get(queue)
        entries = held.drain() if held is not None and len(held) else []
        await self._refill_landed(queue)
        buffer = self._buffers.pop(queue, None)
        self._more.discard(queue)
        if buffer is not None and len(buffer):
            entries += buffer.drain()
        return await self._release(queue, entries) if entries else 0

    async def _release(self, queue: str, entries: Sequence[Entry]) -> int:
        """Release entries' reservations, one store call per shard; failures just lapse."""
        by_shard: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for shard_name, priority, local_id, *_ in entries:
            by_shard[shard_name].append((priority, local_id))
        released = 0
        for shard_name, items in by_shard.items():
            shard = self.backend.shards.get(shard_name)
            if shard is None:
                continue
            now = self.backend.clock.now_ms()
            try:
                hot = self.backend.hot_path(shard)
                n = await self.backend.on_shard(shard, hot.release_reservations(queue, items, self.reservation, now))
            except Exception as exc:  # the reservations lapse after the hold instead
                log.warning(
                    "broker: releasing %d jobs of %s on shard %s failed: %s", len(items), queue, shard_name, exc
                )
                continue
            released += n
            if n:  # dequeuable at once: dequeues must not skip them as known-empty
                self._releasing = True  # but this broker does not refill on its own release
                try:
                    self.backend.mark_ready(shard_name, queue, {priority for priority, _ in items}, n)
                finally:
                    self._releasing = False
        self.metrics.incr("broker_released", released)
        return released


async def _around(clear: Callable[[], Awaitable[int]], change: Callable[[], Awaitable[int]]) -> int:
    """``change()`` awaited (its count of jobs changed), then ``clear()`` if it changed any or
    failed (one that failed may have changed some): the buffer's part for a cancel or delete of
    jobs it may hold (``around_cancel``, ``around_delete``). Nothing is cleared before: a job
    handed out during the change is claimed before it (and the change does not touch it) or
    withheld after it (its claim finds it changed)."""
    try:
        changed = await change()
    except BaseException:
        await clear()
        raise
    if changed:
        await clear()
    return changed


def _resolve(*futures: asyncio.Future[None]) -> None:
    """Mark claim flushes' futures done (those not done yet)."""
    for future in futures:
        if not future.done():
            future.set_result(None)


def _resolve_queue(future: asyncio.Future[Unwritten], unwritten: Unwritten) -> None:
    """Mark a queue's claims in a flush done (if not yet), with those that were not written."""
    if not future.done():
        future.set_result(unwritten)


async def _wait_for(flushes: set[asyncio.Future[None]] | set[asyncio.Future[Unwritten]]) -> None:
    """Wait for claim flushes; a caller cancelled meanwhile does not cancel them."""
    if flushes:
        await asyncio.wait([asyncio.shield(f) for f in flushes])
