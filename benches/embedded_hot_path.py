"""CPU per job of the embedded store's hot path: today's ``ThreadedHotPath`` (the Python store's
methods on a thread pool) against ``NativeEmbeddedHotPath`` (Rust writer thread), in one run.

Each round enqueues a batch of jobs, dequeues them and acks them (half succeeded, half failed
on their last attempt), through the hot path's coroutines on one event loop; ``--clients``
clients run rounds at once, each on its own queue (concurrent requests group into shared
commits). Each path gets the values the server hands it: Python ``NewJob``/``AckItem`` lists
for the threaded path, ``NewJobBatch``/``AckGroup`` for the native one (the acks are built
from the enqueue's ids in Python in both, a cost both pay alike). CPU is the whole process's
(every thread, SQLite and the kernel's writes and syncs included).

    PYTHONPATH=$PWD/python python benches/embedded_hot_path.py [--rounds 200] [--batch 100] [--clients 8]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from pinlater._pinlater import AckGroup, NewJobBatch
from pinlater.backends.base import AckItem, NewJob
from pinlater.backends.embedded import EmbeddedStore
from pinlater.backends.threaded import ThreadedHotPath

T = TypeVar("T")
Q = "bench"
BODY = b"x" * 100


def acks_for(native: bool, ids: list[int]) -> Any:
    """Half of ``ids`` succeeded, half failed (on their last attempt)."""
    half = len(ids) // 2
    ok = [(1, i, "", 0) for i in ids[:half]]
    failed = [(1, i, "", 0) for i in ids[half:]]
    if native:
        return AckGroup(ok, failed)
    return [AckItem._make(a) for a in ok], [AckItem._make(a) for a in failed]


async def run(path: str, store: EmbeddedStore, rounds: int, batch: int, clients: int) -> tuple[float, float, int]:
    """(CPU seconds, wall seconds, commits) of the rounds."""
    loop = asyncio.get_running_loop()
    pool = ThreadPoolExecutor(max_workers=8)

    def offload(fn: Callable[..., T], /, *args: object) -> asyncio.Future[T]:
        return loop.run_in_executor(pool, fn, *args)

    native = path == "native"
    hot: Any = store.native_hot_path(offload) if native else ThreadedHotPath(store, offload)
    new = [NewJob(1, BODY, 0, 1) for _ in range(batch)]
    jobs = NewJobBatch(new) if native else new

    async def client(queue: str) -> None:
        for _ in range(rounds // clients):
            ids = await hot.enqueue_jobs(queue, jobs, 0)
            claimed = await hot.dequeue_jobs(queue, 1, batch, "c", 1, False)
            assert len(claimed) == batch
            acks = acks_for(native, ids.to_list() if native else ids)
            if native:
                await hot.ack_jobs(queue, acks, 2)
            else:
                await hot.ack_jobs(queue, *acks, 2)

    cpu0, wall0 = time.process_time(), time.perf_counter()
    await asyncio.gather(*(client(f"{Q}{c}") for c in range(clients)))
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    pool.shutdown()
    return cpu, wall, hot.commits if native else store.commits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--synchronous", default="FULL")
    parser.add_argument("--only", choices=("threaded", "native"), help="run one path (to profile it)")
    args = parser.parse_args()
    results = {}
    paths = [args.only] * 2 if args.only else ["threaded", "native", "threaded", "native"]
    for path in paths:  # alternate: the machine drifts
        with tempfile.TemporaryDirectory() as tmp:
            store = EmbeddedStore(Path(tmp), "1", synchronous=args.synchronous)
            for c in range(args.clients):
                store.create_queue(f"{Q}{c}", 1)
            try:
                cpu, wall, commits = asyncio.run(run(path, store, args.rounds, args.batch, args.clients))
            finally:
                store.close()
        jobs = args.rounds // args.clients * args.clients * args.batch
        best = results.get(path)
        if best is None or cpu < best[0]:
            results[path] = (cpu, wall)
        calls = jobs // args.batch * 3
        print(
            f"{path:9} {cpu / jobs * 1e6:7.1f} us CPU/job  {jobs / wall * 60 / 1e6:6.2f} M jobs/min"
            f"  {calls / commits:5.2f} calls/commit",
            flush=True,
        )
    if args.only:
        return
    (tcpu, twall), (ncpu, nwall) = results["threaded"], results["native"]
    print(f"best of two: native/threaded CPU per job {ncpu / tcpu:.2f}x, jobs/min {twall / nwall:.2f}x")


if __name__ == "__main__":
    main()
