"""The native hot path against plain Python doing the same work.

Each group pits a Rust call against a plain-Python baseline written here (and only here), with
the same validation, so the ratio is what moving the code to Rust buys. Run for real with
``pytest benches/python/test_native_bench.py --benchmark-enable -q``; CI only collects and runs
each once (``--benchmark-disable``), which also checks that both sides agree.
"""

from __future__ import annotations

import collections
import functools
import random
import re
import struct
import threading
import time
from collections.abc import Sequence
from typing import Any

import pytest
from thriftpy2.protocol.cybin.cybin import TCyBinaryProtocol
from thriftpy2.thrift import TType
from thriftpy2.transport.memory.cymemory import TCyMemoryBuffer

from pinlater._pinlater import (
    ClaimedJobs,
    JobBuffer,
    MalformedThriftError,
    RateLimiter,
    decode_descriptors,
    encode_dequeue_handout,
    encode_dequeue_reply,
    encode_descriptors,
    redis_claimed_jobs,
    redis_pack_command,
    thrift_struct_end,
)
from pinlater.backends.base import ClaimedJob
from pinlater.backends.sharded import DequeuedJob
from pinlater.idl import idl

BATCH = 100
QUEUE, SHARD = "test_queue", "1d1"
PRIORITIES = [i % 3 + 1 for i in range(BATCH)]
LOCAL_IDS = [1_000_000_000 + i * 7_919 for i in range(BATCH)]

# --- plain-Python baseline -------------------------------------------------------------------

_WORD = re.compile(r"[A-Za-z0-9_]+")
_DESCRIPTOR = re.compile(r"([A-Za-z0-9_]+):s([A-Za-z0-9_]+):p([0-9]+):([0-9]+)")


def py_encode_descriptors(queue: str, shard: str, priorities: Sequence[int], local_ids: Sequence[int]) -> list[str]:
    if len(priorities) != len(local_ids):
        raise ValueError("length mismatch")
    if not _WORD.fullmatch(queue) or not _WORD.fullmatch(shard):
        raise ValueError("bad name")
    out = []
    for priority, local_id in zip(priorities, local_ids, strict=True):
        if not 1 <= priority <= 127 or not 0 <= local_id < 2**64:
            raise ValueError("out of range")
        out.append(f"{queue}:s{shard}:p{priority}:{local_id}")
    return out


def py_decode_descriptors(descriptors: Sequence[str]) -> list[tuple[str, str, int, int]]:
    out = []
    for index, descriptor in enumerate(descriptors):
        m = _DESCRIPTOR.fullmatch(descriptor)
        if m is None:
            raise ValueError(f"descriptor at index {index}: invalid job descriptor {descriptor!r}")
        priority, local_id = int(m[3]), int(m[4])
        if not 1 <= priority <= 127 or local_id >= 2**64:
            raise ValueError(f"descriptor at index {index}: invalid job descriptor {descriptor!r}")
        out.append((m[1], m[2], priority, local_id))
    return out


class PyRateLimiter:
    """The same token buckets as the native RateLimiter, in Python with a lock."""

    def __init__(self, burst_seconds: float = 1.0) -> None:
        self._burst = burst_seconds
        self._lock = threading.Lock()
        # queue -> [rate, capacity, tokens, last]
        self._buckets: dict[str, list[float]] = {}

    def set_rate(self, queue: str, rate: float) -> None:
        now = time.monotonic()
        with self._lock:
            capacity = max(rate, 1.0) * self._burst
            bucket = self._buckets.get(queue)
            if bucket is None:
                self._buckets[queue] = [rate, capacity, capacity, now]
            else:
                self._accrue(bucket, now)
                bucket[0], bucket[1], bucket[2] = rate, capacity, min(bucket[2], capacity)

    @staticmethod
    def _accrue(bucket: list[float], now: float) -> None:
        if now > bucket[3]:
            bucket[2] = min(bucket[2] + (now - bucket[3]) * bucket[0], bucket[1])
            bucket[3] = now

    def try_acquire(self, queue: str, n: int = 1) -> bool:
        now = time.monotonic()
        with self._lock:
            bucket = self._buckets.get(queue)
            if bucket is None:
                return True
            if bucket[0] <= 0:
                return False
            self._accrue(bucket, now)
            if bucket[2] >= min(n, bucket[1]):
                bucket[2] -= n
                return True
            return False


