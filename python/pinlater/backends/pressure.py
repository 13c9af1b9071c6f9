"""Store memory pressure: what a shard may report about its memory, and the enqueue high-water mark.

A store that holds every job in memory refuses writes once it is full: Redis with ``noeviction``
answers every write that could grow it with an OOM error (other policies evict job hashes, which
loses jobs). A backlog must never get there. A store may therefore offer ``store.memory``, a
``MemoryProbe``: its latest reading of memory used against the store's limit, refreshed in the
background by ``refresh_memory_forever`` (one reading per shard and interval, never one per
request). The shared layer reads it and never asks which backend it has:

* ``ShardMap.enqueue_candidates`` leaves out shards at or above the high-water mark, so new jobs
  go to other shards;
* ``ShardedBackend.enqueue_jobs`` refuses an enqueue with ENQUEUE_REJECTED (``memory_full_reason``
  says which shards, their use and the mark) when every shard taking new jobs is above it, and
  treats a store's own out-of-memory refusal (``StoreMemoryFullError``) the same way: it reads
  the shard again and tries another;
* dequeues, acks, checkpoints and the monitor are never held back, so the backlog drains (and
  the monitor's GC frees the finished jobs) until the shards fall below the mark again.

A store without a limit (Redis ``maxmemory 0``) reports ``max_bytes`` 0 and is never above it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from pinlater.errors import ErrorCode, PinLaterError

if TYPE_CHECKING:
    from pinlater.backends.shardmap import Shard

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class MemoryUse:
    """One reading of a shard's memory: bytes used, and the limit (0: none)."""

    used_bytes: int
    max_bytes: int

    @property
    def fraction(self) -> float | None:
        """Used over the limit; None when the store has no limit."""
        return self.used_bytes / self.max_bytes if self.max_bytes > 0 else None

    def above(self, high_water: float | None) -> bool:
        """Whether this reading is at or above ``high_water`` (None: no mark)."""
        fraction = self.fraction
        return high_water is not None and fraction is not None and fraction >= high_water

    def describe(self) -> str:
        if self.max_bytes <= 0:
            return f"used {_mib(self.used_bytes)} (no memory limit)"
        return f"used {_mib(self.used_bytes)} of {_mib(self.max_bytes)} ({self.used_bytes / self.max_bytes:.0%})"


class MemoryProbe(Protocol):
    """What a store may offer as ``store.memory``."""

    @property
    def latest(self) -> MemoryUse | None:
        """The last reading plus this server's enqueues since (None before the first reading);
        never asks the store."""
        ...

    @property
    def limited(self) -> bool:
        """Whether the last reading found a memory limit (False before the first reading): without
        one, no reading is above any high-water mark, and ``latest`` need not be made."""
        ...

    def refresh(self) -> MemoryUse:
        """Read the store's memory now (blocking) and keep it as ``latest``; raises
        ``ShardConnectionError`` when the store does not answer."""
        ...

    def note_enqueued(self, jobs: int, body_bytes: int, keys: int = 0, key_bytes: int = 0) -> None:
        """This server wrote ``jobs`` new jobs of ``body_bytes`` in all, ``keys`` of them with a
        dedup key recorded (``key_bytes`` of UTF-8 in all): until the next reading, ``latest``
        adds what the store's layout makes of them, so a burst of enqueues between two readings
        cannot run far past the mark."""
        ...


class StoreMemoryFullError(PinLaterError):
    """A store refused a write because it is out of memory (Redis: "OOM command not allowed
    when used memory > 'maxmemory'"). Enqueue turns it into ENQUEUE_REJECTED after trying the
    other shards; elsewhere it is UNKNOWN with this message, and the shard stays healthy (it
    still serves reads and the writes that free memory)."""

    def __init__(self, shard: str, detail: str) -> None:
        super().__init__(ErrorCode.UNKNOWN, f"shard {shard} is out of memory and refuses writes: {detail}")
        self.shard = shard
        self.detail = detail

    def __reduce__(self) -> tuple[type[StoreMemoryFullError], tuple[str, str]]:  # type: ignore[override]
        return (StoreMemoryFullError, (self.shard, self.detail))


