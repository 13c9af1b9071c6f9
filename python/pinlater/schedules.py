"""Schedules kept in the store: a job enqueued at each tick of a cron expression or interval.

A schedule is a row in one shard (``ShardStore.put_schedule``; the shard is picked from
(queue, name) as a dedup key's is, and an upsert removes the row from every other shard). Every
server runs a ``ScheduleRunner``: once a second it asks each shard for its due rows and, for each,
enqueues the schedule's job with the dedup key ``pinlater:schedule:<name>:<tick>`` (held a day
past the enqueue), then moves the row's next tick with a compare-and-set
(``advance_schedule``). So two servers that fire one tick make one job, and a server that dies
between the enqueue and the move leaves a tick that the next firing deduplicates: exactly one job
per tick, through restarts. The next tick is the first after now, so ticks missed while no
server ran are enqueued once, not once each.

The row's ``spec`` is this module's JSON (``Schedule.spec``); stores never read it.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from pinlater.backends.base import NewJob, ScheduleRow, ShardStore
from pinlater.backends.sharded import ShardedBackend, key_shard
from pinlater.backends.shardmap import Shard
from pinlater.cron import HORIZON_YEARS, Cron, CronError
from pinlater.errors import ErrorCode, PinLaterError, QueueNotFoundError, ShardConnectionError, shown
from pinlater.eventloop import off_loop

log = logging.getLogger(__name__)

#: Shortest interval taken: a schedule is not a busy loop.
MIN_INTERVAL_MS = 1_000
#: Longest interval taken: ten years.
MAX_INTERVAL_MS = 10 * 365 * 24 * 3_600_000
#: Longest schedule name, in characters.
MAX_NAME_LENGTH = 200
#: How long a tick's dedup key stays held after its job's enqueue (``tick_key_window``): a tick
#: fired again within it (a server that died between the enqueue and the move, the tick fired
#: again by the next pass of any server) makes no second job. Each key held is a record in its
#: store (about 100 to 300 bytes), so the window spans ``TICK_KEY_TICKS`` of the schedule's
#: ticks, within these bounds: a schedule of one tick a second held 86,400 keys with a day's.
TICK_KEY_WINDOW_MS = 24 * 3_600_000
MIN_TICK_KEY_WINDOW_MS = 3_600_000
TICK_KEY_TICKS = 100
#: Largest body a schedule's job may carry (the row is read at every tick).
MAX_BODY_BYTES = 1024 * 1024
#: Longest custom status a schedule's job keeps, in characters (the longest any store keeps a
#: job's; its enqueues cut it to the store's own): a longer one is cut, as an enqueue's is.
MAX_STATUS_CHARS = 5000
#: The most a queue's schedules hold in all (``Schedule.size``): ``listSchedules`` answers every
#: one in one reply, which must fit a frame (16 MiB by default) and not hold the server for long.
#: An upsert past it is refused.
MAX_QUEUE_SCHEDULE_BYTES = 8 * 1024 * 1024
#: Most schedules one queue keeps. An upsert of a new name past it is refused: each schedule
#: fires on its own (one job a second at the shortest interval, from every server's runner, for
#: as long as it is kept), so their number, not only their bytes, is what a peer could multiply.
MAX_QUEUE_SCHEDULES = 1000
#: Due rows one shard hands the runner per pass (and at most ``DUE_PAGE_BYTES`` of them).
DUE_PER_PASS = 500
#: A row whose spec is longer is read on a worker thread, not on the event loop (JSON and base64
#: of a 1 MiB body: some 5 ms).
DECODE_OFF_LOOP_CHARS = 64 * 1024

FAILED_ROW_RETRY_MS = 60_000
"""A row that failed to fire is passed over this long by the runner (``ScheduleRunner._fire``),
and such failures are logged at most once in that time."""


@dataclass(frozen=True, slots=True)
class ScheduledJob:
    """The job a schedule enqueues at each tick (a ``PinLaterJob`` without run-after, dedup key
    or expiry)."""

    body: bytes
    priority: int = 1
    attempts_allowed: int = 2
    custom_status: str = ""
    group_key: str | None = None


@dataclass(frozen=True, slots=True)
class Schedule:
    queue: str
    name: str
    job: ScheduledJob
    cron: str | None = None
    interval_ms: int | None = None
    paused: bool = False
    #: The next tick (epoch ms); set by ``first_tick`` and by the runner.
    next_run_ms: int | None = None

    def check(self, num_priorities: int) -> None:
        """ENQUEUE_REJECTED with the reason for a schedule that cannot run."""

        def reject(why: str) -> PinLaterError:
            return PinLaterError(ErrorCode.ENQUEUE_REJECTED, f"schedule {shown(self.name)}: {why}")

        if not self.name or len(self.name) > MAX_NAME_LENGTH or not self.name.isprintable():
            raise reject(f"name must be 1 to {MAX_NAME_LENGTH} printable characters")
        if (self.cron is None) == (self.interval_ms is None):
            raise reject("give exactly one of cron and intervalMillis")
        if self.cron is not None:
            try:
                Cron.parse(self.cron)
            except CronError as exc:
                raise reject(str(exc)) from None
        if self.interval_ms is not None and not MIN_INTERVAL_MS <= self.interval_ms <= MAX_INTERVAL_MS:
            raise reject(f"intervalMillis must be {MIN_INTERVAL_MS} to {MAX_INTERVAL_MS}, not {self.interval_ms}")
        if not 1 <= self.job.priority <= num_priorities:
            raise reject(f"job priority {self.job.priority} is not in 1..{num_priorities}")
        if self.job.attempts_allowed < 1:
            raise reject("job numAttemptsAllowed must be at least 1")
        for what, text in (("job customStatus", self.job.custom_status), ("job groupKey", self.job.group_key)):
            try:
                (text or "").encode("utf-8")
            except UnicodeEncodeError:
                raise reject(f"{what} is not text (a lone surrogate, U+D800 to U+DFFF)") from None
        if self.job.group_key is not None and not 1 <= len(self.job.group_key.encode()) <= 1024:
            raise reject("job groupKey must be 1 to 1024 bytes")
        if self.job.group_key is not None and "\0" in self.job.group_key:
            raise reject("job groupKey must not contain a NUL character (U+0000)")

    def size(self) -> int:
        """What the schedule holds, in bytes: its name, spec, body, status and group key."""
        job = self.job
        texts = (self.name, self.cron or "", job.custom_status, job.group_key or "")
        return len(job.body) + sum(len(text.encode("utf-8", "surrogatepass")) for text in texts)

    def tick_after(self, now_ms: int, last_tick_ms: int | None = None) -> int:
        """The first tick after ``now_ms``: the cron's next minute, or for an interval the next
        point of the grid started at ``last_tick_ms`` (now, for a new schedule)."""
        if self.cron is not None:
            tick = Cron.parse(self.cron).next_after(now_ms)
            if tick is None:  # check() refused crons that never run, and every other runs within the horizon
                raise ValueError(f"cron {self.cron!r} has no time within {HORIZON_YEARS} years of {now_ms}")
            return tick
        assert self.interval_ms is not None
        start = now_ms if last_tick_ms is None else last_tick_ms
        steps = max(1, (now_ms - start) // self.interval_ms + 1)
        return start + steps * self.interval_ms

    def spec(self) -> str:
        job = self.job
        return json.dumps(
            {
                "cron": self.cron,
                "interval_ms": self.interval_ms,
                "job": {
                    "body": base64.b64encode(job.body).decode("ascii"),
                    "priority": job.priority,
                    "attempts": job.attempts_allowed,
                    "status": job.custom_status,
                    "group": job.group_key,
                },
            },
            separators=(",", ":"),
        )

    def row(self) -> ScheduleRow:
        assert self.next_run_ms is not None
        return ScheduleRow(self.queue, self.name, self.spec(), self.next_run_ms, self.paused)

    @classmethod
    def from_row(cls, row: ScheduleRow) -> Schedule:
        spec: dict[str, Any] = json.loads(row.spec)
        job = spec["job"]
        return cls(
            queue=row.queue,
            name=row.name,
            job=ScheduledJob(
                base64.b64decode(job["body"]), job["priority"], job["attempts"], job["status"], job["group"]
            ),
            cron=spec["cron"],
            interval_ms=spec["interval_ms"],
            paused=row.paused,
            next_run_ms=row.next_run_ms,
        )


def tick_key(name: str, tick_ms: int) -> str:
    """The dedup key of one tick's job."""
    return f"pinlater:schedule:{name}:{tick_ms}"


