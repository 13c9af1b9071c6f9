"""Retry policies and the failure status line (no server)."""

from __future__ import annotations

import random

import pytest

from pinlater.worker import by_name, constant, exponential, failure_status, linear


def test_linear_is_the_originals_one_second_per_attempt_used() -> None:
    policy = linear()
    assert [policy(a) for a in (1, 2, 3)] == [1.0, 2.0, 3.0]
    assert linear(5.0, max_delay=12)(3) == 12


def test_constant_and_exponential_with_jitter() -> None:
    assert constant(7)(1) == constant(7)(9) == 7
    exact = exponential(base=2, factor=3, max_delay=50, jitter=0)
    assert [exact(a) for a in (1, 2, 3, 4)] == [2, 6, 18, 50]
    jittered = exponential(base=10, jitter=0.5, rng=random.Random(1))
    delays = [jittered(1) for _ in range(200)]
    assert all(5 <= d <= 10 for d in delays) and len(set(delays)) > 100
    with pytest.raises(ValueError):
        exponential(jitter=2)


def test_policies_by_name() -> None:
    assert by_name("linear", 2)(3) == 6
    assert by_name("constant", 4)(3) == 4
    assert by_name("exponential", 1, max_delay=8)(10) <= 8
    with pytest.raises(ValueError, match="unknown retry policy"):
        by_name("random")


def test_failure_status_names_the_attempt_type_and_message() -> None:
    assert failure_status(ValueError("boom"), 2, 100) == "attempt 2: ValueError: boom\n"
    assert failure_status(KeyError(), 1, 100) == "attempt 1: KeyError\n"
    assert failure_status(ValueError("x" * 50), 1, 30) == "attempt 1: ValueError: xxxx...\n"


def test_exponential_past_a_floats_range_is_its_cap() -> None:
    """Attempt 1,025 at a factor of 2 overflows a float: the policy gives its cap (the worker
    falls back to no delay at all when a policy fails, a tight loop of retries)."""
    policy = exponential(1.0, max_delay=300.0, jitter=0.0)
    assert policy(1) == 1.0 and policy(5) == 16.0
    assert policy(1025) == 300.0 and policy(10**6) == 300.0
