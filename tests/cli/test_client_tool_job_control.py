"""``pinlater client`` with job control (#18) against a real server: enqueue's --expire-at and
--expire-in, the cancel mode, scans that page (--continuation, --all) and the schedule modes;
what the store holds afterwards is checked with the independent, Apache-Thrift-generated client.

One server serves the module (each test has its own queue): the tool's runs are the cost here."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import pytest
from tests.cli.test_client_tool import FAILED, PENDING, Store, ok, one_line_error, tool
from tests.client.fixtures import shared_server, unique_queue
from tests.support.pinlater_server import ServerProcess
from tests.support.wait import wait_for


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    yield from shared_server(tmp_path_factory)


class JobControlStore(Store):
    def lookup(self, descriptors: list[str]) -> dict[str, Any]:
        request = self.t.PinLaterLookupJobRequest(jobDescriptors=descriptors)
        return dict(self.client.lookupJobs(self.ctx, request))

    def scan_all(self, queue: str, state: int = PENDING) -> list[Any]:
        request = self.t.PinLaterScanJobsRequest(queueName=queue, jobState=state, limit=1000)
        return list(self.client.scanJobs(self.ctx, request).scannedJobs)

    def dequeue(self, queue: str, n: int) -> list[str]:
        got = self.client.dequeueJobs(self.ctx, self.t.PinLaterDequeueRequest(queueName=queue, limit=n))
        return list(got.jobs or {})


@pytest.fixture
def store(srv: ServerProcess, open_client: Callable[[ServerProcess], Any], ttypes: ModuleType) -> JobControlStore:
    return JobControlStore(open_client(srv), ttypes)


@pytest.fixture
def q(request: pytest.FixtureRequest, srv: ServerProcess) -> str:
    name = unique_queue(request)
    ok(tool(srv, "--mode", "create", "--queue", name))
    return name


def blocks(out: str) -> list[dict[str, str]]:
    """The ``key: value`` blocks the tool prints, without the closing lines (the count, the
    continuation)."""
    found = []
    for chunk in out.strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in chunk.splitlines() if ": " in line)
        if not fields.keys() <= {"continuation", "jobs", "schedules"}:
            found.append(fields)
    return found


def now_ms() -> int:
    return int(time.time() * 1000)


def test_enqueue_with_expire_in_counts_from_the_enqueue(srv: ServerProcess, store: JobControlStore, q: str) -> None:
    before = now_ms()
    ok(tool(srv, "--mode", "enqueue", "--queue", q, "--body", "promo", "--batch_size", "2", "--expire-in", "3600"))
    after = now_ms()
    jobs = store.scan_all(q)
    assert len(jobs) == 2
    for job in jobs:
        assert before + 3_600_000 <= job.expireAtTimestampMillis <= after + 3_600_000
    [shown, _] = blocks(ok(tool(srv, "--mode", "scan", "--queue", q)))
    assert re.fullmatch(r"\S+Z \(\d+\)", shown["expire_at"]), shown


def test_enqueue_with_a_past_expire_at_makes_a_job_no_one_gets(
    srv: ServerProcess, store: JobControlStore, q: str
) -> None:
    past = now_ms() - 1
    ok(tool(srv, "--mode", "enqueue", "--queue", q, "--body", "late", "--expire_at", str(past)))
    ok(tool(srv, "--mode", "enqueue", "--queue", q, "--body", "plain"))
    [got] = store.dequeue(q, 10)
    assert store.lookup([got])[got].expireAtTimestampMillis is None, "the plain job is the one handed out"
    [expired] = store.scan_all(q, FAILED)
    assert "expired" in expired.customStatus and expired.expireAtTimestampMillis == past


def test_cancel_prints_how_many_changed(srv: ServerProcess, store: JobControlStore, q: str) -> None:
    a, b, c = store.enqueue(q, [b"a", b"b", b"c"])
    out = ok(tool(srv, "--mode", "cancel", "--queue", q, "--job_descriptor", a, "--job-descriptor", b))
    assert out == "2\n"
    assert store.count(q, FAILED) == 2 and store.count(q, PENDING) == 1
    for info in store.lookup([a, b]).values():
        assert info.attemptsRemaining == 0 and info.customStatus.endswith("cancelled")
    assert ok(tool(srv, "--mode", "cancel", "--queue", q, "--job_descriptor", a)) == "0\n"
    [shown] = blocks(ok(tool(srv, "--mode", "lookup", "--job_descriptor", b)))
    assert shown["state"] == "FAILED" and shown["custom_status"].endswith("cancelled")
    assert store.lookup([c])[c].jobState == PENDING


def test_scan_pages_with_continuation_and_all(srv: ServerProcess, store: JobControlStore, q: str) -> None:
    made = store.enqueue(q, [b"j%d" % i for i in range(5)])
    first = ok(tool(srv, "--mode", "scan", "--queue", q, "--limit", "2"))
    [token] = re.findall(r"^continuation: (\S+)$", first, re.MULTILINE)
    assert first.rstrip().endswith("jobs: 2") and token != "-1"
    second = ok(tool(srv, "--mode", "scan", "--queue", q, "--limit", "2", "--continuation", token))
    page1 = {b["job_descriptor"] for b in blocks(first)}
    page2 = {b["job_descriptor"] for b in blocks(second)}
    assert len(page1) == len(page2) == 2 and not page1 & page2

    everything = ok(tool(srv, "--mode", "scan", "--queue", q, "--limit", "2", "--all"))
    descriptors = [b["job_descriptor"] for b in blocks(everything)]
    assert sorted(descriptors) == sorted(made) and everything.rstrip().endswith("jobs: 5")
    assert "continuation:" not in everything
    whole = ok(tool(srv, "--mode", "scan", "--queue", q))
    assert "continuation:" not in whole, "a scan that fits its page says nothing of a continuation"


def test_a_forged_continuation_is_one_line_error(srv: ServerProcess, q: str) -> None:
    done = tool(srv, "--mode", "scan", "--queue", q, "--continuation", "forged")
    assert one_line_error(done, 1).startswith("pinlater client: CONTINUATION_INVALID: ")


def test_schedule_modes(srv: ServerProcess, store: JobControlStore, q: str) -> None:
    set_args = ["--mode", "upsert_schedule", "--queue", q, "--schedule_name", "tick", "--interval_ms", "1000"]
    out = ok(tool(srv, *set_args, "--body", "tick!", "--priority", "2", "--attempts", "3", "--custom_status", "s:"))
    assert out == f"set schedule tick of {q}\n"
    ok(tool(srv, "--mode", "upsert_schedule", "--queue", q, "--schedule-name", "nightly", "--cron", "0 3 * * *",
            "--body", "n", "--paused", "--group-key", "g"))  # fmt: skip
    listed = ok(tool(srv, "--mode", "list_schedules", "--queue", q))
    nightly, tick = blocks(listed)
    assert listed.rstrip().endswith("schedules: 2")
    assert tick["schedule"] == "tick" and tick["interval_ms"] == "1000" and "cron" not in tick
    assert (tick["priority"], tick["attempts_allowed"], tick["custom_status"], tick["body"]) == (
        "2",
        "3",
        "s:",
        "tick!",
    )
    assert tick["paused"] == "false" and re.fullmatch(r"\S+Z \(\d+\)", tick["next_run"])
    assert nightly["cron"] == "0 3 * * *" and nightly["paused"] == "true" and nightly["group_key"] == "g"
    assert re.search(r"T03:00:00\.000Z", nightly["next_run"]), nightly

    wait_for(lambda: store.count(q, PENDING) >= 1, timeout=15, what="a tick's job")
    [job] = store.scan_all(q)[:1]
    assert job.attemptsAllowed == 3 and job.customStatus.startswith("s:")

    assert ok(tool(srv, "--mode", "delete_schedule", "--queue", q, "--schedule_name", "tick")) == (
        f"deleted schedule tick of {q}\n"
    )
    assert [b["schedule"] for b in blocks(ok(tool(srv, "--mode", "list_schedules", "--queue", q)))] == ["nightly"]


def test_a_bad_cron_is_one_line_enqueue_rejected(srv: ServerProcess, q: str) -> None:
    args = ["--mode", "upsert_schedule", "--queue", q, "--schedule_name", "bad", "--cron", "99 * * * *", "--body", "x"]
    line = one_line_error(tool(srv, *args), 1)
    assert line.startswith("pinlater client: ENQUEUE_REJECTED: schedule 'bad'"), line


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--mode", "scan", "--queue", "q", "--expire-in", "5"], "--expire-in is for --mode enqueue"),
        (["--mode", "enqueue", "--queue", "q", "--expire-in", "-1"], "it must be >= 0"),
        (["--mode", "enqueue", "--queue", "q", "--expire-at", "1", "--expire-in", "1"], "not allowed with argument"),
        (["--mode", "cancel", "--queue", "q"], "--mode cancel needs --job_descriptor"),
        (["--mode", "cancel", "--job_descriptor", "q:s1:p1:1"], "--mode cancel needs --queue"),
        (["--mode", "lookup", "--job_descriptor", "q:s1:p1:1", "--all"], "--all is for --mode scan"),
        (["--mode", "enqueue", "--queue", "q", "--continuation", "x"], "--continuation is for --mode scan"),
        (["--mode", "delete_schedule", "--queue", "q"], "--mode delete_schedule needs --schedule_name"),
        (
            ["--mode", "upsert_schedule", "--queue", "q", "--schedule_name", "s", "--body", "b"],
            "needs one of --cron and --interval_ms",
        ),
        (
            [
                "--mode",
                "upsert_schedule",
                "--queue",
                "q",
                "--schedule_name",
                "s",
                "--body",
                "b",
                "--cron",
                "* * * * *",
                "--interval_ms",
                "1000",
            ],
            "needs one of --cron and --interval_ms",
        ),
        (
            ["--mode", "upsert_schedule", "--queue", "q", "--schedule_name", "s", "--cron", "* * * * *"],
            "--mode upsert_schedule needs --body",
        ),
        (["--mode", "scan", "--queue", "q", "--cron", "* * * * *"], "--cron is for --mode upsert_schedule"),
        (["--mode", "list_schedules", "--queue", "q", "--paused"], "--paused is for --mode upsert_schedule"),
    ],
)
def test_bad_job_control_flags_are_one_line_usage_errors(args: list[str], expected: str) -> None:
    done = subprocess.run([sys.executable, "-m", "pinlater.cli", "client", *args], capture_output=True, text=True)
    line = one_line_error(done, 2)
    assert expected in line, line


def test_help_lists_the_job_control_modes_and_flags() -> None:
    done = subprocess.run([sys.executable, "-m", "pinlater.cli", "client", "--help"], capture_output=True, text=True)
    assert done.returncode == 0
    for word in ("--expire-at", "--expire-in", "--continuation", "--all", "--schedule_name", "--cron",
                 "--interval_ms", "cancel", "list_schedules", "upsert_schedule", "delete_schedule"):  # fmt: skip
        assert word in done.stdout, word
