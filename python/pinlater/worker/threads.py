"""Threads that run sync handlers, fed through a ``SimpleQueue`` and reporting back in batches.

``ThreadPoolExecutor`` costs a Future and a loop callback per job; here a finished job is a
deque append, and the event loop is woken once for however many finished since it last looked.
That keeps the worker's own cost per no-op job small next to the server's (see
``benches/worker_overhead.py``).

Prefetched jobs wait in the same ``SimpleQueue``, so a thread that frees up takes the next job
without a trip through the event loop. Whether a queued job may still start is decided by one
atomic ``dict.pop`` on the runner's ``waiting`` map: a thread starts the job only if it takes
it out of the map, and the loop hands a job back to the server only if it does, so a job is
either started or handed back, never both.
"""

from __future__ import annotations

import asyncio
import inspect
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from pinlater.worker.context import JobContext

#: (context, exception or None, handler result, seconds the handler ran)
Outcome = tuple[JobContext, BaseException | None, Any, float]


class HandlerThreads:
    """``size`` daemon threads calling ``handler(ctx)``; ``on_done(outcomes)`` runs on the loop.

    ``waiting`` maps the jobs submitted but not started yet (see the module docstring); a job
    that is no longer in it when a thread takes it from the queue is skipped.

    Daemon threads, because a handler still running when the grace period ends must not keep
    the process alive: its job has been released back to PENDING by then.
    """

    def __init__(
        self,
        name: str,
        size: int,
        handler: Callable[[JobContext], Any],
        loop: asyncio.AbstractEventLoop,
        on_done: Callable[[list[Outcome]], None],
        waiting: dict[JobContext, float],
    ) -> None:
        self.handler = handler
        self.loop = loop
        self.on_done = on_done
        self.waiting = waiting
        self._jobs: queue.SimpleQueue[JobContext | None] = queue.SimpleQueue()
        self._done: deque[Outcome] = deque()
        self._wake_pending = False
        self._threads = [threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True) for i in range(size)]
        for thread in self._threads:
            thread.start()

    def submit(self, ctx: JobContext) -> None:
        self._jobs.put(ctx)

    def _work(self) -> None:
        clock = time.perf_counter
        waiting = self.waiting
        while True:
            ctx = self._jobs.get()
            if ctx is None:
                return
            if waiting.pop(ctx, None) is None:  # handed back to the server before it could start
                continue
            ctx.started = time.monotonic()
            started = clock()
            try:
                result = self.handler(ctx)
                if inspect.isawaitable(result):  # (a plain def wrapping an ``async def``: it never ran)
                    _discard(result)
                    raise TypeError(
                        "the handler returned an awaitable, which a handler thread cannot run: register"
                        " an async def (or a callable whose __call__ is one) to run on the worker's loop"
                    )
                outcome: Outcome = (ctx, None, result, clock() - started)
            except BaseException as exc:  # every failure is reported, even SystemExit from a handler
                outcome = (ctx, exc, None, clock() - started)
            self._done.append(outcome)
            # One wake-up per batch: _drain clears the flag before it empties the deque, so an
            # outcome appended after the flag was read as set is still drained.
            if not self._wake_pending:
                self._wake_pending = True
                try:
                    self.loop.call_soon_threadsafe(self._drain)
                except RuntimeError:  # the loop is closed: the worker has exited
                    return

    def _drain(self) -> None:
        self._wake_pending = False
        outcomes = []
        while self._done:
            outcomes.append(self._done.popleft())
        if outcomes:
            self.on_done(outcomes)

    def stop(self) -> None:
        """Threads exit once the jobs queued before this are done (they are not waited for)."""
        for _ in self._threads:
            self._jobs.put(None)


def _discard(awaitable: object) -> None:
    """Close a coroutine that will never run (no "never awaited" warning for it)."""
    close = getattr(awaitable, "close", None)
    if callable(close):
        close()
