"""The hot calls on the wire in Rust: ``decode_hot_call`` reads what thriftpy2 (Cython, with
``strict_decode``) read for the dispatcher, with the dispatcher's and the handler's refusals, and
the reply encoders write thriftpy2's bytes.

The reference is the path the server took before: the walk, thriftpy2's decoder, the dispatcher's
missing-argument and ``missing_required_field`` checks, then the handler's defaults and checks
(written out below as the handler has them). Messages are built by thriftpy2 where it can write
them, and by hand for what it cannot: duplicates, unknown fields, wrong wire types, non-UTF-8
strings, missing required fields.
"""

from __future__ import annotations

import gc
import math
import random
import struct
from typing import Any

import pytest
from thriftpy2.protocol.cybin.cybin import TCyBinaryProtocol
from thriftpy2.thrift import TMessageType, TType
from thriftpy2.transport.memory.cymemory import TCyMemoryBuffer

from pinlater._pinlater import (
    AckCall,
    ClaimedJobs,
    DequeueCall,
    DescriptorError,
    EnqueueCall,
    JobRejected,
    LocalIds,
    MalformedThriftError,
    MissingFieldError,
    NewJobBatch,
    NotUtf8Error,
    decode_descriptors,
    decode_hot_call,
    decode_hot_frame,
    encode_dequeue_batches,
    encode_dequeue_reply,
    encode_descriptors,
    encode_enqueue_reply,
    encode_void_reply,
    thrift_struct_end,
)
from pinlater.backends.base import AckItem, ClaimedJob, NewJob
from pinlater.backends.sharded import DequeuedJob
from pinlater.errors import ErrorCode
from pinlater.idl import idl
from pinlater.server.dispatch import _parse_header, missing_required_field

BOOL, BYTE, DOUBLE, I16, I32, I64, STRING, STRUCT, MAP, SET, LIST = 2, 3, 4, 6, 8, 10, 11, 12, 13, 14, 15
HOT = ("enqueueJobs", "dequeueJobs", "ackDequeuedJobs")
#: The longest retry delay the hot decoder applies: longer ones are cut to it (MAX_RETRY_DELAY_MS
#: in rust/wire/hot_calls.rs: ten years, so that now + delay never overflows).
MAX_RETRY_DELAY_MS = 10 * 365 * 24 * 3600 * 1000
#: The latest run-after or expiry the hot decoder keeps: later ones are cut to it (MAX_TIMESTAMP_MS
#: in rust/wire/hot_calls.rs: the last millisecond of the year 9999).
MAX_TIMESTAMP_MS = 253_402_300_799_999
I64_MAX = 2**63 - 1


# -- building messages ------------------------------------------------------------------------


def call_message(method: str, args: Any, seqid: int = 1) -> tuple[bytes, int]:
    """A CALL message written by thriftpy2, and the offset of its argument struct."""
    buf = TCyMemoryBuffer()
    proto = TCyBinaryProtocol(buf)
    proto.write_message_begin(method, TMessageType.CALL, seqid)
    proto.write_struct(args)
    payload: bytes = buf.getvalue()
    return payload, _parse_header(payload)[3]


def raw_message(method: str, body: bytes) -> tuple[bytes, int]:
    """A CALL message around a hand-written argument struct."""
    name = method.encode()
    header = struct.pack(">iI", -2147418111, len(name)) + name + struct.pack(">i", 1)
    return header + body, len(header)


def fld(ttype: int, fid: int) -> bytes:
    return struct.pack(">bh", ttype, fid)


def string(data: bytes) -> bytes:
    return struct.pack(">i", len(data)) + data


def sfield(fid: int, text: str | bytes) -> bytes:
    return fld(STRING, fid) + string(text.encode() if isinstance(text, str) else text)


def lst(etype: int, items: list[bytes]) -> bytes:
    return struct.pack(">bi", etype, len(items)) + b"".join(items)


STOP = b"\x00"
CONTEXT = fld(STRUCT, 1) + sfield(1, "src") + STOP


def enqueue_body(*jobs: bytes, queue: bytes = sfield(1, "q"), context: bytes = CONTEXT) -> bytes:
    request = fld(STRUCT, 2) + queue + fld(LIST, 2) + lst(STRUCT, [j + STOP for j in jobs]) + STOP
    return context + request + STOP


# -- random messages, noise included ----------------------------------------------------------

_WIRE = {TType.BINARY: STRING}


def wire_type(ttype: int) -> int:
    return _WIRE.get(ttype, ttype)


