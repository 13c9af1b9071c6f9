"""An unexpected error in a Thrift method is answered as an internal error, and its traceback
is logged once per 5 s per method with a count of the others: a request that meets one can be
sent again at will, and each wrote a traceback."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from pinlater.errors import ErrorCode, PinLaterError
from pinlater.idl import idl
from pinlater.server.handler import _thrift_errors
from pinlater.server.metrics import Metrics


class Failing:
    metrics = Metrics()

    @_thrift_errors
    async def get_queue_names(self, context: Any) -> None:
        raise RuntimeError("a bug")


def test_an_unexpected_error_is_answered_each_time_and_logged_once_in_a_while(caplog: pytest.LogCaptureFixture) -> None:
    failing = Failing()
    context = idl.RequestContext(source="peer")

    async def calls() -> list[str]:
        messages = []
        for _ in range(50):
            with pytest.raises(idl.PinLaterException) as info:
                await failing.get_queue_names(context)
            messages.append(info.value.message)
        return messages

    with caplog.at_level("ERROR", logger="pinlater.server.handler"):
        messages = asyncio.run(calls())
    assert set(messages) == {"internal error in get_queue_names: RuntimeError: a bug"}
    lines = [r for r in caplog.records if "unexpected error in get_queue_names" in r.getMessage()]
    assert len(lines) == 1 and lines[0].exc_info is not None, "one traceback, not fifty"


class Refusing:
    metrics = Metrics()

    @_thrift_errors
    async def enqueue_jobs(self, context: Any, code: ErrorCode) -> None:
        raise PinLaterError(code, "refused")

    @_thrift_errors
    async def get_queue_names(self, context: Any) -> list[str]:
        return []


def test_failures_are_counted_and_timed_under_the_original_names_too() -> None:
    """The original's /stats.txt counted failures as ``PinLater.<method>.errors.<CODE>`` (a
    NO_HEALTHY_SHARDS as INTERNAL_ERROR) and timed methods as ``PinLaterService.<method>_msec``
    with p95 and p9999: alerts and dashboards read those names. Prometheus gets the failures by
    method and code."""
    from prometheus_client import CollectorRegistry, generate_latest

    from pinlater.server.metrics import PrometheusCollector

    refusing = Refusing()

    async def calls() -> None:
        for code in (ErrorCode.QUEUE_NOT_FOUND, ErrorCode.QUEUE_NOT_FOUND, ErrorCode.NO_HEALTHY_SHARDS):
            with pytest.raises(idl.PinLaterException):
                await refusing.enqueue_jobs(None, code)
        await refusing.get_queue_names(None)

    asyncio.run(calls())
    counters = refusing.metrics.counters
    assert counters["PinLater.enqueueJobs.errors.QUEUE_NOT_FOUND"] == 2
    assert counters["PinLater.enqueueJobs.errors.INTERNAL_ERROR"] == 1
    assert counters["enqueue_jobs_error"] == 3 and counters["get_queue_names_ok"] == 1
    text = refusing.metrics.render_text()
    line = next(line for line in text.splitlines() if line.startswith("  PinLaterService.enqueueJobs_msec: ("))
    assert "count=3" in line and "p95=" in line and "p9999=" in line and "sum=" in line, line
    assert "  enqueue_jobs_msec: (count=3" in text and "  PinLater.enqueueJobs.errors.QUEUE_NOT_FOUND: 2" in text
    assert "PinLaterService.getQueueNames_msec" in refusing.metrics.snapshot()["metrics"]
    refusing.metrics.timings["broker_dequeue"].add(1.0)  # (ours alone: no name of the original's)
    assert "  broker_dequeue_msec: (" in refusing.metrics.render_text()
    assert "PinLaterService.brokerDequeue" not in refusing.metrics.render_text()
    registry = CollectorRegistry()
    registry.register(PrometheusCollector(refusing.metrics))
    scraped = generate_latest(registry).decode()
    assert 'pinlater_request_errors_total{code="QUEUE_NOT_FOUND",method="enqueueJobs"} 2.0' in scraped
    assert "PinLater." not in scraped.replace('"', "")  # (no family of a dotted name)
