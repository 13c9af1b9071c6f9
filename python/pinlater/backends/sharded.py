"""Everything above one shard, written once for every backend.

``ShardedBackend`` turns contract operations into per-shard ``ShardStore`` calls: it picks a
shard for new jobs, walks priorities from 1 down and shards in random order on dequeue, honours
coverage and dequeue-only shards, routes acks/checkpoints/lookups by job descriptor, merges
scans and sums counts. A shard without a queue holds none of its jobs (``QueueAnswers``): reads
fail with ``QueueNotFoundError`` only when no shard has the queue.

The hot operations (enqueue, dequeue, ack, the broker's reservations) go through each store's
declared ``HotPath`` (``base.ShardStore.hot_path``): on the event loop where the store's client is
async (Redis), on this backend's thread pool where it blocks. The jobs of enqueue, dequeue and ack
are the extension's values (``NewJobBatch`` in, ``LocalIds`` and ``ClaimedJobs`` out, an
``AckGroup`` per shard): this layer reads only their counts and priorities, and makes no Python
object per job. Every other store call is blocking and runs on the thread pool (``call_store``),
so shards are asked in parallel and the event loop never waits on I/O.

Callers validate arguments first (``server/handler.py``); this layer trusts them.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import heapq
import itertools
import logging
import os
import socket
import time
import weakref
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Iterable, Mapping, Sequence, Sized
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Generic, NamedTuple, Protocol, TypeVar

from pinlater._pinlater import (
    DETACH_JOBS,
    AckGroup,
    ClaimedJobs,
    KeyedJobBatch,
    KeyedPlacement,
    LocalIds,
    NewJobBatch,
    SplitPlacement,
    decode_descriptors,
    encode_descriptors,
)
from pinlater.backends import scan_pages
from pinlater.backends.base import (
    DEFAULT_RULES,
    DEQUEUE_BYTES,
    STORE_CALL_JOBS,
    CheckpointItem,
    ClaimedJob,
    CountKey,
    Enqueued,
    GroupCounts,
    HotPath,
    JobFilter,
    JobRecord,
    JobState,
    KeyedJob,
    LookupOverBudget,
    NewJob,
    Offload,
    QueueRules,
    ScanCursor,
    failed_after,
    sort_keyed,
)
from pinlater.backends.body_filter import DEFAULT_BUDGET_SECONDS, BodyFilterBusy
from pinlater.backends.pressure import MemoryUse, StoreMemoryFullError, memory_full_reason, memory_probe, memory_use
from pinlater.backends.scan_pages import ScanQuery
from pinlater.backends.shardmap import Shard, ShardMap
from pinlater.clock import Clock, SystemClock
from pinlater.errors import ErrorCode, PinLaterError, QueueNotFoundError, ShardConnectionError, shown
from pinlater.eventloop import off_loop
from pinlater.queue_rules import cap_share
from pinlater.wakeup import QueueSignals

log = logging.getLogger(__name__)

T = TypeVar("T")
T2 = TypeVar("T2")


class WalkAnswer(Sized, Protocol):
    """What one store call of a dequeue walk returns: a store's ``ClaimedJobs``, for dequeues
    and the broker's refills alike; the walk counts them and reads ``cut``."""

    @property
    def cut(self) -> bool:
        """The call stopped at one of its work budgets before its limit (a Redis script that
        met ``EXPIRED_BUDGET`` expired jobs, say): due jobs may be left behind what it passed."""
        ...

    @property
    def body_bytes(self) -> int:
        """The length of its jobs' bodies, summed: counted against the walk's ``max_bytes``."""
        ...


J = TypeVar("J", bound=WalkAnswer)
#: (shard, queue, priority): one place a dequeue looks.
Place = tuple[str, str, int]

#: After a dequeue finds fewer ready jobs than it asked for in a (shard, queue, priority), later
#: dequeues skip it for this long unless this server puts a ready job there meanwhile. Each
#: further look that finds nothing at all doubles the wait, up to ``MAX_EMPTY_RECHECK_MS``; a
#: look that finds jobs, or a job made ready by this server, starts again from the first. Jobs
#: made ready by other servers wait at most the current wait for a dequeue to look; jobs this
#: server made ready for later (a future run-after, a retry delay) are looked for at that time.
EMPTY_RECHECK_MS = 200
MAX_EMPTY_RECHECK_MS = 3200
#: Future ready times remembered per place; beyond this the backoff alone bounds the delay.
MAX_FUTURE_READY_TIMES = 64
#: Most jobs a dry run's store call (one a place) asks for: 1,000 (STORE_CALL_JOBS) showed a
#: dry run of 5,000 ready jobs on one shard 1,000 of them.
DRY_RUN_CALL_JOBS = 10_000
#: (queue, shard) pairs one lookupJobs may name (``lookup_jobs``), and how many are asked at once.
MAX_LOOKUP_PAIRS = 1_000
LOOKUP_CALLS_AT_ONCE = 8
#: Store calls one walk makes again, in all, after calls that stopped at a work budget short of
#: their limit (``WalkAnswer.cut``): each such call did bounded work (ended up to 256 expired
#: jobs on Redis, say), and what it passed may hide due jobs, so its place is not taken for
#: empty. Beyond these the walk goes on to the next place, and the next walk looks again.
MAX_CUT_REPEATS = 16

#: A failed ping that took longer than this (a store that does not answer, rather than one that
#: refuses connections) keeps calls from pinging that shard again for ``SLOW_PING_BACKOFF_MS``;
#: the health loop still does, every second.
SLOW_PING_SECONDS = 0.5
SLOW_PING_BACKOFF_MS = 1000
#: Threads of the health pings at least (one ping per shard at a time: ``revive``), made as
#: pings need them.
PING_THREADS = 4


class QueuedCallRefused(ShardConnectionError):
    """A store call refused at its turn for a thread: the shard failed while it waited
    (``ShardedBackend.call_store``). It never reached the store."""

    def __init__(self, shard: str) -> None:
        super().__init__(shard, "it stopped answering while this call waited for a store thread")


def _watched(shard: Shard, fn: Callable[..., T], /, *args: object) -> T:
    """``fn(*args)`` on a store thread, noting on the shard whether it reached the store."""
    try:
        result = fn(*args)
    except ShardConnectionError as exc:
        if exc.contention:  # the store answered: other transactions held the rows
            shard.failing = False
            raise
        shard.failed_calls += 1  # (threads may race here: a count missed still leaves it changed)
        shard.failing = True
        raise
    except Exception:  # the store answered, with an error
        shard.failing = False
        raise
    shard.failing = False
    return result


#: Claim descriptors must fit the original MySQL column (VARCHAR(200)); the caller's source
#: is cut to this many characters in claims and in the checkpoint guard alike.
MAX_SOURCE_IN_CLAIM = 120
FILTERED_CALLS = 2
"""Store calls with a body filter (count, scan, delete with ``bodyRegexToMatch``) that run at
once, over all requests (at most half the store threads): each may hold a store thread for
BODY_FILTER_TIME_BUDGET_SECONDS, so without a bound a few filters over a big queue would take every
thread of the pool and stall every client. Others wait for a turn within their request's budget."""


class DequeuedJob(NamedTuple):
    """A job the dequeue broker hands out, with its descriptor (a NamedTuple: one per job, made
    fast). A direct dequeue makes none: it answers ``ReadyBatch``es."""

    descriptor: str
    job: ClaimedJob


@dataclass(frozen=True, slots=True)
class ReadyBatch(Generic[J]):
    """Jobs one store call of the dequeue walk returned, at ``now_ms``, from one place: a
    ``ClaimedJobs``, for a dequeue and for a broker's refill alike."""

    shard: str
    priority: int
    now_ms: int
    jobs: J


@dataclass(frozen=True, slots=True)
class ReserveAsk:
    """What the dequeue broker asks an enqueue through its server to reserve right behind it
    (``ShardedBackend.enqueue_jobs(reserve=...)``): up to ``limit`` jobs, under ``reservation``
    for ``hold_ms``, while their bodies hold fewer than ``max_bytes`` bytes (``within_bytes``);
    ``taken`` gets them."""

    limit: int
    reservation: str
    hold_ms: int
    taken: Callable[[ReadyBatch[ClaimedJobs]], None]
    #: Called with True just before the reserve goes out with an enqueue, False once answered.
    out: Callable[[bool], None]
    max_bytes: int = DEQUEUE_BYTES


def claim_source(source: str) -> str:
    return source[:MAX_SOURCE_IN_CLAIM]


#: Most jobs one ``ShardStore.cancel_jobs`` call is given.
CANCEL_CHUNK = 1_000


class QueueAnswers:
    """What the shards asked about one queue said, for the reads of that queue.

    The original created a queue on every shard, but shards added later, restored from a
    backup, or written by several deployments may hold a queue on some shards only. A shard
    without the queue holds none of its jobs: its calls answer ``empty``. The queue is missing
    (``QueueNotFoundError``) only when every shard asked said so; a shard that could not answer
    (a connection failure) may hold it.
    """

    __slots__ = ("held", "lacking", "queue")

    def __init__(self, queue: str) -> None:
        self.queue = queue
        #: Shards that said they do not have the queue.
        self.lacking: set[str] = set()
        #: Some shard had the queue, or could not say.
        self.held = False

    async def ask(self, shard: Shard, call: Awaitable[T], empty: T) -> T:
        """Await one store call on ``shard`` about the queue; ``empty`` if the shard lacks it."""
        try:
            result = await call
        except QueueNotFoundError:
            self.lacking.add(shard.name)
            return empty
        except (ShardConnectionError, StoreMemoryFullError):  # it may hold the queue
            self.held = True
            raise
        self.held = True
        return result

    def check(self) -> None:
        """Raise ``QueueNotFoundError`` when the shards asked all said they lack the queue."""
        if self.lacking and not self.held:
            raise QueueNotFoundError(self.queue)


