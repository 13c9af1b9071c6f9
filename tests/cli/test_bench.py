"""``pinlater bench``: real runs (a few seconds each) on servers it starts or targets, its JSON,
PNG and plan; target-rate parsing and the plan's arithmetic without servers."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from tests.support.pinlater_server import ServerProcess
from tests.support.wait import wait_for

from pinlater.bench.local import MissingBinaryError, find_binary
from pinlater.bench.plan import PlanInputs, format_plan, make_plan
from pinlater.bench.rates import parse_rate

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
OPS = ("enqueue", "dequeue", "ack")
PROGRESS = re.compile(r"^\[\s*\d+/\d+s\] enqueue \S+/min  dequeue \S+/min  ack \S+/min \| p99 ", re.MULTILINE)


def bench(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "pinlater.cli", "bench", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def check_result(result: dict[str, Any], duration: float) -> None:
    for key in ("backend", "config", "throughput", "latency_ms", "cpu_seconds", "cpu_cores", "timeline"):
        assert key in result, key
    for op in OPS:
        assert result["throughput"][op]["jobs_per_min"] > 0, op
        assert result["throughput"][op]["errors"] == {}, op
        latency = result["latency_ms"][op]
        assert 0 < latency["p50"] <= latency["p99"] <= latency["p999"] <= latency["max"], (op, latency)
    assert result["lifecycle_jobs_per_min"] == min(result["throughput"][op]["jobs_per_min"] for op in OPS)
    assert result["cpu_seconds"]["server"] > 0 and result["cpu_seconds"]["load_generator"] > 0
    assert len(result["timeline"]) == math.ceil(duration)
    assert all("enqueue_jobs_per_min" in row and "ack_p99_ms" in row for row in result["timeline"])


def test_embedded_run_saves_json_draws_png_and_plans(tmp_path: Path) -> None:
    out, plot = tmp_path / "bench.json", tmp_path / "bench.png"
    done = bench(
        "--backend", "embedded", "--duration", "3", "--producers", "1", "--consumers", "1", "--batch", "20",
        "--out", str(out), "--plot", str(plot), "--target-rate", "50M/min",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert len(PROGRESS.findall(done.stderr)) == 3, done.stderr

    result = json.loads(out.read_text())
    check_result(result, 3)
    assert result["backend"] == "embedded"
    assert result["cpu_seconds"]["store"] is None  # SQLite runs inside the server

    plan = result["plan"]
    assert plan["target_jobs_per_min"] == 50e6 and plan["headroom"] == 2
    assert plan["shards"] >= 1 and plan["servers"] == plan["shards"]  # embedded: a shard is a server
    # the capacity is shown rounded to 0.1 job/min; the plan divides by the unrounded one
    capacity = plan["server_capacity_jobs_per_min"]
    assert math.ceil(100e6 / (capacity + 0.05) - 1e-9) <= plan["servers"] <= math.ceil(100e6 / (capacity - 0.05))
    assert any("linear" in a for a in plan["assumptions"]) and any("2x" in a for a in plan["assumptions"])

    assert plot.read_bytes().startswith(PNG_SIGNATURE)
    assert plot.stat().st_size > 10_000

    report = done.stdout
    for op in OPS:
        assert re.search(rf"^{op} +\S+ +\d+ +\d+ +[\d.]+ms +[\d.]+ms +[\d.]+ms  0$", report, re.MULTILINE), report
    assert "CPU: server " in report and "store inside the server" in report
    assert f"shards:  {plan['shards']} " in report and f"servers: {plan['servers']} " in report
    assert "assumptions:" in report


def test_target_mode_drives_a_running_server_and_prints_json(
    start_server: Any, open_client: Any, ttypes: ModuleType
) -> None:
    server: ServerProcess = start_server()
    done = bench(
        "--target", f"127.0.0.1:{server.port}", "--server-pid", str(server.pid), "--duration", "2",
        "--consumers", "1", "--batch", "10", "--queue", "bench_target", "--piggyback-acks", "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    check_result(result, 2)
    assert result["backend"] == "embedded (target)"
    assert result["config"]["piggyback_acks"] is True
    assert result["latency_ms"]["ack"] is None or result["throughput"]["ack"]["requests"] <= 1
    client = open_client(server)
    ctx = ttypes.RequestContext(source="tests:bench")
    succeeded = client.getJobCount(ctx, ttypes.PinLaterGetJobCountRequest(queueName="bench_target", jobState=2))
    assert succeeded == result["throughput"]["ack"]["jobs"]
    pending = client.getJobCount(ctx, ttypes.PinLaterGetJobCountRequest(queueName="bench_target", jobState=0))
    assert succeeded + pending == result["throughput"]["enqueue"]["jobs"]


@pytest.mark.redis
def test_redis_run_measures_the_store_too(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    done = bench(
        "--backend", "redis", "--duration", "2", "--consumers", "1", "--batch", "20", "--out", str(out),
        "--target-rate", "800k/s", "--processes", "2",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    check_result(result, 2)
    assert result["cpu_seconds"]["store"] > 0
    assert result["config"]["processes"] == 2 and "2 server processes" in done.stdout
    plan = result["plan"]
    assert plan["processes_per_server"] == 2 and plan["server_cores"] == plan["servers"] * 2
    assert plan["jobs_per_store_cpu_second"] > 0 and plan["shards"] >= 1
    assert any("Redis runs commands on one thread" in a for a in plan["assumptions"])


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--backend", "oracle"], "invalid choice: 'oracle'"),
        (["--duration", "0"], "argument --duration: it must be > 0"),
        (["--target-rate", "fast"], "'fast' is not a rate like 50M/min"),
        (["--target-rate", "5/fortnight"], "unknown time unit 'fortnight'"),
        (["--target", "localhost"], "'localhost' is not HOST:PORT"),
        (["--producers", "0", "--consumers", "0"], "nothing to run"),
        (["--headroom", "0.5"], "headroom must be >= 1"),
        (["--server-pid", "1"], "--server-pid and --store-pid go with --target"),
        (["--processes", "2"], "--processes above 1 needs --backend redis or mysql"),
    ],
)
def test_bad_flags_are_one_line_usage_errors(args: list[str], expected: str) -> None:
    done = bench(*args)
    assert done.returncode == 2, done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], done.stderr


def test_an_unreachable_target_is_one_line() -> None:
    done = bench("--target", "127.0.0.1:1", "--duration", "1")
    assert done.returncode == 1, done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pinlater bench: "), done.stderr


def test_a_missing_binary_names_the_package() -> None:
    with pytest.raises(MissingBinaryError, match=r"no-such-server not found .* install the Debian package x-server"):
        find_binary("no-such-server", "PINLATER_NO_SUCH_SERVER", "the Debian package x-server")


@pytest.mark.parametrize(
    ("text", "per_second"),
    [
        ("50M/min", 50e6 / 60),
        ("800k/s", 800e3),
        ("1e6/min", 1e6 / 60),
        ("2.5B/day", 2.5e9 / 86400),
        ("1200", 1200.0),
        ("3 k / hour", 3e3 / 3600),
        ("10K/sec", 10e3),
    ],
)
def test_parse_rate(text: str, per_second: float) -> None:
    assert parse_rate(text) == pytest.approx(per_second)


@pytest.mark.parametrize("text", ["", "fast", "5/fortnight", "0/s", "-3/s", "1M/"])
def test_parse_rate_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_rate(text)


def test_plan_arithmetic_for_a_store_with_its_own_cpu() -> None:
    # 10 s at 1000 jobs/s = 10k jobs; 5 s of server CPU (2000 jobs/cpu-s), 1 s of redis (10k jobs/cpu-s).
    plan = make_plan(
        PlanInputs(
            target_per_s=50_000, headroom=2, backend="redis", lifecycle_per_s=1000, duration_s=10,
            server_cpu_s=5, store_cpu_s=1, cores_per_server=1, cores_per_store=1,
        )
    )  # fmt: skip
    assert plan["jobs_per_server_cpu_second"] == 2000 and plan["jobs_per_store_cpu_second"] == 10_000
    assert plan["servers"] == 50  # 100k/s needed / 2000 per server process
    assert plan["shards"] == 10  # 100k/s / 10k per single-core redis
    assert plan["store_cores"] == 10
    text = format_plan(plan)
    assert "shards:  10 " in text and "servers: 50 " in text and "assumptions:" in text


def test_plan_without_completed_jobs_says_so() -> None:
    plan = make_plan(
        PlanInputs(
            target_per_s=1000, headroom=2, backend="mysql", lifecycle_per_s=0, duration_s=3,
            server_cpu_s=3, store_cpu_s=1,
        )
    )  # fmt: skip
    assert plan["shards"] is None and "no job completed" in plan["error"]
    assert format_plan(plan).startswith("plan: none: ")


def test_plan_counts_servers_of_several_processes() -> None:
    # As above (2000 jobs per server CPU-second, all processes' CPU counted), servers of 4 processes.
    plan = make_plan(
        PlanInputs(
            target_per_s=50_000, headroom=2, backend="redis", lifecycle_per_s=1000, duration_s=10,
            server_cpu_s=5, store_cpu_s=1, processes_per_server=4,
        )
    )  # fmt: skip
    assert plan["server_capacity_jobs_per_min"] == 8000 * 60  # 4 processes x 2000 jobs/s
    assert plan["servers"] == 13  # 100k/s / 8000 per server, rounded up
    assert plan["server_cores"] == 52  # 13 servers x 4 processes x 1 core
    assert "servers: 13  (pinlater serve of 4 process(es)" in format_plan(plan)


def test_server_cpu_counts_its_child_processes(tmp_path: Path) -> None:
    """``pinlater serve --processes N`` runs N - 1 children: the server's CPU is the whole tree's."""
    from pinlater.bench import local

    script = "import subprocess, sys; subprocess.run([sys.executable, '-c', 'while True: pass'])"
    parent = subprocess.Popen([sys.executable, "-c", script])
    try:
        kids = wait_for(lambda: local.children(parent.pid), 10, what="the child process")
        wait_for(lambda: local.cpu_seconds(kids[0]) >= 0.2, 10, what="the child to use CPU")
        own = local.cpu_seconds(parent.pid)
        assert local.tree_cpu_seconds(parent.pid) >= own + 0.2
    finally:
        for pid in local.children(parent.pid):
            os.kill(pid, signal.SIGKILL)
        parent.kill()
        parent.wait(10)
