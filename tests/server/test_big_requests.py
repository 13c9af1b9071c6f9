"""A request of many jobs is served in turns with every other client of the server: a lookup's
reply map (a schedule listing's list) is encoded ``REPLY_PART`` entries at a time (``dispatch._encode_parts``), with the
event loop's other work between parts, into the bytes one encode makes; lookups and checkpoints
of more than a part are answered whole, as Apache's client reads them. A hot call's frame of at
least ``DETACH_BYTES`` is decoded on a worker thread (``connection._decode_hot_apart``), and
served as any other; so is any other call's (``dispatch._read_args_apart``). A keyed enqueue
of ``DETACH_JOBS`` jobs or more is built and cut into parts on worker threads, the GIL
released."""

from __future__ import annotations

import asyncio
import concurrent.futures
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from tests.support.pinlater_server import ServerProcess
from tests.support.thrift_client import connect
from thriftpy2.thrift import TMessageType

from pinlater._pinlater import DETACH_BYTES, DETACH_JOBS, decode_hot_frame
from pinlater.eventloop import off_loop
from pinlater.idl import idl
from pinlater.server import connection, dispatch
from pinlater.server.dispatch import REPLY_PART, Dispatcher, _encode, _encode_parts, _encode_scan_parts

N = 2 * REPLY_PART + 500  # three parts: two whole, one not


class _Handler:
    """Every PinLater method, none of them called: enough for ``Dispatcher`` to resolve."""

    def __getattr__(self, name: str) -> Any:
        async def method(*args: Any, **kwargs: Any) -> None:
            raise AssertionError(f"{name} called")

        return method


def _info(i: int) -> Any:
    return idl.PinLaterJobInfo(
        jobDescriptor=f"q:s1:p1:{i}",
        jobState=i % 4,
        attemptsAllowed=3,
        attemptsRemaining=i % 3,
        customStatus=f"status-{i}" if i % 2 else "",
        createdAtTimestampMillis=1_700_000_000_000 + i,
        updatedAtTimestampMillis=1_700_000_000_001 + i,
        body=b"body-%d" % i if i % 5 else None,
        dedupKey=f"key-{i}" if i % 7 == 0 else None,
    )


def _schedule_info(i: int) -> Any:
    job = idl.PinLaterJob(body=b"tick-%d" % i, priority=1 + i % 3, numAttemptsAllowed=2, customStatus="")
    return idl.PinLaterSchedule(
        queueName="q", name=f"s{i}", job=job, intervalMillis=60_000 + i, paused=i % 2 == 0,
        nextRunTimestampMillis=1_700_000_000_000 + i,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("method_name", "answer"),
    [
        ("lookupJobs", {f"q:s1:p1:{i}": _info(i) for i in range(N)}),
        ("listSchedules", [_schedule_info(i) for i in range(N)]),
    ],
)
def test_a_large_reply_is_encoded_in_parts_into_the_bytes_of_one_encode(method_name: str, answer: Any) -> None:
    method = Dispatcher(_Handler())._methods[method_name]
    coroutine = _encode_parts(method, 7, answer)
    turns = 0
    try:
        while True:
            coroutine.send(None)  # the event loop's turn: ``asyncio.sleep(0)`` yields nothing
            turns += 1
    except StopIteration as done:
        reply: bytes = done.value
    whole = _encode(method_name, TMessageType.REPLY, 7, method.result_cls(success=answer))
    assert reply == whole
    assert turns == 2, "a turn of the event loop between each two parts"


@pytest.mark.parametrize("continuation", ["1.abc", "-1", None])
@pytest.mark.parametrize("jobs", [REPLY_PART + 1, N])
def test_a_large_scan_page_is_encoded_in_parts_into_the_bytes_of_one_encode(
    jobs: int, continuation: str | None
) -> None:
    """A scan's reply is a struct, not a map or list: its jobs are encoded in parts all the same
    (``_encode_scan_parts``: 10,000 jobs with long statuses held the loop 45-73 ms)."""
    method = Dispatcher(_Handler())._methods["scanJobs"]
    answer = idl.PinLaterScanJobsResponse(scannedJobs=[_info(i) for i in range(jobs)])
    answer.continuation = continuation
    coroutine = _encode_scan_parts(method, 9, answer)
    turns = 0
    try:
        while True:
            coroutine.send(None)
            turns += 1
    except StopIteration as done:
        reply: bytes = done.value
    assert reply == _encode("scanJobs", TMessageType.REPLY, 9, method.result_cls(success=answer))
    assert turns == (jobs - 1) // REPLY_PART, "a turn of the event loop between each two parts"


