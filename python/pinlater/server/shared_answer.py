"""Admin answers whose cost grows with the queues (every queue's counts, every queue's rates, the
Prometheus text), made once and shared by every request while what they are made from has not
changed.

At 10,000 queues the queue list took a quarter of a second of the event loop to make, the rate
charts over a second and a ``/metrics`` scrape 1.5 s; no password is needed to read them, so one
client asking in a loop held every Thrift client behind it (the dashboard polls the first two
every 5 s). A ``SharedAnswer`` is made again only when its inputs changed (a new count pass, a new
rate sample, a config reload, the next second), and even then not within ten times what the last
one took to make: one costing 0.25 s is made at most once in 2.5 s, however many ask. One that
takes under ``COSTLY_SECONDS`` is made again whenever its inputs change (a rate just set shows at
the next read). Requests that come while one is being made off the loop wait for it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

__all__ = ["COSTLY_SECONDS", "SharedAnswer"]

T = TypeVar("T")

#: An answer that took less than this to make is not kept past a change of its inputs.
COSTLY_SECONDS = 0.05


class SharedAnswer(Generic[T]):
    """One answer, kept with the inputs it was made from."""

    __slots__ = ("_cost", "_inputs", "_made_at", "_making", "_value", "clock", "reuse_factor")

    def __init__(self, reuse_factor: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        #: The last answer is kept this many times as long as it took to make, inputs changed or not.
        self.reuse_factor = reuse_factor
        self._inputs: tuple[object, ...] = ()
        self._value: T | None = None
        self._made_at = float("-inf")
        self._cost = 0.0
        self._making: asyncio.Future[T] | None = None

    def _kept(self, inputs: tuple[object, ...]) -> T | None:
        if self._value is not None and (
            _same(inputs, self._inputs)
            or (self._cost >= COSTLY_SECONDS and self.clock() - self._made_at < self.reuse_factor * self._cost)
        ):
            return self._value
        return None

    def _keep(self, inputs: tuple[object, ...], value: T, started: float) -> T:
        done = self.clock()
        self._inputs, self._value, self._made_at, self._cost = inputs, value, done, done - started
        return value

    def get(self, inputs: tuple[object, ...], make: Callable[[], T]) -> T:
        """The answer made by ``make()`` from ``inputs`` (compared by identity, else equality):
        the last one while they are the same, or while it is young for its cost."""
        kept = self._kept(inputs)
        if kept is not None:
            return kept
        started = self.clock()
        return self._keep(inputs, make(), started)

    async def get_async(self, inputs: tuple[object, ...], make: Callable[[], Awaitable[T]]) -> T:
        """``get`` for an answer made by awaiting ``make()``: requests meanwhile share it."""
        kept = self._kept(inputs)
        if kept is not None:
            return kept
        if self._making is None:
            self._making = asyncio.ensure_future(self._make(inputs, make))
            self._making.add_done_callback(_retrieved)  # (its askers may all be gone: nothing logged)
        return await asyncio.shield(self._making)

    async def _make(self, inputs: tuple[object, ...], make: Callable[[], Awaitable[T]]) -> T:
        try:
            started = self.clock()
            return self._keep(inputs, await make(), started)
        finally:
            self._making = None


def _retrieved(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


def _same(a: tuple[object, ...], b: tuple[object, ...]) -> bool:
    return len(a) == len(b) and all(x is y or x == y for x, y in zip(a, b, strict=True))
