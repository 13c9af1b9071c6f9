"""Many queues: how long the dashboard's queue list (``GET /api/queues``) and ``/metrics`` take.

For each backend of ``--backends`` (the embedded store, Redis, MySQL), on two shards, the script
starts the stores it needs (redis-server and MariaDB on loopback through ``tests/support/``, in a
temporary directory, stopped by PID at the end) and ``pinlater serve``; creates ``--queues``
queues and puts ``--jobs`` jobs in each (some ready, one for later, one of them dequeued and,
every third queue, one acked failed, so each count column has something to count), then times
``--repeat`` loads of the queue list and of ``/metrics`` from the admin port (wall time of the
HTTP call, client side; the best and the median are printed, plus the first load).

The server counts every queue once as it starts, in the background; the first load is timed
``--settle`` seconds after the server said it is serving (a dashboard opened a moment after a
start), so it shows whether that pass was done by then. ``--settle 0`` times a load at once, which
waits for the rest of that first pass.

``--before DIR`` times a second tree first, on the same stores and data: DIR is a ``python/``
directory (the package and its extension) of another commit, say the one a change started from,
so one run prints the figures before and after:

    git archive fddf904 python | tar -x -C /tmp/base && cp python/pinlater/_pinlater.abi3.so /tmp/base/python/pinlater/
    python benches/many_queues.py --queues 1000 --before /tmp/base/python

The issue's target: both under 0.3 s with 1,000 queues on every backend.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.support: the redis-server and MariaDB helpers the tests use

READY = re.compile(r"serving PinLater on [\d.]+:(\d+) \(admin http://[\d.]+:(\d+)/\)")
SHARDS = ("1", "2")


# -- stores and servers -------------------------------------------------------------------------


@contextmanager
def backend_args(kind: str, tmp: Path) -> Iterator[list[str]]:
    """The ``pinlater serve`` arguments for ``kind`` on two shards, with its stores running."""
    if kind == "embedded":
        yield ["--backend", "embedded"]
        return
    config = tmp / f"{kind}.json"
    if kind == "redis":
        from tests.support.redis_server import RedisServer

        with RedisServer(tmp / "redis") as redis_server:
            master = {"host": redis_server.host, "port": redis_server.port}
            shards = [{"name": name, "shardConfig": {"master": master}} for name in SHARDS]
            config.write_text(json.dumps({"shards": shards}))
            yield ["--backend", "redis", "--backend-config", str(config)]
        return
    if kind == "mysql":
        from tests.support.mariadb_server import MariaDBServer

        # No fsync: the bench times reads, and creating thousands of tables would wait on syncs.
        with MariaDBServer(
            tmp / "mariadb", flush_log_at_trx_commit=2, extra_args=("--innodb-flush-method=nosync",)
        ) as db:
            config.write_text(json.dumps({name: db.shard_entry() for name in SHARDS}))
            yield ["--backend", "mysql", "--backend-config", str(config)]
        return
    raise SystemExit(f"unknown backend {kind!r}")


@contextmanager
def pinlater_server(tmp: Path, args: list[str], python_path: Path) -> Iterator[tuple[int, int]]:
    """``pinlater serve`` from ``python_path`` (a tree's ``python/``); yields (port, admin port)."""
    props = tmp / "server.properties"
    props.write_text(f"EMBEDDED_NUM_SHARDS={len(SHARDS)}\n")
    log_path = tmp / "server.log"
    env = {**os.environ, "PYTHONPATH": str(python_path)}
    with open(log_path, "wb") as log:  # a file, not a pipe: a pipe nobody reads would block the server
        proc = subprocess.Popen(
            [
                sys.executable, "-m", "pinlater.cli", "serve", "--port", "0", "--admin-port", "0",
                "--data-dir", str(tmp / "data"), "--properties", str(props), *args,
            ],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=tmp,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            m = READY.search(log_path.read_text(errors="replace"))
            if m:
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"pinlater serve did not start:\n{log_path.read_text(errors='replace')[-3000:]}")
            time.sleep(0.05)  # polling a log file for a line: nothing to wait on instead
        yield int(m.group(1)), int(m.group(2))
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


# -- data -------------------------------------------------------------------------------------


def _client(port: int) -> Any:
    from thriftpy2.protocol import TCyBinaryProtocolFactory
    from thriftpy2.rpc import make_client
    from thriftpy2.transport import TCyFramedTransportFactory

    from pinlater.idl import idl

    return make_client(
        idl.PinLater,
        "127.0.0.1",
        port,
        proto_factory=TCyBinaryProtocolFactory(),
        trans_factory=TCyFramedTransportFactory(),
        timeout=120_000,
    )


def fill(port: int, queues: list[str], jobs: int) -> None:
    """Create the queues and give each ``jobs`` jobs over its priorities, one for an hour later,
    one dequeued (IN_PROGRESS) and, in every third queue, one acked failed."""
    from pinlater.idl import idl

    def one(queue: str) -> None:
        client = _client(port)
        ctx = idl.RequestContext(source="bench-many-queues")
        try:
            client.createQueue(ctx, queue)
            later = int(time.time() * 1000) + 3_600_000
            batch = [idl.PinLaterJob(body=b"job", priority=1 + i % 3) for i in range(max(jobs - 1, 0))]
            batch.append(idl.PinLaterJob(body=b"later", runAfterTimestampMillis=later))
            client.enqueueJobs(ctx, idl.PinLaterEnqueueRequest(queueName=queue, jobs=batch))
            got = client.dequeueJobs(ctx, idl.PinLaterDequeueRequest(queueName=queue, limit=1))
            if got.jobs and queues.index(queue) % 3 == 0:
                info = [idl.PinLaterJobAckInfo(jobDescriptor=d) for d in got.jobs]
                client.ackDequeuedJobs(ctx, idl.PinLaterJobAckRequest(queueName=queue, jobsFailed=info))
        finally:
            client.close()

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, queues))


