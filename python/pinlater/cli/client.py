"""``pinlater client``: the original's client tool (``PinLaterClientTool``), flags and modes kept.

Single-shot modes print their result in a grep-friendly form; the load modes (enqueue,
dequeue) live in ``pinlater.bench.issuer``. Bad input ends the command with one line on stderr
and exit 2; an error from the server with one line ``pinlater client: CODE: message`` and exit 1.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import sys
from datetime import UTC, datetime
from typing import Any

from pinlater.cli.argtypes import non_negative_float, positive_float
from pinlater.client import SCAN_START, AsyncPinLaterClient, JobInfo, JobState, PinLaterClient, ScheduleInfo
from pinlater.errors import PinLaterError

PROG = "pinlater client"
LOAD_MODES = ("enqueue", "dequeue")
MODES = (
    "create",
    "enqueue",
    "dequeue",
    "check_dequeue",
    "lookup",
    "get_job_count",
    "get_queue_names",
    "scan",
    "retry_failed",
    "delete_jobs",
    "delete_queue",
    "cancel",
    "list_schedules",
    "upsert_schedule",
    "delete_schedule",
)
#: Modes that work on one queue and so need --queue.
QUEUE_MODES = frozenset(MODES) - {"lookup", "get_queue_names"}

EPILOG = """\
modes:
  create            create --queue (idempotent)
  enqueue           load: --num_queries enqueues of --batch_size jobs at --priority; every job
                    carries --dedup-key, --dedup-window-ms, --group-key and an expiry (--expire-at,
                    or --expire-in counted from each enqueue) when given (the summary counts the
                    jobs deduplicated and names the jobs that answered for the key)
  dequeue           load: --num_queries dequeues of up to --batch_size jobs, each acked as succeeded
                    with a chance of --dequeue_success_percent and as failed otherwise
  check_dequeue     a dry-run dequeue of one job: are jobs available? (claims nothing)
  lookup            the jobs named by --job_descriptor (repeat it), one block each
  get_job_count     the number of jobs in --job_state (--priority, --count_future_jobs, --body_regex)
  get_queue_names   the queues, one per line
  scan              up to --limit jobs in --job_state, one block each, newest first; then
                    "continuation: TOKEN" when more are left (pass --continuation TOKEN for the
                    next page); --all follows the pages to the end, --limit jobs per call
  retry_failed      FAILED jobs of --priority back to PENDING with --attempts; prints how many
  delete_jobs       delete up to --limit jobs in --job_state (required) of --priority; prints how many
  delete_queue      delete --queue and its jobs (needs --password)
  cancel            cancel the jobs named by --job_descriptor (repeat it); prints how many changed
                    (PENDING ones end FAILED "cancelled"; running ones get no further attempt)
  list_schedules    the schedules of --queue, one block each
  upsert_schedule   create or replace schedule --schedule_name: a job of --body (--priority,
                    --attempts, --custom_status, --group-key) enqueued at each tick of --cron
                    (five fields, UTC) or every --interval_ms; --paused keeps it from firing
  delete_schedule   remove schedule --schedule_name (the jobs it enqueued stay)

examples:
  pinlater client --host 127.0.0.1 --port 9010 --mode create --queue emails
  pinlater client --port 9010 --mode enqueue --queue emails --concurrency 8 --batch_size 100 --num_queries 1000
  pinlater client --port 9010 --mode dequeue --queue emails --concurrency 8 --batch_size 50 --num_queries -1
  pinlater client --port 9010 --mode enqueue --queue emails --body welcome:42 --dedup-key welcome:42
  pinlater client --port 9010 --mode get_job_count --queue emails --job_state SUCCEEDED
  pinlater client --port 9010 --mode enqueue --queue emails --body promo --expire-in 3600
  pinlater client --port 9010 --mode scan --queue emails --job_state FAILED --all
  pinlater client --port 9010 --mode upsert_schedule --queue emails --schedule_name digest --cron "0 8 * * *" --body hi