def tick_key_window(tick_ms: int, next_tick_ms: int) -> int:
    """How long the key of the tick at ``tick_ms`` is held, the next being at ``next_tick_ms``:
    ``TICK_KEY_TICKS`` ticks, at least an hour (3,600 keys of a schedule of one a second), at most
    a day (one key of a daily one)."""
    ticks = TICK_KEY_TICKS * max(0, next_tick_ms - tick_ms)
    return min(TICK_KEY_WINDOW_MS, max(MIN_TICK_KEY_WINDOW_MS, ticks))


def _home(backend: ShardedBackend, queue: str, name: str) -> Shard:
    targets = [s for s in backend.shards.all() if not s.dequeue_only]
    if not targets:
        raise PinLaterError(ErrorCode.NO_HEALTHY_SHARDS, "no shard accepts new jobs")
    return key_shard(queue, name, targets, space="schedule")


async def _require_queue(backend: ShardedBackend, queue: str) -> None:
    if queue not in await backend.get_queue_names():
        raise QueueNotFoundError(queue)


def _require_every_shard(backend: ShardedBackend, what: str) -> None:
    """SHARD_CONNECTION_FAILED unless every shard is healthy: a schedule's row may be on any of
    them (a shard that was its home before), and a write that missed one would let that row
    fire again when it is back."""
    down = [s.name for s in backend.shards.all() if not s.healthy]
    if down:
        raise PinLaterError(
            ErrorCode.SHARD_CONNECTION_FAILED, f"{what} needs every shard; down: {', '.join(sorted(down))}"
        )