@pytest.fixture(params=["broker off", "broker on"])
def big(
    request: pytest.FixtureRequest, start_server: Callable[..., ServerProcess], thrift_gen: Any
) -> Iterator[tuple[Any, Any, Any]]:
    """(client, ttypes, context) of a fresh server with the queue ``big``, with the dequeue broker
    off (the default) and on (lookups and checkpoints settle its holds first)."""
    _, ttypes = thrift_gen
    server = start_server(properties={"BROKER_ENABLED": "true"} if request.param == "broker on" else None)
    client, transport = connect("127.0.0.1", server.port)
    try:
        ctx = ttypes.RequestContext(source="big-requests-test")
        client.createQueue(ctx, "big")
        yield client, ttypes, ctx
    finally:
        transport.close()


def test_lookups_and_checkpoints_of_several_parts_are_answered_whole(big: tuple[Any, Any, Any]) -> None:
    client, ttypes, ctx = big
    bodies = [b"job-%d" % i for i in range(N)]
    for at in range(0, N, 1000):
        jobs = [ttypes.PinLaterJob(body=body, customStatus="s") for body in bodies[at : at + 1000]]
        client.enqueueJobs(ctx, ttypes.PinLaterEnqueueRequest(queueName="big", jobs=jobs))
    claimed: dict[str, bytes] = {}
    while len(claimed) < N:
        got = client.dequeueJobs(ctx, ttypes.PinLaterDequeueRequest(queueName="big", limit=1000))
        assert got.jobs, "every job is dequeued"
        claimed.update(got.jobs)
    descriptors = sorted(claimed)

    found = client.lookupJobs(ctx, ttypes.PinLaterLookupJobRequest(jobDescriptors=descriptors, includeBody=True))
    assert sorted(found) == descriptors
    assert {d: info.body for d, info in found.items()} == claimed
    assert {(info.jobDescriptor == d, info.jobState, info.customStatus) for d, info in found.items()} == {
        (True, 1, "s")
    }

    requests = [
        ttypes.PinLaterCheckpointJobRequest(jobDescriptor=d, moveToPending=True, prependCustomStatus="cp:")
        for d in descriptors
    ]
    client.checkpointJobs(ctx, ttypes.PinLaterCheckpointJobsRequest(queueName="big", requests=requests))
    after = client.lookupJobs(ctx, ttypes.PinLaterLookupJobRequest(jobDescriptors=descriptors))
    assert len(after) == N
    assert {(info.jobState, info.customStatus, info.body) for info in after.values()} == {(0, "cp:s", None)}


def test_a_malformed_descriptor_past_the_first_part_is_named_by_its_index_and_nothing_changes(
    big: tuple[Any, Any, Any],
) -> None:
    client, ttypes, ctx = big
    jobs = [ttypes.PinLaterJob(body=b"job-%d" % i) for i in range(REPLY_PART + 10)]
    client.enqueueJobs(ctx, ttypes.PinLaterEnqueueRequest(queueName="big", jobs=jobs))
    claimed: set[str] = set()
    while len(claimed) < len(jobs):  # (the broker hands out at most its buffer at once)
        got = client.dequeueJobs(ctx, ttypes.PinLaterDequeueRequest(queueName="big", limit=len(jobs)))
        assert got.jobs, "every job is dequeued"
        claimed.update(got.jobs)
    descriptors = sorted(claimed)
    bad = [*descriptors[:-1], "big:s1:p1", descriptors[-1]]  # at index len(jobs) - 1
    errors = []
    try:
        client.lookupJobs(ctx, ttypes.PinLaterLookupJobRequest(jobDescriptors=bad))
    except ttypes.PinLaterException as exc:
        errors.append(exc)
    requests = [ttypes.PinLaterCheckpointJobRequest(jobDescriptor=d, moveToPending=True) for d in bad]
    try:
        client.checkpointJobs(ctx, ttypes.PinLaterCheckpointJobsRequest(queueName="big", requests=requests))
    except ttypes.PinLaterException as exc:
        errors.append(exc)
    still = client.getJobCount(ctx, ttypes.PinLaterGetJobCountRequest(queueName="big", jobState=1))
    assert len(errors) == 2
    assert {exc.errorCode for exc in errors} == {ttypes.ErrorCode.UNKNOWN}
    assert all(f"index {len(jobs) - 1}" in exc.message for exc in errors), [exc.message for exc in errors]
    assert still == len(jobs), "no checkpoint applied: every job is still IN_PROGRESS"


