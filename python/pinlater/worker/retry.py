"""Retry policies: how long a failed job waits before its next attempt.

A policy is any ``callable(attempt) -> seconds``, where ``attempt`` is the attempt that just
failed (1 for the first run). The delay goes out as the failure ack's ``retryDelayMillis``; the
server ignores it when the job has no attempts left (it becomes FAILED).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable

RetryPolicy = Callable[[int], float]

#: Names accepted by ``by_name`` and ``pinlater worker --retry``.
POLICY_NAMES = ("linear", "constant", "exponential")


def _seconds(name: str, value: float | None) -> None:
    """A delay must be a finite number of seconds, at least 0 (NaN and -5 meant at once, unsaid)."""
    if value is not None and not 0 <= value < math.inf:
        raise ValueError(f"{name} must be a finite number of seconds >= 0, not {value}")


def constant(delay: float = 1.0) -> RetryPolicy:
    """The same delay after every failure."""
    _seconds("delay", delay)

    def policy(attempt: int) -> float:
        return delay

    return policy


def linear(step: float = 1.0, max_delay: float | None = None) -> RetryPolicy:
    """``step`` x attempts used so far: the original example worker's backoff (step 1 s)."""
    _seconds("step", step)
    _seconds("max_delay", max_delay)

    def policy(attempt: int) -> float:
        delay = step * max(1, attempt)
        return delay if max_delay is None else min(delay, max_delay)

    return policy


def exponential(
    base: float = 1.0,
    factor: float = 2.0,
    max_delay: float = 300.0,
    jitter: float = 0.5,
    rng: random.Random | None = None,
) -> RetryPolicy:
    """``base`` x ``factor`` ** (attempt - 1), capped at ``max_delay``, then scaled down by a
    random fraction of at most ``jitter`` (0 to 1), so jobs that failed together spread out."""
    if not 0.0 <= jitter <= 1.0:
        raise ValueError(f"jitter must be between 0 and 1, not {jitter}")
    _seconds("base", base)
    _seconds("max_delay", max_delay)
    if not 0 < factor < math.inf:
        raise ValueError(f"factor must be a finite number > 0, not {factor}")
    draw = (rng or random.Random()).random

    def policy(attempt: int) -> float:
        try:
            grown = base * factor ** max(0, attempt - 1)
        except OverflowError:  # (past attempt 1,024 at a factor of 2: the cap, not a failed policy's 0)
            grown = max_delay
        delay = min(max_delay, grown)
        return delay * (1.0 - jitter * draw())

    return policy


def by_name(name: str, delay: float = 1.0, max_delay: float = 300.0) -> RetryPolicy:
    """A policy from its name: ``delay`` is the constant delay, the linear step or the exponential base."""
    if name == "constant":
        return constant(delay)
    if name == "linear":
        return linear(delay, max_delay)
    if name == "exponential":
        return exponential(delay, max_delay=max_delay)
    raise ValueError(f"unknown retry policy {name!r} (choose from {', '.join(POLICY_NAMES)})")
