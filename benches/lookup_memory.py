"""What one ``lookupJobs`` with bodies past ``MAX_FRAME_BYTES`` costs the server: its peak memory.

For each backend, a fresh store and server; ``--jobs`` jobs of ``--body-kib`` KiB are enqueued
(a few a request, under the frame limit), then looked up, with their bodies, in one call. The
reply could not fit a frame, so the server refuses it either way; what differs is how much it
read first. Printed per build: the server's resident set before the lookup, its peak (VmHWM of
/proc/PID/status) after it, the growth, the lookup's seconds, and the error's first words.

    PYTHONPATH=$PWD/python python benches/lookup_memory.py --backends embedded,redis-compact --against HEAD~1

``--against COMMIT`` builds that commit into its cached virtualenv (``cost_per_job.py``'s) and
measures it the same way, in the same run.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import await_ready, thrift_client
from cost_per_job import BACKENDS, DEFAULT_CACHE_DIR, Build, _split, commit_build, current_build, running_store

QUEUE = "bench_lookup_memory"


def _status_kib(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise SystemExit(f"no {field} in /proc/{pid}/status")


def measure(build: Build, backend: str, jobs: int, body_kib: int) -> tuple[int, int, float, str]:
    """(resident KiB before the lookup, peak KiB after it, its seconds, the answer's first words)."""
    from pinlater.idl import idl

    with tempfile.TemporaryDirectory(prefix="pinlater-lookup-memory-") as tmp:
        directory = Path(tmp)
        with running_store(backend, directory) as store:
            cmd = [build.python, "-m", "pinlater.cli", "serve", "--port", "0", "--admin-port", "0"]
            cmd += store.server_args
            proc = subprocess.Popen(
                cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=build.env, cwd=directory
            )
            try:
                port, _ = await_ready(proc, f"{build.label}: server")
                client = thrift_client(port)
                ctx = idl.RequestContext(source="bench-lookup-memory")
                client.createQueue(ctx, QUEUE)
                body = b"b" * (body_kib * 1024)
                per_request = max(1, (8 * 1024) // body_kib)  # 8 MiB a request
                descriptors: list[str] = []
                while len(descriptors) < jobs:
                    n = min(per_request, jobs - len(descriptors))
                    request = idl.PinLaterEnqueueRequest(queueName=QUEUE, jobs=[idl.PinLaterJob(body=body)] * n)
                    descriptors += client.enqueueJobs(ctx, request).jobDescriptors
                before = _status_kib(proc.pid, "VmRSS")
                started = time.perf_counter()
                try:
                    found = client.lookupJobs(
                        ctx, idl.PinLaterLookupJobRequest(jobDescriptors=descriptors, includeBody=True)
                    )
                    answer = f"answered {len(found)} jobs"
                except idl.PinLaterException as exc:
                    answer = " ".join(str(exc.message).split()[:9])
                seconds = time.perf_counter() - started
                return before, _status_kib(proc.pid, "VmHWM"), seconds, answer
            finally:
                proc.send_signal(signal.SIGTERM)
                proc.wait(60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", default="embedded,redis-compact", help=f"a comma list of {', '.join(BACKENDS)}")
    parser.add_argument("--jobs", type=int, default=200, help="jobs looked up (default 200)")
    parser.add_argument("--body-kib", type=int, default=1024, help="each job's body, KiB (default 1024)")
    parser.add_argument("--against", action="append", default=[], metavar="COMMIT", help="also measure this commit")
    parser.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE_DIR)
    args = parser.parse_args()
    builds = [current_build(), *(commit_build(c, args.cache_dir) for c in _split(args.against))]
    print(f"one lookupJobs with bodies of {args.jobs} jobs of {args.body_kib} KiB (MAX_FRAME_BYTES 16 MiB)")
    print(f"{'backend':<14} {'build':<10} {'RSS before':>11} {'peak after':>11} {'growth':>9} {'seconds':>8}  answer")
    for backend in _split([args.backends], BACKENDS):
        for build in builds:
            before, peak, seconds, answer = measure(build, backend, args.jobs, args.body_kib)
            growth = (peak - before) / 1024
            print(
                f"{backend:<14} {build.label:<10} {before / 1024:>9.0f}MB {peak / 1024:>9.0f}MB {growth:>7.0f}MB "
                f"{seconds:>8.2f}  {answer}"
            )
            sys.stdout.flush()


if __name__ == "__main__":
    main()
