"""The processes ``pinlater bench`` starts itself: redis-server or mariadbd in a temporary
directory on a free loopback port, and ``pinlater serve`` in front of them. Each is stopped by
its PID. A missing binary raises ``MissingBinaryError`` naming the package to install.

Readiness is checked without client libraries: redis answers ``PING`` on a raw socket, MariaDB
sends its handshake as soon as it accepts connections.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

READY = re.compile(r"serving PinLater on [\d.]+:(\d+) \(admin http://[\d.]+:(\d+)/\)")
HOST = "127.0.0.1"
SHARD = "1"
_SEARCH_DIRS = ("/usr/sbin", "/usr/bin", "/usr/libexec", "/usr/local/sbin", "/usr/local/bin")


class MissingBinaryError(RuntimeError):
    """A server binary is not installed."""


class StartError(RuntimeError):
    """A process exited or did not become ready; the message carries the end of its log."""


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process (all its threads), from /proc/PID/stat."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def tree_cpu_seconds(pid: int) -> float:
    """CPU of a process and of its running descendants (``pinlater serve --processes N`` runs
    N - 1 children); a descendant that ended meanwhile is not counted."""
    total = cpu_seconds(pid)
    for child in children(pid):
        try:
            total += tree_cpu_seconds(child)
        except OSError:
            continue  # ended meanwhile
    return total


def children(pid: int) -> list[int]:
    """The children of a process, from /proc/PID/task/*/children."""
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                out += [int(c) for c in f.read().split()]
        except OSError:
            continue
    return out


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def find_binary(name: str, env: str, package: str) -> str:
    """``$env``, then PATH, then the usual system directories."""
    candidates = [os.environ.get(env, ""), shutil.which(name) or ""]
    candidates += [os.path.join(d, name) for d in _SEARCH_DIRS]
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise MissingBinaryError(f"{name} not found (looked at ${env}, PATH, {', '.join(_SEARCH_DIRS)}): install {package}")


def _wait(cond: Callable[[], bool], proc: subprocess.Popen[bytes], timeout: float, what: str, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise StartError(f"{what} exited with status {proc.returncode}: {_tail(log)}")
        if cond():
            return
        time.sleep(0.05)
    stop_process(proc)
    raise StartError(f"{what} not ready after {timeout:g}s: {_tail(log)}")


def _tail(log: Path, chars: int = 600) -> str:
    try:
        return " ".join(log.read_text(errors="replace")[-chars:].split()) or "(empty log)"
    except OSError:
        return "(no log)"


def stop_process(proc: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    """SIGTERM, then SIGKILL after ``timeout``; idempotent."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class LocalStore:
    """A store server process and the ``--backend-config`` that points the server at it."""

    def __init__(self, kind: str, proc: subprocess.Popen[bytes], port: int, config: dict[str, object]) -> None:
        self.kind = kind
        self.proc = proc
        self.port = port
        self.config = config

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        stop_process(self.proc)


def _answers(port: int, send: bytes, expect: bytes) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=0.5) as sock:
            if send:
                sock.sendall(send)
            return sock.recv(64).startswith(expect) if expect else bool(sock.recv(64))
    except OSError:
        return False


def start_redis(directory: Path) -> LocalStore:
    """redis-server with the AOF on (``appendfsync everysec``), as queues should run."""
    binary = find_binary("redis-server", "PINLATER_REDIS_SERVER", "the Debian package redis-server")
    directory.mkdir(parents=True, exist_ok=True)
    port = free_port()
    log = directory / "redis.log"
    args = [
        binary,
        "--port", str(port),
        "--bind", HOST,
        "--dir", str(directory),
        "--daemonize", "no",
        "--save", "",
        "--appendonly", "yes",
        "--appendfsync", "everysec",
        "--logfile", str(log),
    ]  # fmt: skip
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _wait(lambda: _answers(port, b"PING\r\n", b"+PONG"), proc, 15, "redis-server", log)
    shard = {"name": SHARD, "shardConfig": {"master": {"host": HOST, "port": port}}}
    return LocalStore("redis", proc, port, {"shards": [shard]})


def start_mariadb(directory: Path, buffer_pool: str = "128M") -> LocalStore:
    """mariadbd on a fresh datadir (``mariadb-install-db``), durable commits, root on loopback."""
    server = find_binary("mariadbd", "PINLATER_MARIADBD", "the Debian package mariadb-server")
    install_db = find_binary("mariadb-install-db", "PINLATER_MARIADB_INSTALL_DB", "the Debian package mariadb-server")
    directory.mkdir(parents=True, exist_ok=True)
    datadir = directory / "data"
    innodb = [f"--innodb-buffer-pool-size={buffer_pool}", "--innodb-log-file-size=64M"]
    user = ["--user=root"] if os.geteuid() == 0 else []
    install = subprocess.run(
        [install_db, "--no-defaults", f"--datadir={datadir}", "--auth-root-authentication-method=normal",
         "--skip-test-db", "--skip-name-resolve", *innodb, *user],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        check=False,
    )  # fmt: skip
    if install.returncode != 0:
        raise StartError(f"mariadb-install-db failed ({install.returncode}): {' '.join(install.stdout[-600:].split())}")
    port = free_port()
    log = directory / "mariadb.err"
    cmd = [
        server, "--no-defaults", f"--datadir={datadir}", f"--port={port}", f"--bind-address={HOST}",
        f"--socket={directory / 'mariadb.sock'}", f"--pid-file={directory / 'mariadb.pid'}", f"--log-error={log}",
        "--skip-name-resolve", "--character-set-server=utf8mb4", "--collation-server=utf8mb4_general_ci",
        "--innodb-flush-log-at-trx-commit=1", "--max-connections=500", *innodb, *user,
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _wait(lambda: _answers(port, b"", b""), proc, 60, "mariadbd", log)
    endpoint = {"host": HOST, "port": port}
    entry = {"master": endpoint, "slave": dict(endpoint), "user": "root", "passwd": "", "dequeueOnly": False}
    return LocalStore("mysql", proc, port, {SHARD: entry})


class LocalServer:
    """``pinlater serve`` on free ports (``processes`` of them on one port), its output in
    ``server.log`` (a file: nobody must read a pipe)."""

    def __init__(self, directory: Path, backend: str, store: LocalStore | None, processes: int = 1) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.log_path = directory / "server.log"
        cmd = [sys.executable, "-m", "pinlater.cli", "serve", "--port", "0", "--admin-port", "0"]
        cmd += ["--data-dir", str(directory / "data"), "--backend", backend, "--processes", str(processes)]
        if store is not None:
            config = directory / f"{backend}.json"
            config.write_text(json.dumps(store.config))
            cmd += ["--backend-config", str(config)]
        self.port = self.admin_port = 0
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        _wait(self._ready, self.proc, 60, "pinlater serve", self.log_path)

    def _ready(self) -> bool:
        m = READY.search(self.log_path.read_text(errors="replace"))
        if m:
            self.port, self.admin_port = int(m.group(1)), int(m.group(2))
        return m is not None

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        stop_process(self.proc)
