"""The dequeue broker: per queue, jobs reserved ahead of demand and handed to workers from memory.

One ``DequeueBroker`` per server. Per queue it keeps a bounded ``JobBuffer`` (Rust) of jobs it
has *reserved* in the store (``ShardStore.reserve_jobs``): a reserved job stays PENDING, so
counts, scans and lookups show it as PENDING, no attempt is charged for it, and a crash needs no
cleanup, because a reservation lapses by itself after the hold. Invariants:

* A worker only ever gets a job through ``claim_reserved`` with the normal unique claim for its
  source, so checkpoint guards, acks and claim timeouts work exactly as without the broker. A
  buffered job whose reservation lapsed or was taken is dropped (``broker_lapsed``), never
  handed out: no job goes to two workers unless a claim timed out.
* Reservations exclude each other, so several servers on one store reserve distinct jobs.
* A buffered entry is released back to the store (``release_reservations``) once it is older
  than half the hold, before its reservation could lapse, and ``stop`` releases everything.
* Refills are single-flight per queue: concurrent dequeues await the same refill rather than
  each walking every shard. A take that leaves the buffer below the low-water mark, and any
  job made ready on this server, start a refill in the background.

The walk over priorities and shards (and its known-empty hints) is ``ShardedBackend.walk_ready``,
the same one the direct dequeue uses. dryRun and coverage < 1 bypass the broker (the handler
calls the backend directly): a dry run answers from the store and shows buffered jobs too.

Priority: the buffer hands out priority 1 first, but a higher-priority job made ready elsewhere
while the buffer is full of lower-priority ones waits until the buffer drains below the
low-water mark (at most ``buffer_size`` jobs); on this server a refill starts at once.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
import time
from collections import defaultdict
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass

from pinlater._pinlater import JobBuffer, encode_descriptors
from pinlater.backends.base import RESERVATION_PREFIX, ClaimedJob
from pinlater.backends.sharded import DequeuedJob, ShardedBackend
from pinlater.backends.shardmap import Shard
from pinlater.config import Settings
from pinlater.errors import QueueNotFoundError, ShardConnectionError
from pinlater.server.metrics import Metrics

log = logging.getLogger(__name__)

#: (shard, priority, local_id, body, attempts_allowed, attempts_remaining, reserved_at_ms)
Entry = tuple[str, int, int, bytes, int, int, int]


@dataclass(frozen=True, slots=True)
class BrokerPolicy:
    buffer_size: int
    low_water: int
    hold_ms: int

    @classmethod
    def from_settings(cls, settings: Settings) -> BrokerPolicy:
        size = settings.broker_buffer_size
        return cls(size, int(size * settings.broker_low_water_fraction), settings.broker_hold_ms)

    @property
    def max_age_ms(self) -> int:
        """Entries older than this are released: half the hold, so the reservation is still live."""
        return max(self.hold_ms // 2, 1)


class DequeueBroker:
    def __init__(self, backend: ShardedBackend, policy: BrokerPolicy, metrics: Metrics) -> None:
        self.backend = backend
        self.policy = policy
        self.metrics = metrics
        host = socket.gethostname()[:40]
        #: This server's reservation string, unique per process start.
        self.reservation = f"{RESERVATION_PREFIX}{host}:{os.getpid()}:{secrets.token_hex(4)}"
        self._buffers: dict[str, JobBuffer] = {}
        self._refills: dict[str, asyncio.Task[int]] = {}
        self._background: set[asyncio.Task[None]] = set()
        self._release_task: asyncio.Task[None] | None = None
        self._closed = False
        backend.signals.listeners.append(self._on_ready)

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        self._release_task = asyncio.create_task(self._release_loop(), name="pinlater-broker-release")

    async def stop(self) -> None:
        """Stop refilling and release every buffered reservation at once."""
        self._closed = True
        if self._release_task is not None:
            self._release_task.cancel()
            try:
                await self._release_task
            except asyncio.CancelledError:
                pass
        for task in list(self._background):
            task.cancel()
        pending = [t for t in self._refills.values() if not t.done()]
        if pending:  # their reservations land in the buffers, then are released below
            await asyncio.gather(*pending, return_exceptions=True)
        await asyncio.gather(*(self._release(q, b.drain()) for q, b in self._buffers.items()))

    def buffered(self) -> int:
        """Jobs held in every buffer now."""
        return sum(len(b) for b in self._buffers.values())

    def buffer(self, queue: str) -> JobBuffer:
        buffer = self._buffers.get(queue)
        if buffer is None:
            buffer = self._buffers[queue] = JobBuffer(self.policy.buffer_size)
        return buffer

    # -- dequeue --------------------------------------------------------------------------------

    async def dequeue(self, queue: str, limit: int, source: str) -> list[DequeuedJob]:
        """Up to ``limit`` jobs from the queue's buffer, refilled first if it holds too few."""
        start = time.perf_counter()
        buffer = self.buffer(queue)
        out: list[DequeuedJob] = []
        refilled = False
        while len(out) < limit:
            if len(buffer) < limit - len(out) and not refilled:
                try:
                    await self._refill_once(queue)
                except QueueNotFoundError:
                    self._buffers.pop(queue, None)
                    raise
                refilled = True
            entries = buffer.take(limit - len(out))
            if not entries:
                break
            claimed = await self._claim(queue, entries, source)
            out.extend(claimed)
            if len(claimed) == len(entries) or refilled:
                break  # a lapsed entry is retried once, from what a refill brings
        if len(buffer) <= self.policy.low_water:
            self._refill_in_background(queue)
        self.metrics.timing("broker_dequeue", (time.perf_counter() - start) * 1000.0, True)
        return out

    async def _claim(self, queue: str, entries: list[Entry], source: str) -> list[DequeuedJob]:
        """Claim taken entries, one store call per shard; return those claimed, in take order."""
        claim = self.backend.new_claim(source)
        by_shard: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for shard_name, priority, local_id, *_ in entries:
            by_shard[shard_name].append((priority, local_id))
        names = list(by_shard)
        results = await asyncio.gather(
            *(self._claim_on(queue, name, by_shard[name], claim) for name in names), return_exceptions=True
        )
        claimed: set[tuple[str, int, int]] = set()
        for name, result in zip(names, results, strict=True):
            if isinstance(result, QueueNotFoundError):
                self._buffers.pop(queue, None)
                raise result
            if isinstance(result, BaseException):
                if not isinstance(result, ShardConnectionError):
                    raise result
                log.warning("broker: claim on shard %s failed (%s); %d jobs dropped", name, result, len(by_shard[name]))
                continue
            claimed.update((name, p, i) for p, i in result)
        out: list[DequeuedJob] = []
        for shard_name, priority, local_id, body, allowed, remaining, _at in entries:
            if (shard_name, priority, local_id) not in claimed:
                continue
            [descriptor] = encode_descriptors(queue, shard_name, [priority], [local_id])
            now = self.backend.clock.now_ms()
            out.append(DequeuedJob(descriptor, ClaimedJob(local_id, body, allowed, remaining, 0, now)))
        self.metrics.incr("broker_claimed", len(out))
        if len(out) < len(entries):
            self.metrics.incr("broker_lapsed", len(entries) - len(out))
        return out

    async def _claim_on(
        self, queue: str, shard_name: str, items: list[tuple[int, int]], claim: str
    ) -> list[tuple[int, int]]:
        shard = self.backend.shards.get(shard_name)
        if shard is None:  # removed by a config reload: its reservations simply lapse
            return []
        now = self.backend.clock.now_ms()
        return await self.backend.call_store(
            shard, shard.store.claim_reserved, queue, items, self.reservation, claim, now
        )

    # -- refills --------------------------------------------------------------------------------

    def _refill_once(self, queue: str) -> Awaitable[int]:
        """The queue's refill in flight, or a new one: concurrent callers share it."""
        task = self._refills.get(queue)
        if task is None or task.done():
            task = self._refills[queue] = asyncio.create_task(self._refill(queue), name=f"pinlater-refill-{queue}")
        return asyncio.shield(task)

    def _refill_in_background(self, queue: str) -> None:
        if self._closed or (queue in self._refills and not self._refills[queue].done()):
            return
        task = asyncio.create_task(self._background_refill(queue))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _background_refill(self, queue: str) -> None:
        try:
            await self._refill_once(queue)
        except QueueNotFoundError:
            self._buffers.pop(queue, None)
        except Exception as exc:
            log.warning("broker: background refill of %s failed: %s", queue, exc)

    def _on_ready(self, queue: str) -> None:
        """Jobs became ready on this server: top the buffer up (a better priority may be among them)."""
        buffer = self._buffers.get(queue)
        if buffer is not None and buffer.room > 0:
            self._refill_in_background(queue)

    async def _refill(self, queue: str) -> int:
        """Reserve up to the buffer's room, walking priorities and shards like a dequeue."""
        if self._closed:
            return 0
        buffer = self.buffer(queue)
        room = buffer.room
        if room <= 0:
            return 0
        hold_ms = self.policy.hold_ms

        def fetch(shard: Shard, priority: int, want: int, now: int) -> Awaitable[list[ClaimedJob]]:
            store = shard.store
            return self.backend.call_store(
                shard, store.reserve_jobs, queue, priority, want, self.reservation, now, hold_ms
            )

        batches = await self.backend.walk_ready(queue, room, fetch)
        self.metrics.incr("broker_refills")
        total = 0
        for batch in batches:
            jobs = [(j.local_id, j.body, j.attempts_allowed, j.attempts_remaining) for j in batch.jobs]
            rejected = set(buffer.push(batch.shard, batch.priority, jobs, batch.now_ms))
            total += len(jobs) - len(rejected)
            if rejected:  # cannot happen while refills are single-flight; release, never leak
                entries = [(batch.shard, batch.priority, i, b"", 0, 0, batch.now_ms) for i in rejected]
                await self._release(queue, entries)
        self.metrics.incr("broker_refill_jobs", total)
        if total:
            self.backend.signals.notify(queue)  # wake long polls: there is something to take
        return total

    # -- releases -------------------------------------------------------------------------------

    async def _release_loop(self) -> None:
        interval = max(self.policy.max_age_ms / 4000.0, 0.005)
        while True:
            await asyncio.sleep(interval)
            try:
                await self.release_old()
            except Exception:
                log.exception("broker: releasing old reservations failed")

    async def release_old(self) -> int:
        """Release every buffered entry older than half the hold; return how many."""
        cutoff = self.backend.clock.now_ms() - self.policy.max_age_ms
        total = 0
        for queue, buffer in list(self._buffers.items()):
            old = buffer.take_older_than(cutoff)
            if old:
                total += await self._release(queue, old)
        return total

    async def _release(self, queue: str, entries: Sequence[Entry]) -> int:
        """Release entries' reservations, one store call per shard; failures just lapse."""
        by_shard: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for shard_name, priority, local_id, *_ in entries:
            by_shard[shard_name].append((priority, local_id))
        released = 0
        for shard_name, items in by_shard.items():
            shard = self.backend.shards.get(shard_name)
            if shard is None:
                continue
            now = self.backend.clock.now_ms()
            try:
                released += await self.backend.call_store(
                    shard, shard.store.release_reservations, queue, items, self.reservation, now
                )
            except Exception as exc:  # the reservations lapse after the hold instead
                log.warning(
                    "broker: releasing %d jobs of %s on shard %s failed: %s", len(items), queue, shard_name, exc
                )
        self.metrics.incr("broker_released", released)
        return released
