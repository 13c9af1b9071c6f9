"""Times as the MySQL backend stores them: milliseconds since the epoch <-> naive UTC datetimes.

Columns are TIMESTAMP(3) in databases created here, so milliseconds survive; databases the
original created have TIMESTAMP (seconds) and the server drops the milliseconds when writing them.
Times are clamped to TIMESTAMP's range (1970-01-01 00:00:01 to 2038-01-19 03:14:07 UTC: not
.999, which MySQL rounds up to 03:14:08 when it writes a TIMESTAMP(0) column of the original's,
past the range, an error in strict mode; MariaDB truncates).
"""

from __future__ import annotations

from datetime import datetime, timedelta

_EPOCH = datetime(1970, 1, 1)
_MS = timedelta(milliseconds=1)
TS_MIN_MS = 1_000  # 1970-01-01 00:00:01 UTC
TS_MAX_MS = 2_147_483_647_000  # 2038-01-19 03:14:07 UTC


def to_db_time(ms: int) -> datetime:
    """Milliseconds since the epoch as a naive UTC datetime, clamped to TIMESTAMP's range."""
    return _EPOCH + _MS * min(max(ms, TS_MIN_MS), TS_MAX_MS)


def from_db_time(value: object) -> int:
    """A TIMESTAMP read back (naive UTC datetime) as milliseconds since the epoch; zero dates are 0."""
    if isinstance(value, datetime):
        return (value - _EPOCH) // _MS
    return 0
