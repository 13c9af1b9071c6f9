"""Review findings for ``pinlater migrate-layout``'s command line (a real redis-server)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.redis_layouts import T0
from tests.support.redis_server import RedisServer, write_shard_config

from pinlater.backends.base import NewJob
from pinlater.backends.redis import RedisEndpoint, RedisShardConfig, RedisStore

pytestmark = pytest.mark.redis


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    with RedisServer(tmp_path / "redis") as srv:
        yield srv


def test_ctrl_c_during_the_move_is_one_line(server: RedisServer, tmp_path: Path) -> None:
    """README: 'If the run is interrupted (a crash, Ctrl-C, ...)'; the module: 'A failure ends the
    command with one line on stderr'. run() catches MigrationError and RedisError only, and
    __main__ nothing: Ctrl-C prints a KeyboardInterrupt traceback."""
    store = RedisStore("1", RedisShardConfig(RedisEndpoint(server.host, server.port), layout="original"))
    store.create_queue("q", 1)
    for _ in range(10):
        store.enqueue_jobs("q", [NewJob(1, b"x", T0, 1)] * 500, T0)
    store.close()
    config = write_shard_config(tmp_path / "redis.json", {"1": server}, layout="original")
    cmd = [sys.executable, "-m", "pinlater.cli", "migrate-layout", "--backend-config", str(config)]
    proc = subprocess.Popen(
        [*cmd, "--shard", "1", "--to", "compact", "--batch", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    proc.stdout.readline()  # "shard 1 on ...: moving to the compact layout"
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err


def test_a_redis_that_stops_answering_fails_the_command_within_its_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """migrate_layout.py:156 says the 60 s socket timeout 'bounds a Redis that stopped
    answering'; but the client is made with redis-py's default retry (8.x: 10 retries with
    exponential backoff), so the command waits about 11 timeouts plus the backoff before its
    one line: over 11 minutes with the real 60 s. Here with a 0.2 s timeout."""
    import argparse
    import socket
    import threading

    from pinlater.cli import migrate_layout

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)  # the kernel completes the handshakes; nobody ever reads
    port = silent.getsockname()[1]
    config = tmp_path / "redis.json"
    config.write_text(
        '{"shards": [{"name": "1", "shardConfig": {"master": {"host": "127.0.0.1", "port": %d}}}]}' % port
    )
    monkeypatch.setattr(migrate_layout, "SOCKET_TIMEOUT_SECONDS", 0.2)
    args = argparse.Namespace(backend_config=config, shard="1", to="compact", batch=10, force=False)
    result: list[int] = []
    worker = threading.Thread(target=lambda: result.append(migrate_layout.run(args)), daemon=True)
    started = time.monotonic()
    worker.start()
    worker.join(timeout=5)
    silent.close()
    assert result == [1], f"still waiting after {time.monotonic() - started:.1f} s (timeout 0.2 s)"
