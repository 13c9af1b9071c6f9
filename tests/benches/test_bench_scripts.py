"""Every benchmark script runs once, briefly, so a change to the code they drive cannot leave
them broken unnoticed (their figures are not checked here: speed is measured, not tested)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

BENCHES = Path(__file__).resolve().parents[2] / "benches"


def run(script: str, *args: str, timeout: float = 240) -> str:
    done = subprocess.run(
        [sys.executable, str(BENCHES / script), *args], capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, f"{script} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.mark.parametrize("broker", ["off", "on"])
def test_lifecycle_through_the_embedded_store(broker: str) -> None:
    out = run("lifecycle.py", "--seconds", "1", "--broker", broker)
    assert "acked" in out and "jobs/s" in out


@pytest.mark.redis
def test_redis_ceiling_and_server() -> None:
    out = run("redis_lifecycle.py", "--seconds", "1")
    assert "ratio server/ceiling, broker off" in out
    assert "ratio server/ceiling, broker on" in out
    assert "broker_claimed" in out  # the broker phase really ran with the broker
    assert out.count("stolen by the hypervisor") == 3, "a machine line for each phase"


@pytest.mark.mysql
def test_mysql_phases() -> None:
    out = run("mysql_lifecycle.py", "--seconds", "1")
    assert "lifecycle: server / direct SQL" in out


def test_sparse_poll() -> None:
    out = run("sparse_poll.py", "--seconds", "1", "--rate", "10", "--consumers", "2", "--wait-ms", "200")
    assert "dequeue store calls" in out


def test_worker_overhead() -> None:
    out = run("worker_overhead.py", "--jobs", "200", "--rounds", "1")
    assert "worker-sync" in out and "of bare" in out


@pytest.mark.redis
def test_worker_vs_huey() -> None:
    args = ["--jobs", "300", "--rounds", "1"]
    if importlib.util.find_spec("huey") is None:  # an optional extra (bench): our side alone
        args.append("--no-huey")
    out = run("worker_vs_huey.py", *args)
    assert "pinlater worker, this tree" in out and "round 1 pinlater" in out
    if "--no-huey" not in args:
        assert "ratio pinlater/huey" in out


def test_many_queues_on_the_embedded_store() -> None:
    out = run("many_queues.py", "--queues", "20", "--repeat", "1", "--backends", "embedded")
    assert "queue list /api/queues" in out and "/metrics" in out


@pytest.mark.redis
@pytest.mark.mysql
def test_many_queues_on_redis_and_mysql() -> None:
    out = run("many_queues.py", "--queues", "20", "--repeat", "1", "--backends", "redis,mysql")
    assert out.startswith("redis, 2 shards") and "mysql, 2 shards" in out
    assert out.count("queue list /api/queues") == 2


def test_cost_per_job_on_the_embedded_store() -> None:
    out = run("cost_per_job.py", "--backends", "embedded", "--seconds", "1", "--warmup", "0.5", "--rounds", "1")
    assert "server µs/job" in out and "in server" in out
    row = next(line for line in out.splitlines() if line.split()[:3] == ["embedded", "current", "1"])
    assert float(row.split()[4]) > 0, "some server CPU per acked job was measured"


def test_instructions_per_job_on_the_embedded_store() -> None:
    out = run("instructions_per_job.py", "--backends", "embedded", "--cycles", "2", "--warmup", "1", "--batch", "10")
    row = next(line for line in out.splitlines() if line.split()[:2] == ["embedded", "current"])
    assert float(row.split()[2].replace(",", "")) > 0, "some instructions per job were counted"


def test_instructions_per_job_counts_the_grouped_variant_beside_the_plain_one() -> None:
    out = run(
        "instructions_per_job.py",
        *("--backends", "embedded", "--variants", "plain,grouped", "--groups", "10"),
        *("--cycles", "2", "--warmup", "1", "--batch", "10"),
    )
    ratio = next(line for line in out.splitlines() if "plain / grouped" in line)
    assert 0 < float(ratio.split("plain / grouped:")[1].split()[0]) < 1, out


@pytest.mark.redis
def test_instructions_per_job_counts_redis_with_its_scripts_loaded_first() -> None:
    """``--count redis`` loads the build's scripts into the store before counting (a failed load
    fails the run), then counts redis-server's instructions."""
    out = run(
        "instructions_per_job.py",
        *("--backends", "redis-compact", "--count", "redis", "--variants", "plain,keyed"),
        *("--cycles", "2", "--warmup", "1", "--batch", "10"),
    )
    row = next(line for line in out.splitlines() if line.split()[:3] == ["redis-compact", "keyed", "current"])
    assert float(row.split()[3].replace(",", "")) > 0, out