def test_a_cancel_naming_another_queues_job_past_the_first_part_is_refused_by_its_index(
    big: tuple[Any, Any, Any],
) -> None:
    client, ttypes, ctx = big
    jobs = [ttypes.PinLaterJob(body=b"job-%d" % i) for i in range(REPLY_PART + 10)]
    placed = client.enqueueJobs(ctx, ttypes.PinLaterEnqueueRequest(queueName="big", jobs=jobs))
    client.createQueue(ctx, "other")
    (elsewhere,) = client.enqueueJobs(
        ctx, ttypes.PinLaterEnqueueRequest(queueName="other", jobs=[ttypes.PinLaterJob(body=b"x")])
    ).jobDescriptors
    descriptors = [*placed.jobDescriptors[:-1], elsewhere, placed.jobDescriptors[-1]]  # at len(jobs) - 1
    try:
        client.cancelJobs(ctx, ttypes.PinLaterCancelJobsRequest(queueName="big", jobDescriptors=descriptors))
        refused = None
    except ttypes.PinLaterException as exc:
        refused = exc
    pending = client.getJobCount(ctx, ttypes.PinLaterGetJobCountRequest(queueName="big", jobState=0))
    assert refused is not None and refused.errorCode == ttypes.ErrorCode.UNKNOWN
    assert f"jobDescriptors[{len(jobs) - 1}] is a job of queue 'other', not 'big'" in refused.message
    assert pending == len(jobs), "nothing cancelled"


def _enqueue_frame(jobs: int, body_bytes: int) -> bytes:
    """A framed-transport payload: an ``enqueueJobs`` CALL of ``jobs`` jobs with dedup keys."""
    args = idl.PinLater.enqueueJobs_args(
        context=idl.RequestContext(source="t"),
        request=idl.PinLaterEnqueueRequest(
            queueName="q",
            jobs=[idl.PinLaterJob(body=b"b" * body_bytes, dedupKey=f"k{i}") for i in range(jobs)],
        ),
    )
    return _encode("enqueueJobs", TMessageType.CALL, 3, args)


def test_a_big_hot_frame_is_decoded_off_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    threads: list[int] = []

    def recording(payload: bytes) -> Any:
        threads.append(threading.get_ident())
        return decode_hot_frame(payload)

    monkeypatch.setattr(connection, "decode_hot_frame", recording)
    small, big = _enqueue_frame(10, 10), _enqueue_frame(300, 4096)
    assert len(small) < DETACH_BYTES <= len(big)

    async def decode_both() -> tuple[Any, Any, int]:
        return connection._decode_hot(small), await connection._decode_hot_apart(big), threading.get_ident()

    got_small, got_big, loop_thread = asyncio.run(decode_both())
    assert threads[0] == loop_thread, "a small frame on the loop: no thread hop"
    assert threads[1] != loop_thread, "a big one on a worker thread"
    for got, jobs in ((got_small, 10), (got_big, 300)):
        assert got is not None
        method, seqid, call = got
        assert (method, seqid) == ("enqueueJobs", 3)
        assert call.queue == "q" and len(call) == jobs


def test_a_hot_frame_the_decoder_fails_on_goes_to_the_general_path(monkeypatch: pytest.MonkeyPatch) -> None:
    def failing(payload: bytes) -> Any:
        raise RuntimeError("a decoder bug")

    monkeypatch.setattr(connection, "decode_hot_frame", failing)
    assert connection._decode_hot(_enqueue_frame(1, 1)) is None
    assert asyncio.run(connection._decode_hot_apart(_enqueue_frame(300, 4096))) is None

    async def executor_gone() -> Any:
        asyncio.get_running_loop().set_default_executor(concurrent.futures.ThreadPoolExecutor(1))
        await asyncio.get_running_loop().shutdown_default_executor()
        return await connection._decode_hot_apart(_enqueue_frame(300, 4096))

    monkeypatch.setattr(connection, "decode_hot_frame", decode_hot_frame)
    assert asyncio.run(executor_gone()) is None, "no worker thread: the general path answers"


