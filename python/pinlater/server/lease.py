"""The request slot a connection's request holds (``transport.RequestSlots``), and how a long poll
gives it back while it waits.

``MAX_CONCURRENT_REQUESTS`` bounds the requests being worked on at once. A long poll
(``dequeueJobs`` with ``waitMillis``) that finds nothing waits up to 30 s for a job, doing no
work; while it held its slot, 1,024 idle long polls (the default bound; more workers than that
long-polling an empty queue, or one peer opening that many connections) left no slot for any
other request, and every client stalled until the polls expired. So a long poll gives its slot
back while it waits and takes one again, in line with every other request, before each dequeue
it makes (``handler._long_poll``). Waiting long polls are bounded by the connections instead,
one request per connection at a time: a connection lost while its long poll waits ends the poll
at once (``Connection.connection_lost`` cancels it), and one whose peer has closed its side
(``eof_received``: gone, or half-closed to read the answer) answers empty at its next wake, within
the recheck interval (0.2 s; longer while hundreds wait: ``handler.RECHECKS_PER_SECOND``),
without dequeuing; so a peer that sends one and hangs up, again and
again, leaves none behind to claim jobs for nobody. ``RequestSlots.resting`` counts them
(``/stats.txt``'s ``long_polls_waiting``; ``requests_in_flight`` counts them too, as before).
A count, scan or delete with a body filter rests the same way for its backend call
(``handler._filtered``): its store calls take the backend's few filter turns, which bound
their work. ``RequestSlots.filtering`` counts those (``filtered_calls_running``).
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pinlater.server.transport import RequestSlots

__all__ = ["RequestLease", "current_lease"]


class RequestLease:
    """One connection's hold on a request slot, for the request it is serving (one at a time)."""

    __slots__ = ("held", "idle", "lost", "resting", "slots")

    def __init__(self, slots: RequestSlots) -> None:
        self.slots = slots
        #: Whether the request holds a slot now.
        self.held = False
        #: Whether it gave its slot back (``rest``): counted in ``RequestSlots.resting`` while
        #: ``idle``, else in ``RequestSlots.filtering``.
        self.resting = False
        #: The connection is gone, or its peer closed its side: a long poll makes no more dequeues.
        self.lost = False
        #: It rests doing nothing (a long poll's wait, not a filtered call's store work): a lost
        #: connection cancels it (``Connection.connection_lost``).
        self.idle = False

    def take_now(self) -> bool:
        """Take a slot if one is free and nobody waits for one (``RequestSlots.take_now``)."""
        if self.slots.take_now():
            self.held = True
            return True
        return False

    async def take(self) -> None:
        """Wait in line for a slot, as any request (cancelled: none is held); a resting request
        counts as resting until it has one."""
        if not self.take_now():
            await self.slots.take()
            self.held = True
        self._wake()

    def release(self) -> None:
        """Give the slot back, if held."""
        if self.held:
            self.held = False
            self.slots.release()

    def rest(self, idle: bool = True) -> None:
        """Give the slot back to wait without working (a long poll: ``idle``), or while work its
        slot does not bound runs (a body-filtered call's store calls); ``take`` before working
        again."""
        self.release()
        if self.resting:
            self._count(-1)
        self.idle = idle
        self.resting = True
        self._count(1)

    def end(self) -> None:
        """The request is done (answered, failed or cancelled, resting or not)."""
        self.release()
        self._wake()

    def _wake(self) -> None:
        if self.resting:
            self.resting = False
            self._count(-1)
        self.idle = False

    def _count(self, step: int) -> None:
        if self.idle:
            self.slots.resting += step
        else:
            self.slots.filtering += step


#: The lease of the request being served in this task (set by ``Connection._serve``); None
#: outside a server's connection (a handler called directly).
current_lease: ContextVar[RequestLease | None] = ContextVar("pinlater_request_lease", default=None)
