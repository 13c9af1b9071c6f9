"""``RedisStore``: one shard on one Redis server, in the original PinLater layout.

Design:

* Layout: ``keys.py`` (the original's key names, hash fields and scores). Jobs written by the
  original server are read, claimed, acked and looked up as they are.
* Every operation is one Lua script (``lua/*.lua``), so it is atomic on the shard, and a batch
  costs one round trip: an enqueue of N jobs of any priorities is one EVALSHA, a dequeue one per
  priority, acks and checkpoints one per request. Scripts get ``now`` and every key name from us.
* Connections: one ``BlockingConnectionPool`` per shard (``BACKEND_CONNECTIONS_PER_SHARD``
  connections; a caller waits up to ``BACKEND_SOCKET_TIMEOUT_SECONDS`` for one), hiredis as the
  parser when installed. redis-py's own retries are off: re-sending a script after a timeout
  could apply it twice (an enqueue would duplicate jobs), so retrying is left to the shared layer.
  A stale pooled connection (after a Redis restart) is detected and replaced at checkout.
* Errors: a connection error, a timeout, or a server that cannot take writes (loading, read-only
  replica, failing persistence) raises ``ShardConnectionError``; a queue missing from ``pln_{S}``
  raises ``QueueNotFoundError`` (scripts return -1).
* Evicted jobs (a set member whose hash is gone, as the original's docs expected under LRU
  eviction) are removed from their set wherever a script meets them and counted in
  ``evicted_jobs``; they are never returned and never crash a call.
* Replicas: a shard's ``slave`` is accepted and kept, but every read goes to the master for now.
* Needs Redis >= 4.0 (HSET with several fields). Sets are written with one variadic ZADD/ZREM
  per set and script, not one per job. Speed note: a sorted set of at most
  ``zset-max-listpack-entries`` (128) members is a listpack, where every insert is a linear scan
  that parses each member's float score, so a batch of n jobs into a small PENDING or IN_PROGRESS
  set costs O(n^2); on a Redis that only holds queues, ``zset-max-listpack-entries 0`` halved the
  Redis CPU per job of the enqueue-dequeue-ack cycle here.
* Body regex filters (count, scan, delete) cannot run in Lua, which has no regular expressions:
  the store pages through the candidates with their bodies, ``REGEX_PAGE_SIZE`` at a time, and
  matches in Python. That moves every candidate body over the network once, O(n) in the jobs of
  one (queue, priority, state); it is a rare admin call, and the pages are separate reads, so a
  concurrent change may be seen between pages (deletes themselves are guarded per id).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from pinlater.backends.base import AckItem, CheckpointItem, ClaimedJob, JobFilter, JobRecord, JobState, NewJob
from pinlater.backends.redis import scripts
from pinlater.backends.redis.config import RedisShardConfig
from pinlater.backends.redis.keys import CUSTOM_STATUS_LIMIT, QueueKeys, ms_from_seconds, queue_names_key, seconds_arg
from pinlater.config import Settings
from pinlater.errors import QueueNotFoundError, ShardConnectionError

REGEX_PAGE_SIZE = 500
"""Candidates fetched per call when a body regex filters a count, scan or delete."""

MAX_TIES_REORDERED = 10_000
"""Dequeue reorders a group of equal run-after scores by id only up to this size (see the Lua)."""

DELETE_QUEUE_BATCH = 1000
"""Jobs deleted per call of delete_queue.lua, so a big queue never blocks Redis for long."""

# Server answers that mean "this shard cannot serve now", not "this request is wrong".
_UNAVAILABLE = ("BUSY", "LOADING", "MASTERDOWN", "MISCONF", "NOREPLICAS", "READONLY", "TRYAGAIN")


class RedisStore:
    """``ShardStore`` for one shard on Redis (see the module docstring)."""

    def __init__(self, name: str, config: RedisShardConfig, settings: Settings | None = None) -> None:
        settings = settings or Settings()
        self._name = name
        self._config = config
        timeout = settings.backend_socket_timeout_seconds
        self._pool = redis.BlockingConnectionPool(  # type: ignore[no-untyped-call]  # untyped in redis-py
            host=config.master.host,
            port=config.master.port,
            max_connections=settings.backend_connections_per_shard,
            timeout=timeout,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            retry=Retry(NoBackoff(), 0),
            client_name=f"pinlater-shard-{name}",
        )
        self._client = redis.Redis(connection_pool=self._pool)
        self._scripts = scripts.register(self._client)
        self._num_priorities = settings.num_priority_levels
        self._queue_keys: dict[str, QueueKeys] = {}
        self._lock = threading.Lock()
        self._evicted_jobs = 0
        self._closed = False

    @property
    def name(self) -> str:
        return self._name

    @property
    def custom_status_limit(self) -> int:
        return CUSTOM_STATUS_LIMIT

    @property
    def config(self) -> RedisShardConfig:
        return self._config

    @property
    def client(self) -> redis.Redis:
        """The shard's client (for the durability check and tests); its pool is the store's."""
        return self._client

    @property
    def evicted_jobs(self) -> int:
        """Jobs found without their hash (evicted) and removed, since the store opened."""
        return self._evicted_jobs

    # -- queues -----------------------------------------------------------------------------

    def create_queue(self, queue: str, num_priorities: int) -> None:
        # The layout keeps no priority count per queue; remember the highest seen for delete_queue.
        self._num_priorities = max(self._num_priorities, num_priorities)
        keys = self._keys(queue)
        self._run("create_queue", [keys.names_key], [queue, _now_seconds()])

    def delete_queue(self, queue: str) -> None:
        keys = self._keys(queue)
        sets = [
            key for p in range(1, self._num_priorities + 1) for key in [*keys.priority_sets(p), keys.reserved_key(p)]
        ]
        while self._run("delete_queue", [keys.names_key, *sets], [queue, keys.hash_prefix, DELETE_QUEUE_BATCH]):
            pass

    def get_queue_names(self) -> set[str]:
        names = self._run("get_queue_names", [queue_names_key(self._name)], [])
        return {name.decode() for name in names}

    # -- the job lifecycle ------------------------------------------------------------------

    def enqueue_jobs(self, queue: str, jobs: Sequence[NewJob], now_ms: int) -> list[int]:
        keys = self._keys(queue)
        priorities = sorted({job.priority for job in jobs})
        key_list = [keys.names_key, keys.id_key] + [keys.set_key(p, JobState.PENDING) for p in priorities]
        index = {p: i + 3 for i, p in enumerate(priorities)}  # KEYS is 1-based; two keys come first
        args: list[Any] = [queue, keys.hash_prefix, seconds_arg(now_ms), len(jobs)]
        for job in jobs:
            status = job.custom_status[:CUSTOM_STATUS_LIMIT]
            args += [index[job.priority], job.body, job.attempts_allowed, seconds_arg(job.run_after_ms), status]
        ids = self._run_in_queue("enqueue_jobs", queue, key_list, args)
        return [int(i) for i in ids]

    def dequeue_jobs(
        self, queue: str, priority: int, limit: int, claim: str, now_ms: int, dry_run: bool
    ) -> list[ClaimedJob]:
        if limit <= 0:
            self._require_queue(queue)
            return []
        keys = self._keys(queue)
        key_list = [
            keys.names_key,
            keys.set_key(priority, JobState.PENDING),
            keys.set_key(priority, JobState.IN_PROGRESS),
            keys.reserved_key(priority),
        ]
        args = [queue, keys.hash_prefix, seconds_arg(now_ms), limit, claim, "1" if dry_run else "0", MAX_TIES_REORDERED]
        out = self._run_in_queue("dequeue_jobs", queue, key_list, args)
        self._count_evicted(out[0])
        return _claimed_jobs(out)

    def ack_jobs(self, queue: str, succeeded: Sequence[AckItem], failed: Sequence[AckItem], now_ms: int) -> None:
        keys = self._keys(queue)
        items = [("s", item) for item in succeeded] + [("f", item) for item in failed]
        key_list, index = _priority_keys(keys, {item.priority for _, item in items}, 4)
        args: list[Any] = [queue, keys.hash_prefix, CUSTOM_STATUS_LIMIT, seconds_arg(now_ms), len(items)]
        for kind, item in items:
            retry_at = seconds_arg(now_ms + item.retry_delay_ms)
            args += [index[item.priority], item.local_id, kind, item.append_custom_status, retry_at]
        _changed, evicted = self._run_in_queue("ack_jobs", queue, key_list, args)
        self._count_evicted(evicted)

    def checkpoint_jobs(self, queue: str, items: Sequence[CheckpointItem], source: str, now_ms: int) -> int:
        keys = self._keys(queue)
        key_list, index = _priority_keys(keys, {item.priority for item in items}, 2)
        args: list[Any] = [queue, keys.hash_prefix, source, CUSTOM_STATUS_LIMIT, seconds_arg(now_ms), len(items)]
        for item in items:
            args += [
                index[item.priority],
                item.local_id,
                "1" if item.move_to_pending else "0",
                seconds_arg(item.run_after_ms),
                "0" if item.new_body is None else "1",
                b"" if item.new_body is None else item.new_body,
                "" if item.attempts_allowed is None else item.attempts_allowed,
                "0" if item.prepend_custom_status is None else "1",
                item.prepend_custom_status or "",
            ]
        changed, evicted = self._run_in_queue("checkpoint_jobs", queue, key_list, args)
        self._count_evicted(evicted)
        return int(changed)

    # -- reservations (the dequeue broker) ----------------------------------------------------
    # A reserved job stays in its PENDING set with its score (run after), so counts and scans
    # are unchanged; cd = the reservation, and the priority's reserved set holds id -> expiry
    # (see reserve_jobs.lua). Live while the expiry is after now.

    def reserve_jobs(
        self, queue: str, priority: int, limit: int, reservation: str, now_ms: int, hold_ms: int
    ) -> list[ClaimedJob]:
        if limit <= 0:
            self._require_queue(queue)
            return []
        keys = self._keys(queue)
        key_list = [keys.names_key, keys.set_key(priority, JobState.PENDING), keys.reserved_key(priority)]
        args = [queue, keys.hash_prefix, seconds_arg(now_ms), limit, reservation, seconds_arg(now_ms + hold_ms)]
        out = self._run_in_queue("reserve_jobs", queue, key_list, args)
        self._count_evicted(out[0])
        return _claimed_jobs(out)

    def claim_reserved(
        self, queue: str, items: Sequence[tuple[int, int]], reservation: str, claim: str, now_ms: int
    ) -> list[tuple[int, int]]:
        keys = self._keys(queue)
        key_list = [keys.names_key]
        index: dict[int, int] = {}
        for p in sorted({p for p, _ in items}):
            index[p] = len(key_list) + 1
            key_list += [keys.set_key(p, JobState.PENDING), keys.set_key(p, JobState.IN_PROGRESS), keys.reserved_key(p)]
        args: list[Any] = [queue, keys.hash_prefix, seconds_arg(now_ms), reservation, claim, len(items)]
        for priority, local_id in items:
            args += [index[priority], local_id]
        numbers = self._run_in_queue("claim_reserved", queue, key_list, args)
        return [items[int(n) - 1] for n in numbers]

    def release_reservations(self, queue: str, items: Sequence[tuple[int, int]], reservation: str, now_ms: int) -> int:
        keys = self._keys(queue)
        key_list = [keys.names_key]
        index: dict[int, int] = {}
        for p in sorted({p for p, _ in items}):
            index[p] = len(key_list) + 1
            key_list += [keys.set_key(p, JobState.PENDING), keys.reserved_key(p)]
        args: list[Any] = [queue, keys.hash_prefix, seconds_arg(now_ms), reservation, len(items)]
        for priority, local_id in items:
            args += [index[priority], local_id]
        return int(self._run_in_queue("release_reservations", queue, key_list, args))

    # -- reads ------------------------------------------------------------------------------

    def lookup_jobs(self, queue: str, keys: Sequence[tuple[int, int]], include_body: bool) -> list[JobRecord]:
        qkeys = self._keys(queue)
        key_list, index = _priority_keys(qkeys, {priority for priority, _ in keys}, 4)
        args: list[Any] = [queue, qkeys.hash_prefix, "1" if include_body else "0", len(keys)]
        for priority, local_id in keys:
            args += [index[priority], local_id]
        out = self._run_in_queue("lookup_jobs", queue, key_list, args)
        self._count_evicted(out[0])
        records = []
        for i in range(1, len(out), 10):
            number, state, score, *fields = out[i : i + 10]
            priority, local_id = keys[int(number) - 1]
            records.append(_record(priority, local_id, JobState(int(state)), score, fields))
        return records

    def count_jobs(self, queue: str, where: JobFilter, limit: int | None) -> int:
        keys = self._keys(queue)
        low, high = _score_range(where)
        set_key = keys.set_key(where.priority, where.state)
        if where.body_regex is None:
            count = int(self._run_in_queue("count_jobs", queue, [keys.names_key, set_key], [queue, low, high]))
        else:
            pattern = _compiled(where.body_regex)
            count = 0
            for row in self._pages(queue, set_key, low, high, with_body=True, newest_first=False):
                count += _matches(pattern, row[8])
                if limit is not None and count >= limit:
                    break
        return count if limit is None else min(count, limit)

    def scan_jobs(self, queue: str, where: JobFilter, limit: int) -> list[JobRecord]:
        keys = self._keys(queue)
        low, high = _score_range(where)
        set_key = keys.set_key(where.priority, where.state)
        pattern = None if where.body_regex is None else _compiled(where.body_regex)
        page_size = REGEX_PAGE_SIZE if pattern is not None else max(limit, 1)
        found: list[JobRecord] = []
        if limit <= 0:
            self._require_queue(queue)
            return found
        for row in self._pages(queue, set_key, low, high, pattern is not None, True, page_size):
            if pattern is None or _matches(pattern, row[8]):
                found.append(_record(where.priority, int(row[0]), where.state, row[1], [*row[2:8], None]))
                if len(found) >= limit:
                    break
        found.sort(key=lambda job: (job.run_after_ms, job.local_id), reverse=True)
        return found

    # -- bulk administration ----------------------------------------------------------------

    def retry_failed_jobs(
        self, queue: str, priority: int, attempts_to_allow: int, run_after_ms: int, limit: int, now_ms: int
    ) -> int:
        keys = self._keys(queue)
        key_list = [keys.names_key, keys.set_key(priority, JobState.PENDING), keys.set_key(priority, JobState.FAILED)]
        args = [queue, keys.hash_prefix, attempts_to_allow, seconds_arg(run_after_ms), limit, seconds_arg(now_ms)]
        moved, evicted = self._run_in_queue("retry_failed_jobs", queue, key_list, args)
        self._count_evicted(evicted)
        return int(moved)

    def delete_jobs(self, queue: str, where: JobFilter, limit: int) -> int:
        keys = self._keys(queue)
        low, high = _score_range(where)
        set_key = keys.set_key(where.priority, where.state)
        key_list = [keys.names_key, set_key]
        if where.body_regex is None:
            return int(self._run_in_queue("delete_jobs", queue, key_list, [queue, keys.hash_prefix, low, high, limit]))
        pattern = _compiled(where.body_regex)
        self._require_queue(queue)
        deleted, offset = 0, 0
        while deleted < limit:
            evicted, looked, rows = self._page(queue, set_key, low, high, offset, REGEX_PAGE_SIZE, True, False)
            picked = [row[0] for row in rows if _matches(pattern, row[8])][: limit - deleted]
            removed = 0
            if picked:
                args = [queue, keys.hash_prefix, low, high, limit - deleted, *picked]
                removed = int(self._run_in_queue("delete_jobs", queue, key_list, args))
            deleted += removed
            if looked < REGEX_PAGE_SIZE:
                break
            offset += looked - evicted - removed
        return deleted

    # -- maintenance (the monitor) ----------------------------------------------------------

    def resurrect_timed_out_jobs(
        self, queue: str, priority: int, claimed_before_ms: int, limit: int, now_ms: int
    ) -> int:
        keys = self._keys(queue)
        key_list = [keys.names_key, *[keys.set_key(priority, s) for s in (JobState.PENDING, JobState.IN_PROGRESS)]]
        key_list.append(keys.set_key(priority, JobState.FAILED))
        args = [queue, keys.hash_prefix, seconds_arg(claimed_before_ms), limit, seconds_arg(now_ms)]
        changed, evicted = self._run_in_queue("resurrect_timed_out_jobs", queue, key_list, args)
        self._count_evicted(evicted)
        return int(changed)

    def gc_finished_jobs(self, queue: str, priority: int, state: JobState, finished_before_ms: int, limit: int) -> int:
        if state not in (JobState.SUCCEEDED, JobState.FAILED):
            raise ValueError(f"gc_finished_jobs takes SUCCEEDED or FAILED, not {state.name}")
        keys = self._keys(queue)
        key_list = [keys.names_key, keys.set_key(priority, state)]
        args = [queue, keys.hash_prefix, seconds_arg(finished_before_ms), limit]
        return int(self._run_in_queue("gc_finished_jobs", queue, key_list, args))

    # -- lifecycle --------------------------------------------------------------------------

    def ping(self) -> None:
        with self._errors():
            self._client.ping()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._client.close()
            self._pool.disconnect()

    # -- helpers ----------------------------------------------------------------------------

    def _keys(self, queue: str) -> QueueKeys:
        keys = self._queue_keys.get(queue)
        if keys is None:
            if len(self._queue_keys) > 4096:  # queue names are few; this only bounds a misuse
                self._queue_keys.clear()
            keys = self._queue_keys[queue] = QueueKeys(self._name, queue)
        return keys

    @contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise ShardConnectionError(self._name, f"{self._config.master}: {type(exc).__name__}: {exc}") from exc
        except redis.ResponseError as exc:
            if str(exc).startswith(_UNAVAILABLE):
                raise ShardConnectionError(self._name, f"{self._config.master}: {exc}") from exc
            raise

    def _run(self, script: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        with self._errors():
            return self._scripts[script](keys=list(keys), args=list(args))

    def _run_in_queue(self, script: str, queue: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        result = self._run(script, keys, args)
        if isinstance(result, int) and result == scripts.QUEUE_NOT_FOUND:
            raise QueueNotFoundError(queue)
        return result

    def _require_queue(self, queue: str) -> None:
        keys = self._keys(queue)
        self._run_in_queue("count_jobs", queue, [keys.names_key, keys.set_key(1, JobState.PENDING)], [queue, 0, 0])

    def _count_evicted(self, n: Any) -> None:
        if n := int(n):
            with self._lock:
                self._evicted_jobs += n

    def _page(
        self, queue: str, set_key: str, low: str, high: str, offset: int, count: int, with_body: bool, newest: bool
    ) -> tuple[int, int, list[list[Any]]]:
        """One call of scan_jobs.lua: (evicted, members looked at, rows of 9 values)."""
        keys = self._keys(queue)
        args = [queue, keys.hash_prefix, low, high, offset, count, "1" if with_body else "0", "1" if newest else "0"]
        out = self._run_in_queue("scan_jobs", queue, [keys.names_key, set_key], args)
        evicted, looked = int(out[0]), int(out[1])
        self._count_evicted(evicted)
        return evicted, looked, [out[i : i + 9] for i in range(2, len(out), 9)]

    def _pages(
        self,
        queue: str,
        set_key: str,
        low: str,
        high: str,
        with_body: bool,
        newest_first: bool,
        page_size: int | None = None,
    ) -> Iterator[list[Any]]:
        """Every row of a score range, a page per call (evicted members removed on the way)."""
        page_size = page_size or REGEX_PAGE_SIZE
        offset = 0
        while True:
            evicted, looked, rows = self._page(queue, set_key, low, high, offset, page_size, with_body, newest_first)
            yield from rows
            if looked < page_size:
                return
            offset += looked - evicted


def _claimed_jobs(out: Sequence[Any]) -> list[ClaimedJob]:
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


def _priority_keys(keys: QueueKeys, priorities: set[int], per: int) -> tuple[list[str], dict[int, int]]:
    """KEYS for scripts that take ``per`` state sets per priority (PENDING first), after the
    queue-names key, and each priority's 1-based index of its PENDING set in them."""
    key_list = [keys.names_key]
    index: dict[int, int] = {}
    for p in sorted(priorities):
        index[p] = len(key_list) + 1
        key_list += keys.priority_sets(p)[:per]
    return key_list, index


def _score_range(where: JobFilter) -> tuple[str, str]:
    """ZRANGEBYSCORE bounds of a filter: run after (or the state's time) <= now, > now, or any."""
    now = seconds_arg(where.now_ms)
    if where.future is None:
        return "-inf", "+inf"
    if where.future:
        return f"({now}", "+inf"
    return "-inf", now


def _compiled(pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"invalid body regex {pattern!r}: {exc}") from None


def _matches(pattern: re.Pattern[str], body: bytes | None) -> bool:
    return body is not None and pattern.search(body.decode("utf-8", "replace")) is not None


def _int(value: bytes | None) -> int:
    return 0 if value is None else int(value)


def _record(priority: int, local_id: int, state: JobState, score: bytes, fields: Sequence[Any]) -> JobRecord:
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


def _now_seconds() -> str:
    """The queue-creation score; the seam passes no clock to create_queue, and the score is
    informational only (the original wrote the creation time there)."""
    return repr(time.time())
