"""Row conversion for the MySQL backend: column limits, SELECT rows to
``ClaimedJob``/``JobRecord``, and a ``JobFilter`` to statement arguments."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from pinlater.backends.base import ClaimedJob, JobFilter, JobRecord, JobState
from pinlater.backends.mysql.db_time import TS_MAX_MS, TS_MIN_MS, from_db_time, to_db_time

#: The original's CUSTOM_STATUS_SIZE_BYTES, the width of the custom_status column.
CUSTOM_STATUS_LIMIT = 5000
#: The claim_descriptor column is VARCHAR(200).
MAX_CLAIM_LENGTH = 200


def filter_args(where: JobFilter) -> tuple[int, datetime, datetime]:
    """(state, run_after from, run_after to) for count/scan/delete (the body regex is matched
    in the server: body_filtered.py)."""
    if where.future is None:
        low, high = TS_MIN_MS, TS_MAX_MS
    elif where.future:
        low, high = where.now_ms + 1, TS_MAX_MS
    else:
        low, high = TS_MIN_MS, where.now_ms
    return (int(where.state), to_db_time(low), to_db_time(high))


def in_claim_order(rows: Sequence[Sequence[Any]]) -> list[Sequence[Any]]:
    """The rows of ``select_claimed_jobs.sql`` (``run_after`` last) in the order they were
    claimed: by ``(run_after, local_id)``, the ORDER BY of ``dequeue_jobs.sql``."""
    return sorted(rows, key=lambda row: (row[6], int(row[0])))


def claimed_job(row: Sequence[Any]) -> ClaimedJob:
    # local_id, body, attempts_allowed, attempts_remaining, created_at, updated_at
    return ClaimedJob(
        local_id=int(row[0]),
        body=bytes(row[1]),
        attempts_allowed=int(row[2] or 0),
        attempts_remaining=int(row[3]),
        created_at_ms=from_db_time(row[4]),
        updated_at_ms=from_db_time(row[5]),
    )


def job_record(priority: int, row: Sequence[Any], body: bytes | None, dedup_key: str | None = None) -> JobRecord:
    # local_id, state, attempts_allowed, attempts_remaining, custom_status, created_at, run_after,
    # updated_at, claim_descriptor, expire_at
    return JobRecord(
        priority=priority,
        local_id=int(row[0]),
        state=JobState(int(row[1])),
        attempts_allowed=int(row[2] or 0),
        attempts_remaining=int(row[3]),
        custom_status=row[4] or "",
        created_at_ms=from_db_time(row[5]),
        run_after_ms=from_db_time(row[6]),
        updated_at_ms=from_db_time(row[7]),
        claim_descriptor=row[8],
        body=None if body is None else bytes(body),
        dedup_key=dedup_key,
        expire_at_ms=None if row[9] is None else int(row[9]),
    )
