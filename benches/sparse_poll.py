"""Workers polling a sparse queue: how many of the server's dequeue store calls come back empty.

Starts ``pinlater serve`` on the embedded store in a temporary directory (``--broker`` as in
``lifecycle.py``), then for ``--seconds``: one producer enqueues single jobs at ``--rate`` per
second, and ``--consumers`` processes dequeue batches of ``--batch`` with their acks
piggy-backed, as workers do. ``--wait-ms`` > 0 makes them long-poll (``waitMillis``); with 0 they
poll, sleeping ``--poll-ms`` after an empty answer, as an eager worker of the original did.

Printed from the server's /stats.txt: dequeue requests, store calls made for dequeues (the
broker's refills included), how many of those came back empty, and the walk's skips of places
known to be empty; and jobs delivered. The issue's target: under 5% of store calls empty.

    python benches/sparse_poll.py --seconds 20 --rate 20 --consumers 4 --wait-ms 1000
    python benches/sparse_poll.py --seconds 20 --rate 20 --consumers 4 --wait-ms 0 --poll-ms 10
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import tempfile
import time
import urllib.request
from typing import Any

from _common import thrift_client
from lifecycle import start_server  # the sibling bench's server


def produce(port: int, queue: str, rate: float, deadline: float, out: Any) -> None:
    from pinlater.idl import idl

    client = thrift_client(port)
    ctx = idl.RequestContext(source=f"sparse-producer:{os.getpid()}")
    done = 0
    next_at = time.monotonic()
    while time.time() < deadline:
        client.enqueueJobs(ctx, idl.PinLaterEnqueueRequest(queueName=queue, jobs=[idl.PinLaterJob(body=b"job")]))
        done += 1
        next_at += 1.0 / rate
        pause = next_at - time.monotonic()
        if pause > 0:
            time.sleep(pause)
    out.put(("enqueued", done))


def consume(port: int, queue: str, batch: int, wait_ms: int, poll_ms: int, deadline: float, out: Any) -> None:
    from pinlater.idl import idl

    client = thrift_client(port)
    ctx = idl.RequestContext(source=f"sparse-consumer:{os.getpid()}")
    acks: list[Any] = []
    delivered = empty = 0
    while time.time() < deadline:
        ack_request = idl.PinLaterJobAckRequest(queueName=queue, jobsSucceeded=acks) if acks else None
        request = idl.PinLaterDequeueRequest(
            queueName=queue, limit=batch, jobAckRequest=ack_request, waitMillis=wait_ms or None
        )
        got = client.dequeueJobs(ctx, request)
        acks = [idl.PinLaterJobAckInfo(jobDescriptor=d) for d in got.jobs]
        delivered += len(got.jobs)
        if not got.jobs:
            empty += 1
            if not wait_ms:
                time.sleep(poll_ms / 1000)
    if acks:
        client.ackDequeuedJobs(ctx, idl.PinLaterJobAckRequest(queueName=queue, jobsSucceeded=acks))
    out.put(("delivered", delivered))
    out.put(("empty_answers", empty))


def counters(admin_port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{admin_port}/stats.txt", timeout=10) as response:
        lines = response.read().decode().splitlines()
    out: dict[str, float] = {}
    for line in lines:
        name, sep, value = line.strip().partition(": ")
        if sep:
            try:
                out[name] = float(value)
            except ValueError:
                continue
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--rate", type=float, default=20, help="jobs enqueued per second, one per request")
    parser.add_argument("--consumers", type=int, default=4)
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--wait-ms", type=int, default=1000, help="long-poll wait per dequeue (0: poll)")
    parser.add_argument("--poll-ms", type=int, default=10, help="sleep after an empty answer when polling")
    parser.add_argument("--broker", choices=("on", "off"), default="off", help="the dequeue broker")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        proc, port, admin_port = start_server(os.path.join(tmp, "data"), args.broker == "on")
        try:
            from pinlater.idl import idl

            queue = "bench_sparse"
            thrift_client(port).createQueue(idl.RequestContext(source="bench"), queue)
            before = counters(admin_port)
            out: Any = mp.Queue()
            deadline = time.time() + args.seconds
            workers = [mp.Process(target=produce, args=(port, queue, args.rate, deadline, out))] + [
                mp.Process(target=consume, args=(port, queue, args.batch, args.wait_ms, args.poll_ms, deadline, out))
                for _ in range(args.consumers)
            ]
            for w in workers:
                w.start()
            for w in workers:
                w.join()
            after = counters(admin_port)
            totals: dict[str, int] = {}
            while not out.empty():
                key, value = out.get()
                totals[key] = totals.get(key, 0) + value
        finally:
            proc.terminate()
            proc.wait(30)

    def delta(name: str) -> int:
        return int(after.get(name, 0) - before.get(name, 0))

    calls, empty = delta("dequeue_store_calls"), delta("dequeue_store_calls_empty")
    mode = f"long poll {args.wait_ms} ms" if args.wait_ms else f"polling every {args.poll_ms} ms when empty"
    print(
        f"embedded store, broker {args.broker}, {args.consumers} consumer(s) ({mode}), batch {args.batch}, "
        f"{args.rate:g} jobs/s enqueued one by one, {args.seconds:g} s"
    )
    print(f"  enqueued {totals.get('enqueued', 0)}, delivered {totals.get('delivered', 0)}")
    print(f"  dequeue requests {delta('dequeue_jobs_ok')}, empty answers {totals.get('empty_answers', 0)}")
    print(f"  dequeue store calls {calls}, empty {empty} ({100.0 * empty / max(calls, 1):.1f}%)")
    print(f"  known-empty skips {delta('dequeue_known_empty_skips')}")


if __name__ == "__main__":
    main()
