"""``redis_claimed_jobs``: the Redis store's dequeue and reserve replies, read in Rust exactly as
the Python reader (``int``, ``round(float(x) * 1000)``) read them."""

from __future__ import annotations

import random
from typing import Any

import pytest

from pinlater._pinlater import redis_claimed_jobs
from pinlater.backends.base import ClaimedJob
from pinlater.backends.redis.replies import _CLAIMED_JOB as MAKE


def reply(*rows: tuple[Any, ...]) -> list[Any]:
    out: list[Any] = [0, 0]  # evicted, cut
    for row in rows:
        out += list(row)
    return out


def test_rows_become_jobs_ordered_by_run_after_then_id() -> None:
    out = reply(
        (b"10", b"1700000000.5", b"ten", b"3", b"2", b"1699999999.25", b"1700000000.5"),
        (b"9", b"1700000000.5", b"nine", b"1", b"1", b"1.7E9", None),
        (b"11", b"1700000000.25", b"", None, None, None, b"1700000001"),
    )
    assert redis_claimed_jobs(out, MAKE) == [
        ClaimedJob(11, b"", 0, 0, 0, 1_700_000_001_000),
        ClaimedJob(9, b"nine", 1, 1, 1_700_000_000_000, 0),
        ClaimedJob(10, b"ten", 3, 2, 1_699_999_999_250, 1_700_000_000_500),
    ]
    assert redis_claimed_jobs([0, 1], MAKE) == []


def test_times_round_exactly_as_python_does() -> None:
    rng = random.Random(5)
    texts = [b"0.0005", b"0.0015", b"0.0025", b"-0.0005", b" 12.5 ", b"1e3"]
    texts += [repr(rng.uniform(0, 2e9)).encode() for _ in range(2000)]
    texts += [repr(round(rng.uniform(0, 2e9), 3)).encode() for _ in range(2000)]
    out = reply(*[(str(i).encode(), b"1", b"", b"1", b"1", t, t) for i, t in enumerate(texts)])
    got = redis_claimed_jobs(out, MAKE)
    assert [job.created_at_ms for job in got] == [round(float(t) * 1000.0) for t in texts]


@pytest.mark.parametrize(
    ("row", "error", "message"),
    [
        ((b"x1", b"1", b"", b"1", b"1", b"1", b"1"), ValueError, 'id "x1" is not a decimal local id'),
        ((b"-1", b"1", b"", b"1", b"1", b"1", b"1"), ValueError, "not a decimal local id"),
        ((None, b"1", b"", b"1", b"1", b"1", b"1"), ValueError, "no id"),
        ((b"1", b"soon", b"", b"1", b"1", b"1", b"1"), ValueError, "score .* is not a number of seconds"),
        ((b"1", b"1", b"", b"two", b"1", b"1", b"1"), ValueError, "al .* is not a decimal integer"),
        ((b"1", b"1", b"", b"1", b"1", b"inf", b"1"), ValueError, "ca .* is not a time"),
        ((b"1", b"1", "body", b"1", b"1", b"1", b"1"), TypeError, "a body is not bytes"),
        ((b"1", b"1", b"", 1.5, b"1", b"1", b"1"), TypeError, "al is a float"),
    ],
)
def test_malformed_replies_raise_clear_errors(row: tuple[Any, ...], error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=f"^malformed Redis reply: .*{message}"):
        redis_claimed_jobs(reply(row), MAKE)


def test_incomplete_rows_are_refused() -> None:
    with pytest.raises(ValueError, match=r"^malformed Redis reply: 6 values after the evicted count and cut"):
        redis_claimed_jobs([0, 0, b"1", b"1", b"", b"1", b"1", b"1"], MAKE)
    with pytest.raises(ValueError, match=r"^malformed Redis reply: no evicted count and cut"):
        redis_claimed_jobs([0], MAKE)
    with pytest.raises(ValueError, match=r"^malformed Redis reply: no evicted count and cut"):
        redis_claimed_jobs([], MAKE)


def test_integers_and_text_are_read_like_bytes() -> None:
    out = reply((7, "1.5", b"b", 2, "3", 1, "2.0005"))
    assert redis_claimed_jobs(out, MAKE) == [ClaimedJob(7, b"b", 2, 3, 1000, round(float("2.0005") * 1000.0))]
