"""``pinlater client``: every mode against a real server; what it prints and what the store holds
afterwards (checked with the independent, Apache-Thrift-generated client)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from types import ModuleType
from typing import Any

import pytest
from tests.conftest import ADMIN_PASSWORD
from tests.support.pinlater_server import ServerProcess

PENDING, IN_PROGRESS, SUCCEEDED, FAILED = 0, 1, 2, 3
LIVE_LINE = re.compile(r"^\[\s*[\d.]+s\] (enqueue|dequeue): +[\d.]+ req/s +[\d.]+ jobs/s +p50 \S+ +p99 \S+ +errors \d+")


def tool(server: ServerProcess, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "pinlater.cli", "client", "--host", "127.0.0.1", "--port", str(server.port), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, done
    return done.stdout


def one_line_error(done: subprocess.CompletedProcess[str], code: int) -> str:
    assert done.returncode == code, done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


class Store:
    """The store's state through the generated client."""

    def __init__(self, client: Any, ttypes: ModuleType) -> None:
        self.client = client
        self.t = ttypes
        self.ctx = ttypes.RequestContext(source="tests:client-tool")

    def count(self, queue: str, state: int, future: bool = False) -> int:
        request = self.t.PinLaterGetJobCountRequest(queueName=queue, jobState=state, countFutureJobs=future)
        return int(self.client.getJobCount(self.ctx, request))

    def enqueue(self, queue: str, bodies: list[bytes], attempts: int = 2, run_after: int | None = None) -> list[str]:
        jobs = [
            self.t.PinLaterJob(body=b, numAttemptsAllowed=attempts, runAfterTimestampMillis=run_after) for b in bodies
        ]
        response = self.client.enqueueJobs(self.ctx, self.t.PinLaterEnqueueRequest(queueName=queue, jobs=jobs))
        return list(response.jobDescriptors)

    def fail_all(self, queue: str, n: int) -> list[str]:
        got = self.client.dequeueJobs(self.ctx, self.t.PinLaterDequeueRequest(queueName=queue, limit=n))
        descriptors = list(got.jobs)
        acks = [self.t.PinLaterJobAckInfo(jobDescriptor=d) for d in descriptors]
        self.client.ackDequeuedJobs(self.ctx, self.t.PinLaterJobAckRequest(queueName=queue, jobsFailed=acks))
        return descriptors


@pytest.fixture
def store(client: Any, ttypes: ModuleType) -> Store:
    return Store(client, ttypes)


def test_create_and_get_queue_names(server: ServerProcess, client: Any, store: Store) -> None:
    assert ok(tool(server, "--mode", "create", "--queue", "emails")) == "created queue emails\n"
    ok(tool(server, "--mode", "create", "--queue", "alerts"))
    assert set(client.getQueueNames(store.ctx)) == {"emails", "alerts"}
    assert ok(tool(server, "--mode", "get_queue_names")).splitlines() == ["alerts", "emails"]


def test_enqueue_load_creates_exactly_num_queries_times_batch_jobs(server: ServerProcess, store: Store) -> None:
    ok(tool(server, "--mode", "create", "--queue", "load"))
    out = ok(
        tool(
            server, "--mode", "enqueue", "--queue", "load", "--concurrency", "4", "--batch_size", "7",
            "--num_queries", "30", "--priority", "2",
        )
    )  # fmt: skip
    assert store.count("load", PENDING) == 210
    assert LIVE_LINE.search(out.splitlines()[0]), out
    assert "requests: 30 in" in out and "errors: 0" in out
    assert re.search(r"jobs: 210 \(", out), out
    assert re.search(r"latency: p50 [\d.]+ms +p99 [\d.]+ms +p999 [\d.]+ms", out), out
    counted = ok(tool(server, "--mode", "get_job_count", "--queue", "load", "--priority", "2"))
    assert counted == "210\n"
    assert ok(tool(server, "--mode", "get_job_count", "--queue", "load", "--priority", "1")) == "0\n"


def test_dequeue_load_with_full_success_leaves_every_job_succeeded(server: ServerProcess, store: Store) -> None:
    ok(tool(server, "--mode", "create", "--queue", "work"))
    store.enqueue("work", [b"job%d" % i for i in range(40)])
    out = ok(
        tool(
            server, "--mode", "dequeue", "--queue", "work", "--concurrency", "2", "--batch_size", "5",
            "--num_queries", "12", "--dequeue_success_percent", "100",
        )
    )  # fmt: skip
    assert store.count("work", SUCCEEDED) == 40
    assert store.count("work", PENDING) == store.count("work", IN_PROGRESS) == store.count("work", FAILED) == 0
    assert "requests: 12 in" in out and "jobs: 40 (" in out
    assert "acked: 40 succeeded, 0 failed" in out
    assert ok(tool(server, "--mode", "get_job_count", "--queue", "work", "--job_state", "SUCCEEDED")) == "40\n"
    assert ok(tool(server, "--mode", "get_job_count", "--queue", "work", "--job_state", "2")) == "40\n"