"""


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "client",
        help="talk to a server: the original's client tool (single calls and load generation)",
        description="Issue PinLater calls to one server, once or as a load generator "
        "(the load modes print request rate, jobs/s and latency about once a second, and a summary).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--host", default="127.0.0.1", help="server hostname (default 127.0.0.1)")
    p.add_argument("--port", type=_port, default=9010, help="server Thrift port (default 9010)")
    p.add_argument("--mode", required=True, choices=MODES, metavar="MODE", help="what to do: see modes below")
    p.add_argument("--queue", type=text_flag, help="queue name")
    p.add_argument("--concurrency", type=_positive, default=1, help="requests in flight at once (default 1)")
    p.add_argument("--batch_size", "--batch-size", type=_positive, default=1, help="jobs per query (default 1)")
    p.add_argument(
        "--num_queries", "--num-queries", type=_num_queries, default=1, help="queries to issue, -1 for unlimited"
    )
    p.add_argument(
        "--dequeue_success_percent",
        "--dequeue-success-percent",
        type=_percent,
        default=100,
        help="share of dequeued jobs acked as succeeded, the rest failed (default 100)",
    )
    p.add_argument(
        "--job_descriptor",
        "--job-descriptor",
        action="append",
        default=[],
        type=text_flag,
        help="job to look up (repeatable)",
    )
    p.add_argument(
        "--priority", type=_priority, help="job priority, 1 is the highest (default 1 for writes, all for reads)"
    )
    p.add_argument(
        "--job_state",
        "--job-state",
        type=_job_state,
        help="PENDING, IN_PROGRESS, SUCCEEDED, FAILED or 0..3 (default PENDING)",
    )
    p.add_argument(
        "--count_future_jobs",
        "--count-future-jobs",
        type=_bool,
        nargs="?",
        const=True,
        default=False,
        metavar="BOOL",
        help="count (or scan) only jobs whose run-after time has not come yet (true/false; alone: true)",
    )
    p.add_argument("--password", type=text_flag, help="the admin password (delete_queue)")
    p.add_argument("--limit", type=_positive, help="most jobs for scan (100), retry_failed and delete_jobs (1000)")
    p.add_argument(
        "--body_regex", "--body-regex", type=text_flag, help="only jobs whose body matches (count, scan, delete_jobs)"
    )
    p.add_argument(
        "--attempts", type=_positive, help="attempts allowed: enqueued jobs (default 2), retry_failed (default 1)"
    )
    body = p.add_mutually_exclusive_group()
    body.add_argument(
        "--body", type=text_flag, help="body of every enqueued job (default task_<random>, as the original)"
    )
    body.add_argument("--body_size", "--body-size", type=_body_size, help="enqueued bodies of this many bytes")
    p.add_argument(
        "--dedup_key",
        "--dedup-key",
        type=_dedup_key,
        help="enqueue: the dedup key of every job; while a job of the queue with it is PENDING or "
        "IN_PROGRESS, no other is created",
    )
    p.add_argument(
        "--dedup_window_ms",
        "--dedup-window-ms",
        type=_non_negative_i64,
        default=0,
        help="enqueue, with --dedup-key: keep the key held this many ms after the holder's enqueue, "
        "even once it finished (default 0)",
    )
    p.add_argument(
        "--group_key",
        "--group-key",
        type=_group_key,
        help="enqueue: the group key of every job (ordered groups: handed out one after another, in order)",
    )
    expiry = p.add_mutually_exclusive_group()
    expiry.add_argument(
        "--expire_at",
        "--expire-at",
        type=_non_negative_i64,
        metavar="MS",
        help="enqueue: every job expires at this time (ms since the epoch) if still PENDING",
    )
    expiry.add_argument(
        "--expire_in",
        "--expire-in",
        type=_expire_in,
        metavar="SECONDS",
        help="enqueue: every job expires this many seconds after its enqueue if still PENDING",
    )
    p.add_argument(
        "--continuation",
        type=text_flag,
        help="scan: resume after the page that answered this continuation (default: the start)",
    )
    p.add_argument("--all", action="store_true", help="scan: follow continuations to the end (--limit per call)")
    p.add_argument(
        "--schedule_name", "--schedule-name", type=text_flag, help="the schedule (upsert_schedule, delete_schedule)"
    )
    p.add_argument("--cron", type=text_flag, help='upsert_schedule: five fields, UTC (e.g. "*/5 * * * *")')
    p.add_argument(
        "--interval_ms", "--interval-ms", type=_positive_i64, help="upsert_schedule: a job every this many ms (>= 1000)"
    )
    p.add_argument(
        "--custom_status",
        "--custom-status",
        default="",
        type=text_flag,
        help="upsert_schedule: each job's custom status",
    )
    p.add_argument(
        "--paused",
        type=_bool,
        nargs="?",
        const=True,
        default=False,
        metavar="BOOL",
        help="upsert_schedule: keep the schedule but enqueue nothing (true/false; alone: true)",
    )
    p.add_argument("--timeout", type=positive_float, default=30.0, help="seconds to wait for a reply (default 30)")
    p.add_argument(
        "--source",
        type=text_flag,
        default=f"pinlaterclienttool:{socket.gethostname()}",
        help="the RequestContext source",
    )
    p.set_defaults(run=run, parser=p)


# -- argument types: a ValueError/ArgumentTypeError becomes argparse's one-line usage error ----


def _int_in(text: str, low: int, high: int | None, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < low or (high is not None and value > high):
        bounds = f"{low}..{high}" if high is not None else f">= {low}"
        raise argparse.ArgumentTypeError(f"{what} must be {bounds}, not {value}")
    return value


#: The wire's integers: a count or limit is an i32, a time or span in ms an i64.
I32_MAX, I64_MAX = 2**31 - 1, 2**63 - 1
#: Most bytes --body_size makes a body (past any frame a server takes: MAX_FRAME_BYTES).
MAX_BODY_SIZE = 1 << 30
#: Longest --expire_in, in seconds: a thousand years.
MAX_EXPIRE_IN = 1000 * 365.25 * 86400


def text_flag(text: str) -> str:
    """A flag's text as the wire carries it, UTF-8: bytes the locale could not decode reach
    ``sys.argv`` as lone surrogates, which no request can hold."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        shown = text.encode("utf-8", "backslashreplace").decode("utf-8")
        raise argparse.ArgumentTypeError(f"'{shown}' is not UTF-8 text") from None
    return text


