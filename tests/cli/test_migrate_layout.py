"""``pinlater migrate-layout``: a real shard moved by the command in a subprocess, its output,
its one-line errors, and a run killed half-way and run again."""

from __future__ import annotations

import argparse
import json
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from tests.support.redis_layouts import T0, both_layouts, compact_view, fill_shard, original_view
from tests.support.redis_server import RedisServer, write_shard_config
from tests.support.wait import wait_for

from pinlater.backends.base import NewJob
from pinlater.backends.redis import RedisEndpoint, RedisShardConfig, RedisStore
from pinlater.errors import ConfigError

pytestmark = pytest.mark.redis


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    with RedisServer(tmp_path / "redis") as srv:
        yield srv


@pytest.fixture
def raw(server: RedisServer) -> Iterator[redis.Redis]:
    client = server.client()
    yield client
    client.close()


@pytest.fixture
def config(server: RedisServer, tmp_path: Path) -> Path:
    return write_shard_config(tmp_path / "redis.json", {"1": server}, layout="original")


def open_store(server: RedisServer) -> RedisStore:
    return RedisStore("1", RedisShardConfig(RedisEndpoint(server.host, server.port), layout="original"))


def command(config: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "pinlater.cli", "migrate-layout", "--backend-config", str(config), *args]


def run(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command(config, *args), capture_output=True, text=True, timeout=60)


def one_line_error(done: subprocess.CompletedProcess[str], code: int) -> str:
    assert done.returncode == code, done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


def test_moves_a_shard_and_says_what_it_moved(server: RedisServer, raw: redis.Redis, config: Path) -> None:
    store = open_store(server)
    fill_shard(store)
    store.close()
    before = original_view(raw, "1")

    done = run(config, "--shard", "1", "--to", "compact", "--batch", "9")

    assert done.returncode == 0, done
    lines = done.stdout.splitlines()
    assert lines[0] == f"shard 1 on {server.host}:{server.port}: moving to the compact layout, 9 jobs per call"
    in_a = sum(1 for q, _, _ in before.jobs if q == "a")
    assert any(line.startswith(f"queue a: {in_a} job(s) moved in ") for line in lines), lines
    assert "queue b: 5 job(s) moved in 1 call(s): PENDING 5, IN_PROGRESS 0, SUCCEEDED 0, FAILED 0" in lines
    assert lines[-3].startswith("done: shard 1 is in the compact layout (pll:{1} = compact); 2 queue(s), ")
    assert lines[-2] == "  1 counters of deleted queues copied"
    assert lines[-1] == f'next: set "layout": "compact" for shard 1 in {config}, then start the servers'
    assert done.stderr == ""
    assert compact_view(raw, "1") == before

    unsaid = write_shard_config(config.parent / "unsaid.json", {"1": server}, layout=None)
    done = run(unsaid, "--shard", "1", "--to", "original")
    assert done.returncode == 0, done
    assert done.stdout.splitlines()[-1] == (
        f'next: start the servers (shard 1 has no "layout" in {unsaid}, so its record decides: original)'
    )
    assert original_view(raw, "1") == before


def records_moved(raw: redis.Redis) -> int:
    """Job records in queue q's compact hash, which also holds the queue's own fields (c, id, t{p})."""
    names: list[bytes] = raw.hkeys("plc:{1:q}:j")  # type: ignore[assignment]
    return sum(1 for name in names if name not in (b"c", b"id") and not re.fullmatch(rb"t\d+", name))


