"""``NativeHotPath``: the Redis store's hot path with no Python object per job.

``enqueue_jobs``, ``dequeue_jobs`` and ``ack_jobs`` take and give the batches held in Rust
(``NewJobBatch``, ``ClaimedJobs``, ``AckGroup``, ``LocalIds``): the extension packs each script's
``EVALSHA`` from the batch (``redis_*_command``, the keys and arguments of ``store.py``'s
``_enqueue_call``, ``_dequeue_call`` and ``_ack_call``), ``HotClient`` sends it on the store's
own pipelined connection, and the extension reads the reply into the batch the wire encoder
takes. Errors are the blocking store's (``QueueNotFoundError`` for -1, ``ShardConnectionError``,
``StoreMemoryFullError``), and evicted jobs the scripts report go to the store's counter.

The dequeue broker's refills and claims (``reserve_jobs``, ``claim_reserved``; the broker is
off by default) go the same way: the reserve script's reply has the dequeue's rows, read into
``ClaimedJobs`` by the same reader (its command, a few keys and arguments per call, is packed by
``redis_pack_command``); a ``ClaimItems`` is packed whole (``redis_claim_command``), and its
reply (the numbers of the jobs claimed) read by ``redis_ids_reply``.

Keyed enqueues (``enqueue_keyed_jobs``: jobs with dedup or group keys or an expiry, handed over as
``KeyedJob``s) take the same way: their ``KEYS`` and ``ARGV`` are ``dedup.enqueue_keyed_call``'s,
as the blocking store's, packed by ``redis_pack_command`` and sent on the hot connection (not on a
worker thread); the reply is read by ``redis_ids_reply`` (three numbers per job).

The queue's rules (``RedisStore.set_queue_rules``) reach the scripts as the blocking calls send
them: a ``RedisScriptTail`` held in Rust (``rules.py``), built once per rules change and appended
to the packed command; none for a dequeue, reserve or claim of a queue without a cap or a group
rate, so the plain hot path packs what it always did. Releases (rare: stale
entries and shutdown) go through the redis.asyncio path (``store.aio``) with Python values.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from pinlater._pinlater import (
    AckGroup,
    ClaimedJobs,
    ClaimItems,
    KeyedJobBatch,
    KeyedPlacement,
    LocalIds,
    NewJobBatch,
    redis_ack_command,
    redis_ack_reply,
    redis_claim_command,
    redis_claimed_reply,
    redis_dequeue_command,
    redis_enqueue_command,
    redis_enqueue_keyed_command,
    redis_ids_reply,
    redis_int_reply,
    redis_keyed_placement,
    redis_pack_command,
    redis_require_queue_command,
)
from pinlater.backends.base import DEQUEUE_BYTES, Enqueued, JobState, KeyedJob, sequential_ack_and_dequeue
from pinlater.backends.redis import dedup
from pinlater.backends.redis.hot_client import HotScripts
from pinlater.backends.redis.keys import seconds_arg
from pinlater.backends.redis.keys_compact import ending_keys, ready_keys
from pinlater.backends.redis.rules import DEQUEUE, GROUPS, build_tail, native_tail
from pinlater.errors import QueueNotFoundError

if TYPE_CHECKING:
    from pinlater.backends.redis.store import RedisStore

_NO_JOBS = ClaimedJobs([])


class NativeHotPath:
    """``RedisStore``'s ``HotPath`` (see the module docstring)."""

    def __init__(self, store: RedisStore, client: HotScripts) -> None:
        self._store = store
        self._shard = store.name
        self._client = client
        self._sha = client.shas  # updated in place if the layout is found only later
        self._shard_layout = store.layout

    @property
    def _layout(self) -> str:
        return self._shard_layout.name  # (read inline on the three hot calls: a property is a call)

    async def enqueue_jobs(self, queue: str, jobs: NewJobBatch, now_ms: int) -> LocalIds:
        layout = self._shard_layout.name
        command = redis_enqueue_command(self._sha["enqueue_jobs"], self._shard, queue, jobs, now_ms, layout)
        ids = await self._client.call("enqueue_jobs", command, redis_ids_reply)
        if ids is None:
            raise QueueNotFoundError(queue)
        return ids

    async def enqueue_keyed_batch(self, queue: str, jobs: KeyedJobBatch, now_ms: int) -> KeyedPlacement:
        """``enqueue_keyed_jobs`` of the whole request in one script call, its arguments packed
        in Rust from the batch (``redis_enqueue_keyed_command``: no Python value per job), each
        dedup key sent once; its jobs without a key go in the same call, as jobs of no group."""
        store = self._store
        keys = store._keys(queue)
        num_priorities = store._num_priorities
        m = max(num_priorities, jobs.max_priority)
        per = dedup.keys_per_priority(keys)
        while True:
            if m == num_priorities:
                tail = store.rules.native(queue, GROUPS)
            else:
                tail = native_tail(build_tail(keys, store.rules.of(queue), GROUPS, m))
            command = redis_enqueue_keyed_command(
                self._sha["enqueue_keyed_jobs"],
                dedup.enqueue_keyed_keys(keys, m),
                queue,
                keys.jobs_arg,
                now_ms,
                m,
                per,
                dedup.HELD_FOREVER_MS,
                jobs,
                tail,
                dedup.takes_uniform_calls(keys),
            )
            out = await self._client.call("enqueue_keyed_jobs", command, redis_ids_reply)
            if out is None:
                raise QueueNotFoundError(queue)
            placement, beyond = redis_keyed_placement(jobs, out, dedup.PRIORITY_BEYOND_KEYS)
            if placement is None:
                m = beyond
                continue
            return placement

    async def enqueue_keyed_jobs(self, queue: str, jobs: Sequence[KeyedJob], now_ms: int) -> list[Enqueued]:
        """The blocking store's script call (``RedisStore.enqueue_keyed_jobs``, ``dedup.py``),
        its arguments built as there and packed by the extension, sent on the pipelined hot
        connection rather than on a worker thread."""
        store = self._store
        keys = store._keys(queue)
        num_priorities = store._num_priorities
        m = dedup.first_priorities(jobs, num_priorities)
        while True:
            if m == num_priorities:
                tail = store.rules.tail(queue, GROUPS)
            else:
                tail = build_tail(keys, store.rules.of(queue), GROUPS, m)
            key_list, args = dedup.enqueue_keyed_call(keys, queue, jobs, now_ms, m, tail)
            sha = self._sha["enqueue_keyed_jobs"]
            command = redis_pack_command(("EVALSHA", sha, len(key_list), *key_list, *args))
            out = await self._client.call("enqueue_keyed_jobs", command, redis_ids_reply)
            if out is None:
                raise QueueNotFoundError(queue)
            answers, beyond = dedup.enqueued_reply(out.to_list())
            if answers is None:
                m = beyond
                continue
            return answers

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
        if limit <= 0:  # only whether the queue exists, as the blocking store answers
            command = redis_require_queue_command(self._sha["count_jobs"], self._shard, queue, self._layout)
            if await self._client.call("count_jobs", command, redis_int_reply) is None:
                raise QueueNotFoundError(queue)
            return _NO_JOBS
        sha = self._sha["dequeue_jobs"]
        tail = self._store.rules.native(queue, DEQUEUE)
        layout = self._shard_layout.name
        command = redis_dequeue_command(
            sha, self._shard, queue, priority, limit, claim, now_ms, dry_run, max_bytes, layout, tail
        )
        out = await self._client.call("dequeue_jobs", command, redis_claimed_reply)
        if out is None:
            raise QueueNotFoundError(queue)
        jobs, evicted = out
        if evicted:
            self._store._shard.count_evicted(evicted)
        return jobs

    async def ack_jobs(self, queue: str, acks: AckGroup, now_ms: int) -> None:
        tail = self._store.rules.native(queue, GROUPS)
        command = redis_ack_command(self._sha["ack_jobs"], self._shard, queue, acks, now_ms, self._layout, tail)
        evicted = await self._client.call("ack_jobs", command, redis_ack_reply)
        if evicted is None:
            raise QueueNotFoundError(queue)
        if evicted:
            self._store._shard.count_evicted(evicted)

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
        """Both scripts in one write (``HotScripts.call_pair``): Redis runs the ack's first."""
        if acks.failed():
            return await sequential_ack_and_dequeue(self, queue, acks, priority, limit, claim, now_ms, max_bytes)
        sha, layout, shard = self._sha, self._shard_layout.name, self._shard
        rules = self._store.rules
        ack = redis_ack_command(sha["ack_jobs"], shard, queue, acks, now_ms, layout, rules.native(queue, GROUPS))
        tail = rules.native(queue, DEQUEUE)
        dequeue = redis_dequeue_command(
            sha["dequeue_jobs"], shard, queue, priority, limit, claim, now_ms, False, max_bytes, layout, tail
        )
        evicted, out = await self._client.call_pair(
            ("ack_jobs", ack, redis_ack_reply), ("dequeue_jobs", dequeue, redis_claimed_reply)
        )
        if evicted is None or out is None:
            raise QueueNotFoundError(queue)
        jobs, more = out
        if evicted or more:
            self._store._shard.count_evicted(evicted + more)
        return jobs

    # -- the dequeue broker ------------------------------------------------------------------------

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
        if limit <= 0:  # only whether the queue exists, as the blocking store answers
            return await self.dequeue_jobs(queue, priority, 0, "", now_ms, False)
        command = self._reserve_command(queue, priority, limit, reservation, now_ms, hold_ms, max_bytes)
        out = await self._client.call("reserve_jobs", command, redis_claimed_reply)
        if out is None:
            raise QueueNotFoundError(queue)
        return self._counted(out)

    @property
    def reserves_behind_enqueue(self) -> bool:
        return self._client.pipelines

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
        """The reserve written behind the enqueue on the same connection (``call_then``)."""
        enqueue = redis_enqueue_command(self._sha["enqueue_jobs"], self._shard, queue, jobs, now_ms, self._layout)
        reserve = self._reserve_command(queue, priority, limit, reservation, now_ms, hold_ms, max_bytes)
        ids, out = await self._client.call_then(
            ("enqueue_jobs", enqueue, redis_ids_reply), ("reserve_jobs", reserve, redis_claimed_reply)
        )
        if ids is None:
            raise QueueNotFoundError(queue)
        return ids, None if out is None else self._counted(out)

    def _counted(self, out: tuple[ClaimedJobs, int]) -> ClaimedJobs:
        """A claim's or reservation's jobs; the records it found evicted are counted."""
        jobs, evicted = out
        if evicted:
            self._store._shard.count_evicted(evicted)
        return jobs

    def _reserve_command(
        self, queue: str, priority: int, limit: int, reservation: str, now_ms: int, hold_ms: int, max_bytes: int
    ) -> bytes:
        keys = self._store._keys(queue)
        ending = [*ready_keys(keys, priority), *ending_keys(keys, priority)]
        tail_keys, tail_args = self._store.rules.tail(queue, DEQUEUE)
        return redis_pack_command(
            (
                "EVALSHA",
                self._sha["reserve_jobs"],
                5 + len(ending) + len(tail_keys),
                keys.exists_key,
                keys.set_key(priority, JobState.PENDING),
                *keys.hold_keys(priority),
                *ending,
                *tail_keys,
                queue,
                keys.jobs_arg,
                seconds_arg(now_ms),
                limit,
                reservation,
                seconds_arg(now_ms + hold_ms),
                max_bytes,
                *tail_args,
            )
        )

    async def claim_reserved(self, queue: str, items: ClaimItems, reservation: str, now_ms: int) -> list[int]:
        sha = self._sha["claim_reserved"]
        tail = self._store.rules.native(queue, DEQUEUE)
        command = redis_claim_command(sha, self._shard, queue, items, reservation, now_ms, self._layout, tail)
        claimed = await self._client.call("claim_reserved", command, redis_ids_reply)
        if claimed is None:
            raise QueueNotFoundError(queue)
        if len(claimed) == len(items):
            return []
        got = set(claimed.to_list())  # the script numbers the jobs from 1, in the order of ``items``
        return [at for at in range(len(items)) if at + 1 not in got]

    async def release_reservations(
        self, queue: str, items: Sequence[tuple[int, int]], reservation: str, now_ms: int
    ) -> int:
        return await self._store.aio.release_reservations(queue, items, reservation, now_ms)

    # -- lifecycle -------------------------------------------------------------------------------

    async def aclose(self) -> None:
        await self._client.aclose()

    def forget(self) -> None:
        """Drop the connection without awaiting it (the blocking ``close``)."""
        self._client.forget()