def _port(text: str) -> int:
    return _int_in(text, 1, 65535, "a port")


def _positive(text: str) -> int:
    return _int_in(text, 1, I32_MAX, "it")


def _positive_i64(text: str) -> int:
    return _int_in(text, 1, I64_MAX, "it")


def _non_negative_i64(text: str) -> int:
    return _int_in(text, 0, I64_MAX, "it")


def _body_size(text: str) -> int:
    return _int_in(text, 0, MAX_BODY_SIZE, "--body_size")


def _percent(text: str) -> int:
    return _int_in(text, 0, 100, "a percentage")


def _priority(text: str) -> int:
    return _int_in(text, 1, 127, "a priority")


def _num_queries(text: str) -> int:
    return _int_in(text, -1, None, "--num_queries")


def _expire_in(text: str) -> float:
    value = non_negative_float(text)
    if value > MAX_EXPIRE_IN:  # (now + it in ms must stay an i64)
        raise argparse.ArgumentTypeError(f"--expire_in must be at most {MAX_EXPIRE_IN:g} seconds, not {text}")
    return value


def _dedup_key(text: str) -> str:
    if not text_flag(text):
        raise argparse.ArgumentTypeError("a dedup key must not be empty")
    return text


def _group_key(text: str) -> str:
    if not text_flag(text):
        raise argparse.ArgumentTypeError("a group key must not be empty")
    return text


