"""Latency percentiles and the human forms of rates and durations."""

from __future__ import annotations

import math

#: The percentiles reported everywhere: name -> fraction.
PERCENTILES = {"p50": 0.50, "p99": 0.99, "p999": 0.999}


class Histogram:
    """Latencies in log-spaced buckets (1% wide): bounded memory, mergeable, percentiles within 1%.

    ``counts`` maps bucket index to count and pickles cheaply, so load processes send theirs
    to the parent once a second.
    """

    __slots__ = ("count", "counts", "max_ms", "total_ms")

    _LOG_STEP = math.log(1.01)

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}
        self.count = 0
        self.total_ms = 0.0
        self.max_ms = 0.0

    def add(self, value_ms: float) -> None:
        index = int(math.log(max(value_ms, 0.001) * 1000) / self._LOG_STEP)
        self.counts[index] = self.counts.get(index, 0) + 1
        self.count += 1
        self.total_ms += value_ms
        if value_ms > self.max_ms:
            self.max_ms = value_ms

    def merge(self, other: Histogram) -> None:
        for index, n in other.counts.items():
            self.counts[index] = self.counts.get(index, 0) + n
        self.count += other.count
        self.total_ms += other.total_ms
        self.max_ms = max(self.max_ms, other.max_ms)

    def quantile(self, fraction: float) -> float:
        """The latency (ms, the bucket's middle) below which ``fraction`` of the values fall."""
        if not self.count:
            return math.nan
        rank = max(1, math.ceil(fraction * self.count))
        seen = 0
        for index in sorted(self.counts):
            seen += self.counts[index]
            if seen >= rank:
                return min(math.exp((index + 0.5) * self._LOG_STEP) / 1000, self.max_ms)
        return self.max_ms

    def summary(self) -> dict[str, float | None]:
        """p50/p99/p999/max/mean in ms, rounded; None for each when empty."""
        if not self.count:
            return {**dict.fromkeys(PERCENTILES), "max": None, "mean": None}
        out: dict[str, float | None] = {name: round(self.quantile(f), 3) for name, f in PERCENTILES.items()}
        out["max"] = round(self.max_ms, 3)
        out["mean"] = round(self.total_ms / self.count, 3)
        return out


def si(value: float) -> str:
    """Three significant digits and a suffix: 1234567 -> '1.23M', 302000 -> '302k', 12 -> '12'."""
    for factor, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor * 0.9995:
            scaled = value / factor
            digits = 2 if abs(scaled) < 9.995 else 1 if abs(scaled) < 99.95 else 0
            return f"{scaled:.{digits}f}{suffix}"
    return f"{value:.0f}" if value == int(value) or abs(value) >= 100 else f"{value:.3g}"


def ms(value: float | None) -> str:
    """A latency in milliseconds for a column: '1.23ms', '-' when unknown."""
    if value is None or math.isnan(value):
        return "-"
    return f"{value:.2f}ms" if value < 100 else f"{value:.0f}ms"
