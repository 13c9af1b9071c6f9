"""What the original PinLater wrote to MySQL, for tests that serve its databases as they are."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

#: The original's CREATE_JOBS_TABLE (MySQLQueries.java), as a database it created has it.
ORIGINAL_JOBS_TABLE = """
CREATE TABLE {table}
( local_id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT
, state TINYINT NOT NULL
, claim_descriptor VARCHAR(200)
, attempts_allowed INT
, attempts_remaining INT NOT NULL
, custom_status VARCHAR(5000)
, updated_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP
, created_at TIMESTAMP NOT NULL
, run_after TIMESTAMP NOT NULL
, body BLOB NOT NULL
, PRIMARY KEY (local_id), INDEX (state, run_after), INDEX (claim_descriptor)
 ) ENGINE=INNODB
"""


def seed_original_queue(
    conn: Any, shard: str, queue: str, jobs: Sequence[tuple[int, int, bytes]], num_priorities: int = 3
) -> None:
    """Create a queue on one shard as the original did (database ``plq_{shard}_{queue}``, its
    DDL for each priority) and write ``jobs`` given as (priority, state, body): created ten
    minutes ago, runnable (or finished) since a minute ago, 3 attempts allowed (none left if
    FAILED, state 3). ``conn`` is a root connection with autocommit on."""
    database = f"plq_{shard}_{queue}"
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {database}")
        for priority in range(1, num_priorities + 1):
            cur.execute(ORIGINAL_JOBS_TABLE.format(table=f"{database}.jobs_p{priority}"))
        for priority, state, body in jobs:
            cur.execute(
                f"INSERT INTO {database}.jobs_p{priority} (state, attempts_allowed, attempts_remaining,"
                " custom_status, created_at, run_after, body)"
                " VALUES (%s, 3, %s, '', NOW() - INTERVAL 10 MINUTE, NOW() - INTERVAL 1 MINUTE, %s)",
                (state, 0 if state == 3 else 3, body),
            )
