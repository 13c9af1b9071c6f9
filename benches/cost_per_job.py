"""What a job costs: CPU per acked job of ``pinlater serve`` and of its store, on each backend, in one run.

For each backend of ``--backends`` (embedded, redis, mysql), a fresh store and a fresh server run
the full job lifecycle at a steady load: ``--producers`` processes enqueue batches of ``--batch``
jobs of ``--body-bytes`` bytes, and ``--consumers`` processes dequeue batches of ``--batch`` with
the previous batch's acks piggy-backed (the original's example worker), all over thriftpy2's
cython framed binary client. Enqueue and ack rates are matched: a producer waits while more than
``--backlog`` jobs are enqueued and not yet acked (default: three batches per consumer), so the
queue neither grows without bound nor runs dry. After ``--warmup`` seconds, a steady interval of
``--seconds`` is measured:

- **jobs/min**: jobs acked in the interval, end to end (a job counts when the dequeue that
  carried its ack has returned), per minute;
- **server µs/job**: CPU seconds (utime + stime from /proc/PID/stat, all threads; the children
  it has reaped excluded) of the ``pinlater serve`` process, plus any live processes it started,
  per acked job. On the embedded store SQLite runs inside the server, so its work is in this
  figure and the store column says so;
- **store µs/job**: the same for the store process and its children (redis-server with
  ``appendonly yes``, ``appendfsync everysec`` and automatic AOF rewrites off, so no fork lands
  in one build's interval and not the other's; ``--aof-rewrites`` turns them on as Redis'
  defaults have them, and the rewrites' CPU is then in the figure, as issue 16's baseline counts
  it; mariadbd with ``innodb_flush_log_at_trx_commit=1``), each started from tests/support/ on
  loopback in a temporary directory and stopped by PID;
- **clients µs/job**: the load generators' CPU (separate processes, so never in the server's
  figure), to show what is left of the machine;
- **busy / stolen**: cores busy on the whole machine over the interval (everything running on
  it, not only this benchmark) and cores the hypervisor stole (from /proc/stat). A run with
  stolen time or other work on the machine ran slow: compare its jobs/min with care (the CPU per
  job is much steadier);
- **per deq**: jobs acked per dequeue request in the interval: how full the batches came back.
  A server whose dequeues outrun its enqueues drains the queue, and its consumers then get part
  batches (more requests per job, so more CPU per job); compare CPU per job at similar fill. With
  the default load (2 producers, 4 consumers) today's server drains the queue on Redis and on
  the embedded store (61-64 jobs per dequeue, thousands of empty ones, against fddf904's 100); 3
  producers and 3 consumers keep it full (``--producers 3 --consumers 3``), which is how to
  compare builds;
- **empty**: dequeues that found no job (they cost the server CPU without acking anything; a
  high count means the consumers outran the producers).

``--against COMMIT`` (repeatable, or a comma list) builds that commit of this repository into its
own virtualenv under ``--cache-dir`` (``git archive`` of the commit, ``python -m venv``, ``pip
install`` of the tree: maturin compiles the extension, a minute or so; the venv is kept per commit
hash, so the next run starts at once) and measures its ``pinlater serve`` the same way, in the
same run: for each backend, ``--rounds`` rounds alternate the builds (current first in odd rounds,
last in even ones), so drift on a shared machine hits each build alike. Only the server differs:
stores and load generators are this tree's. Then it prints ratios current / COMMIT from the sums
over the rounds (the per-round range in brackets): server CPU per job, store CPU per job,
jobs/min; against fddf904 (the issue 15 baseline) beside each its target from the issue.

How to read it: trust the CPU per job first. On this shared 2-core machine (other work running
beside the benchmark: see the busy column) the per-round ratios of CPU per job agree within a few
percent, while jobs/min swings by a third from one run to the next; more ``--rounds`` and longer
``--seconds`` narrow the bracketed ranges. The default load (2 producers, 4 consumers) saturates two
cores with any of the three stores; the clients' own CPU is about 10 µs per job.

``--slow-syncs MS`` runs every build's server under ``strace --seccomp-bpf`` with each
``fdatasync`` and ``fsync`` of the server process made ``MS`` slower, as on a disk with slower
syncs: it slows the embedded store's syncs, not a Redis or MySQL server's (``slow_syncs``).

The current build is the ``pinlater`` this interpreter imports: run with ``PYTHONPATH=$PWD/python``
from a worktree whose extension is built, so that it is the tree under test.

    PYTHONPATH=$PWD/python python benches/cost_per_job.py --seconds 10 --against fddf904
    PYTHONPATH=$PWD/python python benches/cost_per_job.py --backends redis --seconds 20 --rounds 3
    PYTHONPATH=$PWD/python python benches/cost_per_job.py --backends embedded --property BROKER_ENABLED=true

``redis-compact`` (not in the default list) is Redis in the compact layout (issue 16), measured by
each build that has it (an ``--against`` commit before issue 16 is left out, so its ratio to the
current build is printed only for builds that have it); with both ``redis`` and ``redis-compact``
the report adds the compact layout's ratios to the original's, and its jobs/min against each
``--against`` build on the original layout:

    PYTHONPATH=$PWD/python python benches/cost_per_job.py --backends redis,redis-compact --against fddf904
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import multiprocessing as mp
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _common import await_ready, cpu_seconds, machine_ticks, thrift_client

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.support: the real-store helpers the tests use

BACKENDS = ("embedded", "redis", "redis-compact", "mysql")
DEFAULT_BACKENDS = ("embedded", "redis", "mysql")
COMPACT = "redis-compact"
"""Redis in the compact layout (issue 16): the shard's layout record is written before the server
starts (``pll:{S}``); plain ``redis`` gets ``original`` there, which builds before layouts ignore."""
SHARD = "1"
QUEUE = "bench_cost"
BASELINE = "fddf90482a845206fd8e0d980b23a6dbe023047a"
"""Issue 15's baseline: its targets are ratios to this commit."""

