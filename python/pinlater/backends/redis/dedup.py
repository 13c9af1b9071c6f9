"""Dedup keys in the Redis store (``ShardStore.enqueue_keyed_jobs``, ``gc_dedup_keys``): the
calls of ``enqueue_keyed_jobs.lua`` and ``gc_dedup_keys.lua`` in either layout.

The records live beside the queue's jobs, in three keys of its own (``QueueKeys.dedup_keys``;
``keys.py`` says what each holds): key -> holder, id -> key (so lookups and scans show a job's
key with one HMGET per call) and the GC's sorted set. The enqueue script reads a holder's state
from the sets of the holder's priority, so it is passed the sets of every priority up to the
highest the store knows (``num_priority_levels``, or a higher one a queue was created with),
a group of keys per priority (``_group``: the original layout's PENDING, IN_PROGRESS and held
sets, the compact layout's PENDING, SUCCEEDED and FAILED sets and ready list);
a record naming a priority beyond them (a queue used by a server configured with more) makes
the script change nothing and answer that priority, and the call is made again with it.

In the compact layout both scripts touch only keys of the queue's hash tag (the GC reads whether a
job exists from the records hash, KEYS[1]), so they run on a Redis Cluster as the other scripts
do; the original layout's GC reads whether a job exists from its hash, by the prefix it is
passed, as that layout's other scripts read job hashes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pinlater.backends.base import DEFAULT_RULES, Enqueued, JobState, KeyedJob, QueueRules
from pinlater.backends.redis.keys import CUSTOM_STATUS_LIMIT, seconds_arg
from pinlater.backends.redis.keys_compact import CompactQueueKeys, QueueKeyNames
from pinlater.backends.redis.rules import GROUPS, Tail, build_tail
from pinlater.backends.redis.script_calls import ShardScripts

PRIORITY_BEYOND_KEYS = -2
"""The scripts' first value when a record names a priority whose sets were not passed."""

HELD_FOREVER_MS = 2**53
"""The latest held-until a record holds (ms, some 285,000 years): Lua's numbers are doubles, exact
to 2**53, and ``string.format('%d')`` of one beyond 2**63 (``now + Long.MAX_VALUE``, a window
"for ever") comes out negative, which would free the key at once. A longer window is this one."""

_ENQUEUE_FIXED_KEYS = 6  # the queue key, the counter, the three dedup keys, the expiry index


def enqueue_keyed_jobs(
    shard: ShardScripts,
    queue: str,
    jobs: Sequence[KeyedJob],
    now_ms: int,
    num_priorities: int,
    rules: QueueRules = DEFAULT_RULES,
) -> list[Enqueued]:
    """``ShardStore.enqueue_keyed_jobs`` through ``enqueue_keyed_jobs.lua``: one call (two if a
    record names a priority above ``num_priorities`` and the jobs'). A job may have a dedup key,
    an expiry, and in the compact layout a group, in any mix (10 arguments a job, then in the
    compact layout the groups' tail for the queue's ``rules``, over the same priorities:
    ``rules.py``). A job with an expiry is kept in the queue's expiry index (``keys.py``)."""
    keys = shard.keys(queue)
    m = first_priorities(jobs, num_priorities)
    while True:
        key_list, args = enqueue_keyed_call(keys, queue, jobs, now_ms, m, build_tail(keys, rules, GROUPS, m))
        out = shard.run_in_queue("enqueue_keyed_jobs", queue, key_list, args)
        answers, beyond = enqueued_reply([int(v) for v in out])
        if answers is None:
            m = beyond
            continue
        return answers


def first_priorities(jobs: Sequence[KeyedJob], num_priorities: int) -> int:
    """The priorities whose keys the first call passes: the store's, or a job's higher one."""
    return max([num_priorities, *(d.job.priority for d in jobs)])


def enqueue_keyed_call(
    keys: QueueKeyNames, queue: str, jobs: Sequence[KeyedJob], now_ms: int, m: int, tail: Tail
) -> tuple[list[str], list[Any]]:
    """The ``KEYS`` and ``ARGV`` of ``enqueue_keyed_jobs.lua`` over priorities 1..m, with the
    groups' ``tail`` (built for the same m), for the blocking call and the hot path alike."""
    per = keys_per_priority(keys)
    key_list = enqueue_keyed_keys(keys, m)
    tail_keys, tail_args = tail
    held_max = HELD_FOREVER_MS - now_ms
    if takes_uniform_calls(keys) and 0 < len(jobs) <= UNIFORM_MAX_JOBS:
        uniform = _uniform_call(keys, queue, jobs, now_ms, m, per, held_max)
        if uniform is not None:
            return key_list + tail_keys, uniform + tail_args
    args: list[Any] = [queue, keys.jobs_arg, seconds_arg(now_ms), len(jobs), now_ms, m]
    seconds: dict[int, str] = {}  # a batch's jobs mostly share one run after
    add = args.extend
    for d in jobs:
        job = d.job
        run_after = job.run_after_ms
        text = seconds.get(run_after)
        if text is None:
            text = seconds[run_after] = seconds_arg(run_after)
        key, group, window, expire = d.key, d.group, d.window_ms, d.expire_at_ms
        add(
            (
                _ENQUEUE_FIXED_KEYS + 1 + per * (job.priority - 1),
                job.body,
                job.attempts_allowed,
                text,
                job.custom_status[:CUSTOM_STATUS_LIMIT],
                "" if key is None else key,
                window if 0 <= window <= held_max else min(max(window, 0), held_max),
                ("" if key is None else "k") + ("" if group is None else "g"),
                "" if group is None else group,
                "" if expire is None else expire,
            )
        )
    return key_list + tail_keys, args + tail_args


