"""What one large request costs everyone else: how long others wait while it is served.

For each backend of ``--backends`` and each operation of ``--ops``, a fresh store and server
(``cost_per_job.py``'s) serve one request of ``--jobs`` jobs of 1-byte bodies on queue ``big``,
while two probes run beside it: a client of the same server dequeuing one job of another queue
every 5 ms, and, on Redis, a ``PING`` of the store every 5 ms (every queue and server of that
Redis waits as long). It prints how long the request took and the longest wait of each probe
(the median probe wait as a yardstick). The operations:

- ``enqueue``: one ``enqueueJobs`` of the jobs; ``keyed``: the same, each job with a dedup key of
  its own and one of three groups where the store keeps groups;
- ``dequeue``: one ``dequeueJobs`` with that limit (the jobs enqueued before, 1,000 a request);
- ``ack``, ``lookup``, ``checkpoint``: one ``ackDequeuedJobs``, ``lookupJobs`` or
  ``checkpointJobs`` of that many jobs (dequeued before, 1,000 a request);
- ``delete``: one ``deleteJobs`` of the PENDING jobs with that limit (enqueued before);
  ``retry``: one ``retryFailedJobs`` with that limit (the jobs failed before: dequeued and acked
  as failures with no attempt left, 1,000 a request).

``--shards N`` gives each store N shards (``cost_per_job.py``'s): a keyed request is then split
over them by its keys (``KeyedJobBatch.split``, on the event loop) before its parts go out.

With ``--against COMMIT`` (as ``cost_per_job.py`` builds it) each is also run on that commit,
in turn with this tree's: before ``STORE_CALL_JOBS`` a Redis script of 200,000 jobs held every
client of its Redis for one to two seconds.

    PYTHONPATH=$PWD/python python benches/big_request_stall.py --backends redis-compact --jobs 200000
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import thrift_client
from cost_per_job import (
    DEFAULT_CACHE_DIR,
    Build,
    Server,
    _split,
    add_shards,
    commit_build,
    current_build,
    running_store,
)

BACKENDS = ("embedded", "redis", "redis-compact", "mysql")
OPS = ("enqueue", "keyed", "dequeue", "ack", "lookup", "checkpoint", "delete", "retry")
PROBE_EVERY_S = 0.005


class Probe:
    """``call`` every 5 ms on a thread of its own until stopped; the time each call took."""

    def __init__(self, call: Callable[[], object]) -> None:
        self.waits: list[float] = []
        self._call = call
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            t = time.monotonic()
            self._call()
            self.waits.append(time.monotonic() - t)
            time.sleep(PROBE_EVERY_S)

    def stop(self) -> list[float]:
        self._stop.set()
        self._thread.join(30)
        return self.waits


def prepare(client: Any, idl: Any, ctx: Any, op: str, n: int) -> list[Any]:
    """Jobs on ``big`` for ``op`` (1,000 a request): enqueued for a dequeue, dequeued for the rest."""
    if op in ("enqueue", "keyed"):
        return []
    for at in range(0, n, 1000):
        jobs = [idl.PinLaterJob(body=b"y", numAttemptsAllowed=1) for _ in range(min(1000, n - at))]
        client.enqueueJobs(ctx, idl.PinLaterEnqueueRequest(queueName="big", jobs=jobs))
    descriptors: list[Any] = []
    while op not in ("dequeue", "delete") and len(descriptors) < n:
        got = list(client.dequeueJobs(ctx, idl.PinLaterDequeueRequest(queueName="big", limit=1000)).jobs)
        if not got:
            raise SystemExit(f"only {len(descriptors)} of {n} jobs came back to be {op}ed")
        if op == "retry":  # failed for good: one attempt allowed
            acks = [idl.PinLaterJobAckInfo(jobDescriptor=d) for d in got]
            client.ackDequeuedJobs(ctx, idl.PinLaterJobAckRequest(queueName="big", jobsFailed=acks))
        descriptors += got
    return descriptors


def the_request(client: Any, idl: Any, ctx: Any, op: str, n: int, descriptors: list[Any], grouped: bool) -> None:
    if op in ("enqueue", "keyed"):
        jobs = [idl.PinLaterJob(body=b"y") for _ in range(n)]
        if op == "keyed":
            for i, job in enumerate(jobs):
                job.dedupKey = f"key-{i}"
                if grouped:
                    job.groupKey = f"group-{i % 3}"
        client.enqueueJobs(ctx, idl.PinLaterEnqueueRequest(queueName="big", jobs=jobs))
    elif op == "dequeue":
        client.dequeueJobs(ctx, idl.PinLaterDequeueRequest(queueName="big", limit=n))
    elif op == "ack":
        acks = [idl.PinLaterJobAckInfo(jobDescriptor=d) for d in descriptors]
        client.ackDequeuedJobs(ctx, idl.PinLaterJobAckRequest(queueName="big", jobsSucceeded=acks))
    elif op == "delete":
        state = idl.PinLaterJobState.PENDING
        client.deleteJobs(ctx, idl.PinLaterDeleteJobsRequest(queueName="big", jobState=state, limit=n))
    elif op == "retry":
        client.retryFailedJobs(ctx, idl.PinLaterRetryFailedJobsRequest(queueName="big", limit=n))
    elif op == "lookup":
        client.lookupJobs(ctx, idl.PinLaterLookupJobRequest(jobDescriptors=descriptors, includeBody=True))
    else:
        items = [idl.PinLaterCheckpointJobRequest(jobDescriptor=d, newBody=b"z") for d in descriptors]
        client.checkpointJobs(ctx, idl.PinLaterCheckpointJobsRequest(queueName="big", requests=items))


def measure(
    build: Build, backend: str, op: str, n: int, tmp: Path, shards: int = 1
) -> tuple[float, list[float], list[float]]:
    """(the request's seconds, the server probe's waits, the store probe's waits)."""
    import redis

    from pinlater.idl import idl

    directory = tmp / f"{backend}-{op}-{build.label}"
    directory.mkdir()
    with running_store(backend, directory, shards=shards) as store:
        server = Server(build, directory, store.server_args, store.properties)
        try:
            ctx = idl.RequestContext(source="bench-big-request")
            client, side = thrift_client(server.port), thrift_client(server.port)
            for queue in ("big", "other"):
                client.createQueue(ctx, queue)
            client.enqueueJobs(
                ctx, idl.PinLaterEnqueueRequest(queueName="other", jobs=[idl.PinLaterJob(body=b"x")] * 1000)
            )
            descriptors = prepare(client, idl, ctx, op, n)
            probes = [Probe(lambda: side.dequeueJobs(ctx, idl.PinLaterDequeueRequest(queueName="other", limit=1)))]
            if backend.startswith("redis"):
                config = json.loads(Path(store.server_args[-1]).read_text())["shards"][0]["shardConfig"]["master"]
                raw = redis.Redis(config["host"], config["port"])
                probes.append(Probe(raw.ping))
            time.sleep(0.2)
            start = time.monotonic()
            the_request(client, idl, ctx, op, n, descriptors, grouped=backend in ("embedded", "redis-compact"))
            took = time.monotonic() - start
            time.sleep(0.2)
            waits = [p.stop() for p in probes]
            client.close()
            side.close()
        finally:
            server.stop()
        files = sorted((directory / "data").glob("*.sqlite3")) if backend == "embedded" else []
        if backend == "embedded" and len(files) != shards:
            raise SystemExit(f"embedded: {len(files)} shard files, not {shards}: {[f.name for f in files]}")
    return took, waits[0], waits[1] if len(waits) > 1 else []


def _ms(waits: list[float], of: Callable[[list[float]], float]) -> str:
    return f"{of(waits) * 1000:.1f}" if waits else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", default="embedded", help=f"comma list of {', '.join(BACKENDS)}")
    parser.add_argument("--ops", default=",".join(OPS), help=f"comma list of {', '.join(OPS)}")
    parser.add_argument("--jobs", type=int, default=100_000, help="jobs of the one request (default 100,000)")
    parser.add_argument("--against", action="append", default=[], metavar="COMMIT", help="also run this commit")
    parser.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE_DIR, help="where --against builds are kept")
    add_shards(parser)
    args = parser.parse_args()
    backends = _split([args.backends], BACKENDS)
    ops = _split([args.ops], OPS)
    builds = [current_build(), *(commit_build(c, args.cache_dir) for c in _split(args.against))]
    print(
        f"one request of {args.jobs} jobs while others wait, {args.shards} shard(s) per store; "
        "probe waits in ms (each every 5 ms)"
    )
    print(f"{'backend':13} {'op':10} {'build':8} {'took s':>7} {'server max':>10} {'median':>7} {'store max':>9}")
    with tempfile.TemporaryDirectory(prefix="pinlater-big-") as tmp:
        for backend in backends:
            for op in ops:
                for build in builds:
                    took, server, store = measure(build, backend, op, args.jobs, Path(tmp), args.shards)
                    print(
                        f"{backend:13} {op:10} {build.label:8} {took:7.2f} {_ms(server, max):>10} "
                        f"{_ms(server, statistics.median):>7} {_ms(store, max):>9}",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
