"""One Thrift binary-protocol message in, one reply out: decode, call the handler, encode.

The transport hands over the payload of one frame; ``Dispatcher.handle_frame`` returns the reply
payload (``None`` for a oneway call) or raises ``ProtocolError`` when the connection must close.

Decoding rules, in order:

* The message header (strict ``0x8001`` versioned form, or the old unversioned form, as Apache's
  binary protocol accepts both) is parsed here. A header that cannot be read gets no reply.
* The argument struct is first *walked* (``thrift_struct_objects``, in Rust): every length is within
  the frame, every wire type is a real Thrift type, structs and containers nest at most 32 deep.
  (A hot method's is walked by ``decode_hot_call`` itself, first thing, so not twice.) Only then
  is it decoded: the three hot methods (``HOT_METHODS``: enqueueJobs, dequeueJobs,
  ackDequeuedJobs) by the extension (``decode_hot_call``, see below), the others by the Cython
  protocol. The walk exists because the Cython reader trusts
  lengths: a 12-byte frame announcing 2**31 elements of an unknown type keeps it skipping nothing
  for seconds, and a huge string length makes it allocate that much. The walk treats strings as
  bytes; the decoder then checks that ``string`` fields (not ``binary`` ones) are UTF-8. A payload
  that fails either is a ``ProtocolError`` carrying a PROTOCOL_ERROR reply; the transport sends it
  and closes.
* The hot methods: ``decode_hot_call`` reads the arguments into the extension's call values
  (``EnqueueCall``, ``DequeueCall``, ``AckCall``; the jobs stay in Rust) with the same rules as
  below (UTF-8 ``string`` fields, required fields and struct arguments, the same messages), and
  the handler's method of the snake_case name is awaited with ``(call, seqid)``: it answers the
  reply message's bytes, written by the extension. Its declared exceptions are encoded as below.
  A well-formed hot call is not even handed to ``handle_frame``: the transport reads its header
  and arguments in one crossing (``decode_hot_frame``) and awaits the handler itself
  (``Dispatcher.hot_methods``); anything ``decode_hot_frame`` does not read whole comes here
  (a frame of at least ``DETACH_BYTES`` read again off the loop, as below).
* ``required`` fields: thriftpy2 does not enforce them. Every struct reachable from the arguments is
  checked against its ``thrift_spec`` (``missing_required_field``); a missing one is answered with
  TApplicationException(PROTOCOL_ERROR, "missing required field PinLaterJob.body at ...") and the
  connection stays open, as Apache's Java server does. Top-level arguments are never ``required``
  in Thrift, but a struct argument (the ``RequestContext``, the request) left out is answered the
  same way, "missing argument enqueueJobs.request": no PinLater method can be served without one
  (the original failed such calls with a NullPointerException), and a handler reached with
  ``None`` would fail with an AttributeError. Scalar arguments (a queue name, a password) may be
  absent; the handler validates them. Each such request is logged, one line, rate-limited.
* A message of type ONEWAY is served and never answered, whatever the method (the Thrift
  protocol: a oneway caller reads no reply), not even with an error; a failure is logged.
* Bytes after the argument struct's STOP are ignored.
* A general call that would decode into more objects than ``max_objects`` allows for its frame
  (the walk counts them) is refused with PROTOCOL_ERROR, the connection kept.
* A general call's frame of at least ``DETACH_BYTES`` (1 MiB), or of more than ``LOOP_OBJECTS``
  objects, is decoded, and checked for required fields, on a thread of its own
  (``_read_args_apart``), as the transport decodes a big hot frame on a worker: the Cython
  decoder holds the GIL, but each struct it makes runs its Python ``__init__``, where the
  interpreter hands the GIL to the loop's thread once it has asked for a switch interval (5 ms),
  so the loop serves the other connections between them. Decoding a ``checkpointJobs`` of
  100,000 jobs on the loop had held every other client of the server for 70-90 ms. Only structs
  give the loop its turns: where a frame's bulk is strings or fields the decoder skips (a
  ``lookupJobs`` or ``cancelJobs`` of many descriptors), the loop waits for the whole decode, as
  before. One thread (``_DECODER``) decodes such frames one at a time: two at once would pass the
  GIL between themselves more than to the loop, and they leave the loop's
  executor to the memory probes and the hot frames.

Replies are always strict (versioned); every Apache client reads them. A reply whose result is a
map or list of more than ``REPLY_PART`` entries (``lookupJobs`` of many jobs, ``listSchedules``
of many schedules) is encoded that many entries at a time, with the event loop's other work
between parts (``_encode_parts``): 100,000 jobs encoded at once held every other client of the
server for about 120 ms here.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import logging
import re
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from itertools import islice
from typing import Any

from thriftpy2.protocol.cybin.cybin import TCyBinaryProtocol
from thriftpy2.thrift import TApplicationException, TMessageType, TType
from thriftpy2.transport.memory.cymemory import TCyMemoryBuffer

from pinlater._pinlater import DETACH_BYTES, MissingFieldError, NotUtf8Error, decode_hot_call, thrift_struct_objects
from pinlater.eventloop import off_loop
from pinlater.idl import idl
from pinlater.logthrottle import ThrottledLog
from pinlater.server.lossy_text import repair_call

__all__ = ["HOT_METHODS", "Dispatcher", "ProtocolError", "snake_case"]

log = logging.getLogger(__name__)

_VERSION_MASK = 0xFFFF0000
_VERSION_1 = 0x80010000
_I32 = struct.Struct(">i")

#: Methods decoded by the extension and answered by the handler as bytes (see the module doc).
HOT_METHODS = frozenset({"enqueueJobs", "dequeueJobs", "ackDequeuedJobs"})

#: Longest method name a message may carry (the service's longest is 20 characters). An unknown
#: name used to be echoed in the refusal, twice (its reply's header and message), and logged in
#: full: a 16 MiB name cost a 32 MiB reply and a 33 MB log line. A longer one closes the connection.
MAX_METHOD_NAME = 128

#: Most entries of a map or list result encoded at once (see the module doc).
REPLY_PART = 1000


class ProtocolError(Exception):
    """The frame could not be decoded; the connection must be closed.

    ``reply`` is the TApplicationException(PROTOCOL_ERROR) message to send first, when the
    message header (name and seqid) was readable; otherwise ``None``.
    """

    def __init__(self, message: str, reply: bytes | None = None) -> None:
        super().__init__(message)
        self.reply = reply


def snake_case(name: str) -> str:
    """``enqueueJobs`` -> ``enqueue_jobs``: the handler's name for a Thrift method."""
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