class Noise:
    """Writes random values of a thrift_spec, with omissions, duplicates, unknown fields, wrong
    wire types, lists of the wrong element type and (rarely) non-UTF-8 strings."""

    def __init__(self, rng: random.Random, level: float) -> None:
        self.rng = rng
        self.level = level

    def chance(self, p: float) -> bool:
        return self.rng.random() < p * self.level

    def text(self, name: str) -> bytes:
        rng = self.rng
        if self.chance(0.02):
            return rng.choice([b"\xff", b"ok\xe2\x82", b"\xed\xa0\x80", b"\xc3(", b"\xf0\x90\x80"])
        if name == "jobDescriptor":
            if self.chance(0.05):
                return rng.choice([b"nope", b"q:s1:p0:1", b"q:x1:p1:1", b"q:s1:p1:-1", b"q:s1:p1:18446744073709551616"])
            shard = rng.choice(["1", "2", "1d1"])
            local_id = rng.choice([rng.randrange(0, 1000), rng.randrange(0, 2**64)])
            return f"q:s{shard}:p{rng.randrange(1, 4)}:{local_id}".encode()
        if name == "queueName":
            return rng.choice([b"q", b"q", b"emails_2", b"bad name", b""])
        return rng.choice(
            [b"", b"s", "ünï".encode(), bytes(rng.randrange(32, 127) for _ in range(rng.randrange(0, 20)))]
        )

    def value(self, ttype: int, spec: Any, name: str, depth: int = 0) -> bytes:
        rng = self.rng
        if ttype == BOOL:
            return bytes([rng.choice([0, 1, 2, 255])])
        if ttype == BYTE:
            return struct.pack(">b", rng.choice([1, 2, 3, 1, 2, 3, 0, -1, 4, rng.randrange(-128, 128)]))
        if ttype == I16:
            return struct.pack(">h", rng.randrange(-(2**15), 2**15))
        if ttype == I32:
            return struct.pack(">i", rng.choice([0, 1, 2, 5, -1, rng.randrange(-(2**31), 2**31)]))
        if ttype == I64:
            return struct.pack(">q", rng.choice([0, 7, -3, 1_700_000_000_000, rng.randrange(-(2**63), 2**63)]))
        if ttype == DOUBLE:
            return struct.pack(">d", rng.choice([1.0, 0.5, 0.0, -2.0, math.nan, math.inf, rng.random()]))
        if ttype == TType.BINARY:
            return string(rng.randbytes(rng.choice([0, 1, 5, 40])))
        if ttype == STRING:
            return string(self.text(name))
        if ttype == STRUCT:
            return self.struct(spec)
        if ttype == LIST:
            etype, espec = (spec, None) if isinstance(spec, int) else spec
            n = rng.choice([0, 1, 2, 3, rng.randrange(0, 12)])
            if self.chance(0.05):  # another element type: thriftpy2 reads an empty list
                other = rng.choice([I32, STRING, BOOL])
                return struct.pack(">bi", other, n) + b"".join(self.value(other, None, "") for _ in range(n))
            return struct.pack(">bi", wire_type(etype), n) + b"".join(
                self.value(etype, espec, name, depth + 1) for _ in range(n)
            )
        if ttype == MAP:
            n = rng.randrange(0, 3)
            return struct.pack(">bbi", STRING, I32, n) + b"".join(string(b"k") + struct.pack(">i", i) for i in range(n))
        raise AssertionError(ttype)

    def unknown(self) -> bytes:
        ttype = self.rng.choice([BOOL, I32, I64, STRING, LIST, MAP, STRUCT])
        spec = {LIST: I32, STRUCT: idl.PinLaterDequeueMetadata}.get(ttype)
        return fld(ttype, self.rng.choice([7, 99, -1, 0, 300])) + self.value(ttype, spec, "")

    def struct(self, cls: Any) -> bytes:
        rng = self.rng
        parts: list[bytes] = []
        for fid, spec in sorted(cls.thrift_spec.items()):
            ttype, name = spec[0], spec[1]
            nested = spec[2] if len(spec) == 4 else None
            required = spec[-1] is True
            if self.chance(0.03 if required else 0.3):
                continue
            for _ in range(2 if self.chance(0.08) else 1):
                if self.chance(0.06):  # a known id with another wire type: skipped
                    other = rng.choice([t for t in (BOOL, I32, I64, STRING, DOUBLE) if t != wire_type(ttype)])
                    parts.append(fld(other, fid) + self.value(other, None, ""))
                else:
                    parts.append(fld(wire_type(ttype), fid) + self.value(ttype, nested, name))
        if self.chance(0.2):
            parts.insert(rng.randrange(len(parts) + 1), self.unknown())
        if self.chance(0.1):
            rng.shuffle(parts)
        return b"".join(parts) + STOP


# -- the reference: dispatcher, then handler --------------------------------------------------


def reference(method: str, payload: bytes, offset: int) -> Any:
    """The decoded args, or ``(exception type, message)`` as the server refused them before."""
    try:
        thrift_struct_end(payload, offset)
        args_cls = getattr(idl.PinLater, f"{method}_args")
        args = TCyBinaryProtocol(TCyMemoryBuffer(payload[offset:]), strict_decode=True).read_struct(args_cls())
    except MalformedThriftError as exc:
        return MalformedThriftError, str(exc)
    except UnicodeDecodeError as exc:
        return NotUtf8Error, str(exc)
    for arg in ("context", "request"):
        if getattr(args, arg) is None:
            return MissingFieldError, f"missing argument {method}.{arg}"
    missing = missing_required_field(args)
    if missing is not None:
        return MissingFieldError, f"missing required field {missing}"
    return args


def handler_batch(jobs: list[Any], num_priorities: int, now: int) -> Any:
    """``PinLaterHandler.enqueue_jobs``'s per-job loop."""
    new_jobs = []
    for job in jobs:
        attempts = 2 if job.numAttemptsAllowed is None else max(1, job.numAttemptsAllowed)  # (below 1: one attempt)
        priority = job.priority
        if priority is None:
            priority = 1
        elif not 1 <= priority <= num_priorities:
            return ("rejected", ErrorCode.PRIORITY_NOT_SUPPORTED, f"priority {priority} is not in 1..{num_priorities}")
        given = job.runAfterTimestampMillis  # (0 is now, as the original's Redis backend read it)
        run_after = now if not given else min(given, MAX_TIMESTAMP_MS)
        new_jobs.append(tuple(NewJob(priority, job.body, run_after, attempts, job.customStatus or "")))
    return new_jobs


