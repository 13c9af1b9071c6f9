"""Flags and library arguments that passed their checks and failed later (a traceback, an
out-of-memory kill, a silent default) are refused where they are given, with the reason."""

from __future__ import annotations

import pytest

from pinlater.admin import Admin, AdminError
from pinlater.cli.__main__ import build_parser
from pinlater.worker import retry
from pinlater.worker.runner import MAX_CONCURRENCY, Worker


@pytest.mark.parametrize(
    "argv",
    [
        ["bench", "--target-rate", "1000", "--headroom", "inf"],
        ["bench", "--duration", "inf"],
        ["admin", "schedules", "--timeout", "inf", "q"],
        ["client", "--command", "count", "--timeout", "nan"],
    ],
)
def test_an_infinite_number_is_refused_by_the_parser(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as refused:
        build_parser().parse_args(argv)
    assert refused.value.code == 2
    assert "must be > 0 and finite" in capsys.readouterr().err


@pytest.mark.parametrize("url", ["http://[::1", "http://127.0.0.1:9x", "http://127.0.0.1:99999"])
def test_a_malformed_admin_url_is_an_admin_error(url: str) -> None:
    with pytest.raises(AdminError, match="not an admin URL"):
        Admin.from_url(url)


def test_a_worker_of_more_than_max_concurrency_is_refused_before_any_thread() -> None:
    """100 million threads were made up front, and the process killed at 23 GB."""
    with pytest.raises(ValueError, match=f"concurrency must be in 1..{MAX_CONCURRENCY}"):
        Worker("127.0.0.1:9010", concurrency=100_000_000)


@pytest.mark.parametrize("delay", [float("nan"), -5.0, float("inf")])
def test_a_retry_delay_that_is_not_a_finite_number_of_seconds_is_refused(delay: float) -> None:
    """NaN and -5 meant retry at once, unsaid (``max(0.0, nan)`` is 0)."""
    for name in retry.POLICY_NAMES:
        with pytest.raises(ValueError, match="must be a finite number of seconds"):
            retry.by_name(name, delay)
