"""The Thrift struct walk through the extension: real argument structs, every error, bad input."""

from __future__ import annotations

import struct
import threading

import pytest
from thriftpy2.protocol.cybin.cybin import TCyBinaryProtocol
from thriftpy2.transport.memory.cymemory import TCyMemoryBuffer

from pinlater._pinlater import MalformedThriftError, thrift_struct_end
from pinlater.idl import idl

BOOL, BYTE, DOUBLE, I16, I32, I64, STRING, STRUCT, MAP, SET, LIST = 2, 3, 4, 6, 8, 10, 11, 12, 13, 14, 15


def encode(value: object) -> bytes:
    buf = TCyMemoryBuffer()
    TCyBinaryProtocol(buf).write_struct(value)
    data: bytes = buf.getvalue()
    return data


def field(ttype: int, fid: int = 1) -> bytes:
    return struct.pack(">bh", ttype, fid)


def i32(n: int) -> bytes:
    return struct.pack(">i", n)


def enqueue_args(n_jobs: int) -> object:
    jobs = [idl.PinLaterJob(body=bytes([i % 256]) * 50, priority=2, customStatus="é") for i in range(n_jobs)]
    return idl.PinLater.enqueueJobs_args(
        context=idl.RequestContext(source="t", requestId="r"),
        request=idl.PinLaterEnqueueRequest(queueName="q", jobs=jobs),
    )


def test_real_argument_structs_end_where_they_end() -> None:
    ack = idl.PinLaterJobAckRequest(
        queueName="q",
        jobsSucceeded=[idl.PinLaterJobAckInfo(jobDescriptor="q:s1:p1:1")],
        jobsFailed=[idl.PinLaterJobAckInfo(jobDescriptor="q:s1:p1:2", retryDelayMillis=2**40)],
    )
    lookup = idl.PinLaterLookupJobRequest(jobDescriptors=["a:s1:p1:1", "b:s1:p1:2"], includeBody=True)
    structs = [
        enqueue_args(0),
        enqueue_args(1000),
        idl.PinLater.ackDequeuedJobs_args(context=idl.RequestContext(source="t"), request=ack),
        idl.PinLater.lookupJobs_args(context=idl.RequestContext(source="t"), request=lookup),
        idl.PinLater.getQueueNames_args(),
    ]
    for value in structs:
        data = encode(value)
        assert thrift_struct_end(data) == len(data)
        assert thrift_struct_end(b"hdr" + data + b"trailing junk", 3) == 3 + len(data)


def test_strings_are_bytes_to_the_walk() -> None:
    data = field(STRING) + i32(3) + b"\xff\xfe\x80" + b"\x00"
    assert thrift_struct_end(data) == len(data)


def test_empty_containers_may_carry_junk_types() -> None:
    data = field(LIST) + bytes([99]) + i32(0) + field(MAP, 2) + bytes([0, 255]) + i32(0) + b"\x00"
    assert thrift_struct_end(data) == len(data)


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b"", "struct truncated"),
        (field(I32) + i32(1), "struct truncated"),
        (field(I64) + b"\x00" * 7, "struct truncated"),
        (field(STRING) + b"\x00\x00", "string truncated"),
        (field(STRING) + i32(-1) + b"\x00", "negative string length"),
        (field(STRING) + i32(2**31 - 1) + b"\x00", "struct truncated"),
        (field(1) + b"\x00" * 8, "unknown wire type 1"),
        (field(99) + b"\x00", "unknown wire type 99"),
        (field(LIST) + b"\x08\x00\x00", "list header truncated"),
        (field(SET) + b"\x08", "list header truncated"),
        (field(MAP) + b"\x0b\x08\x00\x00\x00", "map header truncated"),
        (field(LIST) + bytes([I32]) + i32(-3) + b"\x00", "negative container size"),
        (field(LIST, 2) + bytes([99]) + i32(2**31 - 1) + b"\x00", "unknown element type in (99,)"),
        (field(MAP) + bytes([STRING, 99]) + i32(1) + b"\x00", "unknown element type in (11, 99)"),
        (field(LIST) + bytes([BYTE]) + i32(3) + b"\x01\x02", "container truncated"),
        (field(LIST) + bytes([STRING]) + i32(2) + i32(1) + b"a" + i32(50) + b"x", "container truncated"),
        (field(STRUCT) * 33 + b"\x00" * 34, "structs nested too deeply"),
        (
            field(LIST) + (bytes([LIST]) + i32(1)) * 32 + bytes([BYTE]) + i32(1) + b"\x07\x00",
            "containers nested too deeply",
        ),
    ],
)
def test_malformed(payload: bytes, message: str) -> None:
    with pytest.raises(MalformedThriftError) as info:
        thrift_struct_end(payload)
    assert str(info.value) == message
    assert isinstance(info.value, ValueError)


def test_nesting_limit_is_inclusive() -> None:
    structs = field(STRUCT) * 32 + b"\x00" * 33
    assert thrift_struct_end(structs) == len(structs)
    lists = field(LIST) + (bytes([LIST]) + i32(1)) * 31 + bytes([BYTE]) + i32(1) + b"\x07\x00"
    assert thrift_struct_end(lists) == len(lists)


def test_every_prefix_of_a_real_struct_is_malformed() -> None:
    data = encode(enqueue_args(2))
    for cut in range(len(data)):
        with pytest.raises(MalformedThriftError):
            thrift_struct_end(data[:cut])


def test_offsets() -> None:
    assert thrift_struct_end(b"\x00\x00", 1) == 2
    with pytest.raises(MalformedThriftError, match="struct truncated"):
        thrift_struct_end(b"\x00", 1)
    with pytest.raises(MalformedThriftError, match="struct truncated"):
        thrift_struct_end(b"\x00", 2**63)
    with pytest.raises(OverflowError):
        thrift_struct_end(b"\x00", -1)


def test_only_bytes_are_walked() -> None:
    with pytest.raises(TypeError):
        thrift_struct_end("\x00")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        thrift_struct_end(bytearray(b"\x00"))  # type: ignore[arg-type]


def test_many_threads_walk_at_once() -> None:
    data = encode(enqueue_args(200))
    results: list[int] = []

    def walk() -> None:
        results.extend(thrift_struct_end(data) for _ in range(200))

    threads = [threading.Thread(target=walk) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert results == [len(data)] * 800


def test_large_payloads_walk_without_the_gil_and_agree() -> None:
    data = encode(enqueue_args(20_000))  # about 1.5 MB: past the 1 MiB release threshold
    assert len(data) > 1 << 20
    results: list[int] = []
    threads = [threading.Thread(target=lambda: results.append(thrift_struct_end(data))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert results == [len(data)] * 4
    with pytest.raises(MalformedThriftError) as info:
        thrift_struct_end(data[:-2])  # both STOPs gone
    assert str(info.value) == "struct truncated"