TARGETS: dict[tuple[str, str], tuple[str, float]] = {
    ("redis", "server"): ("<=", 0.25),
    ("mysql", "server"): ("<=", 0.25),
    ("embedded", "server"): ("<=", 0.30),
    ("embedded", "jobs"): (">=", 2.0),
    ("mysql", "jobs"): (">=", 1.3),
}
"""Issue 15's targets, current / fddf904: server CPU per acked job, and jobs per minute."""

DEFAULT_CACHE_DIR = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pinlater-bench"
"""Where ``--against`` virtualenvs are kept, one per commit hash (``commit_build``)."""

STEAL_LIMIT = 0.1
"""Cores the hypervisor may steal in a run before its figures are flagged."""


# -- builds -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Build:
    """A ``pinlater`` to serve with: the interpreter that runs ``-m pinlater.cli serve`` and its environment."""

    label: str
    python: str
    env: dict[str, str]
    #: Whether it has the compact Redis layout (issue 16; builds before it do not).
    compact: bool = True
    #: A command the server runs under (``--slow-syncs``), with the server as its child.
    wrapper: tuple[str, ...] = ()


def add_slow_syncs(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--slow-syncs",
        type=float,
        default=0,
        metavar="MS",
        help="each sync of the server process this many ms slower (strace; the embedded store's syncs)",
    )


def add_load(parser: argparse.ArgumentParser) -> None:
    """The options of the lifecycle load (``measure``), for the scripts that run it."""
    parser.add_argument("--seconds", type=float, default=10, help="the measured interval of each run (default 10)")
    parser.add_argument("--warmup", type=float, default=3, help="seconds of load before the interval (default 3)")
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--body-bytes", type=int, default=100)
    parser.add_argument("--producers", type=int, default=2, help="producer processes (default 2)")
    parser.add_argument("--consumers", type=int, default=4, help="consumer processes (default 4)")
    parser.add_argument(
        "--backlog", type=int, default=0, help="most jobs enqueued and not acked (default 3 batches per consumer)"
    )
    parser.add_argument(
        "--property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a line of every server's properties file (repeatable); default: none, each build's defaults",
    )


def add_shards(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--shards",
        type=int,
        default=1,
        choices=range(1, 17),
        metavar="N",
        help="shards of each store (default 1; up to 16): a sharded deployment's request paths",
    )