def test_a_big_hot_frame_the_general_path_reads_again_is_read_off_the_event_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A hot call that ``decode_hot_frame`` does not take (a required field missing: a refusal,
    the connection kept) is read again by ``handle_frame``: a big one off the loop too, where a
    peer could pipeline 16 MiB frames that each held the loop for the walk."""
    threads: list[int] = []
    decode = dispatch.decode_hot_call

    def recording(name: str, payload: bytes, offset: int) -> Any:
        threads.append(threading.get_ident())
        return decode(name, payload, offset)

    monkeypatch.setattr(dispatch, "decode_hot_call", recording)
    frames = []
    for jobs, body_bytes in ((10, 10), (300, 4096)):
        args = idl.PinLater.enqueueJobs_args(
            context=idl.RequestContext(),  # no source
            request=idl.PinLaterEnqueueRequest(queueName="q", jobs=[idl.PinLaterJob(body=b"b" * body_bytes)] * jobs),
        )
        frames.append(_encode("enqueueJobs", TMessageType.CALL, 3, args))
    assert len(frames[0]) < DETACH_BYTES <= len(frames[1])
    assert decode_hot_frame(frames[1]) is None

    async def serve() -> tuple[list[bytes | None], int]:
        dispatcher = Dispatcher(_Handler())
        return [await dispatcher.handle_frame(f) for f in frames], threading.get_ident()

    replies, loop_thread = asyncio.run(serve())
    assert threads[0] == loop_thread, "a small frame on the loop: no thread hop"
    assert threads[1] != loop_thread, "a big one on a worker thread"
    for reply in replies:
        assert reply is not None and b"missing required field RequestContext.source" in reply


def test_a_keyed_enqueue_of_a_frame_decoded_apart_is_answered_as_any_other(big: tuple[Any, Any, Any]) -> None:
    client, ttypes, ctx = big
    body = b"x" * 4096
    keys = [f"key-{i % 250}" for i in range(300)]  # the last 50 repeat keys of the first 50
    jobs = [ttypes.PinLaterJob(body=body, dedupKey=key) for key in keys]
    reply = client.enqueueJobs(ctx, ttypes.PinLaterEnqueueRequest(queueName="big", jobs=jobs))
    assert len(reply.jobDescriptors) == 300
    assert reply.deduplicated == [False] * 250 + [True] * 50
    assert reply.jobDescriptors[250:] == reply.jobDescriptors[:50], "repeats answered with the first"
    pending = client.getJobCount(ctx, ttypes.PinLaterGetJobCountRequest(queueName="big", jobState=0))
    assert pending == 250


def _checkpoint_frame(items: int, missing_at: int | None = None) -> bytes:
    """A framed-transport payload: a ``checkpointJobs`` CALL of ``items`` checkpoints with 100-byte
    bodies, the one at ``missing_at`` (if any) without its required ``jobDescriptor``."""
    requests = [
        idl.PinLaterCheckpointJobRequest(jobDescriptor=None if i == missing_at else f"q:s1:p1:{i}", newBody="b" * 100)
        for i in range(items)
    ]
    args = idl.PinLater.checkpointJobs_args(
        context=idl.RequestContext(source="t"),
        request=idl.PinLaterCheckpointJobsRequest(queueName="q", requests=requests),
    )
    return _encode("checkpointJobs", TMessageType.CALL, 5, args)


class _Checkpoints:
    """A handler that keeps the checkpoint requests it is called with (and nothing else)."""

    def __init__(self) -> None:
        self.requests: list[Any] = []

    async def checkpoint_jobs(self, context: Any, request: Any) -> None:
        self.requests.append(request)

    def __getattr__(self, name: str) -> Any:
        return getattr(_Handler(), name)


def test_a_big_general_frame_is_decoded_off_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    threads: list[int] = []
    names: list[str] = []
    read_args = dispatch._read_args

    def recording(method: Any, payload: bytes, offset: int) -> Any:
        threads.append(threading.get_ident())
        names.append(threading.current_thread().name)
        return read_args(method, payload, offset)

    monkeypatch.setattr(dispatch, "_read_args", recording)
    handler = _Checkpoints()
    dispatcher = Dispatcher(handler)
    small, big, incomplete = _checkpoint_frame(10), _checkpoint_frame(10_000), _checkpoint_frame(10_000, 9_999)
    assert len(small) < DETACH_BYTES <= len(big)

    async def serve() -> tuple[list[bytes | None], int]:
        replies = [await dispatcher.handle_frame(frame) for frame in (small, big, incomplete)]
        return replies, threading.get_ident()

    replies, loop_thread = asyncio.run(serve())
    assert threads[0] == loop_thread, "a small frame on the loop: no thread hop"
    assert threads[1] != loop_thread and threads[2] == threads[1], "big ones on one thread of their own"
    assert names[1].startswith("pinlater-decode"), names
    assert [len(r.requests) for r in handler.requests] == [10, 10_000], "the incomplete one is refused"
    assert handler.requests[1].requests[-1].jobDescriptor == "q:s1:p1:9999"
    assert replies[2] is not None and b"missing required field PinLaterCheckpointJobRequest.jobDescriptor" in replies[2]

    gone = concurrent.futures.ThreadPoolExecutor(1)
    gone.shutdown()
    monkeypatch.setattr(dispatch, "_DECODER", gone)

    async def executor_gone() -> tuple[bytes | None, int]:
        return await dispatcher.handle_frame(big), threading.get_ident()

    threads.clear()
    reply, loop_thread = asyncio.run(executor_gone())
    assert reply is not None and len(handler.requests) == 3
    assert threads == [loop_thread], "no worker thread: decoded on the loop"


def test_the_loop_turns_while_a_big_frame_of_structs_is_decoded() -> None:
    """The decoder thread hands the GIL to the loop's thread between the structs it makes: a task
    that only yields turns many times while 100,000 checkpoints decode (on the loop it would turn
    once before and once after)."""
    handler = _Checkpoints()
    dispatcher = Dispatcher(handler)
    frame = _checkpoint_frame(100_000)

    async def turns_while_serving() -> int:
        turns = 0
        serving = asyncio.ensure_future(dispatcher.handle_frame(frame))
        while not serving.done():
            turns += 1
            await asyncio.sleep(0)
        await serving
        return turns

    assert asyncio.run(turns_while_serving()) > 10
    assert len(handler.requests) == 1 and len(handler.requests[0].requests) == 100_000


def _turns_while(work: Callable[[], Any]) -> int:
    """Turns a task that only yields takes while ``work`` runs on a worker thread: counted from
    when the worker has set a flag right before calling it (no system call between, so no GIL
    handed over) until its result reaches the loop. The GIL's switch interval is set far beyond
    the test meanwhile, so no thread is made to give the GIL up: the loop turns only while
    ``work`` releases it and the loop's thread has a core (and a few times as its result arrives),
    and work that holds it allows a few turns at most, however long it runs."""

    async def count() -> int:
        started = threading.Event()

        def run() -> Any:
            started.set()
            return work()

        task = asyncio.ensure_future(off_loop(run))
        while not started.is_set():
            await asyncio.sleep(0)
        turns = 0
        while not task.done():
            turns += 1
            await asyncio.sleep(0)
        await task
        return turns

    interval = sys.getswitchinterval()
    sys.setswitchinterval(100.0)
    try:
        return asyncio.run(count())
    finally:
        sys.setswitchinterval(interval)


def test_a_big_keyed_call_is_built_and_cut_with_the_gil_released() -> None:
    """``EnqueueCall.keyed`` and ``KeyedJobBatch.chunks`` of ``DETACH_JOBS`` jobs or more release
    the GIL, so the loop turns while a worker runs them (``off_loop``, as the handler and the
    sharded backend send them); smaller ones need not, and give the same result."""
    jobs = 3 * DETACH_JOBS
    _, _, call = decode_hot_frame(_enqueue_frame(jobs, 1))
    assert len(call) >= DETACH_JOBS and call.extended
    # Work that holds the GIL allows exactly two turns, every time; work that releases it, many,
    # unless the worker finished before the loop's thread got a core (on a busy machine, now and
    # then): the most of five runs.
    assert max(_turns_while(lambda: call.keyed(3, 1_000)) for _ in range(5)) > 10
    keyed = call.keyed(3, 1_000)
    assert keyed is not None and len(keyed) == jobs
    assert max(_turns_while(lambda: keyed.chunks(1000)) for _ in range(5)) > 10
    parts, repeats = keyed.chunks(1000)
    assert [len(part) for part in parts] == [1000] * (jobs // 1000) and repeats == []
    assert [k for part in parts for k, *_ in part.keys()] == [f"k{i}" for i in range(jobs)]


def test_a_keyed_enqueue_of_detach_jobs_or_more_is_answered_as_any_other(big: tuple[Any, Any, Any]) -> None:
    """Built and cut on worker threads (``DETACH_JOBS``), placed a part at a time, answered whole:
    repeated keys with their first job's descriptor."""
    client, ttypes, ctx = big
    n = DETACH_JOBS + 500
    keys = [f"key-{i % (n - 100)}" for i in range(n)]  # the last 100 repeat keys of the first 100
    jobs = [ttypes.PinLaterJob(body=b"x", dedupKey=key) for key in keys]
    reply = client.enqueueJobs(ctx, ttypes.PinLaterEnqueueRequest(queueName="big", jobs=jobs))
    assert len(reply.jobDescriptors) == n
    assert reply.deduplicated == [False] * (n - 100) + [True] * 100
    assert reply.jobDescriptors[n - 100 :] == reply.jobDescriptors[:100], "repeats answered with the first"
    assert len(set(reply.jobDescriptors)) == n - 100
    pending = client.getJobCount(ctx, ttypes.PinLaterGetJobCountRequest(queueName="big", jobState=0))
    assert pending == n - 100