def handler_acks(request: Any) -> dict[str, Any]:
    """``PinLaterHandler._ack`` and ``ShardedBackend.ack_jobs``'s grouping by shard."""
    succeeded = request.jobsSucceeded or []
    failed = request.jobsFailed or []
    view: dict[str, Any] = {"queue": request.queueName, "succeeded": len(succeeded), "failed": len(failed)}
    try:
        parsed = decode_descriptors([a.jobDescriptor for a in succeeded] + [a.jobDescriptor for a in failed])
    except DescriptorError as exc:
        view["keys"] = view["groups"] = view["retried"] = ("DescriptorError", str(exc))
        return view
    view["keys"] = parsed
    groups: dict[str, tuple[list[Any], list[Any]]] = {}
    retried = []
    for i, ack in enumerate(succeeded + failed):
        _q, shard, priority, local_id = parsed[i]
        if local_id > I64_MAX:  # no store hands such an id out: the extension leaves it out
            continue
        delay = min(max(0, ack.retryDelayMillis or 0), MAX_RETRY_DELAY_MS)
        item = AckItem(priority, local_id, ack.appendCustomStatus or "", delay)
        ok = i < len(succeeded)
        groups.setdefault(shard, ([], []))[0 if ok else 1].append(tuple(item))
        if not ok:
            retried.append((shard, item.priority, item.retry_delay_ms))
    view["groups"] = [(shard, ok, bad) for shard, (ok, bad) in groups.items()]
    view["retried"] = retried
    return view


def our_acks(call: AckCall) -> dict[str, Any]:
    view: dict[str, Any] = {"queue": call.queue, "succeeded": call.succeeded, "failed": call.failed}
    try:
        view["keys"] = call.keys()
        view["groups"] = [(shard, g.succeeded(), g.failed()) for shard, g in call.groups()]
        view["retried"] = call.retried()
    except DescriptorError as exc:
        view["keys"] = view["groups"] = view["retried"] = ("DescriptorError", str(exc))
    return view


def bits(x: float) -> bytes:
    return struct.pack(">d", x)


def expected_view(method: str, args: Any, num_priorities: int, now: int) -> dict[str, Any]:
    request = args.request
    if method == "ackDequeuedJobs":
        return handler_acks(request)
    view: dict[str, Any] = {
        "source": args.context.source,
        "request_id": args.context.requestId,
        "queue": request.queueName,
    }
    if method == "enqueueJobs":
        view["len"] = len(request.jobs)
        view["batch"] = handler_batch(request.jobs, num_priorities, now)
    else:
        view["limit"] = request.limit
        view["dry_run"] = bool(request.dryRun)
        view["coverage"] = bits(request.coverage)
        view["wait"] = request.waitMillis or 0
        view["ack"] = None if request.jobAckRequest is None else handler_acks(request.jobAckRequest)
    return view


def our_view(call: Any, num_priorities: int, now: int) -> dict[str, Any]:
    if isinstance(call, AckCall):
        return our_acks(call)
    view: dict[str, Any] = {"source": call.source, "request_id": call.request_id, "queue": call.queue}
    if isinstance(call, EnqueueCall):
        view["len"] = len(call)
        try:
            view["batch"] = call.batch(num_priorities, now).to_list()
        except JobRejected as exc:
            view["batch"] = ("rejected", exc.code, str(exc))
    else:
        assert isinstance(call, DequeueCall)
        view["limit"] = call.limit
        view["dry_run"] = call.dry_run
        view["coverage"] = bits(call.coverage)
        view["wait"] = call.wait_millis or 0
        view["ack"] = None if call.ack is None else our_acks(call.ack)
    return view


def outcome(method: str, payload: bytes, offset: int, num_priorities: int = 3, now: int = 1_000) -> Any:
    """What ``decode_hot_call`` makes of the message, in the reference's terms."""
    try:
        call = decode_hot_call(method, payload, offset)
    except (MalformedThriftError, MissingFieldError) as exc:
        return type(exc), str(exc)
    return our_view(call, num_priorities, now)


def expected(method: str, payload: bytes, offset: int, num_priorities: int = 3, now: int = 1_000) -> Any:
    args = reference(method, payload, offset)
    return args if isinstance(args, tuple) else expected_view(method, args, num_priorities, now)


def agrees(method: str, payload: bytes, offset: int, num_priorities: int = 3) -> Any:
    got = outcome(method, payload, offset, num_priorities)
    assert got == expected(method, payload, offset, num_priorities)
    return got


# -- decoding: agreement with thriftpy2 -------------------------------------------------------


def general_path(payload: bytes) -> Any:
    """What the dispatcher's general path makes of a whole message that is a hot call: ``(method,
    seqid, view)``, or None (not a hot CALL, or one that fails to decode)."""
    try:
        name, mtype, seqid, offset = _parse_header(payload)
    except Exception:
        return None
    if name not in HOT or mtype != TMessageType.CALL:
        return None
    try:
        return name, seqid, our_view(decode_hot_call(name, payload, offset), 3, 1_000)
    except (MalformedThriftError, MissingFieldError):
        return None