def slow_syncs(build: Build, ms: float) -> Build:
    """``build`` with every ``fdatasync`` and ``fsync`` of its server ``ms`` slower: the server
    runs under ``strace --seccomp-bpf`` (which stops the server only at those calls, so its CPU,
    counted with the server's, stays small), as a disk with slower syncs would have them. Only the
    server process's syncs: the embedded store's, not those of a Redis or MySQL server."""
    if ms <= 0:
        return build
    if shutil.which("strace") is None:
        raise SystemExit("--slow-syncs needs strace (apt-get install strace)")
    us = round(ms * 1000)
    command = ["strace", "-f", "--seccomp-bpf", "-e", "trace=fdatasync,fsync", "-o", "/dev/null"]
    for call in ("fdatasync", "fsync"):
        command += ["-e", f"inject={call}:delay_exit={us}"]
    return dataclasses.replace(build, wrapper=tuple(command))


def current_build() -> Build:
    return Build("current", sys.executable, dict(os.environ))


def _git(*args: str) -> str:
    done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"git {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout.strip()


def commit_build(commit: str, cache_dir: Path) -> Build:
    """A virtualenv with ``commit`` of this repository installed, built on first use and kept by hash."""
    sha = _git("rev-parse", "--verify", f"{commit}^{{commit}}")
    home = cache_dir / sha
    python = home / "venv" / "bin" / "python"
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}  # the venv's pinlater, not ours
    marker = home / "ready"
    if not marker.exists():
        print(f"building {sha[:10]} into {home} (maturin compiles the extension: a minute or so)", file=sys.stderr)
        shutil.rmtree(home, ignore_errors=True)
        src = home / "src"
        src.mkdir(parents=True)
        archive = subprocess.Popen(["git", "archive", sha], cwd=ROOT, stdout=subprocess.PIPE)
        subprocess.run(["tar", "-x", "-C", str(src)], stdin=archive.stdout, check=True)
        assert archive.stdout is not None
        archive.stdout.close()
        if archive.wait() != 0:
            raise SystemExit(f"git archive {sha} failed")
        subprocess.run([sys.executable, "-m", "venv", str(home / "venv")], check=True)
        log = home / "build.log"
        with log.open("w") as out:
            done = subprocess.run(
                [str(python), "-m", "pip", "install", str(src)], stdout=out, stderr=subprocess.STDOUT, env=env, cwd=home
            )
        if done.returncode != 0:
            raise SystemExit(f"pip install of {sha[:10]} failed; see {log}")
        subprocess.run([str(python), "-c", "import pinlater._pinlater, pinlater.cli"], check=True, env=env, cwd=home)
        shutil.rmtree(src)  # the venv holds the built package; the tree and its Rust target are not needed again
        marker.write_text(sha + "\n")
    has_compact = subprocess.run(
        ["git", "cat-file", "-e", f"{sha}:python/pinlater/backends/redis/lua_compact"],
        cwd=ROOT,
        check=False,
        stderr=subprocess.DEVNULL,
    )
    return Build(sha[:7], str(python), env, compact=has_compact.returncode == 0)


# -- stores and the server --------------------------------------------------------------------


@dataclass
class Store:
    pid: int | None  # None: the store runs inside the server (embedded)
    server_args: list[str]
    properties: list[str] = field(default_factory=list)  # lines of the server's properties file


def shard_names(shards: int) -> list[str]:
    """The shards of a run: ``SHARD`` alone, or ``--shards`` of them named ``1``, ``2``, ..."""
    return [SHARD] if shards == 1 else [str(n) for n in range(1, shards + 1)]