@dataclass(frozen=True, slots=True)
class _Method:
    """Everything needed to serve one Thrift method, resolved once at construction."""

    name: str
    args_cls: Any
    result_cls: Any
    arg_names: tuple[str, ...]
    call: Callable[..., Awaitable[Any]]
    #: (result field name, exception class) for each declared ``throws``.
    exceptions: tuple[tuple[str, type[BaseException]], ...]
    oneway: bool
    #: Arguments that are structs: a call without one is refused (see the module doc).
    struct_args: tuple[str, ...]
    #: Decoded by ``decode_hot_call``; ``call(decoded, seqid)`` answers the reply's bytes.
    hot: bool
    #: The result's ``success`` is a map or a list (``_encode_parts`` may encode it).
    success_parts: bool
    #: The most objects its call may decode into, below ``max_objects`` (the handler's
    #: ``ARGUMENT_OBJECTS``: twice what it takes, so a call just past that gets the handler's own
    #: error), or None.
    most_objects: int | None = None
    #: The most bytes its message may take (the handler's ``ARGUMENT_BYTES``), or None: the frame
    #: limit alone.
    most_bytes: int | None = None


def _resolve(service: Any, handler: object) -> dict[str, _Method]:
    methods: dict[str, _Method] = {}
    missing: list[str] = []
    declared = getattr(type(handler), "ARGUMENT_OBJECTS", None)  # (the class's: not a proxy's __getattr__)
    most_objects: dict[str, int] = declared if isinstance(declared, dict) else {}
    declared = getattr(type(handler), "ARGUMENT_BYTES", None)
    most_bytes: dict[str, int] = declared if isinstance(declared, dict) else {}
    for name in service.thrift_services:
        attr = snake_case(name)
        call = getattr(handler, attr, None)
        if call is None or not inspect.iscoroutinefunction(call):
            missing.append(f"{attr} ({name})")
            continue
        args_cls = getattr(service, f"{name}_args")
        result_cls = getattr(service, f"{name}_result")
        exceptions = tuple((spec[1], spec[2]) for fid, spec in sorted(result_cls.thrift_spec.items()) if fid != 0)
        methods[name] = _Method(
            name=name,
            args_cls=args_cls,
            result_cls=result_cls,
            arg_names=tuple(spec[1] for _, spec in sorted(args_cls.thrift_spec.items())),
            call=call,
            exceptions=exceptions,
            oneway=bool(getattr(result_cls, "oneway", False)),
            struct_args=tuple(spec[1] for _, spec in sorted(args_cls.thrift_spec.items()) if spec[0] == TType.STRUCT),
            hot=name in HOT_METHODS,
            success_parts=result_cls.thrift_spec.get(0, (None,))[0] in (TType.MAP, TType.LIST),
            most_objects=most_objects.get(name),
            most_bytes=most_bytes.get(name),
        )
    if missing:
        raise TypeError(f"{type(handler).__name__} lacks async methods: {', '.join(missing)}")
    return methods