def one_crossing(payload: bytes) -> Any:
    hot = decode_hot_frame(payload)
    return None if hot is None else (hot[0], hot[1], our_view(hot[2], 3, 1_000))


@pytest.mark.parametrize("method", HOT)
def test_a_whole_hot_frame_reads_as_its_header_and_arguments_do(method: str) -> None:
    """``decode_hot_frame`` (the transport's one crossing) serves exactly the messages the general
    path would read as a hot call, as that path reads them; it leaves every other to that path."""
    rng = random.Random(method)
    noise = Noise(rng, 0.3)
    args_cls = getattr(idl.PinLater, f"{method}_args")
    served = 0
    for i in range(400):
        payload, offset = raw_message(method, noise.struct(args_cls))
        name = method.encode()
        if i % 4 == 1:  # the old, unversioned header, with a seqid of its own
            payload = struct.pack(">i", len(name)) + name + struct.pack(">bi", TMessageType.CALL, -i) + payload[offset:]
        elif i % 4 == 2:  # a header byte changed: the version, the type, the name or its length
            at = rng.randrange(offset)
            payload = payload[:at] + bytes([rng.randrange(256)]) + payload[at + 1 :]
        elif i % 4 == 3:  # cut short anywhere
            payload = payload[: rng.randrange(len(payload))]
        expected = general_path(payload)
        assert one_crossing(payload) == expected, payload
        served += expected is not None
    assert served > 100, served  # (noise and the cut or changed quarters fail the rest)
    oneway = (
        struct.pack(">iI", -2147418111 | TMessageType.ONEWAY, len(method))
        + method.encode()
        + payload[4 + 4 + len(method) :]
    )
    assert decode_hot_frame(oneway) is None
    assert decode_hot_frame(call_message("getQueueNames", idl.PinLater.getQueueNames_args(), 7)[0]) is None


@pytest.mark.parametrize("method", HOT)
@pytest.mark.parametrize("level", [0.0, 0.3, 1.0])
def test_random_messages_decode_as_thriftpy2_and_the_handler_did(method: str, level: float) -> None:
    rng = random.Random(f"{method}{level}")
    noise = Noise(rng, level)
    args_cls = getattr(idl.PinLater, f"{method}_args")
    kinds: dict[Any, int] = {}
    for _ in range(400):
        payload, offset = raw_message(method, noise.struct(args_cls))
        if noise.chance(0.05):  # cut short: the walk's error
            payload = payload[: rng.randrange(offset, len(payload))]
        got = agrees(method, payload, offset, num_priorities=rng.choice([1, 3, 10]))
        kind = got[0] if isinstance(got, tuple) else dict
        kinds[kind] = kinds.get(kind, 0) + 1
    assert kinds.get(dict, 0) > 40, kinds  # most messages decode
    if level == 1.0:
        assert kinds.get(MissingFieldError, 0) > 0, kinds
        assert kinds.get(MalformedThriftError, 0) > 0, kinds


def test_thriftpy2_written_calls_with_defaults_and_every_optional_set() -> None:
    plain = idl.PinLater.enqueueJobs_args(
        context=idl.RequestContext(source="s"),
        request=idl.PinLaterEnqueueRequest(queueName="q", jobs=[idl.PinLaterJob(body=b"\xff\x00")]),
    )
    call = decode_hot_call("enqueueJobs", *call_message("enqueueJobs", plain))
    assert isinstance(call, EnqueueCall)
    assert (call.source, call.request_id, call.queue, len(call)) == ("s", "", "q", 1)
    assert call.batch(3, 77).to_list() == [(1, b"\xff\x00", 77, 2, "")]
    full_job = idl.PinLaterJob(
        body=b"b", priority=3, runAfterTimestampMillis=-5, numAttemptsAllowed=9, customStatus="é"
    )
    full = idl.PinLater.enqueueJobs_args(
        context=idl.RequestContext(source="s", requestId="r"),
        request=idl.PinLaterEnqueueRequest(queueName="q", jobs=[full_job] * 3),
    )
    call = decode_hot_call("enqueueJobs", *call_message("enqueueJobs", full))
    assert isinstance(call, EnqueueCall)
    assert call.request_id == "r"
    assert call.batch(3, 0).to_list() == [(3, b"b", -5, 9, "é")] * 3
    for method, args in [("enqueueJobs", plain), ("enqueueJobs", full)]:
        agrees(method, *call_message(method, args))


