"""Counters, gauges and timings for ``/stats.txt`` (the original's Ostrich-style text).

Cheap enough for the hot path: a counter is a dict update; a timing keeps a count, sum,
min, max and a bounded reservoir sample from which percentiles are read. Everything runs on
the event loop thread, so no locks are needed.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

RESERVOIR = 1024
PERCENTILES = (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p999", 0.999))


@dataclass
class Timing:
    count: int = 0
    total: float = 0.0
    minimum: float = float("inf")
    maximum: float = 0.0
    sample: list[float] = field(default_factory=list)

    def add(self, value: float) -> None:
        self.count += 1
        self.total += value
        self.minimum = min(self.minimum, value)
        self.maximum = max(self.maximum, value)
        if len(self.sample) < RESERVOIR:
            self.sample.append(value)
        else:
            slot = random.randrange(self.count)
            if slot < RESERVOIR:
                self.sample[slot] = value

    def summary(self) -> dict[str, float]:
        if not self.count:
            return {"count": 0}
        ordered = sorted(self.sample)
        out = {
            "count": float(self.count),
            "average": self.total / self.count,
            "minimum": self.minimum,
            "maximum": self.maximum,
        }
        for name, q in PERCENTILES:
            out[name] = ordered[min(len(ordered) - 1, int(q * len(ordered)))]
        return out


class Metrics:
    """The server's statistics registry."""

    def __init__(self) -> None:
        self.counters: dict[str, int] = defaultdict(int)
        self.timings: dict[str, Timing] = defaultdict(Timing)
        self._gauges: dict[str, Callable[[], float]] = {}

    def incr(self, name: str, by: int = 1) -> None:
        if by:
            self.counters[name] += by

    def timing(self, method: str, millis: float, ok: bool) -> None:
        self.timings[method].add(millis)
        self.counters[f"{method}_{'ok' if ok else 'error'}"] += 1

    def gauge(self, name: str, read: Callable[[], float]) -> None:
        """Register a gauge, read when stats are rendered."""
        self._gauges[name] = read

    def gauges(self) -> dict[str, float]:
        out = {}
        for name, read in self._gauges.items():
            try:
                out[name] = float(read())
            except Exception:  # a gauge must never break the stats page
                out[name] = float("nan")
        return out

    def render_text(self) -> str:
        """Ostrich-style text: sections of ``name: value`` lines."""
        lines = ["counters:"]
        lines += [f"  {name}: {value}" for name, value in sorted(self.counters.items())]
        lines.append("gauges:")
        lines += [f"  {name}: {_num(value)}" for name, value in sorted(self.gauges().items())]
        lines.append("metrics:")
        for name, timing in sorted(self.timings.items()):
            parts = ", ".join(f"{k}={_num(v)}" for k, v in timing.summary().items())
            lines.append(f"  {name}_msec: ({parts})")
        return "\n".join(lines) + "\n"


def _num(value: float) -> str:
    if math.isfinite(value) and value == int(value):
        return str(int(value))
    return f"{value:.3f}"
