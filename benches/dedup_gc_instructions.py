"""Redis instructions per keyed job spent forgetting dedup keys over the life of finished jobs,
counted by callgrind: what ``instructions_per_job.py --variants keyed`` does not see, since its
cycles run for seconds and the monitor's dedup GC works on a job's key for as long as the job is
kept (``succeededJobTTL``, an hour by default).

Each build (the current one, and ``--against`` commits from ``cost_per_job.py``'s cache) gets a
fresh redis-server under callgrind, with instrumentation off. Through that build's own Redis
store (the path the server uses, in the compact layout) ``--batches`` batches of 100 keyed jobs
(a key of their own, no window) are enqueued, claimed and acked, counting Redis' instructions in
those three calls; then the dedup GC is called as the monitor would come to these records: at
1, 2, 4, ... seconds after the acks up to ``--ttl-seconds``, after which the finished jobs are
collected (not counted) and the GC called twice more. The GC's instructions, per keyed job, are
printed beside the lifecycle's.

    PYTHONPATH=$PWD/python python benches/dedup_gc_instructions.py --against bb2e2c7
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from cost_per_job import DEFAULT_CACHE_DIR, Build, _split, commit_build, current_build, running_store

# Run by each build's interpreter (its own pinlater): argv port, redis pid, batches, ttl ms.
# Prints the instructions-on phases it ran, for the parent to match with callgrind's totals.
HARNESS = r"""
import subprocess, sys
from pinlater.backends.base import AckItem, JobState, KeyedJob, NewJob
from pinlater.backends.redis import RedisEndpoint, RedisShardConfig, RedisStore

port, pid, batches, ttl_ms = (int(a) for a in sys.argv[1:5])


def instr(on):
    command = ["callgrind_control", "--instr=" + ("on" if on else "off"), str(pid)]
    subprocess.run(command, check=True, capture_output=True)


def dump(label):
    subprocess.run(["callgrind_control", "--dump=" + label, str(pid)], check=True, capture_output=True)


T = 1_700_000_000_000
store = RedisStore("1", RedisShardConfig(RedisEndpoint("127.0.0.1", port), layout="compact"))
store.create_queue("q", 1)
instr(True)
for c in range(batches):
    t = T + c
    jobs = [KeyedJob(NewJob(1, b"x" * 100, t, 3), "key-%d-%d" % (c, i), 0, None) for i in range(100)]
    store.enqueue_keyed_jobs("q", jobs, t)
    got = store.dequeue_jobs("q", 1, 100, "c:1", t, False)
    store.ack_jobs("q", [AckItem(1, j.local_id) for j in got], [], t)
dump("lifecycle")
after, dt = T + batches, 1000
while dt < ttl_ms:
    store.gc_dedup_keys("q", after + dt, 1_000_000)
    dt *= 2
instr(False)
store.gc_finished_jobs("q", 1, JobState.SUCCEEDED, after + ttl_ms, 1_000_000)
instr(True)
for extra in (ttl_ms, 2 * ttl_ms):
    store.gc_dedup_keys("q", after + extra, 1_000_000)
dump("gc")
instr(False)
store.close()
"""


def counts(build: Build, batches: int, ttl_ms: int) -> tuple[float, float]:
    """Redis instructions per keyed job: the lifecycle's, then the dedup GC's."""
    with tempfile.TemporaryDirectory(prefix="pinlater-dedup-gc-") as tmp:
        directory = Path(tmp)
        out = directory / "callgrind.out"
        valgrind = ("valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}")
        with running_store("redis-compact", directory, valgrind) as store:
            config = Path(store.server_args[store.server_args.index("--backend-config") + 1])
            master = json.loads(config.read_text())["shards"][0]["shardConfig"]["master"]
            cmd = [build.python, "-c", HARNESS, str(master["port"]), str(store.pid), str(batches), str(ttl_ms)]
            subprocess.run(cmd, check=True, env=build.env, cwd=directory)
        totals = {}
        for part in sorted(directory.glob("callgrind.out*")):
            text = part.read_text()
            triggers = (line for line in text.splitlines() if line.startswith("desc: Trigger"))
            label = next((line.split(":", 1)[1].strip() for line in triggers), "")
            summary = [line for line in text.splitlines() if line.startswith("summary:") or line.startswith("totals:")]
            if summary:
                totals[label] = int(summary[-1].split()[1])
        lifecycle = next(v for k, v in totals.items() if "lifecycle" in k)
        gc = next(v for k, v in totals.items() if "gc" in k and "lifecycle" not in k)
        return lifecycle / (batches * 100), gc / (batches * 100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=30, help="batches of 100 keyed jobs (default 30)")
    parser.add_argument("--ttl-seconds", type=int, default=3600, help="how long finished jobs are kept (default 3600)")
    parser.add_argument("--against", action="append", default=[], metavar="COMMIT", help="also count this commit")
    parser.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE_DIR)
    args = parser.parse_args()
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise SystemExit("valgrind is not installed: apt-get install valgrind")
    builds = [current_build(), *(commit_build(c, args.cache_dir) for c in _split(args.against))]
    print(f"Redis instructions per keyed job (compact layout; finished jobs kept {args.ttl_seconds} s)")
    for build in builds:
        lifecycle, gc = counts(build, args.batches, args.ttl_seconds * 1000)
        both = lifecycle + gc
        print(f"{build.label:8} lifecycle {lifecycle:10,.0f}   dedup GC {gc:10,.0f}   both {both:10,.0f}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
