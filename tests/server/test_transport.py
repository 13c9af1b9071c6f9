"""FramedServer + Dispatcher on a real loopback socket, driven by an Apache-generated client.

The server runs on its own asyncio loop in a background thread with a trivial in-test handler,
so these tests exercise the wire and the transport, not the PinLater semantics.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
import time
from collections.abc import Coroutine, Iterator
from types import ModuleType
from typing import Any, TypeVar

import pytest
from tests.support.thrift_client import connect
from tests.support.wait import wait_for
from thrift.protocol import TBinaryProtocol
from thrift.Thrift import TApplicationException, TMessageType, TType
from thrift.transport import TSocket, TTransport

from pinlater._pinlater import (
    AckCall,
    ClaimedJobs,
    DequeueCall,
    EnqueueCall,
    JobRejected,
    LocalIds,
    encode_dequeue_batches,
    encode_enqueue_reply,
    encode_void_reply,
)
from pinlater.idl import idl
from pinlater.server.connection import PIPELINE_DEPTH, Connection
from pinlater.server.dispatch import Dispatcher
from pinlater.server.transport import FramedServer, RequestSlots, peer_connection_cap, peer_host

T = TypeVar("T")
MAX_FRAME = 64 * 1024
BINARY = bytes(range(256)) + b"\xff\xfe\x00\x80"  # not UTF-8


class EchoHandler:
    """All sixteen methods, answering from their arguments; records what it was sent."""

    def __init__(self) -> None:
        self.queues: set[str] = set()
        self.calls: list[tuple[str, Any]] = []
        self.slow_started = threading.Event()
        self.slow_release = asyncio.Event()

    async def create_queue(self, context: Any, name: str) -> None:
        self.calls.append(("create_queue", (context, name)))
        self.queues.add(name)

    async def delete_queue(self, context: Any, name: str, password: str) -> None:
        raise idl.PinLaterException(errorCode=413, message=f"queue {name} not found")

    # The hot methods take the extension's decoded call and answer the reply's bytes.

    async def enqueue_jobs(self, call: EnqueueCall, seqid: int) -> bytes:
        try:
            batch = call.batch(3, 0)
        except JobRejected as exc:
            raise idl.PinLaterException(errorCode=exc.code, message=str(exc)) from None
        self.calls.append(("enqueue_jobs", (call, batch.to_list())))
        ids = LocalIds(list(range(len(batch))))
        return encode_enqueue_reply("enqueueJobs", seqid, call.queue or "", "1", batch, ids)

    async def dequeue_jobs(self, call: DequeueCall, seqid: int) -> bytes:
        jobs = ClaimedJobs([(i, BINARY[: i + 1], 3, 2, 0, 0) for i in range(call.limit)])
        return encode_dequeue_batches("dequeueJobs", seqid, call.queue or "", [("1", 1, jobs)])

    async def ack_dequeued_jobs(self, call: AckCall, seqid: int) -> bytes:
        self.calls.append(("ack_dequeued_jobs", call))
        return encode_void_reply("ackDequeuedJobs", seqid)

    async def checkpoint_jobs(self, context: Any, request: Any) -> None:
        if request.queueName == "slow":
            self.slow_started.set()
            await self.slow_release.wait()
        self.calls.append(("checkpoint_jobs", request))

    async def lookup_jobs(self, context: Any, request: Any) -> Any:
        return {
            d: idl.PinLaterJobInfo(
                jobDescriptor=d,
                jobState=1,
                attemptsAllowed=3,
                attemptsRemaining=2,
                customStatus="ok",
                createdAtTimestampMillis=1_700_000_000_000,
                body=BINARY if request.includeBody else None,
            )
            for d in request.jobDescriptors
        }

    async def get_job_count(self, context: Any, request: Any) -> int:
        return int(request.priority) * 1000 + int(request.jobState)

    async def get_queue_names(self, context: Any) -> set[str]:
        return set(self.queues)

    async def scan_jobs(self, context: Any, request: Any) -> Any:
        info = idl.PinLaterJobInfo(
            jobDescriptor=f"{request.queueName}:s1:p1:7",
            jobState=request.jobState,
            attemptsAllowed=1,
            attemptsRemaining=0,
            customStatus="",
            createdAtTimestampMillis=5,
        )
        return idl.PinLaterScanJobsResponse(scannedJobs=[info], continuation="-1")

    async def retry_failed_jobs(self, context: Any, request: Any) -> int:
        raise RuntimeError("storage on fire")

    async def delete_jobs(self, context: Any, request: Any) -> int:
        return int(request.limit)

    async def cancel_jobs(self, context: Any, request: Any) -> int:
        return len(request.jobDescriptors)

    async def upsert_schedule(self, context: Any, schedule: Any) -> None:
        self.calls.append(("upsert_schedule", schedule))

    async def delete_schedule(self, context: Any, queueName: str, name: str) -> None:
        self.calls.append(("delete_schedule", (queueName, name)))

    async def list_schedules(self, context: Any, queueName: str) -> list[Any]:
        return []


class ServerThread:
    """A FramedServer on its own event loop in a daemon thread."""

    def __init__(self, handler: EchoHandler, **options: Any) -> None:
        self.handler = handler
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="framed-server", daemon=True)
        self.thread.start()
        self.server = FramedServer(Dispatcher(handler), "127.0.0.1", 0, **options)
        self.call(self.server.start())
        self.port = self.server.port

    def submit(self, coro: Coroutine[Any, Any, T]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = 15) -> T:
        result: T = self.submit(coro).result(timeout)
        return result

    def close(self) -> None:
        try:
            self.call(self.server.stop(5))
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)
            self.loop.close()


@pytest.fixture
def srv() -> Iterator[ServerThread]:
    server = ServerThread(EchoHandler(), max_frame_bytes=MAX_FRAME)
    yield server
    server.close()


@pytest.fixture
def gen(thrift_gen: tuple[ModuleType, ModuleType]) -> ModuleType:
    return thrift_gen[1]


@pytest.fixture
def open_client(srv: ServerThread, thrift_gen: tuple[ModuleType, ModuleType]) -> Iterator[Any]:
    transports: list[Any] = []

    def open_() -> Any:
        client, transport = connect("127.0.0.1", srv.port)
        transports.append(transport)
        return client

    yield open_
    for transport in transports:
        transport.close()


# -- raw-socket helpers ---------------------------------------------------------------------------


def encode_call(name: str, seqid: int, args: Any = None, strict: bool = True) -> bytes:
    """A CALL message built with Apache's protocol; ``args`` None means a struct holding only the
    RequestContext (every method's first argument, which the server requires)."""
    buf = TTransport.TMemoryBuffer()
    proto = TBinaryProtocol.TBinaryProtocol(buf, strictWrite=strict)
    proto.writeMessageBegin(name, TMessageType.CALL, seqid)
    if args is None:
        proto.writeStructBegin("args")
        proto.writeFieldBegin("context", TType.STRUCT, 1)
        proto.writeStructBegin("RequestContext")
        proto.writeFieldBegin("source", TType.STRING, 1)
        proto.writeString("test")
        proto.writeFieldEnd()
        proto.writeFieldStop()
        proto.writeStructEnd()
        proto.writeFieldEnd()
        proto.writeFieldStop()
        proto.writeStructEnd()
    else:
        args.write(proto)
    proto.writeMessageEnd()
    value: bytes = buf.getvalue()
    return value


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def raw_socket(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    return sock


def recv_exact(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError(f"closed after {len(data)} of {n} bytes")
        data += chunk
    return data


def read_reply(sock: socket.socket) -> tuple[str, int, int, TBinaryProtocol.TBinaryProtocol]:
    (length,) = struct.unpack(">i", recv_exact(sock, 4))
    proto = TBinaryProtocol.TBinaryProtocol(TTransport.TMemoryBuffer(recv_exact(sock, length)))
    name, mtype, seqid = proto.readMessageBegin()
    return name, mtype, seqid, proto


def read_app_exception(sock: socket.socket) -> tuple[int, TApplicationException]:
    _, mtype, seqid, proto = read_reply(sock)
    assert mtype == TMessageType.EXCEPTION
    exc = TApplicationException()
    exc.read(proto)
    return seqid, exc


def refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=10).close()
    except ConnectionRefusedError:
        return True
    return False


def assert_closed_by_server(sock: socket.socket) -> None:
    assert sock.recv(1) == b"", "the server should have closed this connection"


# -- the contract round-trips ------------------------------------------------------------------


def test_every_method_round_trips(srv: ServerThread, open_client: Any, gen: ModuleType) -> None:
    c = open_client()
    ctx = gen.RequestContext(source="tests:localhost", requestId="r1")
    c.createQueue(ctx, "q1")
    c.createQueue(ctx, "q2")
    assert c.getQueueNames(ctx) == {"q1", "q2"}

    jobs = [gen.PinLaterJob(body=BINARY, priority=3), gen.PinLaterJob(body=b"")]
    resp = c.enqueueJobs(ctx, gen.PinLaterEnqueueRequest(queueName="q1", jobs=jobs))
    assert resp.jobDescriptors == ["q1:s1:p3:0", "q1:s1:p1:1"]
    call, seen = srv.handler.calls[-1][1]
    assert [j[1] for j in seen] == [BINARY, b""]
    assert [j[0] for j in seen] == [3, 1]
    assert seen[0][3] == 2 and seen[0][4] == ""  # IDL defaults: numAttemptsAllowed, customStatus
    assert (call.queue, call.source, call.request_id) == ("q1", "tests:localhost", "r1")
    create_ctx = srv.handler.calls[0][1][0]
    assert (create_ctx.source, create_ctx.requestId) == ("tests:localhost", "r1")
    with pytest.raises(gen.PinLaterException) as refused:  # a byte priority, sign and all
        c.enqueueJobs(ctx, gen.PinLaterEnqueueRequest(queueName="q1", jobs=[gen.PinLaterJob(body=b"", priority=-128)]))
    assert refused.value.errorCode == gen.ErrorCode.PRIORITY_NOT_SUPPORTED and "-128" in refused.value.message

    deq = c.dequeueJobs(ctx, gen.PinLaterDequeueRequest(queueName="q1", limit=3))
    assert deq.jobs == {f"q1:s1:p1:{i}": BINARY[: i + 1] for i in range(3)}
    assert deq.jobMetadata["q1:s1:p1:2"].attemptsRemaining == 2

    ack = gen.PinLaterJobAckRequest(
        queueName="q1",
        jobsSucceeded=[gen.PinLaterJobAckInfo(jobDescriptor="q1:s1:p1:0")],
        jobsFailed=[gen.PinLaterJobAckInfo(jobDescriptor="q1:s1:p1:1", retryDelayMillis=2**35)],
    )
    assert c.ackDequeuedJobs(ctx, ack) is None
    acked = srv.handler.calls[-1][1]
    [(shard, group)] = acked.groups()
    assert shard == "1" and group.succeeded() == [(1, 0, "", 0)]
    assert acked.retried() == [("1", 1, 2**35)]  # an i64 delay (a year), whole

    check = gen.PinLaterCheckpointJobRequest(jobDescriptor="q1:s1:p1:0", newBody="é", moveToPending=True)
    c.checkpointJobs(ctx, gen.PinLaterCheckpointJobsRequest(queueName="q1", requests=[check]))
    assert srv.handler.calls[-1][1].requests[0].newBody == "é"

    found = c.lookupJobs(ctx, gen.PinLaterLookupJobRequest(jobDescriptors=["a:s1:p1:1"], includeBody=True))
    assert found["a:s1:p1:1"].body == BINARY and found["a:s1:p1:1"].jobState == gen.PinLaterJobState.IN_PROGRESS

    count = gen.PinLaterGetJobCountRequest(queueName="q1", jobState=gen.PinLaterJobState.FAILED, priority=7)
    assert c.getJobCount(ctx, count) == 7003

    scan = c.scanJobs(ctx, gen.PinLaterScanJobsRequest(queueName="q1", jobState=gen.PinLaterJobState.SUCCEEDED))
    assert scan.scannedJobs[0].jobDescriptor == "q1:s1:p1:7" and scan.continuation == "-1"
    assert scan.scannedJobs[0].body is None

    deleted = c.deleteJobs(ctx, gen.PinLaterDeleteJobsRequest(queueName="q1", jobState=gen.PinLaterJobState.FAILED))
    assert deleted == 1000  # the IDL default limit, sent by the client


def test_unversioned_message_headers_are_accepted(
    srv: ServerThread, thrift_gen: tuple[ModuleType, ModuleType], gen: ModuleType
) -> None:
    transport = TTransport.TFramedTransport(TSocket.TSocket("127.0.0.1", srv.port))
    proto = TBinaryProtocol.TBinaryProtocol(transport, strictRead=False, strictWrite=False)
    client = thrift_gen[0].Client(proto)
    transport.open()
    try:
        client.createQueue(gen.RequestContext(source="old:client"), "legacy")
        assert client.getQueueNames(gen.RequestContext(source="old:client")) == {"legacy"}
    finally:
        transport.close()


def test_declared_exception_arrives_with_code_and_message(open_client: Any, gen: ModuleType) -> None:
    c = open_client()
    with pytest.raises(gen.PinLaterException) as info:
        c.deleteQueue(gen.RequestContext(source="t"), "nope", "pw")
    assert info.value.errorCode == gen.ErrorCode.QUEUE_NOT_FOUND == 413
    assert info.value.message == "queue nope not found"


def test_unexpected_exception_is_internal_error_and_connection_survives(
    open_client: Any, gen: ModuleType, caplog: pytest.LogCaptureFixture
) -> None:
    c = open_client()
    ctx = gen.RequestContext(source="t")
    with pytest.raises(TApplicationException) as info:
        c.retryFailedJobs(ctx, gen.PinLaterRetryFailedJobsRequest(queueName="q"))
    assert info.value.type == TApplicationException.INTERNAL_ERROR
    assert info.value.message == "internal error: RuntimeError: storage on fire"
    assert [r.exc_info is not None for r in caplog.records if "retryFailedJobs" in r.getMessage()] == [True]
    c.createQueue(ctx, "after")
    assert c.getQueueNames(ctx) == {"after"}


def test_missing_required_field_is_protocol_error_and_connection_survives(open_client: Any, gen: ModuleType) -> None:
    c = open_client()
    ctx = gen.RequestContext(source="t")
    jobs = [gen.PinLaterJob(body=b"x"), gen.PinLaterJob(priority=2)]  # the client does not validate
    with pytest.raises(TApplicationException) as info:
        c.enqueueJobs(ctx, gen.PinLaterEnqueueRequest(queueName="q", jobs=jobs))
    assert info.value.type == TApplicationException.PROTOCOL_ERROR
    assert info.value.message == "missing required field PinLaterJob.body at request.jobs[1].body"
    assert c.getQueueNames(ctx) == set()


def test_unknown_method(srv: ServerThread) -> None:
    with raw_socket(srv.port) as sock:
        sock.sendall(frame(encode_call("noSuchMethod", 42)))
        seqid, exc = read_app_exception(sock)
        assert (seqid, exc.type) == (42, TApplicationException.UNKNOWN_METHOD)
        sock.sendall(frame(encode_call("getQueueNames", 43)))  # still served
        assert read_reply(sock)[1:3] == (TMessageType.REPLY, 43)


class _Undrained(asyncio.Transport):
    """A socket whose peer takes none of its replies: what is written stays buffered, and a
    close waits for the buffer to drain (for ever); an abort drops it. ``reading``: whether
    reading is paused or not."""

    def __init__(self) -> None:
        super().__init__()
        self.buffered = 0
        self.closed = self.aborted = False
        self.reading = True

    def write(self, data: Any) -> None:
        self.buffered += len(data)

    def writelines(self, list_of_data: Any) -> None:
        for data in list_of_data:
            self.write(data)

    def get_write_buffer_size(self) -> int:
        return 0 if self.aborted else self.buffered

    def is_closing(self) -> bool:
        return self.closed or self.aborted

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.aborted = True

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("192.0.2.7", 1) if name == "peername" else default


def test_a_closing_connection_whose_peer_takes_no_reply_is_aborted() -> None:
    """A peer that sends a call, never reads the answer (smaller than the write buffer's mark, so
    writing never paused) and half-closes: the graceful close waited for the buffer to drain and
    the connection stayed, never idle, for good. It is now watched as a stalled writer."""

    async def scenario() -> None:
        server = FramedServer(Dispatcher(EchoHandler()), "127.0.0.1", 0, frame_timeout_seconds=1)
        await server.start()
        try:
            conn = Connection(server, ("192.0.2.7", 1), "192.0.2.7")
            transport = _Undrained()
            conn.connection_made(transport)
            conn.data_received(frame(encode_call("getQueueNames", 1)))
            while conn.worker is not None or not transport.buffered:
                await asyncio.sleep(0.01)
            conn.eof_received()
            assert transport.closed and not transport.aborted and conn in server._write_paused
            server._check_write_stalled(conn, time.monotonic() + 0.5)
            assert not transport.aborted, "within the frame timeout"
            server._check_write_stalled(conn, time.monotonic() + 2)
            assert transport.aborted and server._counters.write_stalls == 1
            conn.connection_lost(None)
            assert conn not in server._write_paused
        finally:
            await server.stop(1)

    asyncio.run(scenario())


def test_a_closing_connection_is_watched_for_stalls_only_once_its_close_was_sent() -> None:
    """A half-closed peer still being answered (closing, its close not sent yet) leaves the watch
    when its writing resumes: kept there, a reply that took longer than the frame timeout to
    make aborted a peer that had read everything."""

    async def scenario() -> None:
        server = FramedServer(Dispatcher(EchoHandler()), "127.0.0.1", 0)
        await server.start()
        try:
            conn = Connection(server, ("192.0.2.7", 1), "192.0.2.7")
            transport = _Undrained()
            conn.connection_made(transport)
            conn._closing = True
            conn.pause_writing()
            conn.resume_writing()
            assert conn not in server._write_paused
            transport.buffered = 10
            conn._close_transport(transport)
            conn.pause_writing()
            conn.resume_writing()
            assert conn in server._write_paused, "closed with replies left: watched until they go"
        finally:
            await server.stop(1)

    asyncio.run(scenario())


def test_eviction_counts_only_the_frame_bytes_a_close_gives_back() -> None:
    """A connection's frame being served is given back only once it is handled (a long poll's,
    30 s later): evicting a host for it freed nothing, and the client that took the budget past
    its bound was closed all the same."""
    from pinlater.server.transport import _freeable_frames

    async def scenario() -> None:
        server = FramedServer(Dispatcher(EchoHandler()), "127.0.0.1", 0)
        await server.start()
        try:
            conn = Connection(server, ("192.0.2.7", 1), "192.0.2.7")
            conn.held, conn.queued, conn.serving = 100, 5000, 3000
            assert _freeable_frames(conn) == 2100
            conn._aborted = True
            assert _freeable_frames(conn) == 0
        finally:
            await server.stop(1)

    asyncio.run(scenario())


class _Unwalkable(set):  # type: ignore[type-arg]
    """The server's connections, which ``evict_frames`` must not walk for a frame of the host
    holding most of the budget."""

    walked = 0

    def __iter__(self) -> Any:
        _Unwalkable.walked += 1
        return super().__iter__()


def test_a_frame_of_the_host_holding_most_of_the_budget_walks_no_connection() -> None:
    """Each frame past the budget made the server total every connection's bytes by host: a host
    holding the budget from thousands of connections had each of its frames past it cost a walk
    of all of them (seconds of the loop a thousand frames). The bytes are kept by host as they
    change; only a frame of a host holding under half of them looks for a bigger one."""

    async def scenario() -> None:
        server = FramedServer(Dispatcher(EchoHandler()), "127.0.0.1", 0, max_pending_frame_bytes=1000)
        await server.start()
        try:
            flood = [Connection(server, ("192.0.2.7", i), "192.0.2.7") for i in range(50)]
            other = Connection(server, ("192.0.2.9", 1), "192.0.2.9")
            for conn in [*flood, other]:
                server._connections.add(conn)
            for conn in flood:
                server._hold(conn, 30)
            server._hold(other, 10)
            assert server._frame_bytes_by_host == {"192.0.2.7": 1500, "192.0.2.9": 10}
            server._connections = _Unwalkable(server._connections)
            assert not server.evict_frames(flood[0]) and _Unwalkable.walked == 0, "its own host holds the most"
            closed: list[Connection] = []
            for conn in flood:
                conn.frames_over_budget = lambda evicted=False, c=conn: closed.append(c)  # type: ignore[method-assign]
            server.evict_frames(other)
            assert _Unwalkable.walked == 1 and closed, "another host holds more: its connections are evicted"
            for conn in flood:
                server._hold(conn, 0)
            server._hold(other, 0)
            assert server._frame_bytes_by_host == {} and server._pending_frame_bytes == 0

            # frames being served (a long poll's) are given back only when handled: a host holding
            # the budget so is no one to evict, and another's frame past it walks nothing
            for conn in flood:
                server._count_queued(conn, 30)
                server._serving(conn, 30)
            server._hold(other, 10)
            walked = _Unwalkable.walked
            assert not server.evict_frames(other) and _Unwalkable.walked == walked
            for conn in flood:
                server._serving(conn, -30)
                server._count_queued(conn, -30)
            server._hold(other, 0)
            assert server._serving_by_host == {} and server._frame_bytes_by_host == {}
        finally:
            server._connections = set()
            await server.stop(1)

    asyncio.run(scenario())


def test_the_frame_bytes_by_host_add_up_as_frames_come_and_are_served(srv: ServerThread) -> None:
    socks = [raw_socket(srv.port) for _ in range(3)]
    try:
        for sock in socks:  # an unfinished frame each, then a whole call
            sock.sendall(struct.pack(">i", 1000) + b"\x80\x01")
        wait_for(lambda: srv.server._pending_frame_bytes == 18, what="the unfinished frames held (6 bytes each)")
        assert srv.server._frame_bytes_by_host == {"127.0.0.1": 18}
        with raw_socket(srv.port) as sock:
            sock.sendall(b"".join(frame(encode_call("getQueueNames", seqid)) for seqid in range(1, 21)))
            assert [read_reply(sock)[2] for _ in range(20)] == list(range(1, 21))
        assert srv.server._frame_bytes_by_host == {"127.0.0.1": 18}, "the served frames were given back"
        assert srv.server._serving_by_host == {}
    finally:
        for sock in socks:
            sock.close()
    wait_for(lambda: srv.server._pending_frame_bytes == 0, what="the closed connections' frames given back")
    assert srv.server._frame_bytes_by_host == {}


def test_pipelined_calls_are_answered_in_order(srv: ServerThread) -> None:
    with raw_socket(srv.port) as sock:
        sock.sendall(b"".join(frame(encode_call("getQueueNames", seqid)) for seqid in range(1, 101)))
        assert [read_reply(sock)[2] for _ in range(100)] == list(range(1, 101))


def test_frames_split_across_reads(srv: ServerThread, open_client: Any, gen: ModuleType) -> None:
    with raw_socket(srv.port) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        data = b"".join(frame(encode_call("getQueueNames", seqid)) for seqid in (1, 2, 3))
        for i in range(0, len(data), 7):
            sock.sendall(data[i : i + 7])
        assert [read_reply(sock)[2] for _ in range(3)] == [1, 2, 3]
    big = gen.PinLaterJob(body=BINARY * 200)  # about 52 KB: one frame, several reads
    resp = open_client().enqueueJobs(
        gen.RequestContext(source="t"), gen.PinLaterEnqueueRequest(queueName="b", jobs=[big])
    )
    assert resp.jobDescriptors == ["b:s1:p1:0"]
    assert srv.handler.calls[-1][1][1][0][1] == BINARY * 200


# -- bad frames close only their own connection --------------------------------------------------

GOOD_HEADER = encode_call("createQueue", 9)[:-1]  # the header, and an args struct without its STOP
BAD_FRAMES = {
    "garbage": frame(b"GET / HTTP/1.1\r\n"),
    "bad_args": frame(GOOD_HEADER + b"\x0f\x00\x02\x63\x7f\xff\xff\xff\x00"),  # 2**31 elements, type 99
    "too_deep": frame(GOOD_HEADER + b"\x0c\x00\x01" * 33 + b"\x00" * 34),  # context nests 33 structs
    "oversized": struct.pack(">i", 4 * MAX_FRAME + 1) + b"\x80\x01",  # (past 4 times the limit: closed unread)
    "zero_length": struct.pack(">i", 0),
    "negative_length": struct.pack(">i", -7),
}

#: The frames whose header is readable, and the start of the reason their reply gives.
REPLIED = {
    "bad_args": "unknown element type in (99,)",
    "too_deep": "structs nested too deeply",
}


@pytest.mark.parametrize("kind", sorted(BAD_FRAMES))
def test_bad_frame_closes_only_that_connection(srv: ServerThread, open_client: Any, gen: ModuleType, kind: str) -> None:
    good = open_client()
    ctx = gen.RequestContext(source="t")
    good.createQueue(ctx, "before")
    with raw_socket(srv.port) as bad:
        bad.sendall(BAD_FRAMES[kind])
        if kind in REPLIED:  # the header was readable: a PROTOCOL_ERROR reply comes first
            seqid, exc = read_app_exception(bad)
            assert (seqid, exc.type) == (9, TApplicationException.PROTOCOL_ERROR)
            assert exc.message.startswith(f"malformed createQueue call: {REPLIED[kind]}")
        assert_closed_by_server(bad)
    good.createQueue(ctx, "after")
    assert good.getQueueNames(ctx) == {"before", "after"}
    stats = srv.server.stats()
    assert stats.protocol_errors == (kind == "garbage" or kind in REPLIED)
    assert stats.oversized_frames == (kind == "oversized")
    assert stats.invalid_frame_lengths == (kind in ("zero_length", "negative_length"))


def test_truncated_frame_ends_only_that_connection(srv: ServerThread, open_client: Any, gen: ModuleType) -> None:
    good = open_client()
    ctx = gen.RequestContext(source="t")
    with raw_socket(srv.port) as bad:
        bad.sendall(struct.pack(">i", 100) + b"\x80\x01\x00\x01")
    wait_for(lambda: srv.server.stats().truncated_frames == 1, what="the truncated frame to be noticed")
    good.createQueue(ctx, "still")
    assert good.getQueueNames(ctx) == {"still"}
    wait_for(lambda: srv.server.stats().connections_open == 1, what="the truncated connection to go")


# -- scale and lifecycle -------------------------------------------------------------------------


def test_connections_beyond_the_limit_are_refused(gen: ModuleType) -> None:
    server = ServerThread(EchoHandler(), max_connections=1)
    client, transport = connect("127.0.0.1", server.port)
    try:
        with raw_socket(server.port) as extra:
            assert_closed_by_server(extra)
        assert server.server.stats().connections_rejected == 1
        assert client.getQueueNames(gen.RequestContext(source="t")) == set()
    finally:
        transport.close()
        server.close()


def served(sock: socket.socket, seqid: int) -> bool:
    """Whether a getQueueNames call on ``sock`` is answered (False: the server closed it)."""
    try:
        sock.sendall(frame(encode_call("getQueueNames", seqid)))
        (length,) = struct.unpack(">i", recv_exact(sock, 4))
        recv_exact(sock, length)
        return True
    except (ConnectionError, AssertionError, struct.error):
        return False


def test_an_ipv6_host_is_counted_by_its_64() -> None:
    """One host may hold a whole IPv6 /64 and connect from a fresh address each time: the share
    per host counts the /64, as the admin port counts wrong passwords."""
    same = {peer_host((f"2001:db8:1:2::{i:x}", 9010, 0, 0)) for i in range(1, 500)}
    assert same == {"2001:db8:1:2::/64"}
    assert peer_host(("2001:db8:1:3::1", 1, 0, 0)) != peer_host(("2001:db8:1:2::1", 1, 0, 0))
    assert peer_host(("fe80::1%eth0", 1, 0, 2)) == "fe80::/64"
    assert peer_host(("::ffff:192.0.2.7", 1, 0, 0)) == peer_host(("192.0.2.7", 1)) == "192.0.2.7"
    assert peer_host("/run/pinlater.sock") == "/run/pinlater.sock"


def test_one_host_holds_at_most_its_share_of_the_connections() -> None:
    """A host at MAX_CONNECTIONS_PER_PEER has its next connect closed at once, while another host
    (127.0.0.2, a loopback address of its own) is served; a connection it closes gives its place
    back. Refusals count in connections_rejected and connections_rejected_per_peer."""
    server = ServerThread(EchoHandler(), max_connections=10, max_connections_per_peer=3)
    held = [raw_socket(server.port) for _ in range(3)]
    try:
        assert all(served(sock, i) for i, sock in enumerate(held))
        with raw_socket(server.port) as extra:
            assert not served(extra, 10), "a fourth connection from the host is closed"
        with socket.create_connection(("127.0.0.1", server.port), timeout=10, source_address=("127.0.0.2", 0)) as other:
            assert served(other, 11), "another host is served"
        stats = server.server.stats()
        assert (stats.connections_rejected, stats.connections_rejected_per_peer) == (1, 1)
        held.pop().close()
        wait_for(lambda: server.server.stats().connections_open == 2, what="the closed connection to go")
        with raw_socket(server.port) as again:
            assert served(again, 12), "the closed connection's place went back to its host"
        assert server.server.stats().connections_rejected_per_peer == 1
    finally:
        for sock in held:
            sock.close()
        server.close()


@pytest.mark.parametrize(
    ("cap", "per_peer", "share"), [(10_000, None, 9_000), (96, None, 87), (1, None, 1), (5, 2, 2), (5, 50, 5)]
)
def test_a_hosts_share_of_the_connection_cap(cap: int, per_peer: int | None, share: int) -> None:
    assert peer_connection_cap(cap, per_peer) == share


def test_a_thousand_concurrent_connections(srv: ServerThread) -> None:
    n = 1000
    request = frame(encode_call("getQueueNames", 5))

    async def main() -> list[int]:
        conns = await asyncio.gather(*(asyncio.open_connection("127.0.0.1", srv.port) for _ in range(n)))
        try:
            await asyncio.to_thread(
                wait_for, lambda: srv.server.stats().connections_open >= n, 15.0, 0.02, f"{n} open connections"
            )
            for _, writer in conns:
                writer.write(request)

            async def reply(reader: asyncio.StreamReader) -> int:
                (length,) = struct.unpack(">i", await reader.readexactly(4))
                payload = await reader.readexactly(length)
                seqid: int = struct.unpack_from(">i", payload, 4 + 4 + len("getQueueNames"))[0]
                return payload[3] * 1000 + seqid  # payload[3] is the message type

            return await asyncio.wait_for(asyncio.gather(*(reply(r) for r, _ in conns)), 15)
        finally:
            for _, writer in conns:
                writer.close()
            await asyncio.gather(*(w.wait_closed() for _, w in conns), return_exceptions=True)

    replies = asyncio.run(main())
    assert replies == [TMessageType.REPLY * 1000 + 5] * n
    assert srv.server.stats().connections_accepted >= n


def test_graceful_stop_lets_the_request_in_flight_finish(gen: ModuleType) -> None:
    handler = EchoHandler()
    server = ServerThread(handler)
    client, transport = connect("127.0.0.1", server.port)
    results: list[Any] = []
    try:
        ctx = gen.RequestContext(source="t")
        slow = gen.PinLaterCheckpointJobsRequest(queueName="slow", requests=[])

        caller = threading.Thread(target=lambda: results.append(client.checkpointJobs(ctx, slow)))
        caller.start()
        assert handler.slow_started.wait(10)
        stopping = server.submit(server.server.stop(10))
        wait_for(lambda: refused(server.port), what="new connections to be refused")
        assert not stopping.done()
        server.loop.call_soon_threadsafe(handler.slow_release.set)
        caller.join(10)
        assert results == [None]  # the reply arrived before the connection closed
        stopping.result(10)
        assert handler.calls[-1][0] == "checkpoint_jobs"
        assert server.server.stats().connections_open == 0
    finally:
        transport.close()
        server.close()


def test_request_slots_bound_the_requests_in_flight_and_serve_waiters_in_order() -> None:
    """``RequestSlots`` (``max_concurrent_requests``): a free slot is taken at once, the rest
    wait in arrival order, a release hands the slot to the first waiter still waiting, and a
    waiter cancelled after it was handed one passes it on, so no slot is lost."""

    async def run() -> None:
        slots = RequestSlots(2)
        assert slots.take_now() and slots.take_now()
        assert not slots.take_now() and slots.held == 2
        order: list[str] = []

        async def request(name: str) -> None:
            await slots.take()
            order.append(name)

        a, b, c = (asyncio.create_task(request(n)) for n in "abc")
        await asyncio.sleep(0)  # all three wait
        assert order == [] and slots.held == 2
        b.cancel()  # b leaves the line
        await asyncio.sleep(0)
        slots.release()
        await a
        assert order == ["a"] and slots.held == 2, "a got the slot released: still two in flight"
        slots.release()  # to c, which is cancelled before it runs: it hands the slot on
        c.cancel()
        with pytest.raises(asyncio.CancelledError):
            await c
        assert order == ["a"] and slots.held == 1, "c's slot was given back, none lost"
        assert b.cancelled()
        assert slots.take_now() and slots.held == 2  # the one free again: taken at once
        slots.release()
        slots.release()
        assert slots.held == 0 and slots.take_now()

    asyncio.run(run())


def test_answers_to_oversized_frames_piling_up_pause_the_reading_as_whole_frames_do() -> None:
    """Each oversized frame read and dropped leaves an answer to send (PROTOCOL_ERROR): a peer
    sending them faster than they are answered filled the connection's queue without bound. At
    PIPELINE_DEPTH of them waiting, reading pauses, as for whole frames; it resumes once they
    are answered."""

    async def scenario() -> None:
        server = FramedServer(Dispatcher(EchoHandler()), "127.0.0.1", 0, max_frame_bytes=4096)
        await server.start()
        try:
            conn = Connection(server, ("192.0.2.7", 1), "192.0.2.7")
            transport = _Undrained()
            conn.connection_made(transport)
            call = encode_call("getQueueNames", 3)
            oversized = struct.pack(">i", 5000) + call + bytes(5000 - len(call))
            # all in one read: no answer can go out before the last is queued
            conn.data_received(oversized * PIPELINE_DEPTH)
            assert not transport.reading, "paused at PIPELINE_DEPTH answers waiting"
            assert server.stats().oversized_frames == PIPELINE_DEPTH
            while conn.worker is not None:
                await asyncio.sleep(0.01)
            assert transport.reading, "resumed once answered"
            assert transport.buffered > 0 and not (transport.closed or transport.aborted)
        finally:
            await server.stop(1)

    asyncio.run(scenario())


def test_an_oversized_frame_that_stops_coming_is_timed_out_as_an_unfinished_one() -> None:
    """A frame past the limit is read and dropped as it comes (``OVERSIZED_READ_FACTOR``): one
    whose rest never comes is closed at FRAME_TIMEOUT_SECONDS, as an unfinished frame is."""
    server = ServerThread(EchoHandler(), max_frame_bytes=4096, frame_timeout_seconds=0.5)
    try:
        with raw_socket(server.port) as sock:
            sock.sendall(struct.pack(">i", 10_000) + encode_call("getQueueNames", 3)[:20])
            wait_for(lambda: server.server.stats().oversized_frames == 1, what="the frame to be taken as oversized")
            assert_closed_by_server(sock)
        assert server.server.stats().frame_timeouts == 1
        assert server.server._pending_frame_bytes == 0 and not server.server._partial
    finally:
        server.close()
