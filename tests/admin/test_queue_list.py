"""The dashboard's queue list (``/api/queues``) and ``/metrics``' per-queue job counts through a
real server on two embedded shards: the numbers are what getJobCount answers, and a load costs
one counting store call per shard however many queues there are."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tests.admin.conftest import FAILED, IN_PROGRESS, PENDING, SUCCEEDED, Http, Jobs, http
from tests.support.pinlater_server import ServerProcess
from tests.support.wait import wait_for

COLUMNS = {"pending": PENDING, "in_progress": IN_PROGRESS, "succeeded": SUCCEEDED, "failed": FAILED}


def queue_jobs(resp: Http) -> dict[tuple[str, str], float]:
    """``pinlater_queue_jobs`` samples of a /metrics body: (queue, state) -> jobs."""
    out = {}
    for family in text_string_to_metric_families(resp.text):
        for s in family.samples:
            if s.name == "pinlater_queue_jobs":
                out[(s.labels["queue"], s.labels["state"])] = s.value
    return out


def store_calls(srv: ServerProcess) -> int:
    return int(http(srv, "/stats.json").json()["counters"].get("queue_counts_store_calls", 0))


def test_queue_list_and_metrics_count_as_get_job_count(
    start_server: Callable[..., ServerProcess], open_client: Callable[[ServerProcess], Any], ttypes: ModuleType
) -> None:
    srv = start_server(properties={"EMBEDDED_NUM_SHARDS": 2})
    jobs = Jobs(open_client(srv), ttypes)
    later = 4_000_000_000_000  # far in the future
    for i, queue in enumerate(["q_a", "q_b", "q_c"]):
        jobs.create(queue)
        jobs.enqueue(queue, *[b"j%d" % n for n in range(3 + i)], priority=1 + i % 3)
        jobs.enqueue(queue, b"later", priority=2, runAfterTimestampMillis=later)
        got = jobs.dequeue(queue, 2)
        jobs.ack(queue, ok=list(got)[:1])
    jobs.create("q_empty")
    jobs.fail_one("q_empty", b"x")

    calls_before = store_calls(srv)
    listed = http(srv, "/api/queues").json()
    assert store_calls(srv) - calls_before == 2, "one counting call per shard"
    queues = {q["name"]: q["counts"] for q in listed["queues"]}
    assert sorted(queues) == ["q_a", "q_b", "q_c", "q_empty"]
    metric = queue_jobs(http(srv, "/metrics"))
    nonzero = 0
    for queue, counts in queues.items():
        for column, state in COLUMNS.items():
            expected = jobs.count(queue, state)
            assert sum(counts[column]) == expected == metric[(queue, column)], (queue, column)
            nonzero += expected > 0
        future = jobs.c.getJobCount(
            jobs.ctx, ttypes.PinLaterGetJobCountRequest(queueName=queue, jobState=PENDING, countFutureJobs=True)
        )
        assert sum(counts["pending_future"]) == future == metric[(queue, "pending_future")] == 1 - (queue == "q_empty")
    assert nonzero >= 8
    assert queues["q_b"]["pending"] == [0, 2, 0] and queues["q_b"]["in_progress"] == [0, 1, 0]

    for i in range(30):  # thirty more queues: the list still costs one call per shard
        jobs.create(f"more_{i}")
    calls_before = store_calls(srv)
    assert len(http(srv, "/api/queues").json()["queues"]) == 34
    assert store_calls(srv) - calls_before == 2
    assert queue_jobs(http(srv, "/metrics"))[("more_29", "pending")] == 0


def test_the_first_count_pass_runs_when_the_server_starts(start_server: Callable[..., ServerProcess]) -> None:
    """The server counts its queues once as it starts, before anything asks (no queue list or
    /metrics load here), so the dashboard's first load finds counts rather than waits for them."""
    srv = start_server(properties={"EMBEDDED_NUM_SHARDS": 2})
    assert wait_for(lambda: store_calls(srv) == 2, what="the start-up count pass (one call per shard)")
    listed = http(srv, "/api/queues").json()
    assert listed["queues"] == [] and listed["counts_at_ms"] is not None
