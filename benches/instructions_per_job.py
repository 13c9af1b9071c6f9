"""Instructions per job of ``pinlater serve``'s user space, counted by callgrind: a yardstick that
the noise of a shared machine does not move.

On this 2-core machine, CPU seconds per job (``cost_per_job.py``) swing by a tenth or more from
one round to the next, so a change worth a few percent cannot be told from noise there. This
script runs the server under valgrind's callgrind with instrumentation off, drives a fixed
workload through it over Thrift (``--cycles`` cycles of an enqueue of ``--batch`` jobs of 100-byte
bodies and a dequeue of ``--batch`` carrying the previous cycle's acks), and counts the
instructions the server's process executes (every thread: the event loop, the Rust extension,
and on the embedded store SQLite's writer) between the end of ``--warmup`` cycles and the end of
the last one. The same build, store and workload give the same count to within a fraction of a
percent, whatever else the machine is doing.

What it does not see: the kernel (system calls, wake-ups, the stores' disk writes) and what an
instruction costs (cache misses, which is where Python's share of the time mostly goes). So it
ranks changes to the code that runs per job, and CPU seconds through ``cost_per_job.py`` stay the
figure of record. Needs valgrind (``apt-get install valgrind``). The store runs outside
valgrind, as ``cost_per_job.py`` starts it.

    PYTHONPATH=$PWD/python python benches/instructions_per_job.py --backends redis,embedded --against c521c67

``--against COMMIT`` builds that commit into its own cached virtualenv, as ``cost_per_job.py``
does (the same cache), and counts it in the same run.

``--variants`` counts ``dedup_keys.py``'s variants too: ``keyed`` gives every job a dedup key of
its own, ``grouped`` also a group key, one of ``--groups`` groups in turn (at the default
concurrency of 1, a group's next job waits for its last one's ack, so a cycle's groups must be
free: ``--groups`` is at least ``--batch``). Each variant's count is printed with its ratio to
``plain``: issue 17's speed target in instructions, which the noise does not move.

    PYTHONPATH=$PWD/python python benches/instructions_per_job.py --backends embedded --variants plain,grouped

``--lead N`` enqueues N jobs (rounded down to whole batches) before the cycles, so that the
dequeues run that far behind the enqueues. With ``--lead 1000`` and 1,000 groups, every grouped
job joins a group whose previous job is unfinished: it waits, and moves up at that job's ack.
Without a lead no grouped job here ever waits. ``dedup_keys.py``'s default load lies in between:
up to 1,200 jobs unacked over its 1,000 groups, but its consumers mostly keep up, so its jobs
wait in bursts (a grouped run sampled every 2 s had none waiting in 6 of 8 samples).

    PYTHONPATH=$PWD/python python benches/instructions_per_job.py --backends redis-compact --count redis \
        --variants plain,grouped --lead 1000

``--count redis`` counts redis-server instead (the server runs outside valgrind): Redis' CPU per
job in instructions, which is what issue 16's first target compares between the layouts, and
what the compact layout's Lua scripts are tuned against (their per-job Lua, not the commands
they call, was most of it). Every script of the build is loaded into that Redis before the count
(``preload_scripts``): before, the monitor's first pass fell in the counted cycles and compiled
its scripts there, 3-4k instructions per job of noise in every variant.

    PYTHONPATH=$PWD/python python benches/instructions_per_job.py --backends redis,redis-compact --count redis
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from _common import await_ready, thrift_client
from cost_per_job import (
    BACKENDS,
    COMPACT,
    DEFAULT_CACHE_DIR,
    Build,
    Store,
    _split,
    commit_build,
    current_build,
    running_store,
)

QUEUE = "bench_instructions"


VARIANTS = ("plain", "keyed", "grouped")


def count(
    build: Build,
    backend: str,
    cycles: int,
    warmup: int,
    batch: int,
    variant: str = "plain",
    groups: int = 1000,
    counted: str = "server",
    lead: int = 0,
) -> float:
    """Instructions per job of ``build``'s server (``counted`` "server") or of the Redis it
    serves from ("redis") over ``cycles`` measured cycles of ``variant``, after ``lead`` jobs
    enqueued ahead of the cycles (``lead // batch`` enqueues with no dequeue)."""
    from pinlater.idl import idl

    with tempfile.TemporaryDirectory(prefix="pinlater-instr-") as tmp:
        directory = Path(tmp)
        out = directory / "callgrind.out"
        valgrind = ("valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}")
        with running_store(backend, directory, valgrind if counted == "redis" else ()) as store:
            cmd = [] if counted == "redis" else list(valgrind)
            cmd += [build.python, "-m", "pinlater.cli", "serve", "--port", "0", "--admin-port", "0"]
            cmd += store.server_args
            proc = subprocess.Popen(
                cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=build.env, cwd=directory
            )
            try:
                port, _ = await_ready(proc, f"{build.label}: server under callgrind")
                client = thrift_client(port)
                ctx = idl.RequestContext(source="bench-instructions")
                client.createQueue(ctx, QUEUE)
                body = b"x" * 100
                sent = 0

                def enqueue() -> None:
                    nonlocal sent
                    jobs = [idl.PinLaterJob(body=body) for _ in range(batch)]
                    if variant != "plain":
                        for job in jobs:
                            job.dedupKey = f"key-{sent}"
                            if variant == "grouped":
                                job.groupKey = f"group-{sent % groups}"
                            sent += 1
                    client.enqueueJobs(ctx, idl.PinLaterEnqueueRequest(queueName=QUEUE, jobs=jobs))

                def cycle(acks: list[Any]) -> list[Any]:
                    enqueue()
                    ack = idl.PinLaterJobAckRequest(queueName=QUEUE, jobsSucceeded=acks) if acks else None
                    got = client.dequeueJobs(
                        ctx, idl.PinLaterDequeueRequest(queueName=QUEUE, limit=batch, jobAckRequest=ack)
                    )
                    if len(got.jobs) != batch:
                        raise SystemExit(f"{build.label}: a dequeue got {len(got.jobs)} jobs, not {batch}")
                    return [idl.PinLaterJobAckInfo(jobDescriptor=d) for d in got.jobs]

                for _ in range(lead // batch):
                    enqueue()
                acks: list[Any] = []
                for _ in range(warmup):
                    acks = cycle(acks)
                if backend.startswith("redis"):
                    preload_scripts(build, store, "compact" if backend == COMPACT else "original")
                counted_pid = store.pid if counted == "redis" else proc.pid
                control = ["callgrind_control", "--instr=on", str(counted_pid)]
                subprocess.run(control, check=True, capture_output=True)
                for _ in range(cycles):
                    acks = cycle(acks)
                control[1] = "--instr=off"
                subprocess.run(control, check=True, capture_output=True)
            finally:
                proc.send_signal(signal.SIGTERM)
                proc.wait(300)
        # read once the store stopped too: callgrind writes a process's totals as it exits
        totals = [line for line in out.read_text().splitlines() if line.startswith("totals:")]
        if not totals:
            raise SystemExit(f"{build.label}: callgrind wrote no totals to {out}")
        return int(totals[-1].split()[1]) / (cycles * batch)


# Run by the build's own interpreter, so that it loads that build's scripts: argv host, port, layout.
_PRELOAD = """
import sys
import redis
from pinlater.backends.redis import scripts
client = redis.Redis(sys.argv[1], int(sys.argv[2]))
for name in scripts.SCRIPT_NAMES:
    client.script_load(scripts.source(name, sys.argv[3]))
"""


def preload_scripts(build: Build, store: Store, layout: str) -> None:
    """Load every script of ``build`` in ``layout`` into the store's Redis, before the count: the
    first call of a script that is not loaded yet compiles it (``SCRIPT LOAD``: SHA1 and the Lua
    parser, thousands of instructions per job of the interval it falls in, where the monitor's
    first pass used to land in the keyed and grouped variants), a cost of the server's start,
    not of its jobs. The hot scripts are loaded as the server connects; this loads the rest."""
    config = json.loads(Path(store.server_args[store.server_args.index("--backend-config") + 1]).read_text())
    master = config["shards"][0]["shardConfig"]["master"]
    cmd = [build.python, "-c", _PRELOAD, master["host"], str(master["port"]), layout]
    subprocess.run(cmd, check=True, env=build.env, capture_output=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", default="redis,embedded", help=f"a comma list of {', '.join(BACKENDS)}")
    parser.add_argument("--cycles", type=int, default=100, help="measured cycles (default 100)")
    parser.add_argument("--warmup", type=int, default=20, help="cycles before counting starts (default 20)")
    parser.add_argument("--batch", type=int, default=100, help="jobs per enqueue and per dequeue (default 100)")
    parser.add_argument("--against", action="append", default=[], metavar="COMMIT", help="also count this commit")
    parser.add_argument("--variants", default="plain", help="a comma list of plain, keyed, grouped (default plain)")
    parser.add_argument("--groups", type=int, default=1000, help="groups of the grouped variant (default 1000)")
    parser.add_argument(
        "--lead",
        type=int,
        default=0,
        help="jobs enqueued ahead of the cycles (default 0; --lead 1000 with 1000 groups: every grouped job waits)",
    )
    parser.add_argument(
        "--count",
        choices=("server", "redis"),
        default="server",
        help="whose instructions: the server's (default) or its Redis' (redis backends only)",
    )
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=DEFAULT_CACHE_DIR,
        help="where --against virtualenvs are kept (cost_per_job.py's cache)",
    )
    args = parser.parse_args()
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise SystemExit("valgrind is not installed: apt-get install valgrind")
    backends = _split([args.backends], BACKENDS)
    if args.count == "redis" and any(not b.startswith("redis") for b in backends):
        parser.error("--count redis: only the redis backends (redis, redis-compact)")
    variants = sorted(_split([args.variants], VARIANTS), key=lambda v: v != "plain")  # plain first: the others' base
    if "grouped" in variants and args.groups < args.batch:
        parser.error("--groups: at least --batch (a cycle's groups must all be free)")
    builds = [current_build(), *(commit_build(c, args.cache_dir) for c in _split(args.against))]
    whose = "the server's user space" if args.count == "server" else "redis-server's user space"
    lead = f", {args.lead // args.batch * args.batch} jobs enqueued ahead" if args.lead >= args.batch else ""
    print(f"instructions per job (callgrind, {whose}): {args.cycles} cycles of {args.batch}{lead}")
    for backend in backends:
        for variant in variants:
            counts = {}
            for build in builds:
                n = count(
                    build, backend, args.cycles, args.warmup, args.batch, variant, args.groups, args.count, args.lead
                )
                counts[build.label] = n
                label = backend if variant == "plain" else f"{backend} {variant}"
                print(f"{label:22} {build.label:8} {n:10,.0f}", flush=True)
            for build in builds[1:]:
                ratio = counts["current"] / counts[build.label]
                print(f"{label:22} current / {build.label}: {ratio:.3f}")
            if variant == "plain":
                plain = counts
            elif "plain" in variants:
                for build in builds:
                    ratio = plain[build.label] / counts[build.label]
                    print(f"{label:22} {build.label:8} plain / {variant}: {ratio:.3f} (jobs per instruction)")


if __name__ == "__main__":
    main()
