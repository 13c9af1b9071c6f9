"""One dequeue's reply is bounded in bytes (a real server, over its socket): a worker asking for
many jobs of large bodies gets those whose bodies fit under ``MAX_FRAME_BYTES`` (the first one
always), the rest stay PENDING for the next dequeue, and nothing is lost or handed out twice,
with the dequeue broker off and on.

Before the bound, 300 jobs of 2 MiB asked for at once grew an embedded server from 119 MB to
2.57 GB for a 629 MB reply that the client refused, every job of it claimed for nobody.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from types import ModuleType

import pytest
from tests.server.test_frames import frame, read_frame
from tests.support.pinlater_server import ServerProcess
from thrift.protocol import TBinaryProtocol
from thrift.Thrift import TMessageType
from thrift.transport import TTransport

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


@pytest.mark.parametrize("broker", [False, True], ids=["direct", "broker"])
def test_a_dequeue_of_countless_tiny_jobs_fits_its_reply_in_the_frame_limit(
    start_server: Callable[..., ServerProcess], thrift_gen: tuple[ModuleType, ModuleType], broker: bool
) -> None:
    """Each job costs a reply its descriptor twice and some 30 bytes besides its body: a budget of
    bodies alone let 300,000 one-byte jobs asked for at once (a limit of 2^31-1) make a 21.6 MB
    reply past a 16 MiB MAX_FRAME_BYTES, which a client that enforces one cannot read. The
    reply fits (those jobs' share is half of it at most), the rest stay PENDING, none is lost."""
    service, t = thrift_gen
    server = start_server(properties={"MAX_FRAME_BYTES": MAX_FRAME, "BROKER_ENABLED": str(broker).lower()})
    jobs = 20_000  # 1.3 MB of reply at about 66 bytes each
    with PinLaterClient(f"127.0.0.1:{server.port}", timeout=30) as client:
        client.create_queue("tiny")
        for i in range(0, jobs, 5000):
            client.enqueue("tiny", [b"%d" % (n % 10) for n in range(i, i + 5000)])
        seen: set[str] = set()
        calls = 0
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
            while len(seen) < jobs and calls < 50:
                calls += 1
                buf = TTransport.TMemoryBuffer()
                proto = TBinaryProtocol.TBinaryProtocol(buf)
                proto.writeMessageBegin("dequeueJobs", TMessageType.CALL, calls)
                request = t.PinLaterDequeueRequest(queueName="tiny", limit=2**31 - 1)
                service.dequeueJobs_args(context=t.RequestContext(source="t"), request=request).write(proto)
                proto.writeMessageEnd()
                sock.sendall(frame(buf.getvalue()))
                reply = read_frame(sock)
                assert len(reply) <= MAX_FRAME, f"a reply of {len(reply)} bytes"
                result = service.dequeueJobs_result()
                proto = TBinaryProtocol.TBinaryProtocol(TTransport.TMemoryBuffer(reply))
                proto.readMessageBegin()
                result.read(proto)
                got = set(result.success.jobs)
                assert got and not got & seen, "each dequeue finds jobs, none handed out twice"
                seen |= got
                client.ack("tiny", succeeded=sorted(got))
        assert len(seen) == jobs and calls > 1
        assert client.count("tiny", JobState.SUCCEEDED) == jobs