# -- timing -----------------------------------------------------------------------------------


def get(admin_port: int, path: str) -> bytes:
    with urllib.request.urlopen(f"http://127.0.0.1:{admin_port}{path}", timeout=600) as response:
        body: bytes = response.read()
    return body


def timed(call: Callable[[], bytes], repeat: int) -> tuple[float, list[float], bytes]:
    """(first load, later loads, the last body), in seconds."""
    first = 0.0
    times: list[float] = []
    body = b""
    for i in range(repeat + 1):
        start = time.perf_counter()
        body = call()
        took = time.perf_counter() - start
        if i == 0:
            first = took
        else:
            times.append(took)
    return first, times, body


def measure(label: str, admin_port: int, repeat: int, expect_queues: int, settle: float) -> None:
    time.sleep(settle)  # the server has been up a moment, as when someone opens the dashboard
    first, times, body = timed(lambda: get(admin_port, "/api/queues"), repeat)
    listed = len(json.loads(body)["queues"])
    if listed != expect_queues:
        raise SystemExit(f"{label}: the queue list shows {listed} queues, not {expect_queues}")
    print(f"  {label:<7} queue list /api/queues: {_line(first, times)}")
    first, times, body = timed(lambda: get(admin_port, "/metrics"), repeat)
    print(f"  {label:<7} /metrics ({len(body) // 1024} KiB):  {_line(first, times)}")


def _line(first: float, times: list[float]) -> str:
    return f"best {min(times):.3f} s, median {statistics.median(times):.3f} s (first, after --settle: {first:.3f} s)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queues", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=4, help="jobs per queue")
    parser.add_argument("--repeat", type=int, default=5, help="timed loads after the first")
    parser.add_argument("--backends", default="embedded,redis,mysql", help="comma-separated")
    parser.add_argument(
        "--settle", type=float, default=5.0, help="seconds between the server's start and the first load"
    )
    parser.add_argument("--before", type=Path, help="another tree's python/ directory, timed first on the same data")
    args = parser.parse_args()

    queues = [f"bench_q{i:05d}" for i in range(args.queues)]
    for kind in args.backends.split(","):
        with tempfile.TemporaryDirectory(prefix=f"pinlater-many-queues-{kind}-") as tmp_name, ExitStack() as stack:
            tmp = Path(tmp_name)
            serve_args = stack.enter_context(backend_args(kind, tmp))
            start = time.perf_counter()
            with pinlater_server(tmp, serve_args, ROOT / "python") as (port, _admin):
                fill(port, queues, args.jobs)
            print(
                f"{kind}, {len(SHARDS)} shards, {args.queues} queues, {args.jobs} jobs each "
                f"(filled in {time.perf_counter() - start:.1f} s)"
            )
            if args.before is not None:
                with pinlater_server(tmp, serve_args, args.before) as (_port, admin_port):
                    measure("before", admin_port, args.repeat, args.queues, args.settle)
            with pinlater_server(tmp, serve_args, ROOT / "python") as (_port, admin_port):
                measure("now", admin_port, args.repeat, args.queues, args.settle)


if __name__ == "__main__":
    main()
