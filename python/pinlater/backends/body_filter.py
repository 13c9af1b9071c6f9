"""Body filters (``bodyRegexToMatch``), matched on our side for every store.

* The engine is the extension's ``BodyMatcher`` (the Rust ``regex`` crate): matching is linear in
  the body's length whatever the pattern, so ``(a+)+$`` against ``"a" * 40 + "!"`` takes
  microseconds, not days. The pattern is searched anywhere in the raw body bytes; on valid
  UTF-8 ``.`` and the classes match code points, as on the decoded text. The dialect is the
  ``regex`` crate's: ordinary patterns mean what they mean in Python's ``re``, but ``$`` matches
  only at the very end (not before a final newline), ``\\Z`` is spelled ``\\z``, and
  backreferences and look-around are refused (no linear-time algorithm exists for them).
* A pattern the engine cannot take raises ``BodyPatternError`` (a ``ValueError``) saying why in one
  line; the server answers it as a bad request. Every store matches with this engine (MySQL
  too: ``mysql/body_filtered.py``), so a pattern means the same on every backend.
* Bodies are matched a batch at a time with the interpreter released (``BodyFilter.matching``),
  never on the event loop: the stores run on the server's thread pool, at most
  ``sharded.FILTERED_CALLS`` filtered store calls at a time, so ordinary calls always find a
  thread. One request (a count over every shard and priority, a delete walking the shards) has
  ``BODY_FILTER_TIME_BUDGET_SECONDS`` from its start for all its filtering, fetching and waiting
  for a turn included (``JobFilter.deadline``); past it the call fails with
  ``BodyFilterBudgetExceeded`` rather than return a partial count. The clock is read within a
  body too when the pattern's automaton times the body's length is large: linear time is not
  cheap time (``a(?-u:[\x00-\xff]){8000}c`` over one 1 MiB body is a minute of a core).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from functools import lru_cache

from pinlater._pinlater import BodyFilterTimeout, BodyMatcher, BodyPatternError
from pinlater.errors import ErrorCode, PinLaterError
from pinlater.eventloop import off_loop

__all__ = ["BodyFilter", "BodyFilterBudgetExceeded", "BodyPatternError", "checked", "compiled", "describe"]

DEFAULT_BUDGET_SECONDS = 10.0
"""``BODY_FILTER_TIME_BUDGET_SECONDS`` when no settings are given."""

_SHOWN_PATTERN_CHARS = 80


class BodyFilterBudgetExceeded(PinLaterError):
    """A body filter did not finish within ``BODY_FILTER_TIME_BUDGET_SECONDS``."""

    def __init__(self, pattern: str, budget_seconds: float, looked: int) -> None:
        super().__init__(
            ErrorCode.UNKNOWN,
            f"body filter {describe(pattern)} stopped after matching {looked} bodies: it ran past its time "
            f"budget of {budget_seconds:g} s (BODY_FILTER_TIME_BUDGET_SECONDS); narrow it by priority, "
            "state or time, or raise the budget",
        )
        self.pattern = pattern
        self.budget_seconds = budget_seconds
        self.looked = looked

    def __reduce__(self) -> tuple[type[BodyFilterBudgetExceeded], tuple[str, float, int]]:  # type: ignore[override]
        return (type(self), (self.pattern, self.budget_seconds, self.looked))


class BodyFilterBusy(BodyFilterBudgetExceeded):
    """A body filter whose budget ran out while it waited for one of the few filter turns
    (others' filters held them): shed load, which the admin port answers 503, where a filter
    that ran past its budget on its own data fails the same way again."""


def describe(pattern: str) -> str:
    """The pattern for a message: its repr, cut short when long."""
    if len(pattern) <= _SHOWN_PATTERN_CHARS:
        return repr(pattern)
    return f"{pattern[:_SHOWN_PATTERN_CHARS]!r}... ({len(pattern)} characters)"


@lru_cache(maxsize=8)
def compiled(pattern: str) -> BodyMatcher:
    """The compiled pattern (a few recent ones are kept), or ``BodyPatternError`` naming it and
    saying why it is refused, e.g. ``body regex '(a)\\1' cannot be used: backreferences are not
    supported``."""
    try:
        return BodyMatcher(pattern)
    except BodyPatternError as exc:
        raise BodyPatternError(f"body regex {describe(pattern)} cannot be used: {exc}") from None


async def checked(pattern: str) -> None:
    """``compiled(pattern)`` on a worker thread, for a request on the event loop: a fresh pattern
    costs its compile, up to a few ms (``\\w{20}`` 3.4 ms), and a peer sending a new one with
    every request held the loop that long each time. A pattern compiled lately is found at once."""
    await off_loop(compiled, pattern)


def _on_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class BodyFilter:
    """One store call's filter: the compiled pattern and the deadline of its budget."""

    __slots__ = ("_deadline", "budget_seconds", "looked", "matcher")

    def __init__(self, pattern: str, budget_seconds: float, deadline: float | None = None) -> None:
        """``deadline`` (``time.monotonic()``): the request's, shared by its store calls
        (``JobFilter.deadline``); None: ``budget_seconds`` from now."""
        if _on_event_loop():
            raise RuntimeError("a body filter must run on a worker thread, never on the event loop")
        self.matcher = compiled(pattern)
        self.budget_seconds = budget_seconds
        self._deadline = time.monotonic() + budget_seconds if deadline is None else deadline
        self.looked = 0

    def matching(self, bodies: Sequence[bytes | None]) -> list[int]:
        """Positions of the bodies that match, or ``BodyFilterBudgetExceeded`` past the deadline
        (checked before every body and within large ones, so also when the time went into fetching them)."""
        try:
            found = self.matcher.match_indices(bodies, self._deadline - time.monotonic())
        except BodyFilterTimeout:
            raise self._exceeded() from None
        self.looked += len(bodies)
        return found

    def check(self) -> None:
        """``BodyFilterBudgetExceeded`` if the deadline has passed (between batches)."""
        if time.monotonic() >= self._deadline:
            raise self._exceeded()

    def _exceeded(self) -> BodyFilterBudgetExceeded:
        return BodyFilterBudgetExceeded(self.matcher.pattern, self.budget_seconds, self.looked)
