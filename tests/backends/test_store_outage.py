"""A store that stops answering (its redis-server SIGSTOPped) under calls whose callers gave up:
the calls queued for a store thread fail at their turn once the shard is known to have failed,
instead of each waiting out the socket timeout in turn, and the shard's pings keep threads of
their own. Before, 40 queued counts on 2 threads held the store pool for 20 timeouts, and every
later call, the pings too, waited behind them."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Any

import pytest
from tests.support.redis_server import RedisServer

from pinlater.backends.base import JobState, NewJob
from pinlater.backends.redis import RedisEndpoint, RedisShardConfig, RedisStore
from pinlater.backends.sharded import ShardedBackend
from pinlater.backends.shardmap import Shard, ShardMap
from pinlater.broker import BrokerPolicy, DequeueBroker
from pinlater.config import Settings
from pinlater.errors import PinLaterError
from pinlater.server.metrics import Metrics

TIMEOUT = 1.0  # BACKEND_SOCKET_TIMEOUT_SECONDS
QUEUED = 40
THREADS = 2


@pytest.mark.redis
def test_calls_queued_for_a_store_that_stopped_answering_fail_at_their_turn(tmp_path: Path) -> None:
    with RedisServer(tmp_path / "redis") as server:
        assert server.pid is not None
        config = RedisShardConfig(RedisEndpoint(server.host, server.port))
        store = RedisStore("1", config, Settings(backend_socket_timeout_seconds=TIMEOUT))
        backend = ShardedBackend(ShardMap([Shard("1", store)]), num_priorities=1, parallelism=THREADS)
        reached = []  # the counts that reached the store
        count_jobs = store.count_jobs

        def counted(*args: Any) -> int:
            reached.append(args)
            return count_jobs(*args)

        store.count_jobs = counted  # type: ignore[method-assign]

        async def count() -> int:
            return await backend.count_jobs("q", JobState.PENDING, None, False, None)

        async def main() -> tuple[list[int | BaseException], float, int, int]:
            await backend.create_queue("q")
            loop = asyncio.get_running_loop()
            os.kill(server.pid, signal.SIGSTOP)
            try:
                started = loop.time()
                answers = await asyncio.gather(*(count() for _ in range(QUEUED)), return_exceptions=True)
                took = loop.time() - started
                stopped = len(reached)
            finally:
                os.kill(server.pid, signal.SIGCONT)
            return answers, took, stopped, await count()  # served again once the store answers

        try:
            answers, took, stopped, after = asyncio.run(main())
        finally:
            backend.close()
    assert all(isinstance(a, PinLaterError) for a in answers), answers
    # Only the calls on the threads when the store stopped wait out a timeout; the other 38 are
    # refused at their turn (before: each waited, 20 timeouts on 2 threads, 20 s).
    assert stopped == THREADS, f"{stopped} of {QUEUED} queued calls reached the stopped store"
    assert took < 3 * TIMEOUT, f"{QUEUED} queued calls took {took:.1f} s"
    assert after == 0


@pytest.mark.redis
def test_a_dequeue_that_no_shard_answered_fails_though_other_calls_marked_shards_meanwhile(tmp_path: Path) -> None:
    """Both shards' Redis stop while a dequeue waits on its first shard, and other calls mark
    both shards unhealthy meanwhile (as concurrent calls meeting the stopped stores do). The
    walk then skipped the second shard rather than fail there, and with one failure of two it
    answered "no jobs" (5 of 9 dequeues of a probe on a stopped MariaDB)."""
    with RedisServer(tmp_path / "a") as a, RedisServer(tmp_path / "b") as b:
        settings = Settings(backend_socket_timeout_seconds=TIMEOUT)
        servers = {"a": a, "b": b}
        stores = [RedisStore(n, RedisShardConfig(RedisEndpoint(s.host, s.port)), settings) for n, s in servers.items()]
        shards = [Shard(store.name, store) for store in stores]
        backend = ShardedBackend(ShardMap(shards), num_priorities=1, parallelism=THREADS)

        async def main() -> BaseException | None:
            await backend.create_queue("q")
            for server in (a, b):
                assert server.pid is not None
                os.kill(server.pid, signal.SIGSTOP)
            try:
                walk = asyncio.ensure_future(backend.dequeue_jobs("q", 10, "worker"))
                deadline = asyncio.get_running_loop().time() + 5
                while not backend._in_flight:  # the walk's call on its first shard is out
                    assert asyncio.get_running_loop().time() < deadline
                    await asyncio.sleep(0.01)
                for shard in shards:
                    shard.mark_unhealthy("a concurrent call failed")
                try:
                    got = await walk
                except PinLaterError as exc:
                    return exc
                raise AssertionError(f"answered {got} with every store stopped")
            finally:
                for server in (a, b):
                    os.kill(server.pid, signal.SIGCONT)  # type: ignore[arg-type]

        try:
            error = asyncio.run(main())
        finally:
            backend.close()
    assert isinstance(error, PinLaterError) and "every shard failed during dequeue" in error.message, error


@pytest.mark.redis
def test_dequeues_of_made_up_queues_through_the_broker_keep_nothing_while_the_store_is_down(tmp_path: Path) -> None:
    """While the store cannot answer, each queue name a peer's dequeues made up kept an empty
    buffer in the broker for good (a dequeue makes its queue's buffer, then its refill fails).
    Now a failed refill drops a buffer left empty; a real queue's is made again once the store
    is back, and serves its jobs."""
    with RedisServer(tmp_path / "redis", appendonly=True) as server:
        config = RedisShardConfig(RedisEndpoint(server.host, server.port))
        store = RedisStore("1", config, Settings(backend_socket_timeout_seconds=TIMEOUT))
        backend = ShardedBackend(ShardMap([Shard("1", store)]), num_priorities=1, parallelism=THREADS)
        broker = DequeueBroker(backend, BrokerPolicy(100, 0, 20_000), Metrics())

        store.create_queue("q", 1)
        store.enqueue_jobs("q", [NewJob(1, b"job", 0, 1)], 0)

        async def main() -> None:
            server.stop()
            for i in range(20):
                with pytest.raises(PinLaterError):
                    await broker.dequeue(f"made-up-{i}", 10, "worker")
            with pytest.raises(PinLaterError):
                await broker.dequeue("q", 10, "worker")
            await asyncio.sleep(0)  # (a refill's done callbacks run on the loop's next turn)
            assert broker._buffers == {}, "no buffer is kept for a refill that failed"
            server.start()
            shard = backend.shards.get("1")
            assert shard is not None
            await backend.ping(shard)  # (the server's health loop does this)
            assert len(await broker.dequeue("q", 10, "worker")) == 1, "the queue is served again"
            assert list(broker._buffers) == ["q"]
            await broker.stop()
            await backend.aclose()

        try:
            asyncio.run(main())
        finally:
            backend.close()