@contextmanager
def running_store(
    backend: str, directory: Path, wrapper: tuple[str, ...] = (), shards: int = 1, aof_rewrites: bool = False
) -> Iterator[Store]:
    """A fresh store for one run, stopped by PID on the way out; a Redis one run by ``wrapper``
    if given (valgrind, for ``instructions_per_job.py --count redis``). ``shards`` above 1: that
    many shards, as a sharded deployment has them (embedded: ``EMBEDDED_NUM_SHARDS`` files; Redis
    and MySQL: that many shard entries on the one server, each its own keys or databases), so the
    store's CPU is still one process's. ``aof_rewrites``: Redis rewrites its AOF as its defaults
    have it (``auto-aof-rewrite-percentage`` 100, past 64 MB), instead of never."""
    if backend == "embedded":
        properties = [f"EMBEDDED_NUM_SHARDS={shards}"] if shards > 1 else []
        yield Store(None, ["--data-dir", str(directory / "data")], properties)
        return
    config = directory / f"{backend}.json"
    if backend.startswith("redis"):
        import redis
        from tests.support.redis_server import RedisServer

        redis_server = RedisServer(
            directory / "redis",
            appendonly=True,
            extra_args=() if aof_rewrites else ("--auto-aof-rewrite-percentage", "0"),
            wrapper=wrapper,
            start_timeout=120 if wrapper else 10,
        )
        try:
            layout = "compact" if backend == COMPACT else "original"
            master = {"host": redis_server.host, "port": redis_server.port}
            with redis.Redis(redis_server.host, redis_server.port) as raw:
                for name in shard_names(shards):
                    raw.set(f"pll:{{{name}}}", layout)
            entries = [{"name": name, "shardConfig": {"master": master}} for name in shard_names(shards)]
            config.write_text(json.dumps({"shards": entries}))
            yield Store(redis_server.pid, ["--backend", "redis", "--backend-config", str(config)])
        finally:
            redis_server.stop()
        return
    from tests.support.mariadb_server import MariaDBServer

    mariadb = MariaDBServer(
        directory / "mariadb", flush_log_at_trx_commit=1, extra_args=("--innodb-buffer-pool-size=256M",)
    )
    try:
        config.write_text(json.dumps({name: mariadb.shard_entry() for name in shard_names(shards)}))
        yield Store(mariadb.pid, ["--backend", "mysql", "--backend-config", str(config)])
    finally:
        mariadb.stop()


class Server:
    """``pinlater serve`` of one build in a subprocess, its log drained by a thread."""

    def __init__(self, build: Build, directory: Path, store_args: list[str], properties: list[str]) -> None:
        props = directory / "server.properties"
        props.write_text("".join(f"{line}\n" for line in properties))
        cmd = [*build.wrapper, build.python, "-m", "pinlater.cli", "serve", "--port", "0", "--admin-port", "0"]
        cmd += ["--properties", str(props), *store_args]
        # A wrapped server is its wrapper's child: both get a session of their own, and stop
        # signals the whole of it (strace, signalled alone, would leave the server running).
        self.group = bool(build.wrapper)
        self.proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=build.env,
            cwd=directory,
            start_new_session=self.group,
        )
        self.port, self.lines = await_ready(self.proc, f"{build.label}: server")

    def _signal(self, sig: int) -> None:
        if self.group:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)
        else:
            self.proc.send_signal(sig)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self._signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGKILL)
                self.proc.wait()
        if self.group:  # the server may outlive its wrapper (strace detaches as it ends)
            deadline = time.monotonic() + 30
            with contextlib.suppress(ProcessLookupError):
                while time.monotonic() < deadline:
                    os.killpg(self.proc.pid, 0)  # raises once the session is empty
                    time.sleep(0.05)
                os.killpg(self.proc.pid, signal.SIGKILL)


def tree_cpu_seconds(pid: int) -> tuple[float, int]:
    """(CPU seconds, processes) of a process and its live descendants, each without its reaped children:
    a server that forks workers sharing the port is measured whole."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        parents.setdefault(ppid, []).append(int(entry))
    total, count, todo = 0.0, 0, [pid]
    while todo:
        current = todo.pop()
        try:
            total += cpu_seconds(current)
        except OSError:  # exited meanwhile
            continue
        count += 1
        todo += parents.get(current, [])
    return total, count


def store_cpu_seconds(pid: int) -> float:
    """CPU seconds of a store process with its children, live (``tree_cpu_seconds``) and reaped
    (cutime + cstime of /proc/PID/stat): what Redis' AOF rewrites cost is in its figure, whichever
    side of the interval's ends each rewrite started or ended."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    reaped = (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")
    return tree_cpu_seconds(pid)[0] + reaped


# -- the load ---------------------------------------------------------------------------------


