"""The Redis store's hot path in-process: ``NativeHotPath`` (commands and replies in Rust, our own
pipelined connection) against ``AsyncHotPath`` (redis.asyncio, Python values), CPU per job.

One redis-server of its own (no persistence), one queue. Each cycle enqueues ``--batch`` jobs
(100-byte bodies), dequeues them and acks them, ``--concurrency`` cycles at once on one event
loop, for ``--cycles`` cycles per path. The batches and acks are built before the clock starts
(the wire decoder makes them in the server), so the figure is the store's hot path alone:
this process's CPU (``time.process_time``) and redis-server's, per job (one enqueue, one dequeue
and one ack of it).

    python benches/redis_hot_path.py --cycles 300 --batch 100 --concurrency 4
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

from _common import cpu_seconds
from pinlater._pinlater import AckGroup, NewJobBatch
from pinlater.backends.base import AckItem, NewJob
from pinlater.backends.redis import RedisEndpoint, RedisShardConfig, RedisStore
from pinlater.backends.redis.native_hot import NativeHotPath
from pinlater.backends.redis.store import AsyncHotPath

QUEUE = "bench_hot"
NOW = 1_700_000_000_000


def start_redis(directory: Path) -> tuple[subprocess.Popen[bytes], int]:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    binary = shutil.which("redis-server") or "/usr/bin/redis-server"
    args = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    proc = subprocess.Popen([*args, "--dir", str(directory)], stdout=subprocess.DEVNULL)
    client = redis.Redis("127.0.0.1", port)
    for _ in range(200):
        try:
            client.ping()
            break
        except redis.ConnectionError:
            time.sleep(0.05)
    return proc, port


async def native_cycles(hot: NativeHotPath, cycles: int, batch: int, concurrency: int) -> None:
    jobs = NewJobBatch([(1, b"b" * 100, NOW, 3, "")] * batch)

    async def one(acks: list[AckGroup]) -> None:
        for ack in acks:
            await hot.enqueue_jobs(QUEUE, jobs, NOW)
            await hot.dequeue_jobs(QUEUE, 1, batch, "bench|1", NOW, False)
            await hot.ack_jobs(QUEUE, ack, NOW)

    plan = _plan(cycles, batch, concurrency, lambda ids: AckGroup([(1, i, "", 0) for i in ids], []))
    await asyncio.gather(*(one(p) for p in plan))


async def python_cycles(hot: AsyncHotPath, cycles: int, batch: int, concurrency: int) -> None:
    jobs = [NewJob(1, b"b" * 100, NOW, 3)] * batch

    async def one(acks: list[list[AckItem]]) -> None:
        for ack in acks:
            await hot.enqueue_jobs(QUEUE, jobs, NOW)
            await hot.dequeue_jobs(QUEUE, 1, batch, "bench|1", NOW, False)
            await hot.ack_jobs(QUEUE, ack, [], NOW)

    plan = _plan(cycles, batch, concurrency, lambda ids: [AckItem(1, i) for i in ids])
    await asyncio.gather(*(one(p) for p in plan))


def _plan(cycles: int, batch: int, concurrency: int, make: Any) -> list[list[Any]]:
    """Acks per worker: which jobs each dequeue gets is not known ahead with concurrency > 1, so
    every worker acks a disjoint slice of the ids it could have (acks of jobs not in progress
    are no-ops and cost Redis the same ZREM); with concurrency 1 they are exactly its jobs."""
    per = cycles // concurrency
    return [
        [make(range((w * per + c) * batch + 1, (w * per + c + 1) * batch + 1)) for c in range(per)]
        for w in range(concurrency)
    ]


def measure(port: int, kind: str, args: argparse.Namespace) -> None:
    client = redis.Redis("127.0.0.1", port)
    client.flushall()
    store = RedisStore("1", RedisShardConfig(RedisEndpoint("127.0.0.1", port)))
    store.create_queue(QUEUE, 3)

    async def main() -> None:
        try:
            if kind == "native":
                await native_cycles(store.native, args.cycles, args.batch, args.concurrency)
            else:
                await python_cycles(store.aio, args.cycles, args.batch, args.concurrency)
        finally:
            await store.aclose()

    asyncio.run(main())  # connecting and loading the scripts is in it: small against the cycles
    store.close()


def timed(port: int, pid: int, kind: str, args: argparse.Namespace) -> tuple[float, float, float]:
    warm_up = argparse.Namespace(cycles=args.concurrency * 2, batch=args.batch, concurrency=args.concurrency)
    measure(port, kind, warm_up)
    cpu0, redis0, wall0 = time.process_time(), cpu_seconds(pid), time.perf_counter()
    measure(port, kind, args)
    jobs = (args.cycles // args.concurrency) * args.concurrency * args.batch
    cpu, rcpu, wall = time.process_time() - cpu0, cpu_seconds(pid) - redis0, time.perf_counter() - wall0
    return cpu / jobs * 1e6, rcpu / jobs * 1e6, jobs / wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cycles", type=int, default=300)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        proc, port = start_redis(Path(tmp))
        try:
            print(f"batch {args.batch}, {args.cycles} cycles, concurrency {args.concurrency}; µs per job:")
            for r in range(args.rounds):
                for kind in ("python", "native"):
                    ours, theirs, rate = timed(port, proc.pid, kind, args)
                    line = f"round {r + 1} {kind:7s} client CPU {ours:6.2f} µs/job"
                    print(f"{line}   redis CPU {theirs:6.2f} µs/job   {rate:9.0f} jobs/s")
                    sys.stdout.flush()
        finally:
            proc.kill()
            proc.wait()


if __name__ == "__main__":
    main()
