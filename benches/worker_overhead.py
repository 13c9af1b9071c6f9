"""What the worker library costs on top of the server: no-op jobs through ``pinlater.worker``
against a bare dequeue/ack loop, side by side on the same server and queue size.

Starts ``pinlater serve`` on the embedded store (or targets ``--port``). Each round starts one
consumer process, waits until it is connected and warm, then preloads ``--jobs`` jobs that all
become eligible at the same moment once they are in. The consumer is timed from the first batch
in hand to the ack of the last job. Modes alternate round by round (and their order flips) so
drift on a shared machine hits them alike:

* ``bare``: a thriftpy2 Cython client looping dequeue(limit=batch) with the previous batch's
  acks piggy-backed (as ``benches/lifecycle.py`` and the original's example worker do);
* ``worker-sync``: ``Worker`` with a plain no-op handler (handler threads);
* ``worker-async``: ``Worker`` with an ``async def`` no-op handler.

The worker runs with concurrency = batch, so both sides claim the same batches.

    python benches/worker_overhead.py --jobs 5000 --rounds 3 --batch 100
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import thrift_client
from lifecycle import start_server  # the sibling bench's server

QUEUE = "bench_worker_overhead"
MODES = ("bare", "worker-sync", "worker-async")


def bare(port: int, n: int, batch: int, ready: Any) -> tuple[float, float]:
    from pinlater.idl import idl

    client = thrift_client(port)
    ctx = idl.RequestContext(source=f"bench-bare:{os.getpid()}")
    client.getQueueNames(ctx)  # connected and warm
    ready.put("ready")
    acks: list[Any] = []
    done = 0
    start = None
    cpu = 0.0
    while done < n:
        ack_request = idl.PinLaterJobAckRequest(queueName=QUEUE, jobsSucceeded=acks) if acks else None
        request = idl.PinLaterDequeueRequest(queueName=QUEUE, limit=batch, jobAckRequest=ack_request)
        got = client.dequeueJobs(ctx, request)
        done += len(acks)
        acks = [idl.PinLaterJobAckInfo(jobDescriptor=d) for d in got.jobs]
        if start is None:
            if not acks:
                time.sleep(0.001)  # the preloaded jobs are not eligible yet
                continue
            start = time.perf_counter()
            cpu = time.process_time()
    if acks:
        client.ackDequeuedJobs(ctx, idl.PinLaterJobAckRequest(queueName=QUEUE, jobsSucceeded=acks))
    assert start is not None
    return time.perf_counter() - start, time.process_time() - cpu


def with_worker(port: int, n: int, batch: int, concurrency: int, use_async: bool, ready: Any) -> tuple[float, float]:
    from pinlater.worker import JobContext, Worker

    source = f"bench-worker:{os.getpid()}"
    worker = Worker(f"127.0.0.1:{port}", source=source, concurrency=concurrency, batch_size=batch)
    worker.poll_interval = (0.001, 0.001)  # only while waiting for the jobs to become eligible
    first_job: list[float] = []  # wall clock and process CPU when the first job ran

    if use_async:

        async def noop_async(ctx: JobContext) -> None:
            if not first_job:
                first_job.extend((time.perf_counter(), time.process_time()))

        worker.register(QUEUE, noop_async)
    else:

        def noop(ctx: JobContext) -> None:
            if not first_job:
                first_job.extend((time.perf_counter(), time.process_time()))

        worker.register(QUEUE, noop)

    async def main() -> tuple[float, float]:
        serving = asyncio.create_task(worker.serve())
        await worker.client.queue_names()  # connected and warm
        ready.put("ready")
        while worker.stats.acks_sent < n:
            await asyncio.sleep(0.005)  # at most 5 ms late: counted against the worker
        elapsed = time.perf_counter() - first_job[0], time.process_time() - first_job[1]
        worker.stop()
        await serving
        return elapsed

    return asyncio.run(main())


def consume(mode: str, port: int, n: int, batch: int, concurrency: int, out: Any) -> None:
    if mode == "bare":
        out.put(bare(port, n, batch, out))
    else:
        out.put(with_worker(port, n, batch, concurrency, mode == "worker-async", out))


def preload(port: int, n: int) -> None:
    """``n`` jobs, all eligible at the same moment, a little after they are all in."""
    from pinlater.idl import idl

    client = thrift_client(port)
    ctx = idl.RequestContext(source="bench-preload")
    eligible = int((time.time() + 0.5 + n / 2000) * 1000)
    jobs = [idl.PinLaterJob(body=b"x" * 100, runAfterTimestampMillis=eligible) for _ in range(500)]
    for start in range(0, n, 500):
        client.enqueueJobs(ctx, idl.PinLaterEnqueueRequest(queueName=QUEUE, jobs=jobs[: min(500, n - start)]))
    if time.time() * 1000 >= eligible:
        print("  (preload was slower than planned: the consumer may have started early)", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=5000, help="jobs per round (default 5000)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per mode (default 3)")
    parser.add_argument("--batch", type=int, default=100, help="jobs per dequeue, both sides (default 100)")
    parser.add_argument(
        "--concurrency",
        type=int,
        help="the worker's cap on jobs in hand (default 2 x batch: one batch runs while the next is fetched)",
    )
    parser.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, from {', '.join(MODES)}")
    parser.add_argument("--port", type=int, help="target a running server instead of starting one")
    args = parser.parse_args()
    modes = args.modes.split(",")
    concurrency = args.concurrency or 2 * args.batch

    spawn = mp.get_context("spawn")
    rates: dict[str, list[float]] = {m: [] for m in modes}
    cpu_us: dict[str, list[float]] = {m: [] for m in modes}
    with tempfile.TemporaryDirectory() as tmp:
        proc = None
        port = args.port
        if port is None:
            proc, port, _admin_port = start_server(os.path.join(tmp, "data"), broker=False)
        try:
            from pinlater.idl import idl

            thrift_client(port).createQueue(idl.RequestContext(source="bench"), QUEUE)
            for rnd in range(args.rounds):
                for mode in modes if rnd % 2 == 0 else reversed(modes):
                    out = spawn.Queue()
                    child = spawn.Process(target=consume, args=(mode, port, args.jobs, args.batch, concurrency, out))
                    child.start()
                    assert out.get(timeout=120) == "ready"
                    preload(port, args.jobs)
                    seconds, cpu = out.get(timeout=600)
                    child.join()
                    rates[mode].append(args.jobs / seconds)
                    cpu_us[mode].append(cpu / args.jobs * 1e6)
                    print(
                        f"round {rnd + 1} {mode:<13} {args.jobs / seconds:8.0f} jobs/s"
                        f"  consumer CPU {cpu / args.jobs * 1e6:5.1f} us/job",
                        flush=True,
                    )
        finally:
            if proc is not None:
                proc.terminate()
                proc.wait(30)
    print(
        f"\nembedded store, {args.jobs} jobs per round, batch {args.batch}, worker concurrency {concurrency}, "
        f"{args.rounds} round(s); jobs/s as median and best round (the best is the least disturbed by "
        "other load), consumer CPU per job as median:"
    )
    for mode in modes:
        median, best = statistics.median(rates[mode]), max(rates[mode])
        ratio = ""
        if "bare" in rates:
            base_median, base_best = statistics.median(rates["bare"]), max(rates["bare"])
            ratio = f"  ({median / base_median:6.1%} / {best / base_best:6.1%} of bare)"
        cpu = statistics.median(cpu_us[mode])
        print(f"  {mode:<13} median {median:6.0f}  best {best:6.0f}{ratio}  CPU {cpu:5.1f} us/job")


if __name__ == "__main__":
    main()
