"""Job bodies on MySQL: how long a body each table holds, the refusal naming the ALTER TABLE that
lifts a limit, and that nothing is ever truncated, against a real MariaDB.

Queues created here hold bodies up to a MEDIUMBLOB; tables the original created (its DDL,
``tests/support/original_mysql.py``) up to a BLOB. The server-level tests go through a real
``pinlater serve`` and the client generated from the original IDL.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.server.test_contract import Api
from tests.support.mariadb_server import MariaDBServer, shared_server
from tests.support.original_mysql import ORIGINAL_JOBS_TABLE
from tests.support.pinlater_server import ServerProcess

from pinlater.backends.base import CheckpointItem, JobFilter, JobState, NewJob
from pinlater.backends.mysql import Endpoint, MySQLShardConfig, MySQLStore
from pinlater.backends.mysql.bodies import BLOB_BYTES, MEDIUMBLOB_BYTES
from pinlater.errors import ErrorCode, PinLaterError

pytestmark = pytest.mark.mysql

T0 = 1_700_000_000_000
ENQUEUE_REJECTED = 430
ALTER = re.compile(r"run: (ALTER TABLE \S+ MODIFY body \w+ NOT NULL)$")


@pytest.fixture
def mariadb() -> MariaDBServer:
    server = shared_server()
    server.drop_queue_databases()
    return server


@pytest.fixture
def store(mariadb: MariaDBServer) -> Iterator[MySQLStore]:
    shard = MySQLStore("1", MySQLShardConfig(Endpoint(mariadb.host, mariadb.port), mariadb.user, mariadb.password))
    try:
        yield shard
    finally:
        shard.close()


def original_queue(server: MariaDBServer, database: str, priorities: int = 1) -> None:
    """A queue's database as the original created it (BLOB bodies)."""
    server.query(f"CREATE DATABASE {database}")
    for priority in range(1, priorities + 1):
        server.query(ORIGINAL_JOBS_TABLE.format(table=f"{database}.jobs_p{priority}"))


def job(body: bytes, priority: int = 1) -> NewJob:
    return NewJob(priority=priority, body=body, run_after_ms=T0, attempts_allowed=1)


