"""The MySQL backend's enqueue INSERTs, rendered by the extension (``inserts.py``,
``_pinlater.mysql_insert_statements``): byte for byte what PyMySQL sends for the same
parameters, values that survive the trip to a real MariaDB, and cutting under the packet size.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from pymysql.constants import SERVER_STATUS
from tests.support.mariadb_server import MariaDBServer, shared_server

from pinlater._pinlater import mysql_insert_statements
from pinlater.backends.base import NewJob
from pinlater.backends.mysql import Endpoint, MySQLShardConfig, MySQLStore, queries
from pinlater.backends.mysql.db_time import TS_MAX_MS, TS_MIN_MS, from_db_time, to_db_time
from pinlater.backends.mysql.job_rows import CUSTOM_STATUS_LIMIT

pytestmark = pytest.mark.mysql

T0 = 1_700_000_000_123
Q = "insert_queue"
TABLE = "`plq_1_insert_queue`.`jobs_p1`"

#: Jobs whose values exercise every escape, cut and clamp.
TRICKY = [
    NewJob(1, bytes(range(256)), T0, 3, "every escape: ' \" \\ \0 \n \r \x1a %s %% done"),
    NewJob(1, b"", T0 + 1, 1, ""),
    NewJob(1, b"'; DROP TABLE x; --\\", T0 - 86_400_000, 7, "unicode: é € 𝄞 🎉 and a quote ' at the end'"),
    NewJob(1, b"\\'\\\\'", -5, 2, "\\"),  # run_after before TIMESTAMP's range: clamped up
    NewJob(1, b"far", 2**70, 2, "x" * 10),  # past the range (and past 64 bits): clamped down
    NewJob(1, b"late", TS_MAX_MS + 1, 2**31 - 1, "€" * (CUSTOM_STATUS_LIMIT + 7)),  # cut by characters
    NewJob(1, b"\x00" * 70, TS_MIN_MS, 2, "🎉" * CUSTOM_STATUS_LIMIT + "!"),
]


def pymysql_reference(cur: Any, jobs: Sequence[NewJob], now_ms: int) -> bytes:
    """The statement PyMySQL renders from the store's former parameters (its own escaping)."""
    now = to_db_time(now_ms)
    params: list[Any] = []
    for job in jobs:
        params += [0, job.attempts_allowed, job.attempts_allowed, job.custom_status[:CUSTOM_STATUS_LIMIT]]
        params += [now, now, to_db_time(job.run_after_ms), job.body]
    sql = queries.ENQUEUE_JOBS.render(table=TABLE, rows=(len(jobs), 8))
    text: str = cur.mogrify(sql, params)
    return text.encode("utf-8", "surrogateescape")


def rendered(
    jobs: Sequence[NewJob], now_ms: int, *, budget: int = 1 << 24, nbe: bool = False
) -> list[tuple[int, bytes]]:
    head, tail = queries.ENQUEUE_JOBS.around_rows(table=TABLE)
    return mysql_insert_statements(
        head, tail, jobs, now_ms, budget=budget, custom_status_limit=CUSTOM_STATUS_LIMIT, no_backslash_escapes=nbe
    )


@pytest.fixture
def store() -> Iterator[MySQLStore]:
    server = shared_server()
    server.drop_queue_databases()
    made = MySQLStore("1", MySQLShardConfig(Endpoint(server.host, server.port), server.user, server.password))
    made.create_queue(Q, 1)
    yield made
    made.close()


def set_no_backslash_escapes(cur: Any, on: bool) -> None:
    cur.execute(
        "SET SESSION sql_mode = CONCAT(@@sql_mode, ',NO_BACKSLASH_ESCAPES')" if on else "SET SESSION sql_mode = DEFAULT"
    )
    assert bool(cur.connection.server_status & SERVER_STATUS.SERVER_STATUS_NO_BACKSLASH_ESCAPES) == on


@pytest.mark.parametrize("no_backslash_escapes", [False, True])
def test_statements_are_what_pymysql_sends(store: MySQLStore, no_backslash_escapes: bool) -> None:
    with store.pool.connection() as conn, conn.cursor() as cur:
        set_no_backslash_escapes(cur, no_backslash_escapes)
        try:
            for jobs in ([TRICKY[0]], TRICKY, TRICKY[::-1] * 3):
                [(rows, statement)] = rendered(jobs, T0, nbe=no_backslash_escapes)
                assert rows == len(jobs)
                assert statement == pymysql_reference(cur, jobs, T0)
        finally:
            set_no_backslash_escapes(cur, False)


