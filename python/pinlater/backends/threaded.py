"""The hot path of a store whose client blocks (embedded SQLite, MySQL through PyMySQL).

``ThreadedHotPath`` runs the store's blocking methods on the server's thread pool (the
``offload`` the server hands ``ShardStore.hot_path``), so the server awaits every backend's hot
operations the same way. ``BlockingStore`` gives such a store its ``hot_path`` and ``aclose``.

The hot path carries the extension's job values (``NewJobBatch``, ``LocalIds``, ``ClaimedJobs``,
``AckGroup``, and the broker's ``ClaimItems``); a blocking store takes and gives Python
``NamedTuple`` jobs, so this adapter converts on the thread pool, beside the store call: tuples
made into their NamedTuple types without a Python frame per job. A store with a native hot path
needs no such conversion.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Sequence

from pinlater._pinlater import AckGroup, ClaimedJobs, ClaimItems, KeyedJobBatch, KeyedPlacement, LocalIds, NewJobBatch
from pinlater.backends.base import (
    DEQUEUE_BYTES,
    AckItem,
    Enqueued,
    HotPath,
    KeyedJob,
    NewJob,
    Offload,
    ShardStore,
    place_keyed_batch,
    sequential_ack_and_dequeue,
)

# The extension's tuples as the NamedTuples the blocking stores read, without a frame per job.
new_job = functools.partial(tuple.__new__, NewJob)
ack_item = functools.partial(tuple.__new__, AckItem)


def enqueue_batch(store: ShardStore, queue: str, jobs: NewJobBatch, now_ms: int) -> LocalIds:
    """``store.enqueue_jobs`` for a ``NewJobBatch``."""
    return LocalIds(store.enqueue_jobs(queue, list(map(new_job, jobs.to_list())), now_ms))


def dequeue_batch(
    store: ShardStore,
    queue: str,
    priority: int,
    limit: int,
    claim: str,
    now_ms: int,
    dry_run: bool,
    max_bytes: int = DEQUEUE_BYTES,
) -> ClaimedJobs:
    """``store.dequeue_jobs`` as ``ClaimedJobs``."""
    return ClaimedJobs(store.dequeue_jobs(queue, priority, limit, claim, now_ms, dry_run, max_bytes))


def ack_group(store: ShardStore, queue: str, acks: AckGroup, now_ms: int) -> None:
    """``store.ack_jobs`` for an ``AckGroup``."""
    store.ack_jobs(queue, list(map(ack_item, acks.succeeded())), list(map(ack_item, acks.failed())), now_ms)


def reserve_batch(
    store: ShardStore,
    queue: str,
    priority: int,
    limit: int,
    reservation: str,
    now_ms: int,
    hold_ms: int,
    max_bytes: int = DEQUEUE_BYTES,
) -> ClaimedJobs:
    """``store.reserve_jobs`` as ``ClaimedJobs``."""
    return ClaimedJobs(store.reserve_jobs(queue, priority, limit, reservation, now_ms, hold_ms, max_bytes))


def claim_batch(store: ShardStore, queue: str, items: ClaimItems, reservation: str, now_ms: int) -> list[int]:
    """``store.claim_reserved`` for ``ClaimItems``: the positions of the jobs not claimed."""
    listed = items.to_list()
    claimed = store.claim_reserved(queue, listed, reservation, now_ms)
    if len(claimed) == len(listed):
        return []
    got = set(claimed)
    return [at for at, (priority, local_id, _claim) in enumerate(listed) if (priority, local_id) not in got]


class ThreadedHotPath:
    """``HotPath`` over a blocking store: each operation is its method of the same name, run by
    ``offload`` (with the conversions above for enqueue, dequeue, ack, reserve and claim)."""

    __slots__ = ("_offload", "_store")

    def __init__(self, store: ShardStore, offload: Offload) -> None:
        self._store = store
        self._offload = offload

    async def enqueue_jobs(self, queue: str, jobs: NewJobBatch, now_ms: int) -> LocalIds:
        return await self._offload(enqueue_batch, self._store, queue, jobs, now_ms)

    async def enqueue_keyed_jobs(self, queue: str, jobs: Sequence[KeyedJob], now_ms: int) -> list[Enqueued]:
        return await self._offload(self._store.enqueue_keyed_jobs, queue, jobs, now_ms)

    async def enqueue_keyed_batch(self, queue: str, jobs: KeyedJobBatch, now_ms: int) -> KeyedPlacement:
        return await place_keyed_batch(self, queue, jobs, now_ms)

    async def dequeue_jobs(
        self,
        queue: str,
        priority: int,
        limit: int,
        claim: str,
        now_ms: int,
        dry_run: bool,
        max_bytes: int = DEQUEUE_BYTES,
    ) -> ClaimedJobs:
        return await self._offload(
            dequeue_batch, self._store, queue, priority, limit, claim, now_ms, dry_run, max_bytes
        )

    async def ack_jobs(self, queue: str, acks: AckGroup, now_ms: int) -> None:
        await self._offload(ack_group, self._store, queue, acks, now_ms)

    async def ack_and_dequeue_jobs(
        self,
        queue: str,
        acks: AckGroup,
        priority: int,
        limit: int,
        claim: str,
        now_ms: int,
        max_bytes: int = DEQUEUE_BYTES,
    ) -> ClaimedJobs:
        return await sequential_ack_and_dequeue(self, queue, acks, priority, limit, claim, now_ms, max_bytes)

    async def reserve_jobs(
        self,
        queue: str,
        priority: int,
        limit: int,
        reservation: str,
        now_ms: int,
        hold_ms: int,
        max_bytes: int = DEQUEUE_BYTES,
    ) -> ClaimedJobs:
        return await self._offload(
            reserve_batch, self._store, queue, priority, limit, reservation, now_ms, hold_ms, max_bytes
        )

    async def claim_reserved(self, queue: str, items: ClaimItems, reservation: str, now_ms: int) -> list[int]:
        return await self._offload(claim_batch, self._store, queue, items, reservation, now_ms)

    async def release_reservations(
        self, queue: str, items: Sequence[tuple[int, int]], reservation: str, now_ms: int
    ) -> int:
        return await self._offload(self._store.release_reservations, queue, items, reservation, now_ms)

    @property
    def reserves_behind_enqueue(self) -> bool:
        return False

    async def enqueue_and_reserve_jobs(
        self,
        queue: str,
        jobs: NewJobBatch,
        now_ms: int,
        priority: int,
        limit: int,
        reservation: str,
        hold_ms: int,
        max_bytes: int = DEQUEUE_BYTES,
    ) -> tuple[LocalIds, ClaimedJobs | None]:
        return await self.enqueue_jobs(queue, jobs, now_ms), None  # nothing to gain from the pair


class BrokerOnThreadPool:
    """The broker's three operations for a native hot path whose store still runs them in
    Python: through ``self._threaded`` (a ``ThreadedHotPath`` over that store), on the pool."""

    __slots__ = ()
    _threaded: ThreadedHotPath
    enqueue_jobs: Callable[[str, NewJobBatch, int], Awaitable[LocalIds]]  # the native store's own

    async def enqueue_keyed_jobs(self, queue: str, jobs: Sequence[KeyedJob], now_ms: int) -> list[Enqueued]:
        return await self._threaded.enqueue_keyed_jobs(queue, jobs, now_ms)

    async def enqueue_keyed_batch(self, queue: str, jobs: KeyedJobBatch, now_ms: int) -> KeyedPlacement:
        return await place_keyed_batch(self, queue, jobs, now_ms)  # enqueue_jobs: the native store's

    async def reserve_jobs(
        self,
        queue: str,
        priority: int,
        limit: int,
        reservation: str,
        now_ms: int,
        hold_ms: int,
        max_bytes: int = DEQUEUE_BYTES,
    ) -> ClaimedJobs:
        return await self._threaded.reserve_jobs(queue, priority, limit, reservation, now_ms, hold_ms, max_bytes)

    async def claim_reserved(self, queue: str, items: ClaimItems, reservation: str, now_ms: int) -> list[int]:
        return await self._threaded.claim_reserved(queue, items, reservation, now_ms)

    async def release_reservations(
        self, queue: str, items: Sequence[tuple[int, int]], reservation: str, now_ms: int
    ) -> int:
        return await self._threaded.release_reservations(queue, items, reservation, now_ms)

    @property
    def reserves_behind_enqueue(self) -> bool:
        return False

    async def enqueue_and_reserve_jobs(
        self,
        queue: str,
        jobs: NewJobBatch,
        now_ms: int,
        priority: int,
        limit: int,
        reservation: str,
        hold_ms: int,
        max_bytes: int = DEQUEUE_BYTES,
    ) -> tuple[LocalIds, ClaimedJobs | None]:
        """The enqueue alone: this store's reserve runs on the thread pool, with nothing to
        gain from going with the enqueue."""
        return await self.enqueue_jobs(queue, jobs, now_ms), None


class BlockingStore:
    """Mixin for a ``ShardStore`` whose client blocks: its hot path runs on the thread pool and
    it opens nothing on the event loop."""

    def hot_path(self: ShardStore, offload: Offload) -> HotPath:
        return ThreadedHotPath(self, offload)

    def interrupt(self) -> None:
        """No call of this store runs long (``ShardStore.interrupt``)."""

    async def aclose(self) -> None:
        """Nothing was opened on the loop."""
