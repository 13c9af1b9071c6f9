"""The enqueue INSERTs of the MySQL backend: one multi-row INSERT per priority (cut so that each
stays well under max_allowed_packet), and the new ids of each recovered in row order.

The rows are rendered by the extension (``_pinlater.mysql_insert_statements``), which escapes
every value as PyMySQL escapes the same parameters (a test compares the two byte for byte):
a batch crosses into Rust once instead of going through PyMySQL's per-value escaping, which
cost more CPU than anything else on the enqueue path.
"""

from __future__ import annotations

from collections.abc import Sequence

from pymysql.constants import SERVER_STATUS

from pinlater._pinlater import mysql_insert_statements
from pinlater.backends.base import NewJob
from pinlater.backends.mysql import queries
from pinlater.backends.mysql.job_rows import CUSTOM_STATUS_LIMIT
from pinlater.backends.mysql.pool import ConnectionPool
from pinlater.backends.mysql.transactions import Cursor

#: How ids of a multi-row INSERT are recovered; None picks from the server's settings.
INSERT_ID_STRATEGIES = ("last_insert_id", "returning", "per_row")

#: max_allowed_packet when the server's is not known yet (MariaDB's default).
DEFAULT_MAX_ALLOWED_PACKET = 16 * 1024 * 1024


def statement_budget(pool: ConnectionPool) -> int:
    """Most bytes one INSERT may take: half of max_allowed_packet, for a wide margin."""
    info = pool.server_info
    return (info.max_allowed_packet if info else DEFAULT_MAX_ALLOWED_PACKET) // 2


def insert_jobs(
    pool: ConnectionPool, strategy: str | None, cur: Cursor, table: str, jobs: Sequence[NewJob], now_ms: int
) -> list[int]:
    """Insert ``jobs`` (one priority's) as PENDING into ``table``; the new ids in job order."""
    strategy = strategy or default_insert_id_strategy(pool)
    sql = queries.ENQUEUE_JOBS_RETURNING if strategy == "returning" else queries.ENQUEUE_JOBS
    head, tail = sql.around_rows(table=table)
    statements = mysql_insert_statements(
        head,
        tail,
        jobs,
        now_ms,
        budget=0 if strategy == "per_row" else statement_budget(pool),
        custom_status_limit=CUSTOM_STATUS_LIMIT,
        no_backslash_escapes=bool(cur.connection.server_status & SERVER_STATUS.SERVER_STATUS_NO_BACKSLASH_ESCAPES),
    )
    ids: list[int] = []
    for rows, statement in statements:
        cur.execute(statement)  # no parameters: PyMySQL sends the bytes as they are
        if strategy == "returning":
            new_ids = [int(row[0]) for row in cur.fetchall()]
        else:
            first = int(cur.lastrowid)
            info = pool.server_info
            step = info.auto_increment_increment if info else 1
            new_ids = list(range(first, first + step * cur.rowcount, step))
        if len(new_ids) != rows:
            raise RuntimeError(f"inserted {rows} jobs into {table} but recovered {len(new_ids)} ids")
        ids.extend(new_ids)
    return ids


def default_insert_id_strategy(pool: ConnectionPool) -> str:
    info = pool.server_info
    if info is None or info.consecutive_insert_ids:
        return "last_insert_id"
    return "returning" if info.supports_insert_returning else "per_row"