def test_a_run_killed_half_way_is_finished_by_the_next(server: RedisServer, raw: redis.Redis, config: Path) -> None:
    store = open_store(server)
    store.create_queue("q", 2)
    for start in range(0, 3000, 500):
        store.enqueue_jobs("q", [NewJob(1 + i % 2, b"job %d" % i, T0 + i, 2) for i in range(start, start + 500)], T0)
    store.close()
    before = original_view(raw, "1")

    proc = subprocess.Popen(
        command(config, "--shard", "1", "--to", "compact", "--batch", "1"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: records_moved(raw) >= 20, timeout=30, what="some jobs to move")
        raw.client_pause(30_000, all=False)  # its next call blocks: the run stops half-way, for sure
        proc.kill()
        proc.wait(30)
    finally:
        raw.client_unpause()
        if proc.poll() is None:
            proc.kill()
            proc.wait()

    assert raw.get("pll:{1}") == b"migrating"
    half = both_layouts(raw)
    assert 20 <= len(compact_view(raw, "1").jobs) < len(before.jobs)
    assert half.jobs == before.jobs
    with pytest.raises(ConfigError, match="migrate-layout"):  # a half-moved shard is served by nobody
        open_store(server)

    done = run(config, "--shard", "1", "--to", "compact")
    assert done.returncode == 0, done
    assert compact_view(raw, "1") == before
    assert raw.get("pll:{1}") == b"compact"


def test_refuses_while_a_server_of_the_shard_is_connected(server: RedisServer, raw: redis.Redis, config: Path) -> None:
    store = open_store(server)
    store.create_queue("q", 1)
    store.enqueue_jobs("q", [NewJob(1, b"x", T0, 1)], T0)
    try:
        line = one_line_error(run(config, "--shard", "1", "--to", "compact"), 1)
        assert line.startswith(f"pinlater migrate-layout: shard 1 on {server.host}:{server.port}: 1 connection(s)")
        assert "pinlater-shard-1" in line and line.endswith("or pass --force")
        assert raw.exists("pln_1") and not raw.exists("plc:{1}:q")
        done = run(config, "--shard", "1", "--to", "compact", "--force")
        assert done.returncode == 0, done
    finally:
        store.close()
    assert raw.get("pll:{1}") == b"compact"


@pytest.mark.parametrize(
    ("args", "code", "expected"),
    [
        (["--shard", "9", "--to", "compact"], 2, "no shard '9' in "),
        (["--shard", "1", "--to", "tiny"], 2, "invalid choice: 'tiny'"),
        (["--shard", "1", "--to", "compact", "--batch", "0"], 2, "must be a whole number of at least 1, not '0'"),
        (["--shard", "1", "--to", "compact", "--batch", "10001"], 2, "must be at most 10000 (a call of more jobs"),
        (["--shard", "1"], 2, "the following arguments are required: --to"),
    ],
)
def test_bad_flags_are_one_line_errors(config: Path, args: list[str], code: int, expected: str) -> None:
    line = one_line_error(run(config, *args), code)
    assert line.startswith("pinlater migrate-layout") and expected in line, line


def test_an_unreachable_redis_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "redis.json"
    path.write_text('{"shards": [{"name": "1", "shardConfig": {"master": {"host": "127.0.0.1", "port": 1}}}]}')
    line = one_line_error(run(path, "--shard", "1", "--to", "compact"), 1)
    assert line.startswith("pinlater migrate-layout: shard 1 on 127.0.0.1:1: "), line


def test_a_cluster_shard_is_refused_from_its_config(tmp_path: Path) -> None:
    path = tmp_path / "redis.json"
    path.write_text('{"shards": [{"name": "1", "shardConfig": {"cluster": [{"host": "127.0.0.1", "port": 7000}]}}]}')
    line = one_line_error(run(path, "--shard", "1", "--to", "original"), 2)
    assert line == (
        "pinlater migrate-layout: shard 1 is a Redis Cluster, which can only hold the compact layout: "
        "there is nothing to move"
    )


def test_help_says_how_large_a_batch_may_be(config: Path) -> None:
    done = run(config, "--help")
    assert done.returncode == 0
    assert "jobs per call, 1 to 10000 (default 500)" in " ".join(done.stdout.split())


def fill_many(server: RedisServer, queues: int, jobs: int) -> None:
    store = open_store(server)
    try:
        for q in range(queues):
            store.create_queue(f"q{q}", 1)
            store.enqueue_jobs(f"q{q}", [NewJob(1, b"x", T0, 1)] * jobs, T0)
    finally:
        store.close()


def test_ctrl_c_during_the_move_is_one_line_and_the_next_run_resumes(
    server: RedisServer, raw: redis.Redis, config: Path
) -> None:
    fill_many(server, 1, 5000)
    proc = subprocess.Popen(
        command(config, "--shard", "1", "--to", "compact", "--batch", "1"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    proc.stdout.readline()  # "shard 1 on ...: moving to the compact layout"
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert err.strip() == (
        "pinlater migrate-layout: shard 1: interrupted; nothing is lost or duplicated: "
        "run the same command again to resume the move"
    ), err
    assert not raw.exists("pll-lock:{1}")  # released: the next run need not wait
    assert run(config, "--shard", "1", "--to", "compact").returncode == 0
    assert len(compact_view(raw, "1").jobs) == 5000


def test_a_closed_stdout_is_one_line(server: RedisServer, raw: redis.Redis, config: Path) -> None:
    fill_many(server, 20, 100)
    proc = subprocess.Popen(
        command(config, "--shard", "1", "--to", "compact", "--batch", "1"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.readline()
    proc.stdout.close()  # as `| head -1` does
    with proc.stderr:
        err = proc.stderr.read()
    assert proc.wait(timeout=60) == 1
    assert err.strip() == (
        "pinlater migrate-layout: shard 1: stopped: standard output was closed; run the command again to resume"
    ), err
    assert run(config, "--shard", "1", "--to", "compact").returncode == 0


def test_a_queue_name_that_is_not_utf8_is_one_line(raw: redis.Redis, config: Path) -> None:
    raw.zadd("pln_1", {b"\xff": T0})
    line = one_line_error(run(config, "--shard", "1", "--to", "compact"), 1)
    assert line.endswith(
        "pln_1 names a queue that is not UTF-8 text (b'\\xff'): no server writes such a name; "
        "remove it from there, then run again"
    ), line


def test_a_second_run_is_refused_with_one_line(raw: redis.Redis, config: Path) -> None:
    other = raw.connection_pool.get_connection()  # a live connection holds the lock
    try:
        other.send_command("CLIENT", "ID")
        holder = other.read_response()
        raw.set("pll-lock:{1}", f"pinlater-migrate-1 to original, pid 9 on h, client {holder}, started x", ex=30)
        line = one_line_error(run(config, "--shard", "1", "--to", "compact"), 1)
    finally:
        raw.connection_pool.release(other)
    assert line.endswith(
        f"another run holds pll-lock:{{1}}: pinlater-migrate-1 to original, pid 9 on h, client {holder}, "
        "started x; wait for it to finish"
    ), line


def test_a_redis_that_stops_answering_fails_the_command_within_its_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No hidden retries: redis-py's default (10 retries with exponential backoff) would make
    the command wait over 11 minutes with the real 60 s timeout. Here with a 0.2 s timeout."""
    from pinlater.cli import migrate_layout

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)  # the kernel completes the handshakes; nobody ever reads
    port = silent.getsockname()[1]
    path = tmp_path / "redis.json"
    path.write_text(
        json.dumps({"shards": [{"name": "1", "shardConfig": {"master": {"host": "127.0.0.1", "port": port}}}]})
    )
    monkeypatch.setattr(migrate_layout, "SOCKET_TIMEOUT_SECONDS", 0.2)
    args = argparse.Namespace(backend_config=path, shard="1", to="compact", batch=10, force=False)
    result: list[int] = []
    worker = threading.Thread(target=lambda: result.append(migrate_layout.run(args)), daemon=True)
    started = time.monotonic()
    worker.start()
    worker.join(timeout=5)
    silent.close()
    assert result == [1], f"still waiting after {time.monotonic() - started:.1f} s (timeout 0.2 s)"
