"""Stale pooled connections after a store restart, and which calls are repeated on a fresh one,
against real redis-server and MariaDB processes (the server-level test under load is
``tests/server/test_store_restarts.py``). The embedded store has no connection to go stale.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from tests.support.mariadb_server import MariaDBServer
from tests.support.redis_server import RedisServer

from pinlater._pinlater import AckGroup, LocalIds, NewJobBatch
from pinlater.backends.base import AckItem, JobFilter, JobState, NewJob
from pinlater.backends.mysql import Endpoint, MySQLShardConfig, MySQLStore
from pinlater.backends.mysql.transactions import run_transaction
from pinlater.backends.redis import RedisEndpoint, RedisShardConfig, RedisStore
from pinlater.backends.redis.connections import NOT_REPEATED_ONCE_SENT, SENT, repeatable
from pinlater.backends.redis.scripts import SCRIPT_NAMES
from pinlater.config import Settings
from pinlater.errors import ShardConnectionError

T0 = 1_700_000_000_000
POOL = 4


def jobs(n: int) -> list[NewJob]:
    return [NewJob(1, f"job-{i}".encode(), T0, 3) for i in range(n)]


# -- Redis --------------------------------------------------------------------------------------


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    with RedisServer(tmp_path / "redis", appendonly=True, appendfsync="always") as server:
        yield server


@pytest.mark.redis
def test_redis_restart_leaves_no_failed_call_on_either_pool(redis_server: RedisServer) -> None:
    config = RedisShardConfig(RedisEndpoint(redis_server.host, redis_server.port), layout="original")
    store = RedisStore("1", config, Settings(backend_connections_per_shard=POOL))
    try:

        async def main() -> None:
            store.create_queue("q", 1)

            async def enqueue_all() -> list[LocalIds]:
                batch = NewJobBatch(jobs(1))
                return await asyncio.gather(*(store.aio.enqueue_jobs("q", batch, T0) for _ in range(POOL)))

            await enqueue_all()  # every connection of the asyncio pool is open and idle

            errors: list[BaseException] = []

            def enqueue() -> None:
                try:
                    store.enqueue_jobs("q", jobs(1), T0)
                except BaseException as exc:
                    errors.append(exc)

            def sync_calls() -> None:
                threads = [threading.Thread(target=enqueue) for _ in range(POOL)]
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join(30)

            await asyncio.to_thread(sync_calls)  # and the blocking pool's, as far as threads overlap
            await asyncio.to_thread(redis_server.restart)  # the event loop runs meanwhile, as in a server
            # Every pooled connection is dead; not one call may fail on them.
            assert all(len(ids) == 1 for ids in await enqueue_all())
            await asyncio.to_thread(sync_calls)
            assert errors == []
            claimed = (await store.aio.dequeue_jobs("q", 1, 100, "claim", T0, False)).to_list()
            await store.aio.ack_jobs("q", AckGroup([AckItem(1, job[0]) for job in claimed], []), T0)
            store.ping()
            assert store.count_jobs("q", JobFilter(JobState.SUCCEEDED, 1, T0), None) == 4 * POOL
            await store.aio.aclose()

        asyncio.run(main())
    finally:
        store.close()


def test_which_redis_scripts_are_repeated_after_a_dead_connection() -> None:
    dead = redis.ConnectionError("Connection closed by server.")
    assert NOT_REPEATED_ONCE_SENT == {"enqueue_jobs", "enqueue_keyed_jobs", "retry_failed_jobs", "delete_jobs"}
    assert NOT_REPEATED_ONCE_SENT < set(SCRIPT_NAMES)
    for script in [*SCRIPT_NAMES, "ping"]:
        token = SENT.set(False)
        try:
            assert repeatable(script, dead), f"{script}: nothing was sent, so it is always repeated"
            SENT.set(True)
            assert repeatable(script, dead) is (script not in NOT_REPEATED_ONCE_SENT), script
            assert not repeatable(script, redis.TimeoutError("Timeout reading from socket")), script
            assert not repeatable(script, redis.ConnectionError("No connection available.")), script
            assert not repeatable(script, redis.ResponseError("LOADING Redis is loading the dataset")), script
        finally:
            SENT.reset(token)


# -- MySQL --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mariadb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MariaDBServer]:
    with MariaDBServer(tmp_path_factory.mktemp("mariadb-stale")) as server:
        yield server


def mysql_store(server: MariaDBServer, **kwargs: object) -> MySQLStore:
    config = MySQLShardConfig(Endpoint(server.host, server.port), server.user, server.password)
    return MySQLStore("1", config, **kwargs)  # type: ignore[arg-type]


@pytest.mark.mysql
def test_mysql_restart_costs_no_call_even_without_auto_retries(mariadb: MariaDBServer) -> None:
    store = mysql_store(mariadb, pool_size=POOL, socket_timeout=3.0, num_auto_retries=0)
    try:
        store.create_queue("stale", 1)
        held = [store.pool.connection() for _ in range(POOL)]
        for conn in held:
            conn.__enter__()
        for conn in reversed(held):
            conn.__exit__(None, None, None)  # POOL idle connections
        mariadb.restart()
        errors: list[BaseException] = []

        def enqueue() -> None:
            try:
                store.enqueue_jobs("stale", jobs(2), T0)
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=enqueue) for _ in range(POOL)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert errors == []
        assert store.count_jobs("stale", JobFilter(JobState.PENDING, 1, T0), None) == 2 * POOL
    finally:
        store.close()


@pytest.mark.mysql
@pytest.mark.parametrize("repeatable", [False, True], ids=["enqueue-like", "ack-like"])
def test_mysql_commit_cut_off_is_repeated_only_where_harmless(mariadb: MariaDBServer, repeatable: bool) -> None:
    store = mysql_store(mariadb, pool_size=1, socket_timeout=3.0, num_auto_retries=1)
    admin = mariadb.admin_connection()
    try:
        store.create_queue("cut", 1)
        runs: list[int] = []

        def op(cur: object) -> int:
            # The first run's session is killed after its INSERT, before COMMIT: the client
            # cannot tell whether COMMIT was applied.
            cur.execute(
                "INSERT INTO plq_1_cut.jobs_p1 (state, attempts_remaining, created_at, run_after, body)"  # type: ignore[attr-defined]
                " VALUES (0, 1, NOW(), NOW(), 'x')"
            )
            if not runs:
                cur.execute("SELECT CONNECTION_ID()")  # type: ignore[attr-defined]
                (session,) = cur.fetchone()  # type: ignore[attr-defined]
                with admin.cursor() as kill:
                    kill.execute(f"KILL CONNECTION {int(session)}")
            runs.append(1)
            return len(runs)

        if repeatable:
            assert run_transaction(store.pool, "1", 1, "cut", op, repeatable=True) == 2
        else:
            with pytest.raises(ShardConnectionError, match=r"COMMIT.*not repeated"):
                run_transaction(store.pool, "1", 1, "cut", op, repeatable=False)
            assert runs == [1]
        # The killed session's INSERT was never committed: one row at most, the repeat's.
        assert store.count_jobs("cut", JobFilter(JobState.PENDING, 1, T0 * 2), None) == int(repeatable)
    finally:
        admin.close()
        store.close()
