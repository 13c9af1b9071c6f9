"""Per-queue dequeue rate limits, as the original configured them.

The queue config file (QUEUE_CONFIG_FILE_PATH) is JSON:
``{"queues": [{"name": "q", "queueConfig": {"maxJobsPerSecond": 10.5}}]}``. A queue that is not
listed is unlimited; 0 pauses it. With SERVER_SET_ENABLED the configured rate is split evenly
between the live servers listed in the ServerSet file (one ``host:port`` per line), so a
fleet together holds the configured rate; a server of several processes (SERVER_PROCESSES) splits
its share evenly between them. The token buckets live in the Rust extension
(``RateLimiter``), charged by the number of jobs a dequeue asks for.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from pinlater._pinlater import RateLimiter
from pinlater.errors import ConfigError, ErrorCode, PinLaterError
from pinlater.queue_rules import parse_queue_file

log = logging.getLogger(__name__)


def parse_queue_config(text: str) -> dict[str, float]:
    """Queue name -> max jobs per second (``queue_rules.parse_queue_file``: the rules are checked
    too, so a file is taken or refused whole); raises ``ConfigError`` with the reason."""
    return parse_queue_file(text).rates


def parse_server_set(text: str) -> list[str]:
    """The distinct ``host:port`` entries of a ServerSet file (blank lines and # comments
    skipped): a server listed twice counts once (it divided every rate by one server too many),
    and a host with blanks or a port past 65535 is refused."""
    servers: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        host, sep, port = line.rpartition(":")
        if not sep or not host or any(c.isspace() for c in host) or not (port.isascii() and port.isdigit()):
            raise ConfigError(f"expected host:port, got {line!r}")
        if not 0 < int(port) <= 65535:
            raise ConfigError(f"port {port} of {line!r} is not in 1..65535")
        if line not in servers:
            servers.append(line)
    return servers


class QueueRateLimits:
    """Holds the configured rates and the server count, and keeps the buckets in step."""

    def __init__(self, limiter: RateLimiter | None = None, processes: int = 1) -> None:
        self.limiter = limiter or RateLimiter()
        self._configured: dict[str, float] = {}
        self._servers = 1
        #: Processes of this server, each holding an even share of its rate.
        self._processes = processes

    @property
    def configured(self) -> Mapping[str, float]:
        return dict(self._configured)

    @property
    def server_count(self) -> int:
        return self._servers

    def effective_rate(self, queue: str) -> float | None:
        rate = self._configured.get(queue)
        return None if rate is None else rate / (self._servers * self._processes)

    def apply_queue_config(self, text: str) -> None:
        """Take the file's rates, whole or not at all: a file refused (``ConfigError``), or one the
        limiter fails on part way, leaves the last good rates in force."""
        self.apply_rates(parse_queue_config(text))

    def apply_rates(self, rates: Mapping[str, float]) -> None:
        """Take a parsed file's rates (``apply_queue_config``): the buckets of the queues whose
        rate changed are set, those of queues no longer listed removed."""
        last, self._configured = self._configured, dict(rates)
        try:
            self._sync(last)
        except Exception:
            self._configured = last
            self._sync()
            raise

    def apply_server_set(self, text: str) -> None:
        servers = parse_server_set(text)
        if not servers:
            log.warning("ServerSet file lists no servers; keeping the count of %d", self._servers)
            return
        self._servers = len(servers)
        self._sync()

    def _sync(self, last: Mapping[str, float] | None = None) -> None:
        """Bring the buckets in step with the configured rates: every queue's, or with ``last``
        (the rates the buckets hold, the server count unchanged) only the changed ones'."""
        for queue, rate in self._configured.items():
            if last is None or last.get(queue) != rate:
                self.limiter.set_rate(queue, rate / (self._servers * self._processes))
        for queue in set(self.limiter.rates()) - set(self._configured):
            self.limiter.remove(queue)

    def check_dequeue(self, queue: str, jobs: int) -> None:
        """Charge ``jobs`` to the queue's bucket or raise DEQUEUE_RATE_LIMITED."""
        if not self.limiter.try_acquire(queue, jobs):
            rate = self.effective_rate(queue)
            detail = (
                "paused"
                if rate == 0
                else f"limited to {rate:g} jobs/s on this server{' process' if self._processes > 1 else ''}"
            )
            raise PinLaterError(ErrorCode.DEQUEUE_RATE_LIMITED, f"queue {queue} is {detail}")
