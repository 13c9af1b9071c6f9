"""EVENT_LOOP: the server runs on uvloop by default where it is installed, on asyncio's own loop
when told, and serves the job lifecycle either way."""

from __future__ import annotations

import re
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest
from tests.support.pinlater_server import ServerProcess
from tests.support.thrift_client import connect

SERVING = re.compile(r"serving PinLater on .*\(pids [\d ]+\), (\w+)$", re.MULTILINE)


def _loop_and_lifecycle(server: ServerProcess, ttypes: ModuleType) -> str:
    client, transport = connect("127.0.0.1", server.port)
    try:
        ctx = ttypes.RequestContext(source="event-loop-test")
        client.createQueue(ctx, "loop")
        jobs = [ttypes.PinLaterJob(body=b"job-%d" % i) for i in range(3)]
        client.enqueueJobs(ctx, ttypes.PinLaterEnqueueRequest(queueName="loop", jobs=jobs))
        got = client.dequeueJobs(ctx, ttypes.PinLaterDequeueRequest(queueName="loop", limit=10))
        assert sorted(got.jobs.values()) == [b"job-0", b"job-1", b"job-2"]
        acks = [ttypes.PinLaterJobAckInfo(jobDescriptor=d) for d in got.jobs]
        client.ackDequeuedJobs(ctx, ttypes.PinLaterJobAckRequest(queueName="loop", jobsSucceeded=acks))
        done = client.getJobCount(ctx, ttypes.PinLaterGetJobCountRequest(queueName="loop", jobState=2))
        assert done == 3
    finally:
        transport.close()
    match = SERVING.search(server.output())
    assert match is not None, server.output()
    return match.group(1)


def test_the_default_loop_is_uvloop(start_server: Callable[..., ServerProcess], thrift_gen: Any) -> None:
    pytest.importorskip("uvloop")
    assert _loop_and_lifecycle(start_server(), thrift_gen[1]) == "uvloop"


def test_event_loop_asyncio_runs_the_standard_loop(start_server: Callable[..., ServerProcess], thrift_gen: Any) -> None:
    server = start_server(properties={"EVENT_LOOP": "asyncio"})
    assert _loop_and_lifecycle(server, thrift_gen[1]) == "asyncio"