async def upsert(backend: ShardedBackend, schedule: Schedule) -> Schedule:
    """Create or replace the schedule (its next tick counted from now); the stored schedule."""
    schedule.check(backend.num_priorities)
    await _require_queue(backend, schedule.queue)
    now = backend.clock.now_ms()
    stored = replace(schedule, next_run_ms=schedule.tick_after(now))
    group = schedule.job.group_key
    if group is not None:
        targets = [s for s in backend.shards.all() if not s.dequeue_only]
        reason = key_shard(schedule.queue, group, targets, space="group").store.groups_refused
        if reason is not None:
            raise PinLaterError(
                ErrorCode.ENQUEUE_REJECTED, f"schedule {shown(schedule.name)}: groupKey (ordered groups) {reason}"
            )
    _require_every_shard(backend, "upsertSchedule")
    if len(stored.job.custom_status) > MAX_STATUS_CHARS:
        stored = replace(stored, job=replace(stored.job, custom_status=stored.job.custom_status[:MAX_STATUS_CHARS]))
    kept = await listing(backend, schedule.queue)
    others = sum(s.size() for s in kept if s.name != schedule.name)
    if len(kept) >= MAX_QUEUE_SCHEDULES and all(s.name != schedule.name for s in kept):
        raise PinLaterError(
            ErrorCode.ENQUEUE_REJECTED,
            f"schedule {shown(schedule.name)}: the queue has {len(kept)} schedules, at most {MAX_QUEUE_SCHEDULES} "
            "(MAX_QUEUE_SCHEDULES): delete some, or replace one",
        )
    if others + stored.size() > MAX_QUEUE_SCHEDULE_BYTES:
        raise PinLaterError(
            ErrorCode.ENQUEUE_REJECTED,
            f"schedule {shown(schedule.name)}: the queue's schedules would hold {others + stored.size()} bytes, "
            f"at most {MAX_QUEUE_SCHEDULE_BYTES} (MAX_QUEUE_SCHEDULE_BYTES): delete some, or make their bodies "
            "smaller",
        )
    home = _home(backend, schedule.queue, schedule.name)
    await backend.call_store(home, home.store.put_schedule, stored.row())
    for shard in backend.shards.all():  # a row left on a shard that was home before
        if shard is not home:
            await backend.call_store(shard, shard.store.delete_schedule, schedule.queue, schedule.name)
    return stored


