"""``pinlater.worker.Worker`` against a real server: exactly-once processing, retries, the cap on
jobs in hand, acks on a timer, checkpoints and releases."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from pinlater.client import Job, JobState, PinLaterClient
from pinlater.worker import JobContext, Worker, constant, linear
from pinlater.worker.queue_runner import SUCCESS_STATUS_LIMIT
from pinlater.worker.runner import HURRY_SECONDS
from tests.client.fixtures import PAUSED_QUEUE
from tests.support.pinlater_server import ServerProcess
from tests.support.wait import wait_for


@contextmanager
def running(worker: Worker) -> Iterator[Worker]:
    """``worker.serve()`` on a thread; stopped (gracefully) and joined on exit."""
    errors: list[BaseException] = []

    def target() -> None:
        try:
            asyncio.run(worker.serve())
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    try:
        yield worker
    finally:
        worker.stop()
        thread.join(30)
        assert not thread.is_alive(), "the worker did not stop"
        if errors:
            raise errors[0]


def settled(pl: PinLaterClient, queue: str, state: JobState, n: int) -> bool:
    return pl.count(queue, state, count_future=False) + pl.count(queue, state, count_future=True) == n


def test_a_sync_handler_runs_every_job_exactly_once(address: str, pl: PinLaterClient, queue: str) -> None:
    n = 300
    ds = pl.enqueue(queue, [str(i) for i in range(n)])
    seen: list[str] = []
    worker = Worker(address, concurrency=16, batch_size=8)
    worker.register(queue, lambda ctx: seen.append(ctx.descriptor))
    with running(worker):
        wait_for(lambda: pl.count(queue, JobState.SUCCEEDED) == n, timeout=60, what="all jobs to succeed")
    assert sorted(seen) == sorted(ds)
    assert pl.count(queue, JobState.IN_PROGRESS) == 0 and pl.count(queue, JobState.PENDING) == 0
    assert worker.stats.succeeded == n and worker.stats.failed == 0


def test_an_async_handler_runs_every_job_exactly_once(address: str, pl: PinLaterClient, queue: str) -> None:
    n = 300
    ds = pl.enqueue(queue, [str(i) for i in range(n)])
    seen: list[str] = []
    worker = Worker(address, concurrency=32)

    @worker.register(queue)
    async def handle(ctx: JobContext) -> str:
        await asyncio.sleep(0)
        seen.append(ctx.descriptor)
        return "ok;"  # a returned string is appended to the custom status

    with running(worker):
        wait_for(lambda: pl.count(queue, JobState.SUCCEEDED) == n, timeout=60, what="all jobs to succeed")
    assert sorted(seen) == sorted(ds)
    assert pl.lookup(ds[:1])[ds[0]].custom_status == "ok;"


def test_a_failure_is_retried_after_the_policy_delay(address: str, pl: PinLaterClient, queue: str) -> None:
    [d] = pl.enqueue(queue, [Job(b"x", attempts=3)])
    worker = Worker(address, retry=linear(20.0))

    @worker.register(queue)
    def fail(ctx: JobContext) -> None:
        raise ValueError(f"bad body {ctx.body!r}")

    with running(worker):
        info = wait_for(lambda: pl.lookup([d]).get(d) if pl.lookup([d])[d].attempts_remaining == 2 else None, 30)
    assert info.state is JobState.PENDING
    assert info.custom_status == "attempt 1: ValueError: bad body b'x'\n"
    assert info.run_after_ms is not None and info.updated_at_ms is not None
    assert abs(info.run_after_ms - info.updated_at_ms - 20_000) < 1_000, "linear: 20 s x 1 attempt used"
    assert worker.stats.failed == 1 and worker.stats.acks_sent == 1


def test_an_exhausted_job_fails_with_the_error_text(address: str, pl: PinLaterClient, queue: str) -> None:
    [d] = pl.enqueue(queue, [Job(b"x", attempts=2)])
    worker = Worker(address, retry=constant(0), status_limit=40)

    @worker.register(queue)
    async def fail(ctx: JobContext) -> None:
        raise RuntimeError("x" * 100)

    with running(worker):
        info = wait_for(lambda: pl.lookup([d])[d] if pl.count(queue, JobState.FAILED) else None, 30)
    assert info.attempts_remaining == 0
    lines = info.custom_status.splitlines()
    assert lines == ["attempt 1: RuntimeError: " + "x" * 12 + "...", "attempt 2: RuntimeError: " + "x" * 12 + "..."]


class _Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text")


def test_statuses_no_request_can_carry_cost_no_other_job_its_ack(address: str, pl: PinLaterClient, queue: str) -> None:
    """A lone surrogate (what ``os.fsdecode`` makes of a byte it cannot decode) in an error or a
    returned status, an exception whose ``str`` raises, and a returned status past the frame
    limit: each job ends with a status the server took, and the jobs around them are acked."""
    odd = {"raise": "raise", "return": "return", "unprintable": "unprintable", "huge": "huge"}
    bodies = [f"ok-{i}" for i in range(40)]
    for i, kind in enumerate(odd):
        bodies.insert(8 * i + 4, kind)
    ds = dict(zip(pl.enqueue(queue, [Job(b, attempts=1) for b in bodies]), bodies, strict=True))
    surrogate = os.fsdecode(b"/data/caf\xe9.txt")

    def handle(ctx: JobContext) -> str | None:
        body = ctx.body.decode()
        if body == "raise":
            raise FileNotFoundError("missing " + surrogate)
        if body == "unprintable":
            raise _Unprintable()
        if body == "return":
            return "wrote " + surrogate
        if body == "huge":
            return "r" * (17 * 1024 * 1024)
        return None

    worker = Worker(address, concurrency=4, batch_size=10)
    worker.register(queue, handle)
    with running(worker):
        wait_for(lambda: pl.count(queue, JobState.SUCCEEDED) == len(bodies) - 2, 30, what="every success acked")
        wait_for(lambda: pl.count(queue, JobState.FAILED) == 2, 30, what="both failures acked")
    by_body = {body: info for d, info in pl.lookup(list(ds)).items() for body in [ds[d]]}
    escaped = "caf\\udce9.txt"
    assert by_body["raise"].custom_status == f"attempt 1: FileNotFoundError: missing /data/{escaped}\n"
    assert (
        by_body["unprintable"].custom_status
        == "attempt 1: _Unprintable: <str() of the exception raised RuntimeError>\n"
    )
    assert by_body["return"].custom_status == f"wrote /data/{escaped}"
    assert by_body["huge"].custom_status == "r" * (SUCCESS_STATUS_LIMIT - 3) + "..."
    assert pl.count(queue, JobState.IN_PROGRESS) == 0
    assert worker.stats.succeeded == len(bodies) - 2 and worker.stats.failed == 2


def test_an_ack_the_client_cannot_send_is_dropped_alone(address: str, pl: PinLaterClient, queue: str) -> None:
    """Past what any check foresaw: an ack whose request the client fails to make (not a server's
    answer) is sent alone and dropped, logged; the acks it went with are sent each alone."""
    ds = pl.enqueue(queue, [str(i) for i in range(30)])
    poisoned = ds[7]
    worker = Worker(address, concurrency=4, batch_size=10)
    real_ack, real_dequeue = worker.client.ack, worker.client.dequeue

    def refuse(acks: list[Any]) -> None:
        if poisoned in [getattr(a, "descriptor", a) for a in acks]:
            raise ValueError("an ack no request can carry")

    async def ack(queue: str, succeeded: Any = (), failed: Any = ()) -> None:
        refuse([*succeeded, *failed])
        await real_ack(queue, succeeded, failed)

    async def dequeue(queue: str, limit: int = 1, *, succeeded: Any = (), failed: Any = (), **kw: Any) -> Any:
        refuse([*succeeded, *failed])
        return await real_dequeue(queue, limit, succeeded=succeeded, failed=failed, **kw)

    worker.client.ack = ack  # type: ignore[method-assign]
    worker.client.dequeue = dequeue  # type: ignore[method-assign]
    worker.register(queue, lambda ctx: None)
    with running(worker):
        wait_for(lambda: pl.count(queue, JobState.SUCCEEDED) == len(ds) - 1, 30, what="the other acks")
    assert pl.lookup([poisoned])[poisoned].state == JobState.IN_PROGRESS  # runs again at its claim's timeout


@pytest.mark.parametrize("signals", [1, 2])
def test_a_stop_against_a_hung_server_ends_within_its_bounds(
    start_server: Callable[..., ServerProcess], caplog: pytest.LogCaptureFixture, signals: int
) -> None:
    """The server stops answering (SIGSTOP) with acks pending and a job in hand: the stop ends
    within the grace period plus one reply timeout (it had waited a timeout per request: the
    hand-backs, the releases and three ack flushes), or HURRY_SECONDS after a second signal,
    and says what it could not send. The jobs are whole: each runs again after its claim."""
    srv = start_server()
    assert srv.proc is not None
    with PinLaterClient(f"127.0.0.1:{srv.port}") as pl:
        pl.create_queue("hung")
        pl.enqueue("hung", [Job("quick"), Job("slow")])
        worker = Worker(f"127.0.0.1:{srv.port}", concurrency=2, prefetch=0, ack_interval=60, grace_period=1, timeout=4)
        release, go_quick = threading.Event(), threading.Event()

        def handle(ctx: JobContext) -> None:
            (release if ctx.body == b"slow" else go_quick).wait(30)

        worker.register("hung", handle)
        serving = threading.Thread(target=asyncio.run, args=(worker.serve(),), daemon=True)
        with caplog.at_level(logging.INFO, logger="pinlater.worker"):
            serving.start()
            try:
                wait_for(lambda: pl.count("hung", JobState.IN_PROGRESS) == 2, 30, what="both jobs claimed")
                os.kill(srv.proc.pid, signal.SIGSTOP)
                go_quick.set()  # its ack goes with the next dequeue, to a server that answers nothing
                wait_for(lambda: worker.stats.succeeded == 1, 30, what="the quick job's outcome")
                started = time.monotonic()
                worker.stop()
                if signals == 2:
                    worker.stop()
                bound = HURRY_SECONDS if signals == 2 else worker.grace_period + worker.timeout
                serving.join(bound + 30)
                took = time.monotonic() - started
            finally:
                release.set()
                os.kill(srv.proc.pid, signal.SIGCONT)
                worker.stop()
                serving.join(30)
        assert took < bound + 2, f"the stop took {took:.1f} s, bound {bound} s"
        assert "ack(s) were not sent" in caplog.text
        # Nothing is lost: each job is claimed still (run again after its claim), or was released
        # or acked by requests the server read once it ran again.
        wait_for(lambda: sum(pl.count("hung", state) for state in JobState if state != JobState.FAILED) == 2, 30)


def test_jobs_in_hand_never_exceed_the_cap(address: str, pl: PinLaterClient, queue: str) -> None:
    cap, n = 3, 12
    pl.enqueue(queue, [b"j"] * n)
    gate = threading.Event()
    entered: list[str] = []
    in_progress_seen: list[int] = []
    # With no prefetch, the cap is ``concurrency`` (test_prefetch.py covers the bound with one).
    worker = Worker(address, concurrency=cap, batch_size=10, prefetch=0)

    @worker.register(queue)
    def block(ctx: JobContext) -> None:
        entered.append(ctx.descriptor)
        with PinLaterClient(address) as probe:
            in_progress_seen.append(probe.count(queue, JobState.IN_PROGRESS))
        gate.wait(30)

    with running(worker):
        wait_for(lambda: len(entered) == cap, timeout=30, what="the first jobs to start")
        for _ in range(5):  # while every slot is taken, nothing more is claimed
            assert pl.count(queue, JobState.IN_PROGRESS) == cap
        gate.set()
        wait_for(lambda: pl.count(queue, JobState.SUCCEEDED) == n, timeout=30, what="all jobs")
    assert len(entered) == n
    assert max(in_progress_seen) <= cap


def test_acks_are_flushed_on_a_timer_when_the_queue_is_quiet(address: str, pl: PinLaterClient, queue: str) -> None:
    [d] = pl.enqueue(queue, [b"one"])
    gate = threading.Event()
    # After an empty dequeue the next poll is 30 s away: only the 0.2 s ack timer can ack in time.
    worker = Worker(address, ack_interval=0.2, poll_interval=(30.0, 30.0))
    worker.register(queue, lambda ctx: gate.wait(30))
    with running(worker):
        wait_for(lambda: worker.stats.empty_dequeues >= 1, timeout=30, what="an empty dequeue")
        gate.set()
        wait_for(lambda: pl.lookup([d])[d].state is JobState.SUCCEEDED, timeout=10, what="the timer's ack")


def test_an_idle_worker_long_polls_and_takes_a_new_job_at_once(address: str, pl: PinLaterClient, queue: str) -> None:
    pl.create_queue(queue)
    done = threading.Event()
    # After an empty dequeue that was not held, the next poll would be 30 s away: only the long
    # poll, held by the server and woken by the enqueue, can take the job in time.
    worker = Worker(address, poll_interval=(30.0, 30.0), long_poll=1.0)
    worker.register(queue, lambda ctx: done.set())
    with running(worker):
        wait_for(lambda: worker.stats.empty_dequeues >= 1, timeout=30, what="an empty (held) dequeue")
        pl.enqueue(queue, [b"late"])
        assert done.wait(10), "the idle worker did not take the new job"


def test_acks_go_out_before_a_long_poll_not_with_it(address: str, pl: PinLaterClient, queue: str) -> None:
    [d] = pl.enqueue(queue, [b"one"])
    # The ack timer is 30 s away and the long poll 10 s: only an ack sent ahead of the poll
    # is confirmed (and counted) in time.
    worker = Worker(address, ack_interval=30.0, long_poll=10.0)
    worker.register(queue, lambda ctx: None)
    with running(worker):
        wait_for(lambda: worker.stats.acks_sent == 1, timeout=5, what="the ack, sent before the long poll")
        assert pl.lookup([d])[d].state is JobState.SUCCEEDED


def test_long_poll_must_be_within_the_servers_bound(address: str) -> None:
    with pytest.raises(ValueError, match="long_poll"):
        Worker(address, long_poll=31)


def test_checkpoint_helper_and_release(address: str, pl: PinLaterClient, queue: str) -> None:
    keep, release = pl.enqueue(queue, [b"keep", b"release"])
    worker = Worker(address, concurrency=1)
    later = time.time() + 3600

    @worker.register(queue)
    def handle(ctx: JobContext) -> None:
        if ctx.body == b"keep":
            ctx.checkpoint(new_body="kept v2", prepend_status="halfway;")
        else:
            ctx.checkpoint(move_to_pending=True, run_after=later)

    with running(worker):
        wait_for(lambda: worker.stats.succeeded + worker.stats.released == 2, timeout=30, what="two outcomes")
    found = pl.lookup([keep, release], include_body=True)
    assert found[keep].state is JobState.SUCCEEDED and found[keep].body == b"kept v2"
    assert found[keep].custom_status == "halfway;"
    assert found[release].state is JobState.PENDING and found[release].attempts_remaining == 2, "no attempt charged"
    assert found[release].run_after_ms == int(later * 1000)
    assert (worker.stats.succeeded, worker.stats.released) == (1, 1), "a released job is not acked"


def test_async_handler_checkpoint(address: str, pl: PinLaterClient, queue: str) -> None:
    [d] = pl.enqueue(queue, [b"a"])
    worker = Worker(address)

    runs: list[int] = []

    @worker.register(queue)
    async def handle(ctx: JobContext) -> None:
        runs.append(ctx.attempts_allowed)
        if len(runs) == 1:
            await ctx.acheckpoint(move_to_pending=True, attempts_allowed=5, prepend_status="again;")

    with running(worker):
        info = wait_for(lambda: (i := pl.lookup([d])[d]).state is JobState.SUCCEEDED and i, timeout=30)
    assert info.state is JobState.SUCCEEDED and info.custom_status == "again;"
    assert (info.attempts_allowed, info.attempts_remaining) == (5, 5)
    assert runs == [2, 5] and worker.stats.released == 1


def test_rate_limited_dequeues_back_off(address: str, pl: PinLaterClient) -> None:
    pl.create_queue(PAUSED_QUEUE)
    worker = Worker(address, poll_interval=(0.1, 1.0))
    worker.register(PAUSED_QUEUE, lambda ctx: None)
    start = time.monotonic()
    with running(worker):
        wait_for(lambda: worker.stats.rate_limited >= 3, timeout=30, what="three rate-limited dequeues")
        elapsed = time.monotonic() - start
    assert elapsed >= 0.2 + 0.4, "waits of 0.2 s then 0.4 s come between them: no busy loop"


def test_a_handler_that_returns_a_coroutine_fails_its_job_not_succeeds(
    address: str, pl: PinLaterClient, queue: str
) -> None:
    """A plain function wrapping an ``async def`` (a decorator, a lambda) returns a coroutine
    that a handler thread cannot run: the job fails with that said, where it was acked a
    success without having run."""
    [d] = pl.enqueue(queue, [Job(b"x", attempts=1)])
    ran: list[str] = []

    async def work(ctx: JobContext) -> None:
        ran.append(ctx.descriptor)

    worker = Worker(address)
    worker.register(queue, lambda ctx: work(ctx))
    with running(worker):
        info = wait_for(lambda: pl.lookup([d])[d] if pl.count(queue, JobState.FAILED) else None, 30)
    assert ran == [] and pl.count(queue, JobState.SUCCEEDED) == 0
    assert "returned an awaitable" in info.custom_status


def test_only_acks_that_cannot_have_arrived_are_sent_again() -> None:
    """A failure ack applied twice (the second after its retry delay let another worker claim
    the job) charges that run an attempt or ends it FAILED while it runs: one is sent again only
    if its request cannot have reached the server (a server's answer may follow acks it applied:
    a dequeue's, or some shards' of several). Success acks are sent again (a no-op once applied);
    after RateLimited none is, the server having applied them."""
    from pinlater.client.errors import PinLaterConnectionError, QueueNotFound, RateLimited
    from pinlater.errors import ErrorCode
    from pinlater.worker.queue_runner import acks_to_resend

    ok, bad = ["q:s1:p1:1"], ["q:s1:p1:2"]
    assert acks_to_resend(ok, bad, RateLimited(ErrorCode.DEQUEUE_RATE_LIMITED, "spent")) == ([], [])
    assert acks_to_resend(ok, bad, PinLaterConnectionError("refused", sent=False)) == (ok, bad)
    assert acks_to_resend(ok, bad, PinLaterConnectionError("timed out", sent=True)) == (ok, [])
    answered = QueueNotFound(ErrorCode.QUEUE_NOT_FOUND, "no queue q")
    assert acks_to_resend(ok, bad, answered) == (ok, []), "an answer may follow acks applied (a dequeue's)"
    assert acks_to_resend(ok, bad, ValueError("cannot encode")) == (ok, bad), "no request made"
    assert acks_to_resend(ok, bad, asyncio.CancelledError()) == (ok, []), "cancelled mid-request"


def test_an_ack_the_server_keeps_refusing_is_dropped_alone(
    address: str, pl: PinLaterClient, queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An ack the server refuses (an error of its own, not a store down) was sent again with every
    flush and every dequeue, each failing: the worker took no job of the queue again. Its
    acks go one by one, and the one refused REFUSED_ACK_TRIES times alone, over at least
    REFUSED_ACK_SECONDS (60 s, 0.3 here), is dropped."""
    from pinlater.worker import queue_runner
    from pinlater.worker.queue_runner import REFUSED_ACK_TRIES

    monkeypatch.setattr(queue_runner, "REFUSED_ACK_SECONDS", 0.3)

    descriptors = pl.enqueue(queue, [b"first"])
    poisoned: list[str] = []

    def handle(ctx: JobContext) -> None:
        if not poisoned:  # the next flush carries an ack no server takes, beside this job's own
            poisoned.append(f"{queue}:s1:pX:1")
            ctx.runner.succeeded.append(poisoned[0])

    worker = Worker(address, ack_interval=0.05, poll_interval=(0.01, 0.05), long_poll=0)
    worker.register(queue, handle)
    with running(worker):
        wait_for(lambda: pl.count(queue, JobState.SUCCEEDED) == 1, timeout=30, what="the first job's ack")
        later = pl.enqueue(queue, [b"second", b"third"])
        wait_for(lambda: pl.count(queue, JobState.SUCCEEDED) == 3, timeout=30, what="the jobs after it")
        wait_for(lambda: worker.stats.acks_dropped == 1, timeout=30, what="the refused ack to be dropped")
    assert len(descriptors + later) == 3 and REFUSED_ACK_TRIES > 1
    assert worker.runners[0].refusals == {}


