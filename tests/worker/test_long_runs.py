"""Jobs that run long, against a real server: claims renewed while a handler runs past the
server's claim timeout, and handler timeouts, with sync and async handlers alike."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter

import pytest

from pinlater.client import Job, JobState, PinLaterClient
from pinlater.worker import HandlerTimeout, JobContext, Worker
from tests.support.pinlater_server import ServerProcess
from tests.support.wait import wait_for
from tests.worker.test_prefetch import KINDS, handler
from tests.worker.test_worker import running


@pytest.mark.parametrize("kind", KINDS)
def test_a_job_running_past_the_claim_timeout_keeps_its_claim(kind: str, quick_claims: ServerProcess) -> None:
    """Claims time out after 2 s on this server; the job runs 3.5 s. Its claim is renewed every
    0.5 s, so the server does not hand it to the worker's free slot meanwhile (without renewal it
    ran twice, and the claim timeout charged it an attempt)."""
    queue = f"long_run_{kind}"
    address = f"127.0.0.1:{quick_claims.port}"
    with PinLaterClient(address, timeout=10) as pl:
        pl.create_queue(queue)
        [descriptor] = pl.enqueue(queue, [Job(b"long", attempts=2)])
        runs: Counter[str] = Counter()

        def count(ctx: JobContext) -> None:
            runs[ctx.descriptor] += 1

        worker = Worker(address, concurrency=2, prefetch=0, claim_renewal=0.5, long_poll=0.2)
        worker.register(queue, handler(kind, count, seconds=lambda ctx: 3.5))
        with running(worker):
            wait_for(lambda: pl.count(queue, JobState.SUCCEEDED) == 1, timeout=30, what="the job to succeed")
        info = pl.lookup([descriptor])[descriptor]
        assert runs[descriptor] == 1, "it ran once"
        assert info.attempts_remaining == 2, "no claim timed out (that charges an attempt)"
        assert worker.stats.claims_renewed >= 4


def test_a_renewal_keeps_a_later_run_after_the_handler_gave(quick_claims: ServerProcess) -> None:
    """A handler's checkpoint with a run-after takes a lease (on Redis, the job's IN_PROGRESS
    score); the renewals after it send that run-after, not now, so they never shorten it."""
    queue = "long_lease"
    address = f"127.0.0.1:{quick_claims.port}"
    lease = time.time() + 3600
    with PinLaterClient(address, timeout=10) as pl:
        pl.create_queue(queue)
        [descriptor] = pl.enqueue(queue, [Job(b"leased", attempts=2)])

        def leased(ctx: JobContext) -> None:
            ctx.checkpoint(run_after=lease)
            time.sleep(1.2)

        worker = Worker(address, concurrency=1, prefetch=0, claim_renewal=0.3, long_poll=0.2)
        worker.register(queue, leased)
        with running(worker):  # (a count leaves out a job whose run-after is later than now)
            wait_for(lambda: pl.lookup([descriptor])[descriptor].state is JobState.SUCCEEDED, 30, what="success")
        info = pl.lookup([descriptor])[descriptor]
        assert worker.stats.claims_renewed >= 2
        assert info.run_after_ms is not None and info.run_after_ms >= int(lease * 1000), "the lease was kept"


@pytest.mark.parametrize("kind", KINDS)
def test_a_handler_past_its_timeout_fails_its_job(kind: str, address: str, pl: PinLaterClient, queue: str) -> None:
    """The job fails as if the handler had raised ``HandlerTimeout``: its retry policy applies,
    and on its last attempt it ends FAILED. An async handler is cancelled; a sync handler's
    thread runs on (it cannot be stopped), and what it returns then is ignored."""
    [descriptor] = pl.enqueue(queue, [Job(b"stuck", attempts=1)])
    returned = threading.Event()
    cancelled = threading.Event()
    refused: list[BaseException] = []

    def sync_stuck(ctx: JobContext) -> None:
        time.sleep(1.5)
        try:  # its failure is acked: a release now would undo it
            ctx.retry_later(0)
        except HandlerTimeout as exc:
            refused.append(exc)
        returned.set()

    async def async_stuck(ctx: JobContext) -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    worker = Worker(address, concurrency=1, prefetch=0, handler_timeout=0.3, long_poll=0.2)
    worker.register(queue, sync_stuck if kind == "sync" else async_stuck)
    with running(worker):
        wait_for(lambda: pl.count(queue, JobState.FAILED) == 1, timeout=30, what="the job to fail")
        if kind == "sync":
            assert not returned.is_set(), "failed at its timeout, not once the handler returned"
            wait_for(returned.is_set, timeout=10, what="the handler to return")
            assert len(refused) == 1, "its checkpoint was refused"
        else:
            wait_for(cancelled.is_set, timeout=10, what="the handler to be cancelled")
    info = pl.lookup([descriptor])[descriptor]
    assert info.state is JobState.FAILED and "timeout of 0.3s" in info.custom_status
    assert (worker.stats.timed_out, worker.stats.failed, worker.stats.succeeded, worker.stats.released) == (1, 1, 0, 0)


def test_a_registration_timeout_overrides_the_workers(address: str, pl: PinLaterClient, queue: str) -> None:
    """``register(timeout=...)`` wins over ``Worker(handler_timeout=...)``: a quick job under a
    long registration timeout succeeds where the worker's would have failed it."""
    pl.enqueue(queue, [Job(b"quick enough", attempts=1)])
    worker = Worker(address, concurrency=1, prefetch=0, handler_timeout=0.05, long_poll=0.2)
    worker.register(queue, lambda ctx: time.sleep(0.3), timeout=10)
    with running(worker):
        wait_for(lambda: pl.count(queue, JobState.SUCCEEDED) == 1, timeout=30, what="the job to succeed")
    assert worker.stats.timed_out == 0


