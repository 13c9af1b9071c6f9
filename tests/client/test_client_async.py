"""``AsyncPinLaterClient``: the same basics as the sync client, awaited."""

from __future__ import annotations

import asyncio
import socket

import pytest

from pinlater.client import (
    Ack,
    AsyncPinLaterClient,
    Checkpoint,
    DequeuedJob,
    ErrorCode,
    Job,
    JobState,
    PinLaterClient,
    PinLaterConnectionError,
    QueueNotFound,
    RateLimited,
)
from tests.client.fixtures import PAUSED_QUEUE


def test_async_lifecycle(address: str, queue: str) -> None:
    async def main() -> None:
        async with AsyncPinLaterClient(address) as client:
            await client.create_queue(queue)
            assert queue in await client.queue_names()
            ds = await client.enqueue(queue, [b"a", Job("b", priority=2, attempts=4)])
            jobs = await client.dequeue(queue, 5)
            assert [j.descriptor for j in jobs] == ds and isinstance(jobs[1], DequeuedJob)
            assert jobs[1].attempts_allowed == 4
            await client.checkpoint(queue, [Checkpoint(ds[1], prepend_status="cp;")])
            await client.ack(queue, succeeded=[ds[0]], failed=[Ack(ds[1], "x", retry_delay=0)])
            found = await client.lookup(ds, include_body=True)
            assert found[ds[0]].state is JobState.SUCCEEDED
            assert found[ds[1]].state is JobState.PENDING and found[ds[1]].custom_status == "cp;x"
            assert await client.count(queue, JobState.PENDING, priority=2) == 1
            assert [j.descriptor for j in (await client.scan(queue, JobState.PENDING, 2)).jobs] == [ds[1]]
            assert await client.delete_jobs(queue, JobState.PENDING, 2) == 1
            assert await client.retry_failed(queue) == 0
            assert queue in await client.raw.getQueueNames()

    asyncio.run(main())


def test_one_client_serves_one_asyncio_run_after_another(address: str, queue: str) -> None:
    """A module-level client driven by ``asyncio.run`` per request: each run drops the closed
    loop's connections and starts over (closing them had raised "Event loop is closed")."""
    client = AsyncPinLaterClient(address)

    async def names() -> set[str]:
        return await client.queue_names()

    client_created = PinLaterClient(address)
    client_created.create_queue(queue)
    client_created.close()
    for _ in range(4):
        assert queue in asyncio.run(names())
    client.close()


def test_async_errors_and_failover(address: str, queue: str) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"

    async def main() -> None:
        async with AsyncPinLaterClient([dead, address], retries=0) as client:
            for _ in range(4):
                assert len(await client.enqueue(queue, [b"x"])) == 1
            with pytest.raises(QueueNotFound) as info:
                await client.dequeue("no_such_queue_async")
            assert info.value.code == ErrorCode.QUEUE_NOT_FOUND
            await client.create_queue(PAUSED_QUEUE)
            with pytest.raises(RateLimited):
                await client.dequeue(PAUSED_QUEUE)
        async with AsyncPinLaterClient(dead, connect_timeout=1) as client:
            with pytest.raises(PinLaterConnectionError) as down:
                await client.count(queue, JobState.PENDING)
            assert down.value.sent is False

    asyncio.run(main())
    with PinLaterClient(address) as sync:
        assert sync.count(queue, JobState.PENDING) == 4


def test_concurrent_async_calls_share_a_bounded_pool(address: str, queue: str) -> None:
    async def main() -> None:
        async with AsyncPinLaterClient(address, max_connections=3) as client:
            results = await asyncio.gather(*(client.enqueue(queue, [b"c"]) for _ in range(50)))
            assert len({d for r in results for d in r}) == 50
            [pool] = client._pools.values()
            assert len(pool.idle) <= 3

    asyncio.run(main())
