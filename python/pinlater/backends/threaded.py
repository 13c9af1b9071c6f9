"""The hot path of a store whose client blocks (embedded SQLite, MySQL through PyMySQL).

``ThreadedHotPath`` runs the store's blocking methods on the server's thread pool (the
``offload`` the server hands ``ShardStore.hot_path``), so the server awaits every backend's hot
operations the same way. ``BlockingStore`` gives such a store its ``hot_path`` and ``aclose``.
"""

from __future__ import annotations

from collections.abc import Sequence

from pinlater.backends.base import AckItem, ClaimedJob, HotPath, NewJob, Offload, ShardStore


class ThreadedHotPath:
    """``HotPath`` over a blocking store: each operation is its method of the same name, run by
    ``offload``."""

    __slots__ = ("_offload", "_store")

    def __init__(self, store: ShardStore, offload: Offload) -> None:
        self._store = store
        self._offload = offload

    async def enqueue_jobs(self, queue: str, jobs: Sequence[NewJob], now_ms: int) -> list[int]:
        return await self._offload(self._store.enqueue_jobs, queue, jobs, now_ms)

    async def dequeue_jobs(
        self, queue: str, priority: int, limit: int, claim: str, now_ms: int, dry_run: bool
    ) -> list[ClaimedJob]:
        return await self._offload(self._store.dequeue_jobs, queue, priority, limit, claim, now_ms, dry_run)

    async def ack_jobs(self, queue: str, succeeded: Sequence[AckItem], failed: Sequence[AckItem], now_ms: int) -> None:
        await self._offload(self._store.ack_jobs, queue, succeeded, failed, now_ms)

    async def reserve_jobs(
        self, queue: str, priority: int, limit: int, reservation: str, now_ms: int, hold_ms: int
    ) -> list[ClaimedJob]:
        return await self._offload(self._store.reserve_jobs, queue, priority, limit, reservation, now_ms, hold_ms)

    async def claim_reserved(
        self, queue: str, items: Sequence[tuple[int, int, str]], reservation: str, now_ms: int
    ) -> list[tuple[int, int]]:
        return await self._offload(self._store.claim_reserved, queue, items, reservation, now_ms)

    async def release_reservations(
        self, queue: str, items: Sequence[tuple[int, int]], reservation: str, now_ms: int
    ) -> int:
        return await self._offload(self._store.release_reservations, queue, items, reservation, now_ms)


class BlockingStore:
    """Mixin for a ``ShardStore`` whose client blocks: its hot path runs on the thread pool and
    it opens nothing on the event loop."""

    def hot_path(self: ShardStore, offload: Offload) -> HotPath:
        return ThreadedHotPath(self, offload)

    async def aclose(self) -> None:
        """Nothing was opened on the loop."""
