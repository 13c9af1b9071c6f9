"""Job control (#18) seen from the worker library against a real server: an expired job never
reaches a handler, a handler sees its job's expiry beside its keys, and a handler cancels jobs
(another one, or its own: then a failure is final)."""

from __future__ import annotations

import time

from pinlater.client import Job, JobState, PinLaterClient
from pinlater.worker import JobContext, JobKeys, Worker, constant
from tests.support.wait import wait_for
from tests.worker.test_worker import running


def now_ms() -> int:
    return int(time.time() * 1000)


def test_an_expired_job_never_reaches_a_handler(address: str, pl: PinLaterClient, queue: str) -> None:
    now = now_ms()
    expired, runs, overtaken = pl.enqueue(
        queue,
        [
            Job(b"expired", expire_at_ms=now - 1),
            Job(b"runs", expire_at_ms=now + 3_600_000),
            # ready only after its expiry: it can never run
            Job(b"overtaken", run_after_ms=now + 1_500, expire_at_ms=now + 1_000),
        ],
    )
    seen: list[bytes] = []
    worker = Worker(address, concurrency=2)
    worker.register(queue, lambda ctx: seen.append(ctx.body))

    def ended(d: str) -> bool:
        return pl.lookup([d])[d].state == JobState.FAILED

    with running(worker):
        wait_for(lambda: pl.lookup([runs])[runs].state == JobState.SUCCEEDED, timeout=30, what="the live job")
        wait_for(lambda: ended(expired) and ended(overtaken), timeout=30, what="both expired jobs to fail")
    assert seen == [b"runs"]
    for d in (expired, overtaken):
        info = pl.lookup([d])[d]
        assert "expired" in info.custom_status and info.attempts_remaining == 0


def test_a_handler_sees_its_expiry_with_its_keys(address: str, pl: PinLaterClient, queue: str) -> None:
    at = now_ms() + 600_000
    expiring, plain = pl.enqueue(queue, [Job(b"e", expire_at_ms=at, group_key="g"), b"plain"])
    seen: dict[str, JobKeys] = {}
    worker = Worker(address, concurrency=2)

    @worker.register(queue)
    async def handle(ctx: JobContext) -> None:
        seen[ctx.descriptor] = await ctx.akeys()

    with running(worker):
        wait_for(lambda: pl.count(queue, JobState.SUCCEEDED) == 2, timeout=30, what="both jobs to succeed")
    assert seen[expiring] == JobKeys(None, "g", at)
    assert seen[plain] == JobKeys() and seen[plain].expire_at_ms is None


def test_a_sync_handler_cancels_a_waiting_job(address: str, pl: PinLaterClient, queue: str) -> None:
    [waiting] = pl.enqueue(queue, [Job(b"waiting", run_after_ms=now_ms() + 3_600_000)])
    [canceller] = pl.enqueue(queue, [waiting.encode()])
    changed: list[int] = []
    worker = Worker(address, concurrency=1)

    @worker.register(queue)
    def handle(ctx: JobContext) -> None:
        changed.append(ctx.cancel([ctx.body.decode()]))

    with running(worker):
        wait_for(lambda: pl.lookup([canceller])[canceller].state == JobState.SUCCEEDED, timeout=30, what="the run")
    assert changed == [1]
    info = pl.lookup([waiting])[waiting]
    assert info.state == JobState.FAILED and info.custom_status.endswith("cancelled")


def test_a_handler_that_cancels_its_own_job_and_fails_is_not_retried(
    address: str, pl: PinLaterClient, queue: str
) -> None:
    [d] = pl.enqueue(queue, [Job(b"x", attempts=5)])
    runs: list[int] = []
    worker = Worker(address, retry=constant(0.0))

    @worker.register(queue)
    async def handle(ctx: JobContext) -> None:
        runs.append(ctx.attempt)
        await ctx.acancel([ctx.descriptor])
        raise RuntimeError("giving up")

    with running(worker):
        wait_for(lambda: pl.lookup([d])[d].state == JobState.FAILED, timeout=30, what="the job to fail")
    assert runs == [1], "no attempt after the cancel"
    status = pl.lookup([d])[d].custom_status
    assert "cancelled" in status and "giving up" in status