def test_dequeue_load_with_zero_success_fails_jobs_for_good_after_their_attempts(
    server: ServerProcess, store: Store
) -> None:
    ok(tool(server, "--mode", "create", "--queue", "doomed"))
    store.enqueue("doomed", [b"a", b"b", b"c"], attempts=1)
    out = ok(
        tool(server, "--mode", "dequeue", "--queue", "doomed", "--batch_size", "10", "--dequeue_success_percent", "0")
    )
    assert "acked: 0 succeeded, 3 failed" in out
    assert store.count("doomed", FAILED) == 3


def test_check_dequeue_is_a_dry_run(server: ServerProcess, store: Store) -> None:
    ok(tool(server, "--mode", "create", "--queue", "q"))
    assert ok(tool(server, "--mode", "check_dequeue", "--queue", "q")) == "jobs available for dequeue: false\n"
    store.enqueue("q", [b"x"])
    assert ok(tool(server, "--mode", "check_dequeue", "--queue", "q")) == "jobs available for dequeue: true\n"
    assert store.count("q", PENDING) == 1 and store.count("q", IN_PROGRESS) == 0


def test_get_job_count_of_future_jobs(server: ServerProcess, store: Store) -> None:
    ok(tool(server, "--mode", "create", "--queue", "later"))
    store.enqueue("later", [b"now"])
    store.enqueue("later", [b"tomorrow", b"next week"], run_after=int((time.time() + 86400) * 1000))
    count = ["--mode", "get_job_count", "--queue", "later"]
    assert ok(tool(server, *count)) == "1\n"
    assert ok(tool(server, *count, "--count_future_jobs")) == "2\n"
    assert ok(tool(server, *count, "--count_future_jobs", "true")) == "2\n"
    assert ok(tool(server, *count, "--count_future_jobs", "false")) == "1\n"
    assert store.count("later", PENDING, future=True) == 2


def test_lookup_prints_one_block_per_job(server: ServerProcess, store: Store) -> None:
    ok(tool(server, "--mode", "create", "--queue", "look"))
    first, second = store.enqueue("look", [b"hello", b"world"])
    out = ok(tool(server, "--mode", "lookup", "--job_descriptor", first, "--job_descriptor", second))
    blocks = [dict(line.split(": ", 1) for line in block.splitlines()) for block in out.strip().split("\n\n")]
    assert [b["job_descriptor"] for b in blocks] == [first, second]
    assert blocks[0]["state"] == "PENDING" and blocks[0]["body"] == "hello"
    assert blocks[0]["attempts_allowed"] == "2" and blocks[0]["attempts_remaining"] == "2"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z \(\d+\)", blocks[0]["created_at"])
    assert "custom_status" in blocks[0]

    missing = first.rsplit(":", 1)[0] + ":999999"
    done = tool(server, "--mode", "lookup", "--job_descriptor", missing)
    assert one_line_error(done, 1) == f"pinlater client: job not found: {missing}"


def test_scan_retry_failed_and_delete_jobs(server: ServerProcess, store: Store) -> None:
    ok(tool(server, "--mode", "create", "--queue", "ops"))
    store.enqueue("ops", [b"keep-1", b"keep-2", b"drop-1"], attempts=1)
    failed = store.fail_all("ops", 10)
    assert store.count("ops", FAILED) == 3

    out = ok(tool(server, "--mode", "scan", "--queue", "ops", "--job_state", "FAILED", "--limit", "2"))
    assert out.count("job_descriptor: ") == 2 and out.count("state: FAILED") == 2
    assert out.rstrip().endswith("jobs: 2")
    assert set(re.findall(r"job_descriptor: (\S+)", out)) <= set(failed)

    assert ok(tool(server, "--mode", "retry_failed", "--queue", "ops", "--attempts", "3")) == "3\n"
    assert store.count("ops", FAILED) == 0 and store.count("ops", PENDING) == 3

    args = ["--mode", "delete_jobs", "--queue", "ops", "--job_state", "pending", "--body_regex", "^drop"]
    assert ok(tool(server, *args)) == "1\n"
    assert store.count("ops", PENDING) == 2


def test_delete_queue_needs_the_password(server: ServerProcess, client: Any, store: Store) -> None:
    ok(tool(server, "--mode", "create", "--queue", "gone"))
    done = tool(server, "--mode", "delete_queue", "--queue", "gone", "--password", "wrong")
    assert one_line_error(done, 1).startswith("pinlater client: PASSWORD_INVALID: ")
    assert "gone" in set(client.getQueueNames(store.ctx))
    assert ok(tool(server, "--mode", "delete_queue", "--queue", "gone", "--password", ADMIN_PASSWORD)) == (
        "deleted queue gone\n"
    )
    assert "gone" not in set(client.getQueueNames(store.ctx))