@pytest.mark.redis
def test_redis_floor_measures_the_server_and_the_bare_floor() -> None:
    out = run("redis_floor.py", "--rounds", "1", "--seconds", "1", "--warmup", "0.5")
    rows = {line[:16].strip(): line[16:].split() for line in out.splitlines() if line[:16].strip()}
    assert float(rows["pinlater serve"][1]) > 0 and float(rows["bare floor"][1]) > 0, out
    assert "the Python request path's share" in out


@pytest.mark.redis
def test_cost_per_job_compares_the_redis_layouts() -> None:
    out = run(
        "cost_per_job.py", "--backends", "redis,redis-compact", "--seconds", "1", "--warmup", "0.5", "--rounds", "1"
    )
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.split()[1:3] == ["current", "1"]}
    assert float(rows["redis-compact"][5]) > 0 and float(rows["redis"][5]) > 0, "store CPU per job on both"
    assert "the compact Redis layout / the original" in out and "compact / original <= 0.27" in out


@pytest.mark.redis
def test_redis_layout_memory() -> None:
    out = run("redis_layout_memory.py", "--jobs", "2000")
    rows = {
        line.split()[0]: line.split()[1:]
        for line in out.splitlines()
        if line.split()[:1] in (["original"], ["compact"]) and len(line.split()) == 4  # the table's rows
    }
    assert set(rows) == {"original", "compact"} and all(float(v) > 0 for v in rows["compact"])
    assert "bytes per pending job on the compact layout" in out


