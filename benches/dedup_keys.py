"""What dedup keys and ordered groups cost: the full lifecycle with and without them, side by side.

For each backend of ``--backends`` (embedded, redis, redis-compact, mysql), ``--rounds`` rounds
run each of ``--variants`` of this tree's server, in a rotated order each round:

- ``plain``: the load of ``cost_per_job.py`` (its producers, consumers and measurement, with the
  same options);
- ``keyed``: the same load with a dedup key of its own on every job (so every enqueue checks its
  key and records it; none is deduplicated);
- ``grouped``: ``keyed``, and every job also carries a group key, one of ``--groups`` groups in
  turn (default 1,000), so each enqueue also joins a group and each ack moves its group on (at
  the default concurrency of 1); MySQL and Redis in the original layout refuse groups, so this
  variant is for the embedded store and redis-compact.

With ``--against COMMIT`` each round also runs each variant on that commit of this repository
(built as ``cost_per_job.py --against`` builds it), in turn with this tree's, and prints both
side by side. ``--slow-syncs MS`` slows the server's syncs as ``cost_per_job.py`` does.

It prints jobs/min and CPU per acked job of the server and the store for each, the jobs a
dequeue brought on average (below the batch: the consumers outran the producers) and the cores
the machine had busy, and each variant / plain from the sums over the rounds (the per-round
range in brackets). Issue 17 asks the
lifecycle with ordered groups and dedup keys for at least 70% of the plain one's jobs/min on the
embedded store and on Redis.

    PYTHONPATH=$PWD/python python benches/dedup_keys.py --backends embedded,redis-compact --seconds 10
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cost_per_job import (
    BACKENDS,
    DEFAULT_CACHE_DIR,
    Build,
    Figures,
    Run,
    _jobs,
    _us,
    add_load,
    add_shards,
    add_slow_syncs,
    commit_build,
    current_build,
    measure,
    slow_syncs,
)

VARIANTS = ("plain", "keyed", "grouped")

T = TypeVar("T")


def _rotated(items: list[T], round_no: int) -> list[T]:
    """``items`` starting at the round's turn: each comes first in every len(items)-th round."""
    shift = (round_no - 1) % len(items)
    return items[shift:] + items[:shift]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", default="embedded,redis", help=f"comma list of {', '.join(BACKENDS)}")
    add_load(parser)
    parser.add_argument("--rounds", type=int, default=2, help="runs of each variant on each backend (default 2)")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma list of plain, keyed, grouped")
    parser.add_argument("--groups", type=int, default=1000, help="groups of the grouped variant (default 1000)")
    parser.add_argument("--against", default="", metavar="COMMIT", help="also run this commit's build, in turn")
    parser.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE_DIR, help="where --against builds are kept")
    add_shards(parser)
    add_slow_syncs(parser)
    args = parser.parse_args()
    variants = [v for v in args.variants.split(",") if v]
    if "plain" not in variants or set(variants) - set(VARIANTS):
        parser.error(f"--variants: plain and any of {', '.join(VARIANTS[1:])}")
    if args.groups < 2:
        parser.error("--groups: at least 2")
    backends = [b for b in args.backends.split(",") if b]
    unknown = set(backends) - set(BACKENDS)
    if unknown:
        parser.error(f"unknown backends: {', '.join(sorted(unknown))}")

    builds: list[Build] = [current_build()]
    if args.against:
        builds.append(commit_build(args.against, args.cache_dir))
    builds = [slow_syncs(b, args.slow_syncs) for b in builds]
    runs: dict[tuple[str, str, str], list[Run]] = {}
    with tempfile.TemporaryDirectory(prefix="pinlater-dedup-") as tmp:
        for round_no in range(1, args.rounds + 1):
            for build in _rotated(builds, round_no):
                for backend in backends:
                    for variant in _rotated(variants, round_no):
                        args.keyed = {"plain": 0, "keyed": 1, "grouped": args.groups}[variant]
                        directory = Path(tmp) / f"{build.label}-{backend}-{variant}-{round_no}"
                        directory.mkdir()
                        run = measure(build, backend, round_no, args, directory)
                        runs.setdefault((build.label, backend, variant), []).append(run)
                        print(
                            f"  {build.label} {backend} {variant} round {round_no}: {run.acked} acked",
                            file=sys.stderr,
                            flush=True,
                        )

    print(
        f"dedup keys and groups: full lifecycle, batch {args.batch}, {args.body_bytes}-byte bodies, "
        f"{args.producers} producer(s) + {args.consumers} consumer(s), {args.seconds:g} s measured, "
        f"{args.rounds} round(s), {args.shards} shard(s) per store, {os.cpu_count()} CPUs"
    )
    print(
        f"{'build':<8} {'backend':<14} {'variant':<7} {'jobs/min':>9} {'server µs/job':>14} {'store µs/job':>13} "
        f"{'clients µs/job':>15} {'per deq':>8} {'busy':>5}"
    )
    for build in builds:
        for backend in backends:
            for variant in variants:
                f = Figures.of(runs[(build.label, backend, variant)])
                v = f.values()
                clients = _us(f.per_job_us(f.client_cpu))
                done = runs[(build.label, backend, variant)]
                # jobs a dequeue brought on average, and the cores the machine had busy (of all)
                per_dequeue = sum(r.acked for r in done) / max(sum(r.dequeues for r in done), 1)
                busy = sum(r.busy_cores for r in done) / len(done)
                print(
                    f"{build.label:<8} {backend:<14} {variant:<7} {_jobs(f.jobs_per_min):>9} {_us(v['server']):>14} "
                    f"{_us(v['store']):>13} {clients:>15} {per_dequeue:>8.1f} {busy:>5.2f}"
                )
            plain = runs[(build.label, backend, "plain")]
            for variant in variants[1:]:
                other = runs[(build.label, backend, variant)]
                pairs = zip(plain, other, strict=True)
                ratios = [Figures.of([o]).jobs_per_min / max(Figures.of([p]).jobs_per_min, 1e-9) for p, o in pairs]
                total = Figures.of(other).jobs_per_min / max(Figures.of(plain).jobs_per_min, 1e-9)
                spread = f"[{min(ratios):.2f}-{max(ratios):.2f}]"
                verdict = "met" if total >= 0.7 else "not met"
                print(
                    f"{build.label:<8} {backend:<14} {variant}/plain jobs/min {total:.2f} {spread} "
                    f"(issue 17: at least 0.70, {verdict})"
                )
    if len(builds) > 1:
        for backend in backends:
            for variant in variants:
                mine = Figures.of(runs[(builds[0].label, backend, variant)]).jobs_per_min
                theirs = Figures.of(runs[(builds[1].label, backend, variant)]).jobs_per_min
                print(
                    f"{backend:<14} {variant:<7} jobs/min {builds[0].label} / {builds[1].label}: "
                    f"{mine / max(theirs, 1e-9):.2f}"
                )


if __name__ == "__main__":
    main()
