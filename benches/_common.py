"""Helpers shared by the benchmark scripts: the server's ready line, CPU from /proc, the Thrift client.

The scripts run as ``python benches/NAME.py``, so this module is imported as ``_common`` (the
script's own directory is first on ``sys.path``).
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
from collections.abc import Iterable
from typing import Any

READY = re.compile(r"serving PinLater on [\d.]+:(\d+) \(admin http://[\d.]+:(\d+)/\)")
"""The line ``pinlater serve`` logs once it listens: group 1 the Thrift port, group 2 the admin port."""


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process (all its threads, not its children), from /proc/PID/stat."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_ticks() -> tuple[int, int, int]:
    """(busy, stolen, total) clock ticks of all cores since boot, from /proc/stat. Stolen: the
    hypervisor ran something else while we had work, which makes every figure of the phase low."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:9]]
    idle, stolen = values[3] + values[4], values[7]
    return sum(values) - idle - stolen, stolen, sum(values)


def thrift_client(port: int, host: str = "127.0.0.1") -> Any:
    """thriftpy2's cython framed binary client of the PinLater service (the IDL of this tree)."""
    from thriftpy2.protocol import TCyBinaryProtocolFactory
    from thriftpy2.rpc import make_client
    from thriftpy2.transport import TCyFramedTransportFactory

    from pinlater.idl import idl

    return make_client(
        idl.PinLater,
        host,
        port,
        proto_factory=TCyBinaryProtocolFactory(),  # type: ignore[no-untyped-call]  # thriftpy2 has no stubs
        trans_factory=TCyFramedTransportFactory(),
        timeout=30_000,
    )


def await_ready(proc: subprocess.Popen[str], what: str = "server") -> tuple[int, list[str]]:
    """Read ``pinlater serve``'s output until its ready line: (Thrift port, lines so far). A
    thread then keeps collecting the rest into the same list, so the pipe never fills."""
    lines: list[str] = []
    assert proc.stdout is not None
    stdout = proc.stdout
    for line in stdout:
        lines.append(line)
        m = READY.search(line)
        if m:
            threading.Thread(target=_collect, args=(stdout, lines), daemon=True).start()
            return int(m.group(1)), lines
    raise SystemExit(f"{what} did not start (exit {proc.wait()}):\n{''.join(lines)}")


def _collect(stream: Iterable[str], lines: list[str]) -> None:
    for line in stream:
        lines.append(line)