class MalformedPayload(Exception):
    """The message header is not well-formed, or the message is not a call."""


# -- required fields --------------------------------------------------------------------------

#: Per struct class: its required field names, and its fields that can hold structs.
_Plan = tuple[tuple[str, ...], tuple[tuple[str, int, Any], ...]]
_plans: dict[type, _Plan] = {}


def _split(spec: Any) -> tuple[int, Any]:
    """A container's element spec is either a bare TType or (TType, nested spec)."""
    if isinstance(spec, int):
        return spec, None
    return spec[0], spec[1]


def _holds_struct(ttype: int, spec: Any) -> bool:
    if ttype == TType.STRUCT:
        return True
    if ttype == TType.MAP:
        return any(_holds_struct(*_split(s)) for s in spec)
    if ttype in (TType.LIST, TType.SET):
        return _holds_struct(*_split(spec))
    return False


def _plan(cls: type) -> _Plan:
    plan = _plans.get(cls)
    if plan is None:
        specs = [spec for _, spec in sorted(cls.thrift_spec.items())]  # type: ignore[attr-defined]
        required = tuple(spec[1] for spec in specs if spec[-1] is True)
        nested = tuple((s[1], s[0], s[2]) for s in specs if len(s) == 4 and _holds_struct(s[0], s[2]))
        plan = _plans[cls] = (required, nested)
    return plan


def _first_missing(value: Any, ttype: int, spec: Any) -> tuple[str, str] | None:
    """(``Struct.field``, path below ``value``) of the first required field left unset, if any."""
    if ttype == TType.STRUCT:
        required, nested = _plan(type(value))
        for name in required:
            if getattr(value, name) is None:
                return f"{type(value).__name__}.{name}", f".{name}"
        for name, ftype, fspec in nested:
            child = getattr(value, name)
            found = None if child is None else _first_missing(child, ftype, fspec)
            if found is not None:
                return found[0], f".{name}{found[1]}"
    elif ttype == TType.MAP:
        (ktype, kspec), (vtype, vspec) = _split(spec[0]), _split(spec[1])
        for key, item in value.items():
            for part, ptype, pspec in ((key, ktype, kspec), (item, vtype, vspec)):
                found = None if part is None else _first_missing(part, ptype, pspec)
                if found is not None:
                    return found[0], f"[{key!r}]{found[1]}"
    elif ttype in (TType.LIST, TType.SET):
        etype, espec = _split(spec)
        if etype == TType.STRUCT and not _plan(espec)[1]:  # the common flat case, without a call per item
            for name in _plan(espec)[0]:
                for i, item in enumerate(value):
                    if item is not None and getattr(item, name) is None:
                        return f"{espec.__name__}.{name}", f"[{i}].{name}"
            return None
        for i, item in enumerate(value):
            found = None if item is None else _first_missing(item, etype, espec)
            if found is not None:
                return found[0], f"[{i}]{found[1]}"
    return None


