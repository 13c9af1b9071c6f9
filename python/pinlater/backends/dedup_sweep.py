"""What the SQL stores share about dedup key records: when a record holds its key, and where each
queue's ``gc_dedup_keys`` walk over the records goes on.

A record names its holder (priority, local id) and ``held_until_ms`` (the holder's enqueue time
plus its window; 0 in the embedded store for a key without a window). It holds its key while the
holder is PENDING or IN_PROGRESS, or while ``now < held_until_ms``
(``ShardStore.enqueue_keyed_jobs``).

GC walks the records whose ``held_until_ms`` has passed, in (held_until_ms, key) order, looking
at no more than ``limit`` of them per call; records whose holders are still PENDING or
IN_PROGRESS stay, and may be many (a key with no window is "passed" at once, in the stores
that walk such keys: the embedded store forgets them with their jobs instead). So that a call
never walks them all, and records behind them are still reached, each queue's walk resumes
where the last call stopped (``SweepCursors``) and starts over once it reaches the end. The
position lives in memory: after a restart the walk starts from the beginning, which costs only
one more pass.
"""

from __future__ import annotations

import threading
from typing import Generic, TypeVar

from pinlater.backends.base import JobState

P = TypeVar("P")

_HOLDING_STATES = frozenset({int(JobState.PENDING), int(JobState.IN_PROGRESS)})


def holds(state: int | None, held_until_ms: int, now_ms: int) -> bool:
    """Whether a record holds its key at ``now_ms``: its holder (in ``state``, None when gone) is
    PENDING (a broker's reservation included: the job stays PENDING) or IN_PROGRESS, or its
    window has not passed."""
    return now_ms < held_until_ms or state in _HOLDING_STATES


def forgettable(state: int | None, held_until_ms: int, now_ms: int) -> bool:
    """Whether the GC forgets a record at ``now_ms``: its window has passed and its holder is
    gone (deleted, or collected by the finished-job GC). While the job exists its record stays,
    though a finished job's no longer holds the key, so lookups and scans show the job's key."""
    return state is None and now_ms >= held_until_ms


class SweepCursors(Generic[P]):
    """Per queue, the position (a store's keyset position, ``P``) after which the next GC walk
    goes on; None: from the beginning. Thread-safe."""

    _MAX_QUEUES = 4096  # queues are few; this only bounds a misuse

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._positions: dict[str, P] = {}

    def position(self, queue: str) -> P | None:
        with self._lock:
            return self._positions.get(queue)

    def move(self, queue: str, position: P | None) -> None:
        """Go on after ``position`` next time (None: start over)."""
        with self._lock:
            if position is None:
                self._positions.pop(queue, None)
                return
            if queue not in self._positions and len(self._positions) >= self._MAX_QUEUES:
                self._positions.clear()
            self._positions[queue] = position