def memory_probe(store: object) -> MemoryProbe | None:
    """The store's probe, if it offers one."""
    probe: MemoryProbe | None = getattr(store, "memory", None)
    return probe


def memory_above(shard: Shard, high_water: float | None) -> bool:
    """Whether the shard's latest reading is at or above ``high_water`` (None: no mark)."""
    if high_water is None:
        return False
    probe = memory_probe(shard.store)
    if probe is None or not probe.limited:
        return False
    use = probe.latest
    return use is not None and use.above(high_water)


def memory_use(shard: Shard) -> MemoryUse | None:
    """The shard's latest reading, if its store reports memory."""
    probe = memory_probe(shard.store)
    return None if probe is None else probe.latest


def memory_full_reason(full: Iterable[tuple[str, MemoryUse | None]], high_water: float | None) -> str:
    """Why an enqueue is refused: each full shard with its reading, and the mark."""
    shards = "; ".join(
        f"shard {name} {'refused the write (out of memory)' if use is None else use.describe() + ' (estimated)'}"
        for name, use in full
    )
    mark = "" if high_water is None else f" (high-water mark {high_water:.0%} of the memory limit)"
    return (
        f"enqueue refused: every shard that takes new jobs is out of memory{mark}: {shards}. "
        "Acks still work, and dequeues until the store reaches its limit (a claim is a write): drain the "
        "backlog, or raise the store's memory limit"
    )


def _mib(n: int) -> str:
    return f"{n / (1024 * 1024):.1f} MiB"


class MemoryWatch:
    """Refreshes every shard's probe each ``interval`` seconds (``refresh_memory_forever``) and
    logs what changed: a shard crossing the mark either way, a shard without a memory limit
    (once: the mark cannot apply there), a probe that failed (at debug: the health check
    reports unreachable shards)."""

    def __init__(self, shards: Callable[[], Iterable[Shard]], high_water: float | None, interval: float) -> None:
        self.shards = shards
        self.high_water = high_water
        self.interval = interval
        self._above: set[str] = set()
        self._unlimited_noted: set[str] = set()

    async def refresh_once(self) -> None:
        probes = [
            (shard, probe)
            for shard in self.shards()
            if shard.healthy and (probe := memory_probe(shard.store)) is not None
        ]
        loop = asyncio.get_running_loop()
        results = await asyncio.gather(
            *(loop.run_in_executor(None, probe.refresh) for _shard, probe in probes), return_exceptions=True
        )
        for (shard, _probe), result in zip(probes, results, strict=True):
            if isinstance(result, BaseException):
                log.debug("memory probe of shard %s failed: %s", shard.name, result)
                continue
            self.note(shard.name, result)

    def note(self, name: str, use: MemoryUse) -> None:
        if use.max_bytes <= 0:
            if name not in self._unlimited_noted:
                self._unlimited_noted.add(name)
                log.warning(
                    "shard %s has no memory limit (Redis maxmemory 0): the memory high-water mark cannot apply "
                    "there, and a backlog can grow until the host runs out of memory; set maxmemory "
                    "(and keep the noeviction policy)",
                    name,
                )
            return
        self._unlimited_noted.discard(name)
        above = use.above(self.high_water)
        if above and name not in self._above:
            self._above.add(name)
            log.warning(
                "shard %s is above the memory high-water mark of %.0f%%: %s; new jobs go to other shards",
                name,
                (self.high_water or 0) * 100,
                use.describe(),
            )
        elif not above and name in self._above:
            self._above.discard(name)
            log.warning(
                "shard %s is below the memory high-water mark again: %s; it takes new jobs", name, use.describe()
            )

    async def run(self) -> None:
        """Refresh forever (cancel to stop); a failed round is logged and the next one runs."""
        while True:
            try:
                await self.refresh_once()
            except Exception:
                log.exception("memory probe round failed")
            await asyncio.sleep(self.interval)
