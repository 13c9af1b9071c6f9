"""Thrift ``string`` fields that are not UTF-8, taken as the original server took them.

The original PinLater is a Java server: libthrift reads a ``string`` with ``new String(bytes,
"UTF-8")``, which puts U+FFFD in place of each malformed sequence and never refuses the call. Its
clients in Python 2, Go or C++ send ``string`` fields as raw bytes, and a worker that writes an
exception's text into an ack's ``appendCustomStatus`` may send bytes that are not UTF-8. Our
decoders (the Rust hot-call decoder, thriftpy2's for the other methods) read ``string`` fields as
strict UTF-8, so such a call was refused as malformed and its connection closed: the worker's
acks, sent again with every later call, failed for good.

``repair_call`` is the fallback the dispatcher takes when a call fails to decode: it reads the
call's arguments again with ``string`` fields as bytes, replaces the malformed sequences of those
that are not UTF-8 with U+FFFD (Python's ``"replace"``, one U+FFFD per maximal malformed
subpart, as Java's decoder does), and encodes the arguments again, so that the call is served as
the original served it. It answers None where no ``string`` field was at fault (the call is
malformed otherwise), so that error is answered as before. ``binary`` fields (job bodies) are
never touched: they are bytes either way.
"""

from __future__ import annotations

from typing import Any

from thriftpy2.protocol.cybin.cybin import TCyBinaryProtocol
from thriftpy2.thrift import TType
from thriftpy2.transport.memory.cymemory import TCyMemoryBuffer


def repair_call(args_cls: Any, payload: bytes, offset: int) -> tuple[bytes, int] | None:
    """The call ``payload`` (its message header, then ``args_cls``'s struct from ``offset``) with
    every ``string`` field that is not UTF-8 made UTF-8, and how many were, or None if none was
    (or the arguments cannot be read at all)."""
    try:
        args = TCyBinaryProtocol(TCyMemoryBuffer(payload[offset:]), strict_decode=False).read_struct(args_cls())
    except Exception:  # malformed for another reason: answered as before
        return None
    fixed = _fix_struct(args)
    if not fixed:
        return None
    buf = TCyMemoryBuffer()
    TCyBinaryProtocol(buf).write_struct(args)
    return payload[:offset] + buf.getvalue(), fixed


def _fix_struct(obj: Any) -> int:
    fixed = 0
    for spec in obj.thrift_spec.values():
        name = spec[1]
        value = getattr(obj, name, None)
        if value is not None:
            value, n = _fix(value, spec[0], spec[2] if len(spec) > 3 else None)
            if n:
                setattr(obj, name, value)
                fixed += n
    return fixed


def _fix(value: Any, ttype: int, args: Any) -> tuple[Any, int]:
    """``value`` of wire type ``ttype`` (``args``: its element, key and value or struct specs,
    as thriftpy2's ``thrift_spec`` gives them), with its non-UTF-8 strings replaced; and how many."""
    if ttype == TType.STRING:
        if isinstance(value, bytes):
            return value.decode("utf-8", "replace"), 1
        return value, 0
    if ttype == TType.STRUCT:
        return value, _fix_struct(value)
    if ttype in (TType.LIST, TType.SET):
        etype, eargs = _unpack(args)
        items = [_fix(item, etype, eargs) for item in value]
        fixed = sum(n for _, n in items)
        if not fixed:
            return value, 0
        out = [item for item, _ in items]
        return (set(out) if ttype == TType.SET else out), fixed
    if ttype == TType.MAP:
        (ktype, kargs), (vtype, vargs) = _unpack(args[0]), _unpack(args[1])
        pairs = [(_fix(k, ktype, kargs), _fix(v, vtype, vargs)) for k, v in value.items()]
        fixed = sum(kn + vn for (_, kn), (_, vn) in pairs)
        return ({k: v for (k, _), (v, _) in pairs} if fixed else value), fixed
    return value, 0


def _unpack(spec: Any) -> tuple[int, Any]:
    """A container's element spec as (wire type, its own args): ``11`` or ``(12, Cls)``."""
    if isinstance(spec, tuple):
        return spec[0], spec[1]
    return spec, None
