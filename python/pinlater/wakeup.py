"""Waking long-polling dequeues as soon as jobs become ready on this server.

A long poll waits on its queue here (``wait``). Whenever this server makes jobs ready in a queue
(an enqueue, a zero-delay retry, a checkpoint back to pending, a broker refill), ``notify`` wakes
its waiters, longest waiting first, until the jobs they asked for cover the jobs made ready: one
job wakes one poll, not every poll of the queue (a thousand workers long-polling a queue made a
thousand dequeues of every enqueue, all but one of them empty). A notify that does not say how
many jobs wakes them all. Waiters also wake on their own timeout, which is how jobs made ready
elsewhere (another server, or a run-after time passing) are noticed, and what picks up a job
whose woken poll took nothing (another took it first) or was cancelled before its dequeue (its
wake is passed on, below). ``close`` wakes everyone for shutdown.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class _Waiter:
    __slots__ = ("future", "want")

    def __init__(self, future: asyncio.Future[None], want: int) -> None:
        self.future = future
        self.want = want


class QueueSignals:
    def __init__(self) -> None:
        #: Each queue's waiters, longest waiting first (a dict keeps insertion order). The last
        #: one out takes its queue away, so a queue nobody waits on holds nothing (the long polls
        #: of made-up queue names, answered while a shard was down, each left an entry for good).
        self._queues: dict[str, dict[_Waiter, None]] = {}
        #: Waiters over every queue.
        self.waiters = 0
        self.closed = False
        #: Called with the queue on every notify (the dequeue broker refills on it).
        self.listeners: list[Callable[[str], None]] = []

    def notify(self, queue: str, jobs: int | None = None) -> None:
        """``jobs`` (or an unknown number: None) became ready in ``queue``: wake its waiters,
        longest waiting first, until the jobs they want add up to ``jobs``."""
        for listener in self.listeners:
            listener(queue)
        self._wake(queue, jobs)

    def _wake(self, queue: str, jobs: int | None) -> None:
        waiters = self._queues.get(queue)
        if not waiters:
            return
        covered = 0
        for waiter in list(waiters):
            if jobs is not None and covered >= jobs:
                break
            del waiters[waiter]
            if not waiter.future.done():  # (one timing out is cancelled, yet still listed a moment)
                waiter.future.set_result(None)
                covered += waiter.want

    async def wait(self, queue: str, timeout: float, want: int = 1) -> bool:
        """Wait until ``queue`` is notified (True) or ``timeout`` seconds pass (False). ``want``
        is how many jobs the waiter takes once woken (a dequeue's limit)."""
        if self.closed or timeout <= 0:
            return False
        waiter = _Waiter(asyncio.get_running_loop().create_future(), max(1, want))
        waiters = self._queues.setdefault(queue, {})
        waiters[waiter] = None
        self.waiters += 1
        try:
            await asyncio.wait_for(waiter.future, timeout)
        except TimeoutError:
            return False
        except asyncio.CancelledError:
            if waiter.future.done() and not waiter.future.cancelled() and not self.closed:
                self._wake(queue, waiter.want)  # woken, but it will not dequeue: the next ones do
            raise
        finally:
            self.waiters -= 1
            waiters.pop(waiter, None)
            if not waiters and self._queues.get(queue) is waiters:
                del self._queues[queue]
        return not self.closed

    def close(self) -> None:
        self.closed = True
        for waiters in self._queues.values():
            for waiter in waiters:
                if not waiter.future.done():
                    waiter.future.set_result(None)
        self._queues.clear()
