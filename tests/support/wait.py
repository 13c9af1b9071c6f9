"""Waiting for conditions instead of sleeping for guessed durations."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(cond: Callable[[], T], timeout: float = 10.0, interval: float = 0.02, what: str = "") -> T:
    """Poll ``cond`` until it returns a truthy value, and return that value.

    Raises ``AssertionError`` naming ``what`` if the deadline passes first. Exceptions raised by
    ``cond`` count as "not yet" until the deadline; the last one is chained.
    """
    deadline = time.monotonic() + timeout
    last_exc: BaseException | None = None
    while True:
        try:
            value = cond()
            if value:
                return value
        except Exception as exc:  # a condition that raises is simply not met yet
            last_exc = exc
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or cond!r}") from last_exc
        time.sleep(interval)
