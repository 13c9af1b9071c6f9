"""The MySQL store's hot path: Rust (``NativeMySQLHotPath``) against today's ``ThreadedHotPath``
(PyMySQL on a thread pool), in ONE run on one MariaDB it starts itself (stopped at the end).

A third path, ``blocking``, drives the same Rust store the other way: each call on the thread
pool with the GIL released (``MySQLShard.call_blocking``), for the choice between the two.

Each phase runs ``--concurrency`` loops on one event loop, each loop repeating: enqueue a batch of
``--batch`` jobs of ``--body-bytes`` bytes, dequeue ``--batch``, ack them all as succeeded. The two
paths alternate for ``--rounds`` rounds of ``--seconds`` each, each phase on a fresh queue.
Printed per path: jobs acked per second, this process's CPU per acked job (and by thread:
the event loop's, the Rust workers', the thread pool's; from /proc, in clock ticks) (every thread: the
event loop, the thread pool, the Rust workers; user and system, from ``getrusage``) and mariadbd's.

Inputs as the server hands them over: the enqueue batches are made before the clock starts
(``NewJob`` lists for the threaded path, ``NewJobBatch`` for the native one, which the wire
decoder makes without Python objects); the acks are built inside the loop from what the dequeue
returned (``AckItem``s from ``ClaimedJob``s, as today's handler does per job; an ``AckGroup``
from ``ClaimedJobs.to_list()`` for the native path, a per-job cost the wire decoder avoids, so
the native figure is if anything high).

    PYTHONPATH=$PWD/python python benches/mysql_native_hot.py --seconds 5 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from _common import cpu_seconds

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.support.mariadb_server: the MariaDB helper the tests use

from tests.support.mariadb_server import MariaDBServer  # noqa: E402

from pinlater._pinlater import AckGroup, NewJobBatch  # noqa: E402
from pinlater.backends.base import AckItem, NewJob  # noqa: E402
from pinlater.backends.mysql import Endpoint, MySQLShardConfig, MySQLStore  # noqa: E402
from pinlater.backends.mysql.native_hot import NativeMySQLHotPath  # noqa: E402
from pinlater.backends.threaded import ThreadedHotPath  # noqa: E402

T = TypeVar("T")


class BlockingNative:
    """The Rust hot path driven the other way: each call on the thread pool (``offload``), the
    GIL released while it runs (``MySQLShard.call_blocking``), instead of on Rust workers that
    complete an asyncio future."""

    def __init__(self, native: NativeMySQLHotPath, offload: Callable[..., Awaitable[Any]]) -> None:
        self._shard = native._native
        self._offload = offload

    async def _call(self, method: str, queue: str, now_ms: int, **kwargs: Any) -> Any:
        database = f"plq_1_{queue}"
        value, error = await self._offload(
            functools.partial(self._shard.call_blocking, method, queue, database, now_ms, **kwargs)
        )
        if error is not None:
            raise RuntimeError(error)
        return value

    async def enqueue_jobs(self, queue: str, jobs: NewJobBatch, now_ms: int) -> Any:
        return await self._call("enqueue_jobs", queue, now_ms, jobs=jobs)

    async def dequeue_jobs(self, queue: str, priority: int, limit: int, claim: str, now_ms: int, dry_run: bool) -> Any:
        kwargs = {"priority": priority, "limit": limit, "claim": claim, "dry_run": dry_run}
        return await self._call("dequeue_jobs", queue, now_ms, **kwargs)

    async def ack_jobs(self, queue: str, acks: AckGroup, now_ms: int) -> None:
        await self._call("ack_jobs", queue, now_ms, acks=acks)


def thread_cpu() -> dict[str, float]:
    """CPU seconds of this process's threads, summed by kind: the event loop's (main), the Rust
    workers' (``mysql-*``), the rest (the thread pool)."""
    ticks = os.sysconf("SC_CLK_TCK")
    kinds: dict[str, float] = {"loop": 0.0, "rust": 0.0, "pool": 0.0}
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/stat") as f:
                head, tail = f.read().rsplit(")", 1)
        except OSError:  # the thread ended meanwhile
            continue
        name = head.split("(", 1)[1]
        fields = tail.split()
        kind = "loop" if int(task) == os.getpid() else "rust" if name.startswith("mysql-") else "pool"
        kinds[kind] += (int(fields[11]) + int(fields[12])) / ticks
    return kinds


