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

from pinlater.backends.base import JobState
from pinlater.backends.redis import RedisEndpoint, RedisShardConfig, RedisStore
from pinlater.backends.sharded import ShardedBackend
from pinlater.backends.shardmap import Shard, ShardMap
from pinlater.config import Settings
from pinlater.errors import PinLaterError

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
