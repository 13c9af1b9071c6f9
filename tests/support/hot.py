"""``ShardedBackend``'s hot operations with Python values, for tests: the backend carries the
extension's job values (``NewJobBatch``, ``LocalIds``, ``ClaimedJobs``, ``AckGroup``); these
helpers build and read them as the server does, so tests speak in descriptors and NamedTuples."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from pinlater._pinlater import AckGroup, NewJobBatch, encode_descriptors
from pinlater.backends.base import AckItem, ClaimedJob, NewJob, ShardStore
from pinlater.backends.sharded import DequeuedJob, ShardedBackend
from pinlater.backends.shardmap import Shard, ShardMap
from pinlater.clock import ManualClock


@contextmanager
def one_shard(store: ShardStore, queue: str) -> Iterator[ShardedBackend]:
    """A ``ShardedBackend`` of three priorities on ``store`` alone, on a ``ManualClock``, with
    ``queue`` created there; its threads stopped after."""
    store.create_queue(queue, 3)
    backend = ShardedBackend(ShardMap([Shard(store.name, store)]), num_priorities=3, parallelism=4, clock=ManualClock())
    try:
        yield backend
    finally:
        backend._executor.shutdown(wait=True)


async def enqueue(backend: ShardedBackend, queue: str, jobs: Sequence[NewJob]) -> list[str]:
    """``backend.enqueue_jobs``; the jobs' descriptors, in order."""
    shard, ids = await backend.enqueue_jobs(queue, NewJobBatch(list(jobs)))
    return encode_descriptors(queue, shard, [j.priority for j in jobs], ids.to_list())


async def dequeue(
    backend: ShardedBackend, queue: str, limit: int, source: str, *, dry_run: bool = False, coverage: float = 1.0
) -> list[DequeuedJob]:
    """``backend.dequeue_jobs``; the jobs with their descriptors, in walk order."""
    out: list[DequeuedJob] = []
    for batch in await backend.dequeue_jobs(queue, limit, source, dry_run=dry_run, coverage=coverage):
        jobs = [ClaimedJob._make(j) for j in batch.jobs.to_list()]
        ids = [j.local_id for j in jobs]
        descriptors = encode_descriptors(queue, batch.shard, [batch.priority] * len(ids), ids)
        out.extend(DequeuedJob(d, j) for d, j in zip(descriptors, jobs, strict=True))
    return out


async def ack(
    backend: ShardedBackend,
    queue: str,
    succeeded: Sequence[tuple[str, AckItem]] = (),
    failed: Sequence[tuple[str, AckItem]] = (),
) -> None:
    """``backend.ack_jobs`` for ``(shard, AckItem)`` pairs, grouped by shard as the server does."""
    by_shard: dict[str, tuple[list[AckItem], list[AckItem]]] = {}
    for shard, item in succeeded:
        by_shard.setdefault(shard, ([], []))[0].append(item)
    for shard, item in failed:
        by_shard.setdefault(shard, ([], []))[1].append(item)
    groups = [(shard, AckGroup(ok, bad)) for shard, (ok, bad) in by_shard.items()]
    await backend.ack_jobs(queue, groups, [(shard, item.priority, item.retry_delay_ms) for shard, item in failed])
