"""The native hot path against plain Python doing the same work.

Each group pits a Rust call against a plain-Python baseline written here (and only here), with
the same validation, so the ratio is what moving the code to Rust buys. Run for real with
``pytest benches/python/test_native_bench.py --benchmark-enable -q``; CI only collects and runs
each once (``--benchmark-disable``), which also checks that both sides agree.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Sequence
from typing import Any

import pytest

from pinlater._pinlater import RateLimiter, decode_descriptors, encode_descriptors

BATCH = 100
QUEUE, SHARD = "test_queue", "1d1"
PRIORITIES = [i % 3 + 1 for i in range(BATCH)]
LOCAL_IDS = [1_000_000_000 + i * 7_919 for i in range(BATCH)]

# --- plain-Python baseline -------------------------------------------------------------------

_WORD = re.compile(r"[A-Za-z0-9_]+")
_DESCRIPTOR = re.compile(r"([A-Za-z0-9_]+):s([A-Za-z0-9_]+):p([0-9]+):([0-9]+)")


def py_encode_descriptors(queue: str, shard: str, priorities: Sequence[int], local_ids: Sequence[int]) -> list[str]:
    if len(priorities) != len(local_ids):
        raise ValueError("length mismatch")
    if not _WORD.fullmatch(queue) or not _WORD.fullmatch(shard):
        raise ValueError("bad name")
    out = []
    for priority, local_id in zip(priorities, local_ids, strict=True):
        if not 1 <= priority <= 127 or not 0 <= local_id < 2**64:
            raise ValueError("out of range")
        out.append(f"{queue}:s{shard}:p{priority}:{local_id}")
    return out


def py_decode_descriptors(descriptors: Sequence[str]) -> list[tuple[str, str, int, int]]:
    out = []
    for index, descriptor in enumerate(descriptors):
        m = _DESCRIPTOR.fullmatch(descriptor)
        if m is None:
            raise ValueError(f"descriptor at index {index}: invalid job descriptor {descriptor!r}")
        priority, local_id = int(m[3]), int(m[4])
        if not 1 <= priority <= 127 or local_id >= 2**64:
            raise ValueError(f"descriptor at index {index}: invalid job descriptor {descriptor!r}")
        out.append((m[1], m[2], priority, local_id))
    return out


class PyRateLimiter:
    """The same token buckets as the native RateLimiter, in Python with a lock."""

    def __init__(self, burst_seconds: float = 1.0) -> None:
        self._burst = burst_seconds
        self._lock = threading.Lock()
        # queue -> [rate, capacity, tokens, last]
        self._buckets: dict[str, list[float]] = {}

    def set_rate(self, queue: str, rate: float) -> None:
        now = time.monotonic()
        with self._lock:
            capacity = max(rate, 1.0) * self._burst
            bucket = self._buckets.get(queue)
            if bucket is None:
                self._buckets[queue] = [rate, capacity, capacity, now]
            else:
                self._accrue(bucket, now)
                bucket[0], bucket[1], bucket[2] = rate, capacity, min(bucket[2], capacity)

    @staticmethod
    def _accrue(bucket: list[float], now: float) -> None:
        if now > bucket[3]:
            bucket[2] = min(bucket[2] + (now - bucket[3]) * bucket[0], bucket[1])
            bucket[3] = now

    def try_acquire(self, queue: str, n: int = 1) -> bool:
        now = time.monotonic()
        with self._lock:
            bucket = self._buckets.get(queue)
            if bucket is None:
                return True
            if bucket[0] <= 0:
                return False
            self._accrue(bucket, now)
            if bucket[2] >= min(n, bucket[1]):
                bucket[2] -= n
                return True
            return False


# --- benches ---------------------------------------------------------------------------------

ENCODERS: dict[str, Any] = {"rust": encode_descriptors, "python": py_encode_descriptors}
DECODERS: dict[str, Any] = {"rust": decode_descriptors, "python": py_decode_descriptors}
LIMITERS: dict[str, Any] = {"rust": RateLimiter, "python": PyRateLimiter}


@pytest.mark.benchmark(group="descriptor-encode-100")
@pytest.mark.parametrize("impl", ["rust", "python"])
def test_encode_100(benchmark: Any, impl: str) -> None:
    encode = ENCODERS[impl]
    result = benchmark(encode, QUEUE, SHARD, PRIORITIES, LOCAL_IDS)
    assert result == py_encode_descriptors(QUEUE, SHARD, PRIORITIES, LOCAL_IDS)


@pytest.mark.benchmark(group="descriptor-decode-100")
@pytest.mark.parametrize("impl", ["rust", "python"])
def test_decode_100(benchmark: Any, impl: str) -> None:
    descriptors = encode_descriptors(QUEUE, SHARD, PRIORITIES, LOCAL_IDS)
    result = benchmark(DECODERS[impl], descriptors)
    assert result == [(QUEUE, SHARD, p, i) for p, i in zip(PRIORITIES, LOCAL_IDS, strict=True)]


@pytest.mark.benchmark(group="ratelimit-try-acquire")
@pytest.mark.parametrize("impl", ["rust", "python"])
def test_try_acquire(benchmark: Any, impl: str) -> None:
    limiter = LIMITERS[impl]()
    for i in range(100):
        limiter.set_rate(f"queue_{i}", 1e12)  # never runs dry: every call decides and charges
    assert benchmark(limiter.try_acquire, "queue_42", 1) is True


@pytest.mark.benchmark(group="ratelimit-try-acquire-unlimited")
@pytest.mark.parametrize("impl", ["rust", "python"])
def test_try_acquire_unlimited(benchmark: Any, impl: str) -> None:
    limiter = LIMITERS[impl]()
    assert benchmark(limiter.try_acquire, "free", 1) is True
