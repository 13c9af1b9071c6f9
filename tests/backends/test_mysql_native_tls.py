"""TLS on the MySQL store's Rust hot path (``NativeMySQLHotPath``), on real MariaDB servers: it
negotiates TLS whenever the server offers it and goes plain when it does not, as the PyMySQL
pool does (its default "preferred" mode, nothing verified). A server that requires secure
transport, a user that requires SSL on a server that only offers it (both refuse a plain
session, so a working hot path proves its sessions are encrypted), a server without TLS, and
a server whose TLS handshake fails: never retried in clear text.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import pymysql
import pytest
from tests.support.mariadb_server import MariaDBServer, shared_server

from pinlater._pinlater import AckGroup, NewJobBatch
from pinlater.backends.base import AckItem, ClaimedJob, JobState, NewJob
from pinlater.backends.mysql import Endpoint, MySQLShardConfig, MySQLStore, names
from pinlater.backends.mysql.native_hot import NativeMySQLHotPath
from pinlater.errors import ShardConnectionError

pytestmark = pytest.mark.mysql

T = TypeVar("T")
T0 = 1_700_000_000_000
QUEUE = "tlsq"


class Harness:
    """A store and its native hot path on an event loop of their own."""

    def __init__(self, server: MariaDBServer, *, num_auto_retries: int = 1) -> None:
        config = MySQLShardConfig(Endpoint(server.host, server.port), server.user, server.password)
        self.store = MySQLStore("1", config, pool_size=2, num_auto_retries=num_auto_retries)
        self.loop = asyncio.new_event_loop()
        self.pool = ThreadPoolExecutor(2)
        self.hot = NativeMySQLHotPath(self.store, self._offload)

    def _offload(self, fn: Callable[..., T], /, *args: object) -> Awaitable[T]:
        return asyncio.get_running_loop().run_in_executor(self.pool, fn, *args)

    def round_trip(self) -> None:
        """Enqueue, dequeue and ack through the hot path; check the rows through PyMySQL."""
        jobs = [NewJob(1, f"job-{i}".encode(), T0, 2) for i in range(3)]
        ids = self.loop.run_until_complete(self.hot.enqueue_jobs(QUEUE, NewJobBatch(jobs), T0)).to_list()
        assert ids == [1, 2, 3]
        claimed = self.loop.run_until_complete(self.hot.dequeue_jobs(QUEUE, 1, 10, "claim", T0, False))
        got = [ClaimedJob._make(job) for job in claimed.to_list()]
        assert [(job.local_id, job.body) for job in got] == [(1, b"job-0"), (2, b"job-1"), (3, b"job-2")]
        acks = AckGroup([AckItem(1, 1, "done"), AckItem(1, 2, "done")], [AckItem(1, 3, "failed", 0)])
        self.loop.run_until_complete(self.hot.ack_jobs(QUEUE, acks, T0 + 1))
        found = self.store.lookup_jobs(QUEUE, [(1, 1), (1, 2), (1, 3)], True)
        assert [r.state for r in found] == [JobState.SUCCEEDED, JobState.SUCCEEDED, JobState.PENDING]

    def close(self) -> None:
        self.hot.close()
        self.store.close()
        self.loop.close()
        self.pool.shutdown()


def plain_connection(server: MariaDBServer) -> pymysql.connections.Connection[tuple[object, ...]]:
    return pymysql.connect(
        host=server.host, port=server.port, user=server.user, password=server.password, ssl_disabled=True
    )


def tls_sessions_accepted(server: MariaDBServer) -> int:
    return int(dict(server.query("SHOW GLOBAL STATUS LIKE 'Ssl_finished_accepts'"))["Ssl_finished_accepts"])


@pytest.fixture
def harnesses() -> Iterator[Callable[[MariaDBServer], Harness]]:
    made: list[Harness] = []

    def make(server: MariaDBServer) -> Harness:
        made.append(Harness(server))
        return made[-1]

    yield make
    for h in made:
        h.close()


def test_a_server_that_requires_secure_transport(tmp_path: Path, harnesses: Callable[[MariaDBServer], Harness]) -> None:
    with MariaDBServer(tmp_path / "mariadb", tls=True, require_secure_transport=True) as server:
        with pytest.raises(pymysql.err.OperationalError):  # the server refuses plain sessions
            plain_connection(server).close()
        h = harnesses(server)
        h.store.create_queue(QUEUE, 2)
        h.round_trip()
        h.close()


def test_a_user_that_requires_ssl_on_a_server_that_offers_it(
    tmp_path: Path, harnesses: Callable[[MariaDBServer], Harness]
) -> None:
    with MariaDBServer(tmp_path / "mariadb", tls=True) as server:
        plain_connection(server).close()  # the server takes plain sessions ...
        for host in ("127.0.0.1", "localhost"):
            server.query("ALTER USER %s@%s REQUIRE SSL", (server.user, host))
        with pytest.raises(pymysql.err.OperationalError):  # ... but not from this user
            plain_connection(server).close()
        h = harnesses(server)
        h.store.create_queue(QUEUE, 2)
        before = tls_sessions_accepted(server)
        h.round_trip()
        assert tls_sessions_accepted(server) > before  # the hot path's own sessions (root's is the socket)


def test_a_server_without_tls(harnesses: Callable[[MariaDBServer], Harness]) -> None:
    server = shared_server()
    server.drop_queue_databases()
    assert dict(server.query("SHOW VARIABLES LIKE 'have_ssl'"))["have_ssl"] != "YES"
    h = harnesses(server)
    h.store.create_queue(QUEUE, 2)
    h.round_trip()


def test_a_failed_tls_handshake_is_not_retried_in_clear_text(tmp_path: Path) -> None:
    # The server offers TLS 1.1 only, which rustls refuses (as Python's ssl does with OpenSSL 3).
    with MariaDBServer(tmp_path / "mariadb", tls=True, extra_args=("--tls-version=TLSv1.1",)) as server:
        assert dict(server.query("SHOW VARIABLES LIKE 'have_ssl'"))["have_ssl"] == "YES"
        plain_connection(server).close()  # a plain session would be let in
        server.query(f"CREATE DATABASE {names.quoted_database('1', QUEUE)}")  # only connecting can fail
        h = Harness(server, num_auto_retries=0)
        try:
            with pytest.raises(ShardConnectionError, match=r"(?i)protocol.?version"):  # nor does PyMySQL
                h.store.lookup_jobs(QUEUE, [(1, 1)], True)
            with pytest.raises(ShardConnectionError, match=r"(?i)protocol.?version"):
                h.loop.run_until_complete(h.hot.enqueue_jobs(QUEUE, NewJobBatch([NewJob(1, b"x", T0, 1)]), T0))
            assert server.query(
                "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = %s", (server.user,)
            ) == [(0,)]
        finally:
            h.close()