# The server's struct walk as it was in Python (server/dispatch.py before it moved to Rust), kept
# verbatim as the baseline and as the reference the Rust walker must agree with.

MAX_NESTING = 32
_I32 = struct.Struct(">i")
_LIST_HEADER = struct.Struct(">Bi")
_MAP_HEADER = struct.Struct(">BBi")
_STRING, _NESTED, _INVALID = 0, -1, -2
_WIDTH = tuple(
    {
        TType.BOOL: 1,
        TType.BYTE: 1,
        TType.DOUBLE: 8,
        TType.I16: 2,
        TType.I32: 4,
        TType.I64: 8,
        TType.STRING: _STRING,
    }.get(t, _NESTED if t in (TType.STRUCT, TType.MAP, TType.SET, TType.LIST) else _INVALID)
    for t in range(256)
)


class PyJobBuffer:
    """The broker's buffer in Python: a lock, a deque per priority, and the encoder above."""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._len = 0
        self._lock = threading.Lock()
        self._by_priority: dict[int, collections.deque[tuple[str, int, int, bytes, int, int, int]]] = {}

    def push(self, shard: str, priority: int, jobs: list[tuple[int, bytes, int, int]], at_ms: int) -> list[int]:
        rejected = []
        with self._lock:
            lane = self._by_priority.setdefault(priority, collections.deque())
            for local_id, body, allowed, remaining in jobs:
                if self._len >= self._capacity:
                    rejected.append(local_id)
                    continue
                lane.append((shard, priority, local_id, body, allowed, remaining, at_ms))
                self._len += 1
        return rejected

    def hand_out(self, queue: str, limit: int, fresh_after_ms: int) -> tuple[list[Any], list[Any]]:
        taken = []
        with self._lock:
            for priority in sorted(self._by_priority):
                lane = self._by_priority[priority]
                while lane and len(taken) < limit:
                    taken.append(lane.popleft())
            self._len -= len(taken)
        stale = [e for e in taken if e[6] < fresh_after_ms]
        fresh = [e for e in taken if e[6] >= fresh_after_ms]
        out = []
        for shard in dict.fromkeys(e[0] for e in fresh):
            group = [e for e in fresh if e[0] == shard]
            descriptors = py_encode_descriptors(queue, shard, [e[1] for e in group], [e[2] for e in group])
            out += [(d, *e[:6]) for d, e in zip(descriptors, group, strict=True)]
        return out, stale


class MalformedPayload(Exception):
    pass


def py_check_struct(buf: bytes, pos: int, depth: int = 0) -> int:
    if depth > MAX_NESTING:
        raise MalformedPayload("structs nested too deeply")
    end = len(buf)
    while True:
        if pos >= end:
            raise MalformedPayload("struct truncated")
        ftype = buf[pos]
        if ftype == 0:  # STOP
            return pos + 1
        pos += 3  # type byte and field id
        width = _WIDTH[ftype]
        if width > 0:
            pos += width
        elif width == _STRING:
            pos = _string_end(buf, pos)
        else:
            pos = _skip(buf, pos, ftype, depth)


def _string_end(buf: bytes, pos: int) -> int:
    if pos + 4 > len(buf):
        raise MalformedPayload("string truncated")
    n: int = _I32.unpack_from(buf, pos)[0]
    if n < 0:
        raise MalformedPayload("negative string length")
    return pos + 4 + n


def _skip(buf: bytes, pos: int, ttype: int, depth: int) -> int:
    width = _WIDTH[ttype]
    if width > 0:
        return pos + width
    if width == _STRING:
        return _string_end(buf, pos)
    end = len(buf)
    if ttype == TType.STRUCT:
        return py_check_struct(buf, pos, depth + 1)
    if ttype == TType.LIST or ttype == TType.SET:
        if pos + 5 > end:
            raise MalformedPayload("list header truncated")
        etype, n = _LIST_HEADER.unpack_from(buf, pos)
        return _skip_elements(buf, pos + 5, n, (etype,), depth + 1)
    if ttype == TType.MAP:
        if pos + 6 > end:
            raise MalformedPayload("map header truncated")
        ktype, vtype, n = _MAP_HEADER.unpack_from(buf, pos)
        return _skip_elements(buf, pos + 6, n, (ktype, vtype), depth + 1)
    raise MalformedPayload(f"unknown wire type {ttype}")


