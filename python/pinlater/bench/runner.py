"""One ``pinlater bench`` run: start (or target) a server, drive it with producer and consumer
processes for a duration, show progress each second, and return the result as a JSON-ready dict.
"""

from __future__ import annotations

import math
import multiprocessing as mp
import os
import platform
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from queue import Empty
from typing import Any, TextIO

from pinlater.bench import local
from pinlater.bench.load import OpSample, WorkerSpec, run_worker
from pinlater.bench.stats import ms, si

OPS = ("enqueue", "dequeue", "ack")


@dataclass(frozen=True)
class BenchConfig:
    backend: str
    #: host:port of a running server, instead of starting one.
    target: tuple[str, int] | None
    duration: float
    producers: int
    consumers: int
    batch: int
    body_bytes: int
    piggyback_acks: bool = False
    queue: str = "pinlater_bench"
    #: Server processes (SERVER_PROCESSES) of the started server, or of the target.
    processes: int = 1
    #: PIDs to measure CPU of when targeting a running server on this machine.
    server_pid: int | None = None
    store_pid: int | None = None


@dataclass
class _Setup:
    host: str
    port: int
    server_pid: int | None
    store_pid: int | None


@contextmanager
def _servers(config: BenchConfig) -> Iterator[_Setup]:
    if config.target is not None:
        yield _Setup(config.target[0], config.target[1], config.server_pid, config.store_pid)
        return
    with tempfile.TemporaryDirectory(prefix="pinlater-bench-") as tmp:
        store: local.LocalStore | None = None
        server: local.LocalServer | None = None
        try:
            if config.backend == "redis":
                store = local.start_redis(Path(tmp) / "redis")
            elif config.backend == "mysql":
                store = local.start_mariadb(Path(tmp) / "mariadb")
            server = local.LocalServer(Path(tmp) / "server", config.backend, store, config.processes)
            yield _Setup(local.HOST, server.port, server.pid, store.pid if store else None)
        finally:
            if server is not None:
                server.stop()
            if store is not None:
                store.stop()


def _cpu(pid: int | None) -> float | None:
    if pid is None:
        return None
    try:
        return local.tree_cpu_seconds(pid)
    except OSError:
        return None


def _delta(now: float | None, before: float | None) -> float | None:
    return None if now is None or before is None else round(now - before, 3)


class _Collector:
    """Samples from the load processes, per second and in total."""

    def __init__(self) -> None:
        self.seconds: dict[int, dict[str, OpSample]] = {}
        self.total: dict[str, OpSample] = {op: OpSample() for op in OPS}

    def add(self, second: int, ops: dict[str, OpSample]) -> None:
        bucket = self.seconds.setdefault(second, {})
        for name, sample in ops.items():
            bucket.setdefault(name, OpSample()).merge(sample)
            self.total[name].merge(sample)


def run_bench(config: BenchConfig, progress: TextIO) -> dict[str, Any]:
    """Run the benchmark; raises ``local.MissingBinaryError``/``local.StartError`` or
    ``PinLaterError`` (the queue could not be created) before any load starts."""
    from pinlater.client import PinLaterClient

    with _servers(config) as setup:
        with PinLaterClient(f"{setup.host}:{setup.port}", source="pinlater-bench", retries=1) as client:
            client.create_queue(config.queue)
            result = _drive(config, setup, progress)
            try:
                from pinlater.client import JobState

                result["backlog_pending_at_end"] = client.count(config.queue, JobState.PENDING)
            except Exception:  # informative only
                result["backlog_pending_at_end"] = None
    return result


def _drive(config: BenchConfig, setup: _Setup, progress: TextIO) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    out: Any = ctx.Queue()
    go = ctx.Event()
    start_at = ctx.Value("d", 0.0)
    specs = [
        WorkerSpec(
            role, i, setup.host, setup.port, config.queue, config.batch, config.body_bytes, config.piggyback_acks
        )
        for i, role in enumerate(["producer"] * config.producers + ["consumer"] * config.consumers)
    ]
    procs = [ctx.Process(target=run_worker, args=(s, go, start_at, config.duration, out), daemon=True) for s in specs]
    for p in procs:
        p.start()
    try:
        _wait_ready(out, procs)
        collector = _Collector()
        server0, store0 = _cpu(setup.server_pid), _cpu(setup.store_pid)
        start = time.time() + 0.2
        start_at.value = start
        go.set()
        timeline, load_cpu = _monitor(config, setup, collector, out, procs, start, (server0, store0), progress)
        server1, store1 = _cpu(setup.server_pid), _cpu(setup.store_pid)
    finally:
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.kill()
    return _result(config, collector, timeline, load_cpu, _delta(server1, server0), _delta(store1, store0))


def _wait_ready(out: Any, procs: list[Any]) -> None:
    ready = 0
    deadline = time.monotonic() + 60
    while ready < len(procs):
        try:
            message = out.get(timeout=0.5)
        except Empty:
            if any(p.exitcode not in (None, 0) for p in procs) or time.monotonic() > deadline:
                raise local.StartError("a load process failed to start (could it connect to the server?)") from None
            continue
        if message[0] == "ready":
            ready += 1


