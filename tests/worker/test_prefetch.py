"""Prefetch against a real server: its bound, acks riding on dequeues, prefetched jobs handed back
at stop and before the claim timeout, with sync and async handlers alike."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from pinlater.client import Job, JobState, PinLaterClient
from pinlater.worker import JobContext, Worker
from tests.support.pinlater_server import ServerProcess
from tests.support.wait import wait_for
from tests.worker.test_worker import running

KINDS = ["sync", "async"]


def handler(
    kind: str,
    body: Callable[[JobContext], None],
    gate: threading.Event | None = None,
    seconds: Callable[[JobContext], float] = lambda ctx: 0.0,
) -> Any:
    """``body(ctx)`` as a plain or an ``async def`` handler, which then takes ``seconds(ctx)``
    (a workload, slept) and, for a job whose body is ``b"slow"``, waits for ``gate`` if any."""
    if kind == "sync":

        def run(ctx: JobContext) -> None:
            body(ctx)
            if took := seconds(ctx):
                time.sleep(took)
            if gate is not None and ctx.body == b"slow":
                gate.wait(60)

        return run

    async def run_async(ctx: JobContext) -> None:
        body(ctx)
        if took := seconds(ctx):
            await asyncio.sleep(took)
        if gate is not None and ctx.body == b"slow":
            await asyncio.to_thread(gate.wait, 60)

    return run_async


def in_progress_peak(pl: PinLaterClient, queue: str, stop: threading.Event, seen: list[int]) -> threading.Thread:
    """A thread recording the server's IN_PROGRESS count of ``queue`` until ``stop``."""

    def sample() -> None:
        with PinLaterClient(pl.servers) as probe:
            while not stop.is_set():
                seen.append(probe.count(queue, JobState.IN_PROGRESS))

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("kind", KINDS)
def test_jobs_in_hand_never_exceed_concurrency_plus_prefetch(
    kind: str, address: str, pl: PinLaterClient, queue: str
) -> None:
    n, concurrency, prefetch = 200, 2, 5
    ds = pl.enqueue(queue, [b"j"] * n)
    runs: Counter[str] = Counter()

    def count(ctx: JobContext) -> None:
        runs[ctx.descriptor] += 1

    worker = Worker(address, concurrency=concurrency, prefetch=prefetch, batch_size=50)
    # A quick job, not instant: jobs in hand overlap the next dequeue.
    worker.register(queue, handler(kind, count, seconds=lambda ctx: 0.002))
    assert worker.registrations[queue].batch_size == concurrency + prefetch, "a batch never exceeds the bound"
    stop, seen = threading.Event(), [0]
    sampler = in_progress_peak(pl, queue, stop, seen)
    try:
        with running(worker):
            wait_for(lambda: pl.count(queue, JobState.SUCCEEDED) == n, timeout=60, what="all jobs to succeed")
    finally:
        stop.set()
        sampler.join(10)
    assert sorted(runs) == sorted(ds) and set(runs.values()) == {1}
    [runner] = worker.runners
    assert concurrency < runner.peak_in_hand <= concurrency + prefetch, "it prefetched, within the bound"
    assert max(seen) <= concurrency + prefetch
    assert worker.stats.returned == 0


@pytest.mark.parametrize("kind", KINDS)
def test_a_handler_of_unknown_speed_gets_no_prefetch(kind: str, address: str, pl: PinLaterClient, queue: str) -> None:
    pl.enqueue(queue, [b"slow"] * 10)
    gate = threading.Event()
    started: list[str] = []
    worker = Worker(address, concurrency=2, prefetch=8)
    worker.register(queue, handler(kind, lambda ctx: started.append(ctx.descriptor), gate))
    with running(worker):
        try:
            wait_for(lambda: len(started) == 2, timeout=30, what="both slots to be busy")
            for _ in range(5):  # no job has finished: nothing is claimed beyond the free slots
                assert pl.count(queue, JobState.IN_PROGRESS) == 2
            assert worker.runners[0].peak_in_hand == 2
        finally:
            gate.set()  # before the stop: an async handler's thread would hold asyncio.run() up


