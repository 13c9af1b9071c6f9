"""A store's hot operations as a test drives them: through its blocking methods, or through its
hot path as the server calls it (on an event loop; the embedded store's on its Rust writer,
Redis's packed in Rust), so one conformance test covers both."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from pinlater._pinlater import AckGroup, ClaimItems, KeyedJobBatch
from pinlater.backends.base import AckItem, ClaimedJob, Enqueued, KeyedJob, ShardStore
from pinlater.backends.sharded import ShardedBackend
from pinlater.backends.shardmap import Shard, ShardMap

T0 = 1_700_000_000_000
CLAIM = "claim-0001:worker:host-a"
RESERVATION = "~r|groups"


class Ops:
    """The hot operations, through the store's blocking methods or through its hot path."""

    def __init__(self, store: ShardStore, queue: str, hot: bool) -> None:
        self.store = store
        self.queue = queue
        self._backend: ShardedBackend | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        if hot:
            shard = Shard(store.name, store)
            self._backend = ShardedBackend(ShardMap([shard]), num_priorities=3, parallelism=2)
            self._hot = self._backend.hot_path(shard)
            self._loop = asyncio.new_event_loop()

    def close(self) -> None:
        if self._backend is not None and self._loop is not None:
            self._loop.run_until_complete(self._backend.aclose())
            self._loop.close()
            self._backend._executor.shutdown(wait=True)  # the store fixture closes the store

    def enqueue(self, jobs: Sequence[KeyedJob], now: int = T0) -> list[Enqueued]:
        """Through the hot path as the server enqueues a request of one shard's jobs: the
        request whole (``enqueue_keyed_batch``)."""
        if self._loop is None:
            return self.store.enqueue_keyed_jobs(self.queue, jobs, now)
        batch = KeyedJobBatch([tuple(j.job) for j in jobs], [tuple(j)[1:] for j in jobs])
        placement = self._loop.run_until_complete(self._hot.enqueue_keyed_batch(self.queue, batch, now))
        return [Enqueued(*placed) for placed in placement.to_list()]

    def dequeue(self, priority: int, limit: int, now: int = T0, dry_run: bool = False) -> list[ClaimedJob]:
        if self._loop is None:
            return self.store.dequeue_jobs(self.queue, priority, limit, CLAIM, now, dry_run)
        got = self._loop.run_until_complete(self._hot.dequeue_jobs(self.queue, priority, limit, CLAIM, now, dry_run))
        return [ClaimedJob._make(j) for j in got.to_list()]

    def ack(self, succeeded: Sequence[AckItem] = (), failed: Sequence[AckItem] = (), now: int = T0) -> None:
        if self._loop is None:
            self.store.ack_jobs(self.queue, succeeded, failed, now)
            return
        self._loop.run_until_complete(self._hot.ack_jobs(self.queue, AckGroup(list(succeeded), list(failed)), now))

    def reserve(self, priority: int, limit: int, now: int = T0) -> list[ClaimedJob]:
        if self._loop is None:
            return self.store.reserve_jobs(self.queue, priority, limit, RESERVATION, now, 60_000)
        got = self._loop.run_until_complete(
            self._hot.reserve_jobs(self.queue, priority, limit, RESERVATION, now, 60_000)
        )
        return [ClaimedJob._make(j) for j in got.to_list()]

    def claim_reserved(self, keys: Sequence[tuple[int, int]], now: int = T0) -> int:
        items = [(p, i, CLAIM) for p, i in keys]
        if self._loop is None:
            return len(self.store.claim_reserved(self.queue, items, RESERVATION, now))
        unclaimed = self._loop.run_until_complete(
            self._hot.claim_reserved(self.queue, ClaimItems(items), RESERVATION, now)
        )
        return len(items) - len(unclaimed)
