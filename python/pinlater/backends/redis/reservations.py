"""The reservation operations of ``RedisStore`` (the dequeue broker).

A reserved (held) job moves out of its PENDING set into the priority's held set, with its expiry
and holder beside it (``QueueKeys.hold_keys``, ``lua/lib/holds.lua``); counts, scans and lookups
merge the held set back as PENDING. Live while the expiry is after now: every script that meets
the priority's holds first puts lapsed ones back in PENDING.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pinlater.backends.base import DEQUEUE_BYTES, ClaimedJob, JobState
from pinlater.backends.redis.keys import seconds_arg
from pinlater.backends.redis.keys_compact import ending_keys, ready_keys
from pinlater.backends.redis.replies import claimed_jobs
from pinlater.backends.redis.rules import NO_TAIL, Tail
from pinlater.backends.redis.script_calls import ScriptCall, ShardScripts


def reserve_call(
    shard: ShardScripts,
    queue: str,
    priority: int,
    limit: int,
    reservation: str,
    now_ms: int,
    hold_ms: int,
    tail: Tail = NO_TAIL,
    max_bytes: int = DEQUEUE_BYTES,
) -> ScriptCall[list[ClaimedJob]]:
    """reserve_jobs.lua, with the queue's rules at the end of its keys and arguments (``rules.py``)."""
    if limit <= 0:
        return shard.require_queue_call(queue, lambda _reply: [])
    keys = shard.keys(queue)
    key_list = [keys.exists_key, keys.set_key(priority, JobState.PENDING), *keys.hold_keys(priority)]
    key_list += ready_keys(keys, priority)
    key_list += ending_keys(keys, priority)
    args: list[Any] = [
        queue,
        keys.jobs_arg,
        seconds_arg(now_ms),
        limit,
        reservation,
        seconds_arg(now_ms + hold_ms),
        max_bytes,
    ]
    key_list += tail[0]
    args += tail[1]

    def parse(out: Any) -> list[ClaimedJob]:
        shard.count_evicted(out[0])
        return claimed_jobs(out)

    return ScriptCall("reserve_jobs", queue, key_list, args, parse)


def claim_call(
    shard: ShardScripts,
    queue: str,
    items: Sequence[tuple[int, int, str]],
    reservation: str,
    now_ms: int,
    tail: Tail = NO_TAIL,
) -> ScriptCall[list[tuple[int, int]]]:
    """claim_reserved.lua, with the queue's rules at the end of its keys and arguments."""
    keys = shard.keys(queue)
    key_list = [keys.exists_key]
    index: dict[int, int] = {}
    for p in sorted({p for p, _, _ in items}):
        index[p] = len(key_list) + 1
        key_list += [keys.set_key(p, JobState.PENDING), keys.set_key(p, JobState.IN_PROGRESS), *keys.hold_keys(p)]
    # Runs of jobs that share a priority and a claim (one worker's dequeue) go as one group:
    # index, claim, count, then the ids, so a job costs one argument.
    args: list[Any] = [queue, keys.jobs_arg, seconds_arg(now_ms), reservation, 0]
    groups = 0
    count_at = 0
    run: tuple[int, str] | None = None
    for priority, local_id, claim in items:
        if run != (priority, claim):
            run = (priority, claim)
            groups += 1
            args += [index[priority], claim, 0]
            count_at = len(args) - 1
        args.append(local_id)
        args[count_at] += 1
    args[4] = groups
    key_list += tail[0]
    args += tail[1]

    def parse(numbers: Any) -> list[tuple[int, int]]:
        return [(items[int(n) - 1][0], items[int(n) - 1][1]) for n in numbers]

    return ScriptCall("claim_reserved", queue, key_list, args, parse)


def release_call(
    shard: ShardScripts, queue: str, items: Sequence[tuple[int, int]], reservation: str, now_ms: int
) -> ScriptCall[int]:
    keys = shard.keys(queue)
    key_list = [keys.exists_key]
    index: dict[int, int] = {}
    for p in sorted({p for p, _ in items}):
        index[p] = len(key_list) + 1
        key_list += [keys.set_key(p, JobState.PENDING), *keys.hold_keys(p)]
    args: list[Any] = [queue, seconds_arg(now_ms), reservation, len(items)]
    for priority, local_id in items:
        args += [index[priority], local_id]
    return ScriptCall("release_reservations", queue, key_list, args, int)
