"""``pinlater admin``: job control through a server's admin HTTP port (``pinlater.admin.Admin``).

Redrives (FAILED jobs back to PENDING at a set rate, in the background), schedules, and
cancelling jobs. Every subcommand takes ``--admin-url`` (or PINLATER_ADMIN_URL; default
http://127.0.0.1:9999) and, for changes, ``--password`` (or PINLATER_ADMIN_PASSWORD). Output is
one line per thing, ``key=value`` where it helps grep. An error from the server ends the command
with one line ``pinlater admin: STATUS: message`` on stderr and exit 1; bad usage exits 2.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import os
import sys
import time
from datetime import UTC, datetime
from typing import Any

from pinlater.admin import Admin, AdminError
from pinlater.cli.argtypes import positive_float
from pinlater.redrive import MAX_RATE, MIN_RATE, NOTE

PROG = "pinlater admin"
URL_ENV = "PINLATER_ADMIN_URL"
PASSWORD_ENV = "PINLATER_ADMIN_PASSWORD"
DEFAULT_URL = "http://127.0.0.1:9999"
#: ``redrive --wait`` shows progress this often (seconds).
PROGRESS_EVERY_S = 1.0
#: ``--wait`` ends with exit 0 when the redrive is done; 1 when it failed or was stopped
#: elsewhere; 130 when Ctrl-C stopped it.
EXIT_INTERRUPTED = 130

EPILOG = f"""\
A redrive runs inside the server that serves the admin port and does not survive a restart of
that server (it ends where it was, and nothing resumes it). With --wait, Ctrl-C stops the redrive.

examples:
  export {URL_ENV}=http://10.0.0.5:9999 {PASSWORD_ENV}=...
  pinlater admin redrive emails --rate 50 --limit 10000 --wait
  pinlater admin redrives
  pinlater admin redrive-stop 3f9c0a1b2c4d
  pinlater admin schedule-set emails digest --cron '0 8 * * *' --body 'send the digest'
  pinlater admin schedule-set emails ping --interval-ms 60000 --body ping --paused
  pinlater admin schedules emails
  pinlater admin cancel emails emails:s1:p1:42 emails:s1:p1:43
