"""What idle queues cost: the CPU of a server (and of its Redis) doing nothing but its monitor.

For each backend of ``--backends`` (embedded, redis, redis-compact, mysql), the script starts a
fresh store (redis-server or mariadbd on loopback through ``tests/support/``, in a temporary
directory, stopped by PID at the end) and ``pinlater serve`` from ``--python-path`` (a tree's ``python/`` directory,
this one's by default), creates ``--queues`` empty queues, waits ``--settle`` seconds, then reads
the CPU seconds of the server and of its store's process (utime + stime, ``/proc/PID/stat``) over
``--seconds`` seconds in which no client calls: what the monitor's passes
(``BACKEND_MONITOR_THREAD_DELAY_SECONDS``, 10 s) and the other background tasks cost. It prints
each as a fraction of a core.

Before the monitor asked each shard for its idle queues (``ShardStore.monitor_idle``), a pass made
about a dozen store calls per queue however empty it was. To compare with an earlier commit:

    git worktree add /tmp/before 0f85496 && cp python/pinlater/_pinlater.abi3.so /tmp/before/python/pinlater/
    python benches/idle_monitor.py --queues 1000 --python-path /tmp/before/python
    python benches/idle_monitor.py --queues 1000
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.support: the redis-server helper the tests use
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import await_ready, cpu_seconds, thrift_client  # noqa: E402

BACKENDS = ("embedded", "redis", "redis-compact", "mysql")


@contextmanager
def store(kind: str, tmp: Path) -> Iterator[tuple[list[str], int | None]]:
    """The ``pinlater serve`` arguments for ``kind`` (one shard), and the store's PID (None:
    the embedded store runs in the server)."""
    if kind == "embedded":
        yield ["--backend", "embedded", "--data-dir", str(tmp / "data")], None
        return
    if kind == "mysql":
        from tests.support.mariadb_server import MariaDBServer

        mariadb = MariaDBServer(tmp / "mariadb")
        try:
            config = tmp / "backend.json"
            config.write_text(json.dumps({"1": mariadb.shard_entry()}))
            yield ["--backend", "mysql", "--backend-config", str(config)], mariadb.pid
        finally:
            mariadb.stop()
        return
    from tests.support.redis_server import RedisServer

    with RedisServer(tmp / "redis") as redis_server:
        shard: dict[str, object] = {"master": {"host": redis_server.host, "port": redis_server.port}}
        layout = "compact" if kind == "redis-compact" else "original"
        entry: dict[str, object] = {"name": "1", "shardConfig": shard, "layout": layout}
        config = tmp / "backend.json"
        config.write_text(json.dumps({"shards": [entry]}))
        yield ["--backend", "redis", "--backend-config", str(config)], redis_server.pid


def measure(kind: str, python_path: Path, queues: int, settle: float, seconds: float) -> tuple[float, float | None]:
    """(server, store) CPU as fractions of a core over ``seconds`` of idling (store None: embedded)."""
    from pinlater.idl import idl

    with tempfile.TemporaryDirectory(prefix="pinlater-idle-") as tmp, store(kind, Path(tmp)) as (args, store_pid):
        env = {**os.environ, "PYTHONPATH": str(python_path)}
        cmd = [sys.executable, "-m", "pinlater.cli", "serve", "--port", "0", "--admin-port", "0", *args]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=tmp)
        try:
            port, _ = await_ready(proc, f"{kind} server")
            client = thrift_client(port)
            ctx = idl.RequestContext(source="bench-idle-monitor")
            for i in range(queues):
                client.createQueue(ctx, f"idle_{i}")
            time.sleep(settle)
            pids = [proc.pid] + ([store_pid] if store_pid else [])
            before, started = [cpu_seconds(p) for p in pids], time.monotonic()
            time.sleep(seconds)
            after, elapsed = [cpu_seconds(p) for p in pids], time.monotonic() - started
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
    fractions = [(a - b) / elapsed for a, b in zip(after, before, strict=True)]
    return fractions[0], (fractions[1] if len(fractions) > 1 else None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", default=",".join(BACKENDS), help=f"a comma list of {', '.join(BACKENDS)}")
    parser.add_argument("--queues", type=int, default=1000, help="empty queues (default 1000)")
    parser.add_argument("--settle", type=float, default=5.0, help="seconds between the creates and the count")
    parser.add_argument("--seconds", type=float, default=30.0, help="seconds counted (default 30: three passes)")
    parser.add_argument("--python-path", type=Path, default=ROOT / "python", help="the tree's python/ to serve")
    args = parser.parse_args()
    print(f"{args.queues} idle queues, {args.seconds:g} s counted; CPU as a fraction of one core ({args.python_path})")
    for kind in [k for k in args.backends.split(",") if k]:
        if kind not in BACKENDS:
            raise SystemExit(f"unknown backend {kind!r}: one of {', '.join(BACKENDS)}")
        server, redis = measure(kind, args.python_path, args.queues, args.settle, args.seconds)
        print(f"{kind:14} server {server:.3f}" + (f"   store {redis:.3f}" if redis is not None else ""))


if __name__ == "__main__":
    main()
