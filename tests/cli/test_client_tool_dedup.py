"""``pinlater client`` with dedup keys (#17) against a real server: enqueue's --dedup-key,
--dedup-window-ms and --group-key, what its summary says, and the keys in lookup and scan."""

from __future__ import annotations

import subprocess
import sys
from types import ModuleType
from typing import Any

import pytest
from tests.cli.test_client_tool import LIVE_LINE, PENDING, Store, ok, one_line_error, tool
from tests.support.pinlater_server import ServerProcess


class KeyedStore(Store):
    def scan_descriptors(self, queue: str) -> list[str]:
        request = self.t.PinLaterScanJobsRequest(queueName=queue, jobState=PENDING, limit=100)
        return [j.jobDescriptor for j in self.client.scanJobs(self.ctx, request).scannedJobs]

    def succeed_all(self, queue: str) -> None:
        got = self.client.dequeueJobs(self.ctx, self.t.PinLaterDequeueRequest(queueName=queue, limit=100))
        acks = [self.t.PinLaterJobAckInfo(jobDescriptor=d) for d in got.jobs]
        assert acks, "a job to finish"
        self.client.ackDequeuedJobs(self.ctx, self.t.PinLaterJobAckRequest(queueName=queue, jobsSucceeded=acks))


@pytest.fixture
def store(client: Any, ttypes: ModuleType) -> KeyedStore:
    return KeyedStore(client, ttypes)


def summary_line(out: str, prefix: str) -> str:
    [line] = [line.strip() for line in out.splitlines() if line.strip().startswith(prefix)]
    return line


def test_enqueue_with_a_dedup_key_makes_one_job_and_says_so(server: ServerProcess, store: KeyedStore) -> None:
    ok(tool(server, "--mode", "create", "--queue", "keyed"))
    args = ["--mode", "enqueue", "--queue", "keyed", "--body", "invoice", "--dedup-key", "invoice-7"]
    out = ok(tool(server, *args, "--batch_size", "3", "--num_queries", "2"))
    assert store.count("keyed", PENDING) == 1
    [holder] = store.scan_descriptors("keyed")
    assert LIVE_LINE.search(out.splitlines()[0]) and "deduplicated 5" in out.splitlines()[0], out
    assert summary_line(out, "deduplicated:") == "deduplicated: 5 of 6 jobs (not created: the key was held)"
    assert summary_line(out, "dedup key") == f"dedup key 'invoice-7' answered by: {holder}"

    again = ok(tool(server, *args))
    assert summary_line(again, "deduplicated:").startswith("deduplicated: 1 of 1 jobs")
    assert store.count("keyed", PENDING) == 1


def test_enqueue_without_keys_prints_as_before(server: ServerProcess, store: KeyedStore) -> None:
    ok(tool(server, "--mode", "create", "--queue", "unkeyed"))
    out = ok(tool(server, "--mode", "enqueue", "--queue", "unkeyed", "--batch_size", "2"))
    assert "dedup" not in out
    assert store.count("unkeyed", PENDING) == 2


def test_a_window_holds_the_key_after_the_job_finished(server: ServerProcess, store: KeyedStore) -> None:
    ok(tool(server, "--mode", "create", "--queue", "windowed"))
    args = ["--mode", "enqueue", "--queue", "windowed", "--dedup_key", "w", "--dedup-window-ms", "600000"]
    ok(tool(server, *args))
    store.succeed_all("windowed")
    out = ok(tool(server, *args))
    assert summary_line(out, "deduplicated:").startswith("deduplicated: 1 of 1 jobs"), out
    assert store.count("windowed", PENDING) == 0


def test_lookup_and_scan_show_the_dedup_key(server: ServerProcess, store: KeyedStore) -> None:
    ok(tool(server, "--mode", "create", "--queue", "shown"))
    ok(tool(server, "--mode", "enqueue", "--queue", "shown", "--body", "k", "--dedup-key", "order\n42"))
    [plain] = store.enqueue("shown", [b"plain"])
    [keyed] = [d for d in store.scan_descriptors("shown") if d != plain]
    out = ok(tool(server, "--mode", "lookup", "--job_descriptor", keyed, "--job_descriptor", plain))
    blocks = [dict(line.split(": ", 1) for line in block.splitlines()) for block in out.strip().split("\n\n")]
    assert blocks[0]["dedup_key"] == "order\\n42", "a newline in the key is escaped: one line per field"
    assert "dedup_key" not in blocks[1] and "group_key" not in blocks[0]
    scanned = ok(tool(server, "--mode", "scan", "--queue", "shown"))
    assert scanned.count("dedup_key: order\\n42") == 1


def test_a_group_key_is_sent_and_shown(server: ServerProcess, store: KeyedStore) -> None:
    ok(tool(server, "--mode", "create", "--queue", "grouped"))
    out = ok(tool(server, "--mode", "enqueue", "--queue", "grouped", "--group-key", "g\t1", "--batch_size", "2"))
    assert "dedup" not in out
    assert store.count("grouped", PENDING) == 2
    scanned = ok(tool(server, "--mode", "scan", "--queue", "grouped"))
    assert scanned.count("group_key: g\\t1") == 2, "a tab in the key is escaped: one line per field"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--mode", "enqueue", "--queue", "q", "--dedup-window-ms", "5"], "--dedup-window-ms needs --dedup-key"),
        (["--mode", "enqueue", "--queue", "q", "--dedup-key", ""], "a dedup key must not be empty"),
        (
            ["--mode", "enqueue", "--queue", "q", "--dedup-key", "k", "--dedup-window-ms", "-1"],
            "it must be 0..9223372036854775807",
        ),
        (["--mode", "scan", "--queue", "q", "--dedup-key", "k"], "--dedup-key is for --mode enqueue"),
        (["--mode", "dequeue", "--queue", "q", "--group-key", "g"], "--group-key is for --mode enqueue"),
    ],
)
def test_bad_key_flags_are_one_line_usage_errors(args: list[str], expected: str) -> None:
    done = subprocess.run([sys.executable, "-m", "pinlater.cli", "client", *args], capture_output=True, text=True)
    line = one_line_error(done, 2)
    assert expected in line, line


def test_help_lists_the_key_flags() -> None:
    done = subprocess.run([sys.executable, "-m", "pinlater.cli", "client", "--help"], capture_output=True, text=True)
    assert done.returncode == 0
    for flag in ("--dedup-key", "--dedup_key", "--dedup-window-ms", "--group-key"):
        assert flag in done.stdout, flag