def test_a_dequeue_with_defaults_and_with_everything() -> None:
    plain = idl.PinLater.dequeueJobs_args(
        context=idl.RequestContext(source="s"), request=idl.PinLaterDequeueRequest(queueName="q", limit=5)
    )
    call = decode_hot_call("dequeueJobs", *call_message("dequeueJobs", plain))
    assert isinstance(call, DequeueCall)
    # thriftpy2 writes the optional fields' defaults, waitMillis=0 among them.
    assert (call.queue, call.limit, call.dry_run, call.coverage, call.wait_millis, call.ack) == (
        "q",
        5,
        False,
        1.0,
        0,
        None,
    )
    bare = CONTEXT + fld(STRUCT, 2) + sfield(1, "q") + fld(I32, 2) + struct.pack(">i", 5) + STOP + STOP
    call = decode_hot_call("dequeueJobs", *raw_message("dequeueJobs", bare))
    assert isinstance(call, DequeueCall)
    assert (call.dry_run, call.coverage, call.wait_millis, call.ack) == (False, 1.0, None, None)
    acks = idl.PinLaterJobAckRequest(
        queueName="q",
        jobsSucceeded=[idl.PinLaterJobAckInfo(jobDescriptor="q:s1:p1:5")],
        jobsFailed=[idl.PinLaterJobAckInfo(jobDescriptor="q:s2:p3:6", appendCustomStatus="x", retryDelayMillis=-9)],
    )
    full = idl.PinLater.dequeueJobs_args(
        context=idl.RequestContext(source="s", requestId="r"),
        request=idl.PinLaterDequeueRequest(
            queueName="q", limit=9, jobAckRequest=acks, dryRun=True, coverage=0.25, waitMillis=0
        ),
    )
    call = decode_hot_call("dequeueJobs", *call_message("dequeueJobs", full))
    assert isinstance(call, DequeueCall)
    assert (call.dry_run, call.coverage, call.wait_millis) == (True, 0.25, 0)
    assert call.ack is not None
    assert (call.ack.queue, call.ack.succeeded, call.ack.failed) == ("q", 1, 1)
    groups = [(shard, g.succeeded(), g.failed()) for shard, g in call.ack.groups()]
    assert groups == [("1", [(1, 5, "", 0)], []), ("2", [], [(3, 6, "x", 0)])]
    assert call.ack.retried() == [("2", 3, 0)]
    assert call.ack.keys() == [("q", "1", 1, 5), ("q", "2", 3, 6)]
    for args in (plain, full):
        agrees("dequeueJobs", *call_message("dequeueJobs", args))


def test_empty_lists_and_no_jobs() -> None:
    none = idl.PinLater.enqueueJobs_args(
        context=idl.RequestContext(source="s"), request=idl.PinLaterEnqueueRequest(queueName="q", jobs=[])
    )
    call = decode_hot_call("enqueueJobs", *call_message("enqueueJobs", none))
    assert isinstance(call, EnqueueCall)
    assert len(call) == 0
    assert len(call.batch(1, 0)) == 0
    ack = idl.PinLater.ackDequeuedJobs_args(
        context=idl.RequestContext(source="s"),
        request=idl.PinLaterJobAckRequest(queueName="q", jobsSucceeded=[]),
    )
    call = decode_hot_call("ackDequeuedJobs", *call_message("ackDequeuedJobs", ack))
    assert isinstance(call, AckCall)
    assert (call.succeeded, call.failed, call.groups(), call.retried(), call.keys()) == (0, 0, [], [], [])


def test_duplicates_unknown_fields_and_wrong_wire_types() -> None:
    job = (
        sfield(1, b"first")
        + fld(I32, 2)  # priority sent as an i32: skipped
        + struct.pack(">i", 9)
        + fld(MAP, 99)  # unknown: skipped
        + struct.pack(">bbi", STRING, I32, 1)
        + string(b"k")
        + struct.pack(">i", 1)
        + fld(BYTE, 2)
        + b"\x02"
        + sfield(1, b"second")  # the later body wins
    )
    payload, offset = raw_message("enqueueJobs", enqueue_body(job, queue=sfield(1, "a") + sfield(1, "q")))
    call = decode_hot_call("enqueueJobs", payload, offset)
    assert isinstance(call, EnqueueCall)
    assert call.queue == "q"
    assert call.batch(3, 0).to_list() == [(2, b"second", 0, 2, "")]
    agrees("enqueueJobs", payload, offset)
    # A list of another element type reads as empty; a later struct replaces, not merges.
    ints = fld(LIST, 2) + lst(I32, [struct.pack(">i", 1)])
    context = fld(STRUCT, 1) + sfield(1, "a") + sfield(2, "r") + STOP + fld(STRUCT, 1) + sfield(1, "b") + STOP
    body = context + fld(STRUCT, 2) + sfield(1, "q") + ints + STOP + STOP
    payload, offset = raw_message("enqueueJobs", body)
    call = decode_hot_call("enqueueJobs", payload, offset)
    assert isinstance(call, EnqueueCall)
    assert (call.source, call.request_id, len(call)) == ("b", "", 0)
    agrees("enqueueJobs", payload, offset)


