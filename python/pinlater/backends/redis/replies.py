"""Parsing the Redis scripts' replies into ``ClaimedJob`` and ``JobRecord``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pinlater.backends.base import ClaimedJob, JobRecord, JobState
from pinlater.backends.redis.keys import ms_from_seconds


def claimed_jobs(out: Sequence[Any]) -> list[ClaimedJob]:
    """Jobs from a dequeue or reserve reply (after the evicted count, 7 values per job),
    ordered by (run after, id)."""
    rows = [out[i : i + 7] for i in range(1, len(out), 7)]
    rows.sort(key=lambda row: (float(row[1]), int(row[0])))
    return [
        ClaimedJob(
            local_id=int(row[0]),
            body=row[2],
            attempts_allowed=_int(row[3]),
            attempts_remaining=_int(row[4]),
            created_at_ms=ms_from_seconds(row[5]),
            updated_at_ms=ms_from_seconds(row[6]),
        )
        for row in rows
    ]


def job_record(priority: int, local_id: int, state: JobState, score: bytes, fields: Sequence[Any]) -> JobRecord:
    """A record from a script row: score, then al, ar, cs, ca, ua, cd, bd (None when absent)."""
    allowed, remaining, status, created, updated, claim, body = fields
    return JobRecord(
        priority=priority,
        local_id=local_id,
        state=state,
        attempts_allowed=_int(allowed),
        attempts_remaining=_int(remaining),
        custom_status="" if status is None else status.decode("utf-8", "replace"),
        created_at_ms=ms_from_seconds(created),
        run_after_ms=ms_from_seconds(score),
        updated_at_ms=ms_from_seconds(updated),
        claim_descriptor=None if claim is None else claim.decode("utf-8", "replace"),
        body=body,
    )


def _int(value: bytes | None) -> int:
    return 0 if value is None else int(value)