def _monitor(
    config: BenchConfig,
    setup: _Setup,
    collector: _Collector,
    out: Any,
    procs: list[Any],
    start: float,
    cpu0: tuple[float | None, float | None],
    progress: TextIO,
) -> tuple[list[dict[str, Any]], float]:
    """Collect samples until every process is done; a progress line and a CPU reading per second."""
    done: dict[int, float] = {}
    cpu_marks: dict[int, tuple[float | None, float | None]] = {0: cpu0}
    shown = 0
    hard_deadline = start + config.duration + 120
    while len(done) < len(procs):
        try:
            message = out.get(timeout=0.1)
        except Empty:
            message = None
            stuck = time.time() > hard_deadline or all(p.exitcode is not None for p in procs)
            if stuck and len(done) < len(procs):
                raise local.StartError(
                    f"{len(procs) - len(done)} load process(es) died; see the output above"
                ) from None
        if message is not None and message[0] == "sample":
            collector.add(message[2], message[3])
        elif message is not None and message[0] == "done":
            done[message[1]] = message[2]
        elapsed = time.time() - start
        second = int(elapsed)
        if second not in cpu_marks and second <= math.ceil(config.duration):
            cpu_marks[second] = (_cpu(setup.server_pid), _cpu(setup.store_pid))
        # A second is shown once it is 0.3 s over: every process has flushed it by then.
        while shown + 1 <= min(config.duration, elapsed - 0.3):
            _show(shown, config, collector, cpu_marks, progress)
            shown += 1
    total = math.ceil(config.duration)
    while shown < total:  # the last second(s), now that every process has flushed
        _show(shown, config, collector, cpu_marks, progress)
        shown += 1
    timeline = [_timeline_row(s, collector, cpu_marks) for s in range(total)]
    return timeline, sum(done.values())


def _timeline_row(
    second: int, collector: _Collector, cpu_marks: dict[int, tuple[float | None, float | None]]
) -> dict[str, Any]:
    ops = collector.seconds.get(second, {})
    row: dict[str, Any] = {"t": second + 1}
    for op in OPS:
        sample = ops.get(op, OpSample())
        row[f"{op}_jobs_per_min"] = sample.jobs * 60
        summary = sample.latency.summary()
        row[f"{op}_p50_ms"] = summary["p50"]
        row[f"{op}_p99_ms"] = summary["p99"]
    before, after = cpu_marks.get(second), cpu_marks.get(second + 1)
    if before and after:
        row["server_cores"] = _delta(after[0], before[0])
        row["store_cores"] = _delta(after[1], before[1])
    return row


def _show(
    second: int,
    config: BenchConfig,
    collector: _Collector,
    cpu_marks: dict[int, tuple[float | None, float | None]],
    progress: TextIO,
) -> None:
    row = _timeline_row(second, collector, cpu_marks)
    rates = "  ".join(f"{op} {si(row[f'{op}_jobs_per_min'])}/min" for op in OPS)
    p99 = " ".join(f"{op[:3]} {ms(row[f'{op}_p99_ms'])}" for op in OPS)
    cpu = ""
    if row.get("server_cores") is not None:
        cpu = f" | server {row['server_cores']:.2f} cores"
        if row.get("store_cores") is not None:
            cpu += f", store {row['store_cores']:.2f}"
    errors = sum(n for sample in collector.seconds.get(second, {}).values() for n in sample.errors.values())
    total = math.ceil(config.duration)
    failing = f" | errors {errors}" if errors else ""
    print(f"[{second + 1:3d}/{total}s] {rates} | p99 {p99}{cpu}{failing}", file=progress, flush=True)


def _result(
    config: BenchConfig,
    collector: _Collector,
    timeline: list[dict[str, Any]],
    load_cpu: float,
    server_cpu: float | None,
    store_cpu: float | None,
) -> dict[str, Any]:
    from pinlater import __version__

    secs = config.duration
    throughput: dict[str, Any] = {}
    latency: dict[str, Any] = {}
    for op in OPS:
        t = collector.total[op]
        throughput[op] = {
            "jobs": t.jobs,
            "requests": t.requests,
            "jobs_per_min": round(t.jobs / secs * 60, 1),
            "jobs_per_sec": round(t.jobs / secs, 1),
            "requests_per_sec": round(t.requests / secs, 1),
            "errors": dict(sorted(t.errors.items())),
        }
        latency[op] = t.latency.summary() if t.latency.count else None
    throughput["dequeue"]["empty_dequeues"] = collector.total["dequeue"].empty
    lifecycle = min(collector.total[op].jobs for op in OPS) / secs

    def cores(cpu: float | None) -> float | None:
        return None if cpu is None else round(cpu / secs, 3)

    return {
        "pinlater_version": __version__,
        "started_at": datetime.fromtimestamp(time.time() - secs, UTC).isoformat(timespec="seconds"),
        "backend": config.backend if config.target is None else f"{config.backend} (target)",
        "config": {k: v for k, v in asdict(config).items() if k not in ("server_pid", "store_pid")},
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
        "throughput": throughput,
        "lifecycle_jobs_per_min": round(lifecycle * 60, 1),
        "latency_ms": latency,
        "cpu_seconds": {"server": server_cpu, "store": store_cpu, "load_generator": round(load_cpu, 3)},
        "cpu_cores": {"server": cores(server_cpu), "store": cores(store_cpu), "load_generator": cores(load_cpu)},
        "timeline": timeline,
    }