def missing_required_field(args: Any) -> str | None:
    """Describe the first required field unset anywhere in a decoded ``_args`` struct."""
    found = _first_missing(args, TType.STRUCT, type(args))
    return None if found is None else f"{found[0]} at {found[1].lstrip('.')}"


def _read_args(method: _Method, payload: bytes, offset: int) -> tuple[Any, str | None]:
    """A general call's argument struct, decoded by the Cython protocol from ``offset`` (walked
    already), and its first required field unset (``missing_required_field``)."""
    args = TCyBinaryProtocol(TCyMemoryBuffer(payload[offset:]), strict_decode=True).read_struct(method.args_cls())
    return args, missing_required_field(args)


BASE_OBJECTS = 100_000
BYTES_PER_OBJECT = 7
"""A general call decodes into at most ``BASE_OBJECTS`` objects and one more per this many bytes of
its frame (``max_objects``; the walk counts them: ``thrift_struct_objects``). An element can take
one byte on the wire and a hundred or more as an object: a ``checkpointJobs`` of 16.7 million
empty requests in one 16 MiB frame held 2.5 GB while it was decoded, 155 times its bytes, to be
refused for their missing fields. Real calls stay inside it: a descriptor is a string of 12 bytes
or more on the wire (``q:s1:p1:1`` and its length), a checkpoint request 17 or more for its two
objects (the struct and its descriptor), an empty string field 7 (its header and length); an
enqueue, dequeue or ack is not decoded this way."""

LOOP_OBJECTS = 10_000
"""A general call of more objects than this is decoded off the loop (``_read_args_apart``), however
small its frame: a frame just under ``DETACH_BYTES`` of a million empty structs held the loop for
about a second (some 1 µs an object)."""


def max_objects(frame_bytes: int) -> int:
    """The most objects a general call of a frame this long may decode into (``BASE_OBJECTS``)."""
    return BASE_OBJECTS + frame_bytes // BYTES_PER_OBJECT


_DECODER = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="pinlater-decode")
"""The one thread that decodes big general frames, one at a time (see the module docstring); it
starts at the first such frame."""


async def _read_args_apart(method: _Method, payload: bytes, offset: int) -> tuple[Any, str | None]:
    """``_read_args`` on ``_DECODER``, for a frame of at least ``DETACH_BYTES`` (see the module
    docstring); on the loop if it takes no work (shut down as the interpreter exits)."""
    return await off_loop(_read_args, method, payload, offset, executor=_DECODER)


async def _repair_text(method: _Method, payload: bytes, offset: int) -> tuple[bytes, int] | None:
    """``lossy_text.repair_call`` of a call that failed for a ``string`` field that is not UTF-8,
    within the bounds of any general call's decoding (``max_objects``; off the loop past
    ``DETACH_BYTES`` or ``LOOP_OBJECTS``: a hot call was not walked before). None: not repaired."""
    try:
        objects = thrift_struct_objects(payload, offset)[1]
    except Exception:
        return None
    if objects > max_objects(len(payload)):
        return None
    if len(payload) < DETACH_BYTES and objects < LOOP_OBJECTS:
        return repair_call(method.args_cls, payload, offset)
    return await off_loop(repair_call, method.args_cls, payload, offset, executor=_DECODER)


