"""The original's MySQL naming scheme, in one place, and the only source of SQL identifiers.

A queue lives in one database per shard, ``plq_{shard}_{queue}``, with one table per priority,
``jobs_p{priority}`` (``MySQLBackendUtils`` in the original), and ``dedup_keys``, ``claim_lock``,
``expiring``, ``expired_count`` and ``schedules``, ours alone.
Shard names carry no underscore, so a database name splits back into shard and queue at its
first two underscores, as the original did.
With ``MYSQL_NUM_DB_PER_QUEUE`` = n, one MySQL instance serves the shards ``{id}``, ``{id}d1`` ..
``{id}d{n-1}``: database 0 keeps the bare id for backward compatibility.

Identifiers are built only here, from names checked against ``[A-Za-z0-9_]+`` (shards:
``[A-Za-z0-9]+``), and quoted; every value goes to the server as a query parameter.
"""

from __future__ import annotations

import re

from pinlater.errors import ErrorCode, PinLaterError

DB_PREFIX = "plq"
#: MySQL's limit on database names (characters).
MAX_DB_NAME_LENGTH = 64

_QUEUE_RE = re.compile(r"[A-Za-z0-9_]+")
_SHARD_RE = re.compile(r"[A-Za-z0-9]+")


def check_shard_name(shard: str) -> str:
    """Return ``shard`` if it can be part of a database name, else raise ``ValueError``."""
    if not _SHARD_RE.fullmatch(shard):
        raise ValueError(f"MySQL shard name must be letters and digits only, not {shard!r}")
    return shard


def shard_name(shard_id: int, db_index: int) -> str:
    """The original's shard name for database ``db_index`` of the instance numbered ``shard_id``."""
    return str(shard_id) if db_index == 0 else f"{shard_id}d{db_index}"


def database_name(shard: str, queue: str) -> str:
    """``plq_{shard}_{queue}``; QUEUE_NAME_INVALID / QUEUE_NAME_TOO_LONG when it cannot be one."""
    if not _QUEUE_RE.fullmatch(queue):
        raise PinLaterError(ErrorCode.QUEUE_NAME_INVALID, f"queue name must match \\w+: {queue!r}")
    name = f"{DB_PREFIX}_{check_shard_name(shard)}_{queue}"
    if len(name) > MAX_DB_NAME_LENGTH:
        raise PinLaterError(
            ErrorCode.QUEUE_NAME_TOO_LONG,
            f"queue name is too long by {len(name) - MAX_DB_NAME_LENGTH} characters: database {name!r}"
            f" would pass the {MAX_DB_NAME_LENGTH}-character limit",
        )
    return name


def quoted_database(shard: str, queue: str) -> str:
    """The queue's database as a quoted identifier."""
    return f"`{database_name(shard, queue)}`"


def quoted_table(shard: str, queue: str, priority: int) -> str:
    """The jobs table of one priority, as a quoted, database-qualified identifier."""
    if not 1 <= int(priority) <= 127:
        raise PinLaterError(ErrorCode.PRIORITY_NOT_SUPPORTED, f"priority {priority} is not supported")
    return f"`{database_name(shard, queue)}`.`jobs_p{int(priority)}`"


#: The table of a queue's dedup key records (#17), beside its jobs tables.
DEDUP_KEYS_TABLE = "dedup_keys"


def quoted_dedup_keys_table(shard: str, queue: str) -> str:
    """The queue's dedup key records table, as a quoted, database-qualified identifier."""
    return f"`{database_name(shard, queue)}`.`{DEDUP_KEYS_TABLE}`"


#: The table of a queue's claim lock row (maxInProgress), beside its jobs tables.
CLAIM_LOCK_TABLE = "claim_lock"


def quoted_claim_lock_table(shard: str, queue: str) -> str:
    """The queue's claim lock table, as a quoted, database-qualified identifier."""
    return f"`{database_name(shard, queue)}`.`{CLAIM_LOCK_TABLE}`"


#: The table indexing a queue's PENDING jobs by expiry (#18), beside its jobs tables.
EXPIRING_TABLE = "expiring"


def quoted_expiring_table(shard: str, queue: str) -> str:
    """The queue's expiry index table, as a quoted, database-qualified identifier."""
    return f"`{database_name(shard, queue)}`.`{EXPIRING_TABLE}`"


#: The table of a queue's expired count (#18), beside its jobs tables.
EXPIRED_COUNT_TABLE = "expired_count"
#: The table of a queue's schedules (#18), beside its jobs tables.
SCHEDULES_TABLE = "schedules"


def quoted_side_table(shard: str, queue: str, table: str) -> str:
    """One of the queue's tables of ours (``EXPIRED_COUNT_TABLE``, ``SCHEDULES_TABLE``), quoted."""
    if table not in (EXPIRED_COUNT_TABLE, SCHEDULES_TABLE):
        raise ValueError(f"not a side table of a queue: {table!r}")
    return f"`{database_name(shard, queue)}`.`{table}`"


def queue_database_pattern(shard: str) -> str:
    """A LIKE pattern (a parameter value) matching the databases of ``shard``'s queues."""
    return f"{DB_PREFIX}\\_{check_shard_name(shard)}\\_%"


#: A LIKE pattern (a parameter value) matching the jobs tables' names, ``jobs_p{priority}``.
JOBS_TABLE_PATTERN = "jobs\\_p%"
_JOBS_TABLE_RE = re.compile(r"jobs_p([1-9][0-9]{0,2})")


def priority_from_table(table: str) -> int | None:
    """The priority a jobs table holds (``jobs_p2`` -> 2), or None if it is not a jobs table."""
    m = _JOBS_TABLE_RE.fullmatch(table)
    return int(m.group(1)) if m else None


def queue_from_database(database: str, shard: str) -> str | None:
    """The queue a database holds on ``shard``, or None if it is not one of the shard's queues."""
    parts = database.split("_", 2)
    if len(parts) != 3 or parts[0] != DB_PREFIX or parts[1] != shard or not _QUEUE_RE.fullmatch(parts[2]):
        return None
    return parts[2]
