"""``Counters``: what the layers below the server count into, handed down to them.

The monitor, the dequeue broker and ``ShardedBackend`` count what they do, but they sit below
``server/`` and never import it: the server hands them its statistics registry
(``server/metrics.Metrics`` has these methods) as a ``Counters``, and tests hand them a fresh
``Metrics`` or anything else with these two methods.
"""

from __future__ import annotations

from typing import Protocol


class Counters(Protocol):
    """Counters and timings by name, shown on ``/stats.txt`` and ``/metrics``."""

    def incr(self, name: str, by: int = 1) -> None:
        """Add ``by`` to counter ``name``."""
        ...

    def timing(self, method: str, millis: float, ok: bool) -> None:
        """Record one call of ``method`` that took ``millis`` and succeeded (``ok``) or not."""
        ...
