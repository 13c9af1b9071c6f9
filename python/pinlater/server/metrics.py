"""Counters, gauges and timings: ``/stats.txt`` (the original's Ostrich-style text), ``/stats.json``,
Prometheus exposition, and a short history of per-queue counters for the dashboard's charts.

Cheap enough for the hot path: a counter is a dict update; a timing keeps a count, sum, min, max,
fixed histogram buckets and a bounded reservoir sample from which percentiles are read.
Everything runs on the event loop thread, so no locks are needed.

``/metrics`` also carries every queue's job counts and depth (``queue_depth_families``), read fresh per scrape
in one pass per shard (``ShardedBackend.queue_counts``).

Per-queue counters are named ``{queue}_{kind}`` (``orders_enqueue``, ``orders_ack_failed``);
``split_queue_counter`` reads them back, so Prometheus gets them as labelled series
(``pinlater_jobs_enqueued_total{queue="orders"}``) without the hot path knowing about labels.
"""

from __future__ import annotations

import asyncio
import bisect
import json
import math
import random
import re
import time
from collections import defaultdict, deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from pinlater.backends.pressure import memory_use
from pinlater.errors import ErrorCode
from pinlater.server.queue_counts import QueueSnapshot, count_columns

if TYPE_CHECKING:
    from pinlater.backends.shardmap import Shard

RESERVOIR = 1024
#: (Ostrich's: the original's timings showed p95 and p9999 too)
PERCENTILES = (("p50", 0.5), ("p90", 0.9), ("p95", 0.95), ("p99", 0.99), ("p999", 0.999), ("p9999", 0.9999))
#: Histogram bucket upper bounds, in milliseconds (exported in seconds).
BUCKETS_MS = (0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0)

_TIMED_OUT, _TIMED_OUT_HELP = "pinlater_claims_timed_out", "Claims past the claim timeout, by what became of the job"
_COLLECTED, _COLLECTED_HELP = "pinlater_jobs_collected", "Finished jobs deleted past their TTL, by state"
#: Per-queue counter kinds -> (Prometheus family, help, extra labels). The shortest queue name
#: that leaves a known kind wins: ``q_dequeue_requests_rate_limited`` is queue ``q``.
QUEUE_COUNTERS: dict[str, tuple[str, str, dict[str, str]]] = {
    "dequeue_requests_rate_limited": (
        "pinlater_dequeue_requests_rate_limited",
        "Dequeue requests refused by the queue's rate limit",
        {},
    ),
    "ack_succeeded": ("pinlater_jobs_acked", "Jobs acknowledged, by result", {"result": "succeeded"}),
    "ack_failed": ("pinlater_jobs_acked", "Jobs acknowledged, by result", {"result": "failed"}),
    "checkpoint": ("pinlater_jobs_checkpointed", "Jobs checkpointed", {}),
    "cancel": ("pinlater_jobs_cancelled", "Jobs cancelled (cancelJobs, the admin API)", {}),
    "enqueue_deduplicated": (
        "pinlater_jobs_deduplicated",
        "Jobs not enqueued because a live job held their dedup key",
        {},
    ),
    "enqueue": ("pinlater_jobs_enqueued", "Jobs enqueued", {}),
    "dequeue": ("pinlater_jobs_dequeued", "Jobs dequeued (claimed)", {}),
    # the monitor's, named as the original's monitor named them (per queue, its priorities and shards summed)
    "timeout_done": (_TIMED_OUT, _TIMED_OUT_HELP, {"result": "failed"}),
    "timeout_retry": (_TIMED_OUT, _TIMED_OUT_HELP, {"result": "retried"}),
    "timeout_evict": (_TIMED_OUT, _TIMED_OUT_HELP, {"result": "evicted"}),
    "succeeded_gc": (_COLLECTED, _COLLECTED_HELP, {"state": "succeeded"}),
    "failed_gc": (_COLLECTED, _COLLECTED_HELP, {"state": "failed"}),
}
_QUEUE_COUNTER = re.compile(r"(\w+?)_(" + "|".join(QUEUE_COUNTERS) + r")", re.ASCII)
#: The kinds the dashboard charts.
RATE_KINDS = ("enqueue", "dequeue", "ack_succeeded", "ack_failed", "dequeue_requests_rate_limited")


