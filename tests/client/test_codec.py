"""Replies the client cannot trust are refused before thriftpy2's decoder reads them: it reads
past a truncated buffer into stale bytes and allocates whatever a length claims."""

from __future__ import annotations

import struct

import pytest
from thriftpy2.protocol.cybin.cybin import TCyBinaryProtocol
from thriftpy2.thrift import TMessageType
from thriftpy2.transport.memory.cymemory import TCyMemoryBuffer

from pinlater.client.codec import decode
from pinlater.client.errors import PinLaterConnectionError
from pinlater.idl import idl


def reply(method: str, seqid: int, **result: object) -> bytes:
    buf = TCyBinaryProtocol(TCyMemoryBuffer())
    buf.write_message_begin(method, TMessageType.REPLY, seqid)
    buf.write_struct(getattr(idl.PinLater, f"{method}_result")(**result))
    buf.write_message_end()
    data: bytes = buf.trans.getvalue()
    return data


def test_a_truncated_or_lying_reply_is_a_connection_error_not_garbage() -> None:
    jobs = {f"q:s1:p1:{i}": b"body-%d" % i for i in range(3)}
    whole = reply("dequeueJobs", 5, success=idl.PinLaterDequeueResponse(jobs=jobs))
    assert decode("dequeueJobs", 5, whole, "a").jobs == jobs
    with pytest.raises(PinLaterConnectionError, match="undecodable reply to dequeueJobs"):
        decode("dequeueJobs", 5, whole[:-40], "a")  # (was decoded, the last body read from stale bytes)
    # an enqueue reply of 56 bytes declaring 13 million descriptors (the decoder allocated for them)
    header = reply("enqueueJobs", 6, success=idl.PinLaterEnqueueResponse(jobDescriptors=[]))
    lying = header[:-7] + struct.pack("!i", 13_000_000) + b"\x00" * 20 + b"\x00\x00"
    with pytest.raises(PinLaterConnectionError, match="undecodable reply to enqueueJobs"):
        decode("enqueueJobs", 6, lying, "a")
    # a string claiming 2^31 - 1 bytes (the process was killed)
    huge = reply("getQueueNames", 7, success={"q"})
    at = huge.index(b"\x00\x00\x00\x01q")
    with pytest.raises(PinLaterConnectionError, match="undecodable reply to getQueueNames"):
        decode("getQueueNames", 7, huge[:at] + struct.pack("!i", 2**31 - 1) + b"q\x00\x00", "a")
