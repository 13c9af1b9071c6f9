"""Several server processes on one Thrift port (SERVER_PROCESSES > 1): one event loop per core.

``pinlater serve`` runs process 0 itself (the Thrift port, the admin port, the monitor) and a
``Supervisor`` that starts processes 1..N-1 as ``python -m pinlater.server.processes FD``, each
a full ``PinLaterServer`` over the same shards whose Thrift listener joins process 0's port
(SO_REUSEPORT: the kernel spreads new connections over the listeners). Several servers on one
store are already safe: claims are unique per process and broker reservations exclude each other.

Invariants:

* Each child talks to the supervisor over its own socket pair, in length-prefixed pickles (both
  ends are this package, started by this process): the supervisor sends ``ChildInit`` once, the
  child answers ``ChildReady`` once it serves, then a ``MetricsDelta`` every
  ``PUSH_INTERVAL_SECONDS`` and a last one after it stopped. Process 0 merges them, so
  ``/stats.txt`` and ``/metrics`` count every process (a killed child's last second is lost).
* A child that exits is logged (its status or signal) and started again, after a pause that
  doubles, up to ``MAX_RESTART_DELAY_SECONDS``, while children die young. Jobs it had claimed are
  not lost: the monitor hands them back after the claim timeout, as for any server that dies.
* SIGTERM (or SIGINT) to ``pinlater serve`` stops every process gracefully (requests in flight
  finish); a child still running ``grace + STOP_MARGIN_SECONDS`` later is killed. A child whose
  supervisor is gone (its socket reads end of file) stops itself, so none outlives its parent.
* At start, ``start()`` returns once every child serves, or raises ``ChildStartError`` with the
  exit status of the first one that could not start (its log lines are on stderr).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import logging
import os
import pickle
import signal
import socket
import struct
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pinlater import eventloop
from pinlater.config import Settings
from pinlater.server.metrics import Metrics, MetricsDelta

log = logging.getLogger(__name__)

PUSH_INTERVAL_SECONDS = 1.0
START_TIMEOUT_SECONDS = 60.0
STOP_MARGIN_SECONDS = 5.0
MIN_RESTART_DELAY_SECONDS = 0.5
MAX_RESTART_DELAY_SECONDS = 30.0
#: A child that served this long before dying restarts after the shortest pause.
HEALTHY_RUN_SECONDS = 30.0
_LENGTH = struct.Struct(">I")


class ChildStartError(RuntimeError):
    """A server process could not start (the message has its exit status)."""


@dataclass(frozen=True, slots=True)
class ChildInit:
    settings: Settings
    index: int
    log_level: str
    log_format: str


@dataclass(frozen=True, slots=True)
class ChildReady:
    pid: int


def _frame(message: object) -> bytes:
    body = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return _LENGTH.pack(len(body)) + body


async def _read_message(reader: asyncio.StreamReader) -> Any:
    """The next message, or None at end of file."""
    try:
        head = await reader.readexactly(_LENGTH.size)
        return pickle.loads(await reader.readexactly(_LENGTH.unpack(head)[0]))
    except asyncio.IncompleteReadError:
        return None


# -- the supervisor, in process 0 ----------------------------------------------------------------


@dataclass(eq=False)
class _Child:
    index: int
    proc: asyncio.subprocess.Process | None = None
    started: float = 0.0
    reading: asyncio.Task[None] | None = None
    failures: int = 0
    ready: asyncio.Future[int] | None = None
    watch: asyncio.Task[None] | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        return f"server process {self.index}"


class Supervisor:
    """Starts, watches, restarts and stops server processes 1..N-1 (see the module docstring).

    ``settings`` must carry the port process 0 bound (not 0), which the children join."""

    def __init__(self, settings: Settings, metrics: Metrics, log_level: str, log_format: str) -> None:
        assert settings.port != 0, "children join the port process 0 bound"
        self.settings = settings
        self.metrics = metrics
        self.log_level = log_level
        self.log_format = log_format
        self.children = [_Child(i) for i in range(1, settings.server_processes)]
        self._stopping = False
        metrics.gauge("server_processes", self._live)

    def _live(self) -> int:
        return 1 + sum(1 for c in self.children if c.proc is not None and c.proc.returncode is None)

    def pids(self) -> list[int]:
        """PIDs of the children running now."""
        return [c.proc.pid for c in self.children if c.proc is not None and c.proc.returncode is None]

    async def start(self) -> None:
        """Start every child and return once all serve; ``ChildStartError`` if one cannot."""
        for child in self.children:
            child.ready = asyncio.get_running_loop().create_future()
            child.watch = asyncio.create_task(self._watch(child), name=f"pinlater-{child.name}")
        for child in self.children:
            assert child.ready is not None
            try:
                await asyncio.wait_for(asyncio.shield(child.ready), START_TIMEOUT_SECONDS)
            except TimeoutError:
                raise ChildStartError(f"{child.name} did not serve within {START_TIMEOUT_SECONDS:g}s") from None

    async def _spawn(self, child: _Child) -> None:
        ours, theirs = socket.socketpair()
        try:
            package_root = str(Path(__file__).resolve().parents[2])
            path = os.environ.get("PYTHONPATH")
            env = dict(os.environ, PYTHONPATH=package_root + (os.pathsep + path if path else ""))
            child.proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "pinlater.server.processes",
                str(theirs.fileno()),
                pass_fds=(theirs.fileno(),),
                stdin=asyncio.subprocess.DEVNULL,
                env=env,
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        child.started = time.monotonic()
        reader, writer = await asyncio.open_connection(sock=ours)
        writer.write(_frame(ChildInit(self.settings, child.index, self.log_level, self.log_format)))
        child.reading = asyncio.create_task(self._read(child, reader, writer))

    async def _read(self, child: _Child, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Merge the child's deltas until its end of the socket closes (it exited)."""
        try:
            while (message := await _read_message(reader)) is not None:
                if isinstance(message, MetricsDelta):
                    self.metrics.merge(child.name, message)
                elif isinstance(message, ChildReady):
                    log.info("%s serving (pid %d)", child.name, message.pid)
                    if child.ready is not None and not child.ready.done():
                        child.ready.set_result(message.pid)
        except (OSError, pickle.UnpicklingError, EOFError) as exc:
            log.error("%s: lost its stats stream: %s", child.name, exc)
        finally:
            writer.close()

    async def _watch(self, child: _Child) -> None:
        """Run the child; when it exits, say so and start another (until stopping)."""
        while True:
            try:
                await self._spawn(child)
            except OSError as exc:
                log.error("cannot start %s: %s", child.name, exc)
                if child.ready is not None and not child.ready.done():
                    child.ready.set_exception(ChildStartError(f"cannot start {child.name}: {exc}"))
                    return
            else:
                assert child.proc is not None and child.reading is not None
                status = await child.proc.wait()
                await child.reading  # its last delta, sent after it stopped
                self.metrics.forget(child.name)
                if self._stopping:
                    return
                if child.ready is not None and not child.ready.done():
                    child.ready.set_exception(ChildStartError(f"{child.name} exited at start: {_status(status)}"))
                    return
                ran = time.monotonic() - child.started
                child.failures = 0 if ran >= HEALTHY_RUN_SECONDS else child.failures + 1
                log.error(
                    "%s (pid %d) %s after %.1fs; starting another", child.name, child.proc.pid, _status(status), ran
                )
            delay = min(MAX_RESTART_DELAY_SECONDS, MIN_RESTART_DELAY_SECONDS * 2 ** max(0, child.failures - 1))
            await asyncio.sleep(delay)
            if self._stopping:
                return

    async def stop(self, grace_seconds: float = 10.0) -> None:
        """SIGTERM every child (they finish requests in flight), kill any still running later."""
        self._stopping = True
        for child in self.children:
            if child.proc is not None and child.proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    child.proc.send_signal(signal.SIGTERM)
        watches = [c.watch for c in self.children if c.watch is not None]
        if not watches:
            return
        _, pending = await asyncio.wait(watches, timeout=grace_seconds + STOP_MARGIN_SECONDS)
        for child in self.children:
            if child.proc is not None and child.proc.returncode is None:
                log.error("%s (pid %d) did not stop in time: killing it", child.name, child.proc.pid)
                with contextlib.suppress(ProcessLookupError):
                    child.proc.kill()
        if pending:
            await asyncio.wait(pending, timeout=STOP_MARGIN_SECONDS)
        for task in pending:
            task.cancel()


