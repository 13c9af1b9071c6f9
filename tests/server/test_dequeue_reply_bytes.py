"""One dequeue's reply is bounded in bytes (a real server, over its socket): a worker asking for
many jobs of large bodies gets those whose bodies fit under ``MAX_FRAME_BYTES`` (the first one
always), the rest stay PENDING for the next dequeue, and nothing is lost or handed out twice,
with the dequeue broker off and on.

Before the bound, 300 jobs of 2 MiB asked for at once grew an embedded server from 119 MB to
2.57 GB for a 629 MB reply that the client refused, every job of it claimed for nobody.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from tests.support.pinlater_server import ServerProcess

from pinlater.client import JobState, PinLaterClient

Q = "big_bodies"
MAX_FRAME = 1024 * 1024
BODY = 200_000
JOBS = 20


@pytest.mark.parametrize("broker", [False, True], ids=["direct", "broker"])
def test_a_dequeue_of_many_large_jobs_answers_what_fits_and_loses_none(
    start_server: Callable[..., ServerProcess], broker: bool
) -> None:
    server = start_server(
        properties={
            "MAX_FRAME_BYTES": MAX_FRAME,
            "BROKER_ENABLED": str(broker).lower(),
            "BROKER_BUFFER_BYTES": 3 * BODY,
        }
    )
    with PinLaterClient(f"127.0.0.1:{server.port}", timeout=30) as client:
        client.create_queue(Q)
        bodies = [(b"%03d" % i) * (BODY // 3) + b"x" * (BODY % 3) for i in range(JOBS)]
        for i in range(0, JOBS, 4):  # 800 kB a request: under MAX_FRAME_BYTES
            client.enqueue(Q, bodies[i : i + 4])

        seen: list[bytes] = []
        replies: list[int] = []
        while len(seen) < JOBS and len(replies) < 4 * JOBS:
            jobs = client.dequeue(Q, JOBS)
            assert jobs, "jobs are left: a dequeue finds some"
            sizes = [len(job.body) for job in jobs]
            assert sum(sizes[:-1]) < MAX_FRAME, f"the bodies before the last fit the budget: {sizes}"
            replies.append(len(jobs))
            seen += [job.body for job in jobs]
            client.ack(Q, succeeded=[job.descriptor for job in jobs])

        assert sorted(seen) == sorted(bodies), "every job once, none lost or twice"
        assert max(replies) <= 6, "1 MiB takes six bodies of 200 kB (five are 1,000,000 bytes)"
        if not broker:
            assert replies[0] == 6, "a direct dequeue takes all that fit"
        assert client.count(Q, JobState.PENDING) == 0
        assert client.count(Q, JobState.SUCCEEDED) == JOBS
