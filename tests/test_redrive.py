"""``pinlater.redrive``'s pacing and bounds, without a server (the redrives themselves run against
a real server in tests/admin/test_admin_job_control.py and tests/cli/test_admin_tool.py)."""

from __future__ import annotations

import pytest

from pinlater.redrive import MAX_RATE, MIN_RATE, RedrivePlan, RedriveRefused, TokenBucket


def test_the_bucket_fills_at_its_rate_and_holds_at_most_its_capacity() -> None:
    bucket = TokenBucket(rate=10.0, capacity=2.0, now=100.0)
    assert bucket.fill(100.0) == 0
    assert bucket.wait_for_one() == pytest.approx(0.1)
    assert bucket.fill(100.15) == 1
    bucket.spend(1)
    assert bucket.wait_for_one() == pytest.approx(0.05)
    assert bucket.fill(200.0) == 2, "a long pause is not saved up past the capacity"
    bucket.spend(2)
    assert bucket.fill(200.05) == 0


def test_the_bucket_paces_a_slow_rate_one_job_at_a_time() -> None:
    bucket = TokenBucket(rate=0.5, capacity=1.0, now=0.0)
    moved = 0
    now = 0.0
    while now < 10.0:  # what the redrive loop does: wait for a job, then take what it holds
        now += max(0.1, bucket.wait_for_one())
        got = bucket.fill(now)
        bucket.spend(got)
        moved += got
    assert moved == 5


@pytest.mark.parametrize(
    ("plan", "words"),
    [
        (RedrivePlan("q", MIN_RATE / 2), "rate"),
        (RedrivePlan("q", MAX_RATE * 2), "rate"),
        (RedrivePlan("q", float("nan")), "rate"),
        (RedrivePlan("q", 1.0, limit=0), "limit"),
        (RedrivePlan("q", 1.0, priority=4), "priority"),
        (RedrivePlan("q", 1.0, attempts=0), "attempts"),
    ],
)
def test_plans_out_of_bounds_are_refused_naming_the_field(plan: RedrivePlan, words: str) -> None:
    with pytest.raises(RedriveRefused) as refused:
        plan.check(num_priorities=3)
    assert refused.value.status == 400 and words in refused.value.message


def test_plans_at_the_bounds_are_taken() -> None:
    RedrivePlan("q", MIN_RATE, limit=1, priority=3, attempts=1).check(3)
    RedrivePlan("q", MAX_RATE).check(3)
