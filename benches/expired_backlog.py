"""How long a fresh job waits behind a mass expiry: ``--jobs`` jobs expire together, then one job
is enqueued, and one client dequeues (``--limit``) without pausing until it gets that job.

For each backend of ``--backends``, a fresh store and server (``cost_per_job.py``'s; ``--broker``
turns the dequeue broker on): the jobs are enqueued 1,000 a request on queue ``expiring``, each
with an expiry ``--expire-in`` seconds ahead (time enough to enqueue them all); once that has
passed, the fresh job goes in and the client polls. It prints the seconds and dequeue requests
until the fresh job came back (or that it gave up, after ``--give-up`` seconds); then, with one
job enqueued before each single-job dequeue, the seconds until 20 dequeues in a row took under
50 ms (how long the backlog slowed every dequeue), from the same start. With
``--against COMMIT``, a build of that commit (``cost_per_job.py``'s) is run after this tree's.

    PYTHONPATH=$PWD/python python benches/expired_backlog.py --backends redis-compact --jobs 200000
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from _common import thrift_client
from cost_per_job import DEFAULT_CACHE_DIR, Build, Server, _split, commit_build, current_build, running_store

BACKENDS = ("embedded", "redis", "redis-compact", "mysql")
QUEUE = "expiring"
FAST_S = 0.05
FAST_IN_A_ROW = 20


def run(build: Build, backend: str, args: argparse.Namespace, tmp: Path) -> None:
    from pinlater.idl import idl

    properties = ["BROKER_ENABLED=true"] if args.broker else []
    with running_store(backend, tmp) as store:
        server = Server(build, tmp, store.server_args, store.properties + properties)
        try:
            client = thrift_client(server.port)
            ctx = idl.RequestContext(source="expired-backlog")
            client.createQueue(ctx, QUEUE)
            expire_at = int(time.time() * 1000) + int(args.expire_in * 1000)
            for start in range(0, args.jobs, 1000):
                jobs = [
                    idl.PinLaterJob(body=b"x", priority=1, expireAtTimestampMillis=expire_at)
                    for _ in range(min(1000, args.jobs - start))
                ]
                client.enqueueJobs(ctx, idl.PinLaterEnqueueRequest(queueName=QUEUE, jobs=jobs))
            if time.time() * 1000 >= expire_at:
                raise SystemExit(f"{backend}: enqueueing took past the expiry: raise --expire-in")
            while time.time() * 1000 < expire_at + 100:
                time.sleep(0.05)
            fresh = idl.PinLaterJob(body=b"fresh", priority=1)
            client.enqueueJobs(ctx, idl.PinLaterEnqueueRequest(queueName=QUEUE, jobs=[fresh]))
            started, requests = time.monotonic(), 0
            request = idl.PinLaterDequeueRequest(queueName=QUEUE, limit=args.limit)
            while True:
                got = client.dequeueJobs(ctx, request)
                requests += 1
                if b"fresh" in got.jobs.values():
                    waited = f"{time.monotonic() - started:.2f} s"
                    break
                if time.monotonic() - started > args.give_up:
                    waited = f"over {args.give_up:.0f} s (gave up)"
                    break
            # Then one job in and one out at a time, until FAST_IN_A_ROW dequeues in a row take
            # under FAST_S: how long the backlog slowed every dequeue (MySQL's statement reads
            # past each expired row ahead of the first live one).
            one = idl.PinLaterEnqueueRequest(queueName=QUEUE, jobs=[fresh])
            single = idl.PinLaterDequeueRequest(queueName=QUEUE, limit=1)
            fast = slow = 0
            while fast < FAST_IN_A_ROW and time.monotonic() - started <= args.give_up:
                client.enqueueJobs(ctx, one)
                asked = time.monotonic()
                client.dequeueJobs(ctx, single)
                if time.monotonic() - asked < FAST_S:
                    fast += 1
                else:
                    fast, slow = 0, slow + 1
            recovered = f"{time.monotonic() - started:.1f} s" if fast >= FAST_IN_A_ROW else f"over {args.give_up:.0f} s"
            print(
                f"{build.label:8} {backend:14} {args.jobs:>9,} expired: fresh job after {waited}, "
                f"{requests:,} dequeue requests; dequeues fast again after {recovered} ({slow:,} slow)"
            )
        finally:
            server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", default="redis-compact", help=f"comma-separated, of {','.join(BACKENDS)}")
    parser.add_argument("--jobs", type=int, default=200_000, help="jobs that expire together")
    parser.add_argument("--limit", type=int, default=10, help="the client's dequeue limit")
    parser.add_argument("--expire-in", type=float, default=30.0, help="seconds from the start to the expiry")
    parser.add_argument("--broker", action="store_true", help="BROKER_ENABLED=true for the server")
    parser.add_argument("--give-up", type=float, default=600.0, help="seconds of polling before giving up")
    parser.add_argument("--against", help="also run a build of this commit (cost_per_job.py's), after this tree's")
    parser.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE_DIR, help="where --against builds are kept")
    args = parser.parse_args()
    builds = [current_build()] + ([commit_build(args.against, args.cache_dir)] if args.against else [])
    for backend in _split([args.backends], BACKENDS):
        for build in builds:
            with tempfile.TemporaryDirectory(prefix="pinlater-expired-") as tmp:
                run(build, backend, args, Path(tmp))


if __name__ == "__main__":
    main()