def outcome_counter(method: str, ok: bool) -> str:
    """The counter of ``method``'s calls that succeeded (``ok``) or failed, which ``timing`` adds to."""
    return f"{method}_{'ok' if ok else 'error'}"


def thrift_name(method: str) -> str:
    """A handler method's Thrift name: ``enqueue_jobs`` is ``enqueueJobs``."""
    first, *rest = method.split("_")
    return first + "".join(part.capitalize() for part in rest)


def original_error_counter(method: str, code: ErrorCode) -> str:
    """The original's counter of ``method``'s failures with ``code``, in ``/stats.txt`` as it was
    (``PinLater.enqueueJobs.errors.QUEUE_NOT_FOUND``; NO_HEALTHY_SHARDS it counted as
    ``INTERNAL_ERROR``), so alerts written against it keep working."""
    name = "INTERNAL_ERROR" if code == ErrorCode.NO_HEALTHY_SHARDS else code.name
    return f"PinLater.{thrift_name(method)}.errors.{name}"


_ORIGINAL_ERROR = re.compile(r"PinLater\.(\w+)\.errors\.(\w+)", re.ASCII)
#: What the original's Ostrich named a method's timing: ``PinLaterService.enqueueJobs`` (shown
#: with ``_msec``); ours is the handler's name (``enqueue_jobs_msec``). Both are shown.
ORIGINAL_TIMING_PREFIX = "PinLaterService."
#: The original's methods, the only ones it timed (ours add extensions and timings of their own).
ORIGINAL_METHODS = frozenset(
    {
        "createQueue",
        "deleteQueue",
        "enqueueJobs",
        "dequeueJobs",
        "ackDequeuedJobs",
        "checkpointJobs",
        "lookupJobs",
        "getJobCount",
        "getQueueNames",
        "scanJobs",
        "retryFailedJobs",
        "deleteJobs",
    }
)


@dataclass
class Timing:
    count: int = 0
    total: float = 0.0
    minimum: float = float("inf")
    maximum: float = 0.0
    sample: list[float] = field(default_factory=list)
    buckets: list[int] = field(default_factory=lambda: [0] * len(BUCKETS_MS))

    def add(self, value: float) -> None:
        # (once per request: comparisons, not min/max, and random() rather than randrange)
        self.count += 1
        self.total += value
        if value < self.minimum:
            self.minimum = value
        if value > self.maximum:
            self.maximum = value
        slot = bisect.bisect_left(BUCKETS_MS, value)
        if slot < len(BUCKETS_MS):
            self.buckets[slot] += 1
        if len(self.sample) < RESERVOIR:
            self.sample.append(value)
        else:
            slot = int(random.random() * self.count)  # uniform in [0, count)
            if slot < RESERVOIR:
                self.sample[slot] = value

    def merge(self, other: Timing) -> None:
        """Add ``other``'s observations (another process's): exact for count, sum, extremes and
        buckets; the sample keeps each side's share of the reservoir in proportion to its count."""
        if not other.count:
            return
        total = self.count + other.count
        if len(self.sample) + len(other.sample) > RESERVOIR:
            mine = min(len(self.sample), round(RESERVOIR * self.count / total))
            theirs = min(len(other.sample), RESERVOIR - mine)
            self.sample = random.sample(self.sample, mine) + random.sample(other.sample, theirs)
        else:
            self.sample = self.sample + other.sample
        self.count = total
        self.total += other.total
        self.minimum = min(self.minimum, other.minimum)
        self.maximum = max(self.maximum, other.maximum)
        self.buckets = [a + b for a, b in zip(self.buckets, other.buckets, strict=True)]

    def quantile(self, q: float) -> float:
        ordered = sorted(self.sample)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")

    def summary(self) -> dict[str, float]:
        if not self.count:
            return {"count": 0}
        ordered = sorted(self.sample)
        out = {
            "count": float(self.count),
            "average": self.total / self.count,
            "minimum": self.minimum,
            "maximum": self.maximum,
        }
        for name, q in PERCENTILES:
            out[name] = ordered[min(len(ordered) - 1, int(q * len(ordered)))]
        out["sum"] = self.total  # (last: readers of the lines before it kept their order)
        return out