def _status(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with status {returncode}"


# -- a child ------------------------------------------------------------------------------------


def child_main(fd: int) -> int:
    """Entry point of server process 1..N-1: read its ``ChildInit``, serve until told to stop."""
    from pinlater.logs import setup_logging

    sock = socket.socket(fileno=fd)
    head = _recv_exactly(sock, _LENGTH.size)
    init = pickle.loads(_recv_exactly(sock, _LENGTH.unpack(head)[0]))
    assert isinstance(init, ChildInit)
    setup_logging(init.log_level, init.log_format, sys.stderr)
    for handler in logging.getLogger().handlers:  # every line says which process wrote it
        handler.addFilter(_ProcessTag(init.index))
    try:
        return eventloop.run(_serve_child(sock, init), init.settings.event_loop)
    except Exception:
        log.exception("server process %d failed", init.index)
        return 1


class _ProcessTag(logging.Filter):
    """Adds ``server_process=N`` to a child's log lines (an ``extra`` field in both formats)."""

    def __init__(self, index: int) -> None:
        super().__init__()
        self.index = index

    def filter(self, record: logging.LogRecord) -> bool:
        record.server_process = self.index
        return True


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise EOFError("the supervisor closed the socket")
        data += chunk
    return data


async def _serve_child(sock: socket.socket, init: ChildInit) -> int:
    from pinlater.server.app import PinLaterServer

    server = PinLaterServer(init.settings, init.index)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    reader, writer = await asyncio.open_connection(sock=sock)
    try:
        await server.start()
    except BaseException:
        await server.stop(0)
        raise
    writer.write(_frame(ChildReady(os.getpid())))
    gc.freeze()  # as process 0 does (cli/serve.py)

    async def parent_gone() -> None:
        await reader.read()  # nothing more is sent: end of file means the supervisor is gone
        if not stop.is_set():
            log.error("server process %d: the supervisor is gone; stopping", init.index)
            stop.set()

    async def push() -> None:
        with contextlib.suppress(OSError):  # the supervisor is gone: parent_gone stops us
            while True:
                await asyncio.sleep(PUSH_INTERVAL_SECONDS)
                writer.write(_frame(server.metrics.take_delta()))
                await writer.drain()

    tasks = [asyncio.create_task(parent_gone()), asyncio.create_task(push())]
    await stop.wait()
    await server.stop()
    for task in tasks:
        task.cancel()
    with contextlib.suppress(OSError):
        writer.write(_frame(server.metrics.take_delta()))
        await writer.drain()
        writer.close()
    return 0


def settings_for_children(settings: Settings, port: int) -> Settings:
    """The children's settings: process 0's, with the port it bound (``--port 0`` picks one)."""
    return dataclasses.replace(settings, port=port)


if __name__ == "__main__":
    # Run from the module under its own name, so what is pickled names pinlater.server.processes.
    from pinlater.server import processes

    sys.exit(processes.child_main(int(sys.argv[1])))
