"""Waking long-polling dequeues as soon as jobs become ready on this server.

Each queue has an ``asyncio.Event`` that is set (and replaced by a fresh one) whenever this
server makes jobs ready in it: an enqueue, a zero-delay retry, a checkpoint back to pending.
Waiters also wake on their own timeout, which is how jobs made ready elsewhere (another
server, or a run-after time passing) are noticed. ``close`` wakes everyone for shutdown.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class QueueSignals:
    def __init__(self) -> None:
        self._events: dict[str, asyncio.Event] = {}
        #: Waiters per queue: the last one out takes its queue's event away, so a queue nobody
        #: waits on holds nothing (the long polls of made-up queue names, answered while a shard
        #: was down, each left an event for good).
        self._waiting: dict[str, int] = {}
        #: Waiters over every queue.
        self.waiters = 0
        self.closed = False
        #: Called with the queue on every notify (the dequeue broker refills on it).
        self.listeners: list[Callable[[str], None]] = []

    def notify(self, queue: str) -> None:
        for listener in self.listeners:
            listener(queue)
        event = self._events.pop(queue, None)
        if event is not None:
            event.set()

    async def wait(self, queue: str, timeout: float) -> bool:
        """Wait until ``queue`` is notified (True) or ``timeout`` seconds pass (False)."""
        if self.closed or timeout <= 0:
            return False
        event = self._events.get(queue)
        if event is None:
            event = self._events[queue] = asyncio.Event()
        self._waiting[queue] = self._waiting.get(queue, 0) + 1
        self.waiters += 1
        try:
            await asyncio.wait_for(event.wait(), timeout)
        except TimeoutError:
            return False
        finally:
            self.waiters -= 1
            left = self._waiting.pop(queue) - 1
            if left:
                self._waiting[queue] = left
            else:
                self._events.pop(queue, None)
        return not self.closed

    def close(self) -> None:
        self.closed = True
        for event in self._events.values():
            event.set()
        self._events.clear()
