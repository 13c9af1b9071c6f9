"""Where the embedded store's writer spends its time, statement by statement, under a real load.

Runs ``dedup_keys.py``'s lifecycle (``cost_per_job.py``'s producers and consumers, with the
same options) on the embedded store, once per variant of ``--variants`` (``plain``, ``keyed``:
a dedup key of its own on every job, ``grouped``: also one of ``--groups`` groups), with
``PINLATER_SQLITE_PROFILE`` set in the server's environment: the Rust writer then times each
statement it runs with SQLite's profile events (from a statement's first step to its reset) and
writes them all as it ends (``rust/store/sqlite_shard.rs``, ``write_statement_times``).

It prints, per statement, the writer's µs per job over the server's whole life (warm-up, the
measured interval and the drain: every statement timed, divided by every job inserted), side by
side for the variants, with the jobs/min of the measured interval. The hook costs the writer a
lock and a lookup per statement, so the jobs/min run a little below ``dedup_keys.py``'s: read the
statements against each other, not as the server's speed. Statements are named by the
``sql/*.sql`` file they were made from (the one whose text they start with: a multi-row
statement keeps its file's leading comments), else by their text.

    PYTHONPATH=$PWD/python python benches/sqlite_statement_time.py --variants plain,grouped --seconds 10
"""

from __future__ import annotations

import argparse
import json
import re
import sqlite3
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cost_per_job import Figures, _jobs, add_load, current_build, measure
from pinlater.backends.embedded import sql
from pinlater.backends.embedded.native_hot import STATEMENT_TIMES_ENV, STATEMENTS

VARIANTS = ("plain", "keyed", "grouped")
NAMED = 40  # characters a statement shares with the start of a file that make it that file's


def _bare(text: str) -> str:
    """``text`` without its ``--`` comments, its whitespace folded to single spaces."""
    lines = (line.split("--", 1)[0] for line in text.splitlines())
    return re.sub(r"\s+", " ", " ".join(lines)).strip()


def _shared(a: str, b: str) -> int:
    """How many characters ``a`` and ``b`` start with alike."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _label(text: str, files: dict[str, str]) -> str:
    """The name of the statement file ``text`` was made from: the one it shares the longest start
    with (a file's text begins with comments of its own, which a multi-row statement keeps before
    its repeated rows), if that is at least ``NAMED`` characters; else ``text`` itself, folded."""
    name, shared = max(((n, _shared(text, f)) for n, f in files.items()), key=lambda p: p[1])
    return name if shared >= NAMED else _bare(text)[:60]


def _jobs_inserted(data: Path) -> int:
    """Every job the store's files ever inserted (AUTOINCREMENT's counter of ``jobs``)."""
    total = 0
    for path in sorted(data.glob("*.sqlite3")):
        with sqlite3.connect(path) as conn:
            row = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'jobs'").fetchone()
        total += int(row[0]) if row else 0
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variants", default="plain,grouped", help="comma list of plain, keyed, grouped")
    add_load(parser)
    parser.add_argument("--groups", type=int, default=1000, help="groups of the grouped variant (default 1000)")
    parser.add_argument("--top", type=int, default=20, help="statements shown, costliest first (default 20)")
    args = parser.parse_args()
    variants = [v for v in args.variants.split(",") if v]
    if not variants or set(variants) - set(VARIANTS):
        parser.error(f"--variants: any of {', '.join(VARIANTS)}")
    if args.groups < 2:
        parser.error("--groups: at least 2")

    files = {name: sql.load(name) for name in STATEMENTS}
    per_job: dict[str, dict[str, float]] = {}  # variant -> statement -> µs per job
    rates: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="pinlater-statements-") as tmp:
        for variant in variants:
            directory = Path(tmp) / variant
            directory.mkdir()
            times_path = directory / "statement-times.json"
            base = current_build()
            build = replace(base, env={**base.env, STATEMENT_TIMES_ENV: str(times_path)})
            args.keyed = {"plain": 0, "keyed": 1, "grouped": args.groups}[variant]
            run = measure(build, "embedded", 1, args, directory)
            rates[variant] = Figures.of([run]).jobs_per_min
            if not times_path.exists():
                raise SystemExit(f"{variant}: the server wrote no statement times to {times_path}")
            jobs = _jobs_inserted(directory / f"embedded-{build.label}-1" / "data")
            if jobs == 0:
                raise SystemExit(f"{variant}: no job was inserted")
            costs: dict[str, float] = {}
            for entry in json.loads(times_path.read_text()):
                label = _label(entry["sql"], files)
                costs[label] = costs.get(label, 0.0) + entry["ns"] / 1000 / jobs
            per_job[variant] = costs
            print(f"  {variant}: {run.acked} acked in the interval, {jobs} jobs inserted", file=sys.stderr, flush=True)

    print(
        f"embedded writer, µs of statement time per job inserted (SQLite's profile events): batch {args.batch}, "
        f"{args.body_bytes}-byte bodies, {args.producers} producer(s) + {args.consumers} consumer(s), "
        f"{args.seconds:g} s measured"
    )
    statements = sorted(
        {s for costs in per_job.values() for s in costs},
        key=lambda s: -max(costs.get(s, 0.0) for costs in per_job.values()),
    )
    print(f"{'statement':<62}" + "".join(f"{v:>10}" for v in variants))
    for statement in statements[: args.top]:
        print(f"{statement[:61]:<62}" + "".join(f"{per_job[v].get(statement, 0.0):>10.2f}" for v in variants))
    print(f"{'all statements':<62}" + "".join(f"{sum(per_job[v].values()):>10.2f}" for v in variants))
    print(f"{'jobs/min (measured interval)':<62}" + "".join(f"{_jobs(rates[v]):>10}" for v in variants))


if __name__ == "__main__":
    main()
