"""Cron expressions (``pinlater.cron``): crontab's five fields in UTC, and the reasons for the
ones refused."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from pinlater.cron import Cron, CronError


def at(text: str) -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp() * 1000)


def following(expr: str, start: str, n: int = 1) -> list[str]:
    cron = Cron.parse(expr)
    out: list[str] = []
    ms = at(start)
    for _ in range(n):
        found = cron.next_after(ms)
        assert found is not None
        out.append(datetime.fromtimestamp(found / 1000, UTC).strftime("%Y-%m-%d %H:%M"))
        ms = found
    return out


@pytest.mark.parametrize(
    ("expr", "start", "expected"),
    [
        ("* * * * *", "2026-11-24 23:59:30", ["2026-11-25 00:00", "2026-11-25 00:01"]),
        ("*/20 * * * *", "2026-11-24 10:00:00", ["2026-11-24 10:20", "2026-11-24 10:40", "2026-11-24 11:00"]),
        ("5 4 * * sun", "2026-11-24 00:00:00", ["2026-11-29 04:05", "2026-12-06 04:05"]),
        ("0 9 * * 1-5", "2026-11-27 10:00:00", ["2026-11-30 09:00"]),  # Friday after nine: Monday
        ("0 0 1,15 * 5", "2026-11-24 00:00:00", ["2026-11-27 00:00", "2026-12-01 00:00"]),  # either day field
        ("0 0 */2 * 5", "2026-11-24 00:00:00", ["2026-11-27 00:00", "2026-12-11 00:00"]),  # "*/2" restricts no day
        ("0 0 29 feb *", "2026-03-01 00:00:00", ["2028-02-29 00:00"]),
        ("30 2 * jan-mar/2 *", "2026-11-24 00:00:00", ["2027-01-01 02:30"]),
        ("0 12 * * 7", "2026-11-24 00:00:00", ["2026-11-29 12:00"]),  # 7 is Sunday too
        ("@hourly", "2026-11-24 10:00:00", ["2026-11-24 11:00"]),
        ("@monthly", "2026-12-31 23:59:59", ["2027-01-01 00:00"]),
        ("10-20/5 3 * * *", "2026-11-24 03:12:00", ["2026-11-24 03:15", "2026-11-24 03:20", "2026-11-25 03:10"]),
        # A date on one weekday (a day field starting with "*" makes the two fields both count):
        # 1 December on a Tuesday comes again 11 years on, 29 February on a Sunday 28 years on,
        # and 40 across 2100 (not a leap year); each is found, however far.
        ("0 0 */31 12 2", "2026-12-01 00:01:00", ["2037-12-01 00:00"]),
        ("0 0 29 2 */7", "2032-03-01 00:00:00", ["2060-02-29 00:00", "2088-02-29 00:00", "2128-02-29 00:00"]),
    ],
)
def test_next_times(expr: str, start: str, expected: list[str]) -> None:
    assert following(expr, start, len(expected)) == expected


def test_the_next_time_is_strictly_after_the_given_one() -> None:
    cron = Cron.parse("0 * * * *")
    assert cron.next_after(at("2026-11-24 10:00:00")) == at("2026-11-24 11:00:00")


@pytest.mark.parametrize(
    ("expr", "reason"),
    [
        ("* * * *", "has 4 fields, not 5"),
        ("60 * * * *", "minute: 60 is not in 0-59"),
        ("* 24 * * *", "hour: 24 is not in 0-23"),
        ("* * 0 * *", "day of month: 0 is not in 1-31"),
        ("* * * 13 *", "month: 13 is not in 1-12"),
        ("* * * * 8", "day of week: 8 is not in 0-7"),
        ("*/0 * * * *", "step '0' is not a number above 0"),
        ("5-1 * * * *", "range '5-1' runs backwards"),
        ("x * * * *", "minute: 'x' is not a number"),
        ("\u00b2 * * * *", "minute: '\u00b2' is not a number"),
        ("*/\u00b2 * * * *", "step '\u00b2' is not a number above 0"),
        ("* * * foo *", "month: 'foo' is not a number or a name"),
        ("0 0 30 2 *", "never matches a date"),
        ("0 0 31 4,6,9,11 *", "never matches a date"),
        ("*" * 300, "at most 256"),
    ],
)
def test_bad_expressions_say_why(expr: str, reason: str) -> None:
    with pytest.raises(CronError, match=reason.replace("*", r"\*")):
        Cron.parse(expr)