def _parse_header(payload: bytes) -> tuple[str, int, int, int]:
    """Return (name, message type, seqid, offset of the argument struct)."""
    end = len(payload)
    if end < 4:
        raise MalformedPayload("message shorter than its header")
    (first,) = _I32.unpack_from(payload, 0)
    if first < 0:  # strict: version | type, then the name as a string
        if first & _VERSION_MASK != _VERSION_1:
            raise MalformedPayload(f"bad protocol version 0x{first & 0xFFFFFFFF:08x}")
        mtype = first & 0xFF
        if end < 8:
            raise MalformedPayload("message header truncated")
        (size,) = _I32.unpack_from(payload, 4)
        pos = 8
    else:  # old style: the name's length, the name, then the type byte
        size, pos, mtype = first, 4, -1
    if size < 0 or pos + size > end:
        raise MalformedPayload("method name length out of range")
    if size > 4 * MAX_METHOD_NAME:  # (past any name of MAX_METHOD_NAME characters: not decoded)
        raise MalformedPayload(f"method name of {size} bytes, more than {MAX_METHOD_NAME} characters take")
    name_bytes = payload[pos : pos + size]
    pos += size
    if mtype < 0:
        if pos >= end:
            raise MalformedPayload("message header truncated")
        mtype = payload[pos]
        pos += 1
    if pos + 4 > end:
        raise MalformedPayload("message header truncated")
    (seqid,) = _I32.unpack_from(payload, pos)
    try:
        name = name_bytes.decode("utf-8")
    except UnicodeDecodeError:
        raise MalformedPayload("method name is not UTF-8") from None
    return name, mtype, seqid, pos + 4


def _encode(name: str, mtype: int, seqid: int, body: Any) -> bytes:
    buf = TCyMemoryBuffer()
    proto = TCyBinaryProtocol(buf)
    proto.write_message_begin(name, mtype, seqid)
    proto.write_struct(body)
    proto.write_message_end()
    data: bytes = buf.getvalue()
    return data


async def _encode_parts(method: _Method, seqid: int, answer: dict[Any, Any] | list[Any]) -> bytes:
    """``_encode`` of a reply whose ``success`` is the map or list ``answer``, ``REPLY_PART``
    entries at a time, yielding to the event loop between parts. The same bytes: each part is
    encoded as a result of its entries alone, whose field header (3 bytes), map or list header
    (6 or 5: its size last) and STOP (1) are cut off, between the whole answer's headers and
    STOP."""
    is_map = isinstance(answer, dict)
    header = _encode(method.name, TMessageType.REPLY, seqid, method.result_cls(success={} if is_map else []))
    # the empty result: message header, field header, map or list header, STOP
    parts = [header[:-5], _I32.pack(len(answer))]
    entries = iter(answer.items() if isinstance(answer, dict) else answer)  # (the handler's own)
    for at in range(0, len(answer), REPLY_PART):
        if at:
            await asyncio.sleep(0)
        chunk = list(islice(entries, REPLY_PART))
        part = _encode(
            method.name, TMessageType.REPLY, seqid, method.result_cls(success=dict(chunk) if is_map else chunk)
        )
        parts.append(part[len(header) - 1 : -1])
    parts.append(b"\x00")
    return b"".join(parts)