def _skip_elements(buf: bytes, pos: int, n: int, types: tuple[int, ...], depth: int) -> int:
    if n < 0:
        raise MalformedPayload("negative container size")
    if n == 0:
        return pos
    if depth > MAX_NESTING:
        raise MalformedPayload("containers nested too deeply")
    widths = [_WIDTH[t] for t in types]
    if _INVALID in widths:
        raise MalformedPayload(f"unknown element type in {types}")
    end = len(buf)
    if n > end - pos:
        raise MalformedPayload("container truncated")
    if min(widths) > 0:
        return pos + n * sum(widths)
    for _ in range(n):
        for t in types:
            pos = _skip(buf, pos, t, depth)
        if pos > end:
            raise MalformedPayload("container truncated")
    return pos


def py_claimed_jobs(out: list[Any], make: Any) -> list[Any]:
    """The Redis store's reply reader as it was in Python: rows of 7, sorted by (score, id)."""

    def num(value: bytes | None) -> int:
        return 0 if value is None else int(value)

    def ms(value: bytes | None) -> int:
        return 0 if value is None else round(float(value) * 1000.0)

    rows = [out[i : i + 7] for i in range(2, len(out), 7)]
    rows.sort(key=lambda row: (float(row[1]), int(row[0])))
    return [make(int(r[0]), r[2], num(r[3]), num(r[4]), ms(r[5]), ms(r[6])) for r in rows]


