"""Redis memory per job in each layout: what a pending job (and a finished one) costs the store.

For each layout (original, compact), a fresh redis-server (no persistence, so nothing but the
dataset grows) and a ``RedisStore`` in that layout: ``--jobs`` jobs of ``--body-bytes`` bytes are
enqueued in batches of ``--batch`` through the store's scripts (those the server runs), and the
growth of ``used_memory`` (INFO memory, after the enqueue and after each step) divided by the
jobs is reported:

- **pending**: after the enqueue, every job PENDING (issue 16's target: at most 250 bytes per
  job on the compact layout, with 100-byte bodies);
- **in progress**: after every job is dequeued (claimed);
- **succeeded**: after every job is acked as succeeded (kept until the GC TTL).

    PYTHONPATH=$PWD/python python benches/redis_layout_memory.py --jobs 200000
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.support: the real-store helpers the tests use

QUEUE = "bench_memory"
NOW = 1_700_000_000_000
LAYOUTS = ("original", "compact")
TARGET_PENDING_BYTES = 250


def measure(layout: str, args: argparse.Namespace, tmp: Path) -> dict[str, float]:
    import redis
    from tests.support.redis_server import RedisServer

    from pinlater.backends.base import AckItem, NewJob
    from pinlater.backends.redis import RedisEndpoint, RedisShardConfig, RedisStore

    with RedisServer(tmp / layout) as server, redis.Redis(server.host, server.port) as raw:
        store = RedisStore("1", RedisShardConfig(RedisEndpoint(server.host, server.port), layout=layout))
        try:
            store.create_queue(QUEUE, 1)

            def used() -> int:
                return int(raw.info("memory")["used_memory"])

            base = used()
            body = b"x" * args.body_bytes
            # each batch enqueued a millisecond after the one before, to run at once: as a server
            # stamps each enqueue with its clock (a ready list's run of one millisecond ends where
            # an id gains a digit: lib/ready.lua)
            batches = range(0, args.jobs, args.batch)
            for i, start in enumerate(batches):
                n = min(args.batch, args.jobs - start)
                store.enqueue_jobs(QUEUE, [NewJob(1, body, NOW + i, 3)] * n, NOW + i)
            figures = {"pending": (used() - base) / args.jobs}
            later = NOW + len(batches)
            claimed: list[int] = []
            while len(claimed) < args.jobs:
                jobs = store.dequeue_jobs(QUEUE, 1, args.batch, "bench:1", later, False)
                claimed += [job.local_id for job in jobs]
            figures["in progress"] = (used() - base) / args.jobs
            for start in range(0, len(claimed), args.batch):
                acks = [AckItem(1, local_id, "", 0) for local_id in claimed[start : start + args.batch]]
                store.ack_jobs(QUEUE, acks, [], later + 1)
            figures["succeeded"] = (used() - base) / args.jobs
            return figures
        finally:
            store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--body-bytes", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pinlater-memory-") as tmp:
        results = {layout: measure(layout, args, Path(tmp)) for layout in LAYOUTS}
    print(f"Redis used_memory per job, {args.jobs} jobs, batch {args.batch}, {args.body_bytes}-byte bodies:")
    print(f"{'layout':9} {'pending':>9} {'in progress':>12} {'succeeded':>10}")
    for layout, figures in results.items():
        print(f"{layout:9} " + " ".join(f"{figures[k]:>{w}.0f}" for k, w in zip(figures, (9, 12, 10), strict=True)))
    original, compact = results["original"]["pending"], results["compact"]["pending"]
    print(f"compact / original, pending: {compact / original:.2f}")
    verdict = "met" if compact <= TARGET_PENDING_BYTES else "NOT met"
    target = f"at most {TARGET_PENDING_BYTES} bytes per pending job on the compact layout"
    print(f"issue 16: {target}: {compact:.0f}, {verdict}")


if __name__ == "__main__":
    main()