def split_queue_counter(name: str) -> tuple[str, str] | None:
    """``"orders_ack_failed"`` -> ``("orders", "ack_failed")``; None for other counters."""
    m = _QUEUE_COUNTER.fullmatch(name)
    return (m.group(1), m.group(2)) if m else None


@dataclass(frozen=True, slots=True)
class MetricsDelta:
    """What one server process counted since its last delta, and its summed gauges now: sent to
    the process that serves the admin port (``server/processes.py``), which merges it."""

    counters: dict[str, int]
    timings: dict[str, Timing]
    gauges: dict[str, float]


class Metrics:
    """The server's statistics registry; the ``Counters`` handed down to the monitor, the broker
    and the sharded backend (``pinlater/counters.py``).

    With several server processes, the others' counts are merged in (``merge``): counters and
    timings add up, and the gauges registered ``summed`` (connections, requests in flight) show
    the sum over the live processes; the rest (shards, shard health) are this process's reading."""

    def __init__(self) -> None:
        self.counters: dict[str, int] = defaultdict(int)
        self.timings: dict[str, Timing] = defaultdict(Timing)
        self._gauges: dict[str, Callable[[], float]] = {}
        self._summed: set[str] = set()
        #: The summed gauges that are totals since start (``total``).
        self._totals: set[str] = set()
        #: The summed gauges of the other processes, by process name.
        self._remote_gauges: dict[str, dict[str, float]] = {}
        #: The totals of the processes that ended, summed: they still count.
        self._departed: dict[str, float] = defaultdict(float)

    def incr(self, name: str, by: int = 1) -> None:
        if by:
            self.counters[name] += by

    def timing(self, method: str, millis: float, ok: bool) -> None:
        self.timings[method].add(millis)
        self.counters[outcome_counter(method, ok)] += 1

    def gauge(self, name: str, read: Callable[[], float], *, summed: bool = False, total: bool = False) -> None:
        """Register a gauge, read when stats are rendered; ``summed``: a per-process quantity
        (connections open, say), shown summed over the server processes; ``total`` (summed too):
        a count since the process started (connections rejected, say), whose last reading still
        counts once its process ended, so the sum never goes back."""
        self._gauges[name] = read
        if summed or total:
            self._summed.add(name)
        if total:
            self._totals.add(name)

    def gauges(self) -> dict[str, float]:
        out = self._local_gauges()
        for remote in [*self._remote_gauges.values(), self._departed]:
            for name, value in remote.items():
                if name in out:
                    out[name] += value
        return out

    def _local_gauges(self, names: Iterable[str] | None = None) -> dict[str, float]:
        out = {}
        for name in self._gauges if names is None else names:
            try:
                out[name] = float(self._gauges[name]())
            except Exception:  # a gauge must never break the stats page
                out[name] = float("nan")
        return out

    def take_delta(self) -> MetricsDelta:
        """What was counted since the last call (then forgotten here), and the summed gauges."""
        counters, timings = dict(self.counters), dict(self.timings)
        self.counters.clear()
        self.timings.clear()
        return MetricsDelta(counters, timings, self._local_gauges(sorted(self._summed)))

    def merge(self, process: str, delta: MetricsDelta) -> None:
        """Add another process's delta: its counts join these, its gauges replace its last ones."""
        for name, value in delta.counters.items():
            self.counters[name] += value
        for name, timing in delta.timings.items():
            self.timings[name].merge(timing)
        self._remote_gauges[process] = dict(delta.gauges)

    def forget(self, process: str) -> None:
        """A process ended: its gauges no longer count, but for its totals (its counts stay)."""
        for name, value in self._remote_gauges.pop(process, {}).items():
            if name in self._totals:
                self._departed[name] += value

    def queue_counters(self) -> dict[str, dict[str, int]]:
        """Per-queue counters: ``{queue: {kind: value}}`` (only those counted so far)."""
        methods = set(self.timings)
        out: dict[str, dict[str, int]] = defaultdict(dict)
        for name, value in self.counters.items():
            split = split_queue_counter(name)
            if split is not None and not _is_request_counter(name, methods):
                out[split[0]][split[1]] = value
        return dict(out)

    def render_text(self) -> str:
        """Ostrich-style text: sections of ``name: value`` lines."""
        lines = ["counters:"]
        lines += [f"  {name}: {value}" for name, value in sorted(self.counters.items())]
        lines.append("gauges:")
        lines += [f"  {name}: {_num(value)}" for name, value in sorted(self.gauges().items())]
        lines.append("metrics:")
        for name, summary in self._timing_summaries():
            parts = ", ".join(f"{k}={_num(v)}" for k, v in summary.items())
            lines.append(f"  {name}_msec: ({parts})")
        return "\n".join(lines) + "\n"

    def _timing_summaries(self) -> list[tuple[str, dict[str, float]]]:
        """Each timing's summary by its name, and again by the original's (``ORIGINAL_TIMING_PREFIX``)."""
        summaries = [(name, timing.summary()) for name, timing in self.timings.items()]
        originals = [
            (ORIGINAL_TIMING_PREFIX + thrift_name(name), summary)
            for name, summary in summaries
            if thrift_name(name) in ORIGINAL_METHODS
        ]
        return sorted(summaries + originals)

    def snapshot(self) -> dict[str, Any]:
        """What ``render_text`` shows, as JSON-ready data (NaN gauges become null)."""
        return {
            "counters": dict(sorted(self.counters.items())),
            "gauges": {k: (v if math.isfinite(v) else None) for k, v in sorted(self.gauges().items())},
            "metrics": {f"{name}_msec": summary for name, summary in self._timing_summaries()},
        }

    def render_json(self) -> str:
        return json.dumps(self.snapshot(), indent=1, allow_nan=False)


