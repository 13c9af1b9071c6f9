"""``pinlater worker module:handler --queue q``: run a handler function as a PinLater worker.

The handler is ``handler(ctx)`` (plain or ``async def``) taking a ``pinlater.worker.JobContext``.
The current directory is importable, as with ``python -m``. SIGTERM or Ctrl-C stops it
gracefully (finish or release jobs in hand, send every ack, exit 0); a second one hurries.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from typing import Any

from pinlater.cli.client import text_flag
from pinlater.worker.retry import POLICY_NAMES

EPILOG = """\
examples:
  pinlater worker tasks:send_email --queue emails
  pinlater worker tasks:resize --queue images --concurrency 32 --retry exponential --retry-delay 2
  pinlater worker tasks:handle --queue a --queue b --server-set /etc/pinlater/serverset
"""


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "worker",
        help="run a handler function for the jobs of one or more queues",
        description="Dequeue jobs in batches and run MODULE:HANDLER on each, acking the outcome.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("handler", metavar="MODULE:HANDLER", help="the handler, e.g. mypkg.tasks:send_email")
    p.add_argument(
        "--queue", action="append", required=True, type=text_flag, help="queue to work on (repeat for several)"
    )
    p.add_argument("--host", default="127.0.0.1", help="server address (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=9010, help="server Thrift port (default 9010)")
    p.add_argument("--servers", help="several servers: host:port,host:port (instead of --host/--port)")
    p.add_argument("--server-set", metavar="FILE", help="a ServerSet file, host:port per line, watched")
    p.add_argument("--source", type=text_flag, help="RequestContext source (default {program}:{hostname}[{pid}])")
    p.add_argument("--concurrency", type=_positive_int, default=8, help="jobs running at once per queue (default 8)")
    p.add_argument(
        "--prefetch",
        type=_non_negative_int,
        help="most jobs claimed ahead of free slots per queue, for quick handlers (default 256; 0: none)",
    )
    p.add_argument(
        "--prefetch-timeout",
        type=float,
        default=5.0,
        help="seconds after which a prefetched job not started yet goes back to PENDING (default 5)",
    )
    p.add_argument(
        "--batch-size", type=_positive_int, help="most jobs per dequeue (default: half of concurrency + prefetch)"
    )
    p.add_argument("--retry", choices=POLICY_NAMES, default="linear", help="retry policy (default linear)")
    p.add_argument(
        "--retry-delay", type=float, default=1.0, help="seconds: constant delay, linear step, exponential base"
    )
    p.add_argument("--max-retry-delay", type=float, default=300.0, help="cap on the retry delay (default 300)")
    p.add_argument("--grace-period", type=float, default=30.0, help="seconds to finish jobs on stop (default 30)")
    p.add_argument(
        "--claim-renewal",
        type=float,
        default=60.0,
        help="seconds between renewals of a running job's claim, well under the server's claim timeout"
        " (default 60; 0: never, as the original's workers)",
    )
    p.add_argument(
        "--handler-timeout",
        type=float,
        help="seconds a handler may run before its job fails (default 0: no limit)",
    )
    p.add_argument("--ack-interval", type=float, default=1.0, help="seconds between ack flushes (default 1)")
    p.add_argument("--max-poll-interval", type=float, default=1.0, help="longest wait on an empty queue (default 1)")
    p.add_argument(
        "--long-poll",
        type=float,
        default=1.0,
        help="seconds a pinlater server may hold an idle worker's dequeue until a job is ready (0: never; default 1)",
    )
    p.add_argument("--create-queue", action="store_true", help="create the queues first (idempotent)")
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"], help="log level")
    p.set_defaults(run=run)


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be at least 0, not {value}")
    return value


class HandlerError(Exception):
    """MODULE:HANDLER does not name a callable; the message says why, in one line."""


def load_handler(spec: str) -> Any:
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise HandlerError(f"{spec!r} is not MODULE:HANDLER (e.g. mypkg.tasks:send_email)")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise HandlerError(f"cannot import module {module_name!r}: {exc}") from None
    except Exception as exc:
        raise HandlerError(f"importing {module_name!r} failed: {type(exc).__name__}: {exc}") from None
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise HandlerError(f"module {module_name!r} has no attribute {attr!r}") from None
    if not callable(obj):
        raise HandlerError(f"{spec} is not callable")
    return obj


def run(args: argparse.Namespace) -> int:
    from pinlater.client import PinLaterClient, PinLaterError
    from pinlater.worker import Worker, by_name

    logging.basicConfig(
        level=getattr(logging, args.log_level),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        handler = load_handler(args.handler)
        retry = by_name(args.retry, args.retry_delay, args.max_retry_delay)
        servers = None if args.server_set else (args.servers or f"{args.host}:{args.port}")
        worker = Worker(
            servers,
            server_set=args.server_set,
            source=args.source,
            concurrency=args.concurrency,
            prefetch=args.prefetch,
            prefetch_timeout=args.prefetch_timeout,
            batch_size=args.batch_size,
            retry=retry,
            ack_interval=args.ack_interval,
            poll_interval=(min(0.05, args.max_poll_interval), args.max_poll_interval),
            long_poll=args.long_poll,
            grace_period=args.grace_period,
            claim_renewal=args.claim_renewal or None,
            handler_timeout=args.handler_timeout or None,
        )
        if args.create_queue:
            with PinLaterClient(worker.servers, source=worker.source) as client:
                for queue in args.queue:
                    client.create_queue(queue)
    except (HandlerError, ValueError, PinLaterError) as exc:
        print(f"pinlater worker: {exc}", file=sys.stderr)
        return 2
    for queue in args.queue:
        worker.register(queue, handler)
    where = args.server_set or ", ".join(f"{h}:{p}" for h, p in worker.servers.addresses())
    logging.getLogger("pinlater.worker").info(
        "pinlater worker: %s on queue(s) %s via %s (concurrency %d, prefetch up to %d, retry %s)",
        args.handler,
        ", ".join(args.queue),
        where,
        args.concurrency,
        next(iter(worker.registrations.values())).prefetch,
        args.retry,
    )
    return worker.run()
