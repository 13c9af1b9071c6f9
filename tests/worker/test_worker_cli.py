"""``pinlater worker`` and the example worker as processes: signals, exit codes, one-line errors."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from pinlater.client import Job, JobState, PinLaterClient
from tests.support.pinlater_server import ServerProcess
from tests.support.wait import wait_for

ROOT = Path(__file__).resolve().parents[2]

HANDLERS = """
import os, pathlib, time

GATE = pathlib.Path(os.environ["GATE_DIR"])

def slow(ctx):
    (GATE / ("started-" + ctx.descriptor.replace(":", "_"))).touch()
    while not (GATE / "go").exists():
        time.sleep(0.01)

def mixed(ctx):
    if ctx.body != b"fast":
        slow(ctx)
"""


class Proc:
    """A subprocess whose merged output is collected line by line."""

    def __init__(self, cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> None:
        full_env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
        self.proc = subprocess.Popen(
            cmd, cwd=cwd, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        with self.proc.stdout:
            for line in self.proc.stdout:
                self.lines.append(line.rstrip("\n"))

    def output(self) -> str:
        return "\n".join(self.lines)

    def wait(self, timeout: float = 30) -> int:
        code = self.proc.wait(timeout)
        self._reader.join(5)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture
def gate(tmp_path: Path) -> Path:
    (tmp_path / "handlers.py").write_text(HANDLERS)
    (tmp_path / "gate").mkdir()
    return tmp_path / "gate"


def start_worker(srv: ServerProcess, queue: str, gate: Path, *extra: str) -> Proc:
    cmd = [sys.executable, "-m", "pinlater.cli", "worker", "handlers:slow", "--queue", queue]
    cmd += ["--port", str(srv.port), "--concurrency", "4", "--batch-size", "10", *extra]
    return Proc(cmd, cwd=gate.parent, env={"GATE_DIR": str(gate)})


def started(gate: Path) -> int:
    return len(list(gate.glob("started-*")))


def test_sigterm_finishes_jobs_in_hand_acks_them_and_exits_0(
    srv: ServerProcess, pl: PinLaterClient, queue: str, gate: Path
) -> None:
    pl.enqueue(queue, [b"j"] * 6)
    worker = start_worker(srv, queue, gate, "--grace-period", "30")
    try:
        wait_for(lambda: started(gate) == 4 and pl.count(queue, JobState.IN_PROGRESS) == 4, 30, what="4 jobs in hand")
        worker.proc.send_signal(signal.SIGTERM)
        wait_for(lambda: "stopping: finishing 4 job(s) in hand" in worker.output(), 10, what="the stop to begin")
        (gate / "go").touch()
        assert worker.wait() == 0, worker.output()
    finally:
        worker.kill()
    assert started(gate) == 4, "nothing was dequeued after the signal"
    assert pl.count(queue, JobState.SUCCEEDED) == 4
    assert pl.count(queue, JobState.IN_PROGRESS) == 0
    assert pl.count(queue, JobState.PENDING) == 2
    assert "stopped: 4 succeeded, 0 failed, 0 released" in worker.output()


def test_a_second_signal_releases_jobs_in_hand_without_charging_an_attempt(
    srv: ServerProcess, pl: PinLaterClient, queue: str, gate: Path
) -> None:
    ds = pl.enqueue(queue, [Job(b"j", attempts=3) for _ in range(6)])
    worker = start_worker(srv, queue, gate, "--grace-period", "300")
    try:
        # in its handlers, not only claimed: jobs claimed and still prefetched are handed back
        # at the first signal, and the second would find none in hand
        wait_for(lambda: started(gate) == 4, 30, what="4 jobs in hand")
        worker.proc.send_signal(signal.SIGINT)
        wait_for(lambda: "stopping: finishing" in worker.output(), 10, what="the stop to begin")
        worker.proc.send_signal(signal.SIGINT)
        assert worker.wait() == 0, worker.output()
    finally:
        worker.kill()
    assert pl.count(queue, JobState.IN_PROGRESS) == 0
    assert pl.count(queue, JobState.PENDING) == 6
    assert {i.attempts_remaining for i in pl.lookup(ds).values()} == {3}
    assert "released 4 unfinished job(s)" in worker.output()


def test_sigterm_hands_back_prefetched_jobs_at_once(
    srv: ServerProcess, pl: PinLaterClient, queue: str, gate: Path
) -> None:
    pl.enqueue(queue, [Job(b"fast", priority=1) for _ in range(30)])  # quick: the worker learns to prefetch
    slow = pl.enqueue(queue, [Job(b"slow", priority=2, attempts=3) for _ in range(12)])
    cmd = [sys.executable, "-m", "pinlater.cli", "worker", "handlers:mixed", "--queue", queue]
    cmd += ["--port", str(srv.port), "--concurrency", "2", "--prefetch", "6", "--batch-size", "8"]
    cmd += ["--prefetch-timeout", "300", "--grace-period", "300"]  # neither can be what hands them back
    worker = Proc(cmd, cwd=gate.parent, env={"GATE_DIR": str(gate)})
    try:
        wait_for(
            lambda: started(gate) == 2 and pl.count(queue, JobState.PENDING) < 10,
            30,
            what="both slots on slow jobs, more of them prefetched",
        )
        worker.proc.send_signal(signal.SIGTERM)
        wait_for(
            lambda: pl.count(queue, JobState.PENDING) == 10 and pl.count(queue, JobState.IN_PROGRESS) == 2,
            10,
            what="the prefetched jobs back in PENDING while the running ones still run",
        )
        (gate / "go").touch()
        assert worker.wait() == 0, worker.output()
    finally:
        worker.kill()
    assert started(gate) == 2, "no prefetched job started after the signal"
    assert pl.count(queue, JobState.SUCCEEDED) == 32
    found = pl.lookup(slow)
    assert len(found) == 12, "none lost"
    pending = [i for i in found.values() if i.state is JobState.PENDING]
    assert len(pending) == 10 and {i.attempts_remaining for i in pending} == {3}, "no attempt charged"
    assert "prefetched job(s) at stop" in worker.output()


def test_grace_period_end_releases_jobs(srv: ServerProcess, pl: PinLaterClient, queue: str, gate: Path) -> None:
    pl.enqueue(queue, [b"j"] * 2)
    worker = start_worker(srv, queue, gate, "--grace-period", "0.2")
    try:
        wait_for(lambda: pl.count(queue, JobState.IN_PROGRESS) == 2, 30, what="2 jobs in hand")
        worker.proc.send_signal(signal.SIGTERM)
        assert worker.wait() == 0, worker.output()
    finally:
        worker.kill()
    assert pl.count(queue, JobState.IN_PROGRESS) == 0 and pl.count(queue, JobState.PENDING) == 2


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("no_such_module_xyz:run", "pinlater worker: cannot import module 'no_such_module_xyz'"),
        ("os:no_such_handler", "pinlater worker: module 'os' has no attribute 'no_such_handler'"),
        ("os.path", "pinlater worker: 'os.path' is not MODULE:HANDLER"),
        ("os:sep", "pinlater worker: os:sep is not callable"),
    ],
)
def test_bad_handler_paths_are_one_line_errors(spec: str, message: str, tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "pinlater.cli", "worker", spec, "--queue", "q", "--port", "1"]
    done = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.startswith(message) and done.stderr.count("\n") == 1, done.stderr


def test_the_example_worker(srv: ServerProcess, pl: PinLaterClient, queue: str, tmp_path: Path) -> None:
    ok = pl.enqueue(queue, [b"a", b"b", b"c", b"d", b"e"])
    [bad] = pl.enqueue(queue, [b"fail"])
    cmd = [sys.executable, str(ROOT / "examples" / "example_worker.py"), "--port", str(srv.port), "--queue", queue]
    cmd += ["--max-jobs", "6", "--dequeue-interval", "0.05", "--batch-size", "4", "--pending-limit", "4"]
    example = Proc(cmd, cwd=tmp_path)
    try:
        assert example.wait(60) == 0, example.output()
    finally:
        example.kill()
    found = pl.lookup([*ok, bad])
    assert all(found[d].state is JobState.SUCCEEDED for d in ok)
    failed = found[bad]
    assert failed.state is JobState.PENDING and failed.attempts_remaining == 1
    assert failed.custom_status == "RuntimeError: the example job was told to fail\n"
    assert failed.run_after_ms is not None and failed.updated_at_ms is not None
    assert abs(failed.run_after_ms - failed.updated_at_ms - 1000) < 200, "linear: 1 s x 1 attempt used"


@pytest.mark.parametrize(
    ("flag", "value", "words"),
    [
        ("--long-poll", "45", "long_poll must be in 0..30"),
        ("--ack-interval", "0", "ack_interval must be positive"),  # a flush loop that spun a core
        ("--grace-period", "-1", "grace_period must be at least 0"),
        ("--max-poll-interval", "0", "poll_interval must be (first, most)"),  # no back-off at all
        ("--claim-renewal", "-1", "claim_renewal must be positive and finite"),
        ("--handler-timeout", "-1", "handler_timeout must be positive and finite"),
        ("--queue", os.fsdecode(b"q\xff"), "argument --queue: 'q\\udcff' is not UTF-8 text"),
    ],
)
def test_a_setting_out_of_bounds_is_a_one_line_error(tmp_path: Path, flag: str, value: str, words: str) -> None:
    cmd = [sys.executable, "-m", "pinlater.cli", "worker", "os:getcwd", "--queue", "q", flag, value]
    done = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.startswith(f"pinlater worker: {words}") and done.stderr.count("\n") == 1