def test_slow_syncs_wraps_a_command_so_that_each_sync_takes_longer(tmp_path: Path) -> None:
    sys.path.insert(0, str(BENCHES))
    try:
        from cost_per_job import Build, slow_syncs
    finally:
        sys.path.remove(str(BENCHES))
    plain = Build("x", sys.executable, {})
    assert slow_syncs(plain, 0) is plain
    wrapped = slow_syncs(plain, 20)
    probe = (
        "import os, time\n"
        f"fd = os.open({str(tmp_path / 'f')!r}, os.O_CREAT | os.O_WRONLY)\n"
        "t = time.monotonic()\n"
        "for _ in range(5):\n"
        "    os.write(fd, b'x'); os.fdatasync(fd); os.fsync(fd)\n"
        "print(time.monotonic() - t)\n"
    )
    done = subprocess.run([*wrapped.wrapper, sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert float(done.stdout) >= 10 * 0.020, "ten syncs, each at least 20 ms slower"


def test_slow_syncs_runs_the_server_under_strace_and_stops_it() -> None:
    out = run(
        "dedup_keys.py",
        "--backends",
        "embedded",
        "--variants",
        "plain",
        "--seconds",
        "1",
        "--warmup",
        "0.5",
        "--rounds",
        "1",
        "--slow-syncs",
        "5",
    )
    rows = {tuple(line.split()[:3]): line.split() for line in out.splitlines() if line.startswith("current ")}
    assert float(rows[("current", "embedded", "plain")][4]) > 0, out
    left = subprocess.run(["pgrep", "-f", "pinlater-dedup-"], capture_output=True, text=True, check=False)
    assert left.stdout == "", "a server or its strace outlived the run"


def test_dedup_keys_compares_keyed_grouped_and_plain_on_the_embedded_store() -> None:
    out = run("dedup_keys.py", "--backends", "embedded", "--seconds", "1", "--warmup", "0.5", "--rounds", "1")
    rows = {tuple(line.split()[:3]): line.split() for line in out.splitlines() if line.startswith("current ")}
    assert all(float(rows[("current", "embedded", variant)][4]) > 0 for variant in ("plain", "keyed", "grouped")), out
    assert "keyed/plain jobs/min" in out and "grouped/plain jobs/min" in out and "issue 17: at least 0.70" in out


def test_sqlite_statement_time_names_each_statement_the_writer_ran() -> None:
    """The server's writer times its statements when ``PINLATER_SQLITE_PROFILE`` names a file
    and writes them as it stops: the plain lifecycle's statements show in both variants, the
    groups' and keys' in the grouped one only."""
    out = run("sqlite_statement_time.py", "--variants", "plain,grouped", "--seconds", "1", "--warmup", "0.5")
    rows = {line[:62].strip(): line[62:].split() for line in out.splitlines()[2:]}
    for statement in ("enqueue_jobs", "dequeue_rows", "COMMIT"):
        assert float(rows[statement][0]) > 0, out
    # every job's key is its own: the writer writes the keys first and never probes or upserts them
    for statement in ("dedup_records_fresh", "groups_put", "group_jobs_record"):
        plain, grouped = map(float, rows[statement])
        assert plain == 0 and grouped > 0, out
    assert float(rows["all statements"][1]) > float(rows["all statements"][0]), out


@pytest.mark.redis
def test_dedup_keys_runs_keyed_jobs_over_two_redis_shards() -> None:
    """``--shards 2``: two shard entries on the one Redis, so keyed requests are split over
    them (``ShardedBackend.enqueue_keyed_batch``) under a real load."""
    out = run(
        "dedup_keys.py",
        *("--backends", "redis-compact", "--variants", "plain,keyed,grouped", "--shards", "2"),
        *("--seconds", "1", "--warmup", "0.5", "--rounds", "1"),
    )
    assert "2 shard(s) per store" in out
    rows = {tuple(line.split()[:3]): line.split() for line in out.splitlines() if line.startswith("current ")}
    assert all(float(rows[("current", "redis-compact", v)][4]) > 0 for v in ("plain", "keyed", "grouped")), out


def test_big_request_stall_probes_a_request_of_each_kind() -> None:
    out = run("big_request_stall.py", "--backends", "embedded", "--jobs", "1500")
    rows = [line.split() for line in out.splitlines() if line.startswith("embedded ")]
    assert [row[1] for row in rows] == ["enqueue", "keyed", "dequeue", "ack", "lookup", "checkpoint", "delete", "retry"]
    assert all(float(row[3]) >= 0 and float(row[4]) > 0 for row in rows), "a request timed, and a probe's wait"


def test_big_request_stall_spreads_a_keyed_request_over_shards() -> None:
    """``--shards 2``: two shard files (the script checks it made them), so the keyed request is
    split over them (``KeyedJobBatch.split``)."""
    out = run("big_request_stall.py", "--backends", "embedded", "--ops", "keyed", "--jobs", "1500", "--shards", "2")
    assert "2 shard(s) per store" in out
    rows = [line.split() for line in out.splitlines() if line.startswith("embedded ")]
    assert [row[1] for row in rows] == ["keyed"] and float(rows[0][4]) > 0, out


@pytest.mark.redis
def test_expired_backlog_times_a_fresh_job_behind_a_mass_expiry() -> None:
    out = run("expired_backlog.py", "--backends", "redis-compact", "--jobs", "3000", "--expire-in", "5")
    (line,) = [line for line in out.splitlines() if "redis-compact " in line]
    assert "3,000 expired: fresh job after" in line and "gave up" not in line, out
    assert "dequeues fast again after" in line and "over" not in line, out


def _cost_per_job() -> Any:
    sys.path.insert(0, str(BENCHES))
    try:
        import cost_per_job
    finally:
        sys.path.remove(str(BENCHES))
    return cost_per_job


def test_a_stores_cpu_counts_the_children_it_reaped() -> None:
    """What a Redis AOF rewrite costs is in the store's figure (``--aof-rewrites``): a child's
    CPU still counts once the store has reaped it."""
    bench = _cost_per_job()
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3:\n    pass\n"
    parent = (
        "import subprocess, sys\n"
        f"subprocess.run([sys.executable, '-c', {burn!r}], check=True)\n"
        "print('reaped', flush=True)\n"
        "sys.stdin.read()\n"
    )
    with subprocess.Popen(
        [sys.executable, "-c", parent], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as proc:
        assert proc.stdout is not None and proc.stdout.readline() == "reaped\n"
        own = bench.cpu_seconds(proc.pid)
        assert bench.store_cpu_seconds(proc.pid) - own >= 0.3


@pytest.mark.redis
@pytest.mark.parametrize("rewrites", [False, True])
def test_aof_rewrites_run_only_when_asked(tmp_path: Path, rewrites: bool) -> None:
    import redis

    bench = _cost_per_job()
    with bench.running_store("redis-compact", tmp_path, aof_rewrites=rewrites) as store:
        config = json.loads(Path(store.server_args[-1]).read_text())
        master = config["shards"][0]["shardConfig"]["master"]
        with redis.Redis(master["host"], master["port"]) as raw:
            percentage = raw.config_get("auto-aof-rewrite-percentage")["auto-aof-rewrite-percentage"]
    assert percentage == ("100" if rewrites else "0")
