"""Producer and consumer processes of ``pinlater bench`` (separate processes, so the load
generator is not what is measured), over thriftpy2's cython framed binary client.

Each process connects, reports ``("ready", index)``, waits for the start signal, then runs until
the deadline. Once per second of the run it sends ``("sample", index, second, {op: OpSample})``
for the second just finished, and at the end ``("done", index, cpu_seconds)`` with the CPU it
used while running. Operations: ``enqueue`` (producers, ``batch`` jobs a request), ``dequeue``
and ``ack`` (consumers: a dequeue of up to ``batch`` jobs, then one ack request for all of them;
with ``piggyback`` the acks ride on the next dequeue instead, as the original's worker did, and
have no latency of their own). A consumer that finds the queue empty pauses ``EMPTY_PAUSE``
seconds before asking again, as a real worker would.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

from pinlater.bench.stats import Histogram

EMPTY_PAUSE = 0.005


@dataclass
class OpSample:
    requests: int = 0
    jobs: int = 0
    empty: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    latency: Histogram = field(default_factory=Histogram)

    def merge(self, other: OpSample) -> None:
        self.requests += other.requests
        self.jobs += other.jobs
        self.empty += other.empty
        for code, n in other.errors.items():
            self.errors[code] = self.errors.get(code, 0) + n
        self.latency.merge(other.latency)


@dataclass(frozen=True)
class WorkerSpec:
    role: str  # "producer" or "consumer"
    index: int
    host: str
    port: int
    queue: str
    batch: int
    body_bytes: int
    piggyback: bool
    timeout_s: float = 30.0


def _connect(spec: WorkerSpec) -> Any:
    from thriftpy2.protocol import TCyBinaryProtocolFactory
    from thriftpy2.rpc import make_client
    from thriftpy2.transport import TCyFramedTransportFactory

    from pinlater.idl import idl

    return make_client(
        idl.PinLater,
        spec.host,
        spec.port,
        proto_factory=TCyBinaryProtocolFactory(),  # type: ignore[no-untyped-call]  # thriftpy2 has no stubs
        trans_factory=TCyFramedTransportFactory(),
        timeout=int(spec.timeout_s * 1000),
    )


class _Recorder:
    """Per-second samples of one process, sent when a second is over."""

    def __init__(self, index: int, start: float, out: Any) -> None:
        self.index = index
        self.start = start
        self.out = out
        self.second = 0
        self.ops: dict[str, OpSample] = {}

    def op(self, name: str) -> OpSample:
        second = int(time.time() - self.start)
        if second != self.second:
            self.flush()
            self.second = second
        sample = self.ops.get(name)
        if sample is None:
            sample = self.ops[name] = OpSample()
        return sample

    def flush(self) -> None:
        if self.ops:
            self.out.put(("sample", self.index, self.second, self.ops))
            self.ops = {}


def run_worker(spec: WorkerSpec, go: Any, start_at: Any, duration: float, out: Any) -> None:
    """A process's main: see the module docstring. ``start_at`` is a shared double (epoch seconds)."""
    from pinlater.idl import idl

    client = _connect(spec)
    ctx = idl.RequestContext(source=f"pinlater-bench-{spec.role}:{os.uname().nodename}:{os.getpid()}")
    out.put(("ready", spec.index))
    go.wait()
    start = float(start_at.value)
    deadline = start + duration
    while time.time() < start:
        time.sleep(0.001)
    cpu0 = time.process_time()
    recorder = _Recorder(spec.index, start, out)
    if spec.role == "producer":
        _produce(spec, client, ctx, recorder, deadline)
    else:
        _consume(spec, client, ctx, recorder, deadline)
    recorder.flush()
    out.put(("done", spec.index, time.process_time() - cpu0))


def _failed(sample: OpSample, exc: Exception, idl: Any) -> None:
    if isinstance(exc, idl.PinLaterException):
        code = idl.ErrorCode._VALUES_TO_NAMES.get(exc.errorCode, "UNKNOWN")
    else:
        code = "CONNECTION"
    sample.errors[code] = sample.errors.get(code, 0) + 1


def _produce(spec: WorkerSpec, client: Any, ctx: Any, recorder: _Recorder, deadline: float) -> None:
    from pinlater.idl import idl

    body = b"x" * spec.body_bytes
    request = idl.PinLaterEnqueueRequest(queueName=spec.queue, jobs=[idl.PinLaterJob(body=body)] * spec.batch)
    while time.time() < deadline:
        began = time.perf_counter()
        try:
            got = client.enqueueJobs(ctx, request)
            jobs, error = len(got.jobDescriptors), None
        except Exception as exc:  # counted by code; a broken connection is replaced
            jobs, error = 0, exc
        elapsed = (time.perf_counter() - began) * 1000
        sample = recorder.op("enqueue")
        sample.requests += 1
        sample.jobs += jobs
        sample.latency.add(elapsed)
        if error is not None:
            _failed(sample, error, idl)
            client = _recover(spec, client, error, idl)


def _recover(spec: WorkerSpec, client: Any, error: Exception, idl: Any) -> Any:
    if isinstance(error, idl.PinLaterException):
        return client
    time.sleep(0.1)
    try:
        client.close()
        return _connect(spec)
    except Exception:
        return client


def _consume(spec: WorkerSpec, client: Any, ctx: Any, recorder: _Recorder, deadline: float) -> None:
    from pinlater.idl import idl

    in_hand: list[str] = []
    while time.time() < deadline:
        acks = None
        if spec.piggyback and in_hand:
            acks = idl.PinLaterJobAckRequest(
                queueName=spec.queue, jobsSucceeded=[idl.PinLaterJobAckInfo(jobDescriptor=d) for d in in_hand]
            )
        request = idl.PinLaterDequeueRequest(queueName=spec.queue, limit=spec.batch, jobAckRequest=acks)
        began = time.perf_counter()
        try:
            jobs, error = list(client.dequeueJobs(ctx, request).jobs or ()), None
        except Exception as exc:  # counted by code; a broken connection is replaced
            jobs, error = [], exc
        elapsed = (time.perf_counter() - began) * 1000
        sample = recorder.op("dequeue")
        sample.requests += 1
        sample.jobs += len(jobs)
        sample.latency.add(elapsed)
        if error is not None:
            _failed(sample, error, idl)
            client = _recover(spec, client, error, idl)
            continue
        if acks is not None:
            recorder.op("ack").jobs += len(in_hand)
        in_hand = jobs
        if not jobs:
            sample.empty += 1
            time.sleep(EMPTY_PAUSE)
        elif not spec.piggyback:
            _ack(spec, client, ctx, recorder, jobs, idl)
            in_hand = []
    if in_hand:
        _ack(spec, client, ctx, recorder, in_hand, idl)


def _ack(spec: WorkerSpec, client: Any, ctx: Any, recorder: _Recorder, jobs: list[str], idl: Any) -> None:
    request = idl.PinLaterJobAckRequest(
        queueName=spec.queue, jobsSucceeded=[idl.PinLaterJobAckInfo(jobDescriptor=d) for d in jobs]
    )
    began = time.perf_counter()
    try:
        client.ackDequeuedJobs(ctx, request)
        error = None
    except Exception as exc:  # counted by code
        error = exc
    elapsed = (time.perf_counter() - began) * 1000
    sample = recorder.op("ack")
    sample.requests += 1
    sample.latency.add(elapsed)
    if error is None:
        sample.jobs += len(jobs)
    else:
        _failed(sample, error, idl)