def _is_request_counter(name: str, methods: set[str]) -> bool:
    base, _, outcome = name.rpartition("_")
    return outcome in ("ok", "error") and base in methods


def _num(value: float) -> str:
    if math.isfinite(value) and value == int(value):
        return str(int(value))
    return f"{value:.3f}"


# -- Prometheus -------------------------------------------------------------------------------


class PrometheusCollector:
    """Exposes a ``Metrics`` registry to prometheus-client, read fresh on every scrape.

    ``extra`` yields further families (the admin app adds shard health and rate limits).
    """

    def __init__(self, metrics: Metrics, extra: Callable[[], Iterable[Metric]] | None = None) -> None:
        self.metrics = metrics
        self.extra = extra

    def describe(self) -> list[Metric]:
        return []  # families vary with the queues; nothing to check at registration

    def collect(self) -> Iterator[Metric]:
        m = self.metrics
        methods = set(m.timings)
        queue_families: dict[str, CounterMetricFamily] = {}
        requests = CounterMetricFamily(
            "pinlater_requests", "Thrift requests by method and outcome", labels=["method", "outcome"]
        )
        errors = CounterMetricFamily(
            "pinlater_request_errors", "Failed Thrift requests by method and error code", labels=["method", "code"]
        )
        others: list[Metric] = []
        for name, value in sorted(m.counters.items()):
            if _is_request_counter(name, methods):
                method, _, outcome = name.rpartition("_")
                requests.add_metric([method, outcome], value)
                continue
            if original := _ORIGINAL_ERROR.fullmatch(name):
                errors.add_metric([original[1], original[2]], value)
                continue
            split = split_queue_counter(name)
            if split is None:
                others.append(CounterMetricFamily(f"pinlater_{_sanitize(name)}", f"Counter {name}", value=value))
                continue
            queue, kind = split
            family, doc, extra_labels = QUEUE_COUNTERS[kind]
            if family not in queue_families:
                queue_families[family] = CounterMetricFamily(family, doc, labels=["queue", *extra_labels])
            queue_families[family].add_metric([queue, *extra_labels.values()], value)
        yield from queue_families.values()
        yield requests
        yield errors
        yield from others
        for gauge, reading in sorted(m.gauges().items()):
            yield GaugeMetricFamily(f"pinlater_{_sanitize(gauge)}", f"Gauge {gauge}", value=reading)
        yield from self._timings()
        if self.extra is not None:
            yield from self.extra()

    def _timings(self) -> Iterator[Metric]:
        hist = HistogramMetricFamily(
            "pinlater_request_duration_seconds", "Thrift request duration by method", labels=["method"]
        )
        summary = Metric("pinlater_request_latency_seconds", "Thrift request latency quantiles by method", "summary")
        for method, t in sorted(self.metrics.timings.items()):
            cumulative, buckets = 0.0, []
            for bound, n in zip(BUCKETS_MS, t.buckets, strict=True):
                cumulative += n
                buckets.append((f"{bound / 1000.0:g}", cumulative))
            buckets.append(("+Inf", float(t.count)))
            hist.add_metric([method], buckets, t.total / 1000.0)
            for _, q in PERCENTILES:
                summary.add_sample(summary.name, {"method": method, "quantile": f"{q:g}"}, t.quantile(q) / 1000.0)
            summary.add_sample(f"{summary.name}_count", {"method": method}, float(t.count))
            summary.add_sample(f"{summary.name}_sum", {"method": method}, t.total / 1000.0)
        yield hist
        yield summary


