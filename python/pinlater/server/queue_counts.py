"""Every queue's job counts for the dashboard's queue list and ``/metrics``, so that a page load
never waits long on the stores.

A count pass (``ShardedBackend.queue_counts`` and the queue names) is one store call per shard
whatever the number of queues, but on some stores it is not cheap: MySQL keeps a table per queue
and priority, and counting 3,000 of them took 0.3-1.5 s a shard here (MariaDB reopens tables
beyond its ``table_definition_cache``). So ``QueueCounts`` times each pass:

* a read waits for a pass of its own (concurrent reads share one): the numbers are as fresh as
  a count per queue was;
* but once ``SLOW_PASSES`` passes in a row took longer than ``fresh_budget_s`` (several, so
  that one slow moment of a small store does not serve stale numbers), or the last one took
  ``VERY_SLOW`` times that (no moment is that slow), a read answers at once
  from the last pass and starts the next one in the background (one at a time): the numbers are
  at most one pass behind, and ``QueueSnapshot.taken_at_ms`` says when they were counted. A
  pass within the budget goes back to the first way.
* Passes served from are spaced: the next one starts no sooner than ``max(MIN_INTERVAL_S, 2 x
  the last pass's duration)`` after the last one ended (reads in between get the last numbers).
  So the stores spend at most a third of the time counting however often the dashboard (every
  5 s) and ``/metrics`` scrapes read, instead of scanning a big backlog back to back. The floor
  of 1 s keeps a moderately slow store's numbers live: every dashboard poll still starts a pass.

``start`` runs the first pass in the background when the server starts, so the dashboard's first
load finds counts, and then one every ``REFRESH_S`` (spaced as above), so ``/metrics`` depth is
fresh without a scrape waiting. A read before any pass has finished waits for it. A background
pass that fails is logged and the last numbers are kept; a read that waits for a failing pass gets
its error. A pass also asks each shard for its oldest ready job per queue and priority and its
expired counts (one call per shard each, in parallel); when those fail, the pass keeps the last
ones (logged) rather than failing the counts.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from pinlater.backends.base import CountKey, JobState

if TYPE_CHECKING:
    from pinlater.backends.sharded import ShardedBackend

log = logging.getLogger(__name__)

K = TypeVar("K")

#: Passes that take longer than this are served from rather than waited for ...
FRESH_BUDGET_S = 0.1
#: ... once this many in a row did, or the last one took this many times as long.
SLOW_PASSES = 3
VERY_SLOW = 10
#: Passes served from start at least this long (and twice the last one's duration) after the
#: last one ended.
MIN_INTERVAL_S = 1.0
#: The server's background passes come this often (``start``): queue depth in ``/metrics`` is at
#: most this old, plus a pass.
REFRESH_S = 10.0


#: The dashboard's count columns: (name, state, future jobs only).
COUNT_COLUMNS = (
    ("pending", JobState.PENDING, False),
    ("pending_future", JobState.PENDING, True),
    ("in_progress", JobState.IN_PROGRESS, False),
    ("succeeded", JobState.SUCCEEDED, False),
    ("failed", JobState.FAILED, False),
)


Columns = dict[str, list[int]]
"""A queue's count columns: ``{column: [count per priority]}`` (``COUNT_COLUMNS``)."""


def count_columns(counts: Mapping[CountKey, int], names: list[str], num_priorities: int) -> dict[str, Columns]:
    """The dashboard's count columns of ``names`` from a count pass (``ShardedBackend.queue_counts``):
    ``{queue: {column: [count per priority]}}``, the numbers ``count_jobs`` gives."""
    priorities = range(1, num_priorities + 1)
    return {
        queue: {
            column: [counts.get(CountKey(queue, p, state, future), 0) for p in priorities]
            for column, state, future in COUNT_COLUMNS
        }
        for queue in names
    }


@dataclass(frozen=True, slots=True)
class QueueSnapshot:
    """One count pass: the queues, their counts (``ShardedBackend.queue_counts``), when it was
    started (ms since the epoch) and how long it took (s)."""

    names: frozenset[str]
    counts: dict[CountKey, int]
    taken_at_ms: int
    took_s: float
    #: The smallest run_after of each (queue, priority)'s ready PENDING jobs
    #: (``ShardedBackend.oldest_ready``), and how many jobs of each queue expired so far.
    oldest_ready: dict[tuple[str, int], int] = field(default_factory=dict)
    expired: dict[str, int] = field(default_factory=dict)
    #: The smallest of ``oldest_ready`` per queue, made once with the snapshot: each queue's age
    #: read by a scan of every queue's entries cost the scrape and the queue list time in the
    #: square of the queues.
    _oldest_by_queue: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        oldest: dict[str, int] = {}
        for (queue, _), at in self.oldest_ready.items():
            if at < oldest.get(queue, at + 1):
                oldest[queue] = at
        object.__setattr__(self, "_oldest_by_queue", oldest)

    def oldest_ready_age_ms(self, queue: str) -> int | None:
        """How long the queue's oldest ready PENDING job has been ready when the pass started;
        None when it had none."""
        at = self._oldest_by_queue.get(queue)
        return None if at is None else max(0, self.taken_at_ms - at)


