"""Runs a real ``pinlater serve`` process for tests, on free loopback ports, stopped by PID."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

from tests.support.wait import wait_for

READY = re.compile(r"serving PinLater on ([\d.]+):(\d+) \(admin http://([\d.]+):(\d+)/\)")


class ServerProcess:
    """``pinlater serve --port 0 --admin-port 0`` in a subprocess; log lines are collected."""

    def __init__(self, data_dir: Path, *extra: str, properties: Path | None = None) -> None:
        self.data_dir = data_dir
        self.extra = list(extra)
        self.properties = properties
        self.proc: subprocess.Popen[str] | None = None
        self.port = 0
        self.admin_port = 0
        self.lines: list[str] = []
        self._reader: threading.Thread | None = None

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "pinlater.cli", "serve", "--port", "0", "--admin-port", "0"]
        cmd += ["--data-dir", str(self.data_dir)]
        if self.properties is not None:
            cmd += ["--properties", str(self.properties)]
        return cmd + self.extra

    def start(self, timeout: float = 30.0) -> ServerProcess:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.lines = []
        self.proc = subprocess.Popen(
            self.command(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
        )
        self._reader = threading.Thread(target=self._read, args=(self.proc,), daemon=True)
        self._reader.start()

        def ready() -> bool:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"pinlater serve exited with {self.proc.returncode}:\n{self.output()}")
            for line in self.lines:
                m = READY.search(line)
                if m:
                    self.port, self.admin_port = int(m.group(2)), int(m.group(4))
                    return True
            return False

        try:
            wait_for(ready, timeout, what="pinlater serve to listen")
        except AssertionError:
            self.kill()
            raise AssertionError(f"pinlater serve did not start:\n{self.output()}") from None
        return self

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        with proc.stdout:
            for line in proc.stdout:
                self.lines.append(line.rstrip("\n"))

    def output(self) -> str:
        return "\n".join(self.lines)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def terminate(self, timeout: float = 30.0) -> int:
        """SIGTERM and wait; returns the exit code."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout)
        if self._reader is not None:
            self._reader.join(5)
        return code

    def kill(self) -> None:
        """SIGKILL, as a crash would."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        if self._reader is not None:
            self._reader.join(5)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            self.terminate(15)
        except subprocess.TimeoutExpired:
            self.kill()
