"""Wiring: settings -> stores -> backend -> handler -> Thrift server, admin HTTP, monitor.

``PinLaterServer`` owns the lifecycle. ``start()`` opens storage through the backend's driver
(which takes what it must hold alone first, e.g. the embedded data-dir lock) and binds both ports;
``stop()`` stops accepting, lets requests in flight finish, stops the monitor and closes storage.
Stop is idempotent. The server never asks which backend it has: every kind is a
``BackendDriver`` (``backends/drivers.py``).

With SERVER_PROCESSES > 1 (``server/processes.py``) each process is a ``PinLaterServer`` over the
same shards, its Thrift listener sharing the port. Process 0 alone serves the admin port and runs
the monitor and the queue counts, and merges the others' counters into its own; every process
runs its own broker, rate limits (an even share), health checks, memory probe and config watches.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import logging
import re
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from pinlater.backends.base import BackendDriver
from pinlater.backends.drivers import driver_for
from pinlater.backends.pressure import MemoryWatch
from pinlater.backends.reload import ReloadPlan, create_missing_queues, plan_reload
from pinlater.backends.sharded import ShardedBackend
from pinlater.backends.shardmap import Shard, ShardMap
from pinlater.broker import BrokerPolicy, DequeueBroker
from pinlater.config import Settings
from pinlater.errors import ConfigError
from pinlater.monitor import Monitor, MonitorPolicy
from pinlater.queue_rules import QueueConfig, parse_queue_file
from pinlater.ratelimit import QueueRateLimits
from pinlater.schedules import ScheduleRunner
from pinlater.server.admin import start_admin
from pinlater.server.dispatch import Dispatcher
from pinlater.server.handler import PinLaterHandler
from pinlater.server.metrics import Metrics
from pinlater.server.queue_counts import QueueCounts
from pinlater.server.transport import FramedServer
from pinlater.watch import FileWatcher

log = logging.getLogger(__name__)

HEALTH_CHECK_INTERVAL_SECONDS = 1.0
#: Unknown keys of a queue config logged a line each, at most; then one line of how many more.
_MAX_CONFIG_WARNINGS = 20


@dataclass(frozen=True, slots=True)
class Addresses:
    thrift: tuple[str, int]
    admin: tuple[str, int]


class PinLaterServer:
    def __init__(self, settings: Settings, process_index: int = 0) -> None:
        self.settings = settings
        #: 0: the process that serves the admin port and runs the monitor; others serve Thrift only.
        self.process_index = process_index
        self.metrics = Metrics()
        self.backend: ShardedBackend | None = None
        self.queue_counts: QueueCounts | None = None
        self.rate_limits: QueueRateLimits | None = None
        self.broker: DequeueBroker | None = None
        self._thrift: FramedServer | None = None
        self._admin: web.AppRunner | None = None
        #: The monitor, in process 0 (None in the others).
        self.monitor: Monitor | None = None
        #: What fires the schedules kept in the store, in process 0 (None in the others).
        self.schedules: ScheduleRunner | None = None
        self._health_task: asyncio.Task[None] | None = None
        self._watchers: list[FileWatcher[Any]] = []
        self._queue_config_warnings: tuple[str, ...] = ()
        #: When this server was made (seconds since the epoch: the admin port's ``server_info``).
        self.started_at = time.time()
        #: Stops the whole server gracefully, as SIGTERM does, when ``pinlater serve`` runs it (the
        #: admin port's ``shutdown``, Ostrich's command); None when embedded elsewhere.
        self.request_stop: Callable[[], None] | None = None
        self._driver: BackendDriver | None = None
        self._background: set[asyncio.Task[None]] = set()
        self._stopped = False
        self.addresses: Addresses | None = None

    # -- start ----------------------------------------------------------------------------------

    def _open_shards(self, driver: BackendDriver) -> ShardMap:
        s = self.settings
        driver.acquire(s)
        shards: list[Shard] = []
        try:
            for name, config in driver.shard_configs(s).items():
                shards.append(Shard(name, driver.open_store(name, config, s), config.dequeue_only, config))
        except BaseException:
            for shard in shards:
                shard.store.close()
            raise
        return ShardMap(shards)

    async def start(self) -> Addresses:
        s = self.settings
        driver = self._driver = driver_for(s)
        shards = self._open_shards(driver)
        self.backend = ShardedBackend(
            shards,
            num_priorities=s.num_priority_levels,
            parallelism=s.backend_query_parallelism,
            count_limit=driver.count_limit(s),
            count=self.metrics.incr,
            memory_high_water=s.redis_memory_high_water_fraction,
            body_filter_budget_seconds=s.body_filter_time_budget_seconds,
        )
        # Before serving: a queue on some shards only is put on every shard that takes new jobs.
        await create_missing_queues(self.backend, self.backend.shards.enqueue_candidates())
        # The queue list's counts: the first pass runs now, so the dashboard's first load finds it.
        if self.process_index == 0:
            self.queue_counts = QueueCounts(self.backend)
            self.queue_counts.start()
        backend = self.backend
        memory = MemoryWatch(
            lambda: backend.shards, s.redis_memory_high_water_fraction, s.redis_memory_probe_interval_seconds
        )
        self._spawn(memory.run())
        rate_limits = self.rate_limits = self._start_rate_limits()
        if s.broker_enabled:
            self.broker = DequeueBroker(self.backend, BrokerPolicy.from_settings(s), self.metrics)
            self.broker.start()
        if s.admin_password_hash and not re.fullmatch(r"[0-9a-f]{64}", s.admin_password_hash):
            # (the original took any value: a typo then matched no password, as here, silently)
            log.warning("ADMIN_PASSWORD_HASH is not 64 hex digits (a SHA-256): no admin password will match it")
        handler = PinLaterHandler(
            self.backend,
            self.metrics,
            s.admin_password_hash,
            rate_limits,
            self.broker,
            s.max_scan_limit,
            max_reply_bytes=s.max_frame_bytes,
            max_queues=s.max_queues,
        )
        idle_minutes = s.server_conn_max_idle_time_minutes
        self._thrift = FramedServer(
            Dispatcher(handler),
            s.host,
            s.port,
            max_frame_bytes=s.max_frame_bytes,
            max_concurrent_requests=s.max_concurrent_requests,
            max_connections=s.max_connections,
            max_connections_per_peer=s.max_connections_per_peer,
            open_files_reserve=s.open_files_reserve,
            frame_timeout_seconds=s.frame_timeout_seconds,
            max_pending_frame_bytes=s.max_pending_frame_bytes,
            idle_timeout_seconds=idle_minutes * 60 if idle_minutes > 0 else None,
            share_port=None if s.server_processes == 1 else "open" if self.process_index == 0 else "join",
        )
        await self._thrift.start()
        admin_port = 0
        if self.process_index == 0:
            self._admin = await start_admin(self)
            admin_port = self._admin.addresses[0][1]
            self.monitor = Monitor(self.backend, MonitorPolicy.from_settings(s), self.metrics)
            self.monitor.start()
            self.schedules = ScheduleRunner(self.backend)
            self.schedules.start()
        self._health_task = asyncio.create_task(self._health_loop(), name="pinlater-health")
        await self._warn(self.backend.shards.all())
        config_path = driver.config_path(s)
        if config_path is not None:
            watcher = FileWatcher(
                config_path,
                self._apply_backend_reload,
                "backend config",
                prepare=self._plan_backend_reload,
                discard=lambda plan: plan.abandon() if plan is not None else None,
            )
            watcher.load_now()  # records the file as seen; the map it describes is already open
            watcher.start()
            self._watchers.append(watcher)
        self._register_gauges()
        self.addresses = Addresses((s.host, self._thrift.port), (s.admin_host, admin_port))
        return self.addresses

    def _start_rate_limits(self) -> QueueRateLimits | None:
        """Load and watch the queue config (and the ServerSet), if configured."""
        s = self.settings
        if s.queue_config_file_path is None:
            if s.server_set_enabled:  # (rates are what it divides: without them it does nothing)
                log.warning("SERVER_SET_ENABLED is ignored: there is no QUEUE_CONFIG_FILE_PATH, so no rate to divide")
            return None
        limits = QueueRateLimits(processes=s.server_processes)
        self.rate_limits = limits
        watchers: list[FileWatcher[Any]] = [
            FileWatcher(s.queue_config_file_path, self.apply_queue_config, "queue config", prepare=parse_queue_file)
        ]
        if s.server_set_enabled and s.server_set_path is not None:
            watchers.append(FileWatcher(s.server_set_path, limits.apply_server_set, "server set"))
        for watcher in watchers:
            watcher.load_now(strict=True)
        for watcher in watchers:
            watcher.start()
        self._watchers.extend(watchers)
        return limits

    def apply_queue_config(self, config: QueueConfig) -> None:
        """Take a parsed queue config file (``queue_rules.parse_queue_file``, at start and at every
        change): the rate limits, and the rules the stores enforce. A file the limiter fails on
        raises and changes nothing. Its warnings are logged when they differ from the last
        file's (an admin edit is applied at once and again when the watch sees the file)."""
        assert self.rate_limits is not None and self.backend is not None
        self.rate_limits.apply_rates(config.rates)
        self.backend.set_queue_rules(config.rules)
        if config.warnings != self._queue_config_warnings:
            for line in config.warnings[:_MAX_CONFIG_WARNINGS]:
                log.warning("%s", line)
            if len(config.warnings) > _MAX_CONFIG_WARNINGS:
                more = len(config.warnings) - _MAX_CONFIG_WARNINGS
                log.warning("queue config: %d more entries with keys this server ignores", more)
        self._queue_config_warnings = config.warnings

    def _plan_backend_reload(self, text: str) -> ReloadPlan | None:
        """Parse the edited backend config and open its new stores (on the watch's thread: opening
        a store connects to it, and a shard that does not answer held every request of the loop
        for its socket timeout); None if nothing changed. A bad file raises: the old map stays."""
        assert self._driver is not None and self.backend is not None
        wanted = self._driver.parse_config(text, str(self.settings.backend_config_path))
        if not wanted:
            raise ConfigError("no shards configured")
        plan = plan_reload(self.backend.shards, wanted, self._driver, self.settings)
        return plan if plan.changed else None

    def _apply_backend_reload(self, plan: ReloadPlan | None) -> None:
        """Swap in the next shard map (on the loop)."""
        assert self.backend is not None
        if plan is None:
            return
        plan.settle()
        self.backend.replace_shards(plan.shards)
        log.warning("backend config reloaded: %s", plan.describe())
        self._spawn(self._after_reload(plan))

    async def _after_reload(self, plan: ReloadPlan) -> None:
        assert self.backend is not None
        new = [s for s in plan.shards if s.name in plan.added or s.name in plan.reopened]
        if new:
            await self._warn(new)
        await create_missing_queues(self.backend, plan.needing_queues())
        if plan.retired:
            # Requests that started on the old map may still use these stores; let them finish.
            await asyncio.sleep(self.settings.backend_socket_timeout_seconds * 2)
            for store in plan.retired:
                await store.aclose()
                await asyncio.get_running_loop().run_in_executor(None, store.close)

    async def _warn(self, shards: list[Shard]) -> None:
        """Log what each shard's own settings put at risk (``BackendDriver.warnings``)."""
        driver = self._driver
        assert driver is not None
        for shard in shards:
            warnings = await asyncio.get_running_loop().run_in_executor(None, driver.warnings, shard.store)
            for warning in warnings:
                log.warning("%s shard %s: %s", driver.kind, shard.name, warning)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _register_gauges(self) -> None:
        assert self.backend is not None and self._thrift is not None
        backend, thrift = self.backend, self._thrift
        self.metrics.gauge("shards", lambda: len(backend.shards))
        self.metrics.gauge("shards_healthy", lambda: sum(1 for s in backend.shards if s.healthy))
        # Per process, summed over the server processes on the stats pages.
        gauge = functools.partial(self.metrics.gauge, summed=True)
        gauge("connections_open", lambda: thrift.stats().connections_open)
        gauge("requests_in_flight", lambda: thrift.stats().requests_in_flight)
        gauge("long_polls_waiting", lambda: thrift.stats().long_polls_waiting)
        gauge("filtered_calls_running", lambda: thrift.stats().filtered_calls_running)
        gauge("pending_frame_bytes", lambda: thrift.stats().pending_frame_bytes)
        gauge("unread_reply_bytes", lambda: thrift.stats().unread_reply_bytes)
        # Peers closed or refused by the transport's limits (totals since start).
        total = functools.partial(self.metrics.gauge, total=True)
        total("accept_errors", lambda: thrift.stats().accept_errors)
        total("connections_rejected", lambda: thrift.stats().connections_rejected)
        total("connections_rejected_per_peer", lambda: thrift.stats().connections_rejected_per_peer)
        total("frame_timeouts", lambda: thrift.stats().frame_timeouts)
        total("frames_over_budget", lambda: thrift.stats().over_budget)
        total("connections_closed_idle", lambda: thrift.stats().idle_closed)
        total("connections_closed_write_stall", lambda: thrift.stats().write_stalls)
        total("replies_over_budget", lambda: thrift.stats().replies_over_budget)
        # Objects out of the garbage collector's reach: what `pinlater serve` froze after start-up.
        gauge("gc_frozen_objects", gc.get_freeze_count)
        broker = self.broker
        if broker is not None:
            gauge("broker_buffered_jobs", broker.buffered)
        assert self._driver is not None
        # The driver's counts of what this process's stores did: totals, summed over the processes.
        for name, read in self._driver.gauges(lambda: backend.shards).items():
            total(name, read)

    async def _health_loop(self) -> None:
        """Ping unhealthy shards and bring them back when they answer (calls that find no
        healthy shard ask too: ``ShardedBackend.revive``)."""
        assert self.backend is not None
        backend = self.backend
        while True:
            await asyncio.sleep(HEALTH_CHECK_INTERVAL_SECONDS)
            for shard in backend.shards.all():
                await backend.revive(shard, force=True)
                shard.log_unlogged()

    # -- stop -----------------------------------------------------------------------------------

    async def stop(self, grace_seconds: float = 10.0) -> None:
        """Stop accepting, finish requests in flight, stop background work, close storage."""
        if self._stopped:
            return
        self._stopped = True
        if self.backend is not None:
            self.backend.signals.close()  # long polls return now, so in-flight requests finish
        if self._thrift is not None:
            await self._thrift.stop(grace_seconds)
        if self._admin is not None:
            await self._admin.cleanup()
        if self.broker is not None:
            await self.broker.stop()  # requests are done: hand every reservation back now
        if self.monitor is not None:
            await self.monitor.stop()
        if self.schedules is not None:
            await self.schedules.stop()
        for watcher in self._watchers:
            await watcher.stop()
        for task in list(self._background):
            task.cancel()
        if self._health_task is not None:
            self._health_task.cancel()
            try:
                await self._health_task
            except asyncio.CancelledError:
                pass
        if self.backend is not None:
            for shard in self.backend.shards.all():
                shard.log_unlogged(now=True)  # the log ends on the state each shard is in
        if self.queue_counts is not None:
            await self.queue_counts.aclose()
        if self.backend is not None:
            await self.backend.aclose()
            await asyncio.get_running_loop().run_in_executor(None, self.backend.close)
        if self._driver is not None:
            self._driver.release()
        if self.addresses is not None:
            log.info("pinlater stopped")