def test_a_stop_sends_its_acks_to_a_server_that_comes_back_within_it(
    tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker and its server redeployed together: the server goes with two jobs done and their
    acks unsent, the worker is told to stop, and the server is back a few seconds later. The
    stop sends the acks until its deadline (grace period plus timeout); it gave up after three
    tries within 0.6 s, and both jobs ran again after their claims timed out."""
    from tests.support.redis_server import free_port

    port = free_port()
    srv = ServerProcess(tmp_path / "data", "--port", str(port)).start()  # (the last --port wins)
    address = f"127.0.0.1:{port}"
    try:
        with PinLaterClient(address) as pl:
            pl.create_queue("back")
            made = pl.enqueue("back", [b"a", b"b"])
        gate = threading.Event()
        worker = Worker(address, concurrency=2, prefetch=0, ack_interval=60, grace_period=5, timeout=10)
        worker.register("back", lambda ctx: gate.wait(30))
        with caplog.at_level(logging.WARNING, logger="pinlater.worker"), running(worker):
            with PinLaterClient(address) as pl:
                wait_for(lambda: pl.count("back", JobState.IN_PROGRESS) == 2, 30, what="both jobs claimed")
            srv.kill()
            gate.set()
            wait_for(lambda: worker.stats.succeeded == 2, 30, what="both handlers done")
            worker.stop()
            wait_for(lambda: caplog.text.count("ack(s) failed") >= 4, 30, what="the stop's tries to fail a while")
            srv.start()
            wait_for(lambda: worker.stats.acks_sent == 2, 30, what="the acks, once the server is back")
        with PinLaterClient(address) as pl:
            assert {d: pl.lookup([d])[d].state for d in made} == dict.fromkeys(made, JobState.SUCCEEDED)
    finally:
        srv.stop()


def test_a_cancelled_serve_stops_in_a_hurry_and_sends_its_acks(address: str, pl: PinLaterClient, queue: str) -> None:
    """An app that cancels its tasks at shutdown cancelled serve(): it returned at once, its jobs
    in hand neither acked nor released, so they ran again after their claims timed out. Now a
    cancel is a stop in a hurry (the second signal's): a job done is acked, one still running is
    released, then the cancel goes on."""
    done_job, running_job = pl.enqueue(queue, [b"done", b"running"])
    gate = threading.Event()
    worker = Worker(address, concurrency=2, prefetch=0, ack_interval=60)

    @worker.register(queue)
    def handle(ctx: JobContext) -> None:
        if ctx.body == b"running":
            gate.wait(30)

    outcome: list[BaseException | None] = []

    async def main() -> None:
        task = asyncio.create_task(worker.serve())
        await asyncio.to_thread(wait_for, lambda: worker.stats.succeeded == 1, 30)
        task.cancel()
        try:
            await task
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    try:
        asyncio.run(main())
    finally:
        gate.set()
    assert len(outcome) == 1 and isinstance(outcome[0], asyncio.CancelledError), outcome
    assert pl.lookup([done_job])[done_job].state is JobState.SUCCEEDED, "its ack was sent"
    assert pl.lookup([running_job])[running_job].state is JobState.PENDING, "released, not left claimed"
    with pytest.raises(RuntimeError, match="has served already"):
        asyncio.run(worker.serve())  # (its client is closed: a second serve hung, deaf to signals)


def test_a_registration_of_no_concurrency_or_batch_is_refused(address: str) -> None:
    worker = Worker(address)
    with pytest.raises(ValueError, match="concurrency must be in 1"):
        worker.register("q", lambda ctx: None, concurrency=0)
    with pytest.raises(ValueError, match="batch_size must be at least 1"):
        worker.register("q", lambda ctx: None, batch_size=0)


def test_the_pool_holds_a_long_poll_for_every_queue(address: str, pl: PinLaterClient) -> None:
    """Each queue's idle loop holds a connection in a long poll: with more queues than the
    pool's 8 connections, polls waited for one another (an idle worker of 150 queues took 15 s
    to pick up a job). The pool takes one a queue, and two more."""
    queues = [f"pooled_{i}" for i in range(12)]
    for queue in queues:
        pl.create_queue(queue)
    worker = Worker(address)
    done = threading.Event()
    for queue in queues:
        worker.register(queue, lambda ctx: done.set())
    with running(worker):
        wait_for(lambda: worker.client.max_connections == len(queues) + 2, 30, what="the pool sized")
        pl.enqueue(queues[-1], [b"last"])
        assert done.wait(10), "the last queue's job picked up"