def test_acks_ride_on_the_next_dequeue(address: str, pl: PinLaterClient, queue: str) -> None:
    n = 150
    pl.enqueue(queue, [b"j"] * n)
    # No ack timer, no long poll (which sends acks ahead of it): only dequeues can carry acks.
    worker = Worker(address, ack_interval=30.0, long_poll=0, poll_interval=(0.01, 0.01))
    worker.register(queue, lambda ctx: None)
    with running(worker):
        wait_for(lambda: worker.stats.acks_sent == n, timeout=60, what="every ack")
        assert pl.count(queue, JobState.SUCCEEDED) == n
        assert worker.stats.ack_requests == 0, "every ack rode on a dequeue"


@pytest.mark.parametrize("kind", KINDS)
def test_acks_not_yet_sent_are_flushed_at_stop(kind: str, address: str, pl: PinLaterClient, queue: str) -> None:
    [d] = pl.enqueue(queue, [b"slow"])
    gate = threading.Event()
    # After the empty dequeue the next is 30 s away and so is the ack timer: only the stop sends it.
    worker = Worker(address, ack_interval=30.0, long_poll=0, poll_interval=(30.0, 30.0))
    worker.register(queue, handler(kind, lambda ctx: None, gate))
    with running(worker):
        wait_for(lambda: worker.stats.empty_dequeues >= 1, timeout=30, what="an empty dequeue")
        gate.set()
        wait_for(lambda: worker.stats.succeeded == 1, timeout=30, what="the job to finish")
        assert pl.lookup([d])[d].state is JobState.IN_PROGRESS, "its ack waits for a dequeue or the timer"
    assert pl.lookup([d])[d].state is JobState.SUCCEEDED
    assert (worker.stats.acks_sent, worker.stats.ack_requests) == (1, 1)


def enqueue_fast_then_slow(pl: PinLaterClient, queue: str, fast: int, slow: int, attempts: int = 3) -> list[str]:
    """Quick jobs first (priority 1), so the worker learns to prefetch, then slow ones (priority 2)."""
    pl.enqueue(queue, [Job(b"fast", priority=1, attempts=attempts) for _ in range(fast)])
    return pl.enqueue(queue, [Job(b"slow", priority=2, attempts=attempts) for _ in range(slow)])


@pytest.mark.parametrize("kind", KINDS)
def test_stop_hands_back_prefetched_jobs_at_once(kind: str, address: str, pl: PinLaterClient, queue: str) -> None:
    slow = enqueue_fast_then_slow(pl, queue, fast=30, slow=12)
    gate = threading.Event()
    started: list[str] = []

    def note(ctx: JobContext) -> None:
        if ctx.body == b"slow":
            started.append(ctx.descriptor)

    # Neither the prefetch timeout nor the grace period can be what hands them back.
    worker = Worker(address, concurrency=2, prefetch=6, batch_size=8, prefetch_timeout=300, grace_period=300)
    worker.register(queue, handler(kind, note, gate))
    with running(worker):
        try:
            wait_for(
                lambda: len(started) == 2 and pl.count(queue, JobState.PENDING) < 10,
                timeout=30,
                what="both slots on slow jobs, more of them prefetched",
            )
            worker.stop()
            wait_for(
                lambda: pl.count(queue, JobState.IN_PROGRESS) == 2 and pl.count(queue, JobState.PENDING) == 10,
                timeout=10,
                what="the prefetched jobs back in PENDING while the running ones still run",
            )
            gate.set()
            wait_for(lambda: worker.stats.succeeded == 32, timeout=30, what="the running jobs to finish")
        finally:
            gate.set()
    assert worker.stats.dequeued > 32, "slow jobs were prefetched"
    assert worker.stats.returned == worker.stats.dequeued - 32, "and handed back"
    assert len(started) == 2, "no prefetched job started after the stop"
    assert pl.count(queue, JobState.SUCCEEDED) == 32
    assert pl.count(queue, JobState.IN_PROGRESS) == 0
    found = pl.lookup(slow)
    assert len(found) == 12, "none lost"
    pending = [i for i in found.values() if i.state is JobState.PENDING]
    assert len(pending) == 10 and {i.attempts_remaining for i in pending} == {3}, "no attempt charged"