async def phase(path: str, hot: Any, queue: str, args: argparse.Namespace, now_ms: int) -> tuple[int, float]:
    """Run the loops for ``args.seconds``: (jobs acked, wall seconds)."""
    body = b"x" * args.body_bytes
    tuples = [(1, body, now_ms, 3, "") for _ in range(args.batch)]
    native_batch = NewJobBatch(tuples)
    python_batch = [NewJob._make(t) for t in tuples]
    acked = 0
    stop = time.monotonic() + args.seconds

    async def loop(k: int) -> None:
        nonlocal acked
        n = 0
        while time.monotonic() < stop:
            n += 1
            claim = f"{path}-{k}-{n}"
            if path != "threaded":
                await hot.enqueue_jobs(queue, native_batch, now_ms)
                claimed = await hot.dequeue_jobs(queue, 1, args.batch, claim, now_ms, False)
                group = AckGroup([(1, job[0], "", 0) for job in claimed.to_list()], [])
                await hot.ack_jobs(queue, group, now_ms)
                acked += len(group)
            else:
                await hot.enqueue_jobs(queue, python_batch, now_ms)
                jobs = await hot.dequeue_jobs(queue, 1, args.batch, claim, now_ms, False)
                items = [AckItem(1, job.local_id) for job in jobs]
                await hot.ack_jobs(queue, items, [], now_ms)
                acked += len(items)

    started = time.monotonic()
    await asyncio.gather(*(loop(k) for k in range(args.concurrency)))
    return acked, time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--body-bytes", type=int, default=100)
    parser.add_argument("--pool-size", type=int, default=8)
    parser.add_argument(
        "--paths",
        default="threaded,native,blocking",
        help="paths to run: threaded (PyMySQL), native (Rust workers), blocking (Rust on the thread pool)",
    )
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="pinlater-bench-mysql-hot-") as tmp:
        server = MariaDBServer(Path(tmp), flush_log_at_trx_commit=2)
        try:
            run(server, args)
        finally:
            server.stop()


def run(server: MariaDBServer, args: argparse.Namespace) -> None:
    config = MySQLShardConfig(Endpoint(server.host, server.port), server.user, server.password)
    store = MySQLStore("1", config, pool_size=args.pool_size)
    executor = ThreadPoolExecutor(args.pool_size)
    loop = asyncio.new_event_loop()

    def offload(fn: Callable[..., T], /, *args_: object) -> Awaitable[T]:
        return loop.run_in_executor(executor, fn, *args_)

    native = NativeMySQLHotPath(store, offload)
    every: dict[str, Any] = {
        "threaded": ThreadedHotPath(store, offload),
        "native": native,
        "blocking": BlockingNative(native, offload),
    }
    paths = {name: every[name] for name in args.paths.split(",")}
    results: dict[str, list[tuple[float, float, float]]] = {name: [] for name in paths}
    mariadb_pid = server.pid
    assert mariadb_pid is not None
    now_ms = int(time.time() * 1000)
    try:
        for round_ in range(args.rounds):
            for name, hot in paths.items():
                queue = f"bench_{name}_{round_}"
                store.create_queue(queue, 1)
                warm_up = argparse.Namespace(**{**vars(args), "seconds": 0.5})
                loop.run_until_complete(phase(name, hot, queue, warm_up, now_ms))
                threads0 = thread_cpu()
                usage0, db0 = resource.getrusage(resource.RUSAGE_SELF), cpu_seconds(mariadb_pid)
                acked, wall = loop.run_until_complete(phase(name, hot, queue, args, now_ms))
                usage, db = resource.getrusage(resource.RUSAGE_SELF), cpu_seconds(mariadb_pid) - db0
                threads = {kind: (cpu - threads0[kind]) / acked * 1e6 for kind, cpu in thread_cpu().items()}
                user, system = usage.ru_utime - usage0.ru_utime, usage.ru_stime - usage0.ru_stime
                cpu = user + system
                results[name].append((acked / wall, cpu / acked * 1e6, db / acked * 1e6))
                print(
                    f"round {round_ + 1} {name:>8}: {acked / wall:9.0f} jobs/s"
                    f"  process {cpu / acked * 1e6:6.1f} us/job (user {user / acked * 1e6:.1f}, system"
                    f" {system / acked * 1e6:.1f}; threads: {', '.join(f'{k} {v:.1f}' for k, v in threads.items())})"
                    f"  mariadbd {db / acked * 1e6:6.1f} us/job",
                    flush=True,
                )
                store.delete_queue(queue)
    finally:
        native.close()
        store.close()
        loop.close()
        executor.shutdown()

    shape = f"batch {args.batch}, {args.body_bytes}-byte bodies, concurrency {args.concurrency}"
    print(f"\nmedians over {args.rounds} rounds ({shape}):")
    medians = {name: [statistics.median(r[i] for r in rows) for i in range(3)] for name, rows in results.items()}
    for name, (rate, cpu, db) in medians.items():
        print(f"  {name:>8}: {rate:9.0f} jobs/s  process {cpu:6.1f} us/job  mariadbd {db:6.1f} us/job")
    threaded = medians.get("threaded")
    for name, (rate, cpu, _) in medians.items():
        if threaded is not None and name != "threaded":
            print(f"  {name}/threaded: jobs/s x{rate / threaded[0]:.2f}, process CPU per job x{cpu / threaded[1]:.2f}")


if __name__ == "__main__":
    main()
