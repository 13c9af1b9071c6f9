"""Which servers a client calls: a fixed list, or a ServerSet file watched for changes.

A ServerSet file holds one ``host:port`` per line (``[v6addr]:port`` for IPv6; blank lines and
``#`` comments are ignored). The file is re-read when its identity (inode, size, mtime) changes,
checked at most every ``check_interval`` seconds when a call asks for servers, so no thread or
task is needed and the sync and asyncio clients share this class. A file that goes missing or
does not parse keeps the last good list (logged), like the server's own watched files.

Calls go round-robin; a server that refused a connection is skipped for ``down_for`` seconds
(doubling per consecutive failure, up to ``max_down_for``) unless every server is down.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import time
from collections.abc import Iterable
from pathlib import Path

from pinlater.config_files import read_config_text

log = logging.getLogger(__name__)

Address = tuple[str, int]


def parse_address(text: str) -> Address:
    """``host:port`` (or ``[v6]:port``) as a tuple; ValueError naming the text if malformed."""
    text = text.strip()
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"not a host:port address: {text!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


def parse_server_set(text: str) -> tuple[Address, ...]:
    lines = (line.split("#", 1)[0].strip() for line in text.splitlines())
    return tuple(parse_address(line) for line in lines if line)


def format_address(address: Address) -> str:
    host, port = address
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class ServerSet:
    """The current servers, their round-robin order, and which ones are marked down."""

    def __init__(
        self,
        servers: Iterable[str | Address] = (),
        *,
        path: str | os.PathLike[str] | None = None,
        check_interval: float = 0.5,
        down_for: float = 1.0,
        max_down_for: float = 30.0,
    ) -> None:
        self.path = Path(path) if path is not None else None
        self.check_interval = check_interval
        self.down_for = down_for
        self.max_down_for = max_down_for
        self._lock = threading.Lock()
        self._addresses: tuple[Address, ...] = tuple(
            parse_address(s) if isinstance(s, str) else (s[0], int(s[1])) for s in servers
        )
        self._signature: tuple[int, int, int] | None = None
        self._next_check = 0.0
        self._rr = itertools.count()
        #: address -> (monotonic time it may be tried again, consecutive failures)
        self._down: dict[Address, tuple[float, int]] = {}
        #: Bumped whenever the list changes, so pools can drop servers that left.
        self.version = 0
        if self.path is not None:
            self._reload(strict=True)
        elif not self._addresses:
            raise ValueError("no servers given")

    def addresses(self) -> tuple[Address, ...]:
        """The current list, re-reading the ServerSet file if it changed."""
        if self.path is not None and time.monotonic() >= self._next_check:
            with self._lock:
                if time.monotonic() >= self._next_check:
                    self._reload(strict=False)
        return self._addresses

    def _reload(self, strict: bool) -> None:
        assert self.path is not None
        self._next_check = time.monotonic() + self.check_interval
        signature = None
        try:
            st = os.stat(self.path)
            signature = (st.st_ino, st.st_size, st.st_mtime_ns)
            if signature == self._signature:
                return
            # (as the server reads its files: a BOM skipped, a FIFO refused, not waited on)
            addresses = parse_server_set(read_config_text(self.path, "ServerSet file", regular=True))
            if not addresses:
                raise ValueError("it lists no servers")
        except (OSError, ValueError) as exc:
            if strict:
                raise ValueError(f"ServerSet file {self.path}: {exc}") from None
            if signature != self._signature:  # once per bad version (or per disappearance), not per check
                log.warning("ServerSet file %s: %s; keeping %d server(s)", self.path, exc, len(self._addresses))
            self._signature = signature
            return
        self._signature = signature
        if addresses != self._addresses:
            log.info("ServerSet file %s: %s", self.path, ", ".join(map(format_address, addresses)))
            self._addresses = addresses
            self._down = {a: d for a, d in self._down.items() if a in addresses}
            self.version += 1

    def order(self) -> list[Address]:
        """Servers to try for one call: the next in round-robin first, servers marked down last."""
        addresses = self.addresses()
        n = len(addresses)
        start = next(self._rr) % n
        ordered = [addresses[(start + i) % n] for i in range(n)]
        if not self._down:
            return ordered
        with self._lock:  # (one reading: a mark_up on another thread between two made a KeyError)
            until = {a: self._down.get(a, (0.0, 0))[0] for a in ordered}
        now = time.monotonic()
        up = [a for a in ordered if until[a] <= now]
        down = sorted((a for a in ordered if until[a] > now), key=lambda a: until[a])
        return up + down

    def mark_down(self, address: Address) -> None:
        with self._lock:
            failures = self._down.get(address, (0.0, 0))[1] + 1
            pause = min(self.max_down_for, self.down_for * 2 ** (failures - 1))
            self._down[address] = (time.monotonic() + pause, failures)

    def mark_up(self, address: Address) -> None:
        if address in self._down:
            with self._lock:
                self._down.pop(address, None)


def make_server_set(
    servers: str | Iterable[str | Address] | ServerSet | None, path: str | os.PathLike[str] | None
) -> ServerSet:
    """What the clients accept: "host:port", a list of them, a ``ServerSet``, or a file path."""
    if isinstance(servers, ServerSet):
        return servers
    if path is not None:
        if servers is not None:
            raise ValueError("give servers or a ServerSet file, not both")
        return ServerSet(path=path)
    if servers is None:
        servers = "127.0.0.1:9010"
    if isinstance(servers, str):
        servers = [s for s in servers.replace(",", " ").split() if s]
    return ServerSet(servers)
