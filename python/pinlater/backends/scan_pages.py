"""Scans that page: the continuation string of ``scanJobs`` and the merge of one page.

A scan walks every (shard, priority) of a queue in the stores' scan order (newest run_after
first; ``ShardStore.scan_jobs``). A page asks each walk for up to ``limit`` jobs after where it
stopped, merges them newest first and keeps the first ``limit``; each walk then stops after the
last of its jobs that made the page. The continuation carries those stops, so a job that keeps
matching during the whole scan is returned exactly once, however the jobs around it change, and
whichever server gets the next page.

The string is ``1.<payload>.<check>`` (base64url): the payload lists the stops and a digest of
the query (queue, state, priority, future, body regex), so a continuation sent with another
query, cut, or made up is CONTINUATION_INVALID rather than a scan of something else. The check is
a digest, not a signature: a forged continuation can only scan what the caller may scan anyway.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import heapq
import itertools
import json
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import NamedTuple

from pinlater.backends.base import JobRecord, JobState, ScanCursor, within_sizes
from pinlater.errors import ErrorCode, PinLaterError

START = "0"
END = "-1"
#: Longest continuation taken (characters): a few hundred shards times priorities fit.
MAX_CONTINUATION_CHARS = 64 * 1024

_VERSION = "1"
_CHECK_BYTES = 8

#: A walk's place: where it stopped, or None when it has nothing left.
Stop = ScanCursor | None
#: A walk: (shard name, priority).
Walk = tuple[str, int]


class ScanQuery(NamedTuple):
    """What a scan selects; a continuation is good only for the query that made it."""

    queue: str
    state: JobState
    priority: int | None
    future: bool
    body_regex: str | None

    def digest(self) -> str:
        text = json.dumps([self.queue, int(self.state), self.priority, self.future, self.body_regex])
        return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _check(payload: bytes) -> bytes:
    return hashlib.blake2b(payload, digest_size=_CHECK_BYTES, person=b"pinlater-scan").digest()


def encode(query: ScanQuery, stops: Mapping[Walk, Stop]) -> str:
    """The continuation that resumes ``query`` at ``stops``; END when every walk is done."""
    if all(stop is None for stop in stops.values()):
        return END
    walks = [
        [shard, priority] if stop is None else [shard, priority, stop.run_after_ms, stop.local_id]
        for (shard, priority), stop in sorted(stops.items())
    ]
    payload = json.dumps([query.digest(), walks], separators=(",", ":")).encode()
    return f"{_VERSION}.{_b64(payload)}.{_b64(_check(payload))}"


def decode(query: ScanQuery, continuation: str) -> dict[Walk, Stop]:
    """The stops a continuation names (empty for START), or CONTINUATION_INVALID."""
    if continuation == START:
        return {}
    invalid = PinLaterError(ErrorCode.CONTINUATION_INVALID, f"not a continuation of this scan: {continuation[:80]!r}")
    if len(continuation) > MAX_CONTINUATION_CHARS:
        raise invalid
    parts = continuation.split(".")
    if len(parts) != 3 or parts[0] != _VERSION:
        raise invalid
    try:
        payload = _unb64(parts[1])
        check = _unb64(parts[2])
        if check != _check(payload):
            raise invalid
        digest, walks = json.loads(payload)
    except (ValueError, binascii.Error, TypeError, RecursionError):
        # (the check is no secret: a forged payload of nested lists ran json past its recursion
        # limit, an internal error and a traceback logged per request)
        raise invalid from None
    if digest != query.digest() or not isinstance(walks, list):
        raise invalid
    stops: dict[Walk, Stop] = {}
    for walk in walks:
        match walk:
            case [str(shard), int(priority)]:
                stops[(shard, priority)] = None
            case [str(shard), int(priority), int(run_after), int(local_id)] if (
                _I64_MIN <= run_after <= _I64_MAX and 0 <= local_id <= _I64_MAX
            ):  # the check is no secret: a forged stop past i64 is refused, not sent to a store
                stops[(shard, priority)] = ScanCursor(run_after, local_id)
            case _:
                raise invalid
    return stops


def merge_page(
    limit: int,
    answers: Sequence[tuple[Walk, list[JobRecord]]],
    stops: Mapping[Walk, Stop],
    max_bytes: int | None = None,
    size: Callable[[Walk, JobRecord], int] | None = None,
    unfinished: Collection[Walk] = (),
) -> tuple[list[tuple[Walk, JobRecord]], dict[Walk, Stop]]:
    """The page (the first ``limit`` of the walks' answers, newest run_after first, each walk's
    own order kept) and the stops after it. ``answers`` are what each walk asked now returned
    (asked for ``limit``); ``stops`` the stops before this page, kept for walks not asked (a
    shard that is down now, say). A walk that answered fewer than ``limit`` jobs, all of them in
    the page, is done, unless it is ``unfinished`` (it stopped reading at ``max_bytes`` of
    ``size``s, more than a page holds). With ``max_bytes`` and ``size``: the page ends before the
    job that would take its ``size``s past ``max_bytes`` (the first always), and the next page
    starts there."""
    tagged = [[(walk, record) for record in records] for walk, records in answers]
    merged = itertools.islice(heapq.merge(*tagged, key=lambda pair: -pair[1].run_after_ms), limit)
    if max_bytes is None or size is None:
        page = list(merged)
    else:
        page = within_sizes(merged, max_bytes, lambda pair: size(*pair))
    after: dict[Walk, Stop] = dict(stops)
    taken: dict[Walk, int] = {}
    for walk, record in page:
        after[walk] = ScanCursor(record.run_after_ms, record.local_id)
        taken[walk] = taken.get(walk, 0) + 1
    for walk, records in answers:
        if len(records) < limit and taken.get(walk, 0) == len(records) and walk not in unfinished:
            after[walk] = None
    return page, after
