"""``pinlater admin``: redrives, schedules and cancel against a real server's admin port; what it
prints, its exit codes, and what the store holds afterwards (checked with the independent,
Apache-Thrift-generated client)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest
from tests.conftest import ADMIN_PASSWORD, original_password_hash
from tests.support.pinlater_server import ServerProcess

from pinlater.redrive import NOTE

PENDING, IN_PROGRESS, SUCCEEDED, FAILED = 0, 1, 2, 3
STARTED = re.compile(r"^redrive ([0-9a-f]{12}) started on queue (\w+): ")
PROGRESS = re.compile(r"^\[\s*[\d.]+s\] running: moved \d+ · FAILED \d+ at start, [\d-]+ now · [\d.]+ jobs/s \(rate ")


@pytest.fixture
def plain_server(start_server: Callable[..., ServerProcess]) -> ServerProcess:
    """One server (no broker) for the tests where the broker changes nothing."""
    return start_server(properties={"ADMIN_PASSWORD_HASH": original_password_hash(ADMIN_PASSWORD)})


def admin_cmd(server: ServerProcess, *args: str, password: str | None = ADMIN_PASSWORD) -> list[str]:
    cmd = [sys.executable, "-m", "pinlater.cli", "admin", *args, "--admin-url", f"http://127.0.0.1:{server.admin_port}"]
    return cmd + (["--password", password] if password is not None else [])


def tool(server: ServerProcess, *args: str, password: str | None = ADMIN_PASSWORD) -> subprocess.CompletedProcess[str]:
    return subprocess.run(admin_cmd(server, *args, password=password), capture_output=True, text=True, timeout=60)


def ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, done
    return done.stdout


def one_line_error(done: subprocess.CompletedProcess[str], code: int) -> str:
    assert done.returncode == code, done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


class Store:
    """The store through the generated client."""

    def __init__(self, client: Any, t: ModuleType) -> None:
        self.c = client
        self.t = t
        self.ctx = t.RequestContext(source="tests:admin-tool")

    def create(self, queue: str) -> None:
        self.c.createQueue(self.ctx, queue)

    def enqueue(self, queue: str, n: int, attempts: int = 1) -> list[str]:
        jobs = [self.t.PinLaterJob(body=f"job-{i}".encode(), numAttemptsAllowed=attempts) for i in range(n)]
        return list(
            self.c.enqueueJobs(self.ctx, self.t.PinLaterEnqueueRequest(queueName=queue, jobs=jobs)).jobDescriptors
        )

    def make_failed(self, queue: str, n: int) -> list[str]:
        descriptors = self.enqueue(queue, n)
        got = self.c.dequeueJobs(self.ctx, self.t.PinLaterDequeueRequest(queueName=queue, limit=n))
        assert sorted(got.jobs) == sorted(descriptors)
        acks = [self.t.PinLaterJobAckInfo(jobDescriptor=d) for d in descriptors]
        self.c.ackDequeuedJobs(self.ctx, self.t.PinLaterJobAckRequest(queueName=queue, jobsFailed=acks))
        return descriptors

    def count(self, queue: str, state: int) -> int:
        return int(self.c.getJobCount(self.ctx, self.t.PinLaterGetJobCountRequest(queueName=queue, jobState=state)))

    def lookup(self, descriptor: str) -> Any:
        request = self.t.PinLaterLookupJobRequest(jobDescriptors=[descriptor], includeBody=False)
        return self.c.lookupJobs(self.ctx, request)[descriptor]


def store_for(server: ServerProcess, open_client: Callable[[ServerProcess], Any], ttypes: ModuleType) -> Store:
    return Store(open_client(server), ttypes)


# -- redrives -------------------------------------------------------------------------------------


def test_redrive_wait_prints_its_id_and_progress_until_done(
    plain_server: ServerProcess, open_client: Callable[[ServerProcess], Any], ttypes: ModuleType
) -> None:
    store = store_for(plain_server, open_client, ttypes)
    store.create("emails")
    store.make_failed("emails", 30)
    out = ok(tool(plain_server, "redrive", "emails", "--rate", "10", "--limit", "20", "--attempts", "3", "--wait"))
    lines = out.splitlines()
    m = STARTED.match(lines[0])
    assert m and m.group(2) == "emails", out
    assert "10 jobs/s, limit 20, priority all, attempts 3; 30 FAILED" in lines[0]
    assert lines[1] == f"note: {NOTE}"
    assert any(PROGRESS.match(line) for line in lines[2:-1]), out
    assert re.fullmatch(rf"redrive {m.group(1)} done \(limit reached\): moved 20 in [\d.]+ s", lines[-1]), out
    assert (store.count("emails", FAILED), store.count("emails", PENDING)) == (10, 20)

    listed = ok(tool(plain_server, "redrives", password=None)).splitlines()
    assert listed[0].startswith(f"{m.group(1)} queue=emails state=done moved=20 failed_at_start=30 failed_now=10 ")
    assert "reason=limit reached" in listed[0] and listed[-1] == f"note: {NOTE}"


def test_redrive_in_the_background_is_listed_and_stopped_by_id(
    plain_server: ServerProcess, open_client: Callable[[ServerProcess], Any], ttypes: ModuleType
) -> None:
    store = store_for(plain_server, open_client, ttypes)
    store.create("slow")
    store.make_failed("slow", 5)
    out = ok(tool(plain_server, "redrive", "slow", "--rate", "0.1"))
    m = STARTED.match(out.splitlines()[0])
    assert m, out
    redrive_id = m.group(1)
    assert f"stop it: pinlater admin redrive-stop {redrive_id}" in out and "does not survive a restart" in out
    assert f"{redrive_id} queue=slow state=running" in ok(tool(plain_server, "redrives", "--queue", "slow"))
    assert ok(tool(plain_server, "redrives", "--queue", "other")).startswith("no redrives on this server")

    refused = one_line_error(tool(plain_server, "redrive-stop", redrive_id, password="wrong"), 1)
    assert refused == "pinlater admin: 403: wrong admin password: nothing was done"
    stopped = ok(tool(plain_server, "redrive-stop", redrive_id))
    assert re.fullmatch(rf"redrive {redrive_id} stopped \(stopped by an admin\): moved [01] in [\d.]+ s\n", stopped)
    assert f"{redrive_id} queue=slow state=stopped" in ok(tool(plain_server, "redrives"))
    missing = one_line_error(tool(plain_server, "redrive-stop", "0123456789ab"), 1)
    assert missing.startswith("pinlater admin: 404: no redrive '0123456789ab'")


def test_ctrl_c_during_redrive_wait_stops_the_redrive(
    plain_server: ServerProcess, open_client: Callable[[ServerProcess], Any], ttypes: ModuleType
) -> None:
    store = store_for(plain_server, open_client, ttypes)
    store.create("interrupted")
    store.make_failed("interrupted", 5)
    proc = subprocess.Popen(
        admin_cmd(plain_server, "redrive", "interrupted", "--rate", "0.1", "--wait"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )
    try:
        assert proc.stdout is not None
        lines: list[str] = []
        while not any(PROGRESS.match(line) for line in lines):  # it is waiting: show one progress line
            line = proc.stdout.readline()
            assert line, f"the command ended early: {lines} {proc.stderr.read() if proc.stderr else ''}"
            lines.append(line.rstrip("\n"))
        proc.send_signal(signal.SIGINT)
        rest, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == 130, (lines, rest, err)
    redrive_id = STARTED.match(lines[0]).group(1)  # type: ignore[union-attr]
    assert f"interrupted: stopping redrive {redrive_id}" in rest
    assert f"redrive {redrive_id} stopped (stopped by an admin)" in rest
    assert f"{redrive_id} queue=interrupted state=stopped" in ok(tool(plain_server, "redrives"))


def test_bad_usage_exits_2_and_server_refusals_exit_1(plain_server: ServerProcess) -> None:
    usage = one_line_error(tool(plain_server, "redrive", "q", "--rate", "0"), 2)
    assert usage.startswith("pinlater admin redrive: argument --rate:")
    assert "0.1 to 100000" in one_line_error(tool(plain_server, "redrive", "q", "--rate", "200000"), 2)
    assert "one of the arguments --cron --interval-ms is required" in one_line_error(
        tool(plain_server, "schedule-set", "q", "n", "--body", "x"), 2
    )
    assert one_line_error(tool(plain_server, "redrive", "nowhere", "--rate", "1"), 1) == (
        "pinlater admin: 404: no queue 'nowhere'"
    )
    unreachable = subprocess.run(
        [sys.executable, "-m", "pinlater.cli", "admin", "redrives", "--admin-url", "http://127.0.0.1:1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert one_line_error(unreachable, 1).startswith("pinlater admin: cannot reach http://127.0.0.1:1")


def test_the_url_and_password_come_from_the_environment(
    plain_server: ServerProcess, open_client: Callable[[ServerProcess], Any], ttypes: ModuleType
) -> None:
    store = store_for(plain_server, open_client, ttypes)
    store.create("env_q")
    store.make_failed("env_q", 2)
    env = dict(
        os.environ,
        PINLATER_ADMIN_URL=f"http://127.0.0.1:{plain_server.admin_port}",
        PINLATER_ADMIN_PASSWORD=ADMIN_PASSWORD,
    )
    cmd = [sys.executable, "-m", "pinlater.cli", "admin", "redrive", "env_q", "--rate", "1000", "--wait"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done
    assert "done (moved the jobs FAILED at its start): moved 2" in done.stdout
    assert store.count("env_q", FAILED) == 0


# -- schedules ------------------------------------------------------------------------------------


def test_schedules_are_set_listed_paused_resumed_and_deleted(
    plain_server: ServerProcess, open_client: Callable[[ServerProcess], Any], ttypes: ModuleType
) -> None:
    store = store_for(plain_server, open_client, ttypes)
    store.create("reports")
    assert ok(tool(plain_server, "schedules", "reports", password=None)) == "queue reports has no schedules\n"
    out = ok(
        tool(
            plain_server,
            "schedule-set", "reports", "nightly", "--cron", "0 3 * * *", "--body", "build report",
            "--priority", "2", "--attempts", "3", "--group-key", "g1",
        )
    )  # fmt: skip
    assert out.startswith("schedule set: nightly cron='0 3 * * *' paused=no next_run=20")
    assert "priority=2 attempts=3 group_key=g1 custom_status='' body='build report'" in out
    ok(
        tool(
            plain_server,
            "schedule-set",
            "reports",
            "hourly",
            "--interval-ms",
            "3600000",
            "--body-base64",
            "AP8=",
            "--paused",
        )
    )
    listed = ok(tool(plain_server, "schedules", "reports", password=None)).splitlines()
    assert [line.split()[0] for line in listed] == ["hourly", "nightly"]
    assert "interval_ms=3600000 paused=yes" in listed[0] and "body='\\x00\ufffd'" in listed[0]

    assert "schedule paused: nightly cron='0 3 * * *' paused=yes" in ok(
        tool(plain_server, "schedule-pause", "reports", "nightly")
    )
    assert "schedule resumed: hourly interval_ms=3600000 paused=no" in ok(
        tool(plain_server, "schedule-resume", "reports", "hourly")
    )
    assert ok(tool(plain_server, "schedule-delete", "reports", "hourly")) == "schedule hourly of reports deleted\n"
    listed = ok(tool(plain_server, "schedules", "reports", password=None)).splitlines()
    assert len(listed) == 1 and listed[0].startswith("nightly cron='0 3 * * *' paused=yes")

    bad = one_line_error(tool(plain_server, "schedule-set", "reports", "bad", "--cron", "never", "--body", "x"), 1)
    assert bad.startswith("pinlater admin: 400: schedule 'bad':")
    assert one_line_error(tool(plain_server, "schedule-delete", "reports", "hourly"), 1) == (
        "pinlater admin: 404: queue 'reports' has no schedule 'hourly'"
    )


# -- cancel ---------------------------------------------------------------------------------------


def test_cancel_ends_pending_jobs_failed_and_counts_what_changed(
    server: ServerProcess, open_client: Callable[[ServerProcess], Any], ttypes: ModuleType
) -> None:
    store = store_for(server, open_client, ttypes)
    store.create("cancel_me")
    running, first, second, last = store.enqueue("cancel_me", 4, attempts=2)
    # A dequeue first: with the broker, the other jobs are then held in its buffer.
    got = store.c.dequeueJobs(store.ctx, ttypes.PinLaterDequeueRequest(queueName="cancel_me", limit=1))
    assert list(got.jobs) == [running]
    out = ok(tool(server, "cancel", "cancel_me", first, second, "cancel_me:s1:p1:999999"))
    assert out == "cancelled 2 of 3 jobs of cancel_me\n"
    info = store.lookup(first)
    assert info.jobState == FAILED and info.attemptsRemaining == 0 and info.customStatus.endswith("cancelled")
    assert (store.count("cancel_me", PENDING), store.count("cancel_me", FAILED)) == (1, 2)
    # None of the cancelled jobs is handed out (from the store, or from the broker's memory).
    got = store.c.dequeueJobs(store.ctx, ttypes.PinLaterDequeueRequest(queueName="cancel_me", limit=10))
    assert list(got.jobs) == [last]
    refused = one_line_error(tool(server, "cancel", "cancel_me", last, password="wrong"), 1)
    assert "403" in refused and store.count("cancel_me", IN_PROGRESS) == 2