def memory_families(shards: Iterable[Shard], high_water: float | None) -> Iterator[Metric]:
    """Per shard, memory used against the store's limit, for shards whose store reports memory
    (``backends/pressure.py``; Redis: used_memory and maxmemory, 0 = no limit), as last read
    by the background probe; and the high-water mark above which a shard takes no new jobs."""
    used = GaugeMetricFamily(
        "pinlater_store_memory_used_bytes", "Memory the shard's store uses (last background reading)", labels=["shard"]
    )
    limit = GaugeMetricFamily(
        "pinlater_store_memory_max_bytes", "The shard's store memory limit (Redis maxmemory; 0: none)", labels=["shard"]
    )
    for shard in shards:
        use = memory_use(shard)
        if use is not None:
            used.add_metric([shard.name], float(use.used_bytes))
            limit.add_metric([shard.name], float(use.max_bytes))
    yield used
    yield limit
    if high_water is not None:
        yield GaugeMetricFamily(
            "pinlater_store_memory_high_water_fraction",
            "Above this fraction of its memory limit a shard takes no new jobs",
            value=high_water,
        )


def memory_snapshot(shards: Iterable[Shard], high_water: float | None) -> dict[str, Any]:
    """What ``memory_families`` exports, as JSON for the dashboard: ``{"high_water": f,
    "shards": {name: {"used_bytes", "max_bytes", "fraction", "above"}}}``."""
    out: dict[str, dict[str, Any]] = {}
    for shard in shards:
        use = memory_use(shard)
        if use is not None:
            out[shard.name] = {
                "used_bytes": use.used_bytes,
                "max_bytes": use.max_bytes,
                "fraction": use.fraction,
                "above": use.above(high_water),
            }
    return {"high_water": high_water, "shards": out}