async def _encode_scan_parts(method: _Method, seqid: int, answer: Any) -> bytes:
    """``_encode`` of a scanJobs reply (``answer``: its ``PinLaterScanJobsResponse``) whose
    ``scannedJobs`` are encoded ``REPLY_PART`` at a time, yielding to the event loop between
    parts, as ``_encode_parts`` does a map or list result: a page of 10,000 jobs with long
    statuses (15 MB) held every other client 45-73 ms. The same bytes: the reply made with no
    job, its list's size set, each part's elements (a response of them alone, less its field
    and list headers, 8 bytes, and STOP) spliced in after it."""
    jobs = answer.scannedJobs
    empty = _encode(method.name, TMessageType.REPLY, seqid, method.result_cls(success=replace_jobs(answer, [])))
    # message header (strict: 12 bytes and the name), the success field's header (3), then the
    # response's first field, scannedJobs: its header (3) and the list's (element type, size)
    at = 12 + len(method.name.encode()) + 3
    if empty[at : at + 4] != b"\x0f\x00\x01\x0c":  # (not the layout this relies on: whole)
        return _encode(method.name, TMessageType.REPLY, seqid, method.result_cls(success=answer))
    parts = [empty[: at + 4], _I32.pack(len(jobs))]
    for start in range(0, len(jobs), REPLY_PART):
        if start:
            await asyncio.sleep(0)
        part = type(answer)(scannedJobs=jobs[start : start + REPLY_PART])
        part.continuation = None  # (its list alone: the field and list headers, 8 bytes, then STOP)
        buf = TCyMemoryBuffer()
        TCyBinaryProtocol(buf).write_struct(part)
        parts.append(buf.getvalue()[8:-1])
    parts.append(empty[at + 8 :])
    return b"".join(parts)


def replace_jobs(answer: Any, jobs: list[Any]) -> Any:
    """``answer`` (a ``PinLaterScanJobsResponse``) with ``jobs`` for its scanned jobs."""
    return type(answer)(scannedJobs=jobs, continuation=answer.continuation)


def _app_error(name: str, seqid: int, kind: int, message: str) -> bytes:
    return _encode(name, TMessageType.EXCEPTION, seqid, TApplicationException(kind, message))