def producer(
    port: int, batch: int, body: bytes, backlog: int, counters: dict[str, Any], stop: Any, keyed: int = 0
) -> None:
    """Enqueue batches while fewer than ``backlog`` jobs are enqueued and not yet acked; with
    ``keyed`` 1 or more, every job carries a dedup key of its own, and above 1 also a group key,
    one of ``keyed`` groups in turn (``benches/dedup_keys.py``)."""
    from pinlater.idl import idl

    client = thrift_client(port)
    ctx = idl.RequestContext(source=f"bench-producer:{os.getpid()}")
    request = idl.PinLaterEnqueueRequest(queueName=QUEUE, jobs=[idl.PinLaterJob(body=body) for _ in range(batch)])
    enqueued, acked = counters["enqueued"], counters["acked"]
    sent = 0
    while not stop.is_set():
        if enqueued.value - acked.value >= backlog:
            time.sleep(0.0005)
            continue
        if keyed:
            for job in request.jobs:
                job.dedupKey = f"{os.getpid()}-{sent}"
                if keyed > 1:
                    job.groupKey = f"group-{sent % keyed}"
                sent += 1
        client.enqueueJobs(ctx, request)
        with enqueued.get_lock():
            enqueued.value += batch


def consumer(port: int, batch: int, counters: dict[str, Any], stop: Any) -> None:
    """Dequeue batches, acking the previous batch in the same request."""
    from pinlater.idl import idl

    client = thrift_client(port)
    ctx = idl.RequestContext(source=f"bench-consumer:{os.getpid()}")
    acked, empty, dequeues = counters["acked"], counters["empty"], counters["dequeues"]
    acks: list[Any] = []
    while not stop.is_set():
        ack_request = idl.PinLaterJobAckRequest(queueName=QUEUE, jobsSucceeded=acks) if acks else None
        got = client.dequeueJobs(
            ctx, idl.PinLaterDequeueRequest(queueName=QUEUE, limit=batch, jobAckRequest=ack_request)
        )
        if acks:
            with acked.get_lock():
                acked.value += len(acks)
        with dequeues.get_lock():
            dequeues.value += 1
        acks = [idl.PinLaterJobAckInfo(jobDescriptor=d) for d in got.jobs]
        if not got.jobs:
            with empty.get_lock():
                empty.value += 1


# -- one run ----------------------------------------------------------------------------------


@dataclass
class Sample:
    at: float
    acked: int
    enqueued: int
    empty: int
    dequeues: int
    server_cpu: float
    server_procs: int
    store_cpu: float
    client_cpu: float
    ticks: tuple[int, int, int]


@dataclass
class Run:
    backend: str
    build: str
    round: int
    seconds: float
    acked: int
    enqueued: int
    empty: int
    dequeues: int
    server_cpu: float
    server_procs: int
    store_cpu: float | None
    client_cpu: float
    busy_cores: float
    stolen_cores: float


