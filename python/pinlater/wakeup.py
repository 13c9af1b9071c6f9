"""Waking long-polling dequeues as soon as jobs become ready on this server.

A long poll waits on its queue here (``wait``). Whenever this server makes jobs ready in a queue
(an enqueue, a zero-delay retry, a checkpoint back to pending, a broker refill), ``notify`` wakes
its waiters, longest waiting first, until the jobs they asked for cover the jobs made ready: one
job wakes one poll, not every poll of the queue (a thousand workers long-polling a queue made a
thousand dequeues of every enqueue, all but one of them empty). A notify that does not say how
many jobs wakes them all. A woken poll that makes no dequeue (cancelled, its peer gone) passes its
wake on to the next, and so does one that took fewer jobs than it wanted while some were there
(its bytes' bound): ``pass_on``. Waiters also wake on their own timeout, which is how jobs made
ready elsewhere (another server, or a run-after time passing) are noticed. ``close`` wakes
everyone for shutdown.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class _Waiter:
    __slots__ = ("future", "want")

    def __init__(self, future: asyncio.Future[bool], want: int) -> None:
        #: True once woken; False when its time is up.
        self.future = future
        self.want = want


def _expire(future: asyncio.Future[bool]) -> None:
    if not future.done():
        future.set_result(False)


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
        self.pass_on(queue, jobs)

    def pass_on(self, queue: str, jobs: int | None) -> None:
        """Wake waiters of ``queue`` for ``jobs`` (None: all) without telling the listeners: a
        notify's, or what a woken waiter leaves untaken (it stopped before its dequeue, or took
        fewer than it wanted: its bytes' bound)."""
        waiters = self._queues.get(queue)
        covered = 0
        while waiters and (jobs is None or covered < jobs):
            waiter = next(iter(waiters))  # (the one waiting longest: no copy of them all)
            del waiters[waiter]
            if not waiter.future.done():
                waiter.future.set_result(True)
                covered += waiter.want

    async def wait(self, queue: str, timeout: float, want: int = 1) -> bool:
        """Wait until ``queue`` is notified for this waiter (True: woken, its share of the jobs
        to take or ``pass_on``) or ``timeout`` seconds pass (False). ``want`` is how many jobs
        the waiter takes once woken (a dequeue's limit; 0 for one that may not find them, a
        dequeue over part of the shards: woken along with others, never in their place). A
        waiter cancelled once woken passes its wake on."""
        if self.closed or timeout <= 0:
            return False
        loop = asyncio.get_running_loop()
        waiter = _Waiter(loop.create_future(), max(0, want))
        waiters = self._queues.setdefault(queue, {})
        waiters[waiter] = None
        self.waiters += 1
        # (a timer, not asyncio.wait_for: on 3.11 that returns a result that came with a
        # cancel and swallows the cancel, so a woken waiter cancelled would go on)
        timer = loop.call_later(timeout, _expire, waiter.future)
        try:
            return await waiter.future and not self.closed
        except asyncio.CancelledError:
            future = waiter.future
            if future.done() and not future.cancelled() and future.result() and not self.closed:
                self.pass_on(queue, waiter.want)
            raise
        finally:
            timer.cancel()
            self.waiters -= 1
            waiters.pop(waiter, None)
            if not waiters and self._queues.get(queue) is waiters:
                del self._queues[queue]

    def close(self) -> None:
        self.closed = True
        for waiters in self._queues.values():
            for waiter in waiters:
                if not waiter.future.done():
                    waiter.future.set_result(True)
        self._queues.clear()
