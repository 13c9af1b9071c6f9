"""The native RateLimiter from Python: semantics, validation and concurrent use.

Precise rate checks live in the Rust tests (rust/queue/rate_limiter.rs) with an injected clock. Here the
only real-time test is short with loose bounds, and the rest use rates so low or so high that
the time between calls cannot change the outcome.
"""

from __future__ import annotations

import math
import threading
import time

import pytest

from pinlater._pinlater import RateLimiter

#: Slow enough that no test runs long enough to accrue a whole token.
GLACIAL = 1e-6


def test_unlimited_queue_always_grants() -> None:
    limiter = RateLimiter()
    assert limiter.try_acquire("free", 1)
    assert limiter.try_acquire("free", 10**9)
    assert limiter.try_acquire("free")
    assert limiter.rates() == {}


def test_fresh_bucket_starts_full_then_refuses() -> None:
    limiter = RateLimiter(burst_seconds=1000.0)
    limiter.set_rate("q", GLACIAL)  # capacity max(rate, 1) * 1000 = 1000
    assert limiter.try_acquire("q", 600)
    assert limiter.try_acquire("q", 400)
    assert not limiter.try_acquire("q", 1)


def test_large_batch_at_low_rate_is_granted_then_repaid() -> None:
    limiter = RateLimiter()
    limiter.set_rate("q", 0.1)  # capacity 1 token
    assert limiter.try_acquire("q", 10)  # 1 >= min(10, 1): granted, balance -9
    assert not limiter.try_acquire("q", 1)  # 90 s of debt to repay first
    assert not limiter.try_acquire("q", 0)


def test_zero_rate_pauses_and_resume_keeps_tokens() -> None:
    limiter = RateLimiter()
    limiter.set_rate("q", 0.0)
    assert not limiter.try_acquire("q", 1)
    assert not limiter.try_acquire("q", 0)
    limiter.set_rate("q", GLACIAL)
    assert limiter.try_acquire("q", 1)  # the full bucket it was created with
    assert not limiter.try_acquire("q", 1)


def test_rate_change_clamps_tokens_to_new_capacity() -> None:
    limiter = RateLimiter()
    limiter.set_rate("q", 100.0)  # 100 tokens
    limiter.set_rate("q", GLACIAL)  # capacity 1: keeps 1 of them
    assert limiter.try_acquire("q", 1)
    assert not limiter.try_acquire("q", 1)


def test_set_remove_and_rates_snapshot() -> None:
    limiter = RateLimiter()
    limiter.set_rate("a", 2.5)
    limiter.set_rate("b", 0)
    snapshot = limiter.rates()
    assert snapshot == {"a": 2.5, "b": 0.0}
    limiter.set_rate("a", 7)
    assert snapshot == {"a": 2.5, "b": 0.0}
    assert limiter.rates() == {"a": 7.0, "b": 0.0}
    limiter.remove("b")
    limiter.remove("never-set")
    assert limiter.rates() == {"a": 7.0}
    assert limiter.try_acquire("b", 10**6)


@pytest.mark.parametrize("rate", [-1.0, -1e-9, math.nan, math.inf, -math.inf])
def test_invalid_rates_are_value_errors(rate: float) -> None:
    limiter = RateLimiter()
    with pytest.raises(ValueError, match="rate must be a finite number of jobs per second >= 0"):
        limiter.set_rate("q", rate)
    assert limiter.rates() == {}


@pytest.mark.parametrize("burst", [0.0, -1.0, math.nan, math.inf])
def test_invalid_burst_is_a_value_error(burst: float) -> None:
    with pytest.raises(ValueError, match="burst_seconds must be a finite number > 0"):
        RateLimiter(burst)


def test_constructor_and_repr() -> None:
    assert RateLimiter().burst_seconds == 1.0
    limiter = RateLimiter(burst_seconds=2.5)
    assert limiter.burst_seconds == 2.5
    limiter.set_rate("q", 1)
    assert repr(limiter) == "RateLimiter(burst_seconds=2.5, queues=1)"


def test_negative_n_is_refused() -> None:
    with pytest.raises(OverflowError):
        RateLimiter().try_acquire("q", -1)


def test_threads_hammering_one_queue_never_over_grant() -> None:
    limiter = RateLimiter(burst_seconds=1000.0)
    limiter.set_rate("q", GLACIAL)  # exactly 1000 tokens for the whole test
    threads, attempts = 8, 2_000
    granted = [0] * threads
    start = threading.Barrier(threads + 1)

    def hammer(k: int) -> None:
        start.wait()
        for _ in range(attempts):
            if limiter.try_acquire("q", 1):
                granted[k] += 1

    def churn() -> None:
        # Concurrent writers and readers on other queues must not disturb "q".
        start.wait()
        for i in range(attempts):
            limiter.set_rate(f"other{i % 7}", float(i))
            limiter.rates()
            limiter.remove(f"other{(i + 3) % 7}")

    workers = [threading.Thread(target=hammer, args=(k,)) for k in range(threads)]
    workers.append(threading.Thread(target=churn))
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=60)
        assert not w.is_alive()
    assert sum(granted) == 1000
    assert not limiter.try_acquire("q", 1)


def test_threads_with_mixed_batch_sizes_charge_exactly() -> None:
    limiter = RateLimiter(burst_seconds=10_000.0)
    limiter.set_rate("q", GLACIAL)  # 10_000 tokens, every request below fits min(n, capacity)
    sizes = [1, 2, 3, 5, 7, 11]
    granted = [0] * len(sizes)
    start = threading.Barrier(len(sizes))

    def hammer(k: int) -> None:
        start.wait()
        for _ in range(5_000):
            if limiter.try_acquire("q", sizes[k]):
                granted[k] += sizes[k]

    workers = [threading.Thread(target=hammer, args=(k,)) for k in range(len(sizes))]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=60)
    total = sum(granted)
    # Granted while the balance was >= n, so the last grant may overdraw by less than 11.
    assert 10_000 - 11 < total < 10_000 + 11
    assert not limiter.try_acquire("q", 1)


def test_real_time_rate_is_roughly_held() -> None:
    rate, burst = 200.0, 0.05  # capacity 10
    limiter = RateLimiter(burst_seconds=burst)
    limiter.set_rate("q", rate)
    granted = 0
    began = time.monotonic()
    while time.monotonic() - began < 0.3:
        if limiter.try_acquire("q", 1):
            granted += 1
    elapsed = time.monotonic() - began
    capacity = rate * burst
    # Never more than the full bucket plus what accrued; roughly that much on a busy loop.
    assert granted <= capacity + rate * elapsed + 1
    assert granted >= 0.5 * (capacity + rate * 0.3)
