"""``pinlater migrate-layout``: move one Redis shard's queues to the compact layout or back.

Stop the shard's servers, run this, change the shard's ``layout`` in the config, start them
again (README: "Moving a Redis shard to the compact layout"). An interrupted run is continued by
running the same command again. Progress goes to stdout, one line per queue (and one every few
seconds while a big queue moves), then a summary. A failure ends the command with one line on
stderr: exit 2 for a bad flag or config, 130 for Ctrl-C, 1 for anything else (a closed stdout
included).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from pinlater.backends.base import JobState
from pinlater.backends.redis.config import LAYOUTS, parse_redis_config
from pinlater.backends.redis.layouts import layout_key
from pinlater.backends.redis.migrate import (
    BATCH_BYTES,
    BATCH_JOBS,
    MAX_BATCH,
    Layout,
    MigrationError,
    Moved,
    QueueProgress,
    migrate_shard,
)
from pinlater.config_files import read_config_text
from pinlater.errors import ConfigError

PROG = "pinlater migrate-layout"

SOCKET_TIMEOUT_SECONDS = 60.0
"""How long one call may take: a batch takes milliseconds, a SCAN step less; this only bounds
a Redis that stopped answering. The client does not retry (redis-py's default would retry a
timed-out call ten times with backoff), so this is how long the command waits before failing."""

PROGRESS_EVERY_SECONDS = 5.0
"""A line for the queue being moved at most this often, besides the line when it is finished."""

EPILOG = """\
examples:
  pinlater migrate-layout --backend-config redis.json --shard 1 --to compact
  pinlater migrate-layout --backend-config redis.json --shard 1 --to original   back again

