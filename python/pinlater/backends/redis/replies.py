"""Parsing the Redis scripts' replies into ``ClaimedJob`` and ``JobRecord``."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from pinlater._pinlater import redis_claimed_jobs
from pinlater.backends.base import ClaimedJob, JobRecord, JobState
from pinlater.backends.redis.keys import ms_from_seconds


def claimed_jobs(out: list[Any]) -> list[ClaimedJob]:
    """Jobs from a dequeue or reserve reply (after the evicted count and cut, 7 values per job),
    ordered by (run after, id). Read in Rust: in Python this was about a tenth of the server's
    CPU under load (``benches/python/test_native_bench.py``, group redis-reply-100)."""
    return redis_claimed_jobs(out, _CLAIMED_JOB)


_CLAIMED_JOB = functools.partial(tuple.__new__, ClaimedJob)
"""Builds a ClaimedJob from one tuple of its fields, in C (NamedTuple's own ``__new__`` is Python)."""


def job_record(
    priority: int,
    local_id: int,
    state: JobState,
    score: bytes,
    fields: Sequence[Any],
    dedup_key: bytes | None = None,
    group_key: bytes | None = None,
    expire_at: bytes | int | None = None,
    updated_is_score: bool = False,
) -> JobRecord:
    """A record from a script row: score, then al, ar, cs, ca, ua, cd, bd (None when absent),
    the dedup key the ids hash holds for the job (None when none), its group (None when none)
    and its expiry in ms (None when none). ``updated_is_score``: the job's updated time is its
    score, not its ua (a SUCCEEDED job of the compact layout: lua_compact/lib/records.lua)."""
    allowed, remaining, status, created, updated, claim, body = fields
    if updated_is_score:
        updated = score
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
        dedup_key=None if dedup_key is None else dedup_key.decode("utf-8", "replace"),
        group_key=None if group_key is None else group_key.decode("utf-8", "replace"),
        expire_at_ms=None if expire_at is None else int(expire_at),
    )


def _int(value: bytes | None) -> int:
    return 0 if value is None else int(value)