def measure(build: Build, backend: str, round_no: int, args: argparse.Namespace, tmp: Path, serve: Any = None) -> Run:
    """One run: a fresh store and server of ``build``, the load, a warm-up, then the measured
    interval. ``serve``: what starts the server instead of ``Server`` (same arguments; an object
    with ``proc``, ``port``, ``lines`` and ``stop()``), as ``redis_floor.py`` starts its own."""
    from pinlater.idl import idl

    directory = tmp / f"{backend}-{build.label}-{round_no}"
    directory.mkdir()
    rewrites = getattr(args, "aof_rewrites", False)
    with running_store(backend, directory, shards=getattr(args, "shards", 1), aof_rewrites=rewrites) as store:
        server = (serve or Server)(build, directory, store.server_args, [*store.properties, *args.property])
        workers: list[Any] = []
        stop = mp.Event()
        try:
            setup = thrift_client(server.port)
            setup.createQueue(idl.RequestContext(source="bench"), QUEUE)
            setup.close()
            counters = {name: mp.Value("q", 0) for name in ("enqueued", "acked", "empty", "dequeues")}
            body = b"x" * args.body_bytes
            backlog = args.backlog or 3 * args.batch * args.consumers
            workers = [
                mp.Process(
                    target=producer,
                    args=(server.port, args.batch, body, backlog, counters, stop, getattr(args, "keyed", 0)),
                    daemon=True,
                )
                for _ in range(args.producers)
            ]
            workers += [
                mp.Process(target=consumer, args=(server.port, args.batch, counters, stop), daemon=True)
                for _ in range(args.consumers)
            ]
            for w in workers:
                w.start()
            pids = [w.pid for w in workers]

            def sample() -> Sample:
                if any(w.exitcode is not None for w in workers):
                    raise SystemExit(f"{backend}/{build.label}: a load process died (see its traceback above)")
                if server.proc.poll() is not None:
                    raise SystemExit(f"{backend}/{build.label}: the server exited:\n{''.join(server.lines[-30:])}")
                server_cpu, procs = tree_cpu_seconds(server.proc.pid)
                return Sample(
                    time.monotonic(),
                    counters["acked"].value,
                    counters["enqueued"].value,
                    counters["empty"].value,
                    counters["dequeues"].value,
                    server_cpu,
                    procs,
                    store_cpu_seconds(store.pid) if store.pid is not None else 0.0,
                    sum(cpu_seconds(pid) for pid in pids),
                    machine_ticks(),
                )

            time.sleep(args.warmup)
            s0 = sample()
            time.sleep(args.seconds)
            s1 = sample()
        finally:
            stop.set()
            for w in workers:
                w.join(30)
                if w.is_alive():
                    w.terminate()
                    w.join()
            server.stop()
    elapsed_ticks = max(s1.ticks[2] - s0.ticks[2], 1)
    cores = os.cpu_count() or 1
    return Run(
        backend=backend,
        build=build.label,
        round=round_no,
        seconds=s1.at - s0.at,
        acked=s1.acked - s0.acked,
        enqueued=s1.enqueued - s0.enqueued,
        empty=s1.empty - s0.empty,
        dequeues=s1.dequeues - s0.dequeues,
        server_cpu=s1.server_cpu - s0.server_cpu,
        server_procs=s1.server_procs,
        store_cpu=None if store.pid is None else s1.store_cpu - s0.store_cpu,
        client_cpu=s1.client_cpu - s0.client_cpu,
        busy_cores=(s1.ticks[0] - s0.ticks[0]) / elapsed_ticks * cores,
        stolen_cores=(s1.ticks[1] - s0.ticks[1]) / elapsed_ticks * cores,
    )


# -- figures ----------------------------------------------------------------------------------


@dataclass
class Figures:
    """Per-job figures of one run or of several summed (a ratio of sums, not a mean of ratios)."""

    acked: int
    seconds: float
    server_cpu: float
    store_cpu: float | None
    client_cpu: float

    @classmethod
    def of(cls, runs: list[Run]) -> Figures:
        stores = [r.store_cpu for r in runs if r.store_cpu is not None]
        return cls(
            sum(r.acked for r in runs),
            sum(r.seconds for r in runs),
            sum(r.server_cpu for r in runs),
            sum(stores) if stores else None,
            sum(r.client_cpu for r in runs),
        )

    def per_job_us(self, cpu: float | None) -> float | None:
        return None if cpu is None or not self.acked else cpu / self.acked * 1e6

    @property
    def jobs_per_min(self) -> float:
        return self.acked / self.seconds * 60 if self.seconds else 0.0

    def values(self) -> dict[str, float | None]:
        return {
            "server": self.per_job_us(self.server_cpu),
            "store": self.per_job_us(self.store_cpu),
            "jobs": self.jobs_per_min,
        }


def _us(value: float | None, absent: str = "-") -> str:
    return absent if value is None else f"{value:.1f}"


def _jobs(per_min: float) -> str:
    return f"{per_min / 1e6:.2f}M" if per_min >= 1e6 else f"{per_min / 1e3:.0f}k"


