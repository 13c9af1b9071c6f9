"""The background monitor: resurrects timed-out claims, expires PENDING jobs past their expiry,
deletes finished jobs, and forgets the dedup key records of jobs that are gone.

One task per server walks every shard every BACKEND_MONITOR_THREAD_DELAY_SECONDS. For each
queue and priority it makes three sweeps of bounded store calls (at most
BACKEND_MONITOR_UPDATE_MAX_SIZE jobs each): claims older than the claim timeout are treated as
failures (the job returns to PENDING with one attempt less, or FAILED when none is left), and
SUCCEEDED / FAILED jobs older than their TTLs are deleted. A sweep calls again while its call did
its whole limit, up to SWEEP_CALLS calls: with one call a pass, as the original made, the GC
deleted 100 jobs a second per queue, priority and shard at the defaults, so a queue that finished
more than that piled up its jobs for good, and 500,000 claims of a crashed worker took 80
minutes to come back. Then PENDING jobs past their ``expireAtTimestampMillis`` expire
(``expire_jobs``: FAILED, "expired"; the store counts them), up to two bounded calls per priority,
stopping at one that expires fewer than its limit. Then bounded calls forget the queue's dedup key
records whose window has passed and whose job is gone (``gc_dedup_keys``): as many calls as the
finished-job sweeps made (two per priority at least), so records go as fast as their jobs, stopping early
at a call that forgets none. If one fails for a reason other than the shard or the queue being gone, that is
logged and the pass goes on with the next queue. Last, it reads the queue's ordered groups
(``group_counts``: one call, on stores that keep groups), which ``/metrics`` exports as of the
last pass (``Monitor.group_counts``). What the sweeps did is counted per queue under the
original monitor's names (``QUEUE_COUNTERS``: ``{queue}_timeout_done`` and the like). A queue
whose sweeps fail for a reason of its own (its data, a script's error, rows locked past the
retries) is logged and passed over until the next pass; only a shard that does not answer, or
a queue gone, ends its steps early (before, any error ended the shard's pass, so the queues
after it went unswept for as long as it lasted: claims of crashed workers held past their
timeout). Several servers on one store may run monitors
at once: each step is an atomic guarded store operation, so they never double-apply.

Before its queues, a shard is asked which of them hold nothing for these sweeps
(``monitor_idle``: on Redis one existence check of a few keys per queue, many queues a call; on
the embedded store one read of a few index probes per queue; on MySQL a read of the data
dictionary and a UNION ALL of an index probe per table, a thousand tables a statement), and those are
skipped. The sweeps cost about a dozen store calls per queue and pass however empty the queue:
with 1,000 idle queues, that was a quarter of a core of the server and 5% of Redis' at the
default 10 s interval on one Redis shard, a tenth of a core on the embedded store.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from pinlater.backends.base import GroupCounts, JobState, Resurrected
from pinlater.backends.sharded import ShardedBackend
from pinlater.backends.shardmap import Shard
from pinlater.config import Settings
from pinlater.counters import Counters
from pinlater.errors import PinLaterError, QueueNotFoundError, ShardConnectionError

log = logging.getLogger(__name__)

HOUR_MS = 3_600_000
#: Most calls one sweep (of a queue, priority and shard) makes in one pass, each of
#: BACKEND_MONITOR_UPDATE_MAX_SIZE jobs, while each did its whole limit: 100,000 jobs a pass, 10,000
#: a second at the defaults, so a pass stays bounded and still keeps up with a busy queue.
SWEEP_CALLS = 100
#: What the monitor counts per queue, as ``{queue}_{kind}``: the original's monitor's names.
QUEUE_COUNTERS = ("timeout_done", "timeout_retry", "timeout_evict", "succeeded_gc", "failed_gc")
#: What a pass counts (each also a counter, ``monitor_{name}``).
TOTALS = ("resurrected", "gc_succeeded", "gc_failed", "gc_dedup_keys", "expired", "idle_skipped")


@dataclass(frozen=True, slots=True)
class MonitorPolicy:
    interval_seconds: float
    max_per_pass: int
    claim_timeout_ms: int
    succeeded_ttl_ms: int
    failed_ttl_ms: int

    @classmethod
    def from_settings(cls, settings: Settings) -> MonitorPolicy:
        return cls(
            interval_seconds=settings.backend_monitor_thread_delay_seconds,
            max_per_pass=settings.backend_monitor_update_max_size,
            claim_timeout_ms=int(settings.backend_monitor_job_claimed_timeout_seconds * 1000),
            succeeded_ttl_ms=int(settings.backend_monitor_job_succeeded_gc_ttl_hours * HOUR_MS),
            failed_ttl_ms=int(settings.backend_monitor_job_failed_gc_ttl_hours * HOUR_MS),
        )


class Monitor:
    def __init__(self, backend: ShardedBackend, policy: MonitorPolicy, metrics: Counters) -> None:
        self.backend = backend
        self.policy = policy
        self.metrics = metrics
        self._task: asyncio.Task[None] | None = None
        self.passes = 0
        #: Each queue's ordered groups as the last pass counted them, summed over the shards it
        #: reached (queues without a group left out).
        self.group_counts: dict[str, GroupCounts] = {}
        self._counting: dict[str, GroupCounts] = {}

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="pinlater-monitor")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None

    async def _run(self) -> None:
        while True:
            await self.run_once()
            await asyncio.sleep(self.policy.interval_seconds)

    async def run_once(self) -> dict[str, int]:
        """One pass over every shard; returns totals (resurrected, gc_succeeded, gc_failed,
        gc_dedup_keys, expired; idle_skipped: the queues of a shard passed over as idle)."""
        totals = dict.fromkeys(TOTALS, 0)
        self._counting = {}
        for shard in self.backend.shards.all():
            if not shard.healthy:
                continue
            try:
                shard_totals = await self._shard_pass(shard)
            except PinLaterError as exc:
                log.warning("monitor pass on shard %s failed: %s", shard.name, exc)
                continue
            except Exception:
                log.exception("monitor pass on shard %s failed unexpectedly", shard.name)
                continue
            for key, value in shard_totals.items():
                totals[key] += value
        for key, value in totals.items():
            self.metrics.incr(f"monitor_{key}", value)
        self.group_counts = self._counting
        self.backend.note_grouped(self._counting)
        self.passes += 1
        return totals

    async def _shard_pass(self, shard: Shard) -> dict[str, int]:
        names = sorted(await self.backend.call_store(shard, shard.store.get_queue_names))
        try:
            idle = await self.backend.call_store(shard, shard.store.monitor_idle, names, self.backend.num_priorities)
        except Exception as exc:
            # A shortcut, not a sweep: if the check fails, every queue gets its pass as before
            # the check existed, whatever the error. A Redis Cluster migrating a slot answers
            # TRYAGAIN (a ShardConnectionError) to the one pipeline of every queue's check, though
            # the queues of the other slots can be swept; a shard really gone fails the sweeps.
            log.warning("monitor: shard %s could not name its idle queues (%s); sweeping every queue", shard.name, exc)
            idle = set()
        totals = dict.fromkeys(TOTALS, 0)
        totals["idle_skipped"] = len(idle)
        failed: list[str] = []  # queues whose sweeps failed this pass
        kinds: set[type[BaseException]] = set()  # each kind of error logged once a pass
        for queue in names:
            if queue in idle:
                continue
            try:
                await self._queue_pass(shard, queue, totals)
            except QueueNotFoundError:  # deleted since the listing: the rest of the shard goes on
                continue
            except Exception as exc:
                # one queue's error (its data, a script, its rows locked past the retries) is its
                # own: the claims of the queues after it on the shard are still rescued, their
                # finished jobs collected, their expiries run; a shard that does not answer ends
                # the pass on it (the next one tries again)
                if isinstance(exc, ShardConnectionError) and not exc.contention:
                    raise
                failed.append(queue)
                if type(exc) not in kinds:  # (a store's error a warning; anything else a bug's traceback)
                    kinds.add(type(exc))
                    store_error = isinstance(exc, PinLaterError)
                    log.log(
                        logging.WARNING if store_error else logging.ERROR,
                        "monitor: queue %s on shard %s skipped this pass: %s",
                        queue,
                        shard.name,
                        exc if store_error else repr(exc),
                        exc_info=not store_error,
                    )
        if len(failed) > 1:  # (one line for all: a shard-wide error had written one per queue)
            shown = ", ".join(failed[:5]) + (", ..." if len(failed) > 5 else "")
            log.warning("monitor: %d queues on shard %s skipped this pass: %s", len(failed), shard.name, shown)
        if totals["resurrected"]:
            self.backend.forget_empty(shard.name)
            log.info("shard %s: %d timed-out claims resurrected", shard.name, totals["resurrected"])
        return totals

    async def _sweep(
        self,
        shard: Shard,
        fn: Callable[..., int],
        args_at: Callable[[int], tuple[object, ...]],
        each: Callable[[int], None] | None = None,
    ) -> tuple[int, int]:
        """``fn(*args_at(now))`` on the shard's store again while it did the whole limit, at most
        ``SWEEP_CALLS`` times: the jobs done and the calls made (``each`` is given what each call
        answered)."""
        done = calls = 0
        while calls < SWEEP_CALLS:
            n: int = await self.backend.call_store(shard, fn, *args_at(self.backend.clock.now_ms()))
            if each is not None:
                each(n)
            done += n
            calls += 1
            if n < self.policy.max_per_pass:
                break
        return done, calls

    async def _queue_pass(self, shard: Shard, queue: str, totals: dict[str, int]) -> None:
        """The three bounded sweeps of one queue on one shard, each priority, then the dedup keys
        whose jobs are gone; adds to ``totals``, and counts the queue's ``QUEUE_COUNTERS``."""
        # the original's per-queue counters, summed over the priorities: claims timed out that
        # failed, were retried, had lost their job (Redis' eviction); finished jobs collected
        counted = dict.fromkeys(QUEUE_COUNTERS, 0)

        def resurrected(done: int) -> None:
            split = done if isinstance(done, Resurrected) else Resurrected(done)
            counted["timeout_done"] += split.failed
            counted["timeout_retry"] += split.retried
            counted["timeout_evict"] += split.evicted

        try:
            await self._sweeps(shard, queue, totals, counted, resurrected)
        finally:  # what was done is counted, though a later step failed
            for kind, value in counted.items():
                if value:
                    self.metrics.incr(f"{queue}_{kind}", value)

    async def _sweeps(
        self,
        shard: Shard,
        queue: str,
        totals: dict[str, int],
        counted: dict[str, int],
        resurrected: Callable[[int], None],
    ) -> None:
        p = self.policy
        call = self.backend.call_store
        gc_calls = 0
        for priority in range(1, self.backend.num_priorities + 1):

            def resurrect_args(now: int, priority: int = priority) -> tuple[object, ...]:
                return (queue, priority, now - p.claim_timeout_ms, p.max_per_pass, now)

            def gc_args(state: JobState, ttl_ms: int, priority: int = priority) -> Callable[[int], tuple[object, ...]]:
                return lambda now: (queue, priority, state, now - ttl_ms, p.max_per_pass)

            done, _ = await self._sweep(shard, shard.store.resurrect_timed_out_jobs, resurrect_args, resurrected)
            totals["resurrected"] += done
            for state, ttl_ms, key, kind in (
                (JobState.SUCCEEDED, p.succeeded_ttl_ms, "gc_succeeded", "succeeded_gc"),
                (JobState.FAILED, p.failed_ttl_ms, "gc_failed", "failed_gc"),
            ):
                done, calls = await self._sweep(shard, shard.store.gc_finished_jobs, gc_args(state, ttl_ms))
                totals[key] += done
                counted[kind] += done
                gc_calls += calls
        for _ in range(2 * self.backend.num_priorities):
            now = self.backend.clock.now_ms()
            expired = await call(shard, shard.store.expire_jobs, queue, now, p.max_per_pass)
            totals["expired"] += expired
            if expired < p.max_per_pass:
                break
        try:
            for _ in range(max(2 * self.backend.num_priorities, gc_calls)):
                now = self.backend.clock.now_ms()
                forgotten = await call(shard, shard.store.gc_dedup_keys, queue, now, p.max_per_pass)
                totals["gc_dedup_keys"] += forgotten
                if not forgotten:
                    break
        except (QueueNotFoundError, ShardConnectionError):
            raise  # the queue is gone, or the shard: as for the sweeps above
        except Exception:
            # A key table this GC cannot read is this queue's problem: the claims of the queues
            # after it on the shard are still rescued.
            log.exception("monitor: forgetting dedup keys of queue %s on shard %s failed", queue, shard.name)
        if shard.store.groups_refused is None:
            try:
                counts = await call(shard, shard.store.group_counts, queue)
            except (QueueNotFoundError, ShardConnectionError):
                raise
            except Exception:  # as for the dedup keys: the queues after it still get their pass
                log.exception("monitor: counting the groups of queue %s on shard %s failed", queue, shard.name)
                return
            if counts.groups:
                seen = self._counting.get(queue, GroupCounts(0, 0))
                self._counting[queue] = GroupCounts(seen.groups + counts.groups, seen.blocked + counts.blocked)