Stop the shard's servers first: the command refuses to start while connections named
pinlater-shard-NAME are open on that Redis (--force skips that check), or while another run
of the shard holds pll-lock:{NAME}. Interrupted, it continues when run again; the shard's
marker pll:{NAME} says "migrating" until it has finished.
"""


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "migrate-layout",
        help="move a Redis shard's queues to the compact layout, or back",
        description="Move every queue of one Redis shard between the original key layout and the compact "
        "one, a batch at a time; each batch is atomic, so an interrupted run loses and duplicates nothing "
        "and is continued by running the command again.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--backend-config", type=Path, metavar="FILE", required=True, help="the Redis JSON shard config")
    p.add_argument("--shard", metavar="NAME", required=True, help="the shard to move (its name in the config)")
    p.add_argument("--to", choices=LAYOUTS, required=True, help="the layout to move the shard to")
    p.add_argument(
        "--batch",
        type=_batch,
        default=BATCH_JOBS,
        metavar="N",
        help=f"jobs per call, 1 to {MAX_BATCH} (default {BATCH_JOBS}); a call stops early once its bodies "
        f"reach {BATCH_BYTES >> 20} MiB",
    )
    p.add_argument(
        "--force", action="store_true", help="move even while servers of the shard are connected to its Redis"
    )
    p.set_defaults(run=run)


def _batch(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 1, not {text!r}")
    if value > MAX_BATCH:
        raise argparse.ArgumentTypeError(
            f"must be at most {MAX_BATCH} (a call of more jobs holds up Redis too long), not {text!r}"
        )
    return value


def run(args: argparse.Namespace) -> int:
    """The command; every way it ends but success is one line on stderr and a non-zero code."""
    try:
        return _run(args)
    except KeyboardInterrupt:
        _error(
            f"shard {args.shard}: interrupted; nothing is lost or duplicated: run the same command again "
            "to resume the move"
        )
        return 130
    except BrokenPipeError:
        # Nobody reads our output any more: stop, and keep Python from failing again at exit
        # when it flushes stdout.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        _error(f"shard {args.shard}: stopped: standard output was closed; run the command again to resume")
        return 1


def _error(line: str) -> None:
    try:
        print(f"{PROG}: {line}", file=sys.stderr, flush=True)
    except OSError:
        pass


def _run(args: argparse.Namespace) -> int:
    try:
        text = read_config_text(args.backend_config, "backend config")
        shards = parse_redis_config(text, str(args.backend_config))
    except ConfigError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    config = shards.get(args.shard)
    if config is None:
        print(f"{PROG}: no shard {args.shard!r} in {args.backend_config} ({', '.join(shards)})", file=sys.stderr)
        return 2
    if config.is_cluster:
        print(
            f"{PROG}: shard {args.shard} is a Redis Cluster, which can only hold the compact layout: "
            "there is nothing to move",
            file=sys.stderr,
        )
        return 2
    target: Layout = args.to
    client = redis.Redis(
        config.master.host,
        config.master.port,
        socket_timeout=SOCKET_TIMEOUT_SECONDS,
        socket_connect_timeout=SOCKET_TIMEOUT_SECONDS,
        retry=Retry(NoBackoff(), 0),
        client_name=f"pinlater-migrate-{args.shard}",
    )
    print(f"shard {args.shard} on {config.master}: moving to the {target} layout, {args.batch} jobs per call")
    try:
        with _Interrupt() as interrupted:
            report = _Report(interrupted)
            summary = migrate_shard(client, args.shard, target, batch=args.batch, force=args.force, on_progress=report)
    except (MigrationError, redis.RedisError) as exc:
        print(f"{PROG}: shard {args.shard} on {config.master}: {_one_line(exc)}", file=sys.stderr)
        return 1
    finally:
        client.close()
    moved = summary.moved
    print(
        f"done: shard {args.shard} is in the {target} layout ({layout_key(args.shard)} = {target}); "
        f"{len(summary.queues)} queue(s), {moved.jobs} job(s) moved: {_states(moved)}"
    )
    extras = [
        (moved.evicted, "evicted remains (members without their job) dropped"),
        (moved.orphans, "orphan records (in no set) dropped"),
        (moved.unheld, "held jobs without an expiry or holder put back in PENDING"),
        (summary.counters, "counters of deleted queues copied"),
        (summary.dedup_records, "dedup key records moved"),
        (summary.schedules, "schedules moved"),
        (moved.tombstones, "deleted jobs' tombstones dropped from ready lists"),
    ]
    for count, what in extras:
        if count:
            print(f"  {count} {what}")
    print(f"next: {_next_step(args.shard, config.layout, target, args.backend_config)}")
    return 0


def _next_step(shard: str, configured: str | None, target: Layout, path: Path) -> str:
    if configured is None:
        return f'start the servers (shard {shard} has no "layout" in {path}, so its record decides: {target})'
    if configured == target:
        return f'start the servers (shard {shard} already says "layout": "{target}" in {path})'
    return f'set "layout": "{target}" for shard {shard} in {path}, then start the servers'


class _Report:
    """The progress callback: a line per finished queue, and one every few seconds meanwhile.

    It is also where Ctrl-C stops the run: the first SIGINT only sets ``interrupted`` (see
    ``_Interrupt``), and the next call of this callback, between two Redis calls, raises
    ``KeyboardInterrupt``. A KeyboardInterrupt raised anywhere else could land inside the Redis
    client's C code (hiredis's command packing crashed the process with SIGSEGV under load)."""

    def __init__(self, interrupted: threading.Event) -> None:
        self._last = time.monotonic()
        self._interrupted = interrupted

    def __call__(self, progress: QueueProgress) -> None:
        if self._interrupted.is_set():
            raise KeyboardInterrupt
        now = time.monotonic()
        if progress.done:
            print(
                f"queue {progress.queue}: {progress.moved.jobs} job(s) moved in {progress.batches} call(s): "
                f"{_states(progress.moved)}",
                flush=True,
            )
        elif now - self._last >= PROGRESS_EVERY_SECONDS:
            print(f"queue {progress.queue}: {progress.moved.jobs} job(s) moved so far", flush=True)
        else:
            return
        self._last = now


class _Interrupt:
    """While in effect (in the main thread), the first SIGINT sets ``interrupted`` and puts back
    Python's own handler, so a second Ctrl-C interrupts at once (as before)."""

    def __init__(self) -> None:
        self.interrupted = threading.Event()

    def _on_sigint(self, signum: int, frame: FrameType | None) -> None:
        self.interrupted.set()
        signal.signal(signal.SIGINT, signal.default_int_handler)

    def __enter__(self) -> threading.Event:
        # (only the main thread may set handlers: run from another, Ctrl-C is left as it is)
        self._installed = threading.current_thread() is threading.main_thread()
        if self._installed:
            self._previous = signal.signal(signal.SIGINT, self._on_sigint)
        return self.interrupted

    def __exit__(self, *exc: object) -> None:
        if self._installed:
            signal.signal(signal.SIGINT, self._previous)


def _states(moved: Moved) -> str:
    parts = [f"{state.name} {count}" for state, count in moved.by_state().items()]
    if moved.held:
        parts[JobState.PENDING] += f" ({moved.held} held)"
    return ", ".join(parts)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__
