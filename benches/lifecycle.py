"""End-to-end throughput of the job lifecycle through a real server (enqueue, dequeue, ack).

Starts ``pinlater serve`` on the embedded store in a temporary directory (or targets
``--host/--port``), then runs producer and consumer *processes* (so the load generator is not
what is measured) for a fixed duration, with batches of ``--batch`` jobs of ``--body-bytes``.
Consumers piggy-back their acks on the next dequeue, as the original's example worker did.

    python benches/lifecycle.py --seconds 20 --producers 1 --consumers 1 --batch 100

``--backlog N`` enqueues N jobs before the clock starts, so consumers never find the queue empty
during the run: the dequeue latencies (``broker_dequeue_msec`` with ``--broker on``) are then
those of a loaded queue, not of waiting for producers.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

from _common import READY, cpu_seconds, thrift_client


def produce(port: int, queue: str, batch: int, body: bytes, deadline: float, out: Any) -> None:
    from pinlater.idl import idl

    client = thrift_client(port)
    ctx = idl.RequestContext(source=f"bench-producer:{os.getpid()}")
    jobs = [idl.PinLaterJob(body=body) for _ in range(batch)]
    done = 0
    while time.time() < deadline:
        client.enqueueJobs(ctx, idl.PinLaterEnqueueRequest(queueName=queue, jobs=jobs))
        done += batch
    out.put(("enqueued", done))


def consume(port: int, queue: str, batch: int, deadline: float, out: Any) -> None:
    from pinlater.idl import idl

    client = thrift_client(port)
    ctx = idl.RequestContext(source=f"bench-consumer:{os.getpid()}")
    acks: list[Any] = []
    done = empty = 0
    while time.time() < deadline:
        ack_request = idl.PinLaterJobAckRequest(queueName=queue, jobsSucceeded=acks) if acks else None
        got = client.dequeueJobs(
            ctx, idl.PinLaterDequeueRequest(queueName=queue, limit=batch, jobAckRequest=ack_request)
        )
        done += len(acks)
        acks = [idl.PinLaterJobAckInfo(jobDescriptor=d) for d in got.jobs]
        if not got.jobs:
            empty += 1
    if acks:
        client.ackDequeuedJobs(ctx, idl.PinLaterJobAckRequest(queueName=queue, jobsSucceeded=acks))
        done += len(acks)
    out.put(("acked", done))
    out.put(("empty_dequeues", empty))


def start_server(data_dir: str, broker: bool) -> tuple[subprocess.Popen[str], int, int]:
    props = os.path.join(os.path.dirname(data_dir), "bench.properties")
    with open(props, "w") as f:
        f.write(f"BROKER_ENABLED={'true' if broker else 'false'}\n")
    command = [sys.executable, "-m", "pinlater.cli", "serve", "--port", "0", "--admin-port", "0"]
    proc = subprocess.Popen(
        [*command, "--data-dir", data_dir, "--properties", props],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        m = READY.search(line)
        if m:
            return proc, int(m.group(1)), int(m.group(2))
    raise SystemExit(f"server did not start (exit {proc.wait()})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--producers", type=int, default=1)
    parser.add_argument("--consumers", type=int, default=1)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--body-bytes", type=int, default=100)
    parser.add_argument("--port", type=int, help="target a running server instead of starting one")
    parser.add_argument("--broker", choices=("on", "off"), default="off", help="the dequeue broker of a started server")
    parser.add_argument("--backlog", type=int, default=0, help="jobs enqueued before the clock starts")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        proc = None
        port = args.port
        admin_port = None
        if port is None:
            proc, port, admin_port = start_server(os.path.join(tmp, "data"), args.broker == "on")
        try:
            from pinlater.idl import idl

            queue = "bench_lifecycle"
            setup = thrift_client(port)
            setup.createQueue(idl.RequestContext(source="bench"), queue)
            for start in range(0, args.backlog, 1000):
                jobs = [idl.PinLaterJob(body=b"b" * args.body_bytes) for _ in range(min(1000, args.backlog - start))]
                setup.enqueueJobs(
                    idl.RequestContext(source="bench"), idl.PinLaterEnqueueRequest(queueName=queue, jobs=jobs)
                )
            out: Any = mp.Queue()
            deadline = time.time() + args.seconds
            body = b"x" * args.body_bytes
            workers = [
                mp.Process(target=produce, args=(port, queue, args.batch, body, deadline, out))
                for _ in range(args.producers)
            ] + [
                mp.Process(target=consume, args=(port, queue, args.batch, deadline, out)) for _ in range(args.consumers)
            ]
            cpu0 = cpu_seconds(proc.pid) if proc else 0.0
            for w in workers:
                w.start()
            for w in workers:
                w.join()
            cpu = (cpu_seconds(proc.pid) - cpu0) if proc else float("nan")
            timings = _timings(admin_port, ("dequeue_jobs", "broker_dequeue")) if admin_port else []
            totals: dict[str, int] = {}
            while not out.empty():
                key, value = out.get()
                totals[key] = totals.get(key, 0) + value
        finally:
            if proc is not None:
                proc.terminate()
                proc.wait(30)
    secs = args.seconds
    print(
        f"embedded store, broker {args.broker}, {args.producers} producer(s), {args.consumers} consumer(s), "
        f"batch {args.batch}, {args.body_bytes}-byte bodies, {secs:g} s, backlog {args.backlog}"
    )
    print(f"  enqueued {totals.get('enqueued', 0) / secs:10.0f} jobs/s")
    print(f"  acked    {totals.get('acked', 0) / secs:10.0f} jobs/s (dequeue + ack)")
    print(f"  empty dequeues {totals.get('empty_dequeues', 0)}")
    print(f"  server CPU {cpu / secs:.2f} cores")
    for line in timings:
        print(f"  {line}")


def _timings(admin_port: int, names: tuple[str, ...]) -> list[str]:
    """Lines of the server's /stats.txt about these timing metrics."""
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{admin_port}/stats.txt", timeout=10) as response:
        lines = response.read().decode().splitlines()
    return [line.strip() for line in lines if line.strip().startswith(names)]


if __name__ == "__main__":
    main()
