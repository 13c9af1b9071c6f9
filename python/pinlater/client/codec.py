"""Framed binary Thrift messages, encoded and decoded with thriftpy2's Cython protocol.

The clients own their sockets so they know exactly when a request has left: a frame that was
not completely handed to the kernel cannot have been processed by the server, so even an
enqueue may be sent again after that (see ``calls.Call.safe``).
"""

from __future__ import annotations

import struct
from typing import Any

from thriftpy2 import protocol as _protocol
from thriftpy2.thrift import TApplicationException, TMessageType
from thriftpy2.transport import TCyMemoryBuffer

from pinlater._pinlater import thrift_struct_end
from pinlater.client.errors import PinLaterConnectionError, ServerError, error_from_thrift
from pinlater.errors import ErrorCode
from pinlater.idl import idl

#: Largest answer accepted; a bigger length means the stream is out of step.
MAX_FRAME_BYTES = 256 * 1024 * 1024
FRAME_HEADER = struct.Struct("!i")
#: The Cython binary protocol (thriftpy2 ships no annotations for it).
TCyBinaryProtocol: Any = _protocol.TCyBinaryProtocol


class _Method:
    __slots__ = ("args_cls", "fields", "result_cls", "void")

    def __init__(self, name: str) -> None:
        self.args_cls = getattr(idl.PinLater, name + "_args")
        self.result_cls = getattr(idl.PinLater, name + "_result")
        self.fields = [spec[1] for _, spec in sorted(self.args_cls.thrift_spec.items())]
        self.void = 0 not in self.result_cls.thrift_spec


_METHODS: dict[str, _Method] = {}


def _method(name: str) -> _Method:
    m = _METHODS.get(name)
    if m is None:
        m = _METHODS[name] = _Method(name)
    return m


def encode(method: str, seqid: int, context: Any, args: tuple[Any, ...]) -> bytes:
    """One framed CALL message: length prefix, then the binary-protocol message."""
    m = _method(method)
    call_args = m.args_cls()
    for name, value in zip(m.fields, (context, *args), strict=True):
        setattr(call_args, name, value)
    buf = TCyMemoryBuffer()
    proto = TCyBinaryProtocol(buf)
    proto.write_message_begin(method, TMessageType.CALL, seqid)
    call_args.write(proto)
    proto.write_message_end()
    data: bytes = buf.getvalue()
    return FRAME_HEADER.pack(len(data)) + data


def frame_length(header: bytes, address: str) -> int:
    length: int = FRAME_HEADER.unpack(header)[0]
    if not 0 < length <= MAX_FRAME_BYTES:
        raise PinLaterConnectionError(f"{address}: bad frame length {length}", address=address)
    return length


def _walk(payload: bytes) -> None:
    """Check the reply's struct (after its message header) is whole and bounded, as the server
    checks a call's (``thrift_struct_end``, in Rust): thriftpy2's Cython decoder reads past a
    truncated buffer into stale bytes (a dequeue reply cut short gave its last job a body of
    garbage, which a worker would run) and allocates what a length claims (2^31 bytes: the
    process killed). Raises ``MalformedThriftError`` (a ``ValueError``) or ``ValueError``."""
    if len(payload) < 4:
        raise ValueError("message shorter than its header")
    (first,) = FRAME_HEADER.unpack_from(payload, 0)
    if first < 0:  # strict: version and type, the name's length and the name, the seqid
        if len(payload) < 8:
            raise ValueError("message header truncated")
        (size,) = FRAME_HEADER.unpack_from(payload, 4)
        offset = 8 + size + 4
    else:  # old style: the name's length and the name, the type, the seqid
        offset = 4 + first + 1 + 4
    if not 0 <= offset <= len(payload):
        raise ValueError("message header truncated")
    thrift_struct_end(payload, offset)


def decode(method: str, seqid: int, payload: bytes, address: str) -> Any:
    """The result of a reply, or the typed error it carries.

    A reply that cannot be parsed, or answers another call, raises ``PinLaterConnectionError``:
    the connection is out of step and must be dropped.
    """
    m = _method(method)
    try:
        _walk(payload)  # (before the decoder, which trusts lengths: see _walk)
        proto = TCyBinaryProtocol(TCyMemoryBuffer(payload))
        name, mtype, rseqid = proto.read_message_begin()
        if mtype == TMessageType.EXCEPTION:
            app = TApplicationException()
            app.read(proto)
            raise ServerError(ErrorCode.UNKNOWN, f"{method}: {app}")
        if name != method or rseqid != seqid:
            raise PinLaterConnectionError(
                f"{address}: reply to {name}#{rseqid} while waiting for {method}#{seqid}", address=address
            )
        result = m.result_cls()
        result.read(proto)
    except (ServerError, PinLaterConnectionError):
        raise
    except Exception as exc:  # any decode failure means the stream cannot be trusted
        raise PinLaterConnectionError(f"{address}: undecodable reply to {method}: {exc!r}", address=address) from exc
    error = getattr(result, "e", None)
    if error is not None:
        raise error_from_thrift(error)
    if m.void:
        return None
    if result.success is None:
        raise ServerError(ErrorCode.UNKNOWN, f"{method}: the reply carried no result")
    return result.success