def queue_depth_families(snapshot: QueueSnapshot, num_priorities: int) -> Iterator[Metric]:
    """Each queue's depth from a count pass (``QueueCounts``): ``pinlater_queue_jobs{queue,
    state}`` (the dashboard's count columns, ``pending``, ``pending_future``, ``in_progress``,
    ``succeeded``, ``failed``, summed over priorities and shards), the same by priority, the age
    of the oldest ready PENDING job, and the jobs expired so far."""
    columns = count_columns(snapshot.counts, sorted(snapshot.names), num_priorities)
    jobs = GaugeMetricFamily(
        "pinlater_queue_jobs",
        "Jobs per queue by state, as the dashboard counts them (pending_future: pending, runnable later)",
        labels=["queue", "state"],
    )
    by_priority = GaugeMetricFamily(
        "pinlater_queue_jobs_by_priority",
        "Jobs per queue, priority and state (states as in pinlater_queue_jobs)",
        labels=["queue", "priority", "state"],
    )
    for queue, by_column in columns.items():
        for column, per_priority in by_column.items():
            jobs.add_metric([queue, column], float(sum(per_priority)))
            for priority, n in enumerate(per_priority, start=1):
                by_priority.add_metric([queue, str(priority), column], float(n))
    yield jobs
    yield by_priority
    age = GaugeMetricFamily(
        "pinlater_queue_oldest_ready_age_seconds",
        "How long the queue's oldest ready PENDING job has waited since its run-after (0: none ready),"
        " as of the last count pass",
        labels=["queue"],
    )
    for queue in sorted(snapshot.names):
        age.add_metric([queue], (snapshot.oldest_ready_age_ms(queue) or 0) / 1000.0)
    yield age
    expired = CounterMetricFamily(
        "pinlater_queue_expired_jobs",
        "Jobs that expired (expireAtTimestampMillis) while PENDING, per queue, as the stores count them",
        labels=["queue"],
    )
    for queue in sorted(snapshot.names):
        expired.add_metric([queue], float(snapshot.expired.get(queue, 0)))
    yield expired