"""


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "admin",
        help="job control through the admin HTTP port: redrives, schedules, cancel",
        description="Job control through a server's admin HTTP port (the dashboard's API).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--admin-url", help=f"the server's admin port (default ${URL_ENV}, else {DEFAULT_URL})")
    common.add_argument("--password", help=f"the admin password, for changes (default ${PASSWORD_ENV})")
    common.add_argument("--timeout", type=positive_float, default=30.0, help="seconds to wait for a reply (30)")
    actions = p.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True

    def action(name: str, help_: str, run: Any) -> argparse.ArgumentParser:
        a: argparse.ArgumentParser = actions.add_parser(name, help=help_, description=help_, parents=[common])
        a.set_defaults(run=_runner(run), parser=a)
        return a

    a = action("redrive", "move FAILED jobs of a queue back to PENDING at a set rate, in the background", _redrive)
    a.add_argument("queue")
    a.add_argument("--rate", type=_rate, required=True, help="jobs per second (0.1 to 100000)")
    a.add_argument(
        "--limit", type=_positive, help="move at most this many (default: as many as are FAILED when it starts)"
    )
    a.add_argument("--priority", type=_positive, help="only this priority (default: every one)")
    a.add_argument("--attempts", type=_positive, default=1, help="attempts each moved job gets (default 1)")
    a.add_argument("--wait", action="store_true", help="show progress until it ends (Ctrl-C stops the redrive)")

    action("redrives", "list the redrives the server runs or ran", _redrives).add_argument(
        "--queue", help="only this queue's"
    )
    action("redrive-stop", "stop a running redrive", _redrive_stop).add_argument("id")

    action("schedules", "list a queue's schedules", _schedules).add_argument("queue")
    a = action("schedule-set", "create or replace a schedule (a job enqueued at each tick)", _schedule_set)
    a.add_argument("queue")
    a.add_argument("name")
    when = a.add_mutually_exclusive_group(required=True)
    when.add_argument("--cron", help="5 fields, UTC, like '*/5 * * * *'")
    when.add_argument("--interval-ms", type=_positive, help="every this many milliseconds (at least 1000)")
    body = a.add_mutually_exclusive_group(required=True)
    body.add_argument("--body", help="the job's body, as text (UTF-8)")
    body.add_argument("--body-base64", help="the job's body, base64 (for bytes)")
    a.add_argument("--priority", type=_positive, default=1, help="the job's priority (default 1)")
    a.add_argument("--attempts", type=_positive, default=2, help="the job's attempts (default 2)")
    a.add_argument("--custom-status", default="", help="the job's custom status")
    a.add_argument("--group-key", help="the job's group key (ordered groups)")
    a.add_argument("--paused", action="store_true", help="create it paused")
    for name, help_ in (
        ("schedule-pause", "pause a schedule (kept, with everything it holds)"),
        ("schedule-resume", "resume a paused schedule from its next tick"),
        ("schedule-delete", "delete a schedule"),
    ):
        a = action(name, help_, _schedule_change)
        a.add_argument("queue")
        a.add_argument("name")
    a = action("cancel", "cancel jobs by descriptor", _cancel)
    a.add_argument("queue")
    a.add_argument("descriptors", nargs="+", metavar="DESCRIPTOR")


def _runner(fn: Any) -> Any:
    def run(args: argparse.Namespace) -> int:
        url = args.admin_url or os.environ.get(URL_ENV) or DEFAULT_URL
        password = args.password if args.password is not None else os.environ.get(PASSWORD_ENV)
        try:
            admin = Admin.from_url(url, password=password, timeout=args.timeout)
            code: int = fn(admin, args)
        except AdminError as exc:
            print(f"{PROG}: {exc}", file=sys.stderr)
            return 1
        return code

    return run


# -- redrives -------------------------------------------------------------------------------------


def _redrive(admin: Admin, args: argparse.Namespace) -> int:
    r = admin.start_redrive(args.queue, args.rate, limit=args.limit, priority=args.priority, attempts=args.attempts)
    limit = "none" if r["limit"] is None else r["limit"]
    print(
        f"redrive {r['id']} started on queue {r['queue']}: {r['rate']:g} jobs/s, limit {limit}, "
        f"priority {r['priority'] or 'all'}, attempts {r['attempts']}; {r['failed_at_start']} FAILED"
    )
    print(f"note: {NOTE}")
    if not args.wait:
        print(f"follow it: {PROG} redrives; stop it: {PROG} redrive-stop {r['id']}")
        return 0
    try:
        while r["state"] == "running":
            time.sleep(PROGRESS_EVERY_S)
            r = admin.redrive(r["id"])
            print(_progress(r), flush=True)
    except KeyboardInterrupt:
        print(f"interrupted: stopping redrive {r['id']}", flush=True)
        r = admin.stop_redrive(r["id"])
        print(_ended(r))
        return EXIT_INTERRUPTED
    print(_ended(r))
    return 0 if r["state"] == "done" else 1


def _progress(r: dict[str, Any]) -> str:
    return (
        f"[{r['elapsed_s']:7.1f}s] {r['state']}: moved {r['moved']}"
        f" · FAILED {r['failed_at_start']} at start, {_or_dash(r['failed_now'])} now"
        f" · {r['actual_rate']:g} jobs/s (rate {r['rate']:g})"
    )


def _ended(r: dict[str, Any]) -> str:
    return f"redrive {r['id']} {r['state']} ({r['reason']}): moved {r['moved']} in {r['elapsed_s']:g} s"


def _redrives(admin: Admin, args: argparse.Namespace) -> int:
    found = admin.redrives(args.queue)
    if not found:
        print("no redrives on this server (they do not survive a restart of the server)")
    for r in found:
        print(
            f"{r['id']} queue={r['queue']} state={r['state']} moved={r['moved']}"
            f" failed_at_start={r['failed_at_start']} failed_now={_or_dash(r['failed_now'])}"
            f" rate={r['rate']:g} limit={_or_dash(r['limit'])} priority={r['priority'] or 'all'}"
            f" attempts={r['attempts']} started={_time(r['started_at_ms'])}"
            f" reason={_or_dash(r['reason'])}"
        )
    print(f"note: {NOTE}")
    return 0


def _redrive_stop(admin: Admin, args: argparse.Namespace) -> int:
    r = admin.stop_redrive(args.id)
    print(_ended(r))
    return 0


# -- schedules ------------------------------------------------------------------------------------


def _schedules(admin: Admin, args: argparse.Namespace) -> int:
    found = admin.schedules(args.queue)
    if not found:
        print(f"queue {args.queue} has no schedules")
    for s in found:
        print(_schedule_line(s))
    return 0


def _schedule_line(s: dict[str, Any]) -> str:
    when = f"cron={s['cron']!r}" if s["cron"] is not None else f"interval_ms={s['interval_ms']}"
    return (
        f"{s['name']} {when} paused={'yes' if s['paused'] else 'no'} next_run={_time(s['next_run_ms'])}"
        f" priority={s['priority']} attempts={s['attempts']} group_key={_or_dash(s['group_key'])}"
        f" custom_status={s['custom_status']!r} body={s['body_text']!r}"
    )


def _schedule_set(admin: Admin, args: argparse.Namespace) -> int:
    if args.body_base64 is not None:
        try:
            body: str | bytes = base64.b64decode(args.body_base64, validate=True)
        except (binascii.Error, ValueError):
            args.parser.error("--body-base64 is not valid base64")
    else:
        body = args.body
    s = admin.set_schedule(
        args.queue,
        args.name,
        body=body,
        cron=args.cron,
        interval_ms=args.interval_ms,
        priority=args.priority,
        attempts=args.attempts,
        custom_status=args.custom_status,
        group_key=args.group_key,
        paused=args.paused,
    )
    print(f"schedule set: {_schedule_line(s)}")
    return 0


def _schedule_change(admin: Admin, args: argparse.Namespace) -> int:
    if args.action == "schedule-delete":
        admin.delete_schedule(args.queue, args.name)
        print(f"schedule {args.name} of {args.queue} deleted")
        return 0
    change = admin.pause_schedule if args.action == "schedule-pause" else admin.resume_schedule
    s = change(args.queue, args.name)
    print(f"schedule {'paused' if s['paused'] else 'resumed'}: {_schedule_line(s)}")
    return 0


# -- cancel ---------------------------------------------------------------------------------------


def _cancel(admin: Admin, args: argparse.Namespace) -> int:
    changed = admin.cancel(args.queue, args.descriptors)
    print(f"cancelled {changed} of {len(args.descriptors)} jobs of {args.queue}")
    return 0


# -- formatting and argument types ---------------------------------------------------------------


def _time(ms: int | None) -> str:
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _or_dash(value: Any) -> str:
    return "-" if value is None else str(value)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"it must be at least 1, not {value}")
    return value


def _rate(text: str) -> float:
    value = positive_float(text)
    if not MIN_RATE <= value <= MAX_RATE:
        raise argparse.ArgumentTypeError(f"the rate must be {MIN_RATE:g} to {MAX_RATE:g} jobs per second, not {text}")
    return value