async def delete(backend: ShardedBackend, queue: str, name: str) -> bool:
    """Remove the schedule from every shard; False when there was none. QUEUE_NOT_FOUND for a
    queue that does not exist; SHARD_CONNECTION_FAILED, with nothing removed, while a shard is
    down (the row could be there)."""
    await _require_queue(backend, queue)
    _require_every_shard(backend, "deleteSchedule")
    removed = False
    for shard in backend.shards.all():
        removed |= await backend.call_store(shard, shard.store.delete_schedule, queue, name)
    return removed


async def listing(backend: ShardedBackend, queue: str) -> list[Schedule]:
    """The queue's schedules by name, each once (the home shard's row first)."""
    await _require_queue(backend, queue)
    found: dict[str, tuple[bool, Schedule]] = {}
    for shard in backend.shards.all():
        if not shard.healthy:
            continue
        for schedule in await backend.call_store(shard, _read_schedules, shard.store, queue):
            at_home = _home(backend, queue, schedule.name) is shard
            if schedule.name not in found or at_home:
                found[schedule.name] = (at_home, schedule)
    return [schedule for _, (_, schedule) in sorted(found.items())]


def _read_schedules(store: ShardStore, queue: str) -> list[Schedule]:
    """The shard's schedules of the queue, decoded on the store's thread: a queue's rows may hold
    8 MiB (``MAX_QUEUE_SCHEDULE_BYTES``), whose JSON and base64 held the event loop."""
    return [Schedule.from_row(row) for row in store.list_schedules(queue)]