@pytest.mark.parametrize("after", ["returns", "runs on"])
def test_an_async_handler_that_swallows_its_cancellation_still_fails(
    after: str, address: str, pl: PinLaterClient, queue: str
) -> None:
    """An ``async def`` handler that catches the ``CancelledError`` of its timeout and returns
    has its result ignored; one that runs on after it (a retry loop, say) is failed while it
    runs, as a sync handler is, and its slot stays busy until it returns."""
    [descriptor] = pl.enqueue(queue, [Job(b"stubborn", attempts=1)])
    swallowed = threading.Event()
    release = asyncio.Event()
    loop: list[asyncio.AbstractEventLoop] = []

    async def stubborn(ctx: JobContext) -> str:
        loop.append(asyncio.get_running_loop())
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            swallowed.set()
        if after == "runs on":
            await release.wait()
        return "done anyway"

    worker = Worker(address, concurrency=1, prefetch=0, handler_timeout=0.3, long_poll=0.2)
    worker.register(queue, stubborn)
    with running(worker):
        wait_for(lambda: pl.count(queue, JobState.FAILED) == 1, timeout=30, what="the job to fail")
        assert swallowed.is_set()
        if after == "runs on":
            [runner] = worker.runners
            assert len(runner.in_hand) == 1 and len(runner.tasks) == 1, "still running: its slot is busy"
            loop[0].call_soon_threadsafe(release.set)
            wait_for(lambda: not runner.tasks, timeout=10, what="the handler to return")
    info = pl.lookup([descriptor])[descriptor]
    assert info.state is JobState.FAILED and "timeout of 0.3s" in info.custom_status
    assert (worker.stats.timed_out, worker.stats.failed, worker.stats.succeeded) == (1, 1, 0)


def test_a_registration_without_a_timeout_has_none(address: str, pl: PinLaterClient, queue: str) -> None:
    """``register(timeout=None)`` sets no limit for its queue, whatever the worker's default."""
    pl.enqueue(queue, [Job(b"slow but fine", attempts=1)])
    worker = Worker(address, concurrency=1, prefetch=0, handler_timeout=0.05, long_poll=0.2)
    worker.register(queue, lambda ctx: time.sleep(0.3), timeout=None)
    assert worker.registrations[queue].timeout is None
    with running(worker):
        wait_for(lambda: pl.count(queue, JobState.SUCCEEDED) == 1, timeout=30, what="the job to succeed")
    assert worker.stats.timed_out == 0
    worker.register("other", lambda ctx: None)
    assert worker.registrations["other"].timeout == 0.05, "the worker's default otherwise"


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf")])
def test_renewal_and_timeouts_must_be_positive_and_finite(bad: float) -> None:
    with pytest.raises(ValueError, match="positive and finite"):
        Worker("127.0.0.1:9", claim_renewal=bad)
    with pytest.raises(ValueError, match="positive and finite"):
        Worker("127.0.0.1:9", handler_timeout=bad)
    with pytest.raises(ValueError, match="positive and finite"):
        Worker("127.0.0.1:9").register("q", lambda ctx: None, timeout=bad)
    assert issubclass(HandlerTimeout, TimeoutError)
