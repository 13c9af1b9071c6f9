"""Cron expressions: five fields, UTC, as crontab(5) writes them.

``minute hour day-of-month month day-of-week``, each ``*``, a number, a range ``a-b``, a step
``*/n``, ``a-b/n`` or ``a/n``, or a comma-separated list of those; months and weekdays also by
their English three-letter names (``jan``, ``mon``); weekday 0 and 7 are Sunday. As in cron, a
time matches when minute, hour and month match and the day matches the day-of-month field OR the
day-of-week field when both are restricted (either one when the other is ``*``). The macros
``@yearly`` (``@annually``), ``@monthly``, ``@weekly``, ``@daily`` (``@midnight``) and ``@hourly``
stand for their usual five fields.
"""

from __future__ import annotations

import calendar
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

MINUTE_MS = 60_000
#: A cron whose next time is further than this is refused ("never runs": 30 February, say). The
#: longest wait for a cron that runs at all is 40 years: 29 February on one weekday comes every
#: 28 years, and 40 across a century year that is not a leap year (2100). A shorter horizon took
#: crons that matched within it of 1970 and not of now ("*/31 12 2", 1 December on a Tuesday:
#: 2026, then 2037), and their first firing failed.
HORIZON_YEARS = 41
#: The most days each month has (29 for February).
_LONGEST = {1: 31, 2: 29, 3: 31, 4: 30, 5: 31, 6: 30, 7: 31, 8: 31, 9: 30, 10: 31, 11: 30, 12: 31}

_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_MONTHS = {name.lower(): i for i, name in enumerate(calendar.month_abbr) if name}
_DAYS = {name.lower(): (i + 1) % 7 for i, name in enumerate(calendar.day_abbr)}  # mon=1 .. sun=0
#: (name, low, high, names) per field.
_FIELDS: tuple[tuple[str, int, int, dict[str, int]], ...] = (
    ("minute", 0, 59, {}),
    ("hour", 0, 23, {}),
    ("day of month", 1, 31, {}),
    ("month", 1, 12, _MONTHS),
    ("day of week", 0, 7, _DAYS),
)
#: Longest expression taken, in characters.
MAX_LENGTH = 256


class CronError(ValueError):
    """An expression cron would not take; the message says why."""


@dataclass(frozen=True, slots=True)
class Cron:
    """A parsed expression (``Cron.parse``); ``next_after`` finds its times."""

    text: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday
    any_day: bool
    any_weekday: bool

    @classmethod
    def parse(cls, text: str) -> Cron:
        if len(text) > MAX_LENGTH:
            raise CronError(f"cron expression is {len(text)} characters, at most {MAX_LENGTH}")
        fields = _MACROS.get(text.strip().lower(), text).split()
        if len(fields) != 5:
            raise CronError(f"cron expression {text!r} has {len(fields)} fields, not 5 (minute hour day month weekday)")
        sets = [_field(value, *spec) for value, spec in zip(fields, _FIELDS, strict=True)]
        weekdays = frozenset(d % 7 for d in sets[4])
        # As Vixie cron: a day field that starts with "*" (say "*/2") does not restrict the day.
        any_day, any_weekday = fields[2].startswith("*"), fields[4].startswith("*")
        cron = cls(text, sets[0], sets[1], sets[2], sets[3], weekdays, any_day, any_weekday)
        # A day of the month that no chosen month has (30 February) never comes: said at once, not
        # after a scan of the horizon (16 ms for "59 23 31 2,4,6,9,11 *", on the caller's loop).
        # Either day field unrestricted makes both count, the date too (``_day_matches``).
        never = not any(day <= _LONGEST[month] for month in cron.months for day in cron.days)
        if (never and (any_day or any_weekday)) or cron.next_after(0) is None:
            raise CronError(f"cron expression {text!r} never matches a date")
        return cron

    def _day_matches(self, day: datetime) -> bool:
        by_date = day.day in self.days
        by_weekday = (day.weekday() + 1) % 7 in self.weekdays
        if self.any_day or self.any_weekday:
            return by_date and by_weekday
        return by_date or by_weekday

    def next_after(self, ms: int) -> int | None:
        """The first matching minute strictly after ``ms`` (epoch milliseconds, UTC), or None
        when there is none within HORIZON_YEARS."""
        t = datetime.fromtimestamp((ms // MINUTE_MS + 1) * 60, UTC)
        end = t + timedelta(days=366 * HORIZON_YEARS)
        while t < end:
            if t.month not in self.months:
                t = (t.replace(day=1, hour=0, minute=0) + timedelta(days=32)).replace(day=1)
                continue
            if not self._day_matches(t):
                t = t.replace(hour=0, minute=0) + timedelta(days=1)
                continue
            if t.hour not in self.hours:
                t = t.replace(minute=0) + timedelta(hours=1)
                continue
            if t.minute not in self.minutes:
                t += timedelta(minutes=1)
                continue
            return int(t.timestamp()) * 1000
        return None


def _number(token: str, name: str, low: int, high: int, names: dict[str, int]) -> int:
    value = names.get(token.lower())
    if value is None:
        if not (token.isascii() and token.isdigit()):
            raise CronError(f"{name}: {token!r} is not a number{' or a name' if names else ''}")
        value = int(token)
    if not low <= value <= high:
        raise CronError(f"{name}: {value} is not in {low}-{high}")
    return value


def _field(text: str, name: str, low: int, high: int, names: dict[str, int]) -> frozenset[int]:
    values: set[int] = set()
    for part in text.split(","):
        span, _, step_text = part.partition("/")
        step = 1
        if step_text:
            if not (step_text.isascii() and step_text.isdigit()) or int(step_text) == 0:
                raise CronError(f"{name}: step {step_text!r} is not a number above 0")
            step = int(step_text)
        if span == "*":
            first, last = low, high
        elif "-" in span:
            a, _, b = span.partition("-")
            first, last = _number(a, name, low, high, names), _number(b, name, low, high, names)
            if first > last:
                raise CronError(f"{name}: range {span!r} runs backwards")
        else:
            first = _number(span, name, low, high, names)
            last = high if step_text else first
        values.update(range(first, last + 1, step))
    return frozenset(values)