MISSING = [
    ("enqueueJobs", STOP, "missing argument enqueueJobs.context"),
    ("enqueueJobs", CONTEXT + STOP, "missing argument enqueueJobs.request"),
    ("dequeueJobs", fld(STRUCT, 2) + STOP + STOP, "missing argument dequeueJobs.context"),
    (
        "enqueueJobs",
        fld(STRUCT, 1) + STOP + fld(STRUCT, 2) + STOP + STOP,
        "missing required field RequestContext.source at context.source",
    ),
    (
        "enqueueJobs",
        enqueue_body(sfield(1, "a"), queue=b""),
        "missing required field PinLaterEnqueueRequest.queueName at request.queueName",
    ),
    (
        "enqueueJobs",
        CONTEXT + fld(STRUCT, 2) + sfield(1, "q") + STOP + STOP,
        "missing required field PinLaterEnqueueRequest.jobs at request.jobs",
    ),
    (
        "enqueueJobs",
        enqueue_body(sfield(1, "a"), sfield(1, "b"), sfield(1, "c"), fld(BYTE, 2) + b"\x01", b""),
        "missing required field PinLaterJob.body at request.jobs[3].body",
    ),
    (
        "dequeueJobs",
        CONTEXT + fld(STRUCT, 2) + sfield(1, "q") + STOP + STOP,
        "missing required field PinLaterDequeueRequest.limit at request.limit",
    ),
    (
        "dequeueJobs",
        CONTEXT + fld(STRUCT, 2) + fld(I32, 2) + struct.pack(">i", 1) + fld(STRUCT, 3) + STOP + STOP + STOP,
        "missing required field PinLaterDequeueRequest.queueName at request.queueName",
    ),
    (
        "dequeueJobs",
        CONTEXT
        + fld(STRUCT, 2)
        + sfield(1, "q")
        + fld(I32, 2)
        + struct.pack(">i", 1)
        + fld(STRUCT, 3)
        + sfield(1, "q")
        + fld(LIST, 2)
        + lst(STRUCT, [sfield(1, "q:s1:p1:1") + STOP, STOP])
        + fld(LIST, 3)
        + lst(STRUCT, [STOP])
        + STOP
        + STOP
        + STOP,
        "missing required field PinLaterJobAckInfo.jobDescriptor at "
        "request.jobAckRequest.jobsSucceeded[1].jobDescriptor",
    ),
    (
        "ackDequeuedJobs",
        CONTEXT + fld(STRUCT, 2) + fld(LIST, 3) + lst(STRUCT, [STOP]) + STOP + STOP,
        "missing required field PinLaterJobAckRequest.queueName at request.queueName",
    ),
    (
        "ackDequeuedJobs",
        CONTEXT + fld(STRUCT, 2) + sfield(1, "q") + fld(LIST, 3) + lst(STRUCT, [sfield(2, "x") + STOP]) + STOP + STOP,
        "missing required field PinLaterJobAckInfo.jobDescriptor at request.jobsFailed[0].jobDescriptor",
    ),
]


@pytest.mark.parametrize(("method", "body", "message"), MISSING, ids=[m[2].split()[-1] for m in MISSING])
def test_missing_arguments_and_required_fields_at_each_level(method: str, body: bytes, message: str) -> None:
    payload, offset = raw_message(method, body)
    with pytest.raises(MissingFieldError) as caught:
        decode_hot_call(method, payload, offset)
    assert str(caught.value) == message
    assert isinstance(caught.value, ValueError)
    agrees(method, payload, offset)


NOT_UTF8 = [
    b"\xff",
    b"ab\x80",
    b"\xe2\x82",
    b"\xe2(\xa1",
    b"\xf0\x90(",
    b"\xed\xa0\x80",
    b"\xc0\xaf",
    b"\xf4\x90\x80\x80",
]


@pytest.mark.parametrize("bad", NOT_UTF8)
def test_strings_must_be_utf8_worded_as_python_but_bodies_need_not(bad: bytes) -> None:
    bodies_only = raw_message("enqueueJobs", enqueue_body(sfield(1, bad)))
    call = decode_hot_call("enqueueJobs", *bodies_only)
    assert isinstance(call, EnqueueCall)
    assert call.batch(1, 0).to_list()[0][1] == bad
    for method, body in [
        ("enqueueJobs", enqueue_body(sfield(1, b"ok") + sfield(5, bad))),
        ("enqueueJobs", enqueue_body(sfield(1, b"ok"), queue=sfield(1, bad))),
        ("enqueueJobs", enqueue_body(sfield(1, b"ok"), context=fld(STRUCT, 1) + sfield(2, bad) + STOP)),
        (
            "ackDequeuedJobs",
            CONTEXT + fld(STRUCT, 2) + fld(LIST, 2) + lst(STRUCT, [sfield(1, bad) + STOP]) + STOP + STOP,
        ),
    ]:
        payload, offset = raw_message(method, body)
        with pytest.raises(NotUtf8Error) as caught:  # (a MalformedThriftError: the dispatcher repairs it)
            decode_hot_call(method, payload, offset)
        with pytest.raises(UnicodeDecodeError) as python:
            bad.decode()
        assert str(caught.value) == str(python.value)
        agrees(method, payload, offset)


def test_utf8_errors_are_worded_as_python_for_random_bytes() -> None:
    rng = random.Random(3)
    alphabet = [
        0x00,
        0x41,
        0x7F,
        0x80,
        0xBF,
        0xC0,
        0xC2,
        0xDF,
        0xE0,
        0xE1,
        0xED,
        0xEF,
        0xF0,
        0xF4,
        0xF5,
        0xFF,
        0x90,
        0xA0,
    ]
    for _ in range(2000):
        bad = bytes(rng.choice(alphabet) for _ in range(rng.randrange(1, 7)))
        payload, offset = raw_message("ackDequeuedJobs", CONTEXT + fld(STRUCT, 2) + sfield(1, bad) + STOP + STOP)
        agrees("ackDequeuedJobs", payload, offset)