def report(runs: list[Run], builds: list[Build], args: argparse.Namespace) -> None:
    print(
        f"cost per acked job: enqueue + dequeue (acks piggy-backed), batch {args.batch}, {args.body_bytes}-byte "
        f"bodies, {args.producers} producer(s) + {args.consumers} consumer(s) (thriftpy2 cython framed binary), "
        f"warm-up {args.warmup:g} s, {args.seconds:g} s measured, {args.rounds} round(s), "
        f"{getattr(args, 'shards', 1)} shard(s) per store, {os.cpu_count()} CPUs"
    )
    header = (
        f"{'backend':13} {'build':8} {'round':>5} {'jobs/min':>9} {'server µs/job':>14} {'store µs/job':>13} "
        f"{'clients µs/job':>15} {'busy':>5} {'stolen':>7} {'per deq':>7} {'empty':>6}"
    )
    print(header)
    for r in runs:
        f = Figures.of([r])
        store = _us(f.per_job_us(r.store_cpu), "in server")
        flag = "  (stolen!)" if r.stolen_cores > STEAL_LIMIT else ""
        procs = f"  ({r.server_procs} server processes)" if r.server_procs > 1 else ""
        print(
            f"{r.backend:13} {r.build:8} {r.round:5d} {_jobs(f.jobs_per_min):>9} {_us(f.per_job_us(r.server_cpu)):>14} "
            f"{store:>13} {_us(f.per_job_us(r.client_cpu)):>15} {r.busy_cores:5.2f} {r.stolen_cores:7.2f} "
            f"{r.acked / max(r.dequeues, 1):7.1f} {r.empty:6d}{flag}{procs}"
        )
    print("sums over the rounds:")
    backends = list(dict.fromkeys(r.backend for r in runs))
    for backend in backends:
        for build in builds:
            mine = [r for r in runs if r.backend == backend and r.build == build.label]
            if not mine:
                continue
            f = Figures.of(mine)
            print(
                f"{backend:13} {build.label:8} {'all':>5} {_jobs(f.jobs_per_min):>9} "
                f"{_us(f.per_job_us(f.server_cpu)):>14} {_us(f.per_job_us(f.store_cpu), 'in server'):>13} "
                f"{_us(f.per_job_us(f.client_cpu)):>15}"
            )
    if "embedded" in backends:
        print("embedded: SQLite runs inside pinlater serve, so its work is in the server column")
    current = builds[0]
    for other in builds[1:]:
        baseline = other.label == BASELINE[:7]
        print(f"ratios {current.label} / {other.label} (sums over the rounds; per-round range in brackets):")
        print(f"{'backend':9} {'server CPU per job':>20} {'store CPU per job':>20} {'jobs/min':>20}")
        verdicts = []
        for backend in backends:
            cells = [_ratio(runs, backend, current.label, other.label, key) for key in ("server", "store", "jobs")]
            print(f"{backend:9} " + " ".join(f"{cell[1]:>20}" for cell in cells))
            for key, (value, _) in zip(("server", "store", "jobs"), cells, strict=True):
                target = TARGETS.get((backend, key)) if baseline else None
                if target is not None and value is not None:
                    op, bound = target
                    met = value <= bound if op == "<=" else value >= bound
                    what = "server CPU per job" if key == "server" else "jobs/min"
                    verdicts.append(f"  {backend} {what} {op} {bound:g}: {value:.2f}, {'met' if met else 'NOT met'}")
        if verdicts:
            print("issue 15's targets, current / fddf904 (on the embedded store the server's CPU includes SQLite's):")
            print("\n".join(verdicts))
    if "redis" in backends and COMPACT in backends:
        layout_report(runs, builds)
    stolen = max((r.stolen_cores for r in runs), default=0.0)
    if stolen > STEAL_LIMIT:
        print(f"the hypervisor stole up to {stolen:.2f} cores in a run: its jobs/min says little (CPU per job less so)")


