"""``string`` fields that are not UTF-8, from clients that send raw bytes (Python 2, Go, C++): served
as the original Java server read them, with U+FFFD in place of each malformed sequence
(``server/lossy_text.py``), on the hot calls and the others; the connection stays open. They
were refused as malformed calls and the connection closed: a worker whose ack status held such
bytes had every later call fail."""

from __future__ import annotations

import socket
from collections.abc import Callable
from types import ModuleType
from typing import Any

from tests.server.test_contract import Api
from tests.server.test_frames import frame, read_frame
from tests.support.pinlater_server import ServerProcess
from thriftpy2.protocol.cybin.cybin import TCyBinaryProtocol
from thriftpy2.thrift import TMessageType
from thriftpy2.transport.memory.cymemory import TCyMemoryBuffer

from pinlater.idl import idl

Start = Callable[..., ServerProcess]
Open = Callable[[ServerProcess], Any]


def call(sock: socket.socket, method: str, seqid: int, **args: Any) -> Any:
    """Send ``method``'s call of ``args`` (thriftpy2 objects: a ``string`` field may hold bytes,
    sent as they are) and read its result struct."""
    buf = TCyBinaryProtocol(TCyMemoryBuffer())
    buf.write_message_begin(method, TMessageType.CALL, seqid)
    buf.write_struct(getattr(idl.PinLater, f"{method}_args")(**args))
    buf.write_message_end()
    sock.sendall(frame(buf.trans.getvalue()))
    reply = TCyBinaryProtocol(TCyMemoryBuffer(read_frame(sock)))
    name, mtype, got = reply.read_message_begin()
    assert (name, mtype, got) == (method, TMessageType.REPLY, seqid), (name, mtype, got)
    return reply.read_struct(getattr(idl.PinLater, f"{method}_result")())


def test_strings_not_utf8_are_taken_with_replacement_characters(
    start_server: Start, open_client: Open, ttypes: ModuleType
) -> None:
    server = start_server()
    api = Api(open_client(server), ttypes)
    api.create("q")
    t = idl
    context = t.RequestContext(source=b"worker \xff")
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        job = t.PinLaterJob(body=b"body \xff stays bytes", customStatus=b"err \xe9", groupKey=b"g\xc3")
        enqueued = call(sock, "enqueueJobs", 1, context=context, request=t.PinLaterEnqueueRequest("q", [job]))
        (descriptor,) = enqueued.success.jobDescriptors
        assert api.lookup(descriptor, body=True)[descriptor].customStatus == "err \ufffd"
        assert api.lookup(descriptor, body=True)[descriptor].body == b"body \xff stays bytes"
        assert api.lookup(descriptor)[descriptor].groupKey == "g\ufffd"

        dequeued = call(sock, "dequeueJobs", 2, context=context, request=t.PinLaterDequeueRequest("q", 10))
        assert list(dequeued.success.jobs) == [descriptor]
        ack = t.PinLaterJobAckInfo(jobDescriptor=descriptor, appendCustomStatus=b" \xf0\x9f", retryDelayMillis=0)
        acked = call(sock, "ackDequeuedJobs", 3, context=context, request=t.PinLaterJobAckRequest("q", [], [ack]))
        assert acked.e is None
        assert api.lookup(descriptor)[descriptor].customStatus == "err \ufffd \ufffd", "one U+FFFD per malformed run"

        # a method the Rust decoder does not take: thriftpy2's path, the same way
        created = call(sock, "createQueue", 4, context=context, name=b"bad\xffname")
        assert created.e is not None and "bad\ufffdname" in created.e.message, "refused for its name, not malformed"
        assert set(call(sock, "getQueueNames", 5, context=context).success) == {"q"}, "the connection is still served"
    assert any("not UTF-8" in line and "U+FFFD" in line for line in server.lines), "logged (throttled)"