def redis_reply(n_jobs: int) -> list[Any]:
    """A dequeue reply as redis-py returns it: batches of 10 share a run-after, ids as text."""
    out: list[Any] = [0, 0]  # evicted, cut
    for i in range(n_jobs):
        run_after = repr(1_700_000_000 + (i // 10) / 1000).encode()
        created = repr(1_699_999_999.5 + i / 1000).encode()
        out += [str(1_000_000 + (i * 7) % n_jobs).encode(), run_after, b"x" * 100, b"2", b"2", created, created]
    return out


def enqueue_args(n_jobs: int, body_bytes: int = 100) -> bytes:
    """An ``enqueueJobs`` argument struct as a client sends it (benches/lifecycle.py's jobs)."""
    jobs = [idl.PinLaterJob(body=b"x" * body_bytes) for _ in range(n_jobs)]
    args = idl.PinLater.enqueueJobs_args(
        context=idl.RequestContext(source="bench:localhost"),
        request=idl.PinLaterEnqueueRequest(queueName=QUEUE, jobs=jobs),
    )
    buf = TCyMemoryBuffer()
    TCyBinaryProtocol(buf).write_struct(args)
    data: bytes = buf.getvalue()
    return data


def walk_outcome(walk: Any, error: type[Exception], payload: bytes) -> int | str:
    try:
        end: int = walk(payload, 0)
    except error as exc:
        return str(exc)
    return end


# --- benches ---------------------------------------------------------------------------------

ENCODERS: dict[str, Any] = {"rust": encode_descriptors, "python": py_encode_descriptors}
DECODERS: dict[str, Any] = {"rust": decode_descriptors, "python": py_decode_descriptors}
LIMITERS: dict[str, Any] = {"rust": RateLimiter, "python": PyRateLimiter}


@pytest.mark.benchmark(group="descriptor-encode-100")
@pytest.mark.parametrize("impl", ["rust", "python"])
def test_encode_100(benchmark: Any, impl: str) -> None:
    encode = ENCODERS[impl]
    result = benchmark(encode, QUEUE, SHARD, PRIORITIES, LOCAL_IDS)
    assert result == py_encode_descriptors(QUEUE, SHARD, PRIORITIES, LOCAL_IDS)


@pytest.mark.benchmark(group="descriptor-decode-100")
@pytest.mark.parametrize("impl", ["rust", "python"])
def test_decode_100(benchmark: Any, impl: str) -> None:
    descriptors = encode_descriptors(QUEUE, SHARD, PRIORITIES, LOCAL_IDS)
    result = benchmark(DECODERS[impl], descriptors)
    assert result == [(QUEUE, SHARD, p, i) for p, i in zip(PRIORITIES, LOCAL_IDS, strict=True)]


@pytest.mark.benchmark(group="ratelimit-try-acquire")
@pytest.mark.parametrize("impl", ["rust", "python"])
def test_try_acquire(benchmark: Any, impl: str) -> None:
    limiter = LIMITERS[impl]()
    for i in range(100):
        limiter.set_rate(f"queue_{i}", 1e12)  # never runs dry: every call decides and charges
    assert benchmark(limiter.try_acquire, "queue_42", 1) is True


@pytest.mark.benchmark(group="ratelimit-try-acquire-unlimited")
@pytest.mark.parametrize("impl", ["rust", "python"])
def test_try_acquire_unlimited(benchmark: Any, impl: str) -> None:
    limiter = LIMITERS[impl]()
    assert benchmark(limiter.try_acquire, "free", 1) is True


WALKERS: dict[str, Any] = {"rust": thrift_struct_end, "python": py_check_struct}


@pytest.mark.benchmark(group="thrift-walk")
@pytest.mark.parametrize("impl", ["rust", "python"])
@pytest.mark.parametrize("n_jobs", [100, 1000])
def test_walk_enqueue(benchmark: Any, impl: str, n_jobs: int) -> None:
    payload = enqueue_args(n_jobs)
    assert benchmark(WALKERS[impl], payload, 0) == len(payload)


def test_walkers_agree_on_damaged_payloads() -> None:
    """The Rust walker says what the Python one said, end offset or message, byte for byte."""
    rng = random.Random(20240611)
    seeds = [enqueue_args(3, 5), enqueue_args(0), b"\x00"]
    deep = [
        b"\x0c\x00\x01" * levels + b"\x00" * (levels + 1)
        for levels in (32, 33)  # structs in structs
    ] + [
        b"\x0f\x00\x01" + b"\x0f\x00\x00\x00\x01" * (levels - 1) + b"\x03\x00\x00\x00\x01\x07\x00"
        for levels in (32, 33)  # lists in lists
    ]
    for payload in deep:
        expected = walk_outcome(py_check_struct, MalformedPayload, payload)
        assert walk_outcome(thrift_struct_end, MalformedThriftError, payload) == expected
    assert [walk_outcome(py_check_struct, MalformedPayload, p) for p in deep] == [
        len(deep[0]),
        "structs nested too deeply",
        len(deep[2]),
        "containers nested too deeply",
    ]
    seen: set[int | str] = set()
    for _ in range(20_000):
        data = bytearray(rng.choice(seeds))
        for _ in range(rng.randint(1, 4)):
            op = rng.randrange(3)
            i = rng.randrange(len(data) + 1)
            if op == 0 and i < len(data):
                data[i] = rng.choice((0, 1, 11, 12, 13, 15, 99, 0x7F, 0x80, 0xFF, rng.randrange(256)))
            elif op == 1:
                data[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 6)))
            else:
                del data[i : i + rng.randint(1, 8)]
        payload = bytes(data)
        expected = walk_outcome(py_check_struct, MalformedPayload, payload)
        assert walk_outcome(thrift_struct_end, MalformedThriftError, payload) == expected, payload.hex()
        seen.add(expected if isinstance(expected, str) else 0)
    assert {"struct truncated", "string truncated", "container truncated", 0} <= seen


@pytest.mark.benchmark(group="broker-hand-out-100")
@pytest.mark.parametrize("impl", ["rust", "python"])
def test_broker_hand_out_100(benchmark: Any, impl: str) -> None:
    """One broker dequeue of 100 jobs: the refill's push (a reserve call's jobs), the hand-out,
    and the reply's bytes. In Rust the jobs stay Rust values from the store's batch to the reply
    (``JobBuffer`` holding a ``ClaimedJobs``'s jobs, a ``HandOut``, ``encode_dequeue_handout``);
    in Python they are tuples, ``DequeuedJob``s and a Python encoder."""
    if impl == "rust":
        buffer = JobBuffer(1000)
        batch = ClaimedJobs([(local_id, b"x" * 100, 2, 2, 0, 0) for local_id in LOCAL_IDS])

        def cycle() -> bytes:
            buffer.push(SHARD, 1, batch, 1_000)
            return encode_dequeue_handout("dequeueJobs", 17, buffer.hand_out(QUEUE, BATCH, 1 << 30, 500))

    else:
        py_buffer = PyJobBuffer(1000)
        jobs = [(local_id, b"x" * 100, 2, 2) for local_id in LOCAL_IDS]

        def cycle() -> bytes:
            py_buffer.push(SHARD, 1, jobs, 1_000)
            fresh, stale = py_buffer.hand_out(QUEUE, BATCH, 500)
            assert stale == []
            dequeued = [DequeuedJob(d, ClaimedJob(i, b, a, r, 0, 0)) for d, _s, _p, i, b, a, r in fresh]
            return py_dequeue_reply(17, dequeued)

    reply = benchmark(cycle)
    descriptors = py_encode_descriptors(QUEUE, SHARD, [1] * BATCH, LOCAL_IDS)
    jobs_out = [
        DequeuedJob(d, ClaimedJob(i, b"x" * 100, 2, 2, 0, 0)) for d, i in zip(descriptors, LOCAL_IDS, strict=True)
    ]
    assert reply == encode_dequeue_reply("dequeueJobs", 17, jobs_out)