class ScheduleRunner:
    """Fires due schedules once a second (see the module doc). Every server runs one."""

    def __init__(self, backend: ShardedBackend, interval_seconds: float = 1.0) -> None:
        self.backend = backend
        self.interval_seconds = interval_seconds
        self._task: asyncio.Task[None] | None = None
        #: Ticks whose job was enqueued by this runner (deduplicated ones not counted).
        self.fired = 0
        #: Rows that failed to fire, by (queue, name, tick), and the time they are tried again.
        self._put_off: dict[tuple[str, str, int], int] = {}
        self._failure_logged_at = float("-inf")

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="pinlater-schedules")

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
            try:
                await self.run_once()
            except Exception:
                log.exception("schedules: a pass failed")
            await asyncio.sleep(self.interval_seconds)

    async def run_once(self) -> int:
        """Fire every due schedule of every healthy shard once; return the jobs enqueued."""
        made = 0
        for shard in self.backend.shards.all():
            if not shard.healthy:
                continue
            try:
                # (more by the rows passed over: they stay the earliest due, as their tick is kept)
                due = await self.backend.call_store(
                    shard, shard.store.due_schedules, self.backend.clock.now_ms(), DUE_PER_PASS + len(self._put_off)
                )
            except ShardConnectionError as exc:
                log.warning("schedules: shard %s: %s", shard.name, exc)
                continue
            made += await self._fire(shard, due)
        self.fired += made
        return made

    async def _moved_home(self, shard: Shard, row: ScheduleRow) -> bool:
        """Whether the row, on a shard that is no longer its home (the shard set changed, or an
        upsert could not reach this shard), went home instead of firing here: moved there unless
        home has a row of that name already (newer), and deleted here. A home that is down does
        not stop it: the row fires where it is."""
        try:
            home = _home(self.backend, row.queue, row.name)
        except PinLaterError:
            return False
        if home is shard or not home.healthy:
            return False
        there = await self.backend.call_store(home, home.store.list_schedules, row.queue)
        if all(r.name != row.name for r in there):
            await self.backend.call_store(home, home.store.put_schedule, row)
        await self.backend.call_store(shard, shard.store.delete_schedule, row.queue, row.name)
        return True

    async def _fire(self, shard: Shard, rows: Sequence[ScheduleRow]) -> int:
        """Fire each row. One that fails (a bug, or data no check foresaw) is logged and passed
        over by this runner for ``FAILED_ROW_RETRY_MS``, its tick unchanged (so a job it enqueued
        before it failed is deduplicated when it is tried again), and the page of due rows is
        read that many rows longer: it cannot stop the rows due after it. (Before, it stayed the
        shard's earliest due row and failed every pass first, and no other schedule of the shard
        fired.)"""
        made = 0
        now = self.backend.clock.now_ms()
        if len(self._put_off) > DUE_PER_PASS:
            self._put_off = {key: until for key, until in self._put_off.items() if until > now}
        for row in rows:
            key = (row.queue, row.name, row.next_run_ms)
            if self._put_off.get(key, now) > now:
                continue
            try:
                made += await self._fire_one(shard, row)
            except ShardConnectionError:
                raise
            except Exception:
                self._put_off[key] = self.backend.clock.now_ms() + FAILED_ROW_RETRY_MS
                logged = time.monotonic() - self._failure_logged_at >= FAILED_ROW_RETRY_MS / 1000
                if logged:
                    self._failure_logged_at = time.monotonic()
                log.log(
                    logging.ERROR if logged else logging.DEBUG,
                    "schedules: %s/%s on shard %s failed to fire; tried again in %d s",
                    row.queue,
                    row.name,
                    shard.name,
                    FAILED_ROW_RETRY_MS // 1000,
                    exc_info=True,
                )
        return made

    async def _fire_one(self, shard: Shard, row: ScheduleRow) -> int:
        """Enqueue the row's job for its tick and advance it; the jobs made (0 or 1)."""
        try:
            if await self._moved_home(shard, row):
                return 0
        except PinLaterError as exc:  # a home without the queue yet, say: fire it here
            log.warning("schedules: %s/%s not moved to its home shard: %s", row.queue, row.name, exc)
        try:
            big = len(row.spec) > DECODE_OFF_LOOP_CHARS
            schedule = await off_loop(Schedule.from_row, row) if big else Schedule.from_row(row)
        except (ValueError, KeyError, TypeError):
            log.error("schedules: %s/%s on shard %s cannot be read; deleted", row.queue, row.name, shard.name)
            await self.backend.call_store(shard, shard.store.delete_schedule, row.queue, row.name)
            return 0
        job = schedule.job
        now = self.backend.clock.now_ms()
        new_job = NewJob(job.priority, job.body, now, job.attempts_allowed, job.custom_status)
        window = tick_key_window(row.next_run_ms, schedule.tick_after(now, row.next_run_ms))
        keys = [(tick_key(row.name, row.next_run_ms), window, job.group_key, None)]
        try:
            ((_, deduplicated),) = await self.backend.enqueue_keyed_jobs(row.queue, [new_job], keys, now)
        except QueueNotFoundError:
            log.warning("schedules: queue %s is gone; its schedule %s is deleted", row.queue, row.name)
            await self.backend.call_store(shard, shard.store.delete_schedule, row.queue, row.name)
            return 0
        except PinLaterError as exc:
            log.warning("schedules: %s/%s not enqueued (tried again next pass): %s", row.queue, row.name, exc)
            return 0
        next_run = schedule.tick_after(self.backend.clock.now_ms(), row.next_run_ms)
        await self.backend.call_store(
            shard, shard.store.advance_schedule, row.queue, row.name, row.next_run_ms, next_run
        )
        return 0 if deduplicated else 1