def _job_state(text: str) -> JobState:
    if text.strip().lstrip("-").isdigit():
        try:
            return JobState(int(text))
        except ValueError:
            pass
    else:
        try:
            return JobState[text.strip().upper()]
        except KeyError:
            pass
    names = ", ".join(f"{s.name} ({s.value})" for s in JobState)
    raise argparse.ArgumentTypeError(f"{text!r} is not a job state: {names}")


def _bool(text: str) -> bool:
    value = text.strip().lower()
    if value in ("true", "1", "yes", "on"):
        return True
    if value in ("false", "0", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"{text!r} is not true or false")


# -- running ----------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    parser: argparse.ArgumentParser = args.parser
    problem = _check(args)
    if problem:
        parser.error(problem)
    try:
        if args.mode in LOAD_MODES:
            return asyncio.run(_run_load(args))
        with PinLaterClient(f"{args.host}:{args.port}", source=args.source, timeout=args.timeout, retries=0) as client:
            return MODE_FUNCTIONS[args.mode](client, args)
    except PinLaterError as exc:
        print(f"{PROG}: {_one_line(str(exc))}", file=sys.stderr)
        return 1


def _check(args: argparse.Namespace) -> str:
    """The first problem with the flags for this mode, or empty."""
    if args.mode in QUEUE_MODES and not args.queue:
        return f"--mode {args.mode} needs --queue"
    if args.mode in ("lookup", "cancel") and not args.job_descriptor:
        return f"--mode {args.mode} needs --job_descriptor"
    if args.mode in ("upsert_schedule", "delete_schedule") and not args.schedule_name:
        return f"--mode {args.mode} needs --schedule_name"
    if args.mode == "upsert_schedule":
        if (args.cron is None) == (args.interval_ms is None):
            return "--mode upsert_schedule needs one of --cron and --interval_ms"
        if args.body is None:
            return "--mode upsert_schedule needs --body"
    if args.mode == "delete_queue" and args.password is None:
        return "--mode delete_queue needs --password"
    if args.mode == "delete_jobs" and args.job_state is None:
        return "--mode delete_jobs needs --job_state (deleted jobs are gone for good)"
    for flag, given, modes in (
        ("--dedup-key", args.dedup_key is not None, ("enqueue",)),
        ("--dedup-window-ms", bool(args.dedup_window_ms), ("enqueue",)),
        ("--group-key", args.group_key is not None, ("enqueue", "upsert_schedule")),
        ("--expire-at", args.expire_at is not None, ("enqueue",)),
        ("--expire-in", args.expire_in is not None, ("enqueue",)),
        ("--continuation", args.continuation is not None, ("scan",)),
        ("--all", args.all, ("scan",)),
        ("--schedule_name", args.schedule_name is not None, ("upsert_schedule", "delete_schedule")),
        ("--cron", args.cron is not None, ("upsert_schedule",)),
        ("--interval_ms", args.interval_ms is not None, ("upsert_schedule",)),
        ("--custom_status", bool(args.custom_status), ("upsert_schedule",)),
        ("--paused", args.paused, ("upsert_schedule",)),
    ):
        if given and args.mode not in modes:
            return f"{flag} is for --mode {' and '.join(modes)}"
    if args.dedup_window_ms and args.dedup_key is None:
        return "--dedup-window-ms needs --dedup-key"
    return ""


def _one_line(text: str) -> str:
    return " ".join(text.split())


async def _run_load(args: argparse.Namespace) -> int:
    from pinlater.bench.issuer import Issuer, LoadOptions

    options = LoadOptions(
        mode=args.mode,
        queue=args.queue,
        concurrency=args.concurrency,
        batch_size=args.batch_size,
        num_queries=args.num_queries,
        dequeue_success_percent=args.dequeue_success_percent,
        priority=args.priority or 1,
        attempts=args.attempts or 2,
        body=args.body.encode() if args.body is not None else None,
        body_size=args.body_size,
        dedup_key=args.dedup_key,
        dedup_window_ms=args.dedup_window_ms,
        group_key=args.group_key,
        expire_at_ms=args.expire_at,
        expire_in_ms=None if args.expire_in is None else round(args.expire_in * 1000),
    )
    client = AsyncPinLaterClient(
        f"{args.host}:{args.port}",
        source=args.source,
        timeout=args.timeout,
        max_connections=args.concurrency,
        retries=0,
    )
    try:
        issuer = Issuer(client, options, sys.stdout)
        total = await issuer.run()
    finally:
        client.close()
    if issuer.fatal is not None:
        raise issuer.fatal
    issuer.print_summary()
    return 1 if total.errors else 0


