"""``JobContext.keys()`` / ``akeys()`` against a real server: a handler sees the dedup key it
was enqueued with, at the cost of one lookup the first time it asks and none if it never asks."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from pinlater.client import Job, JobState, PinLaterClient
from pinlater.worker import JobContext, JobKeys, Worker
from tests.support.wait import wait_for
from tests.worker.test_worker import running


def count_lookups(client: Any) -> list[list[str]]:
    """Record the descriptors of every ``lookup`` the client makes (the real call still happens)."""
    seen: list[list[str]] = []
    real: Callable[..., Any] = client.lookup

    def lookup(descriptors: Any, include_body: bool = False) -> Any:
        seen.append(list(descriptors))
        return real(descriptors, include_body)

    client.lookup = lookup
    return seen


def test_a_sync_handler_sees_its_keys_with_one_lookup(address: str, pl: PinLaterClient, queue: str) -> None:
    keyed, plain = pl.enqueue(queue, [Job(b"keyed", dedup_key="invoice-9"), b"plain"])
    worker = Worker(address, concurrency=2)
    lookups = count_lookups(worker.sync_client)
    seen: dict[str, tuple[JobKeys, JobKeys]] = {}

    @worker.register(queue)
    def handle(ctx: JobContext) -> None:
        seen[ctx.descriptor] = (ctx.keys(), ctx.keys())

    with running(worker):
        wait_for(lambda: pl.count(queue, JobState.SUCCEEDED) == 2, timeout=30, what="both jobs to succeed")
    assert seen[keyed] == (JobKeys("invoice-9", None),) * 2
    assert seen[plain] == (JobKeys(None, None),) * 2
    assert sorted(lookups) == sorted([[keyed], [plain]]), "one lookup per job, the second answer is cached"


def test_an_async_handler_sees_its_keys_and_one_that_never_asks_costs_nothing(
    address: str, pl: PinLaterClient, queue: str
) -> None:
    asks, quiet = pl.enqueue(queue, [Job(b"ask", dedup_key="k-async"), Job(b"quiet", dedup_key="k-quiet")])
    worker = Worker(address)
    lookups = count_lookups(worker.client)
    seen: list[JobKeys] = []

    @worker.register(queue)
    async def handle(ctx: JobContext) -> None:
        if ctx.body == b"ask":
            seen.extend([await ctx.akeys(), await ctx.akeys()])

    with running(worker):
        wait_for(lambda: pl.count(queue, JobState.SUCCEEDED) == 2, timeout=30, what="both jobs to succeed")
    assert seen == [JobKeys("k-async", None)] * 2
    assert lookups == [[asks]], f"no lookup for {quiet}, whose handler never asked"


def test_keys_from_an_async_handler_must_be_awaited(address: str, pl: PinLaterClient, queue: str) -> None:
    [d] = pl.enqueue(queue, [Job(b"x", dedup_key="k")])
    worker = Worker(address)
    errors: list[BaseException] = []

    @worker.register(queue)
    async def handle(ctx: JobContext) -> None:
        try:
            ctx.keys()
        except RuntimeError as exc:
            errors.append(exc)
        await asyncio.sleep(0)

    with running(worker):
        wait_for(lambda: pl.count(queue, JobState.SUCCEEDED) == 1, timeout=30, what="the job to succeed")
    assert len(errors) == 1 and "await ctx.akeys()" in str(errors[0])
    assert pl.lookup([d])[d].dedup_key == "k"


def test_a_job_deleted_while_in_hand_has_no_keys(address: str, pl: PinLaterClient, queue: str) -> None:
    pl.enqueue(queue, [b"doomed"])
    worker = Worker(address, concurrency=1)
    errors: list[BaseException] = []

    @worker.register(queue)
    def handle(ctx: JobContext) -> None:
        assert pl.delete_jobs(queue, JobState.IN_PROGRESS) == 1
        with pytest.raises(LookupError, match="not found") as info:
            ctx.keys()
        errors.append(info.value)

    with running(worker):
        wait_for(lambda: errors, timeout=30, what="the handler to ask")
    assert len(errors) == 1
