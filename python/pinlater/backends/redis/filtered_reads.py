"""Filtered reads of the Redis backend: a ``JobFilter``'s score range, paging through
scan_jobs.lua, and body regex matching.

Body regex filters (count, scan, delete) cannot run in Lua, which has no regular expressions:
the store pages through the candidates with their bodies, a page at a time (bounded in rows and
in bytes of bodies: ``REGEX_PAGE_SIZE`` and ``REGEX_PAGE_BYTES`` in store.py, so large bodies
cost the server's reply buffer and the client one page of bytes at a time), and the extension
matches each page with the interpreter released, in linear time, within the call's time budget
(``body_filter.BodyFilter``). These calls always run on the server's thread pool, never on the
event loop (``AsyncHotPath`` has no filtered reads). The pages are separate reads, so a concurrent
change may be seen between pages (deletes themselves are guarded per id).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NamedTuple

from pinlater.backends.base import JobFilter, JobState, ScanCursor
from pinlater.backends.body_filter import BodyFilter
from pinlater.backends.redis.keys import ms_from_seconds, seconds_arg
from pinlater.backends.redis.keys_compact import CompactQueueKeys, QueueKeyNames, dedup_end_keys, ready_keys
from pinlater.backends.redis.rules import Tail
from pinlater.backends.redis.script_calls import ShardScripts


def score_range(where: JobFilter) -> tuple[str, str]:
    """ZRANGEBYSCORE bounds of a filter: run after (or the state's time) <= now, > now, or any."""
    now = seconds_arg(where.now_ms)
    if where.future is None:
        return "-inf", "+inf"
    if where.future:
        return f"({now}", "+inf"
    return "-inf", now


def read_sets(keys: QueueKeyNames, where: JobFilter) -> list[str]:
    """The keys a read of a filter covers: its state's set, and for PENDING the held set, hold
    expiry set and holders hash (held jobs are PENDING; see ``lua/lib/holds.lua``), and in the
    compact layout the ready list and the waiting set (``lua_compact/lib/groups.lua``)."""
    set_key = keys.set_key(where.priority, where.state)
    if where.state == JobState.PENDING:
        sets = [set_key, *keys.hold_keys(where.priority), *ready_keys(keys, where.priority)]
        if isinstance(keys, CompactQueueKeys):
            sets.append(keys.waiting_key(where.priority))
        return sets
    return [set_key]


def delete_call(
    keys: QueueKeyNames, where: JobFilter, limit: int, ids: list[Any], tail: Tail
) -> tuple[list[str], list[Any]]:
    """The ``KEYS`` and ``ARGV`` of delete_jobs.lua for a filter: a range, or exactly ``ids``.
    The compact script also takes the state, the priority, now and the groups' tail."""
    low, high = score_range(where)
    key_list = [keys.exists_key, *read_sets(keys, where)]
    args: list[Any] = [keys.queue, keys.jobs_arg, low, high, limit]
    if isinstance(keys, CompactQueueKeys):
        tail_keys, tail_args = tail
        key_list += [*dedup_end_keys(keys), *tail_keys]
        args += [int(where.state), *tail_args, where.priority, where.now_ms]
    return key_list, args + ids


class Page(NamedTuple):
    """One call of scan_jobs.lua: evicted members removed, members looked at (evicted ones
    included: the next page's offset is ``looked - evicted`` further, less any rows deleted in
    between), whether the range ends there, and the rows of 11 values (the body 9th, the job's
    expiry next to last, its dedup key last), or 12 in the compact layout (the job's group 10th)."""

    evicted: int
    looked: int
    last: bool
    rows: list[list[Any]]


def row_width(keys: QueueKeyNames) -> int:
    """Values per job row of scan_jobs.lua in the layout (see ``Page``)."""
    return 12 if isinstance(keys, CompactQueueKeys) else 11


def page(
    shard: ShardScripts,
    queue: str,
    sets: list[str],
    low: str,
    high: str,
    offset: int,
    count: int,
    with_body: bool,
    newest: bool,
    max_bytes: int = 0,
) -> Page:
    """Up to ``count`` members from ``offset``; with bodies and ``max_bytes``, fewer once the
    bodies taken reach ``max_bytes`` (at most one body more, and at least one member)."""
    keys = shard.keys(queue)
    args = [
        queue,
        keys.jobs_arg,
        low,
        high,
        offset,
        count,
        "1" if with_body else "0",
        "1" if newest else "0",
        max_bytes,
    ]
    ids_key = keys.dedup_keys()[1]
    out = shard.run_in_queue("scan_jobs", queue, [keys.exists_key, ids_key, *sets], args)
    evicted = int(out[0])
    shard.count_evicted(evicted)
    width = row_width(keys)
    return Page(evicted, int(out[1]), int(out[2]) == 1, [out[i : i + width] for i in range(3, len(out), width)])


class PointPage(NamedTuple):
    """One call of scan_jobs.lua from a point (``page_after``): the rows, whether the range may go
    on past them (``last`` False), and the point to read the next page from: the last member
    looked at (a row, or an evicted or deleted member that gave none), None when none was."""

    rows: list[list[Any]]
    last: bool
    next: ScanCursor | None


def page_after(
    shard: ShardScripts,
    queue: str,
    sets: list[str],
    low: str,
    high: str,
    after: ScanCursor | None,
    count: int,
    with_body: bool,
    max_bytes: int = 0,
) -> PointPage:
    """Up to ``count`` members of a score range that come after ``after`` newest first (from the
    newest without it), as ``page`` reads them but from a point, not an offset: each page costs
    about ``count`` members however deep it starts (``lua/lib/after.lua``)."""
    keys = shard.keys(queue)
    point = ["", ""] if after is None else [seconds_arg(after.run_after_ms), str(after.local_id)]
    args = [queue, keys.jobs_arg, low, high, 0, count, "1" if with_body else "0", "1", max_bytes, *point]
    out = shard.run_in_queue("scan_jobs", queue, [keys.exists_key, keys.dedup_keys()[1], *sets], args)
    shard.count_evicted(out[0])
    width = row_width(keys)
    score, local_id = out[-2], out[-1]
    rows = [out[i : i + width] for i in range(3, len(out) - 2, width)]
    seen = None if local_id is None else ScanCursor(ms_from_seconds(score), int(local_id))
    return PointPage(rows, int(out[2]) == 1, seen)


def matching_pages(
    shard: ShardScripts,
    queue: str,
    sets: list[str],
    low: str,
    high: str,
    newest_first: bool,
    page_size: int,
    page_bytes: int,
    body_filter: BodyFilter,
) -> Iterator[list[list[Any]]]:
    """The rows of each page whose body matches (rows of 11 values, the body 9th); a page holds
    up to ``page_size`` candidates and about ``page_bytes`` of bodies (see ``page``)."""
    offset = 0
    while True:
        body_filter.check()
        got = page(shard, queue, sets, low, high, offset, page_size, True, newest_first, page_bytes)
        yield [got.rows[i] for i in body_filter.matching([row[8] for row in got.rows])]
        if got.last:
            return
        offset += got.looked - got.evicted


def delete_matching(
    shard: ShardScripts,
    queue: str,
    where: JobFilter,
    body_filter: BodyFilter,
    limit: int,
    page_size: int,
    page_bytes: int,
    tail: Tail,
) -> int:
    """delete_jobs with a body regex: page through the candidates (as ``matching_pages``), delete
    the matching ids; the rows deleted were among those looked at, so the offset moves past the
    rest of them only."""
    keys = shard.keys(queue)
    low, high = score_range(where)
    sets = read_sets(keys, where)
    shard.require_queue(queue)
    deleted, offset = 0, 0
    while deleted < limit:
        body_filter.check()
        got = page(shard, queue, sets, low, high, offset, page_size, True, False, page_bytes)
        picked = [got.rows[i][0] for i in body_filter.matching([row[8] for row in got.rows])][: limit - deleted]
        removed = 0
        if picked:
            key_list, args = delete_call(keys, where, limit - deleted, picked, tail)
            removed = int(shard.run_in_queue("delete_jobs", queue, key_list, args))
        deleted += removed
        if got.last:
            break
        offset += got.looked - got.evicted - removed
    return deleted