# -- single-shot modes ------------------------------------------------------------------------


def _create(client: PinLaterClient, args: argparse.Namespace) -> int:
    client.create_queue(args.queue)
    print(f"created queue {args.queue}")
    return 0


def _delete_queue(client: PinLaterClient, args: argparse.Namespace) -> int:
    client.delete_queue(args.queue, args.password)
    print(f"deleted queue {args.queue}")
    return 0


def _get_queue_names(client: PinLaterClient, args: argparse.Namespace) -> int:
    for name in sorted(client.queue_names()):
        print(name)
    return 0


def _check_dequeue(client: PinLaterClient, args: argparse.Namespace) -> int:
    jobs = client.dequeue(args.queue, 1, dry_run=True)
    print(f"jobs available for dequeue: {'true' if jobs else 'false'}")
    return 0


def _get_job_count(client: PinLaterClient, args: argparse.Namespace) -> int:
    state = args.job_state if args.job_state is not None else JobState.PENDING
    count = client.count(
        args.queue, state, args.priority, count_future=args.count_future_jobs, body_regex=args.body_regex
    )
    print(count)
    return 0


def _lookup(client: PinLaterClient, args: argparse.Namespace) -> int:
    found = client.lookup(args.job_descriptor, include_body=True)
    blocks = [format_job(found[d]) for d in args.job_descriptor if d in found]
    print("\n\n".join(blocks))
    missing = [d for d in args.job_descriptor if d not in found]
    if missing:
        print(f"{PROG}: job not found: {', '.join(missing)}", file=sys.stderr)
        return 1
    return 0


def _scan(client: PinLaterClient, args: argparse.Namespace) -> int:
    state = args.job_state if args.job_state is not None else JobState.PENDING
    continuation = args.continuation if args.continuation is not None else SCAN_START
    if args.all:
        jobs = client.scan_all(
            args.queue,
            state,
            args.priority,
            scan_future=args.count_future_jobs,
            page_size=args.limit or 100,
            body_regex=args.body_regex,
            continuation=continuation,
        )
        n = 0
        for job in jobs:
            print(format_job(job), end="\n\n")
            n += 1
        print(f"jobs: {n}")
        return 0
    result = client.scan(
        args.queue,
        state,
        args.priority,
        scan_future=args.count_future_jobs,
        limit=args.limit or 100,
        body_regex=args.body_regex,
        continuation=continuation,
    )
    for job in result.jobs:
        print(format_job(job), end="\n\n")
    if not result.done:
        print(f"continuation: {result.continuation}")
    print(f"jobs: {len(result.jobs)}")
    return 0


def _retry_failed(client: PinLaterClient, args: argparse.Namespace) -> int:
    print(client.retry_failed(args.queue, args.priority or 1, attempts=args.attempts or 1, limit=args.limit or 1000))
    return 0


def _delete_jobs(client: PinLaterClient, args: argparse.Namespace) -> int:
    deleted = client.delete_jobs(
        args.queue, args.job_state, args.priority or 1, body_regex=args.body_regex, limit=args.limit or 1000
    )
    print(deleted)
    return 0


def _cancel(client: PinLaterClient, args: argparse.Namespace) -> int:
    print(client.cancel(args.queue, args.job_descriptor))
    return 0


def _list_schedules(client: PinLaterClient, args: argparse.Namespace) -> int:
    found = client.list_schedules(args.queue)
    for schedule in found:
        print(format_schedule(schedule), end="\n\n")
    print(f"schedules: {len(found)}")
    return 0