def _sanitize(name: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def prometheus_registry(metrics: Metrics, extra: Callable[[], Iterable[Metric]] | None = None) -> CollectorRegistry:
    """A registry of its own (not prometheus-client's global one) with the server's metrics and
    the process's (CPU, memory, open files)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(PrometheusCollector(metrics, extra))
    ProcessCollector(registry=registry)
    return registry


class _Families:
    """What ``generate_latest`` reads of a registry (``collect``): families collected already,
    then those ``later`` makes as they are rendered."""

    def __init__(self, collected: list[Metric], later: Iterable[Metric]) -> None:
        self.collected = collected
        self.later = later

    def collect(self) -> Iterator[Metric]:
        yield from self.collected
        yield from self.later


def render_families(collected: list[Metric], later: Iterable[Metric]) -> bytes:
    """The text exposition of ``collected``, then of ``later`` (made as they are rendered: safe
    off the event loop when they read only what the loop no longer changes, a ``QueueSnapshot``)."""
    return generate_latest(_Families(collected, later))


# -- rate history -----------------------------------------------------------------------------


class RateHistory:
    """Per-queue rates over the last ``keep`` intervals of ``interval`` seconds (10 minutes at the
    default 5 s), which the dashboard draws as small charts.

    Each sample turns the counters' growth since the sample before into per-second rates, kept
    for the queues that moved in that interval only: ``rates()`` reads the queues that moved in
    the window (an idle one has no series), and the history holds a few numbers per queue that
    moved per interval. It kept a copy of every queue's counters per sample instead, and each
    request walked them all: at 10,000 queues, 120 copies of their counters and seconds of the
    event loop per request of a dashboard polling every 5 s.
    """

    def __init__(
        self, metrics: Metrics, interval: float = 5.0, keep: int = 120, clock: Callable[[], float] = time.time
    ) -> None:
        self.metrics = metrics
        self.interval = interval
        self.clock = clock
        #: The counters at the last sample, and its time.
        self._last: tuple[float, dict[str, dict[str, int]]] | None = None
        #: Per interval: its end, its seconds, and the rates (``RATE_KINDS`` per second) of the
        #: queues that moved in it.
        self.intervals: deque[tuple[float, float, dict[str, tuple[float, ...]]]] = deque(maxlen=keep)

    @property
    def last_sample(self) -> object:
        """What changes at each sample (answers made from the history are shared until it does)."""
        return self._last

    def sample(self) -> None:
        now, counters = self.clock(), self.metrics.queue_counters()
        if self._last is not None and now > self._last[0]:
            self.intervals.append((now, now - self._last[0], _moved(self._last[1], counters, now - self._last[0])))
        self._last = (now, counters)

    async def run(self) -> None:
        """Sample forever (cancel to stop)."""
        while True:
            self.sample()
            await asyncio.sleep(self.interval)

    def rates(self) -> dict[str, Any]:
        """``{"interval_seconds", "timestamps_ms": [...], "seconds": [...], "queues": {q: {kind:
        [per second...]}}}``, for the queues that moved in the window.

        Point i covers the ``seconds[i]`` before ``timestamps_ms[i]`` (the last one ends now).
        Summing ``rate * seconds`` over the points gives the counter's growth.
        """
        points = list(self.intervals)
        if self._last is not None:
            t0, before = self._last
            now = self.clock()
            if now > t0:
                moved = _moved(before, self.metrics.queue_counters(), now - t0)
                if points and now - t0 < self.interval / 2:  # a sliver would chart as a spike: widen the last
                    _, last_seconds, last_rates = points[-1]
                    widened = _widened(last_rates, last_seconds, moved, now - t0)
                    points[-1] = (now, last_seconds + now - t0, widened)
                else:
                    points.append((now, now - t0, moved))
        queues = sorted({q for _, _, rates in points for q in rates})
        out: dict[str, dict[str, list[float]]] = {q: {k: [] for k in RATE_KINDS} for q in queues}
        for _, _, rates in points:
            for q in queues:
                series = out[q]
                for kind, rate in zip(RATE_KINDS, rates.get(q, _NO_RATES), strict=True):
                    series[kind].append(rate)
        stamps = [int(end * 1000) for end, _, _ in points]
        spans = [span for _, span, _ in points]
        return {"interval_seconds": self.interval, "timestamps_ms": stamps, "seconds": spans, "queues": out}


_NO_RATES = (0.0,) * len(RATE_KINDS)


def _moved(
    before: dict[str, dict[str, int]], after: dict[str, dict[str, int]], seconds: float
) -> dict[str, tuple[float, ...]]:
    """The rates of the queues whose counters grew from ``before`` to ``after``, ``seconds`` apart."""
    out: dict[str, tuple[float, ...]] = {}
    for queue, counts in after.items():
        old = before.get(queue)
        if counts == old:
            continue
        old = old or {}
        rates = tuple(max(0, counts.get(kind, 0) - old.get(kind, 0)) / seconds for kind in RATE_KINDS)
        if any(rates):
            out[queue] = rates
    return out


def _widened(
    rates: dict[str, tuple[float, ...]], seconds: float, more: dict[str, tuple[float, ...]], more_seconds: float
) -> dict[str, tuple[float, ...]]:
    """The rates over an interval of ``seconds`` at ``rates`` then ``more_seconds`` at ``more``."""
    total = seconds + more_seconds
    return {
        queue: tuple(
            (a * seconds + b * more_seconds) / total
            for a, b in zip(rates.get(queue, _NO_RATES), more.get(queue, _NO_RATES), strict=True)
        )
        for queue in rates.keys() | more.keys()
    }