UNIFORM_MAX_JOBS = 1000
"""The most jobs of a uniform call (``lua_compact/lib/records.lua``'s RECORD_CHUNK)."""


def _uniform_call(
    keys: QueueKeyNames, queue: str, jobs: Sequence[KeyedJob], now_ms: int, m: int, per: int, held_max: int
) -> list[Any] | None:
    """The ``ARGV`` of a uniform call of ``enqueue_keyed_jobs.lua`` (compact layout: see its
    header), before the tail, or None if the jobs differ in more than body, key and group, or
    one has an expiry."""
    first = jobs[0]
    job, window = first.job, first.window_ms
    shared = (job.priority, job.attempts_allowed, job.run_after_ms, job.custom_status, window)
    flags = ("" if first.key is None else "k") + ("" if first.group is None else "g")
    own: list[Any] = []
    for d in jobs:
        j = d.job
        if (
            d.expire_at_ms is not None
            or (j.priority, j.attempts_allowed, j.run_after_ms, j.custom_status, d.window_ms) != shared
            or (d.key is None) != (first.key is None)
            or (d.group is None) != (first.group is None)
        ):
            return None
        own += (j.body, "" if d.key is None else d.key, "" if d.group is None else d.group)
    window = window if 0 <= window <= held_max else min(max(window, 0), held_max)
    header = [
        _ENQUEUE_FIXED_KEYS + 1 + per * (job.priority - 1),
        "",
        job.attempts_allowed,
        seconds_arg(job.run_after_ms),
        job.custom_status[:CUSTOM_STATUS_LIMIT],
        "",
        window,
        flags,
        "",
        "",
    ]
    return [queue, keys.jobs_arg, seconds_arg(now_ms), f"u{len(jobs)}", now_ms, m, *header, *own]


def takes_uniform_calls(keys: QueueKeyNames) -> bool:
    """Whether ``enqueue_keyed_jobs.lua`` takes a uniform call for the queue: in the compact
    layout."""
    return isinstance(keys, CompactQueueKeys)


def keys_per_priority(keys: QueueKeyNames) -> int:
    """How many keys ``enqueue_keyed_jobs.lua`` is passed per priority (``_group``)."""
    return len(_group(keys, 1))


def enqueue_keyed_keys(keys: QueueKeyNames, m: int) -> list[str]:
    """``enqueue_keyed_jobs.lua``'s ``KEYS`` before the rules' tail, over priorities 1..m: the
    queue key, the counter, the three dedup keys, the expiry index, then ``_group`` of each, then
    the dedup runs key (after the priorities, so that the KEYS index of each priority's sets,
    which the hot path computes too, stays where earlier builds had it)."""
    key_list = [keys.exists_key, keys.id_key, *keys.dedup_keys(), keys.expiry_keys()[0]]
    for p in range(1, m + 1):
        key_list += _group(keys, p)
    return [*key_list, keys.dedup_runs_key()]


def enqueued_reply(values: Sequence[int]) -> tuple[list[Enqueued] | None, int]:
    """``enqueue_keyed_jobs.lua``'s reply (its queue found): the answers, or None and the
    priority to call again with (a record names a priority beyond the keys passed)."""
    if values and values[0] == PRIORITY_BEYOND_KEYS:
        return None, values[1]
    return [Enqueued(values[i], values[i + 1], values[i + 2] == 1) for i in range(0, len(values), 3)], 0


def gc_dedup_keys(shard: ShardScripts, queue: str, now_ms: int, limit: int) -> int:
    """``ShardStore.gc_dedup_keys`` through ``gc_dedup_keys.lua``: looks at ``limit`` records at
    most, and forgets those whose window has passed and whose job is gone."""
    keys = shard.keys(queue)
    key_list = [keys.exists_key, *keys.dedup_keys(), keys.dedup_runs_key()]
    return int(shard.run_in_queue("gc_dedup_keys", queue, key_list, [queue, keys.jobs_arg, now_ms, limit]))


def _group(keys: QueueKeyNames, priority: int) -> list[str]:
    """The keys of one priority that the scripts read a holder's state from (each layout's
    ``lib/dedup_state.lua``), its PENDING set first (where the enqueue inserts)."""
    pending = keys.set_key(priority, JobState.PENDING)
    if isinstance(keys, CompactQueueKeys):
        finished = [keys.set_key(priority, JobState.SUCCEEDED), keys.set_key(priority, JobState.FAILED)]
        return [pending, *finished, keys.ready_key(priority)]
    return [pending, keys.set_key(priority, JobState.IN_PROGRESS), keys.held_key(priority)]