def _upsert_schedule(client: PinLaterClient, args: argparse.Namespace) -> int:
    client.upsert_schedule(
        args.queue,
        args.schedule_name,
        body=args.body,
        cron=args.cron,
        interval_ms=args.interval_ms,
        priority=args.priority or 1,
        attempts=args.attempts or 2,
        custom_status=args.custom_status,
        group_key=args.group_key,
        paused=args.paused,
    )
    print(f"set schedule {args.schedule_name} of {args.queue}")
    return 0


def _delete_schedule(client: PinLaterClient, args: argparse.Namespace) -> int:
    client.delete_schedule(args.queue, args.schedule_name)
    print(f"deleted schedule {args.schedule_name} of {args.queue}")
    return 0


MODE_FUNCTIONS = {
    "create": _create,
    "delete_queue": _delete_queue,
    "get_queue_names": _get_queue_names,
    "check_dequeue": _check_dequeue,
    "get_job_count": _get_job_count,
    "lookup": _lookup,
    "scan": _scan,
    "retry_failed": _retry_failed,
    "delete_jobs": _delete_jobs,
    "cancel": _cancel,
    "list_schedules": _list_schedules,
    "upsert_schedule": _upsert_schedule,
    "delete_schedule": _delete_schedule,
}


def _timestamp(millis: int | None) -> str:
    if millis is None:
        return "-"
    when = datetime.fromtimestamp(millis / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return f"{when} ({millis})"


def format_job(job: JobInfo) -> str:
    """One job as ``key: value`` lines (one block per job, blocks separated by a blank line)."""
    lines = [
        f"job_descriptor: {job.descriptor}",
        f"state: {job.state.name}",
        f"attempts_allowed: {job.attempts_allowed}",
        f"attempts_remaining: {job.attempts_remaining}",
        f"custom_status: {_one_line(job.custom_status)}",
        f"created_at: {_timestamp(job.created_at_ms)}",
        f"run_after: {_timestamp(job.run_after_ms)}",
        f"updated_at: {_timestamp(job.updated_at_ms)}",
    ]
    if job.claim_descriptor:
        lines.append(f"claim_descriptor: {job.claim_descriptor}")
    if job.dedup_key is not None:
        lines.append(f"dedup_key: {_key_text(job.dedup_key)}")
    if job.group_key is not None:
        lines.append(f"group_key: {_key_text(job.group_key)}")
    if job.expire_at_ms is not None:
        lines.append(f"expire_at: {_timestamp(job.expire_at_ms)}")
    if job.body is not None:
        lines.append(f"body: {_body_text(job.body)}")
    return "\n".join(lines)


def format_schedule(schedule: ScheduleInfo) -> str:
    """One schedule as ``key: value`` lines, as ``format_job``."""
    lines = [f"schedule: {_key_text(schedule.name)}"]
    if schedule.cron is not None:
        lines.append(f"cron: {schedule.cron}")
    if schedule.interval_ms is not None:
        lines.append(f"interval_ms: {schedule.interval_ms}")
    lines += [
        f"paused: {'true' if schedule.paused else 'false'}",
        f"next_run: {_timestamp(schedule.next_run_ms)}",
        f"priority: {schedule.priority}",
        f"attempts_allowed: {schedule.attempts}",
        f"custom_status: {_one_line(schedule.custom_status)}",
    ]
    if schedule.group_key is not None:
        lines.append(f"group_key: {_key_text(schedule.group_key)}")
    lines.append(f"body: {_body_text(schedule.body)}")
    return "\n".join(lines)


def _key_text(key: str) -> str:
    """A key on one line: control characters (a newline would split the block) escaped."""
    return key.encode("unicode_escape").decode() if not key.isprintable() else key


def _body_text(body: bytes, limit: int = 200) -> str:
    try:
        text = body.decode()
        shown = text[:limit].encode("unicode_escape").decode()
    except UnicodeDecodeError:
        shown = repr(body[:limit])
    return shown + (f"... ({len(body)} bytes)" if len(body) > limit else "")
