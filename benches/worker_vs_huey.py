"""Two ``pinlater worker`` processes against two huey worker processes: no-op jobs drained from Redis.

For pinlater: a redis-server on loopback (``tests/support/redis_server.py``), ``pinlater serve
--backend redis`` on it (one shard), ``--jobs`` jobs of 100 bytes enqueued first, then two
``pinlater worker`` processes with a no-op handler at their default settings. For huey: its own
redis-server, the same number of no-op tasks (a 100-byte argument) enqueued through ``RedisHuey``,
then ``huey_consumer -k process -w 2`` (two worker processes). Each side is timed from the moment
the queue first shrinks (polled every ``--poll`` seconds) to the moment every job is done: for
pinlater every job SUCCEEDED (acked), for huey huey's queue empty (at most the two tasks in
hand still running, in huey's favour). huey runs quiet (``-q``, no log line per task) unless
``--huey-log`` says otherwise, so its figure is its best.

``--before DIR`` also runs the workers from another tree's ``python/`` directory (the server
stays this tree's), so one run prints the worker before and after a change:

    git archive 8c6a3c9 python | tar -x -C /tmp/base && cp python/pinlater/_pinlater.abi3.so /tmp/base/python/pinlater/
    python benches/worker_vs_huey.py --jobs 30000 --rounds 3 --before /tmp/base/python

Modes alternate round by round (their order flips) so drift on a shared machine hits them alike.
huey is not a dependency of pinlater: ``pip install 'pinlater[bench]'`` (or ``pip install huey``)
installs it, and ``--no-huey`` runs the pinlater side alone. The issue's target: pinlater at least
3x huey's rate.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.support: the redis-server helper the tests use
sys.path.insert(0, str(ROOT / "benches"))
from many_queues import pinlater_server  # noqa: E402  (the sibling bench's `pinlater serve` runner)

QUEUE = "bench_worker_vs_huey"
BODY = b"x" * 100

HANDLERS = """
def noop(ctx):
    pass
"""

HUEY_TASKS = """
import os
from huey import RedisHuey

huey = RedisHuey("bench", host="127.0.0.1", port=int(os.environ["HUEY_REDIS_PORT"]))


@huey.task()
def noop(body):
    pass