def test_job_rejections_are_the_handlers() -> None:
    jobs = [sfield(1, "a"), sfield(1, "b") + fld(BYTE, 2) + b"\x05" + fld(I32, 4) + struct.pack(">i", 0)]
    payload, offset = raw_message("enqueueJobs", enqueue_body(*jobs))
    call = decode_hot_call("enqueueJobs", payload, offset)
    assert isinstance(call, EnqueueCall)
    with pytest.raises(JobRejected) as caught:
        call.batch(3, 0)
    assert (caught.value.code, str(caught.value)) == (
        ErrorCode.PRIORITY_NOT_SUPPORTED,
        "priority 5 is not in 1..3",
    ), "attempts 0 is taken (as 1), its priority is not"
    assert isinstance(caught.value, ValueError)
    jobs[1] = sfield(1, "b") + fld(BYTE, 2) + b"\xfb"
    payload, offset = raw_message("enqueueJobs", enqueue_body(*jobs))
    call = decode_hot_call("enqueueJobs", payload, offset)
    assert isinstance(call, EnqueueCall)
    with pytest.raises(JobRejected) as caught:
        call.batch(3, 0)
    assert (caught.value.code, str(caught.value)) == (ErrorCode.PRIORITY_NOT_SUPPORTED, "priority -5 is not in 1..3")
    for n in (1, 3, 5):
        agrees("enqueueJobs", payload, offset, num_priorities=n)


def test_a_bad_descriptor_is_decode_descriptors_error() -> None:
    infos = [sfield(1, "q:s1:p1:1") + STOP, sfield(1, "q:s1:p1:x") + STOP]
    body = CONTEXT + fld(STRUCT, 2) + sfield(1, "q") + fld(LIST, 3) + lst(STRUCT, infos) + STOP + STOP
    payload, offset = raw_message("ackDequeuedJobs", body)
    call = decode_hot_call("ackDequeuedJobs", payload, offset)
    assert isinstance(call, AckCall)
    assert (call.queue, call.failed) == ("q", 2)  # decoded: the queue can be checked first
    with pytest.raises(DescriptorError) as caught:
        call.groups()
    with pytest.raises(DescriptorError) as direct:
        decode_descriptors(["q:s1:p1:1", "q:s1:p1:x"])
    assert str(caught.value) == str(direct.value)
    for method in (call.keys, call.retried):
        with pytest.raises(DescriptorError):
            method()


def test_hostile_lengths_fail_fast_without_allocating() -> None:
    huge_list = CONTEXT + fld(STRUCT, 2) + sfield(1, "q") + fld(LIST, 2) + struct.pack(">bi", STRUCT, 2**31 - 1) + STOP
    payload, offset = raw_message("enqueueJobs", huge_list)
    with pytest.raises(MalformedThriftError, match="container truncated"):
        decode_hot_call("enqueueJobs", payload, offset)
    huge_string = CONTEXT + fld(STRUCT, 2) + fld(STRING, 1) + struct.pack(">i", 2**31 - 1) + b"q" + STOP + STOP
    payload, offset = raw_message("enqueueJobs", huge_string)
    with pytest.raises(MalformedThriftError, match="struct truncated"):
        decode_hot_call("enqueueJobs", payload, offset)
    deep = b"".join(fld(STRUCT, 9) for _ in range(40))
    payload, offset = raw_message("dequeueJobs", deep)
    with pytest.raises(MalformedThriftError, match="structs nested too deeply"):
        decode_hot_call("dequeueJobs", payload, offset)
    # Every cut of a good message is refused as the walk refuses it.
    good, offset = raw_message("enqueueJobs", enqueue_body(sfield(1, "abc") + sfield(5, "s")))
    for cut in range(offset, len(good)):
        with pytest.raises(MalformedThriftError):
            decode_hot_call("enqueueJobs", good[:cut], offset)
    with pytest.raises(ValueError, match="not a hot call"):
        decode_hot_call("getQueueNames", good, offset)


def test_a_large_frame_decodes_and_the_call_keeps_its_payload() -> None:
    body = bytes(range(256)) * 8192  # 2 MiB: decoded with the interpreter released
    payload, offset = raw_message("enqueueJobs", enqueue_body(sfield(1, body), sfield(1, b"x")))
    call = decode_hot_call("enqueueJobs", payload, offset)
    del payload
    gc.collect()
    assert isinstance(call, EnqueueCall)
    batch = call.batch(1, 5)
    assert batch.body_bytes == len(body) + 1
    assert batch.to_list()[0][1] == body


# -- encoding: byte for byte what thriftpy2 writes --------------------------------------------


def thriftpy2_reply(method: str, seqid: int, result: Any) -> bytes:
    buf = TCyMemoryBuffer()
    proto = TCyBinaryProtocol(buf)
    proto.write_message_begin(method, TMessageType.REPLY, seqid)
    proto.write_struct(result)
    out: bytes = buf.getvalue()
    return out


def test_enqueue_replies_match_thriftpy2() -> None:
    rng = random.Random(11)
    for _ in range(200):
        queue = rng.choice(["q", "emails_2"])
        shard = rng.choice(["1", "1d1", "x_9"])
        n = rng.choice([0, 1, rng.randrange(2, 300)])
        jobs = [NewJob(rng.randrange(1, 128), b"b", 0, 1, "") for _ in range(n)]
        ids = [rng.choice([0, rng.randrange(0, 2**63)]) for _ in range(n)]
        seqid = rng.randrange(-(2**31), 2**31)
        descriptors = encode_descriptors(queue, shard, [j.priority for j in jobs], ids)
        result = idl.PinLater.enqueueJobs_result(success=idl.PinLaterEnqueueResponse(jobDescriptors=descriptors))
        reply = encode_enqueue_reply("enqueueJobs", seqid, queue, shard, NewJobBatch(jobs), LocalIds(ids))
        assert reply == thriftpy2_reply("enqueueJobs", seqid, result)