@pytest.mark.parametrize("kind", KINDS)
def test_prefetched_jobs_behind_a_slow_one_do_not_time_out(kind: str, quick_claims: ServerProcess) -> None:
    queue = f"slow_behind_{kind}"
    address = f"127.0.0.1:{quick_claims.port}"
    with PinLaterClient(address, timeout=10) as pl:
        pl.create_queue(queue)
        ds = enqueue_fast_then_slow(pl, queue, fast=20, slow=4, attempts=2)
        runs: Counter[str] = Counter()

        def count(ctx: JobContext) -> None:
            runs[ctx.descriptor] += 1

        # One slot: prefetched slow jobs would wait 0.8 s each, the fourth past the 2 s claim
        # timeout, were they not handed back after 0.5 s.
        worker = Worker(address, concurrency=1, prefetch=6, batch_size=7, prefetch_timeout=0.5)
        # A slow job takes 0.8 s, well within the claim timeout itself.
        worker.register(queue, handler(kind, count, seconds=lambda ctx: 0.8 if ctx.body == b"slow" else 0.0))
        with running(worker):
            wait_for(lambda: pl.count(queue, JobState.SUCCEEDED) == 24, timeout=60, what="all jobs to succeed")
        found = pl.lookup(ds)
        assert {i.attempts_remaining for i in found.values()} == {2}, "no claim timed out (it charges an attempt)"
        assert [runs[d] for d in ds] == [1, 1, 1, 1], "each slow job ran once"
        assert worker.stats.returned >= 1, "prefetched slow jobs were handed back"


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf")])
def test_prefetch_times_must_be_positive_and_finite(bad: float) -> None:
    """A NaN timeout would never hand a job back (and spin the loop that waits for room)."""
    with pytest.raises(ValueError, match="positive and finite"):
        Worker("127.0.0.1:9", prefetch_timeout=bad)
    with pytest.raises(ValueError, match="positive and finite"):
        Worker("127.0.0.1:9", prefetch_horizon=bad)


def test_worker_processes_on_one_host_have_sources_of_their_own(address: str, pl: PinLaterClient, queue: str) -> None:
    """A checkpoint applies under a claim containing the caller's source: a sibling process's
    hand-back must not move a job this process holds. The pid in brackets keeps them apart,
    even where one pid is a prefix of the other."""
    import os
    import subprocess
    import sys

    from pinlater.client import Checkpoint

    mine = Worker(address).source
    # the same program on the same host, as two `pinlater worker` processes are
    code = f"import sys; sys.argv[0] = {sys.argv[0]!r}; from pinlater.worker import Worker; print(Worker('x:9').source)"
    theirs = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert mine.endswith(f"[{os.getpid()}]") and theirs != mine
    pl.enqueue(queue, [b"held"])
    with PinLaterClient(pl.servers, source=mine) as me, PinLaterClient(pl.servers, source=theirs) as sibling:
        [job] = me.dequeue(queue, 1)
        sibling.checkpoint(queue, [Checkpoint(job.descriptor, move_to_pending=True)])
        assert pl.count(queue, JobState.IN_PROGRESS) == 1  # the sibling's hand-back did not apply
        me.checkpoint(queue, [Checkpoint(job.descriptor, move_to_pending=True)])
        assert pl.count(queue, JobState.PENDING) == 1
