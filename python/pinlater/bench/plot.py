"""The PNG of a ``pinlater bench`` run: throughput and latency over time (matplotlib, Agg)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pinlater.bench.runner import OPS
from pinlater.bench.stats import si

COLORS = {"enqueue": "tab:blue", "dequeue": "tab:orange", "ack": "tab:green"}


class PlotUnavailableError(RuntimeError):
    """matplotlib is not installed."""


def draw(result: dict[str, Any], path: Path) -> None:
    """Two panels sharing the time axis: jobs/min per operation, then p50 (dashed) and p99 latency."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import FuncFormatter
    except ImportError:
        raise PlotUnavailableError("--plot needs matplotlib: pip install 'pinlater[bench]'") from None
    rows = result["timeline"]
    t = [row["t"] for row in rows]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
    try:
        for op in OPS:
            top.plot(t, [row[f"{op}_jobs_per_min"] for row in rows], label=op, color=COLORS[op], marker=".")
            p50 = [_nan(row[f"{op}_p50_ms"]) for row in rows]
            p99 = [_nan(row[f"{op}_p99_ms"]) for row in rows]
            bottom.plot(t, p99, label=f"{op} p99", color=COLORS[op], marker=".")
            bottom.plot(t, p50, label=f"{op} p50", color=COLORS[op], linestyle="--")
        cfg = result["config"]
        top.set_title(
            f"pinlater bench: {result['backend']}, {cfg['producers']} producer(s), {cfg['consumers']} consumer(s), "
            f"batch {cfg['batch']}, {cfg['body_bytes']}-byte bodies"
        )
        top.set_ylabel("jobs/min")
        top.yaxis.set_major_formatter(FuncFormatter(lambda value, _: si(value)))
        top.set_ylim(bottom=0)
        top.grid(True, alpha=0.3)
        top.legend(loc="lower right")
        bottom.set_ylabel("latency (ms)")
        bottom.set_xlabel("seconds into the run")
        bottom.set_ylim(bottom=0)
        bottom.grid(True, alpha=0.3)
        bottom.legend(loc="upper right", ncol=3, fontsize="small")
        fig.tight_layout()
        fig.savefig(path, format="png", dpi=100)
    finally:
        plt.close(fig)


def _nan(value: float | None) -> float:
    return float("nan") if value is None else value
