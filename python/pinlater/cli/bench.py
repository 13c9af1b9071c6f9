"""``pinlater bench``: the capacity-planning benchmark (see ``pinlater.bench``).

Starts a server on the chosen backend (and its own redis-server or mariadbd in a temporary
directory) or drives a running one (``--target``), runs producer and consumer processes for
``--duration`` seconds with a progress line each second (stderr), then prints a report (or the
JSON with ``--json``), saves the JSON (``--out``), draws a PNG (``--plot``) and, given
``--target-rate``, a plan of shards and servers with its assumptions.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from pinlater.bench.rates import parse_rate
from pinlater.cli.argtypes import positive_float

PROG = "pinlater bench"
BACKENDS = ("embedded", "redis", "mysql")

EPILOG = """\
examples:
  pinlater bench --duration 20                                   embedded store, 1 producer, 2 consumers
  pinlater bench --backend redis --producers 2 --consumers 4 --out bench.json --plot bench.png
  pinlater bench --backend mysql --target-rate 50M/min --cores-per-store 8
  pinlater bench --backend redis --processes 2 --target-rate 50M/min       servers of 2 processes
  pinlater bench --target 10.0.0.5:9010 --backend redis --target-rate 800k/s

rates: 50M/min, 800k/s, 1e6/min, 2.5B/day (k, M, G/B; per s, min, h or day; a bare number is per second)
"""


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "bench",
        help="capacity-planning benchmark: the job lifecycle end to end, and a plan for a target rate",
        description="Measure enqueue, dequeue and ack throughput (jobs/min), their latency (p50/p99/p999) and the "
        "CPU of server, store and load generator, on one shard; optionally turn it into a cluster plan.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--backend", choices=BACKENDS, default="embedded", help="store to start (default embedded)")
    p.add_argument("--target", type=_address, metavar="HOST:PORT", help="drive a running server instead")
    p.add_argument("--duration", type=positive_float, default=20.0, help="seconds of load (default 20)")
    p.add_argument("--producers", type=_count, default=1, help="enqueueing processes (default 1)")
    p.add_argument("--consumers", type=_count, default=2, help="dequeue+ack processes (default 2)")
    p.add_argument("--batch", type=_positive_int, default=100, help="jobs per enqueue and per dequeue (default 100)")
    p.add_argument("--body-bytes", type=_count, default=100, help="size of each job's body (default 100)")
    p.add_argument(
        "--piggyback-acks", action="store_true", help="send acks with the next dequeue (the original's worker)"
    )
    p.add_argument("--queue", default="pinlater_bench", help="queue to use (created if missing)")
    p.add_argument("--out", type=Path, metavar="FILE", help="save the result as JSON")
    p.add_argument("--json", action="store_true", help="print the JSON instead of the report")
    p.add_argument("--plot", type=Path, metavar="FILE", help="draw throughput and latency over time (PNG)")
    p.add_argument("--target-rate", type=_rate, metavar="RATE", help="plan shards and servers for this rate")
    p.add_argument("--headroom", type=_headroom, default=2.0, help="provision this multiple of the target (default 2)")
    p.add_argument(
        "--processes",
        type=_positive_int,
        default=1,
        help="server processes of the server started (--processes of pinlater serve; redis and mysql only), "
        "or that the --target server runs; the plan counts servers of this many (default 1)",
    )
    p.add_argument(
        "--cores-per-server", type=positive_float, default=1.0, help="cores one server process may use (default 1)"
    )
    p.add_argument(
        "--cores-per-store", type=positive_float, default=1.0, help="cores one shard's store may use (default 1)"
    )
    p.add_argument(
        "--server-pid", type=_positive_int, help="with --target: the server's PID, to measure its CPU (children's too)"
    )
    p.add_argument("--store-pid", type=_positive_int, help="with --target: the store's PID, to measure its CPU")
    p.set_defaults(run=run, parser=p)


def _headroom(text: str) -> float:
    value = positive_float(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"headroom must be >= 1, not {text}")
    return value


def _int_at_least(text: str, low: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"it must be >= {low}, not {value}")
    return value


def _count(text: str) -> int:
    return _int_at_least(text, 0)


def _positive_int(text: str) -> int:
    return _int_at_least(text, 1)


def _rate(text: str) -> float:
    try:
        return parse_rate(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


def run(args: argparse.Namespace) -> int:
    from pinlater.bench.local import MissingBinaryError, StartError
    from pinlater.bench.runner import BenchConfig, run_bench
    from pinlater.errors import PinLaterError

    parser: argparse.ArgumentParser = args.parser
    if args.producers + args.consumers == 0:
        parser.error("nothing to run: --producers and --consumers are both 0")
    if args.processes > 1 and args.backend == "embedded":
        parser.error("--processes above 1 needs --backend redis or mysql (the embedded store serves from one process)")
    if (args.server_pid or args.store_pid) and args.target is None:
        parser.error("--server-pid and --store-pid go with --target (started servers are measured anyway)")
    if args.plot is not None:
        try:
            import matplotlib  # noqa: F401  # fail before the run, not after it
        except ImportError:
            parser.error("--plot needs matplotlib: pip install 'pinlater[bench]'")
    config = BenchConfig(
        backend=args.backend,
        target=args.target,
        duration=args.duration,
        producers=args.producers,
        consumers=args.consumers,
        batch=args.batch,
        body_bytes=args.body_bytes,
        piggyback_acks=args.piggyback_acks,
        queue=args.queue,
        server_pid=args.server_pid,
        store_pid=args.store_pid,
        processes=args.processes,
    )
    try:
        result = run_bench(config, sys.stderr)
    except (MissingBinaryError, StartError, PinLaterError, OSError) as exc:
        print(f"{PROG}: {' '.join(str(exc).split())}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    if args.target_rate is not None:
        result["plan"] = _plan(result, args)
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    if args.plot is not None:
        from pinlater.bench.plot import draw

        draw(result, args.plot)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(report(result))
        if args.out is not None:
            print(f"saved: {args.out}")
        if args.plot is not None:
            print(f"plot: {args.plot}")
    if result["lifecycle_jobs_per_min"] <= 0:
        print(f"{PROG}: no job went through enqueue, dequeue and ack: see the errors", file=sys.stderr)
        return 1
    return 0


def _plan(result: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    from pinlater.bench.plan import PlanInputs, make_plan

    return make_plan(
        PlanInputs(
            target_per_s=args.target_rate,
            headroom=args.headroom,
            backend=args.backend,
            lifecycle_per_s=result["lifecycle_jobs_per_min"] / 60,
            duration_s=args.duration,
            server_cpu_s=result["cpu_seconds"]["server"],
            store_cpu_s=result["cpu_seconds"]["store"],
            cores_per_server=args.cores_per_server,
            cores_per_store=args.cores_per_store,
            processes_per_server=args.processes,
        )
    )


def report(result: dict[str, Any]) -> str:
    """The human-readable report of a result (the JSON has everything it shows)."""
    from pinlater.bench.plan import format_plan
    from pinlater.bench.stats import ms, si

    cfg = result["config"]
    lines = [
        f"pinlater bench: {result['backend']}, {cfg['duration']:g}s, {cfg['producers']} producer(s), "
        f"{cfg['consumers']} consumer(s), batch {cfg['batch']}, {cfg['body_bytes']}-byte bodies"
        f"{', acks piggy-backed' if cfg['piggyback_acks'] else ''}"
        f"{', ' + str(cfg['processes']) + ' server processes' if cfg.get('processes', 1) > 1 else ''}; "
        f"{result['machine']['cpus']} CPUs",
        f"{'operation':<10}{'jobs/min':>12}{'jobs/s':>11}{'req/s':>9}{'p50':>10}{'p99':>10}{'p999':>10}  errors",
    ]
    for op, t in result["throughput"].items():
        lat = result["latency_ms"][op] or {}
        errors = ", ".join(f"{code} {n}" for code, n in t["errors"].items()) or "0"
        lines.append(
            f"{op:<10}{si(t['jobs_per_min']):>12}{t['jobs_per_sec']:>11.0f}{t['requests_per_sec']:>9.0f}"
            f"{ms(lat.get('p50')):>10}{ms(lat.get('p99')):>10}{ms(lat.get('p999')):>10}  {errors}"
        )
    lines.append(
        f"lifecycle (slowest of the three): {si(result['lifecycle_jobs_per_min'])} jobs/min; "
        f"empty dequeues {result['throughput']['dequeue']['empty_dequeues']}; "
        f"pending at the end {result.get('backlog_pending_at_end')}"
    )
    cpu, cores = result["cpu_seconds"], result["cpu_cores"]

    def cpu_text(name: str) -> str:
        if cpu[name] is None:
            return "inside the server" if name == "store" and "embedded" in result["backend"] else "not measured"
        return f"{cpu[name]:.1f}s ({cores[name]:.2f} cores)"

    lines.append(
        f"CPU: server {cpu_text('server')}, store {cpu_text('store')}, load generator {cpu_text('load_generator')}"
    )
    if "plan" in result:
        lines.append(format_plan(result["plan"]))
    return "\n".join(lines)
