"""``logthrottle``: one line per interval for events a peer can trigger, with the count dropped."""

from __future__ import annotations

import logging

import pytest

from pinlater import logthrottle


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(logthrottle.time, "monotonic", clock)
    return clock


def test_a_throttled_log_writes_one_line_an_interval_and_counts_the_rest(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    throttled = logthrottle.ThrottledLog(logging.getLogger("t.throttled"), interval=5.0)
    with caplog.at_level(logging.WARNING, logger="t.throttled"):
        assert throttled("peer %s", "a")
        assert not throttled("peer %s", "b") and not throttled("peer %s", "c")
        assert throttled.suppressed == 2
        clock.now += 5.0
        assert throttled("peer %s", "d")
        clock.now += 5.0
        assert throttled("peer %s", "e")
    assert [r.getMessage() for r in caplog.records] == [
        "peer a",
        "peer d (and 2 more like this since the last such line)",
        "peer e",
    ]


def test_a_throttle_filter_cuts_a_peers_records_and_passes_the_servers_own(clock: Clock) -> None:
    throttle = logthrottle.ThrottleFilter((ValueError,), interval=5.0, cut=30)

    def record(exc: BaseException | None) -> logging.LogRecord:
        info = None if exc is None else (type(exc), exc, None)
        return logging.LogRecord("aiohttp.server", logging.ERROR, __file__, 1, "bad request", None, info)

    first = record(ValueError("x" * 100))
    assert throttle.filter(first)
    assert first.getMessage() == "bad request: ValueError: xxxxx... (95 more characters)" and first.exc_info is None
    assert not throttle.filter(record(ValueError("again")))
    own = record(KeyError("a bug"))
    assert throttle.filter(own) and own.exc_info is not None, "a record of another kind is left whole"
    clock.now += 5.0
    later = record(ValueError("y"))
    assert throttle.filter(later)
    assert later.getMessage() == "bad request: ValueError: y (and 1 more like this since the last such line)"
