"""Target rates as people write them: ``50M/min``, ``800k/s``, ``1e6/min``, ``2.5B/day``, ``1200``."""

from __future__ import annotations

import re

_RATE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([kKmMgGbB]?)\s*(?:/\s*([a-zA-Z]+))?\s*$")
_MULTIPLIERS = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "b": 1e9}
_PER_SECONDS = {
    "s": 1.0,
    "sec": 1.0,
    "second": 1.0,
    "min": 60.0,
    "m": 60.0,
    "minute": 60.0,
    "h": 3600.0,
    "hr": 3600.0,
    "hour": 3600.0,
    "d": 86400.0,
    "day": 86400.0,
}


def parse_rate(text: str) -> float:
    """Jobs per second for a rate; a bare number is per second. ``ValueError`` names the problem.

    Suffixes: k (thousand), M (million; ``m`` too, rates have no milli), G or B (billion).
    Units after a slash: s, min, h, day (and their long forms).
    """
    m = _RATE.match(text)
    if not m:
        raise ValueError(f"{text!r} is not a rate like 50M/min, 800k/s or 1e6/min")
    number, suffix, unit = m.group(1), m.group(2).lower(), (m.group(3) or "s").lower()
    per = _PER_SECONDS.get(unit.removesuffix("s") if unit not in _PER_SECONDS else unit)
    if per is None:
        raise ValueError(f"{text!r}: unknown time unit {unit!r} (use s, min, h or day)")
    value = float(number) * _MULTIPLIERS[suffix] / per
    if value <= 0:
        raise ValueError(f"{text!r}: a target rate must be above zero")
    return value