class Dispatcher:
    """Serves ``service`` (default ``idl.PinLater``) by awaiting ``handler.<snake_case>(**args)``,
    or ``handler.<snake_case>(call, seqid)`` for the hot methods (``HOT_METHODS``), which answer
    the reply message's bytes.

    The handler must have an ``async def`` for every method of the service (checked here). A handler
    exception that is an instance of a declared ``throws`` type becomes that result field; a
    ``TApplicationException`` is sent as is; anything else is logged once with its traceback and
    answered with TApplicationException(INTERNAL_ERROR, "internal error: <type>: <message>").
    """

    def __init__(self, handler: object, service: Any = None) -> None:
        self.service: Any = idl.PinLater if service is None else service
        self._methods = _resolve(self.service, handler)
        #: The hot methods' handlers by name. The transport serves a message that
        #: ``decode_hot_frame`` reads whole as a call of one of these itself: it awaits
        #: ``hot_methods[name](call, seqid)``, and answers a failure with ``hot_failed`` (one
        #: coroutine and one header parse fewer per request than ``handle_frame``, which serves
        #: every other message, and hot ones the same way).
        self.hot_methods: dict[str, Callable[[Any, int], Awaitable[bytes]]] = {
            name: method.call for name, method in self._methods.items() if method.hot and not method.oneway
        }
        self._log_refused = ThrottledLog(log, 5.0)
        self._log_repaired = ThrottledLog(log, 60.0)

    def oversized(self, head: bytes, length: int, limit: int) -> bytes | None:
        """The answer to a call whose frame of ``length`` bytes passed ``limit`` and was dropped
        (``head``: its first bytes): PROTOCOL_ERROR naming the limit, or None for a oneway call.
        Raises ``ProtocolError`` if ``head`` holds no readable message header."""
        try:
            name, mtype, seqid, _ = _parse_header(head)
        except MalformedPayload as exc:
            raise ProtocolError(f"frame of {length} bytes past MAX_FRAME_BYTES, its header unreadable: {exc}") from None
        method = self._methods.get(name)
        if mtype == TMessageType.ONEWAY or (method is not None and method.oneway):
            return None
        why = f"{name} call of {length} bytes, more than a frame may hold ({limit}, MAX_FRAME_BYTES): split it"
        return _app_error(name, seqid, TApplicationException.PROTOCOL_ERROR, why)

    async def handle_frame(self, payload: bytes, *, repaired: bool = False) -> bytes | None:
        """Serve one message; return the reply message, or ``None`` when there is none to send
        (a oneway message). A call whose ``string`` fields are not all UTF-8 is served with them
        made so (``lossy_text.py``; ``repaired``: this is that call).

        Raises ``ProtocolError`` when the payload cannot be decoded (the connection must close).
        """
        try:
            name, mtype, seqid, offset = _parse_header(payload)
        except MalformedPayload as exc:
            raise ProtocolError(f"unreadable message header: {exc}") from None
        if len(name) > MAX_METHOD_NAME:
            raise ProtocolError(
                f"method name of {len(name)} characters, more than {MAX_METHOD_NAME}: {name[:MAX_METHOD_NAME]!r}..."
            )

        method = self._methods.get(name)
        oneway = mtype == TMessageType.ONEWAY or (method is not None and method.oneway)
        objects = 0
        try:
            if method is not None and method.most_bytes is not None and len(payload) > method.most_bytes:
                if mtype in (TMessageType.CALL, TMessageType.ONEWAY):  # (unread: padding is skipped holding the GIL)
                    why = f"{name} call of {len(payload)} bytes, more than the {method.most_bytes} such a call takes"
                    return self._refuse(name, seqid, oneway, TApplicationException.PROTOCOL_ERROR, why)
            if method is None or not method.hot:  # a hot call's decoding walks it the same way first
                objects = thrift_struct_objects(payload, offset)[1]
            if mtype not in (TMessageType.CALL, TMessageType.ONEWAY):
                raise MalformedPayload(f"message type {mtype} is not a call")
            if method is None:
                return self._refuse(
                    name, seqid, oneway, TApplicationException.UNKNOWN_METHOD, f"unknown method {name!r}"
                )
            if method.hot:
                try:  # (a big frame off the loop: one that ``decode_hot_frame`` did not take is read again)
                    if len(payload) < DETACH_BYTES:
                        call = decode_hot_call(name, payload, offset)
                    else:
                        call = await off_loop(decode_hot_call, name, payload, offset, executor=_DECODER)
                except MissingFieldError as exc:  # a refusal, not a malformed call: the connection stays
                    return self._refuse(name, seqid, oneway, TApplicationException.PROTOCOL_ERROR, str(exc))
            elif objects > (most := max_objects(len(payload))) or (
                method.most_objects is not None and objects > method.most_objects
            ):
                why = (
                    f"{most} (100,000 and one per {BYTES_PER_OBJECT} bytes)"
                    if objects > most
                    else f"{method.most_objects}, the most a {name} call takes"
                )
                return self._refuse(
                    name,
                    seqid,
                    oneway,
                    TApplicationException.PROTOCOL_ERROR,
                    f"{name} call too big to decode: {objects} values in {len(payload)} bytes, more than {why}; "
                    "split it",
                )
            elif len(payload) < DETACH_BYTES and objects < LOOP_OBJECTS:
                args, missing = _read_args(method, payload, offset)
            else:
                args, missing = await _read_args_apart(method, payload, offset)
        except Exception as exc:  # MalformedThriftError, MalformedPayload, UnicodeDecodeError (not UTF-8), ...
            if not repaired and method is not None and isinstance(exc, NotUtf8Error | UnicodeDecodeError):
                fixed = await _repair_text(method, payload, offset)
                if fixed is not None:  # served as the original (Java) read it: U+FFFD for the bad bytes
                    self._log_repaired(
                        "%s call with %d string field(s) not UTF-8 (%s): served with U+FFFD in place of the bad "
                        "bytes, as the original server read them",
                        name,
                        fixed[1],
                        exc,
                    )
                    return await self.handle_frame(fixed[0], repaired=True)
            reply = (
                None
                if oneway
                else _app_error(name, seqid, TApplicationException.PROTOCOL_ERROR, f"malformed {name} call: {exc}")
            )
            raise ProtocolError(f"malformed {name!r} call (seqid {seqid}): {exc}", reply) from None

        if method.hot:  # the handler answers the reply's bytes (its failures as any method's)
            try:
                answered: bytes = await method.call(call, seqid)
            except Exception as exc:
                return self._hot_failed(method, seqid, oneway, exc)
            return None if oneway else answered
        for arg in method.struct_args:
            if getattr(args, arg) is None:
                return self._refuse(
                    name, seqid, oneway, TApplicationException.PROTOCOL_ERROR, f"missing argument {name}.{arg}"
                )
        if missing is not None:
            msg = f"missing required field {missing}"
            return self._refuse(name, seqid, oneway, TApplicationException.PROTOCOL_ERROR, msg)
        kwargs = {arg: getattr(args, arg) for arg in method.arg_names}

        result = method.result_cls()
        try:
            answer = await method.call(**kwargs)
            if oneway:
                return None
            result.success = answer
        except TApplicationException as exc:
            if oneway:
                self._log_refused("oneway %s (seqid %d) failed: %s", name, seqid, exc)
                return None
            return _app_error(name, seqid, exc.type, str(exc))
        except Exception as exc:
            for field, exc_cls in method.exceptions:
                if isinstance(exc, exc_cls):
                    if oneway:
                        self._log_refused("oneway %s (seqid %d) failed: %s", name, seqid, exc)
                        return None
                    setattr(result, field, exc)
                    break
            else:
                return self._internal_error(method, seqid, exc, oneway)
        try:
            if method.success_parts and isinstance(result.success, dict | list) and len(result.success) > REPLY_PART:
                return await _encode_parts(method, seqid, result.success)
            if name == "scanJobs" and len(getattr(result.success, "scannedJobs", None) or ()) > REPLY_PART:
                return await _encode_scan_parts(method, seqid, result.success)
            return _encode(name, TMessageType.REPLY, seqid, result)
        except Exception as exc:  # the handler returned something that does not fit the IDL
            return self._internal_error(method, seqid, exc, oneway)

    def hot_failed(self, name: str, seqid: int, exc: Exception) -> bytes:
        """The reply to a call of ``hot_methods[name]`` that raised ``exc``."""
        reply = self._hot_failed(self._methods[name], seqid, False, exc)
        assert reply is not None  # (not oneway: always answered)
        return reply

    def _hot_failed(self, method: _Method, seqid: int, oneway: bool, exc: Exception) -> bytes | None:
        """A hot method's failure, answered as any method's: a declared exception in the result,
        a TApplicationException as is."""
        if isinstance(exc, TApplicationException):
            if oneway:
                self._log_refused("oneway %s (seqid %d) failed: %s", method.name, seqid, exc)
                return None
            return _app_error(method.name, seqid, exc.type, str(exc))
        for field, exc_cls in method.exceptions:
            if isinstance(exc, exc_cls):
                if oneway:
                    self._log_refused("oneway %s (seqid %d) failed: %s", method.name, seqid, exc)
                    return None
                result = method.result_cls()
                setattr(result, field, exc)
                return _encode(method.name, TMessageType.REPLY, seqid, result)
        return self._internal_error(method, seqid, exc, oneway)

    def _refuse(self, name: str, seqid: int, oneway: bool, kind: int, message: str) -> bytes | None:
        """A call not served: logged (one line, rate-limited), answered unless it was oneway."""
        self._log_refused("%s%s (seqid %d) refused: %s", "oneway " if oneway else "", name, seqid, message)
        return None if oneway else _app_error(name, seqid, kind, message)

    def _internal_error(self, method: _Method, seqid: int, exc: Exception, oneway: bool) -> bytes | None:
        log.error("internal error in %s (seqid %d)", method.name, seqid, exc_info=exc)
        if oneway:
            return None
        msg = f"internal error: {type(exc).__name__}: {exc}"
        return _app_error(method.name, seqid, TApplicationException.INTERNAL_ERROR, msg)