@pytest.mark.parametrize("no_backslash_escapes", [False, True])
def test_values_survive_the_trip(store: MySQLStore, no_backslash_escapes: bool) -> None:
    with store.pool.connection() as conn, conn.cursor() as cur:
        set_no_backslash_escapes(cur, no_backslash_escapes)
        try:
            [(_, statement)] = rendered(TRICKY, T0, nbe=no_backslash_escapes)
            cur.execute(statement)
            first = int(cur.lastrowid)
            conn.commit()
        finally:
            set_no_backslash_escapes(cur, False)
    found = store.lookup_jobs(Q, [(1, first + k) for k in range(len(TRICKY))], True)
    assert len(found) == len(TRICKY)
    for job, record in zip(TRICKY, found, strict=True):
        assert record.body == job.body
        assert record.custom_status == job.custom_status[:CUSTOM_STATUS_LIMIT]
        assert record.attempts_allowed == record.attempts_remaining == job.attempts_allowed
        assert record.run_after_ms == min(max(job.run_after_ms, TS_MIN_MS), TS_MAX_MS)
        assert record.created_at_ms == T0
        assert from_db_time(to_db_time(record.run_after_ms)) == record.run_after_ms


def test_the_store_enqueues_tricky_jobs_of_several_priorities(store: MySQLStore) -> None:
    store.create_queue(Q, 2)
    jobs = [
        NewJob(1 + k % 2, job.body, job.run_after_ms, job.attempts_allowed, job.custom_status)
        for k, job in enumerate(TRICKY)
    ]
    ids = store.enqueue_jobs(Q, jobs, T0)
    found = store.lookup_jobs(Q, [(job.priority, i) for job, i in zip(jobs, ids, strict=True)], True)
    assert [(r.priority, r.body, r.custom_status) for r in found] == [
        (j.priority, j.body, j.custom_status[:CUSTOM_STATUS_LIMIT]) for j in jobs
    ]


def test_rows_are_cut_under_the_budget_in_order() -> None:
    jobs = [NewJob(1, f"job-{i}".encode() * (1 + i % 5), T0, 2, "s" * (i % 3)) for i in range(50)]
    [(_, whole)] = rendered(jobs, T0)
    budget = len(whole) // 7
    pieces = rendered(jobs, T0, budget=budget)
    assert len(pieces) >= 7
    assert sum(rows for rows, _ in pieces) == len(jobs)
    assert all(len(statement) <= budget for _, statement in pieces)
    head, _ = queries.ENQUEUE_JOBS.around_rows(table=TABLE)
    # The pieces' rows, joined, are the whole statement's rows.
    assert b", ".join(statement[len(head) :] for _, statement in pieces) == whole[len(head) :]
    assert [rows for rows, _ in rendered(jobs[:3], T0, budget=0)] == [1, 1, 1]
    assert rendered([], T0) == []


def test_a_small_max_allowed_packet_cuts_one_enqueue_into_several_inserts(tmp_path: Path) -> None:
    with MariaDBServer(tmp_path / "small-packet", extra_args=("--max-allowed-packet=16384",)) as server:
        store = MySQLStore(
            "1", MySQLShardConfig(Endpoint(server.host, server.port), server.user, server.password), pool_size=1
        )
        try:
            store.create_queue(Q, 1)
            jobs = [NewJob(1, f"{i:05d}".encode() * 40, T0, 2) for i in range(200)]  # ~200 KB of hex
            with store.pool.connection() as conn, conn.cursor() as cur:
                cur.execute("SHOW SESSION STATUS LIKE 'Com_insert'")
                before = int(cur.fetchone()[1])
            ids = store.enqueue_jobs(Q, jobs, T0)
            with store.pool.connection() as conn, conn.cursor() as cur:
                cur.execute("SHOW SESSION STATUS LIKE 'Com_insert'")
                inserts = int(cur.fetchone()[1]) - before
            assert inserts >= 200 * 2 * 200 // 16384
            found = store.lookup_jobs(Q, [(1, i) for i in ids], True)
            assert [r.body for r in found] == [j.body for j in jobs]
        finally:
            store.close()


def test_type_errors_name_the_job() -> None:
    with pytest.raises(TypeError, match=r"jobs\[1\]\.body must be bytes"):
        rendered([TRICKY[1], NewJob(1, "text", T0, 2)], T0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"jobs\[0\]\.custom_status must be str"):
        rendered([NewJob(1, b"", T0, 2, None)], T0)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        rendered("not jobs", T0)  # type: ignore[arg-type]
