"""A real redis-server for tests: a free loopback port, a temporary directory, stopped by PID.

    with RedisServer(tmp_path / "redis", appendonly=True) as server:
        client = redis.Redis(server.host, server.port)
        server.kill()      # SIGKILL, as a crash
        server.restart()   # same port, same directory (the AOF is replayed)

Start-up waits until PING answers (``wait_for``, no sleeps). A missing binary fails with a
message naming the Debian package.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

import redis

from tests.support.wait import wait_for

BINARY_ENV = "PINLATER_REDIS_SERVER"
"""Environment variable naming a redis-server binary to use instead of the one on PATH."""


class RedisServerMissingError(RuntimeError):
    """No redis-server binary could be found."""


def find_redis_server() -> str:
    """The redis-server binary, or ``RedisServerMissingError`` saying how to install it."""
    binary = os.environ.get(BINARY_ENV) or shutil.which("redis-server") or "/usr/bin/redis-server"
    if not os.access(binary, os.X_OK):
        raise RedisServerMissingError(
            "redis-server not found (looked at $PINLATER_REDIS_SERVER, PATH and /usr/bin): install the Debian "
            "package redis-server (apt-get install redis-server) to run the tests marked redis"
        )
    return binary


def free_port() -> int:
    """A loopback TCP port nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """One redis-server process on 127.0.0.1 (see the module docstring)."""

    host = "127.0.0.1"

    def __init__(
        self,
        directory: Path,
        *,
        appendonly: bool = False,
        appendfsync: str = "everysec",
        extra_args: tuple[str, ...] = (),
        start_timeout: float = 10.0,
        port: int | None = None,
        wrapper: tuple[str, ...] = (),
    ) -> None:
        self.binary = find_redis_server()
        #: A command that runs the server (valgrind's, for benches/instructions_per_job.py).
        self.wrapper = wrapper
        self.directory = directory
        self.directory.mkdir(parents=True, exist_ok=True)
        self.appendonly = appendonly
        self.appendfsync = appendfsync
        self.extra_args = extra_args
        self.start_timeout = start_timeout
        self.port = free_port() if port is None else port
        self._proc: subprocess.Popen[bytes] | None = None
        self.start()

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def log_path(self) -> Path:
        return self.directory / "redis.log"

    def start(self) -> None:
        """Start the server (on this object's port and directory) and wait until PING answers."""
        if self._proc is not None and self._proc.poll() is None:
            raise RuntimeError(f"redis-server already running as PID {self._proc.pid}")
        args = [
            *self.wrapper,
            self.binary,
            "--port", str(self.port),
            "--bind", self.host,
            "--dir", str(self.directory),
            "--daemonize", "no",
            "--save", "",
            "--appendonly", "yes" if self.appendonly else "no",
            "--appendfsync", self.appendfsync,
            "--logfile", str(self.log_path),
            *self.extra_args,
        ]  # fmt: skip
        with open(self.directory / "redis.stderr", "ab") as err:
            self._proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
        state = wait_for(self._state, timeout=self.start_timeout, what=f"redis-server on port {self.port} to answer")
        if state == "exited":
            assert self._proc is not None
            stderr = (self.directory / "redis.stderr").read_text(errors="replace")[-2000:]
            log = self.log_path.read_text(errors="replace")[-2000:] if self.log_path.exists() else ""
            raise RuntimeError(f"redis-server exited with status {self._proc.returncode}:\n{stderr}{log}")

    def _state(self) -> str:
        """`ready` once PING answers, `exited` if the process died, empty (not yet) otherwise."""
        assert self._proc is not None
        if self._proc.poll() is not None:
            return "exited"
        client = redis.Redis(self.host, self.port, socket_timeout=0.5, socket_connect_timeout=0.5)
        try:
            return "ready" if client.ping() else ""
        except (redis.ConnectionError, redis.TimeoutError):
            return ""
        finally:
            client.close()

    def client(self) -> redis.Redis:
        """A new client for this server (the caller closes it)."""
        return redis.Redis(self.host, self.port, socket_timeout=5.0)

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM (Redis flushes its AOF and exits), then SIGKILL after ``timeout``. Idempotent."""
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def kill(self) -> None:
        """SIGKILL, as a crash: no shutdown work. Idempotent."""
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        proc.kill()
        proc.wait()

    def restart(self) -> None:
        """Start again on the same port and directory (after ``stop`` or ``kill``; stops first if needed)."""
        self.stop()
        self.start()

    def __enter__(self) -> RedisServer:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def write_shard_config(path: Path, shards: Mapping[str, RedisServer], layout: str | None = "original") -> Path:
    """Write the original's Redis shard config (``{"shards": [...]}``) naming these servers, each
    with ``"layout": layout`` (None: no such key, so each shard's own record decides)."""
    entries: list[dict[str, object]] = [
        {"name": name, "shardConfig": {"master": {"host": r.host, "port": r.port}}} for name, r in shards.items()
    ]
    if layout is not None:
        for entry in entries:
            entry["layout"] = layout
    path.write_text(json.dumps({"shards": entries}))
    return path
