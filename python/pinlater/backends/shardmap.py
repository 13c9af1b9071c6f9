"""The set of shards a server talks to: their stores, health and dequeue-only flags.

A ``ShardMap`` is swapped whole on a config reload, so a request sees one consistent set of
shards from start to end. Health is tracked per shard: a ``ShardConnectionError`` marks a shard
unhealthy, a background checker pings unhealthy shards and brings them back. A shard logs its
changes of health at most once per ``HEALTH_LOG_SECONDS``.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from pinlater.backends.base import ShardConfig, ShardStore
from pinlater.backends.pressure import MemoryUse, memory_above, memory_use
from pinlater.errors import ShardConnectionError

log = logging.getLogger(__name__)

#: A shard logs a change of its health at most once per this many seconds. A store that refuses
#: writes while it answers pings (a full disk) is marked unhealthy by each write and healthy by
#: the next ping: 892 lines in 25 s of enqueues to a full disk, two a request. The changes
#: between are counted in the next line, which the health loop writes once the time has passed.
HEALTH_LOG_SECONDS = 10.0


@dataclass(eq=False)
class Shard:
    """One shard: its store and what the server currently believes about it."""

    name: str
    store: ShardStore
    dequeue_only: bool = False
    config: ShardConfig | None = None
    healthy: bool = True
    failures: int = field(default=0)
    #: What the store threads saw last (``ShardedBackend.call_store``, set there, read there):
    #: whether the shard's latest call or ping failed to reach it, and how many did so far.
    failing: bool = field(default=False)
    failed_calls: int = field(default=0)

    #: When the latest change of health was logged (``clock()``), the changes since that were
    #: not (``HEALTH_LOG_SECONDS``), and how many of those marked the shard unhealthy.
    logged_at: float | None = field(default=None, repr=False)
    unlogged: int = field(default=0, repr=False)
    unlogged_marks: int = field(default=0, repr=False)
    last_reason: str = field(default="", repr=False)
    clock: Callable[[], float] = field(default=time.monotonic, repr=False)

    def failed(self, exc: ShardConnectionError) -> None:
        """A call to the shard failed with ``exc``: marked unhealthy, unless it lost to other
        transactions (``exc.contention``: the shard answered, and other calls go on)."""
        if not exc.contention:
            self.mark_unhealthy(exc.detail)

    def mark_unhealthy(self, reason: str) -> None:
        self.failures += 1
        self.last_reason = reason
        if self.healthy:
            self.healthy = False
            self._changed()

    def mark_healthy(self) -> None:
        if not self.healthy:
            self.healthy = True
            self._changed()

    def _changed(self) -> None:
        """Log a change of health, or count it while the last logged one is recent."""
        now = self.clock()
        if self.logged_at is not None and now - self.logged_at < HEALTH_LOG_SECONDS:
            self.unlogged += 1
            self.unlogged_marks += not self.healthy
            return
        self._log(now)

    def log_unlogged(self, *, now: bool = False) -> None:
        """Log the shard's health once changes went unlogged and ``HEALTH_LOG_SECONDS`` have
        passed since the last line (the health loop asks every second; a change past that time
        is logged at once, with the same count), so the log never ends on a state the shard has
        since left, and no change goes uncounted. With ``now`` (a stop), whatever the time."""
        if not self.unlogged or self.logged_at is None:
            return
        at = self.clock()
        if now or at - self.logged_at >= HEALTH_LOG_SECONDS:
            self._log(at)

    def _log(self, now: float) -> None:
        """One line: the shard's health, and the changes not logged since the last line. A line
        that covers times the shard was marked unhealthy is a warning, whatever the state now: a
        flapping shard is healthy again within a second, most of the time."""
        more = ""
        if self.unlogged and self.logged_at is not None:
            more = f" ({self.unlogged} changes of health in {now - self.logged_at:.0f} s were not logged"
            if self.unlogged_marks:
                more += f"; marked unhealthy {self.unlogged_marks} times, the last: {self.last_reason}"
            more += ")"
        if not self.healthy:
            log.warning("shard %s marked unhealthy: %s%s", self.name, self.last_reason, more)
        elif self.unlogged_marks:
            log.warning("shard %s is healthy again%s", self.name, more)
        else:
            log.info("shard %s is healthy again%s", self.name, more)
        self.logged_at, self.unlogged, self.unlogged_marks = now, 0, 0


class ShardMap:
    """An immutable view of the shards by name."""

    def __init__(self, shards: Iterable[Shard]) -> None:
        self._shards: dict[str, Shard] = {}
        for shard in shards:
            if shard.name in self._shards:
                raise ValueError(f"duplicate shard name {shard.name!r}")
            self._shards[shard.name] = shard

    def __len__(self) -> int:
        return len(self._shards)

    def __iter__(self) -> Iterator[Shard]:
        return iter(self._shards.values())

    def get(self, name: str) -> Shard | None:
        return self._shards.get(name)

    def names(self) -> list[str]:
        return list(self._shards)

    def all(self) -> list[Shard]:
        return list(self._shards.values())

    def enqueue_candidates(self, memory_high_water: float | None = None) -> list[Shard]:
        """Healthy shards that accept new jobs, in random order; with ``memory_high_water``,
        not those whose store reports memory use at or above it (see ``pressure.py``)."""
        shards = []
        for s in self._shards.values():
            if s.healthy and not s.dequeue_only and not memory_above(s, memory_high_water):
                shards.append(s)
        if len(shards) > 1:
            random.shuffle(shards)
        return shards

    def memory_full(self, memory_high_water: float | None) -> list[tuple[Shard, MemoryUse]]:
        """Healthy shards that would accept new jobs but are at or above ``memory_high_water``."""
        full = []
        for s in self._shards.values():
            use = memory_use(s)
            if s.healthy and not s.dequeue_only and use is not None and use.above(memory_high_water):
                full.append((s, use))
        return full

    def dequeue_candidates(self, coverage: float) -> list[Shard]:
        """Healthy shards in random order; with coverage < 1 only that fraction (at least one)."""
        shards = []
        for s in self._shards.values():  # (a loop, not a comprehension: a call fewer per dequeue)
            if s.healthy:
                shards.append(s)
        if len(shards) > 1:
            random.shuffle(shards)
        if coverage < 1.0 and shards:
            keep = max(1, int(len(shards) * coverage + 0.999999))
            shards = shards[:keep]
        return shards


def diff_configs(
    current: ShardMap, wanted: Mapping[str, ShardConfig]
) -> tuple[list[str], list[str], list[str], list[str]]:
    """Compare a running map with a freshly parsed config.

    Returns (added, removed, reopened, flag_changed) shard names. A shard whose connection
    settings changed is reopened; one whose only change is ``dequeue_only`` keeps its store.
    """
    added = [name for name in wanted if current.get(name) is None]
    removed = [shard.name for shard in current if shard.name not in wanted]
    reopened: list[str] = []
    flag_changed: list[str] = []
    for name, config in wanted.items():
        shard = current.get(name)
        if shard is None or shard.config is None:
            continue
        if _without_flag(shard.config) != _without_flag(config):
            reopened.append(name)
        elif shard.dequeue_only != config.dequeue_only:
            flag_changed.append(name)
    return added, removed, reopened, flag_changed


def _without_flag(config: ShardConfig) -> object:
    """The config with dequeue_only neutralised, for comparing connection settings."""
    import dataclasses

    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        return dataclasses.replace(config, dequeue_only=False)
    return config