def test_enqueue_reply_refusals() -> None:
    batch = NewJobBatch([NewJob(1, b"", 0, 1, ""), NewJob(1, b"", 0, 1, "")])
    with pytest.raises(DescriptorError, match="2 priorities but 1 local ids"):
        encode_enqueue_reply("enqueueJobs", 0, "q", "1", batch, LocalIds([1]))
    with pytest.raises(DescriptorError, match="index 1"):
        encode_enqueue_reply("enqueueJobs", 0, "q", "1", batch, LocalIds([1, -1]))
    with pytest.raises(DescriptorError):
        encode_enqueue_reply("enqueueJobs", 0, "q", "s:1", batch, LocalIds([1, 2]))


def test_dequeue_batches_match_thriftpy2_and_encode_dequeue_reply() -> None:
    rng = random.Random(12)
    for _ in range(200):
        queue = rng.choice(["q", "emails_2"])
        batches = []
        dequeued = []
        for b in range(rng.choice([0, 1, rng.randrange(2, 6)])):
            shard, priority = f"{b}d{rng.randrange(3)}", rng.randrange(1, 4)
            jobs = [
                ClaimedJob(
                    b * 1000 + i,
                    rng.randbytes(rng.choice([0, 3, 100])),
                    rng.randrange(-(2**31), 2**31),
                    rng.randrange(-(2**31), 2**31),
                    1,
                    2,
                )
                for i in range(rng.choice([0, 1, rng.randrange(2, 60)]))
            ]
            batches.append((shard, priority, ClaimedJobs(jobs)))
            dequeued += [DequeuedJob(f"{queue}:s{shard}:p{priority}:{j.local_id}", j) for j in jobs]
        seqid = rng.randrange(-(2**31), 2**31)
        response = idl.PinLaterDequeueResponse(
            jobs={d.descriptor: d.job.body for d in dequeued},
            jobMetadata={
                d.descriptor: idl.PinLaterDequeueMetadata(
                    attemptsAllowed=d.job.attempts_allowed, attemptsRemaining=d.job.attempts_remaining
                )
                for d in dequeued
            },
        )
        expected_reply = thriftpy2_reply("dequeueJobs", seqid, idl.PinLater.dequeueJobs_result(success=response))
        reply = encode_dequeue_batches("dequeueJobs", seqid, queue, batches)
        assert reply == expected_reply
        assert reply == encode_dequeue_reply("dequeueJobs", seqid, dequeued)


def test_dequeue_batches_refusals() -> None:
    too_many = ClaimedJobs([(1, b"", 2**31, 1, 0, 0)])
    with pytest.raises(ValueError, match="attempts_allowed 2147483648 does not fit a Thrift i32"):
        encode_dequeue_batches("dequeueJobs", 0, "q", [("1", 1, too_many)])
    with pytest.raises(DescriptorError):
        encode_dequeue_batches("dequeueJobs", 0, "q", [("1", 0, ClaimedJobs([(1, b"", 1, 1, 0, 0)]))])


@pytest.mark.parametrize("seqid", [0, 1, -1, 2**31 - 1, -(2**31)])
def test_void_reply_matches_thriftpy2(seqid: int) -> None:
    expected_reply = thriftpy2_reply("ackDequeuedJobs", seqid, idl.PinLater.ackDequeuedJobs_result())
    assert encode_void_reply("ackDequeuedJobs", seqid) == expected_reply


def test_replies_read_back_with_thriftpy2() -> None:
    batch = NewJobBatch([NewJob(2, b"a", 0, 1, ""), NewJob(1, b"b", 0, 1, "")])
    reply = encode_enqueue_reply("enqueueJobs", 4, "q", "1", batch, LocalIds([10, 11]))
    proto = TCyBinaryProtocol(TCyMemoryBuffer(reply))
    assert proto.read_message_begin() == ("enqueueJobs", TMessageType.REPLY, 4)
    result = proto.read_struct(idl.PinLater.enqueueJobs_result())
    assert result.success.jobDescriptors == ["q:s1:p2:10", "q:s1:p1:11"]


def test_an_enqueue_past_the_jobs_it_takes_is_walked_not_decoded() -> None:
    """A call declaring more than MAX_ENQUEUE_JOBS jobs keeps none of them (two million empty
    jobs held about 290 MB while decoded, to be refused): its length is what it declared, for the
    handler to refuse; a malformed one is still refused as malformed."""
    from pinlater._pinlater import MAX_ENQUEUE_JOBS

    for n in (MAX_ENQUEUE_JOBS, MAX_ENQUEUE_JOBS + 1):
        args = idl.PinLater.enqueueJobs_args(
            context=idl.RequestContext(source="s"),
            request=idl.PinLaterEnqueueRequest(queueName="q", jobs=[idl.PinLaterJob(body=b"")] * n),
        )
        call = decode_hot_call("enqueueJobs", *call_message("enqueueJobs", args))
        assert isinstance(call, EnqueueCall) and len(call) == n
        if n > MAX_ENQUEUE_JOBS:
            assert call.batch(3, 0).to_list() == [], "none kept"
    payload, offset = call_message("enqueueJobs", args)
    with pytest.raises(MalformedThriftError):
        decode_hot_call("enqueueJobs", payload[:-3], offset)  # (cut short: the walk still checks it)