@pytest.mark.parametrize(
    "mode_args",
    [
        ["--mode", "get_job_count", "--queue", "nope"],
        ["--mode", "enqueue", "--queue", "nope", "--num_queries", "5", "--concurrency", "2"],
        ["--mode", "dequeue", "--queue", "nope", "--num_queries", "-1"],
    ],
)
def test_server_errors_are_one_line_with_the_contract_code(server: ServerProcess, mode_args: list[str]) -> None:
    line = one_line_error(tool(server, *mode_args, timeout=30), 1)
    assert re.fullmatch(r"pinlater client: QUEUE_NOT_FOUND: .*nope.*", line), line


def test_an_unreachable_server_is_one_line() -> None:
    cmd = [sys.executable, "-m", "pinlater.cli", "client", "--port", "1", "--mode", "get_queue_names"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert one_line_error(done, 1).startswith("pinlater client: SHARD_CONNECTION_FAILED: ")


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--mode", "enqueue"], "--mode enqueue needs --queue"),
        (["--mode", "explode"], "invalid choice: 'explode'"),
        (["--mode", "lookup"], "--mode lookup needs --job_descriptor"),
        (["--mode", "delete_queue", "--queue", "q"], "needs --password"),
        (["--mode", "delete_jobs", "--queue", "q"], "needs --job_state"),
        (
            ["--mode", "enqueue", "--queue", "q", "--concurrency", "0"],
            "argument --concurrency: it must be 1..2147483647",
        ),
        # what the wire cannot carry: text that is not UTF-8 (a byte the locale could not decode
        # reaches argv as a lone surrogate), integers past i32 (counts) and i64 (times)
        (["--mode", "enqueue", "--queue", os.fsdecode(b"q\xff")], "argument --queue: 'q\\udcff' is not UTF-8 text"),
        (["--mode", "enqueue", "--queue", "q", "--body", os.fsdecode(b"\xe9")], "is not UTF-8 text"),
        (["--mode", "retry_failed", "--queue", "q", "--limit", "99999999999"], "it must be 1..2147483647"),
        (["--mode", "enqueue", "--queue", "q", "--expire-at", "1" + "0" * 23], "it must be 0..9223372036854775807"),
        (["--mode", "enqueue", "--queue", "q", "--expire-in", "1e300"], "--expire_in must be at most"),
        (["--mode", "enqueue", "--queue", "q", "--body_size", "100000000000"], "--body_size must be 0..1073741824"),
        (["--mode", "get_queue_names", "--timeout", "inf"], "it must be > 0 and finite, not inf"),
        (["--mode", "enqueue", "--queue", "q", "--num_queries", "-2"], "--num_queries must be >= -1"),
        (["--mode", "enqueue", "--queue", "q", "--batch_size", "ten"], "'ten' is not a whole number"),
        (["--mode", "dequeue", "--queue", "q", "--dequeue_success_percent", "101"], "a percentage must be 0..100"),
        (["--mode", "get_job_count", "--queue", "q", "--job_state", "DONE"], "'DONE' is not a job state"),
        (["--mode", "get_job_count", "--queue", "q", "--count_future_jobs", "maybe"], "'maybe' is not true or false"),
        (["--mode", "enqueue", "--queue", "q", "--body", "x", "--body_size", "3"], "not allowed with argument"),
        (["--mode", "create", "--queue", "q", "--port", "70000"], "a port must be 1..65535"),
        (["--mode", "create", "--queue", "q", "--frobnicate"], "unrecognized arguments: --frobnicate"),
    ],
)
def test_bad_flags_are_one_line_usage_errors(args: list[str], expected: str) -> None:
    cmd = [sys.executable, "-m", "pinlater.cli", "client", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    line = one_line_error(done, 2)
    assert expected in line, line
    assert line.startswith("pinlater") and line.endswith("--help)"), line


def test_help_lists_every_mode_and_flag_of_the_original() -> None:
    done = subprocess.run([sys.executable, "-m", "pinlater.cli", "client", "--help"], capture_output=True, text=True)
    assert done.returncode == 0
    for flag in (
        "--host", "--port", "--mode", "--queue", "--concurrency", "--batch_size", "--num_queries",
        "--dequeue_success_percent", "--job_descriptor", "--priority", "--job_state", "--count_future_jobs",
        "--password", "--limit", "--body_regex", "--attempts", "--body", "--body_size", "--timeout",
    ):  # fmt: skip
        assert flag in done.stdout, flag
    for mode in ("create", "enqueue", "dequeue", "check_dequeue", "lookup", "get_job_count", "get_queue_names",
                 "scan", "retry_failed", "delete_jobs", "delete_queue"):  # fmt: skip
        assert f"\n  {mode} " in done.stdout, mode