"""


@contextmanager
def processes(commands: list[list[str]], cwd: Path, env: dict[str, str], log_dir: Path) -> Iterator[None]:
    """Start each command (output to a log file); SIGTERM and wait for them on exit."""
    procs = []
    try:
        for i, cmd in enumerate(commands):
            with open(log_dir / f"proc-{i}.log", "wb") as log:
                procs.append(
                    subprocess.Popen(
                        cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
                    )
                )
        yield
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def time_drain(n: int, remaining: Callable[[], int], done: Callable[[], bool], poll: float, limit: float) -> float:
    """Seconds from the first job taken (``remaining`` below ``n``) to ``done``."""
    deadline = time.monotonic() + limit
    while remaining() >= n:
        if time.monotonic() > deadline:
            raise SystemExit("the workers took no job: see their logs")
        time.sleep(poll)  # polling the store: nothing to wait on instead
    start = time.perf_counter()
    while not done():
        if time.monotonic() > deadline:
            raise SystemExit("the workers did not finish in time: see their logs")
        time.sleep(poll)
    return time.perf_counter() - start


# -- pinlater --------------------------------------------------------------------------------


def run_pinlater(
    tree: Path, port: int, n: int, workers: int, poll: float, tmp: Path, label: str, extra: list[str]
) -> float:
    from pinlater.client import JobState, PinLaterClient

    queue = f"{QUEUE}_{label}_{time.monotonic_ns()}"
    with PinLaterClient(f"127.0.0.1:{port}", timeout=120) as client:
        client.create_queue(queue)
        for start in range(0, n, 1000):
            client.enqueue(queue, [BODY] * min(1000, n - start))
        cmd = [sys.executable, "-m", "pinlater.cli", "worker", "handlers:noop", "--queue", queue]
        cmd += ["--port", str(port), *extra]
        env = {**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{tmp}"}
        log_dir = tmp / f"logs-{label}-{time.monotonic_ns()}"
        log_dir.mkdir()
        with processes([cmd] * workers, tmp, env, log_dir):
            return time_drain(
                n,
                lambda: client.count(queue, JobState.PENDING),
                lambda: client.count(queue, JobState.SUCCEEDED) >= n,
                poll,
                600,
            )


@contextmanager
def pinlater_on_redis(tmp: Path) -> Iterator[int]:
    from tests.support.redis_server import RedisServer

    with RedisServer(tmp / "redis-pinlater") as redis_server:
        config = tmp / "redis.json"
        master = {"host": redis_server.host, "port": redis_server.port}
        config.write_text(json.dumps({"shards": [{"name": "1", "shardConfig": {"master": master}}]}))
        with pinlater_server(tmp, ["--backend", "redis", "--backend-config", str(config)], ROOT / "python") as ports:
            yield ports[0]


# -- huey ------------------------------------------------------------------------------------


def run_huey(redis_port: int, n: int, workers: int, poll: float, tmp: Path, quiet: bool) -> float:
    env = {**os.environ, "HUEY_REDIS_PORT": str(redis_port), "PYTHONPATH": str(tmp)}
    os.environ["HUEY_REDIS_PORT"] = str(redis_port)
    sys.path.insert(0, str(tmp))
    import hueytasks  # type: ignore[import-not-found]

    huey = hueytasks.huey
    huey.flush()
    for _ in range(n):
        hueytasks.noop(BODY)
    cmd = [sys.executable, "-m", "huey.bin.huey_consumer", "hueytasks.huey", "-k", "process", "-w", str(workers)]
    if quiet:
        cmd.append("-q")
    log_dir = tmp / f"logs-huey-{time.monotonic_ns()}"
    log_dir.mkdir()
    with processes([cmd], tmp, env, log_dir):
        return time_drain(n, huey.pending_count, lambda: huey.pending_count() == 0, poll, 600)


# -- main ------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=30000, help="jobs per round and mode (default 30000)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per mode (default 3)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes on each side (default 2)")
    parser.add_argument("--poll", type=float, default=0.01, help="seconds between progress polls (default 0.01)")
    parser.add_argument("--before", type=Path, help="another tree's python/ directory: its workers run too")
    parser.add_argument("--no-huey", action="store_true", help="run the pinlater side only")
    parser.add_argument("--huey-log", choices=["quiet", "default"], default="quiet", help="huey_consumer logging")
    parser.add_argument(
        "--worker-args", default="", help="extra `pinlater worker` arguments for both trees (default: none)"
    )
    args = parser.parse_args()
    if not args.no_huey and importlib.util.find_spec("huey") is None:
        raise SystemExit("huey is not installed: pip install 'pinlater[bench]' (or pip install huey), or use --no-huey")

    modes = (["before"] if args.before else []) + ["pinlater"] + ([] if args.no_huey else ["huey"])
    rates: dict[str, list[float]] = {m: [] for m in modes}
    with tempfile.TemporaryDirectory(prefix="pinlater-worker-vs-huey-") as tmp_name, ExitStack() as stack:
        tmp = Path(tmp_name)
        (tmp / "handlers.py").write_text(HANDLERS)
        (tmp / "hueytasks.py").write_text(HUEY_TASKS)
        port = stack.enter_context(pinlater_on_redis(tmp))
        huey_port = 0
        if not args.no_huey:
            from tests.support.redis_server import RedisServer

            huey_port = stack.enter_context(RedisServer(tmp / "redis-huey")).port
        extra = args.worker_args.split()
        for rnd in range(args.rounds):
            for mode in modes if rnd % 2 == 0 else list(reversed(modes)):
                if mode == "huey":
                    seconds = run_huey(huey_port, args.jobs, args.workers, args.poll, tmp, args.huey_log == "quiet")
                else:
                    tree = args.before if mode == "before" else ROOT / "python"
                    seconds = run_pinlater(tree, port, args.jobs, args.workers, args.poll, tmp, mode, extra)
                rates[mode].append(args.jobs / seconds)
                print(f"round {rnd + 1} {mode:<9} {args.jobs / seconds:8.0f} jobs/s  ({seconds:.2f} s)", flush=True)

    print(
        f"\n{args.jobs} no-op jobs per round from Redis, {args.workers} worker processes a side, "
        f"{args.rounds} round(s); jobs/s as median and best round:"
    )
    labels = {"before": f"pinlater worker, {args.before}", "pinlater": "pinlater worker, this tree", "huey": "huey"}
    for mode in modes:
        print(f"  {labels[mode]:<40} median {statistics.median(rates[mode]):7.0f}  best {max(rates[mode]):7.0f}")
    if "huey" in rates:
        huey = statistics.median(rates["huey"])
        for mode in ("before", "pinlater"):
            if mode in rates:
                print(f"  ratio {mode}/huey (medians): {statistics.median(rates[mode]) / huey:.2f}x")
    if "before" in rates:
        now, before = statistics.median(rates["pinlater"]), statistics.median(rates["before"])
        print(f"  ratio now/before (medians): {now / before:.2f}x")


if __name__ == "__main__":
    main()
