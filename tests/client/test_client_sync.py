"""``PinLaterClient`` against a real server: every method, typed results, typed errors."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from pinlater.client import (
    ERROR_CLASSES,
    Ack,
    Checkpoint,
    DequeuedJob,
    ErrorCode,
    InvalidRequest,
    Job,
    JobInfo,
    JobState,
    PasswordInvalid,
    PinLaterClient,
    PinLaterError,
    QueueNotFound,
    RateLimited,
    ScanResult,
    default_source,
)
from tests.client.fixtures import PAUSED_QUEUE
from tests.conftest import ADMIN_PASSWORD
from tests.support.pinlater_server import ServerProcess


def now_ms() -> int:
    return int(time.time() * 1000)


def test_queues_are_created_listed_and_deleted(pl: PinLaterClient) -> None:
    pl.create_queue("sync_q_del")
    pl.create_queue("sync_q_del")
    assert "sync_q_del" in pl.queue_names()
    with pytest.raises(PasswordInvalid) as info:
        pl.delete_queue("sync_q_del", "wrong")
    assert info.value.code == ErrorCode.PASSWORD_INVALID
    pl.delete_queue("sync_q_del", ADMIN_PASSWORD)
    assert "sync_q_del" not in pl.queue_names()
    with pytest.raises(QueueNotFound) as missing:
        pl.enqueue("sync_q_del", [b"x"])
    assert missing.value.code == ErrorCode.QUEUE_NOT_FOUND == 413
    assert isinstance(missing.value, PinLaterError)


def test_enqueue_dequeue_and_ack_with_typed_results(pl: PinLaterClient, queue: str) -> None:
    low = pl.enqueue(queue, [Job(b"\x00low", priority=3)])
    high = pl.enqueue(queue, [b"\xffbytes", "text", Job("five", attempts=5, custom_status="new;")])
    assert isinstance(high, list) and all(isinstance(d, str) for d in high) and len(high) == 3
    assert [d.split(":")[2] for d in high + low] == ["p1", "p1", "p1", "p3"]

    jobs = pl.dequeue(queue, limit=3)
    assert all(isinstance(j, DequeuedJob) for j in jobs)
    assert [j.descriptor for j in jobs] == high, "priority 1 first, in enqueue order"
    assert [j.body for j in jobs] == [b"\xffbytes", b"text", b"five"]
    assert (jobs[2].attempts_allowed, jobs[2].attempts_remaining, jobs[2].attempt) == (5, 5, 1)
    assert jobs[0].queue == queue

    before = now_ms()
    pl.ack(queue, succeeded=[Ack(high[0], append_status="done")], failed=[Ack(high[2], "boom;", retry_delay=60)])
    # The second job is acked piggy-backed on the next dequeue, which also claims the last one.
    [last] = pl.dequeue(queue, limit=5, succeeded=[high[1]])
    assert last.descriptor == low[0]

    found = pl.lookup(high + low, include_body=True)
    assert all(isinstance(i, JobInfo) for i in found.values())
    assert found[high[0]].state is JobState.SUCCEEDED and found[high[0]].custom_status == "done"
    assert found[high[1]].state is JobState.SUCCEEDED
    retried = found[high[2]]
    assert retried.state is JobState.PENDING and retried.attempts_remaining == 4
    assert retried.custom_status == "new;boom;"
    assert retried.run_after_ms is not None and retried.run_after_ms >= before + 59_000
    assert found[low[0]].state is JobState.IN_PROGRESS
    assert found[low[0]].body == b"\x00low"
    assert found[low[0]].claim_descriptor and default_source() in found[low[0]].claim_descriptor
    assert found[high[0]].raw.jobDescriptor == high[0], "the Thrift struct stays reachable"


def test_default_source_is_program_and_hostname() -> None:
    program, host = default_source().rsplit(":", 1)
    assert host == socket.gethostname() and program and not program.endswith(".py")


def test_lookup_count_scan(pl: PinLaterClient, queue: str) -> None:
    d = pl.enqueue(
        queue, [Job(b"a1"), Job(b"a2"), Job(b"b", priority=2), Job(b"later", run_after_ms=now_ms() + 3_600_000)]
    )
    assert pl.count(queue, JobState.PENDING) == 3
    assert pl.count(queue, JobState.PENDING, priority=1) == 2
    assert pl.count(queue, JobState.PENDING, count_future=True) == 1
    assert pl.count(queue, JobState.PENDING, body_regex="^a") == 2
    page = pl.scan(queue, JobState.PENDING, priority=1)
    assert isinstance(page, ScanResult) and page.continuation == "-1"
    assert {j.descriptor for j in page.jobs} == {d[0], d[1]}
    assert pl.scan(queue, JobState.PENDING, scan_future=True).jobs[0].descriptor == d[3]
    assert pl.lookup([d[2], f"{queue}:s1:p1:999999"]).keys() == {d[2]}, "only jobs found"
    assert pl.lookup([d[2]])[d[2]].body is None, "no body unless asked"


def test_dry_run_dequeue_claims_nothing(pl: PinLaterClient, queue: str) -> None:
    [d] = pl.enqueue(queue, [b"x"])
    assert [j.descriptor for j in pl.dequeue(queue, 5, dry_run=True)] == [d]
    assert pl.count(queue, JobState.PENDING) == 1


def test_checkpoint_replaces_body_and_moves_to_pending(pl: PinLaterClient, queue: str) -> None:
    a, b = pl.enqueue(queue, [b"v1", Job(b"w1", attempts=3)])
    assert len(pl.dequeue(queue, 2)) == 2
    pl.checkpoint(queue, [Checkpoint(a, new_body="v2", prepend_status="half;", attempts_allowed=7)])
    later = now_ms() + 3_600_000
    pl.checkpoint(queue, [Checkpoint(b, move_to_pending=True, run_after_ms=later)])
    found = pl.lookup([a, b], include_body=True)
    assert found[a].state is JobState.IN_PROGRESS and found[a].body == b"v2"
    assert found[a].custom_status.startswith("half;") and found[a].attempts_remaining == 7
    assert found[b].state is JobState.PENDING and found[b].run_after_ms == later
    assert found[b].attempts_remaining == 3, "a release charges no attempt"


def test_retry_failed_and_delete_jobs(pl: PinLaterClient, queue: str) -> None:
    ds = pl.enqueue(queue, [Job(b"f", attempts=1) for _ in range(3)])
    pl.dequeue(queue, 3, failed=[])
    pl.ack(queue, failed=ds)
    assert pl.count(queue, JobState.FAILED) == 3
    assert pl.retry_failed(queue, attempts=2, limit=2) == 2
    assert pl.count(queue, JobState.PENDING) == 2
    assert pl.delete_jobs(queue, JobState.PENDING) == 2
    assert pl.delete_jobs(queue, JobState.FAILED, body_regex="^f$") == 1
    assert pl.count(queue, JobState.FAILED) == 0


def test_errors_are_typed_with_their_codes(pl: PinLaterClient, queue: str) -> None:
    cases = [
        (lambda: pl.create_queue("bad-name"), InvalidRequest, ErrorCode.QUEUE_NAME_INVALID),
        (lambda: pl.enqueue(queue, [Job(b"x", priority=9)]), InvalidRequest, ErrorCode.PRIORITY_NOT_SUPPORTED),
        (lambda: pl.scan(queue, JobState.PENDING, continuation="5"), InvalidRequest, ErrorCode.CONTINUATION_INVALID),
        (lambda: pl.dequeue("no_such_queue"), QueueNotFound, ErrorCode.QUEUE_NOT_FOUND),
    ]
    for call, cls, code in cases:
        with pytest.raises(cls) as info:
            call()
        assert info.value.code == code and info.value.message
    pl.create_queue(PAUSED_QUEUE)
    with pytest.raises(RateLimited) as limited:
        pl.dequeue(PAUSED_QUEUE)
    assert limited.value.code == ErrorCode.DEQUEUE_RATE_LIMITED
    assert set(ERROR_CLASSES) == set(ErrorCode), "every code has its class"


def test_raw_thrift_calls(pl: PinLaterClient, queue: str) -> None:
    from pinlater.idl import idl

    response = pl.raw.enqueueJobs(idl.PinLaterEnqueueRequest(queueName=queue, jobs=[idl.PinLaterJob(body=b"r")]))
    assert len(response.jobDescriptors) == 1
    assert queue in pl.raw.getQueueNames()
    with pytest.raises(AttributeError):
        pl.raw.noSuchMethod()


def test_the_pool_is_bounded_and_shared_by_threads(address: str, queue: str) -> None:
    with PinLaterClient(address, max_connections=2) as client:
        descriptors: list[str] = []
        lock = threading.Lock()

        def produce() -> None:
            for _ in range(20):
                got = client.enqueue(queue, [b"t"])
                with lock:
                    descriptors.extend(got)

        threads = [threading.Thread(target=produce) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(set(descriptors)) == 120
        assert client.count(queue, JobState.PENDING) == 120
        [pool] = client._pools.values()
        assert pool.open <= 2


def test_a_closed_idle_connection_is_replaced(srv: ServerProcess, pl: PinLaterClient, queue: str) -> None:
    pl.enqueue(queue, [b"1"])
    [pool] = pl._pools.values()
    pool.idle[0].sock.shutdown(socket.SHUT_RDWR)  # as if the server had dropped it while idle
    assert len(pl.enqueue(queue, [b"2"])) == 1
    assert pl.count(queue, JobState.PENDING) == 2


def test_a_long_poll_is_held_by_the_server_past_the_client_timeout(address: str, queue: str) -> None:
    # The server holds the call until the wait is up; the client allows for it on top of its
    # own 1 s timeout (without that, this call would fail with a timeout after 1 s).
    with PinLaterClient(address, timeout=1.0) as client:
        client.create_queue(queue)
        started = time.monotonic()
        assert client.dequeue(queue, 5, wait=1.5) == []
        assert time.monotonic() - started >= 1.4, "the server held the call"


def test_a_long_poll_returns_the_job_enqueued_meanwhile(pl: PinLaterClient, queue: str) -> None:
    got: list[list[DequeuedJob]] = []
    poller = threading.Thread(target=lambda: got.append(pl.dequeue(queue, 5, wait=25)))
    poller.start()
    [descriptor] = pl.enqueue(queue, [b"wake up"])
    poller.join(20)
    assert not poller.is_alive(), "the long poll returned before its 25 s were up"
    assert [j.descriptor for j in got[0]] == [descriptor]


def test_a_servers_error_answer_keeps_its_connection(address: str) -> None:
    """A typed error is a whole answer: the connection is in step and goes back to the pool. Each
    had closed it: a loop catching RateLimited opened some 2,200 connections a second."""
    with PinLaterClient(address) as client:
        seen = set()
        for _ in range(20):
            with pytest.raises(QueueNotFound):
                client.count("no_such_queue_for_pools", JobState.PENDING)
            (pool,) = client._pools.values()
            assert pool.open == 1 and len(pool.idle) == 1
            seen.add(id(pool.idle[0]))
        assert len(seen) == 1, "one connection for every call"


def test_a_client_used_before_a_fork_serves_parent_and_child_apart(address: str, queue: str) -> None:
    """Pooled sockets and seqids were shared across a fork: replies went to whichever process
    read first (failed calls, and each side given the other's descriptors). The child now opens
    connections of its own."""
    import os

    with PinLaterClient(address) as client:
        client.enqueue(queue, [b"warm"])  # (a pooled connection, then the fork)
        pid = os.fork()
        if pid == 0:  # the child: report by exit status only
            code = 0
            try:
                for i in range(100):
                    [d] = client.enqueue(queue, [b"child-%d" % i])
                    if client.lookup([d], include_body=True)[d].body != b"child-%d" % i:
                        code = 3
            except BaseException:
                code = 4
            os._exit(code)
        for i in range(100):
            [d] = client.enqueue(queue, [b"parent-%d" % i])
            assert client.lookup([d], include_body=True)[d].body == b"parent-%d" % i
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0


def test_a_checkpoint_body_that_is_not_utf8_is_refused_before_it_is_sent(
    address: str, pl: PinLaterClient, queue: str
) -> None:
    """The contract's newBody is a string: the server stored U+FFFD in place of each byte that is
    not UTF-8, and the caller was not told."""
    from pinlater.client import Checkpoint

    [d] = pl.enqueue(queue, [b"body"])
    assert [job.descriptor for job in pl.dequeue(queue, 1)] == [d]
    with pytest.raises(ValueError, match="new_body must be UTF-8"):
        pl.checkpoint(queue, [Checkpoint(d, new_body=b"\xff\xfe binary")])
    pl.checkpoint(queue, [Checkpoint(d, new_body="caf\u00e9".encode())])
    assert pl.lookup([d], include_body=True)[d].body == "caf\u00e9".encode()
