"""The dashboard's rate history (``RateHistory`` in ``server/metrics.py``): per-second rates per
queue and interval, whose points sum to the counters' growth, kept and answered for the queues
that moved in the window only."""

from __future__ import annotations

from pinlater.server.metrics import RATE_KINDS, Metrics, RateHistory


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def test_points_sum_to_each_queues_growth_and_a_sliver_widens_the_last() -> None:
    metrics, clock = Metrics(), Clock()
    history = RateHistory(metrics, interval=5.0, keep=4, clock=clock)
    history.sample()
    metrics.incr("a_enqueue", 50)
    clock.now += 5
    history.sample()
    metrics.incr("a_enqueue", 10)
    metrics.incr("a_ack_succeeded", 20)
    clock.now += 5
    history.sample()
    clock.now += 1  # a sliver: the last point widens to now rather than chart a spike
    metrics.incr("a_dequeue", 6)
    rates = history.rates()
    assert rates["seconds"] == [5.0, 6.0] and rates["timestamps_ms"] == [1_005_000, 1_011_000]
    series = rates["queues"]["a"]
    assert set(series) == set(RATE_KINDS)
    grown = {kind: sum(r * s for r, s in zip(series[kind], rates["seconds"], strict=True)) for kind in RATE_KINDS}
    assert grown == {
        "enqueue": 60,
        "dequeue": 6,
        "ack_succeeded": 20,
        "ack_failed": 0,
        "dequeue_requests_rate_limited": 0,
    }
    clock.now += 4  # past half an interval: a point of its own
    assert history.rates()["seconds"] == [5.0, 5.0, 5.0]


def test_only_queues_that_moved_in_the_window_are_kept_and_answered() -> None:
    """10,000 queues with counters, one of them busy: the history and each answer hold that one
    (all 10,000 were copied at every sample and walked at every request, seconds a request)."""
    metrics, clock = Metrics(), Clock()
    for i in range(10_000):
        metrics.incr(f"q{i}_enqueue", 1)
    history = RateHistory(metrics, interval=5.0, keep=3, clock=clock)
    history.sample()
    for _ in range(5):
        metrics.incr("q7_dequeue", 5)
        clock.now += 5
        history.sample()
    assert len(history.intervals) == 3, "keep intervals at most"
    assert all(list(rates) == ["q7"] for _, _, rates in history.intervals)
    assert list(history.rates()["queues"]) == ["q7"]
    clock.now += 5 * 3  # q7 idle for the whole window: no queue has a series
    for _ in range(3):
        history.sample()
        clock.now += 5
    assert history.rates()["queues"] == {}