@pytest.mark.benchmark(group="redis-reply-100")
@pytest.mark.parametrize("impl", ["rust", "python"])
def test_redis_reply_100(benchmark: Any, impl: str) -> None:
    """Reading a 100-job dequeue or reserve reply of the Redis store into ClaimedJob tuples."""
    reply = redis_reply(BATCH)
    if impl == "rust":
        jobs = benchmark(redis_claimed_jobs, reply, functools.partial(tuple.__new__, ClaimedJob))
    else:
        jobs = benchmark(py_claimed_jobs, reply, ClaimedJob)
    assert jobs == py_claimed_jobs(reply, ClaimedJob)
    assert [j.local_id for j in jobs[:3]] == sorted(j.local_id for j in jobs[:10])[:3]


def py_dequeue_reply(seqid: int, jobs: list[DequeuedJob]) -> bytes:
    """The reply as the handler built it before: thriftpy2 objects, encoded by its Cython protocol."""
    response = idl.PinLaterDequeueResponse(jobs={}, jobMetadata={})
    for item in jobs:
        response.jobs[item.descriptor] = item.job.body
        response.jobMetadata[item.descriptor] = idl.PinLaterDequeueMetadata(
            attemptsAllowed=item.job.attempts_allowed, attemptsRemaining=item.job.attempts_remaining
        )
    buf = TCyMemoryBuffer()
    proto = TCyBinaryProtocol(buf)
    proto.write_message_begin("dequeueJobs", 2, seqid)  # TMessageType.REPLY
    proto.write_struct(idl.PinLater.dequeueJobs_result(success=response))
    proto.write_message_end()
    out: bytes = buf.getvalue()
    return out


@pytest.mark.benchmark(group="dequeue-reply-100")
@pytest.mark.parametrize("impl", ["rust", "python"])
def test_dequeue_reply_100(benchmark: Any, impl: str) -> None:
    """The reply to a 100-job dequeue, from the DequeuedJob tuples to the message bytes."""
    descriptors = py_encode_descriptors(QUEUE, SHARD, PRIORITIES, LOCAL_IDS)
    jobs = [DequeuedJob(d, ClaimedJob(i, b"x" * 100, 3, 2, 0, 0)) for d, i in zip(descriptors, LOCAL_IDS, strict=True)]
    if impl == "rust":
        reply = benchmark(encode_dequeue_reply, "dequeueJobs", 17, jobs)
    else:
        reply = benchmark(py_dequeue_reply, 17, jobs)
    assert reply == py_dequeue_reply(17, jobs)


@pytest.mark.benchmark(group="redis-pack-enqueue-100")
@pytest.mark.parametrize("impl", ["rust", "hiredis"])
def test_redis_pack_enqueue_100(benchmark: Any, impl: str) -> None:
    """Packing a 100-job enqueue script call (510 arguments) for the socket. The baseline is
    hiredis (C), which the Redis backend's connections used before; redis.asyncio alone packs
    in Python, slower still."""
    import hiredis

    now = "1700000000.123"
    keys = ("pln_1", "plq_1_q.id", "plq_1_q.p1_s0")
    args: tuple[Any, ...] = ("EVALSHA", "f" * 40, len(keys), *keys, QUEUE, "plh_1_q.", now, BATCH)
    for _ in range(BATCH):
        args += (3, b"x" * 100, 2, now, "")
    pack = redis_pack_command if impl == "rust" else hiredis.pack_command
    packed = benchmark(pack, args)
    assert packed == hiredis.pack_command(args)