def layout_report(runs: list[Run], builds: list[Build]) -> None:
    """Issue 16's figures: the compact layout against the original, the current build on both in
    the same rounds; and its Redis CPU and jobs/min against each other build on the original
    layout."""
    print("the compact Redis layout / the original (current build; per-round range in brackets):")
    print(f"{'':9} {'server CPU per job':>20} {'store CPU per job':>20} {'jobs/min':>20}")
    cells = [_ratio(runs, (COMPACT, "redis"), "current", "current", key) for key in ("server", "store", "jobs")]
    print(f"{'layouts':9} " + " ".join(f"{cell[1]:>20}" for cell in cells))
    store = cells[1][0]
    if store is not None:
        print(f"  issue 16: Redis CPU per acked job, compact / original <= 0.27: {store:.2f}, {_met(store <= 0.27)}")
    for other in builds[1:]:
        _, cell = _ratio(runs, (COMPACT, "redis"), "current", other.label, "store")
        print(f"  Redis CPU per acked job, current on the compact layout / {other.label} on the original: {cell}")
        value, cell = _ratio(runs, (COMPACT, "redis"), "current", other.label, "jobs")
        print(f"  jobs/min, current on the compact layout / {other.label} on the original: {cell}")
        if other.label == BASELINE[:7] and value is not None:
            print(f"  issue 16: >= 2 against fddf904: {value:.2f}, {_met(value >= 2)}")


def _met(ok: bool) -> str:
    return "met" if ok else "NOT met"


def _ratio(
    runs: list[Run], backend: str | tuple[str, str], current: str, other: str, key: str
) -> tuple[float | None, str]:
    """(ratio of the sums over the rounds, the cell: that ratio and the range of the per-round ratios).
    ``backend`` is one backend, or (the current build's, the other build's) to compare two."""
    mine_backend, their_backend = (backend, backend) if isinstance(backend, str) else backend
    mine = [r for r in runs if r.backend == mine_backend and r.build == current]
    theirs = [r for r in runs if r.backend == their_backend and r.build == other]
    a = Figures.of(mine).values()[key] if mine else None
    b = Figures.of(theirs).values()[key] if theirs else None
    if a is None or not b:
        return None, "-"
    per_round = []
    for m in mine:
        t = [r for r in theirs if r.round == m.round]
        x, y = Figures.of([m]).values()[key], Figures.of(t).values()[key] if t else None
        if x is not None and y:
            per_round.append(x / y)
    cell = f"{a / b:.2f}"
    if len(per_round) > 1:
        cell += f" [{min(per_round):.2f}-{max(per_round):.2f}]"
    return a / b, cell


# -- main -------------------------------------------------------------------------------------


def _split(values: list[str], allowed: tuple[str, ...] | None = None) -> list[str]:
    out = [v.strip() for value in values for v in value.split(",") if v.strip()]
    if allowed is not None:
        for v in out:
            if v not in allowed:
                raise SystemExit(f"unknown backend {v!r} (one of {', '.join(allowed)})")
    return list(dict.fromkeys(out))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--backends",
        action="append",
        default=[],
        help=f"comma list of {', '.join(BACKENDS)} (default {','.join(DEFAULT_BACKENDS)})",
    )
    add_load(parser)
    parser.add_argument("--rounds", type=int, default=2, help="runs of each build on each backend (default 2)")
    parser.add_argument(
        "--against",
        action="append",
        default=[],
        metavar="COMMIT",
        help="also measure this commit's server, built into its own virtualenv (repeatable, or a comma list)",
    )
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=DEFAULT_CACHE_DIR,
        help="where --against virtualenvs are kept, one per commit hash (default ~/.cache/pinlater-bench)",
    )
    parser.add_argument(
        "--aof-rewrites",
        action="store_true",
        help="Redis rewrites its AOF as by default, and the store's CPU counts the rewrites (default: never)",
    )
    add_shards(parser)
    add_slow_syncs(parser)
    args = parser.parse_args()
    backends = _split(args.backends, BACKENDS) or list(DEFAULT_BACKENDS)

    builds = [current_build(), *(commit_build(c, args.cache_dir) for c in _split(args.against))]
    builds = [slow_syncs(b, args.slow_syncs) for b in builds]
    runs: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="pinlater-cost-") as tmp:
        for round_no in range(1, args.rounds + 1):
            for backend in backends:
                order = builds if round_no % 2 else builds[::-1]
                for build in order:
                    if backend == COMPACT and not build.compact:
                        continue  # builds before issue 16 have no compact layout
                    run = measure(build, backend, round_no, args, Path(tmp))
                    print(
                        f"  {backend} {build.label} round {round_no}: {run.acked} acked in {run.seconds:.1f} s",
                        file=sys.stderr,
                        flush=True,
                    )
                    runs.append(run)
    report(runs, builds, args)


if __name__ == "__main__":
    main()