def body_of(n: int, seed: int = 7) -> bytes:
    """``n`` bytes of every value, the escaped ones (quote, backslash, NUL...) included."""
    return bytes((i * seed + i // 251) % 256 for i in range(n))


# -- the store ----------------------------------------------------------------------------------


def test_queues_created_here_hold_bodies_up_to_a_mediumblob(store: MySQLStore, mariadb: MariaDBServer) -> None:
    store.create_queue("big", 2)
    column = mariadb.query(
        "SELECT DISTINCT DATA_TYPE, CHARACTER_MAXIMUM_LENGTH FROM information_schema.COLUMNS"
        " WHERE TABLE_SCHEMA = 'plq_1_big' AND COLUMN_NAME = 'body'",
    )
    assert column == [("mediumblob", MEDIUMBLOB_BYTES)]
    mib = body_of(1024 * 1024)
    ids = store.enqueue_jobs("big", [job(b"small"), job(mib, priority=2), job(mib[::-1])], T0)
    [got] = store.dequeue_jobs("big", 2, 1, "claim", T0, False)
    assert (got.local_id, got.body) == (ids[1], mib)
    [record] = store.lookup_jobs("big", [(1, ids[2])], True)
    assert record.body == mib[::-1]


def test_an_original_table_refuses_a_long_body_naming_the_alter_that_lifts_it(
    store: MySQLStore, mariadb: MariaDBServer
) -> None:
    original_queue(mariadb, "plq_1_legacy", priorities=2)
    body = body_of(70_000)
    with pytest.raises(PinLaterError) as info:
        store.enqueue_jobs("legacy", [job(b"small", priority=2), job(body)], T0)
    error = info.value
    assert error.code == ErrorCode.ENQUEUE_REJECTED
    assert "70000 bytes" in error.message and f"limit of {BLOB_BYTES} bytes" in error.message
    assert "`plq_1_legacy`.`jobs_p1`" in error.message and "BLOB" in error.message
    m = ALTER.search(error.message)
    assert m, error.message
    assert mariadb.query("SELECT COUNT(*) FROM plq_1_legacy.jobs_p2") == [(0,)], "nothing of the batch was written"

    mariadb.query(m.group(1))  # what the message says to run: the same enqueue now succeeds
    small_id, long_id = store.enqueue_jobs("legacy", [job(b"small", priority=2), job(body)], T0)
    [record] = store.lookup_jobs("legacy", [(1, long_id)], True)
    assert record.body == body, "stored whole"
    assert store.lookup_jobs("legacy", [(2, small_id)], True)[0].body == b"small"
    # The other table was left as it was, and still refuses.
    with pytest.raises(PinLaterError, match=r"`plq_1_legacy`\.`jobs_p2`"):
        store.enqueue_jobs("legacy", [job(body, priority=2)], T0)


def test_a_checkpoint_body_too_long_for_an_original_table_is_refused(store: MySQLStore, mariadb: MariaDBServer) -> None:
    original_queue(mariadb, "plq_1_legacy")
    [local_id] = store.enqueue_jobs("legacy", [job(b"first")], T0)
    store.dequeue_jobs("legacy", 1, 1, "claim-1", T0, False)
    item = CheckpointItem(priority=1, local_id=local_id, run_after_ms=T0, new_body=body_of(BLOB_BYTES + 1))
    with pytest.raises(PinLaterError, match=r"ALTER TABLE `plq_1_legacy`\.`jobs_p1` MODIFY body MEDIUMBLOB") as info:
        store.checkpoint_jobs("legacy", [item], "claim-1", T0)
    assert info.value.code == ErrorCode.ENQUEUE_REJECTED
    assert store.lookup_jobs("legacy", [(1, local_id)], True)[0].body == b"first"
    at_limit = CheckpointItem(priority=1, local_id=local_id, run_after_ms=T0, new_body=body_of(BLOB_BYTES))
    assert store.checkpoint_jobs("legacy", [at_limit], "claim-1", T0) == 1


def test_a_column_narrowed_behind_the_cache_refuses_rather_than_truncates(
    store: MySQLStore, mariadb: MariaDBServer
) -> None:
    store.create_queue("shrunk", 2)
    store.enqueue_jobs("shrunk", [job(body_of(70_000), priority=2)], T0)  # the store has learned MEDIUMBLOB
    mariadb.query("ALTER TABLE plq_1_shrunk.jobs_p1 MODIFY body BLOB NOT NULL")
    # The server's own default mode is lenient here: only the session's strict mode stops it.
    mariadb.query("SET GLOBAL sql_mode = ''")
    try:
        store.pool.discard_idle()  # new sessions, under the lenient global mode
        with pytest.raises(PinLaterError, match=r"limit of 65535 bytes of table `plq_1_shrunk`\.`jobs_p1`") as info:
            store.enqueue_jobs("shrunk", [job(body_of(80_000))], T0)
        assert info.value.code == ErrorCode.ENQUEUE_REJECTED
        with store.pool.transaction() as cur:
            cur.execute("SELECT @@SESSION.sql_mode")
            assert "STRICT_ALL_TABLES" in cur.fetchone()[0]
    finally:
        mariadb.query("SET GLOBAL sql_mode = DEFAULT")
    assert mariadb.query("SELECT LENGTH(body) FROM plq_1_shrunk.jobs_p1") == [], "nothing truncated, nothing written"
    assert store.count_jobs("shrunk", JobFilter(JobState.PENDING, 2, T0), None) == 1


def test_a_body_over_max_allowed_packet_is_refused_naming_it(store: MySQLStore, mariadb: MariaDBServer) -> None:
    store.create_queue("packet", 1)
    (default_packet,) = mariadb.query("SELECT @@GLOBAL.max_allowed_packet")[0]
    mariadb.query("SET GLOBAL max_allowed_packet = 1048576")
    try:
        store.pool.discard_idle()
        store.ping()  # a new connection reads the server's setting
        with pytest.raises(PinLaterError, match="max_allowed_packet of 1048576 bytes") as info:
            store.enqueue_jobs("packet", [job(body_of(500_000))], T0)  # 1,000,000 bytes hex-encoded
        assert info.value.code == ErrorCode.ENQUEUE_REJECTED and "SET GLOBAL max_allowed_packet" in info.value.message
        [local_id] = store.enqueue_jobs("packet", [job(body_of(400_000))], T0)
        assert store.lookup_jobs("packet", [(1, local_id)], True)[0].body == body_of(400_000)
    finally:
        mariadb.query("SET GLOBAL max_allowed_packet = %s", (default_packet,))


# -- through the server -------------------------------------------------------------------------


def serve(start_server: Callable[..., ServerProcess], tmp_path: Path, mariadb: MariaDBServer) -> ServerProcess:
    config = tmp_path / "mysql.json"
    config.write_text(json.dumps({"1": mariadb.shard_entry()}))
    return start_server("--backend", "mysql", "--backend-config", str(config))


def test_bodies_through_the_server(
    start_server: Callable[..., ServerProcess],
    open_client: Callable[[ServerProcess], Any],
    ttypes: Any,
    mariadb: MariaDBServer,
    tmp_path: Path,
) -> None:
    original_queue(mariadb, "plq_1_legacy")
    api = Api(open_client(serve(start_server, tmp_path, mariadb)), ttypes)

    # A queue the server creates: a 1 MiB body round-trips.
    api.create("big")
    mib = body_of(1024 * 1024, seed=13)
    [descriptor] = api.enqueue("big", api.job(mib))
    got = api.dequeue("big", limit=1)
    assert got.jobs == {descriptor: mib}
    api.ack("big", ok=[descriptor])

    # A table the original created: refused, naming the limit, the table and the ALTER TABLE.
    body = body_of(70_000)
    with pytest.raises(ttypes.PinLaterException) as info:
        api.enqueue("legacy", api.job(body))
    message = info.value.message
    assert info.value.errorCode == ENQUEUE_REJECTED
    assert "70000 bytes" in message and "limit of 65535 bytes" in message and "`plq_1_legacy`.`jobs_p1`" in message
    m = ALTER.search(message)
    assert m, message
    assert mariadb.query("SELECT COUNT(*) FROM plq_1_legacy.jobs_p1") == [(0,)]
    mariadb.query(m.group(1))
    [descriptor] = api.enqueue("legacy", api.job(body))
    assert api.lookup(descriptor, body=True)[descriptor].body == body
    assert mariadb.query("SELECT LENGTH(body) FROM plq_1_legacy.jobs_p1") == [(70_000,)]


def test_strict_mode_is_set_on_every_session(store: MySQLStore) -> None:
    with store.pool.transaction() as cur:
        cur.execute("SELECT @@SESSION.sql_mode, @@SESSION.time_zone")
        mode, zone = cur.fetchone()
    assert "STRICT_ALL_TABLES" in mode.split(",") and zone == "+00:00"
