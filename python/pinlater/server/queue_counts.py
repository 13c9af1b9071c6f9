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
load finds counts; a read before any pass has finished waits for it. A background pass that fails
is logged and the last numbers are kept; a read that waits for a failing pass gets its error.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pinlater.backends.base import CountKey
    from pinlater.backends.sharded import ShardedBackend

log = logging.getLogger(__name__)

#: Passes that take longer than this are served from rather than waited for ...
FRESH_BUDGET_S = 0.1
#: ... once this many in a row did, or the last one took this many times as long.
SLOW_PASSES = 3
VERY_SLOW = 10
#: Passes served from start at least this long (and twice the last one's duration) after the
#: last one ended.
MIN_INTERVAL_S = 1.0


@dataclass(frozen=True, slots=True)
class QueueSnapshot:
    """One count pass: the queues, their counts (``ShardedBackend.queue_counts``), when it was
    started (ms since the epoch) and how long it took (s)."""

    names: frozenset[str]
    counts: dict[CountKey, int]
    taken_at_ms: int
    took_s: float


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

    def start(self) -> None:
        """Start a pass in the background (at server start: the first load then finds counts)."""
        self._start_pass()

    async def aclose(self) -> None:
        """Cancel the pass in flight, if any (server stop)."""
        if self._pass is not None and not self._pass.done():
            self._pass.cancel()
            await asyncio.wait([self._pass])

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
            names, counts = await asyncio.gather(self.backend.get_queue_names(), self.backend.queue_counts())
        finally:
            self._ended = self._clock()  # a failed pass is spaced from the next one too
        snapshot = QueueSnapshot(frozenset(names), counts, started_ms, self._ended - start)
        self._last = snapshot
        self._took.append(snapshot.took_s)
        return snapshot


def _log_failure(task: asyncio.Task[QueueSnapshot]) -> None:
    if not task.cancelled() and (exc := task.exception()) is not None:
        log.warning("counting the queues' jobs failed: %s: %s", type(exc).__name__, exc)
