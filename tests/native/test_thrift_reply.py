"""``encode_dequeue_reply``: the dequeue reply written by the extension is, byte for byte, what
thriftpy2 writes for the same ``PinLaterDequeueResponse`` objects, and bad jobs are errors."""

from __future__ import annotations

import random

import pytest
from thriftpy2.protocol.cybin.cybin import TCyBinaryProtocol
from thriftpy2.thrift import TMessageType
from thriftpy2.transport.memory.cymemory import TCyMemoryBuffer

from pinlater._pinlater import encode_dequeue_reply
from pinlater.backends.base import ClaimedJob
from pinlater.backends.sharded import DequeuedJob
from pinlater.idl import idl


def thriftpy2_reply(seqid: int, jobs: list[DequeuedJob]) -> bytes:
    response = idl.PinLaterDequeueResponse(jobs={}, jobMetadata={})
    for item in jobs:
        response.jobs[item.descriptor] = item.job.body
        response.jobMetadata[item.descriptor] = idl.PinLaterDequeueMetadata(
            attemptsAllowed=item.job.attempts_allowed, attemptsRemaining=item.job.attempts_remaining
        )
    buf = TCyMemoryBuffer()
    proto = TCyBinaryProtocol(buf)
    proto.write_message_begin("dequeueJobs", TMessageType.REPLY, seqid)
    proto.write_struct(idl.PinLater.dequeueJobs_result(success=response))
    proto.write_message_end()
    out: bytes = buf.getvalue()
    return out


def job(descriptor: str, body: bytes, allowed: int, remaining: int) -> DequeuedJob:
    return DequeuedJob(descriptor, ClaimedJob(7, body, allowed, remaining, 1, 2))


def test_random_replies_match_thriftpy2_byte_for_byte() -> None:
    rng = random.Random(5)
    for _ in range(300):
        n = rng.choice([0, 1, 2, rng.randrange(3, 300)])
        queue = rng.choice(["q", "emails_2", "ünïcode"])
        jobs = [
            job(
                f"{queue}:s{rng.randrange(1, 9)}:p{rng.randrange(1, 4)}:{i}",
                rng.randbytes(rng.choice([0, 1, rng.randrange(2, 3000)])),
                rng.randrange(-(2**31), 2**31),
                rng.randrange(-(2**31), 2**31),
            )
            for i in range(n)
        ]
        seqid = rng.randrange(-(2**31), 2**31)
        assert encode_dequeue_reply("dequeueJobs", seqid, jobs) == thriftpy2_reply(seqid, jobs)


def test_the_reply_decodes_back_to_the_jobs_in_order() -> None:
    jobs = [job("q:s1:p2:9", b"nine", 3, 1), job("q:s1:p1:4", b"", 1, 0)]
    payload = encode_dequeue_reply("dequeueJobs", 11, jobs)
    proto = TCyBinaryProtocol(TCyMemoryBuffer(payload))
    assert proto.read_message_begin() == ("dequeueJobs", TMessageType.REPLY, 11)
    result = proto.read_struct(idl.PinLater.dequeueJobs_result())
    assert list(result.success.jobs.items()) == [("q:s1:p2:9", b"nine"), ("q:s1:p1:4", b"")]
    meta = result.success.jobMetadata
    assert [(m.attemptsAllowed, m.attemptsRemaining) for m in meta.values()] == [(3, 1), (1, 0)]


@pytest.mark.parametrize(
    ("jobs", "error", "message"),
    [
        ([job("q:s1:p1:1", b"x", 2**31, 1)], ValueError, "attempts_allowed 2147483648 does not fit"),
        ([job("q:s1:p1:1", b"x", 1, -(2**31) - 1)], ValueError, "attempts_remaining -2147483649"),
        ([("q:s1:p1:1",)], TypeError, "not a DequeuedJob tuple"),
        ([("q:s1:p1:1", (1, b"x"))], TypeError, "not a ClaimedJob tuple"),
        (["q:s1:p1:1"], TypeError, "not a DequeuedJob tuple"),
        ([(b"q:s1:p1:1", ClaimedJob(1, b"x", 1, 1, 0, 0))], TypeError, "descriptor is not a str"),
        ([("q:s1:p1:1", ClaimedJob(1, "x", 1, 1, 0, 0))], TypeError, "body is not bytes"),  # type: ignore[arg-type]
    ],
)
def test_bad_jobs_are_errors(jobs: list[DequeuedJob], error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        encode_dequeue_reply("dequeueJobs", 1, jobs)