class ShardedBackend:
    """The contract's operations over a ``ShardMap`` of stores."""

    def __init__(
        self,
        shards: ShardMap,
        *,
        num_priorities: int,
        parallelism: int = 16,
        count_limit: int | None = None,
        clock: Clock | None = None,
        count: Callable[[str, int], None] | None = None,
        empty_recheck_ms: int = EMPTY_RECHECK_MS,
        memory_high_water: float | None = None,
        body_filter_budget_seconds: float = DEFAULT_BUDGET_SECONDS,
    ) -> None:
        #: New jobs go to shards whose store reports memory use below this fraction of its limit
        #: (``pressure.py``); None: memory reports do not steer enqueues.
        self.memory_high_water = memory_high_water
        self._shards = shards
        self._rules: dict[str, QueueRules] = {}
        #: Queues known to hold ordered groups (this server enqueued grouped jobs there, or the
        #: monitor counted groups there: ``note_grouped``): an ack may promote a waiting job.
        self._grouped: set[str] = set()
        self.num_priorities = num_priorities
        self.count_limit = count_limit
        self.clock: Clock = clock or SystemClock()
        self._executor = ThreadPoolExecutor(max_workers=parallelism, thread_name_prefix="pinlater-store")
        #: The most store threads one shard's calls hold at once while there are several shards:
        #: three quarters of them (``_offload_on``), so that a shard that answers, but slowly (a
        #: MySQL under load: seconds a statement), leaves the others a quarter of the threads,
        #: where its calls piled up on every thread and every shard's calls waited behind them.
        self._shard_threads = max(1, parallelism - parallelism // 4)
        self._shard_offloads: dict[str, Offload] = {}
        #: The health pings' own threads (``_ping``): a ping never waits behind the store calls
        #: queued for a store that stopped answering, which every call finding no healthy shard
        #: would wait on in turn.
        self._ping_executor = ThreadPoolExecutor(
            max_workers=max(PING_THREADS, parallelism), thread_name_prefix="pinlater-ping"
        )
        #: BODY_FILTER_TIME_BUDGET_SECONDS: one request's time for all its body filtering.
        self.body_filter_budget_seconds = body_filter_budget_seconds
        self._filter_slots = asyncio.Semaphore(max(1, min(FILTERED_CALLS, parallelism // 2)))
        self._claim_prefix = f"{socket.gethostname()[:40]}:{os.getpid()}"
        self._claim_seq = itertools.count(1)
        self._count = count or (lambda name, by: None)
        self.empty_recheck_ms = empty_recheck_ms
        # (shard, queue, priority) -> until when a dequeue there is known to find nothing
        self._empty_until: dict[Place, int] = {}
        # -> how many looks in a row found nothing there (the backoff's exponent)
        self._empty_streak: dict[Place, int] = {}
        # -> when jobs this server wrote there become ready (a min-heap of ms)
        self._future_ready: dict[Place, list[int]] = {}
        # -> the dequeue store call in flight there: concurrent dequeues wait for its answer
        self._in_flight: dict[Place, asyncio.Future[None]] = {}
        # shard name -> the ping in flight that asks whether an unhealthy shard is back
        self._pings: dict[str, asyncio.Future[bool]] = {}
        # -> until when (ms) a shard whose ping failed slowly is not pinged again
        self._ping_backoff_until: dict[str, int] = {}
        self._background: set[asyncio.Future[object]] = set()
        # (shard, queue): the last dequeue look found no such queue there, while another shard
        # had it; its places are remembered as empty, and a walk that skips them knows why
        self._lacking: set[tuple[str, str]] = set()
        self.max_empty_recheck_ms = max(empty_recheck_ms, MAX_EMPTY_RECHECK_MS)
        self.signals = QueueSignals()
        # shard -> its store's hot path on this backend's pool (gone with the shard after a reload)
        self._hot_paths: weakref.WeakKeyDictionary[Shard, HotPath] = weakref.WeakKeyDictionary()
        # the same for the shards of the current map, looked up without making a weakref
        self._current_hot_paths: dict[Shard, HotPath] = {}

    # -- plumbing ---------------------------------------------------------------------------

    @property
    def shards(self) -> ShardMap:
        return self._shards

    def replace_shards(self, shards: ShardMap) -> None:
        """Swap the shard map (config reload). Requests in flight keep the map they started with.
        The stores get their shares of the caps anew (they depend on the shard set), and the
        capped queues lose their empty hints: a larger share may hand out what a store held back."""
        if self._rules:
            self._hand_rules(shards)
        self._shards = shards
        self._current_hot_paths = {s: hot for s, hot in self._current_hot_paths.items() if shards.get(s.name) is s}
        for queue, rules in self._rules.items():
            if rules.max_in_progress is not None:
                for shard in shards:
                    self.mark_ready(shard.name, queue, range(1, self.num_priorities + 1))

    @property
    def queue_rules(self) -> Mapping[str, QueueRules]:
        """The queue config's rules (``queue_rules.py``), ``max_in_progress`` for the whole queue."""
        return self._rules

    def set_queue_rules(self, rules: Mapping[str, QueueRules]) -> None:
        """Take the queue config's rules and hand every store its own (``ShardStore.set_queue_rules``):
        the same, but with its share of each ``max_in_progress`` (``cap_share``, over the shards
        in name order, dequeue-only ones included, since they hand out jobs too). The queues
        whose rules changed lose their empty hints: what a store held back may be handed out now."""
        changed = {q for q in rules.keys() | self._rules.keys() if rules.get(q) != self._rules.get(q)}
        self._rules = dict(rules)
        self._hand_rules(self._shards)
        for queue in changed:  # a raised or removed cap: places its stores held back may have jobs
            for shard in self._shards:
                self.mark_ready(shard.name, queue, range(1, self.num_priorities + 1))

    def _hand_rules(self, shards: ShardMap) -> None:
        names = sorted(s.name for s in shards)
        for shard in shards:
            index = names.index(shard.name)
            shard.store.set_queue_rules(
                {
                    queue: rules._replace(max_in_progress=cap_share(rules.max_in_progress, index, len(names)))
                    for queue, rules in self._rules.items()
                }
            )

    def note_grouped(self, queues: Iterable[str]) -> None:
        """These queues hold ordered groups (the monitor counted them), so acks there clear the
        empty hints as for queues this server enqueued grouped jobs in: a job another server
        enqueued and this server's ack promoted, or the reverse, is looked for at once."""
        self._grouped.update(queues)

    def hot_path(self, shard: Shard) -> HotPath:
        """The shard store's hot operations as coroutines (``ShardStore.hot_path``, made once
        per shard); a connection failure of one must mark the shard (``on_shard`` does; the
        dequeue walk, the enqueue and ``_PendingAcks`` do it themselves)."""
        hot = self._current_hot_paths.get(shard)
        if hot is not None:
            return hot
        hot = self._hot_paths.get(shard)
        if hot is None:
            hot = self._hot_paths[shard] = shard.store.hot_path(self._offload_on(shard))
        if self._shards.get(shard.name) is shard:  # not one a reload has replaced since
            self._current_hot_paths[shard] = hot
        return hot

    def _offload(self, fn: Callable[..., T], /, *args: object) -> Awaitable[T]:
        """Run a blocking store call on the thread pool."""
        return asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    def _offload_on(self, shard: Shard) -> Offload:
        """``_offload`` for the calls of ``shard`` (the ``base.Offload`` its store is handed): while
        the backend has more than one shard, at most ``_shard_threads`` of them at once."""
        made = self._shard_offloads.get(shard.name)
        if made is not None:
            return made
        # (one semaphore per event loop: a backend may outlive its loop, as in tests that run one
        # loop per step, and a semaphore waited on is bound to its loop)
        turns: list[tuple[asyncio.AbstractEventLoop, asyncio.Semaphore]] = []

        async def offload(fn: Callable[..., T], /, *args: object) -> T:
            if len(self._shards) < 2:
                return await self._offload(fn, *args)
            loop = asyncio.get_running_loop()
            if not turns or turns[0][0] is not loop:
                turns[:] = [(loop, asyncio.Semaphore(self._shard_threads))]
            async with turns[0][1]:
                return await self._offload(fn, *args)

        self._shard_offloads[shard.name] = offload
        return offload

    async def on_shard(self, shard: Shard, call: Awaitable[T]) -> T:
        """Await one store call on ``shard``; a connection failure marks the shard (not a call
        refused at its turn, ``QueuedCallRefused``: the failure it follows marked it)."""
        try:
            return await call
        except QueuedCallRefused:
            raise
        except ShardConnectionError as exc:
            shard.failed(exc)
            raise

    async def call_store(self, shard: Shard, fn: Callable[..., T], *args: object) -> T:
        """Run a blocking method of ``shard.store`` on the thread pool (the operations outside
        the hot path). A connection failure marks the shard. A call queued for a thread before a
        call to the shard failed, and still waiting when that happened, is refused at its turn
        while the shard's latest call (or ping) failed, instead of waiting out the store's socket
        timeout: callers that gave up leave a queue behind them, which a store that stopped
        answering drained at one timeout per call and thread, holding every later call behind
        it. What the threads saw is kept on the shard by the threads themselves, so the next
        call a thread takes after a failure already knows."""
        queued_after = shard.failed_calls

        def turn() -> T:
            if shard.failing and shard.failed_calls != queued_after:
                raise QueuedCallRefused(shard.name)
            return _watched(shard, fn, *args)

        return await self.on_shard(shard, self._offload_on(shard)(turn))

    async def ping(self, shard: Shard) -> None:
        """Ask the shard's store whether it answers, on the pings' own threads (never behind
        queued store calls); a failure marks the shard."""
        loop = asyncio.get_running_loop()
        await self.on_shard(shard, loop.run_in_executor(self._ping_executor, _watched, shard, shard.store.ping))

    def _filter_deadline(self, body_regex: str | None) -> float | None:
        """The request's deadline for its body filtering (``JobFilter.deadline``), from now."""
        return None if body_regex is None else time.monotonic() + self.body_filter_budget_seconds

    async def call_filtered(
        self, shard: Shard, fn: Callable[[str, JobFilter, T2], T], queue: str, where: JobFilter, limit: T2
    ) -> T:
        """``call_store`` for a count, scan or delete: one with a body filter first waits for one
        of the ``FILTERED_CALLS`` turns, within its request's deadline (past it:
        ``BodyFilterBudgetExceeded``), so ordinary calls always find a store thread."""
        if where.body_regex is None:
            return await self.call_store(shard, fn, queue, where, limit)
        deadline = where.deadline if where.deadline is not None else time.monotonic() + self.body_filter_budget_seconds
        slots = self._filter_slots
        if not slots.locked():  # a turn free: taken at once, whatever is left of the budget
            await slots.acquire()
        else:
            try:
                await asyncio.wait_for(slots.acquire(), max(deadline - time.monotonic(), 0.0))
            except TimeoutError:
                raise BodyFilterBusy(where.body_regex, self.body_filter_budget_seconds, 0) from None
        # The turn is given back once the store call is done, its thread too: a request cancelled
        # meanwhile (a server stop) leaves the call running on its thread, which a turn given
        # back at the cancel would have let more filters join (past FILTERED_CALLS, ordinary
        # calls found no thread).
        call = asyncio.ensure_future(self.call_store(shard, fn, queue, where, limit))
        call.add_done_callback(self._filter_call_done)
        return await asyncio.shield(call)

    def _filter_call_done(self, call: asyncio.Future[Any]) -> None:
        self._filter_slots.release()
        if not call.cancelled():
            call.exception()  # (retrieved: a call its request left logs nothing)

    async def revive(self, shard: Shard, *, force: bool = False) -> bool:
        """Ask an unhealthy shard whether it answers again and mark it healthy if so; True if it
        is healthy. One ping per shard at a time: concurrent callers share its answer. Without
        ``force`` (the health loop's), a shard whose last ping failed slowly is not asked again
        for ``SLOW_PING_BACKOFF_MS``."""
        if shard.healthy:
            return True
        ping = self._pings.get(shard.name)
        if ping is None and not force and self._ping_backoff_until.get(shard.name, 0) > self.clock.now_ms():
            return False
        if ping is None:
            ping = self._pings[shard.name] = asyncio.ensure_future(self._ping(shard))
            ping.add_done_callback(lambda _: self._pings.pop(shard.name, None))
        return await asyncio.shield(ping)

    async def _ping(self, shard: Shard) -> bool:
        started = time.monotonic()
        try:
            await self.ping(shard)
        except Exception as exc:
            log.debug("shard %s still unhealthy: %s", shard.name, exc)
            if time.monotonic() - started > SLOW_PING_SECONDS:
                # a store that does not answer at all (not one that refuses at once): calls that
                # find no healthy shard fail at once for a while instead of each waiting so long
                self._ping_backoff_until[shard.name] = self.clock.now_ms() + SLOW_PING_BACKOFF_MS
            return False
        self._ping_backoff_until.pop(shard.name, None)
        shard.mark_healthy()
        return True

    async def _usable(self, pick: Callable[[], list[Shard]]) -> list[Shard]:
        """``pick()``'s shards. When it finds none (every shard it would pick is unhealthy), the
        unhealthy shards are pinged first, so a store that has just come back serves this call
        rather than wait for the health loop's next round (a restarted store costs no failed
        call once it answers)."""
        shards = pick()
        if not shards:
            down = [s for s in self._shards if not s.healthy]
            if down and any(await asyncio.gather(*(self.revive(s) for s in down))):
                shards = pick()
        return shards

    def _shard(self, name: str) -> Shard | None:
        return self._shards.get(name)

    async def aclose(self) -> None:
        """Finish the background work, close what the stores opened on this event loop; ``close``
        does the rest."""
        await self.background_done()
        await asyncio.gather(*(shard.store.aclose() for shard in self._shards))

    async def background_done(self) -> None:
        """Wait for the work started behind replies (``_spawn``) so far."""
        if self._background:
            await asyncio.wait(list(self._background))

    def close(self) -> None:
        for shard in self._shards:  # (the shutdown below waits for every store call in progress)
            shard.store.interrupt()
        self._executor.shutdown(wait=True)
        self._ping_executor.shutdown(wait=True)
        for shard in self._shards:
            shard.store.close()

    def mark_ready(self, shard: str, queue: str, priorities: Iterable[int], jobs: int | None = None) -> None:
        """Jobs (``jobs`` of them at most, or an unknown number) became ready in these places:
        forget they were empty, wake long polls (as many as take that many jobs)."""
        woke = False
        if self._lacking:
            self._lacking.discard((shard, queue))
        for priority in priorities:
            self._empty_until.pop((shard, queue, priority), None)
            self._empty_streak.pop((shard, queue, priority), None)
            woke = True
        if woke:
            self.signals.notify(queue, jobs)

    def _ready_at(self, shard: str, queue: str, priority: int, ready_at_ms: int, now: int) -> None:
        """Jobs this server wrote become ready at ``ready_at_ms``: now, or later."""
        if ready_at_ms <= now:
            self.mark_ready(shard, queue, (priority,))
        else:
            self._ready_later(shard, queue, priority, ready_at_ms)

    def _ready_later(self, shard: str, queue: str, priority: int, ready_at_ms: int) -> None:
        """A job this server wrote becomes ready at ``ready_at_ms``: look there by then. A shard
        that is not in the map (a descriptor's made-up name: an ack's retry, a checkpoint's move)
        gets no hint: the walk never looks there, and each name's hint was kept for good."""
        if self._shard(shard) is None or not 1 <= priority <= self.num_priorities:
            return  # (nor a priority the walk never visits: a descriptor's p4 to p127 kept one each)
        place = (shard, queue, priority)
        times = self._future_ready.setdefault(place, [])
        if len(times) < MAX_FUTURE_READY_TIMES:
            heapq.heappush(times, ready_at_ms)
        if self._empty_until.get(place, 0) > ready_at_ms:
            self._empty_until[place] = ready_at_ms

    def _found_empty(self, place: Place, now: int, found_some: bool) -> None:
        """A look at ``place`` found fewer jobs than it asked for (``found_some``: but not none)."""
        if found_some:  # drained, not idle: back to the first wait
            self._empty_streak.pop(place, None)
            streak = 0
        else:
            streak = self._empty_streak[place] = min(self._empty_streak.get(place, -1) + 1, 16)
        until = now + min(self.empty_recheck_ms << streak, self.max_empty_recheck_ms)
        times = self._future_ready.get(place)
        if times is not None:
            while times and times[0] <= now:  # ready by now: this look saw them
                heapq.heappop(times)
            if times:
                until = min(until, times[0])
            else:
                del self._future_ready[place]
        self._empty_until[place] = until

    def forget_empty(self, shard: str | None = None, queue: str | None = None) -> None:
        """Drop what is known about empty places (all, or one shard's, or one queue's), e.g.
        after the monitor put jobs back to PENDING."""
        keys = [k for k in self._empty_until if (shard is None or k[0] == shard) and (queue is None or k[1] == queue)]
        for key in keys:
            del self._empty_until[key]
            self._empty_streak.pop(key, None)
        for queue in {k[1] for k in keys}:
            self.signals.notify(queue)

    def new_claim(self, source: str) -> str:
        """A claim descriptor unique to this call: the caller's source, then this server's id."""
        return f"{source[:MAX_SOURCE_IN_CLAIM]}|{self._claim_prefix}:{next(self._claim_seq)}"  # (``claim_source``)

    # -- queues -----------------------------------------------------------------------------

    async def create_queue(self, queue: str, only: Collection[str] | None = None) -> None:
        """Create the queue on every shard, or on the shards named in ``only``."""
        shards = [s for s in self._shards.all() if only is None or s.name in only]
        self._forget_lacking(queue)
        await asyncio.gather(*(self.call_store(s, s.store.create_queue, queue, self.num_priorities) for s in shards))

    async def queue_names_by_shard(self) -> dict[str, set[str] | None]:
        """Each shard's queue names, None for a shard that could not list them."""
        shards = self._shards.all()
        calls = (self.call_store(s, s.store.get_queue_names) for s in shards)
        listed = await asyncio.gather(*calls, return_exceptions=True)
        return {
            s.name: (None if isinstance(names, BaseException) else names)
            for s, names in zip(shards, listed, strict=True)
        }

    async def delete_queue(self, queue: str) -> None:
        shards = self._shards.all()
        self._forget_lacking(queue)
        await asyncio.gather(*(self.call_store(s, s.store.delete_queue, queue) for s in shards))
        # Its places known empty were answered empty from the hint, with no store call, for up
        # to MAX_EMPTY_RECHECK_MS after it was gone: a dequeue now asks, and is QUEUE_NOT_FOUND.
        self.forget_empty(queue=queue)
        for place in [place for place in self._future_ready if place[1] == queue]:
            del self._future_ready[place]
        self.signals.notify(queue)  # (its long polls ask again, and end)

    def _forget_lacking(self, queue: str) -> None:
        self._lacking = {key for key in self._lacking if key[1] != queue}

    async def get_queue_names(self) -> set[str]:
        shards = [s for s in self._shards if s.healthy] or self._shards.all()
        results = await asyncio.gather(*(self.call_store(s, s.store.get_queue_names) for s in shards))
        names: set[str] = set()
        for found in results:
            names |= found
        return names

    # -- enqueue ----------------------------------------------------------------------------

    async def enqueue_jobs(
        self, queue: str, jobs: NewJobBatch, now_ms: int | None = None, *, reserve: ReserveAsk | None = None
    ) -> tuple[str, LocalIds]:
        """Insert the batch on one random healthy shard below the memory high-water mark, trying
        the next on connection failure or when a store refuses it for memory (``pressure.py``).
        When every shard taking new jobs is full, ENQUEUE_REJECTED says which and how full.
        Returns the shard written and the jobs' local ids there, in job order (the descriptors
        are ``encode_descriptors(queue, shard, jobs.priorities in order, ids)``).

        ``now_ms``: the time the batch's run afters were defaulted to (the handler's), given to
        the store as its now, so that a job without a run after has run after == now there: the
        compact Redis layout keeps those in its ready lists (``lua_compact/lib/ready.lua``), not
        in a sorted set. None: the clock's time at the call.

        ``reserve``: the broker's refill, riding on the enqueue where the store can run it right
        behind (``HotPath.enqueue_and_reserve_jobs``): at the batch's best ready priority on the
        shard written, when every better place is known to be empty (so no better job waits
        behind the ones reserved). What it got goes to ``reserve.taken``; fewer than asked means
        it took every ready job there, so the place is noted empty (the next look can wait).

        A batch of more than ``STORE_CALL_JOBS`` jobs goes as a call per part, in turn, with no
        reserve (``_enqueue_in_parts``)."""
        mark = self.memory_high_water
        candidates = self._shards.enqueue_candidates(mark) or await self._usable(
            lambda: self._shards.enqueue_candidates(mark)
        )
        if not candidates:
            full = self._shards.memory_full(mark)
            if full:
                reason = memory_full_reason(((s.name, use) for s, use in full), mark)
                raise PinLaterError(ErrorCode.ENQUEUE_REJECTED, reason)
            raise PinLaterError(ErrorCode.NO_HEALTHY_SHARDS, "no healthy shard accepts new jobs")
        last_error: ShardConnectionError | None = None
        refused: list[tuple[str, MemoryUse | None]] = []
        lacking: list[Shard] = []  # shards without the queue (nothing was written there)
        for shard in candidates:
            now = self.clock.now_ms() if now_ms is None else now_ms
            hot = self._current_hot_paths.get(shard) or self.hot_path(shard)  # (``hot_path``'s first look, inline)
            at = None
            parts = len(jobs) > STORE_CALL_JOBS
            if reserve is not None and hot.reserves_behind_enqueue and not parts:
                at = self._reserve_priority(queue, jobs, now)
            got: ClaimedJobs | None = None
            try:
                if parts:
                    ids = await self._enqueue_in_parts(shard, hot, queue, jobs, now)
                elif at is None or reserve is None:
                    ids = await hot.enqueue_jobs(queue, jobs, now)
                else:
                    both = hot.enqueue_and_reserve_jobs(
                        queue, jobs, now, at, reserve.limit, reserve.reservation, reserve.hold_ms, reserve.max_bytes
                    )
                    reserve.out(True)
                    try:
                        ids, got = await both
                    finally:
                        reserve.out(False)
            except ShardConnectionError as exc:  # (what ``on_shard`` does, without its coroutine)
                shard.failed(exc)
                if exc.maybe_applied:  # the jobs may be in that shard: another would duplicate them
                    detail = f"{exc.detail} (the jobs may have been stored there: not sent to another shard)"
                    raise ShardConnectionError(exc.shard, detail, maybe_applied=True) from exc
                last_error = exc
                continue
            except StoreMemoryFullError:
                refused.append((shard.name, await self._read_memory(shard)))
                continue
            except QueueNotFoundError:
                lacking.append(shard)
                continue
            if lacking:  # the queue exists: give it to the shards that lack it, behind the reply
                self._spawn(create_on(self, queue, lacking))
            ready = jobs.ready_priorities(now)
            if got is not None and reserve is not None and at is not None:
                reserve.taken(ReadyBatch(shard.name, at, now, got))
                if len(got) < reserve.limit and got.body_bytes < reserve.max_bytes:  # it took every ready job there
                    ready = [priority for priority in ready if priority != at]
                    self._found_empty((shard.name, queue, at), now, len(got) > 0)
            self._note_enqueued(shard, queue, jobs, now, ready)
            return shard.name, ids
        if refused:
            names = {name for name, _ in refused}
            refused += [(s.name, use) for s, use in self._shards.memory_full(mark) if s.name not in names]
            refused.sort(key=lambda pair: pair[0])
            raise PinLaterError(ErrorCode.ENQUEUE_REJECTED, memory_full_reason(refused, mark))
        if last_error is not None:
            raise last_error
        raise QueueNotFoundError(queue)

    async def _enqueue_in_parts(self, shard: Shard, hot: HotPath, queue: str, jobs: NewJobBatch, now: int) -> LocalIds:
        """``hot.enqueue_jobs`` of a batch of more than ``STORE_CALL_JOBS`` jobs: a call per part
        of that many, in turn, so that other requests' calls run between two. The first part's
        errors are the call's, as for a smaller batch. A later part's failure leaves the parts
        before it stored: those are noted as ``enqueue_jobs`` notes a batch it stored (ready,
        so that no empty-place hint hides them), and the request fails with a message that says
        how many were stored; it is not sent to another shard, where they would be stored twice
        (a connection failure marks the shard, as any does)."""
        parts: list[LocalIds] = []
        stored: list[NewJobBatch] = []
        for part in jobs.chunks(STORE_CALL_JOBS):
            try:
                parts.append(await hot.enqueue_jobs(queue, part, now))
            except BaseException as exc:  # (cancelled too: what was stored is noted)
                for batch in stored:
                    self._note_enqueued(shard, queue, batch, now)
                if not parts or not isinstance(exc, Exception):
                    raise
                raise _part_failed(shard, sum(len(b) for b in stored), len(jobs), exc) from exc
            stored.append(part)
        return LocalIds.concat(parts)

    def _note_enqueued(
        self, shard: Shard, queue: str, jobs: NewJobBatch, now: int, ready: list[int] | None = None
    ) -> None:
        """What the server notes of a batch stored on ``shard``: the shard's memory use, and the
        batch's priorities as ready now (``ready``, when not all of its own) or later."""
        if (probe := memory_probe(shard.store)) is not None:
            probe.note_enqueued(len(jobs), jobs.body_bytes)
        self.mark_ready(shard.name, queue, jobs.ready_priorities(now) if ready is None else ready, len(jobs))
        for priority, run_after_ms in jobs.later(now):
            self._ready_later(shard.name, queue, priority, run_after_ms)

    async def enqueue_keyed_jobs(
        self,
        queue: str,
        jobs: Sequence[NewJob],
        keys: Sequence[tuple[str | None, int, str | None, int | None]],
        now_ms: int,
    ) -> list[tuple[str, bool]]:
        """Enqueue jobs of which some carry a pinlater extension (``keys[i]``: job ``i``'s dedup
        key or None, its window, its group key or None, and its expiry or None); answer
        ``(descriptor, deduplicated)`` per job, in order.

        Jobs with an expiry but no key go to one shard that takes new jobs (the first of
        ``enqueue_jobs``' candidates, without its failover), with the keyed jobs of that shard if
        any, through ``enqueue_keyed_jobs`` (which keeps the expiry).

        Each dedup key and each group has one shard (``key_shard``, over the shards that take new
        jobs, healthy or not); a job with both goes to its group's shard, where its dedup key is
        checked (so a dedup key is unique per group there). That shard's store makes the check
        and the insert one atomic step: two servers enqueueing one key make one job, and a
        group's jobs keep their order. A dedup key repeated in the request is answered with its
        first job's place. A group whose shard refuses groups (``ShardStore.groups_refused``)
        refuses the request before anything is written. The jobs without a key are enqueued as
        ``enqueue_jobs`` does, after the keyed ones succeeded, so a request that fails part-way
        leaves no keyless job that a retry would duplicate (its dedup-keyed jobs are deduplicated
        by the retry). A key's shard that is down fails the request: another shard could not see
        the key's holder, or keep the group's order.

        The shard set decides where a key is checked, so the check is atomic only among servers
        that agree on it. A reload that adds a shard, removes one or makes one dequeue-only (or
        takes one back) moves some keys to another shard (rendezvous hashing moves only those),
        and a moved key's holder, still on its old shard, is not seen there: an enqueue of it
        may make a second job until that holder is no longer held, and a moved group starts a
        second line beside its jobs on the old shard. Servers whose shard configs differ (during
        a rolling reload) can do the same."""
        targets = [s for s in self._shards if not s.dequeue_only]
        if not targets:
            raise PinLaterError(ErrorCode.NO_HEALTHY_SHARDS, "no shard accepts new jobs")
        placed: list[tuple[str, bool] | None] = [None] * len(jobs)
        keyed, plain, repeats = sort_keyed(keys)
        by_shard: dict[str, list[int]] = defaultdict(list)
        batch_of: dict[int, KeyedJob] = {}
        only = targets[0] if len(targets) == 1 else None
        loose: Shard | None = None  # where jobs with only an expiry go
        for i in keyed:
            key, window_ms, group, expire_at = keys[i]
            batch_of[i] = KeyedJob(jobs[i], key, window_ms, group, expire_at)
            if only is not None:  # one shard takes new jobs: every key is its
                shard = only
            elif key is None and group is None:
                if loose is None:
                    loose = await self._loose_shard()
                shard = loose
            elif group is None:
                assert key is not None
                shard = key_shard(queue, key, targets)
            else:
                shard = key_shard(queue, group, targets, space="group")
            if group is not None and (reason := shard.store.groups_refused) is not None:
                refusal = f"jobs[{i}]: groupKey (ordered groups) {reason}"
                raise PinLaterError(ErrorCode.ENQUEUE_REJECTED, refusal)
            by_shard[shard.name].append(i)

        async def on(shard: Shard, indexes: list[int]) -> None:
            batch = [batch_of[i] for i in indexes]
            answers = await self._enqueue_keyed_on(shard, queue, batch, now_ms)
            descriptors = encode_descriptors(
                queue, shard.name, [a.priority for a in answers], [a.local_id for a in answers]
            )
            for i, descriptor, answer in zip(indexes, descriptors, answers, strict=True):
                placed[i] = (descriptor, answer.deduplicated)

        shards = {s.name: s for s in targets}
        await _gather_raising_first([on(shards[name], indexes) for name, indexes in by_shard.items()])
        if plain:
            shard_name, ids = await self.enqueue_jobs(queue, NewJobBatch([jobs[i] for i in plain]), now_ms)
            priorities = [jobs[i].priority for i in plain]
            descriptors = encode_descriptors(queue, shard_name, priorities, ids.to_list())
            for i, descriptor in zip(plain, descriptors, strict=True):
                placed[i] = (descriptor, False)
        for i, j in repeats:
            held = placed[j]
            assert held is not None
            placed[i] = (held[0], True)
        return [p for p in placed if p is not None]

    async def _loose_shard(self) -> Shard:
        """The shard for jobs that need ``enqueue_keyed_jobs`` but no key's shard: the first of
        ``enqueue_jobs``' candidates (random, healthy, below the memory high-water mark)."""
        mark = self.memory_high_water
        candidates = await self._usable(lambda: self._shards.enqueue_candidates(mark))
        if candidates:
            return candidates[0]
        full = self._shards.memory_full(mark)
        if full:
            raise PinLaterError(ErrorCode.ENQUEUE_REJECTED, memory_full_reason(((s.name, u) for s, u in full), mark))
        raise PinLaterError(ErrorCode.NO_HEALTHY_SHARDS, "no healthy shard accepts new jobs")

    async def enqueue_keyed_batch(
        self, queue: str, jobs: KeyedJobBatch, now_ms: int
    ) -> tuple[str, KeyedPlacement] | SplitPlacement | None:
        """``enqueue_keyed_jobs`` of a whole request, with no Python value per job. When one
        shard takes new jobs (the embedded default, a single store), every job is that shard's,
        so the request goes to it in one store call (``HotPath.enqueue_keyed_batch``; the
        embedded store's Rust writer places it whole, keys repeated in it included): returns the
        shard and the placement. When several do, the extension spreads the request over its
        keys' shards as ``enqueue_keyed_jobs`` does (``KeyedJobBatch.split``, the same hash as
        ``key_shard``), each shard's part goes to it in one store call, all at once, and the
        jobs without any extension are enqueued once those succeeded (so a request that fails
        part-way leaves none that a retry would duplicate): returns every job's place
        (``SplitPlacement``). A group whose shard refuses groups refuses the request first,
        naming the job ``enqueue_keyed_jobs`` names (a shard for a job with only an expiry is
        sought after that, where that path may have failed on it first). None when no shard
        takes new jobs (``enqueue_keyed_jobs`` says so)."""
        targets = [s for s in self._shards if not s.dequeue_only]
        if not targets:
            return None
        if len(targets) == 1:
            shard = targets[0]
            grouped = jobs.first_grouped
            if grouped is not None and (reason := shard.store.groups_refused) is not None:
                raise PinLaterError(ErrorCode.ENQUEUE_REJECTED, f"jobs[{grouped}]: groupKey (ordered groups) {reason}")
            return shard.name, await self._place_keyed(shard, queue, jobs, now_ms)
        names = [s.name for s in targets]
        refusing = [i for i, s in enumerate(targets) if s.store.groups_refused is not None]
        if refusing and jobs.first_grouped is not None:
            # before anything is written (or a loose shard is sought), naming the job that
            # enqueue_keyed_jobs names
            hit = jobs.first_grouped_on(queue, names, refusing)
            if hit is not None:
                index, shard_index = hit
                reason = targets[shard_index].store.groups_refused
                raise PinLaterError(ErrorCode.ENQUEUE_REJECTED, f"jobs[{index}]: groupKey (ordered groups) {reason}")
        loose: int | None = None
        if jobs.needs_loose:
            loose_shard = await self._loose_shard()
            if loose_shard not in targets:  # (the candidates are shards that take new jobs)
                return None
            loose = targets.index(loose_shard)
        split, parts, plain = jobs.split(queue, names, loose)
        placements = await _gather_raising_first(
            [self._place_keyed(targets[index], queue, batch, now_ms) for index, batch in parts]
        )
        plain_placed = None
        if plain is not None:
            plain_placed = await self.enqueue_jobs(queue, plain, now_ms)
        return split.merge(placements, plain_placed)

    async def _place_keyed(self, shard: Shard, queue: str, jobs: KeyedJobBatch, now_ms: int) -> KeyedPlacement:
        """A keyed batch placed whole on ``shard`` (``_keyed_write``), with what the server
        notes of the jobs it wrote: the shard's memory use, and their priorities as ready now
        or later. A batch of more than ``STORE_CALL_JOBS`` jobs goes a part at a time, as
        ``_enqueue_in_parts`` sends one (each part noted as it is stored): a job whose dedup key
        an earlier job of the batch has is sent in none and answered with that job's place, and
        a group's jobs join it in request order (another request's may join between two
        parts)."""
        if len(jobs) > STORE_CALL_JOBS:
            placements: list[KeyedPlacement] = []
            stored = 0
            if len(jobs) < DETACH_JOBS:
                parts, repeats = jobs.chunks(STORE_CALL_JOBS)
            else:  # on a worker, the GIL released
                parts, repeats = await off_loop(jobs.chunks, STORE_CALL_JOBS)
            for part in parts:
                try:
                    placements.append(await self._place_keyed(shard, queue, part, now_ms))
                except Exception as exc:
                    if not placements:
                        raise
                    raise _part_failed(shard, stored, len(jobs), exc) from exc
                stored += len(part)
            return KeyedPlacement.concat(placements, repeats)
        hot = self.hot_path(shard)
        placement = await self._keyed_write(shard, queue, lambda: hot.enqueue_keyed_batch(queue, jobs, now_ms))
        if jobs.first_grouped is not None:  # written: the queue exists
            self._grouped.add(queue)
        written, body_bytes, keys, key_bytes = jobs.written(placement)
        if written:
            if (probe := memory_probe(shard.store)) is not None:
                probe.note_enqueued(written, body_bytes, keys, key_bytes)
            ready, later = jobs.written_ready(placement, now_ms)
            for priority, run_after_ms in later:
                self._ready_later(shard.name, queue, priority, run_after_ms)
            if ready:
                self.mark_ready(shard.name, queue, ready, written)
        return placement

    async def _keyed_write(self, shard: Shard, queue: str, write: Callable[[], Awaitable[T]]) -> T:
        """A keyed enqueue's store call on its key shard (``write()``, a coroutine each time):
        refused when the shard is down (a shard marked unhealthy is pinged first, as ``_usable``
        does, so one that is back serves at once and is marked healthy) or over the memory
        high-water mark; a queue the shard lacks while another has it is created there first (as
        ``enqueue_jobs`` does behind its reply), and the call made again."""
        if not await self.revive(shard):
            raise ShardConnectionError(shard.name, "down: the keys it holds cannot be checked elsewhere")
        mark = self.memory_high_water
        use = memory_use(shard)
        if use is not None and use.above(mark):
            raise PinLaterError(ErrorCode.ENQUEUE_REJECTED, memory_full_reason([(shard.name, use)], mark))
        try:
            try:
                return await self.on_shard(shard, write())
            except QueueNotFoundError:
                # Only a queue that another shard has: an enqueue never makes a queue.
                if queue not in await self.get_queue_names() or not await create_on(self, queue, [shard]):
                    raise
                return await self.on_shard(shard, write())
        except StoreMemoryFullError:
            reason = memory_full_reason([(shard.name, await self._read_memory(shard))], mark)
            raise PinLaterError(ErrorCode.ENQUEUE_REJECTED, reason) from None

    async def _enqueue_keyed_on(self, shard: Shard, queue: str, batch: list[KeyedJob], now: int) -> list[Enqueued]:
        """One key shard's part of ``enqueue_keyed_jobs`` (``_keyed_write``)."""
        hot = self.hot_path(shard)
        answers = await self._keyed_write(shard, queue, lambda: hot.enqueue_keyed_jobs(queue, batch, now))
        taken = [keyed for keyed, answer in zip(batch, answers, strict=True) if not answer.deduplicated]
        if any(keyed.group is not None for keyed in batch):  # written: the queue exists
            self._grouped.add(queue)
        if taken:
            if (probe := memory_probe(shard.store)) is not None:
                body_bytes = sum(len(keyed.job.body) for keyed in taken)
                keys = [k.key.encode() for k in taken if k.key is not None]
                probe.note_enqueued(len(taken), body_bytes, len(keys), sum(map(len, keys)))
            ready: set[int] = set()
            for keyed in taken:
                job = keyed.job
                if job.run_after_ms <= now:
                    ready.add(job.priority)
                else:
                    self._ready_later(shard.name, queue, job.priority, job.run_after_ms)
            if ready:
                self.mark_ready(shard.name, queue, ready, len(taken))
        return answers

    def _spawn(self, work: Awaitable[object]) -> None:
        """Run ``work`` in the background, held until done (its failures are its own to log)."""
        task = asyncio.ensure_future(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _read_memory(self, shard: Shard) -> MemoryUse | None:
        """Read a shard's memory now (after it refused a write for memory), so later enqueues
        pass it by until the background probe sees it below the mark; None if it cannot say."""
        probe = memory_probe(shard.store)
        if probe is None:
            return None
        try:
            return await asyncio.get_running_loop().run_in_executor(self._executor, probe.refresh)
        except PinLaterError as exc:
            log.debug("memory probe of shard %s failed: %s", shard.name, exc)
            return None

    # -- dequeue ----------------------------------------------------------------------------

    async def dequeue_jobs(
        self,
        queue: str,
        limit: int,
        source: str,
        *,
        dry_run: bool = False,
        coverage: float = 1.0,
        acks: Sequence[tuple[str, AckGroup]] = (),
        on_acked: Callable[[], None] | None = None,
        max_bytes: int = DEQUEUE_BYTES,
    ) -> list[ReadyBatch[ClaimedJobs]]:
        """Walk priorities from 1 down and shards in random order until ``limit`` jobs are found
        (``walk_ready``: a store call claims at most ``STORE_CALL_JOBS``, so a dry run, which asks
        each place once, shows at most that many of each), or bodies of ``max_bytes`` bytes (by
        less than one body more: ``walk_ready``), so that one dequeue's reply stays bounded.

        An unhealthy shard is skipped; a shard failing mid-walk is marked and skipped, so a
        dequeue returns what the healthy shards had. When no shard is healthy the call fails.
        The jobs stay in the stores' ``ClaimedJobs``, one batch per place, in walk order; a job's
        descriptor is ``encode_descriptor(queue, batch.shard, batch.priority, local_id)``.

        ``acks``: the dequeue's piggy-backed acks, successes only, as ``ack_jobs`` takes them
        (failures go through ``ack_jobs`` first: this very dequeue could claim a failed job
        again, so a repeat of the acks would fail it twice). They are applied before the walk's
        first store call: with it when that call is on their shard (``HotPath.ack_and_dequeue_jobs``,
        one hand-off instead of two), else alone just before it, or alone after a walk that made
        none. Their failure is the call's, and nothing is claimed after it. ``on_acked`` runs
        once they are applied.
        """
        claim = self.new_claim(source)
        if acks and (len(acks) != 1 or dry_run or limit <= 0 or len(acks[0][1]) > STORE_CALL_JOBS):
            if await self.ack_jobs(queue, acks, ()) and on_acked is not None:
                on_acked()
            acks = ()
        if not acks:
            return await self._dequeue_walk(queue, limit, claim, dry_run, coverage, None, max_bytes)
        pending = _PendingAcks(acks[0][0], acks[0][1], on_acked)
        if self._holds_back(queue):  # the acks may free room or move groups on, at any priority
            self.mark_ready(pending.shard, queue, range(1, self.num_priorities + 1))
        try:
            return await self._dequeue_walk(queue, limit, claim, False, coverage, pending, max_bytes)
        except _AckFailed as failed:
            raise failed.cause from None
        finally:
            if pending.how is None and await self.ack_jobs(queue, acks, ()):  # no store call, no claim
                pending.applied()
            elif pending.how == "carried" and self._holds_back(queue):  # (all ``_after_acks`` does here)
                self._after_acks(queue, acks, (), self.clock.now_ms())

    def _dequeue_walk(
        self,
        queue: str,
        limit: int,
        claim: str,
        dry_run: bool,
        coverage: float,
        pending: _PendingAcks | None,
        max_bytes: int,
    ) -> Awaitable[list[ReadyBatch[ClaimedJobs]]]:
        """``dequeue_jobs``'s walk (to await); ``pending``: acks to apply before its first store call.
        Each store call after the first claims under ``claim`` with ``.{n}`` added: the claim of a
        call is unique, as MySQL reads back the jobs it claimed by it (with one claim for every
        call of a large dequeue, each call read back all the calls' jobs before it: quadratic)."""
        calls = itertools.count()

        def fetch(shard: Shard, priority: int, want: int, now: int, bytes_left: int) -> Awaitable[ClaimedJobs]:
            n = next(calls)
            claim_n = f"{claim}.{n}" if n else claim
            hot = self._current_hot_paths.get(shard) or self.hot_path(shard)  # (``hot_path``'s first look, inline)
            if pending is not None and pending.how is None:
                if pending.shard == shard.name:
                    both = hot.ack_and_dequeue_jobs(queue, pending.acks, priority, want, claim_n, now, bytes_left)
                    return pending.carry(shard, both)
                alone = self.ack_jobs(queue, [(pending.shard, pending.acks)], ())
                return pending.before(
                    alone, lambda: hot.dequeue_jobs(queue, priority, want, claim_n, now, False, bytes_left)
                )
            return hot.dequeue_jobs(queue, priority, want, claim_n, now, dry_run, bytes_left)

        # A dry run asks the store every time: the known-empty hints say "nothing to claim",
        # and jobs held in a broker's buffer are PENDING and shown.
        return self.walk_ready(
            queue,
            limit,
            fetch,
            max_bytes=max_bytes,
            coverage=coverage,
            use_empty_hints=not dry_run,
            repeat=not dry_run,
        )

    async def walk_ready(
        self,
        queue: str,
        limit: int,
        fetch: Callable[[Shard, int, int, int, int], Awaitable[J]],
        *,
        max_bytes: int = DEQUEUE_BYTES,
        coverage: float = 1.0,
        use_empty_hints: bool = True,
        repeat: bool = True,
    ) -> list[ReadyBatch[J]]:
        """The dequeue walk, shared by dequeues and the broker's refills: priorities from 1
        down, shards in random order, ``fetch(shard, priority, want, now, max_bytes)`` at each
        place until ``limit`` jobs came back, or bodies of ``max_bytes`` bytes: each call is
        given what is left of that budget, and takes jobs while the bodies it took hold less
        (its first job always, ``within_bytes``), so the walk's bodies pass ``max_bytes`` by
        less than one body; a place whose call ended the budget is not taken for empty.
        ``fetch`` makes one store call on ``shard``, and a connection
        failure marks the shard, as ``on_shard`` would (so ``fetch`` does not). A call asks for
        at most ``STORE_CALL_JOBS``; one that got all it asked for is followed by another at the
        same place while the walk wants more (``repeat``; a dry run, whose calls take nothing,
        asks each place once), and so is one that stopped at a work budget (``WalkAnswer.cut``),
        up to ``MAX_CUT_REPEATS`` such calls a walk; a cut call's place is not remembered as
        empty. With
        ``use_empty_hints``, places known to be empty are skipped, a place that gave fewer than
        asked is remembered as empty for a while (see ``EMPTY_RECHECK_MS``), and concurrent walks
        do not look at one place at the same time.
        A shard without the queue is not asked again in this walk, and its places are remembered
        as empty; the walk raises ``QueueNotFoundError`` only when no shard has the queue.
        """
        # A dry run's call is its place's only one (it claims nothing: a second would show the
        # same jobs), so it asks for all it wants, as the original's one query did, up to
        # DRY_RUN_CALL_JOBS; the bodies stay within ``max_bytes`` as ever.
        most = STORE_CALL_JOBS if repeat else DRY_RUN_CALL_JOBS
        shards = self._shards.dequeue_candidates(coverage) or await self._usable(
            lambda: self._shards.dequeue_candidates(coverage)
        )
        if not shards:
            raise PinLaterError(ErrorCode.NO_HEALTHY_SHARDS, "no healthy shard to dequeue from")
        found: list[ReadyBatch[J]] = []
        total = 0
        bytes_left = max_bytes
        failures = 0
        last_failure = ""  # what the last failed call said, for the error when every shard failed
        # (``QueueAnswers``' two fields, as locals: the walk is on every dequeue)
        lacking: set[str] = set()  # shards that said they do not have the queue
        broken: set[str] = set()  # shards whose call failed unexpectedly after jobs were claimed
        held = False  # some shard had the queue, or could not say
        present = False  # some shard had the queue (no hint is kept of a queue no shard confirmed)
        # some shard answered (a call, or its place known to be empty): a walk in which none did
        # and one failed fails, though shards marked unhealthy meanwhile by other calls were
        # skipped rather than failed here (it answered "no jobs" with every store stopped)
        answered = False
        cut_repeats = 0  # calls made again after a cut one (MAX_CUT_REPEATS)
        for priority in range(1, self.num_priorities + 1):
            for shard in shards:
                want = limit - total
                if want <= 0 or bytes_left <= 0:
                    break
                if shard.name in lacking:  # no such queue there, at any priority
                    continue
                if broken and shard.name in broken:
                    continue
                if not shard.healthy:
                    held = True  # it cannot say
                    continue
                place = (shard.name, queue, priority)
                if (
                    use_empty_hints
                    and (place in self._empty_until or place in self._in_flight)  # (else worth it: no call)
                    and not await self._worth_a_look(place)
                ):
                    self._count("dequeue_known_empty_skips", 1)
                    answered = True
                    if (shard.name, queue) not in self._lacking:
                        held = present = True  # it had the queue at the last look
                    continue
                while True:  # a call per STORE_CALL_JOBS, while the place has more
                    ask = want if want <= most else most
                    now = self.clock.now_ms()
                    call: asyncio.Future[None] | None = None
                    if use_empty_hints:
                        call = self._in_flight[place] = asyncio.get_running_loop().create_future()
                    try:  # (what ``QueueAnswers.ask`` and ``on_shard`` do, without their coroutines)
                        got = await fetch(shard, priority, ask, now, bytes_left)
                    except QueueNotFoundError:
                        lacking.add(shard.name)
                        answered = True
                        got = None
                    except ShardConnectionError as exc:  # it may hold the queue
                        shard.failed(exc)
                        held = True
                        failures += 1
                        last_failure = f"shard {shard.name}: {exc.detail}"
                        break
                    except StoreMemoryFullError as exc:  # at maxmemory Redis refuses claims too
                        held = True
                        failures += 1
                        last_failure = exc.message
                        break
                    except _AckFailed:
                        raise
                    except Exception as exc:
                        if not found:
                            raise
                        broken.add(shard.name)  # not asked again in this walk
                        # the jobs claimed so far are answered, not left IN_PROGRESS unseen
                        log.warning(
                            "dequeue of %s: shard %s failed after %d jobs were claimed: %r",
                            queue,
                            shard.name,
                            total,
                            exc,
                        )
                        held = True
                        failures += 1
                        last_failure = f"shard {shard.name}: {exc!r}"
                        break
                    else:
                        held = answered = present = True
                    finally:
                        if call is not None:
                            if self._in_flight.get(place) is call:
                                del self._in_flight[place]
                            call.set_result(None)
                    self._count("dequeue_store_calls", 1)
                    if got is None:  # no such queue there
                        break
                    n = len(got)
                    if n:
                        bytes_left -= got.body_bytes
                    cut = n < ask and got.cut  # stopped at a work budget: more may be due there
                    if not n:
                        self._count("dequeue_store_calls_empty", 1)
                    if cut:
                        self._count("dequeue_store_calls_cut", 1)
                    if use_empty_hints:
                        self._lacking.discard((shard.name, queue))
                        if cut or bytes_left <= 0:  # (at the byte budget: it may have stopped there)
                            self._empty_until.pop(place, None)
                            self._empty_streak.pop(place, None)
                        elif n < ask:  # it took every ready job there
                            self._found_empty(place, now, n > 0)
                        else:
                            self._empty_streak.pop(place, None)
                    if n:
                        found.append(ReadyBatch(shard.name, priority, now, got))
                        total += n
                    want = limit - total
                    if bytes_left <= 0:
                        break
                    if cut and repeat and want > 0 and cut_repeats < MAX_CUT_REPEATS:
                        cut_repeats += 1
                        continue
                    if n < ask or want <= 0 or not repeat:
                        break
            if total >= limit or bytes_left <= 0:
                break
        if lacking and not held:  # (``QueueAnswers.check``)
            raise QueueNotFoundError(queue)
        # Remembered as empty, like any other place, when another shard had the queue: while the
        # rest are down, a name no shard confirmed (a peer's, made up) would be kept for good.
        if use_empty_hints and lacking and present:
            now = self.clock.now_ms()
            for name in lacking:
                self._lacking.add((name, queue))
                for priority in range(1, self.num_priorities + 1):
                    self._found_empty((name, queue, priority), now, False)
        if failures and not found and not answered:
            message = f"every shard failed during dequeue (the last: {last_failure})"
            raise PinLaterError(ErrorCode.SHARD_CONNECTION_FAILED, message)
        return found

    def _reserve_priority(self, queue: str, jobs: NewJobBatch, now: int) -> int | None:
        """The priority an enqueue's reserve takes from (``enqueue_jobs(reserve=...)``): the
        batch's best ready one, if every better place on a healthy shard is known to be empty."""
        ready = jobs.ready_priorities(now)
        if not ready:
            return None
        best = ready[0]
        for shard in self._shards:
            if shard.healthy:
                for priority in range(1, best):
                    if self._empty_until.get((shard.name, queue, priority), 0) <= now:
                        return None
        return best

    def known_empty(self, queue: str) -> bool:
        """Whether a walk of ``queue`` would make no store call now: every place on every
        healthy shard is known to be empty and none has a store call in flight. The broker then
        answers an empty buffer at once, where a refill would only walk the hints. Counted as
        the walk would count its skips."""
        now = self.clock.now_ms()
        places = 0
        for shard in self._shards:
            if not shard.healthy:
                continue
            if self._lacking and (shard.name, queue) in self._lacking:
                return False  # the walk decides what a queue missing from a shard means
            for priority in range(1, self.num_priorities + 1):
                place = (shard.name, queue, priority)
                if self._empty_until.get(place, 0) <= now or place in self._in_flight:
                    return False
                places += 1
        if places:
            self._count("dequeue_known_empty_skips", places)
        return places > 0

    async def _worth_a_look(self, place: Place) -> bool:
        """False while ``place`` is known to be empty. A dequeue store call already in flight
        there is waited for first: if it finds the place empty, this dequeue need not look too
        (so a wake-up of many long polls for one job costs one store call, not one each)."""
        if self._empty_until.get(place, 0) > self.clock.now_ms():
            return False
        in_flight = self._in_flight.get(place)
        if in_flight is None:
            return True
        await asyncio.shield(in_flight)
        return self._empty_until.get(place, 0) <= self.clock.now_ms()

    # -- acks and checkpoints ---------------------------------------------------------------

    async def ack_jobs(
        self, queue: str, groups: Sequence[tuple[str, AckGroup]], retried: Sequence[tuple[str, int, int]]
    ) -> bool:
        """One store call per shard named by the acks (``groups``: an ``AckGroup`` per shard), in
        parallel; a call per ``STORE_CALL_JOBS`` acks of a shard with more, in turn. ``retried``
        is ``(shard, priority, retry_delay_ms)`` for the failures (made ready again if they had
        attempts left), so the hints know where jobs come back. Answers whether any ack reached
        a store, which then found the queue (or raised QueueNotFoundError): acks naming only
        shards the map does not have are ignored, whatever the queue's name, so their counts must
        not be kept (a peer's made-up queue names each made a counter for good)."""
        calls = []
        now = self.clock.now_ms()
        unknown, ignored = [], 0
        for shard_name, acks in groups:
            shard = self._shard(shard_name)
            if shard is None:
                unknown.append(shard_name)
                ignored += len(acks)
                continue
            hot = self.hot_path(shard)
            if len(acks) > STORE_CALL_JOBS:
                calls.append(self.on_shard(shard, _ack_in_parts(hot, queue, acks, now)))
            else:
                calls.append(self.on_shard(shard, hot.ack_jobs(queue, acks, now)))
        if unknown:  # one line a call, however many names a peer made up (a line each was a flood)
            log.warning(
                "ack names %d unknown shard(s) (%.64r%s); ignored (%d jobs)",
                len(unknown),
                unknown[0],
                ", ..." if len(unknown) > 1 else "",
                ignored,
            )
        hints = True
        try:
            await _gather_raising_first(calls)
        except QueueNotFoundError:
            hints = False  # nothing of a queue a store does not have comes back (a made-up name's were kept)
            raise
        finally:
            if hints:
                self._after_acks(queue, groups, retried, now)
        return bool(calls)

    def _after_acks(
        self, queue: str, groups: Sequence[tuple[str, AckGroup]], retried: Sequence[tuple[str, int, int]], now: int
    ) -> None:
        """The walk's hints after acks were written (so no dequeue in between notes the places
        empty again): where retried jobs come back, and every place of a queue that holds back."""
        for shard_name, priority, retry_delay_ms in retried:  # retried, if it had attempts left
            self._ready_at(shard_name, queue, priority, now + retry_delay_ms, now)
        for shard_name, _ in groups:
            self._room_back(shard_name, queue)

    def _room_back(self, shard_name: str, queue: str) -> None:
        """Jobs of the queue ended or went back to PENDING on the shard (acked, deleted,
        cancelled, checkpointed): in a queue that holds back, room came back or a waiting job
        moved up, in any priority."""
        if self._holds_back(queue):
            self.mark_ready(shard_name, queue, range(1, self.num_priorities + 1))

    def _holds_back(self, queue: str) -> bool:
        """Whether the queue's stores may answer a dequeue with fewer jobs than are ready (its
        ``maxInProgress`` reached, or a group's next job waiting on the one before), so that an
        ack (room back, a waiting job promoted, in any priority) must end the walk's empty
        hints of the shards it names. A plain queue's acks leave the hints alone."""
        return queue in self._grouped or self._rules.get(queue, DEFAULT_RULES).max_in_progress is not None

    async def checkpoint_jobs(self, queue: str, source: str, items: Sequence[tuple[str, CheckpointItem]]) -> int:
        """``ShardStore.checkpoint_jobs`` per shard, at most ``STORE_CALL_JOBS`` items a store
        call; how many jobs changed."""
        by_shard: dict[str, list[CheckpointItem]] = defaultdict(list)
        for shard_name, item in items:
            by_shard[shard_name].append(item)
        now = self.clock.now_ms()

        async def on(shard: Shard, shard_items: list[CheckpointItem]) -> int:
            changed = 0
            for at in range(0, len(shard_items), STORE_CALL_JOBS):  # one store call stays small
                part = shard_items[at : at + STORE_CALL_JOBS]
                changed += await self.call_store(
                    shard, shard.store.checkpoint_jobs, queue, part, claim_source(source), now
                )
            return changed

        calls = [on(shard, its) for name, its in by_shard.items() if (shard := self._shard(name)) is not None]
        hints = True
        try:
            return sum(await _gather_raising_first(calls))
        except QueueNotFoundError:
            hints = False  # as for acks (``ack_jobs``)
            raise
        finally:
            if hints:
                self._checkpoints_moved(queue, [(name, item) for name, item in items if item.move_to_pending], now)

    def _checkpoints_moved(self, queue: str, moves: Sequence[tuple[str, CheckpointItem]], now: int) -> None:
        """The hints of jobs a checkpoint moved back to PENDING: one per place (shard, priority),
        with its distinct times (100,000 moves of one job had woken the queue's waiters and the
        broker 100,000 times, on the event loop, in one request)."""
        places: dict[tuple[str, int], set[int]] = defaultdict(set)  # place -> times (now: ready now)
        for shard_name, item in moves:
            places[(shard_name, item.priority)].add(max(now, item.run_after_ms))
        for (shard_name, priority), times in places.items():
            # the earliest, as many as a place keeps (the first met were kept: a later move's
            # earlier time was lost, and the walk looked there only at a later one's)
            for ready_at_ms in heapq.nsmallest(MAX_FUTURE_READY_TIMES, times):
                self._ready_at(shard_name, queue, priority, ready_at_ms, now)
        for shard_name in {shard_name for shard_name, _ in places}:
            self._room_back(shard_name, queue)  # room under a cap; a cancelled job ended

    # -- reads ------------------------------------------------------------------------------

    async def lookup_jobs(
        self, descriptors: Sequence[str], include_body: bool, max_body_bytes: int | None = None
    ) -> dict[str, JobRecord]:
        """Jobs found, by descriptor; unknown shards, queues and ids are simply not found. A
        descriptor given twice is looked up once (one descriptor 100,000 times with its body
        made a store reply of 100,000 bodies). A store call looks up at most ``STORE_CALL_JOBS``
        of them; at most ``LOOKUP_CALLS_AT_ONCE`` (queue, shard) pairs are asked at once, and a
        lookup naming more than ``MAX_LOOKUP_PAIRS`` is refused before any is asked (100,000
        descriptors of as many made-up queues started as many store calls at once). With
        ``include_body`` and ``max_body_bytes``: ``LookupOverBudget`` once the bodies found hold
        more than that; each store call is given what is left of it, so a lookup holds at most
        about ``LOOKUP_CALLS_AT_ONCE`` times the budget at once, however many bodies it names."""
        groups: dict[tuple[str, str], dict[tuple[int, int], None]] = defaultdict(dict)
        async for part in decoded_in_parts(descriptors):
            for queue, shard_name, priority, local_id in part:
                groups[(queue, shard_name)][(priority, local_id)] = None
        pairs = [(queue, shard, list(keys)) for (queue, name), keys in groups.items() if (shard := self._shard(name))]
        if len(pairs) > MAX_LOOKUP_PAIRS:
            raise PinLaterError(
                ErrorCode.UNKNOWN,
                f"invalid request: the descriptors name {len(pairs)} (queue, shard) pairs; a lookup takes at most "
                f"{MAX_LOOKUP_PAIRS}: split it",
            )
        found: dict[str, JobRecord] = {}
        turns = asyncio.Semaphore(LOOKUP_CALLS_AT_ONCE)
        budgeted = include_body and max_body_bytes is not None
        left = [max_body_bytes or 0]  # bytes of bodies the calls not yet made may read

        async def one(queue: str, shard: Shard, keys: list[tuple[int, int]]) -> None:
            async with turns:
                for at in range(0, len(keys), STORE_CALL_JOBS):  # one store call stays small
                    if budgeted and left[0] < 0:
                        raise LookupOverBudget(max_body_bytes or 0)
                    part = keys[at : at + STORE_CALL_JOBS]
                    budget = left[0] if budgeted else None
                    call = self.call_store(shard, shard.store.lookup_jobs, queue, part, include_body, budget)
                    try:
                        records = await QueueAnswers(queue).ask(shard, call, [])  # never QueueNotFoundError
                    except LookupOverBudget:
                        left[0] = -1  # the other pairs' calls not yet made are not made
                        raise LookupOverBudget(max_body_bytes or 0) from None  # the lookup's, not the call's
                    if budgeted:
                        left[0] -= sum(len(record.body or b"") for record in records)
                    for record in records:
                        descriptor = encode_descriptors(queue, shard.name, [record.priority], [record.local_id])[0]
                        found[descriptor] = record.as_clients_see_it()

        await _gather_raising_first([one(queue, shard, keys) for queue, shard, keys in pairs])
        if budgeted and left[0] < 0:  # calls made at once each fit what was left when they began
            raise LookupOverBudget(max_body_bytes or 0)
        return found

    async def cancel_jobs(self, queue: str, descriptors: Sequence[str]) -> int:
        """Cancel jobs of ``queue`` (``ShardStore.cancel_jobs``) by descriptor; return how many
        changed. A descriptor of another queue is refused (UNKNOWN, naming it) before anything
        changes; one of a shard not configured here is not found, as in ``lookup_jobs``."""
        by_shard: dict[str, list[tuple[int, int]]] = defaultdict(list)
        i = 0
        async for part in decoded_in_parts(descriptors):
            for job_queue, shard_name, priority, local_id in part:
                require_queue_of(queue, job_queue, i)
                by_shard[shard_name].append((priority, local_id))
                i += 1
        answers = QueueAnswers(queue)

        async def on(shard: Shard, keys: list[tuple[int, int]]) -> int:
            changed = 0
            for at in range(0, len(keys), CANCEL_CHUNK):  # one store call stays small (a Lua script)
                now = self.clock.now_ms()
                call = self.call_store(shard, shard.store.cancel_jobs, queue, keys[at : at + CANCEL_CHUNK], now)
                changed += await answers.ask(shard, call, 0)
            if changed:  # a PENDING job of a group ended: the next one moved up
                self._room_back(shard.name, queue)
            return changed

        calls = [on(shard, keys) for name, keys in by_shard.items() if (shard := self._shard(name)) is not None]
        changed = sum(await _gather_raising_first(calls))
        answers.check()
        return changed

    def _priorities(self, priority: int | None) -> range:
        return range(priority, priority + 1) if priority is not None else range(1, self.num_priorities + 1)

    async def count_jobs(
        self, queue: str, state: JobState, priority: int | None, future: bool, body_regex: str | None
    ) -> int:
        now = self.clock.now_ms()
        deadline = self._filter_deadline(body_regex)
        answers = QueueAnswers(queue)
        calls = [
            answers.ask(
                shard,
                self.call_filtered(
                    shard,
                    shard.store.count_jobs,
                    queue,
                    JobFilter(state, p, now, future, body_regex, deadline),
                    self.count_limit,
                ),
                0,
            )
            for shard in await self._readable_shards()
            for p in self._priorities(priority)
        ]
        counts = await _gather_raising_first(calls)
        answers.check()
        return sum(counts)

    async def queue_counts(self) -> dict[CountKey, int]:
        """Every queue's jobs by priority, state and ready/future, summed over the healthy
        shards: one ``ShardStore.queue_counts`` call per shard, in parallel, however many queues
        there are (counted in ``queue_counts_store_calls``). A shard without a queue adds
        nothing to it. Each shard's count is capped at ``count_limit`` before the sum, so every
        number is the one ``count_jobs`` gives for that queue, state and priority; cells
        without jobs are left out."""
        now = self.clock.now_ms()
        shards = await self._readable_shards()
        self._count("queue_counts_store_calls", len(shards))
        results = await _gather_raising_first(
            [self.call_store(shard, shard.store.queue_counts, self.num_priorities, now) for shard in shards]
        )
        cap = self.count_limit
        total: dict[CountKey, int] = defaultdict(int)
        for counts in results:
            for key, n in counts.items():
                if n > 0 and 1 <= key.priority <= self.num_priorities:
                    total[key] += n if cap is None else min(n, cap)
        return dict(total)

    async def oldest_ready(self) -> dict[tuple[str, int], int]:
        """The smallest run_after of each (queue, priority)'s ready PENDING jobs over the
        healthy shards (``ShardStore.oldest_ready``): one call per shard, in parallel."""
        now = self.clock.now_ms()
        shards = await self._readable_shards()
        results = await _gather_raising_first(
            [self.call_store(shard, shard.store.oldest_ready, self.num_priorities, now) for shard in shards]
        )
        oldest: dict[tuple[str, int], int] = {}
        for found in results:
            for cell, run_after in found.items():
                oldest[cell] = min(run_after, oldest.get(cell, run_after))
        return oldest

    async def expired_counts(self) -> dict[str, int]:
        """How many jobs of each queue expired so far, summed over the healthy shards
        (``ShardStore.expired_counts``)."""
        shards = await self._readable_shards()
        results = await _gather_raising_first([self.call_store(s, s.store.expired_counts) for s in shards])
        total: dict[str, int] = defaultdict(int)
        for counts in results:
            for queue, n in counts.items():
                total[queue] += n
        return dict(total)

    async def group_counts(self, queue: str) -> GroupCounts:
        """The queue's ordered groups (``ShardStore.group_counts``), summed over the healthy
        shards (a group lives on one shard)."""
        answers = QueueAnswers(queue)
        empty = GroupCounts(0, 0)
        calls = [
            answers.ask(shard, self.call_store(shard, shard.store.group_counts, queue), empty)
            for shard in await self._readable_shards()
        ]
        results = await _gather_raising_first(calls)
        answers.check()
        return GroupCounts(sum(c.groups for c in results), sum(c.blocked for c in results))

    async def scan_jobs(
        self, queue: str, state: JobState, priority: int | None, future: bool, limit: int, body_regex: str | None
    ) -> list[tuple[str, JobRecord]]:
        """Up to ``limit`` jobs over every shard and priority, newest run_after first: the first
        page of ``scan_page``."""
        page, _ = await self.scan_page(ScanQuery(queue, state, priority, future, body_regex), limit, scan_pages.START)
        return page

    async def scan_page(
        self,
        query: ScanQuery,
        limit: int,
        continuation: str,
        max_bytes: int | None = None,
        size: Callable[[scan_pages.Walk, JobRecord], int] | None = None,
    ) -> tuple[list[tuple[str, JobRecord]], str]:
        """One page of a scan over every readable shard and priority, newest run_after first,
        and the continuation that resumes after it (``scan_pages.END`` when nothing is left).
        CONTINUATION_INVALID for a continuation this query did not make. With ``max_bytes`` and
        ``size``, the page is cut where it would hold more (``scan_pages.merge_page``)."""
        configured = {shard.name for shard in self._shards.all()}
        # A shard removed since the last page holds none of the queue's jobs any more.
        stops = {walk: stop for walk, stop in scan_pages.decode(query, continuation).items() if walk[0] in configured}
        now = self.clock.now_ms()
        deadline = self._filter_deadline(query.body_regex)
        readable = await self._readable_shards()
        every = [(shard, p) for shard in readable for p in self._priorities(query.priority)]
        walks = [
            ((shard, p), stops.get((shard.name, p))) for shard, p in every if stops.get((shard.name, p), 0) is not None
        ]
        answers = QueueAnswers(query.queue)
        no_records: list[JobRecord] = []
        unfinished: set[scan_pages.Walk] = set()
        results = await _gather_raising_first(
            [
                answers.ask(
                    shard,
                    self._scan_walk(
                        shard,
                        after,
                        query.queue,
                        JobFilter(query.state, p, now, query.future, query.body_regex, deadline),
                        limit,
                        None if max_bytes is None or size is None else (max_bytes, size, unfinished),
                    ),
                    no_records,
                )
                for (shard, p), after in walks
            ]
        )
        answers.check()
        page, after_page = scan_pages.merge_page(
            limit,
            [((shard.name, p), records) for ((shard, p), _), records in zip(walks, results, strict=True)],
            stops,
            max_bytes,
            size,
            unfinished,
        )
        out: list[tuple[str, JobRecord]] = []
        for (shard_name, _p), record in page:
            descriptor = encode_descriptors(query.queue, shard_name, [record.priority], [record.local_id])[0]
            out.append((descriptor, record.as_clients_see_it()))
        if all(after_page.get((shard.name, p), 0) is None for shard, p in every):
            # Every shard that answers is done. A shard down now is left out of the rest of the
            # scan, as a scan's first page leaves it out: the scan ends rather than return empty
            # pages until it is back.
            return out, scan_pages.END
        return out, scan_pages.encode(query, after_page)

    async def _scan_walk(
        self,
        shard: Shard,
        after: ScanCursor | None,
        queue: str,
        where: JobFilter,
        limit: int,
        budget: tuple[int, Callable[[scan_pages.Walk, JobRecord], int], set[scan_pages.Walk]] | None,
    ) -> list[JobRecord]:
        """One walk's jobs for a page (``scan_page``): up to ``limit``, read ``STORE_CALL_JOBS`` a
        store call, each after the last, and with a ``budget`` (the page's bytes, the size of a
        job in it, and the walks that stop early) no further once their sizes pass the page's
        bytes: no page holds more of them. Each walk read ``limit`` jobs at once, 10,000 of long
        statuses and keys (70 MB) per shard and priority, for a page of 16 MiB at most."""
        walk = (shard.name, where.priority)
        out: list[JobRecord] = []
        held = 0
        while True:
            ask = min(STORE_CALL_JOBS, limit - len(out))
            scan = functools.partial(shard.store.scan_jobs, after=after)
            records = await self.call_filtered(shard, scan, queue, where, ask)
            out += records
            if len(records) < ask or len(out) >= limit:
                return out
            after = ScanCursor(records[-1].run_after_ms, records[-1].local_id)
            if budget is not None:
                max_bytes, size, unfinished = budget
                held += sum(size(walk, record) for record in records)
                if held > max_bytes:
                    unfinished.add(walk)
                    return out

    async def _readable_shards(self) -> list[Shard]:
        shards = await self._usable(lambda: [s for s in self._shards if s.healthy])
        if not shards:
            raise PinLaterError(ErrorCode.NO_HEALTHY_SHARDS, "no healthy shard to read from")
        return shards

    # -- bulk administration ----------------------------------------------------------------

    async def retry_failed_jobs(
        self, queue: str, priority: int, attempts_to_allow: int, run_after_ms: int | None, limit: int
    ) -> int:
        """``ShardStore.retry_failed_jobs`` on each shard in turn until ``limit`` jobs were
        retried, at most ``STORE_CALL_JOBS`` a store call (a shard is asked again while it retried
        all it was asked to)."""
        done = 0
        answers = QueueAnswers(queue)
        for shard in await self._usable(lambda: self._shards.dequeue_candidates(1.0)):
            while done < limit:
                ask = min(limit - done, STORE_CALL_JOBS)
                now = self.clock.now_ms()
                run_after = now if run_after_ms is None else run_after_ms
                call = self.call_store(
                    shard, shard.store.retry_failed_jobs, queue, priority, attempts_to_allow, run_after, ask, now
                )
                try:
                    retried = await answers.ask(shard, call, 0)
                except Exception as exc:
                    if not done:
                        raise
                    what = f"{done} failed jobs were retried before a store call failed"
                    raise failed_after(shard.name, what, exc) from exc
                finally:
                    if shard.name not in answers.lacking:
                        self._ready_at(shard.name, queue, priority, run_after, now)
                done += retried
                if retried < ask:
                    break
        answers.check()
        return done

    async def delete_jobs(self, queue: str, state: JobState, priority: int, body_regex: str | None, limit: int) -> int:
        """``ShardStore.delete_jobs`` on each shard in turn until ``limit`` jobs were deleted.
        Without a body filter, at most ``STORE_CALL_JOBS`` a store call (a shard is asked again
        while it deleted all it was asked to); with one, a call per shard, within the filter's
        budget (``call_filtered``), as a filter's walk would start over at each call."""
        done = 0
        deadline = self._filter_deadline(body_regex)  # one budget for the walk over the shards
        answers = QueueAnswers(queue)
        for shard in await self._usable(lambda: self._shards.dequeue_candidates(1.0)):
            while done < limit:
                ask = limit - done if body_regex is not None else min(limit - done, STORE_CALL_JOBS)
                where = JobFilter(state, priority, self.clock.now_ms(), None, body_regex, deadline)
                try:
                    deleted = await answers.ask(
                        shard, self.call_filtered(shard, shard.store.delete_jobs, queue, where, ask), 0
                    )
                except Exception as exc:
                    if not done:
                        raise
                    raise failed_after(shard.name, f"{done} jobs were deleted before a store call failed", exc) from exc
                done += deleted
                if deleted and state in (JobState.PENDING, JobState.IN_PROGRESS):  # (a finished job holds none)
                    self._room_back(shard.name, queue)
                if deleted < ask or body_regex is not None:
                    break
        answers.check()
        return done


async def create_on(backend: ShardedBackend, queue: str, shards: Sequence[Shard]) -> list[str]:
    """Create ``queue``, which another shard has, on each of ``shards``; each creation and each
    failure (then skipped) is logged. Returns the names of the shards it was created on."""
    created = []
    for shard in shards:
        try:
            await backend.call_store(shard, shard.store.create_queue, queue, backend.num_priorities)
        except Exception as exc:
            log.warning("could not create queue %s on shard %s: %s", queue, shard.name, exc)
            continue
        log.info("created queue %s on shard %s: another shard has it", queue, shard.name)
        created.append(shard.name)
    return created


def require_queue_of(queue: str, job_queue: str, i: int) -> None:
    """Refuse (UNKNOWN, naming it) descriptor ``i`` of a call on ``queue`` that names a job of
    ``job_queue``, another queue."""
    if job_queue != queue:
        raise PinLaterError(
            ErrorCode.UNKNOWN, f"jobDescriptors[{i}] is a job of queue {shown(job_queue)}, not {queue!r}"
        )


async def decoded_in_parts(descriptors: Sequence[str]) -> AsyncIterator[list[tuple[str, str, int, int]]]:
    """``decode_descriptors`` of ``descriptors``, ``STORE_CALL_JOBS`` at a time, in order, the
    event loop turning between two parts (a request of 100,000 is decoded in about 45 ms). A
    malformed one raises the error one call of the whole list raises, naming its index there."""
    for at in range(0, len(descriptors), STORE_CALL_JOBS):
        if at:
            await asyncio.sleep(0)
        try:
            part = decode_descriptors(list(descriptors[at : at + STORE_CALL_JOBS]))
        except Exception:
            decode_descriptors(list(descriptors))  # raises, with the index in the whole list
            raise
        yield part


async def decoded(descriptors: Sequence[str]) -> list[tuple[str, str, int, int]]:
    """``decode_descriptors`` of ``descriptors`` as ``decoded_in_parts`` decodes them: the whole
    list, the event loop turning between parts."""
    parsed: list[tuple[str, str, int, int]] = []
    async for part in decoded_in_parts(descriptors):
        parsed += part
    return parsed


def key_shard(queue: str, key: str, shards: Sequence[Shard], space: str = "") -> Shard:
    """The shard that holds ``key`` of ``queue`` among ``shards``: the highest of a stable hash
    of (queue, key, shard name) (rendezvous hashing), so every server picks the same one, and
    adding or removing a shard moves only the keys that land on or left it. ``space`` keeps
    kinds of keys apart ("group" for groups; dedup keys have none)."""
    prefix = f"{queue}\0{key}\0{space + chr(0) if space else ''}".encode()

    def rank(shard: Shard) -> bytes:
        return hashlib.blake2b(prefix + shard.name.encode(), digest_size=8).digest()

    return max(shards, key=rank)


class _AckFailed(Exception):
    """A store call that carried a dequeue's acks failed: raised through the walk (which would
    skip a failed shard) as the dequeue's failure, ``cause``."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


class _PendingAcks:
    """A dequeue's acks of one shard, until the walk's first store call: ``how`` they went
    (None: not yet; "carried": with that call; "before": alone, just before it)."""

    __slots__ = ("acks", "how", "on_acked", "shard")

    def __init__(self, shard: str, acks: AckGroup, on_acked: Callable[[], None] | None) -> None:
        self.shard = shard
        self.acks = acks
        self.on_acked = on_acked
        self.how: str | None = None

    def applied(self) -> None:
        if self.on_acked is not None:
            self.on_acked()

    def carry(self, shard: Shard, call: Awaitable[T]) -> Awaitable[T]:
        """``call`` on ``shard`` carries the acks (a connection failure marks the shard)."""
        self.how = "carried"
        return self._carry(shard, call)

    async def _carry(self, shard: Shard, call: Awaitable[T]) -> T:
        try:
            result = await call
        except ShardConnectionError as exc:
            shard.failed(exc)
            raise _AckFailed(exc) from exc
        except Exception as exc:
            raise _AckFailed(exc) from exc
        if self.on_acked is not None:  # (``applied``, inline)
            self.on_acked()
        return result

    def before(self, ack: Awaitable[bool], call: Callable[[], Awaitable[T]]) -> Awaitable[T]:
        self.how = "before"
        return self._before(ack, call)

    async def _before(self, ack: Awaitable[bool], call: Callable[[], Awaitable[T]]) -> T:
        try:
            reached = await ack
        except Exception as exc:
            raise _AckFailed(exc) from exc
        if reached:  # (acks of a shard the map lacks are ignored, and not counted)
            self.applied()
        return await call()


def _part_failed(shard: Shard, stored: int, total: int, exc: Exception) -> PinLaterError:
    """The error of ``total`` jobs sent to ``shard`` in parts, when a part failed after the
    parts before it stored ``stored`` of them: those stay, so it says so, and it is an error
    that no caller sends to another shard (a connection failure is one that may have been
    applied)."""
    what = f"{stored} of the {total} jobs sent to shard {shard.name} were stored before a part of them failed"
    return failed_after(shard.name, what, exc)


async def _ack_in_parts(hot: HotPath, queue: str, acks: AckGroup, now: int) -> None:
    """``hot.ack_jobs`` of more than ``STORE_CALL_JOBS`` acks: a call per part, in turn. A part
    that fails fails the call; the parts before it stay applied, and acks sent again change only
    the jobs they had not (an ack of a job no longer IN_PROGRESS changes nothing)."""
    for part in acks.chunks(STORE_CALL_JOBS):
        await hot.ack_jobs(queue, part, now)


async def _gather_raising_first(calls: Sequence[Awaitable[T]]) -> list[T]:
    """Gather; if any call failed, wait for all and raise the first failure."""
    if len(calls) == 1:  # the common case (one shard): no task
        return [await calls[0]]
    results: list[T | BaseException] = await asyncio.gather(*calls, return_exceptions=True)
    out: list[T] = []
    for result in results:
        if isinstance(result, BaseException):
            raise result
        out.append(result)
    return out
