"""Wrong admin passwords, counted by address, on each port.

The admin password guards the admin port's actions and the Thrift port's ``deleteQueue``; its
hash is one SHA-256 of a public salt (the original's scheme), so an address is allowed
``WRONG_PASSWORDS_ALLOWED`` wrong ones in ``GUESS_WINDOW_SECONDS`` (from its first) on each port
(a tally each: a local Thrift client with a stale password must not lock the operators on
loopback out of the admin port), and is then refused without its password being looked at
until that window ends. Over Thrift a peer had tried 43,600 passwords a second on one
connection, while the admin port answered 429 from the 11th.

With ``SERVER_PROCESSES`` > 1 each process counts its own Thrift connections' guesses (the admin
port is process 0's).
"""

from __future__ import annotations

from contextvars import ContextVar

#: Wrong admin passwords one address may send in ``GUESS_WINDOW_SECONDS`` (from its first); past
#: them it is refused (429 on the admin port, PASSWORD_INVALID over Thrift) until that window ends.
WRONG_PASSWORDS_ALLOWED = 10
GUESS_WINDOW_SECONDS = 60.0
#: Addresses whose wrong passwords are counted at most (the oldest window forgotten first).
GUESSERS_KEPT = 10_000

#: The host (``transport.address_host``: an IPv6 address by its /64) of the Thrift connection
#: whose call is being served: set by each connection's task for the calls it serves.
caller_host: ContextVar[str] = ContextVar("caller_host", default="")


class Guesses:
    """Wrong admin passwords by address, in windows of ``GUESS_WINDOW_SECONDS``."""

    def __init__(self) -> None:
        self._by_host: dict[str, tuple[float, int]] = {}  # (window start, wrong ones), oldest first

    def wait(self, host: str, now: float) -> float:
        """Seconds until ``host`` may try a password again: 0 unless it spent its window's."""
        start, wrong = self._by_host.get(host, (now, 0))
        left = start + GUESS_WINDOW_SECONDS - now
        return left if wrong >= WRONG_PASSWORDS_ALLOWED and left > 0 else 0.0

    def wrong(self, host: str, now: float) -> None:
        start, wrong = self._by_host.pop(host, (now, 0))
        if now - start >= GUESS_WINDOW_SECONDS:
            start, wrong = now, 0
        self._by_host[host] = (start, wrong + 1)
        if len(self._by_host) > GUESSERS_KEPT:
            del self._by_host[next(iter(self._by_host))]