class QueueCounts:
    """The last count pass of ``backend`` and the policy above (see the module docstring)."""

    def __init__(
        self,
        backend: ShardedBackend,
        *,
        fresh_budget_s: float = FRESH_BUDGET_S,
        min_interval_s: float = MIN_INTERVAL_S,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.backend = backend
        self.fresh_budget_s = fresh_budget_s
        self.min_interval_s = min_interval_s
        self._clock = clock
        self._ended: float | None = None  # when the last pass ended (``clock``)
        self._last: QueueSnapshot | None = None
        self._pass: asyncio.Task[QueueSnapshot] | None = None
        self._took: deque[float] = deque(maxlen=SLOW_PASSES)  # the last passes' durations
        self._refresher: asyncio.Task[None] | None = None

    @property
    def last(self) -> QueueSnapshot | None:
        return self._last

    @property
    def serving_last(self) -> bool:
        """True while reads answer from the last pass (passes are slow), False while they wait."""
        took = self._took
        if took and took[-1] > VERY_SLOW * self.fresh_budget_s:
            return True
        return len(took) == SLOW_PASSES and min(took) > self.fresh_budget_s

    async def read(self) -> QueueSnapshot:
        """The counts, fresh or from the last pass (see the module docstring)."""
        last = self._last
        if last is not None and self.serving_last:
            if self._due():
                self._start_pass()
            return last
        return await asyncio.shield(self._start_pass())

    def start(self, refresh_s: float | None = REFRESH_S) -> None:
        """Start a pass in the background (at server start: the first load then finds counts),
        and with ``refresh_s``, one every ``refresh_s`` (or as the spacing above allows) after
        it, so that ``/metrics`` numbers are never older than that without a read."""
        self._start_pass()
        if refresh_s is not None:
            self._refresher = asyncio.create_task(self._refresh(refresh_s), name="pinlater-queue-counts-refresh")

    async def _refresh(self, every_s: float) -> None:
        while True:
            await asyncio.sleep(every_s)
            if self._due():
                self._start_pass()

    async def aclose(self) -> None:
        """Cancel the refresher and the pass in flight, if any (server stop)."""
        tasks = [t for t in (self._refresher, self._pass) if t is not None and not t.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)

    def _due(self) -> bool:
        """Whether the next pass may start: ``max(min_interval_s, 2 x the last pass's duration)``
        after the last one ended."""
        if self._ended is None or not self._took:
            return True
        return self._clock() - self._ended >= max(self.min_interval_s, 2 * self._took[-1])

    async def settled(self) -> QueueSnapshot | None:
        """Wait for the pass in flight, if any (tests); the last pass's snapshot."""
        if self._pass is not None:
            await asyncio.wait([self._pass])
        return self._last

    def _start_pass(self) -> asyncio.Task[QueueSnapshot]:
        if self._pass is None or self._pass.done():
            self._pass = asyncio.create_task(self._count(), name="pinlater-queue-counts")
            self._pass.add_done_callback(_log_failure)
        return self._pass

    async def _count(self) -> QueueSnapshot:
        started_ms = self.backend.clock.now_ms()
        start = self._clock()
        try:
            last = self._last
            names, counts, oldest, expired = await asyncio.gather(
                self.backend.get_queue_names(),
                self.backend.queue_counts(),
                _or_last(self.backend.oldest_ready(), "the oldest ready jobs", last.oldest_ready if last else None),
                _or_last(self.backend.expired_counts(), "the expired counts", last.expired if last else None),
            )
        finally:
            self._ended = self._clock()  # a failed pass is spaced from the next one too
        snapshot = QueueSnapshot(frozenset(names), counts, started_ms, self._ended - start, oldest, expired)
        self._last = snapshot
        self._took.append(snapshot.took_s)
        return snapshot


async def _or_last(call: Awaitable[dict[K, int]], what: str, last: dict[K, int] | None) -> dict[K, int]:
    """The depth figures of a pass, or the last pass's (logged) when the stores fail them: the
    counts do not wait on them."""
    try:
        return await call
    except Exception as exc:
        log.warning("counting %s failed: %s: %s", what, type(exc).__name__, exc)
        return {} if last is None else last


def _log_failure(task: asyncio.Task[QueueSnapshot]) -> None:
    if not task.cancelled() and (exc := task.exception()) is not None:
        log.warning("counting the queues' jobs failed: %s: %s", type(exc).__name__, exc)
