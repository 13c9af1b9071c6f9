"""Admin answers whose cost grows with the queues (every queue's counts, every queue's rates),
made once and shared by every request while what they are made from has not changed.

At 10,000 queues the queue list took a quarter of a second of the event loop to make, and the
rate charts over a second; no password is needed to read them, so one client asking in a loop
held every Thrift client behind it (the dashboard polls both every 5 s). A ``SharedAnswer`` is
made again only when its inputs changed (a new count pass, a new rate sample, a config reload),
and even then not within ten times what the last one took to make: one costing 0.25 s is made at
most once in 2.5 s, however many ask. One that takes under ``COSTLY_SECONDS`` is made again
whenever its inputs change (a rate just set shows at the next read).
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["COSTLY_SECONDS", "SharedAnswer"]

#: An answer that took less than this to make is not kept past a change of its inputs.
COSTLY_SECONDS = 0.05


class SharedAnswer:
    """One answer's text, kept with the inputs it was made from."""

    __slots__ = ("_cost", "_inputs", "_made_at", "_text", "clock", "reuse_factor")

    def __init__(self, reuse_factor: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        #: The last answer is kept this many times as long as it took to make, inputs changed or not.
        self.reuse_factor = reuse_factor
        self._inputs: tuple[object, ...] = ()
        self._text: str | None = None
        self._made_at = float("-inf")
        self._cost = 0.0

    def get(self, inputs: tuple[object, ...], make: Callable[[], str]) -> str:
        """The answer made by ``make()`` from ``inputs`` (compared by identity, else equality):
        the last one while they are the same, or while it is young for its cost."""
        now = self.clock()
        if self._text is not None and (
            _same(inputs, self._inputs)
            or (self._cost >= COSTLY_SECONDS and now - self._made_at < self.reuse_factor * self._cost)
        ):
            return self._text
        self._text = make()
        done = self.clock()
        self._inputs, self._made_at, self._cost = inputs, done, done - now
        return self._text


def _same(a: tuple[object, ...], b: tuple[object, ...]) -> bool:
    return len(a) == len(b) and all(x is y or x == y for x, y in zip(a, b, strict=True))
