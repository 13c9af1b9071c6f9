"""``RedisStore``: one shard on one Redis server (or a Redis Cluster, in the compact layout), in
the original PinLater layout or the compact one.

Design:

* Layout: ``keys.py`` (the original's key names, hash fields and scores). Jobs written by the
  original server are read, claimed, acked and looked up as they are.
* Every operation is one Lua script (``lua/*.lua``), so it is atomic on the shard, and a batch
  costs one round trip: an enqueue of N jobs of any priorities is one EVALSHA, a dequeue one per
  priority, acks and checkpoints one per request. Scripts get ``now`` and every key name from us.
* Connections: one ``BlockingConnectionPool`` per shard (``BACKEND_CONNECTIONS_PER_SHARD``
  connections; a caller waits up to ``BACKEND_SOCKET_TIMEOUT_SECONDS`` for one), hiredis as the
  parser when installed. redis-py's own retries are off: re-sending a script after a timeout
  could apply it twice (an enqueue would duplicate jobs). A stale pooled connection (after a
  Redis restart) is detected and replaced at checkout, and a call that fails on a dead
  connection is repeated once on a fresh one where that cannot duplicate anything
  (``connections.py`` says which). The hot path the server uses (``hot_path``: enqueue, dequeue,
  ack) has a connection of its own per event loop instead, pipelined, with the commands packed
  and the replies read in Rust (``native_hot.py``, ``hot_client.py``), under the same rules.
* Errors: a connection error, a timeout, or a server that cannot take writes (loading, read-only
  replica, failing persistence) raises ``ShardConnectionError``; a queue missing from ``pln_{S}``
  raises ``QueueNotFoundError`` (scripts return -1); a write refused at ``maxmemory`` raises
  ``StoreMemoryFullError``.
* Dedup keys: ``enqueue_keyed_jobs`` and ``gc_dedup_keys`` are one script each
  (``dedup.py``), with the records in three keys per queue beside the jobs (``keys.py``, under
  the prefix ``pld`` the original server never touches; ``keys_compact.py``); lookups and scans
  read the keys of the jobs they return in the same script (one HMGET).
* Ordered groups and queue rules (``set_queue_rules``): the compact layout keeps groups
  (``lua_compact/lib/groups.lua``: waiting jobs in a set of their own per priority, read as
  PENDING, and the groups' FIFOs and counts in four keys of the queue's hash tag); the original
  layout's keys have no place for them (``groups_refused``). Both apply ``max_in_progress`` in
  the dequeue, reserve and claim scripts, and the compact one ``group_jobs_per_second`` too; the
  rules reach the scripts as a "tail" of keys and arguments (``rules.py``), on the hot path too.
* Cancel and expiry (``cancel_jobs``, "Expiry" in ``ShardStore.enqueue_keyed_jobs``): a job's
  expiry is in its hash (field ``ex``) or record (``records.lua``), only on a job that has one, and
  in a per-queue expiry index (sorted set by expiry) that ``expire_jobs`` reads from its soonest
  entry; the expired count is a counter per queue (``keys.py``, ``keys_compact.py``). The dequeue
  and reserve scripts expire the expired PENDING jobs they meet (one more field read per job,
  nothing more for a job without expiry), a reservation holds an expiring job no longer than its
  expiry (so a claim never takes one past it), and the ack, claim timeout and checkpoint scripts
  end cancelled jobs (IN_PROGRESS with ``ar`` 0) and retries at or past the expiry.
* Memory: ``memory`` reads used_memory against maxmemory in the background (``memory.py``), so
  the shared layer sends new jobs elsewhere above REDIS_MEMORY_HIGH_WATER_FRACTION.
* Evicted jobs (a set member whose hash is gone, as the original's docs expected under LRU
  eviction) are removed from their set wherever a script meets them and counted in
  ``evicted_jobs``; they are never returned and never crash a call.
* Replicas: a shard's ``slave`` is accepted and kept, but every read goes to the master for now.
* Redis Cluster: a shard whose config lists ``cluster`` seed nodes (always the compact layout,
  whose keys of one queue share a slot) runs the same scripts through redis-py's cluster clients
  (``cluster_scripts.py``) and the hot path through one pipelined connection per master
  (``cluster.py``); the queue names set and the layout record are plain commands routed by
  their own slots, ``queue_counts`` sends one call per queue, and ping, the memory probe and
  the durability check cover every master. Nothing above the store knows.
* Needs Redis >= 4.0 (HSET with several fields). Sets are written with one variadic ZADD/ZREM
  per set and script, not one per job. Speed note: a sorted set of at most
  ``zset-max-listpack-entries`` (128) members is a listpack, where every insert is a linear scan
  that parses each member's float score, so a batch of n jobs into a small PENDING or IN_PROGRESS
  set costs O(n^2); on a Redis that only holds queues, ``zset-max-listpack-entries 0`` halved the
  Redis CPU per job of the enqueue-dequeue-ack cycle here.
* Body regex filters (count, scan, delete) cannot run in Lua, which has no regular expressions:
  the store pages through the candidates with their bodies, ``REGEX_PAGE_SIZE`` at a time but
  about ``REGEX_PAGE_BYTES`` of bodies at most, and the extension matches each page in linear
  time with the interpreter released, on the thread pool (never on the event loop), within
  ``BODY_FILTER_TIME_BUDGET_SECONDS``. That moves every candidate body over the network once,
  O(n) in the jobs of one (queue, priority, state); it is a rare admin call, and the pages are
  separate reads, so a concurrent change may be seen between pages (deletes themselves are
  guarded per id).
* Paged scans (``scan_jobs`` with ``after``) read from a point, not an offset: each set newest
  first after (run after, id), found by rank (``lua/lib/after.lua``: ZRANK, or a search by
  halving within the run of equal scores when the point's job is gone), so a page costs about
  its limit however deep it starts; equal run afters come by id as text, the sets' own order.
  In the compact layout's ready lists, which keep the same order, the point is found by halving
  (``lua_compact/lib/ready.lua``).
* Schedules: three keys per shard, under the names set's hash tag in the compact layout, one
  script per operation (``schedules.py``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from pinlater._pinlater import AckGroup, ClaimedJobs, LocalIds, NewJobBatch
from pinlater.backends.base import (
    DEQUEUE_BYTES,
    DUE_PAGE_BYTES,
    AckItem,
    CheckpointItem,
    ClaimedJob,
    CountKey,
    Enqueued,
    GroupCounts,
    JobFilter,
    JobRecord,
    JobState,
    KeyedJob,
    LookupOverBudget,
    NewJob,
    Offload,
    QueueRules,
    Resurrected,
    ScanCursor,
    ScheduleRow,
    failed_after,
)
from pinlater.backends.body_filter import BodyFilter
from pinlater.backends.redis import dedup, reservations, schedules
from pinlater.backends.redis.cluster import cluster_hot_client
from pinlater.backends.redis.cluster_scripts import (
    AsyncClusterShardScripts,
    ClusterShardScripts,
    LazyRedisCluster,
    blocking_cluster,
)
from pinlater.backends.redis.config import RedisShardConfig
from pinlater.backends.redis.connections import TrackedConnection, pool_options
from pinlater.backends.redis.filtered_reads import (
    delete_call,
    delete_matching,
    matching_pages,
    page_after,
    read_sets,
    score_range,
)
from pinlater.backends.redis.hot_client import HotClient, HotScripts
from pinlater.backends.redis.keys import (
    CUSTOM_STATUS_LIMIT,
    ms_from_seconds,
    queue_names_key,
    seconds_arg,
)
from pinlater.backends.redis.keys_compact import (
    GROUPS_PIN,
    CompactQueueKeys,
    QueueKeyNames,
    compact_names_key,
    dedup_end_keys,
    ending_keys,
    ready_keys,
)
from pinlater.backends.redis.layouts import ShardLayout
from pinlater.backends.redis.memory import RedisMemoryProbe
from pinlater.backends.redis.native_hot import NativeHotPath
from pinlater.backends.redis.replies import claimed_jobs, job_record
from pinlater.backends.redis.rules import DEQUEUE, GROUPS, QueueRulesBook
from pinlater.backends.redis.script_calls import AsyncShardScripts, ScriptCall, ShardScripts, priority_keys
from pinlater.backends.threaded import ack_item, new_job
from pinlater.config import Settings

T = TypeVar("T")

REGEX_PAGE_SIZE = 500
"""Candidates fetched per call when a body regex filters a count, scan or delete."""

REGEX_PAGE_BYTES = 8 << 20
"""Such a page stops once its bodies reach this many bytes (so at most one body more, and at
least one candidate), as the embedded store's batches do (``body_filtered.BATCH_BYTES``)."""

MAX_TIES_REORDERED = 10_000
"""Dequeue reorders a group of equal run-after scores by id only up to this size (see the Lua)."""

QUEUE_COUNTS_KEYS_PER_CALL = 3000
"""Sets counted per call of queue_counts.lua (the calls go in one pipeline): 200 queues of three
priorities, a few milliseconds of Redis's time, so other clients wait no longer than that."""

DELETE_QUEUE_BATCH = 1000
"""Jobs deleted per call of delete_queue.lua, so a big queue never blocks Redis for long."""


class RedisStore:
    """``ShardStore`` for one shard on Redis (see the module docstring)."""

    def __init__(self, name: str, config: RedisShardConfig, settings: Settings | None = None) -> None:
        settings = settings or Settings()
        self._name = name
        self._config = config
        timeout = settings.backend_socket_timeout_seconds
        connections = settings.backend_connections_per_shard
        self._pool: redis.BlockingConnectionPool | None = None
        self._client: redis.Redis | LazyRedisCluster
        if config.is_cluster:
            self._client = blocking_cluster(name, config, timeout)
        else:
            self._pool = redis.BlockingConnectionPool(  # type: ignore[no-untyped-call]  # untyped in redis-py
                host=config.master.host,
                port=config.master.port,
                max_connections=connections,
                timeout=timeout,
                socket_timeout=timeout,
                socket_connect_timeout=timeout,
                retry=Retry(NoBackoff(), 0),
                client_name=f"pinlater-shard-{name}",
                connection_class=TrackedConnection,
                **pool_options(),
            )
            self._client = redis.Redis(connection_pool=self._pool)
        #: The layout the shard is served in (``layouts.py``): raises ``ConfigError`` if the
        #: config names the other one than the shard holds.
        self.layout = ShardLayout(name, config, self._client)
        hot: HotScripts
        if isinstance(self._client, LazyRedisCluster):
            self._shard: ShardScripts = ClusterShardScripts(name, config, self._client, self.layout)
            aio: AsyncShardScripts = AsyncClusterShardScripts(name, config, connections, timeout, self.layout)
            hot = cluster_hot_client(name, config, timeout, self.layout)
        else:
            self._shard = ShardScripts(name, config, self._client, self.layout)
            aio = AsyncShardScripts(name, config, connections, timeout, self.layout)
            hot = HotClient(name, config, timeout, layout=self.layout)
        #: used_memory against maxmemory, read in the background (``pressure.MemoryProbe``).
        self.memory = RedisMemoryProbe(name, config, self._client)
        #: The hot operations on the event loop, with a pool of their own of the same size.
        self.aio = AsyncHotPath(self, aio)
        #: The hot path the server uses: the same scripts over a connection of its own (one per
        #: master of a cluster), with commands and replies handled in Rust (``native_hot.py``,
        #: ``hot_client.py``).
        self.native = NativeHotPath(self, hot)
        self._num_priorities = settings.num_priority_levels
        #: The queues' rules and the script tails they make (``rules.py``).
        self.rules = QueueRulesBook(self._keys, lambda: self._num_priorities)
        self.layout.on_change(lambda _layout: self.rules.clear())
        self._body_filter_budget = settings.body_filter_time_budget_seconds
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
    def client(self) -> redis.Redis | redis.RedisCluster:
        """The shard's client (for the durability check and tests); its pool is the store's."""
        return self._client

    @property
    def evicted_jobs(self) -> int:
        """Jobs found without their hash (evicted) and removed, since the store opened."""
        return self._shard.evicted_jobs

    # -- queues -----------------------------------------------------------------------------

    def create_queue(self, queue: str, num_priorities: int) -> None:
        # The layout keeps no priority count per queue; remember the highest seen for delete_queue.
        if num_priorities > self._num_priorities:
            self._num_priorities = num_priorities
            self.rules.clear()  # the tails name every priority's keys
        keys = self._keys(queue)
        now = _now_seconds()
        if self.layout.compact:
            # The names set is in another slot (a cluster's): not inside the script. Named first:
            # if the script then fails (or the server stops between), the name lists a queue
            # that takes no job until createQueue is sent again, never a queue that takes jobs
            # under no name, which the monitor (it walks the names) would never visit: a claim
            # lost there stayed IN_PROGRESS for good.
            self._shard.command("ZADD", compact_names_key(self._name), "NX", round(float(now) * 1000), queue)
        self._run("create_queue", [keys.exists_key], [queue, now])

    def delete_queue(self, queue: str) -> None:
        keys = self._keys(queue)
        priorities = range(1, self._num_priorities + 1)
        sets = [key for p in priorities for key in keys.id_sets(p)]
        lists = [key for p in priorities for key in ready_keys(keys, p)]
        holders = [keys.holders_key(p) for p in priorities] + keys.dedup_keys()  # deleted outright
        holders.append(keys.dedup_runs_key())
        if isinstance(keys, CompactQueueKeys):
            holders += keys.group_keys() + keys.retired_keys()
        holders += keys.expiry_keys()  # the expiry index and the expired count
        args = [queue, keys.jobs_arg, DELETE_QUEUE_BATCH, len(holders)]
        if self.layout.compact:
            args.append(len(lists))
        more = self._run("delete_queue", [keys.exists_key, *sets, *lists, *holders], args)
        if self.layout.compact:
            # Unnamed once the script's first call took the queue away (as create_queue, the other
            # way round): stopped between the two, the name lists a queue that takes no job, and a
            # deleteQueue sent again deletes the rest; unnamed first, it took jobs under no name.
            self._shard.command("ZREM", compact_names_key(self._name), queue)
        while more:
            more = self._run("delete_queue", [keys.exists_key, *sets, *lists, *holders], args)
        schedules.drop_queue_schedules(self._shard, self._name, queue)  # once unregistered (schedules.py)

    def get_queue_names(self) -> set[str]:
        if self.layout.compact:
            names = self._shard.command("ZRANGE", compact_names_key(self._name), 0, -1)
        else:
            names = self._run("get_queue_names", [queue_names_key(self._name)], [])
        return {name.decode() for name in names}

    # -- the job lifecycle ------------------------------------------------------------------

    def enqueue_jobs(self, queue: str, jobs: Sequence[NewJob], now_ms: int) -> list[int]:
        return self._shard.call(self._enqueue_call(queue, jobs, now_ms))

    def _enqueue_call(self, queue: str, jobs: Sequence[NewJob], now_ms: int) -> ScriptCall[list[int]]:
        keys = self._keys(queue)
        priorities = sorted({job.priority for job in jobs})
        key_list = [keys.exists_key, keys.id_key] + [keys.set_key(p, JobState.PENDING) for p in priorities]
        key_list += [key for p in priorities for key in ready_keys(keys, p)]  # compact: after the sets
        index = {p: i + 3 for i, p in enumerate(priorities)}  # KEYS is 1-based; two keys come first
        if self.layout.compact and _uniform_enqueue(jobs):  # lua_compact/enqueue_jobs.lua: one argument a job
            first = jobs[0]
            shared = [
                3,
                first.attempts_allowed,
                seconds_arg(first.run_after_ms),
                first.custom_status[:CUSTOM_STATUS_LIMIT],
            ]
            uniform = [queue, keys.jobs_arg, seconds_arg(now_ms), f"u{len(jobs)}", *shared, *(job.body for job in jobs)]
            return ScriptCall("enqueue_jobs", queue, key_list, uniform, _ids)
        args: list[Any] = [queue, keys.jobs_arg, seconds_arg(now_ms), len(jobs)]
        for job in jobs:
            status = job.custom_status[:CUSTOM_STATUS_LIMIT]
            args += [index[job.priority], job.body, job.attempts_allowed, seconds_arg(job.run_after_ms), status]
        return ScriptCall("enqueue_jobs", queue, key_list, args, _ids)

    def enqueue_keyed_jobs(self, queue: str, jobs: Sequence[KeyedJob], now_ms: int) -> list[Enqueued]:
        """One call of ``enqueue_keyed_jobs.lua`` (``dedup.py``)."""
        return dedup.enqueue_keyed_jobs(self._shard, queue, jobs, now_ms, self._num_priorities, self.rules.of(queue))

    # -- ordered groups and queue rules ------------------------------------------------------

    @property
    def groups_refused(self) -> str | None:
        if self.layout.compact:
            return None
        return (
            f"needs the compact Redis layout; shard {self._name} is in the original one, "
            "whose keys have no place for a group"
        )

    def group_counts(self, queue: str) -> GroupCounts:
        """The queue's groups (fields of its ``ga`` hash but its pin) and blocked ones (its ``gb``
        count): an HLEN, an HEXISTS and a GET after the queue check, not one atomic read (a count,
        as the dashboard shows it)."""
        self._require_queue(queue)
        keys = self._keys(queue)
        if not isinstance(keys, CompactQueueKeys):
            return GroupCounts(0, 0)
        active, blocked, *_others = keys.group_keys()
        fields = int(self._shard.command("HLEN", active))
        groups = fields - int(self._shard.command("HEXISTS", active, GROUPS_PIN)) if fields else 0
        return GroupCounts(groups, int(self._shard.command("GET", blocked) or 0))

    def set_queue_rules(self, rules: Mapping[str, QueueRules]) -> None:
        self.rules.set(rules)

    def gc_dedup_keys(self, queue: str, now_ms: int, limit: int) -> int:
        """One call of ``gc_dedup_keys.lua`` (``dedup.py``), which looks at ``limit`` records at most."""
        return dedup.gc_dedup_keys(self._shard, queue, now_ms, limit)

    def dequeue_jobs(
        self,
        queue: str,
        priority: int,
        limit: int,
        claim: str,
        now_ms: int,
        dry_run: bool,
        max_bytes: int = DEQUEUE_BYTES,
    ) -> list[ClaimedJob]:
        return self._shard.call(self._dequeue_call(queue, priority, limit, claim, now_ms, dry_run, max_bytes))

    def _dequeue_call(
        self,
        queue: str,
        priority: int,
        limit: int,
        claim: str,
        now_ms: int,
        dry_run: bool,
        max_bytes: int = DEQUEUE_BYTES,
    ) -> ScriptCall[list[ClaimedJob]]:
        if limit <= 0:
            return self._require_queue_call(queue, [])
        keys = self._keys(queue)
        key_list = [
            keys.exists_key,
            keys.set_key(priority, JobState.PENDING),
            keys.set_key(priority, JobState.IN_PROGRESS),
            *keys.hold_keys(priority),
            *ready_keys(keys, priority),
            *ending_keys(keys, priority),
        ]
        dry = "1" if dry_run else "0"
        args = [queue, keys.jobs_arg, seconds_arg(now_ms), limit, claim, dry, MAX_TIES_REORDERED, max_bytes]
        tail_keys, tail_args = self.rules.tail(queue, DEQUEUE)
        return ScriptCall("dequeue_jobs", queue, key_list + tail_keys, args + tail_args, self._claimed_jobs)

    def ack_jobs(self, queue: str, succeeded: Sequence[AckItem], failed: Sequence[AckItem], now_ms: int) -> None:
        self._shard.call(self._ack_call(queue, succeeded, failed, now_ms))

    def _ack_call(
        self, queue: str, succeeded: Sequence[AckItem], failed: Sequence[AckItem], now_ms: int
    ) -> ScriptCall[None]:
        keys = self._keys(queue)
        items = [("s", item) for item in succeeded] + [("f", item) for item in failed]
        key_list, index = priority_keys(keys, {item.priority for _, item in items}, 4, keys.expiry_keys())
        args: list[Any] = [queue, keys.jobs_arg, CUSTOM_STATUS_LIMIT, seconds_arg(now_ms)]
        if self.layout.compact and _uniform_acks(succeeded, failed):  # lua_compact/ack_jobs.lua: one argument an ack
            args += [f"u{len(items)}", index[succeeded[0].priority], *(item.local_id for item in succeeded)]
        else:
            args.append(len(items))
            for kind, item in items:
                retry_at = seconds_arg(now_ms + item.retry_delay_ms)
                args += [index[item.priority], item.local_id, kind, item.append_custom_status, retry_at]
        tail_keys, tail_args = self.rules.tail(queue, GROUPS)
        key_list += dedup_end_keys(keys)
        return ScriptCall("ack_jobs", queue, key_list + tail_keys, args + tail_args, self._count_evicted_of_pair)

    def checkpoint_jobs(self, queue: str, items: Sequence[CheckpointItem], source: str, now_ms: int) -> int:
        keys = self._keys(queue)
        key_list, index = priority_keys(keys, {item.priority for item in items}, 4, keys.expiry_keys()[:1])
        args: list[Any] = [queue, keys.jobs_arg, source, CUSTOM_STATUS_LIMIT, seconds_arg(now_ms), len(items)]
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
        tail_keys, tail_args = self.rules.tail(queue, GROUPS)  # compact: a cancelled job may leave its group
        key_list += dedup_end_keys(keys)
        changed, evicted = self._run_in_queue("checkpoint_jobs", queue, key_list + tail_keys, args + tail_args)
        self._count_evicted(evicted)
        return int(changed)

    # -- reservations (the dequeue broker): see reservations.py --------------------------------

    def reserve_jobs(
        self,
        queue: str,
        priority: int,
        limit: int,
        reservation: str,
        now_ms: int,
        hold_ms: int,
        max_bytes: int = DEQUEUE_BYTES,
    ) -> list[ClaimedJob]:
        tail = self.rules.tail(queue, DEQUEUE)
        return self._shard.call(
            reservations.reserve_call(
                self._shard, queue, priority, limit, reservation, now_ms, hold_ms, tail, max_bytes
            )
        )

    def claim_reserved(
        self, queue: str, items: Sequence[tuple[int, int, str]], reservation: str, now_ms: int
    ) -> list[tuple[int, int]]:
        tail = self.rules.tail(queue, DEQUEUE)
        return self._shard.call(reservations.claim_call(self._shard, queue, items, reservation, now_ms, tail))

    def release_reservations(self, queue: str, items: Sequence[tuple[int, int]], reservation: str, now_ms: int) -> int:
        return self._shard.call(reservations.release_call(self._shard, queue, items, reservation, now_ms))

    # -- reads ------------------------------------------------------------------------------

    def lookup_jobs(
        self, queue: str, keys: Sequence[tuple[int, int]], include_body: bool, max_body_bytes: int | None = None
    ) -> list[JobRecord]:
        qkeys = self._keys(queue)
        key_list, index = [qkeys.exists_key, qkeys.dedup_keys()[1]], {}
        compact = isinstance(qkeys, CompactQueueKeys)
        for p in sorted({priority for priority, _ in keys}):  # the state sets, the held set, the list
            index[p] = len(key_list) + 1
            key_list += [*qkeys.priority_sets(p), qkeys.held_key(p), *ready_keys(qkeys, p)]
            if isinstance(qkeys, CompactQueueKeys):
                key_list.append(qkeys.waiting_key(p))
        args: list[Any] = [queue, qkeys.jobs_arg, "1" if include_body else "0", len(keys)]
        for priority, local_id in keys:
            args += [index[priority], local_id]
        if include_body and max_body_bytes is not None:
            args.append(max_body_bytes)
        out = self._run_in_queue("lookup_jobs", queue, key_list, args)
        if int(out[0]) == -2:  # the bodies hold more than the budget: none was read
            raise LookupOverBudget(max_body_bytes or 0)
        self._count_evicted(out[0])
        records = []
        width = 13 if compact else 12  # the compact rows carry the job's group
        for i in range(1, len(out), width):
            number, state, score, *fields = out[i : i + 7 + 3]
            group = out[i + 10] if compact else None
            expire, dedup_key = out[i + width - 2], out[i + width - 1]
            priority, local_id = keys[int(number) - 1]
            done = compact and int(state) == JobState.SUCCEEDED
            records.append(
                job_record(priority, local_id, JobState(int(state)), score, fields, dedup_key, group, expire, done)
            )
        return records

    def count_jobs(self, queue: str, where: JobFilter, limit: int | None) -> int:
        keys = self._keys(queue)
        low, high = score_range(where)
        sets = read_sets(keys, where)
        if where.body_regex is None:
            # the state set; for PENDING the held set, and in the compact layout the ready list
            key_list = [keys.exists_key, *sets[:2], *sets[4:]]
            count = int(self._run_in_queue("count_jobs", queue, key_list, [queue, low, high]))
        else:
            body_filter = BodyFilter(where.body_regex, self._body_filter_budget, where.deadline)
            count = 0
            for matched in matching_pages(
                self._shard, queue, sets, low, high, False, REGEX_PAGE_SIZE, REGEX_PAGE_BYTES, body_filter
            ):
                count += len(matched)
                if limit is not None and count >= limit:
                    break
        return count if limit is None else min(count, limit)

    def queue_counts(self, num_priorities: int, now_ms: int) -> dict[CountKey, int]:
        """The queue names, then ``queue_counts.lua`` over each queue's state sets and held sets
        (held jobs are PENDING, as ``count_jobs`` counts them), and in the compact layout its
        ready lists (with the records hash, whose fields ``t{p}`` they need; a queue's keys in
        one call), pipelined: a few round trips whatever the number of queues. A queue deleted
        in between counts as empty."""
        cells: list[tuple[str, int, JobState]] = []
        calls: list[tuple[list[str], list[Any]]] = []
        key_list: list[str] = []
        kinds = ""  # compact: a letter per key (queue_counts.lua's ARGV[2])
        now = seconds_arg(now_ms)
        for queue in sorted(self.get_queue_names()):
            keys = self._keys(queue)
            group: list[str] = []
            group_kinds = ""
            for p in range(1, num_priorities + 1):
                for state, key in zip(JobState, keys.priority_sets(p), strict=True):
                    cells.append((queue, p, state))
                    group.append(key)
                cells.append((queue, p, JobState.PENDING))
                group.append(keys.held_key(p))
                group_kinds += "zzzzz"
                if isinstance(keys, CompactQueueKeys):  # the waiting jobs of ordered groups
                    cells.append((queue, p, JobState.PENDING))
                    group.append(keys.waiting_key(p))
                    group_kinds += "z"
                if lists := ready_keys(keys, p):  # the list, then the records hash with its t{p}
                    cells.append((queue, p, JobState.PENDING))
                    group += [*lists, keys.jobs_arg]
                    group_kinds += "rj"
            if self.layout.compact:
                # a queue's keys never straddle two calls; in a cluster a call carries one queue's
                # keys only (one slot per call)
                full = len(key_list) + len(group) > QUEUE_COUNTS_KEYS_PER_CALL
                if key_list and (self._config.is_cluster or full):
                    calls.append((key_list, [now, kinds]))
                    key_list, kinds = [], ""
                key_list += group
                kinds += group_kinds
            else:
                key_list += group
        if self.layout.compact:
            if key_list:
                calls.append((key_list, [now, kinds]))
        else:
            step = QUEUE_COUNTS_KEYS_PER_CALL
            calls = [(key_list[i : i + step], [now]) for i in range(0, len(key_list), step)]
        replies = self._shard.run_pipelined("queue_counts", calls) if calls else []
        numbers: list[int] = []
        for reply in replies:
            numbers.extend(reply)
        counts: dict[CountKey, int] = {}
        for i, (queue, p, state) in enumerate(cells):
            total = numbers[2 * i]
            if not total:  # most sets are empty, or not there at all
                continue
            ready = int(numbers[2 * i + 1])
            for future, n in ((False, ready), (True, int(total) - ready)):
                cell = CountKey(queue, p, state, future)
                counts[cell] = counts.get(cell, 0) + n
        return counts

    def scan_jobs(self, queue: str, where: JobFilter, limit: int, after: ScanCursor | None = None) -> list[JobRecord]:
        """Pages of scan_jobs.lua read from a point (``filtered_reads.page_after``): from
        ``after``, then from the last member each page looked at, until ``limit`` rows. Newest
        first, equal run afters by id as text descending (the sorted sets' order backwards); a
        page costs about ``limit`` members (``REGEX_PAGE_SIZE`` with a body regex) however deep
        it starts. Pages are separate reads, but each starts from a point, not an offset, so a
        change between them moves nothing: a job that matches throughout is returned once."""
        keys = self._keys(queue)
        low, high = score_range(where)
        sets = read_sets(keys, where)
        body_filter = (
            None if where.body_regex is None else BodyFilter(where.body_regex, self._body_filter_budget, where.deadline)
        )
        found: list[JobRecord] = []
        if limit <= 0:
            self._require_queue(queue)
            return found
        compact = isinstance(keys, CompactQueueKeys)
        point = after
        while len(found) < limit:
            if body_filter is None:
                got = page_after(self._shard, queue, sets, low, high, point, limit - len(found), False)
                rows = got.rows
            else:
                body_filter.check()
                got = page_after(self._shard, queue, sets, low, high, point, REGEX_PAGE_SIZE, True, REGEX_PAGE_BYTES)
                rows = [got.rows[i] for i in body_filter.matching([row[8] for row in got.rows])]
            for row in rows[: limit - len(found)]:
                group = row[9] if compact else None
                found.append(
                    job_record(
                        where.priority,
                        int(row[0]),
                        where.state,
                        row[1],
                        [*row[2:8], None],
                        row[-1],
                        group,
                        row[-2],
                        compact and where.state is JobState.SUCCEEDED,
                    )
                )
            if got.last or got.next is None:
                break
            point = got.next
        return found

    # -- job control (issue 18): queue depth and schedules -------------------------------------

    def oldest_ready(self, num_priorities: int, now_ms: int) -> dict[tuple[str, int], int]:
        """The queue names, then ``oldest_ready.lua`` over each queue's PENDING sets (and in the
        compact layout its ready lists), pipelined as ``queue_counts`` sends its calls: a few
        round trips whatever the number of queues. Held jobs (the broker's) are left out, and so
        are waiting jobs of ordered groups; a queue deleted in between has none."""
        cells: list[tuple[str, int]] = []  # the (queue, priority) of each value the calls answer
        groups: list[tuple[list[str], str]] = []  # per queue: its keys and their kinds
        for queue in sorted(self.get_queue_names()):
            keys = self._keys(queue)
            group: list[str] = []
            kinds = ""
            for p in range(1, num_priorities + 1):
                cells.append((queue, p))
                group.append(keys.set_key(p, JobState.PENDING))
                kinds += "z"
                if lists := ready_keys(keys, p):  # the list, then the records hash it needs
                    cells.append((queue, p))
                    group += [*lists, keys.jobs_arg]
                    kinds += "rj"
            groups.append((group, kinds))
        now = seconds_arg(now_ms)
        calls: list[tuple[list[str], list[Any]]] = []
        key_list: list[str] = []
        all_kinds = ""
        for group, kinds in groups:
            full = len(key_list) + len(group) > QUEUE_COUNTS_KEYS_PER_CALL
            if key_list and (self._config.is_cluster or full):  # a cluster call: one queue's slot
                calls.append((key_list, [now, all_kinds] if self.layout.compact else [now]))
                key_list, all_kinds = [], ""
            key_list += group
            all_kinds += kinds
        if key_list:
            calls.append((key_list, [now, all_kinds] if self.layout.compact else [now]))
        values: list[Any] = []
        for reply in self._shard.run_pipelined("oldest_ready", calls) if calls else []:
            values.extend(reply)
        oldest: dict[tuple[str, int], int] = {}
        for cell, value in zip(cells, values, strict=True):
            if value is not None:
                ms = ms_from_seconds(value)
                oldest[cell] = min(ms, oldest.get(cell, ms))
        return oldest

    # schedules: see schedules.py

    def put_schedule(self, row: ScheduleRow) -> None:
        schedules.put_schedule(self._shard, self._name, row)

    def delete_schedule(self, queue: str, name: str) -> bool:
        return schedules.delete_schedule(self._shard, self._name, queue, name)

    def list_schedules(self, queue: str) -> list[ScheduleRow]:
        return schedules.list_schedules(self._shard, self._name, queue)

    def due_schedules(self, now_ms: int, limit: int, max_bytes: int = DUE_PAGE_BYTES) -> list[ScheduleRow]:
        return schedules.due_schedules(self._shard, self._name, now_ms, limit, max_bytes)

    def advance_schedule(self, queue: str, name: str, expected_next_ms: int, next_run_ms: int) -> bool:
        return schedules.advance_schedule(self._shard, self._name, queue, name, expected_next_ms, next_run_ms)

    # -- bulk administration ----------------------------------------------------------------

    def retry_failed_jobs(
        self, queue: str, priority: int, attempts_to_allow: int, run_after_ms: int, limit: int, now_ms: int
    ) -> int:
        keys = self._keys(queue)
        key_list = [keys.exists_key, keys.set_key(priority, JobState.PENDING), keys.set_key(priority, JobState.FAILED)]
        key_list.append(keys.expiry_keys()[0])
        args = [queue, keys.jobs_arg, attempts_to_allow, seconds_arg(run_after_ms), limit, seconds_arg(now_ms)]
        if isinstance(keys, CompactQueueKeys):
            tail_keys, tail_args = self.rules.tail(queue, GROUPS)
            key_list += [*dedup_end_keys(keys), *tail_keys]
            args += [priority, *tail_args]
        # A call takes up to `limit` FAILED members; one whose record was evicted is dropped and
        # counted, not moved. Its place is asked for again, so that fewer than `limit` moved
        # means no FAILED job is left, as on the other stores (ShardedBackend's parts stop there).
        done = 0
        while True:
            ask = limit - done
            args[4] = ask
            try:
                reply = self._run_in_queue("retry_failed_jobs", queue, key_list, args)
            except Exception as exc:
                if not done:
                    raise
                raise failed_after(self.name, f"{done} failed jobs were retried before a call failed", exc) from exc
            moved, evicted = (int(n) for n in reply)
            self._count_evicted(evicted)
            done += moved
            if not evicted or moved + evicted < ask:  # every member taken moved, or none is left
                return done

    def delete_jobs(self, queue: str, where: JobFilter, limit: int) -> int:
        keys = self._keys(queue)
        if where.body_regex is None:
            key_list, args = delete_call(keys, where, limit, [], self.rules.tail(queue, GROUPS))
            return int(self._run_in_queue("delete_jobs", queue, key_list, args))
        body_filter = BodyFilter(where.body_regex, self._body_filter_budget, where.deadline)
        return delete_matching(
            self._shard,
            queue,
            where,
            body_filter,
            limit,
            REGEX_PAGE_SIZE,
            REGEX_PAGE_BYTES,
            self.rules.tail(queue, GROUPS),
        )

    # -- maintenance (the monitor) ----------------------------------------------------------

    def resurrect_timed_out_jobs(
        self, queue: str, priority: int, claimed_before_ms: int, limit: int, now_ms: int
    ) -> Resurrected:
        keys = self._keys(queue)
        key_list = [keys.exists_key, *[keys.set_key(priority, s) for s in (JobState.PENDING, JobState.IN_PROGRESS)]]
        key_list += [keys.set_key(priority, JobState.FAILED), *keys.hold_keys(priority), *keys.expiry_keys()]
        key_list += dedup_end_keys(keys)
        args = [queue, keys.jobs_arg, seconds_arg(claimed_before_ms), limit, seconds_arg(now_ms)]
        tail_keys, tail_args = self.rules.tail(queue, GROUPS)
        changed, evicted, failed = self._run_in_queue(
            "resurrect_timed_out_jobs", queue, key_list + tail_keys, args + tail_args
        )
        self._count_evicted(evicted)
        return Resurrected(int(changed), int(failed), int(evicted))

    def gc_finished_jobs(self, queue: str, priority: int, state: JobState, finished_before_ms: int, limit: int) -> int:
        if state not in (JobState.SUCCEEDED, JobState.FAILED):
            raise ValueError(f"gc_finished_jobs takes SUCCEEDED or FAILED, not {state.name}")
        keys = self._keys(queue)
        key_list = [keys.exists_key, keys.set_key(priority, state)]
        args = [queue, keys.jobs_arg, seconds_arg(finished_before_ms), limit]
        return int(self._run_in_queue("gc_finished_jobs", queue, key_list, args))

    # -- cancel and expiry (issue 18) ----------------------------------------------------------

    def cancel_jobs(self, queue: str, keys: Sequence[tuple[int, int]], now_ms: int) -> int:
        """One call of ``cancel_jobs.lua`` (the jobs in order; in the compact layout with the
        groups' tail, as a cancelled job leaves its group)."""
        qkeys = self._keys(queue)
        compact = isinstance(qkeys, CompactQueueKeys)
        key_list, index = [qkeys.exists_key, qkeys.expiry_keys()[0]], {}
        for p in sorted({priority for priority, _ in keys}):
            index[p] = len(key_list) + 1
            key_list += [
                qkeys.set_key(p, JobState.PENDING),
                qkeys.set_key(p, JobState.IN_PROGRESS),
                qkeys.set_key(p, JobState.FAILED),
                *qkeys.hold_keys(p),
            ]
            if isinstance(qkeys, CompactQueueKeys):
                key_list += [qkeys.waiting_key(p), qkeys.ready_key(p)]
        args: list[Any] = [queue, qkeys.jobs_arg, CUSTOM_STATUS_LIMIT, seconds_arg(now_ms), len(keys)]
        for priority, local_id in keys:
            args += [index[priority], local_id, priority] if compact else [index[priority], local_id]
        if compact:
            tail_keys, tail_args = self.rules.tail(queue, GROUPS)
            key_list += [*dedup_end_keys(qkeys), *tail_keys]
            args += tail_args
        return int(self._run_in_queue("cancel_jobs", queue, key_list, args))

    def expire_jobs(self, queue: str, now_ms: int, limit: int) -> int:
        """One call of ``expire_jobs.lua``: the queue's expiry index (``keys.py``) from its
        soonest entry, at most ``4 * limit`` entries looked at."""
        keys = self._keys(queue)
        m = self._num_priorities
        key_list = [keys.exists_key, *keys.expiry_keys()]
        for p in range(1, m + 1):
            key_list += [keys.set_key(p, JobState.PENDING), keys.set_key(p, JobState.FAILED), *keys.hold_keys(p)]
            if isinstance(keys, CompactQueueKeys):
                key_list.append(keys.waiting_key(p))
        if isinstance(keys, CompactQueueKeys):
            tail_keys, tail_args = self.rules.tail(queue, GROUPS)
            args: list[Any] = [queue, keys.jobs_arg, seconds_arg(now_ms), max(limit, 0), m, *tail_args]
            key_list += [*dedup_end_keys(keys), *tail_keys]
        else:
            args = [queue, keys.jobs_arg, seconds_arg(now_ms), now_ms, max(limit, 0), m]
        return int(self._run_in_queue("expire_jobs", queue, key_list, args))

    def monitor_idle(self, queues: Sequence[str], num_priorities: int) -> set[str]:
        """The queues of ``queues`` none of whose ``monitor_keys`` exists: ``monitor_idle.lua``
        over many queues a call (one queue a call in a cluster, pipelined by master)."""
        if not queues:
            return set()
        per_queue = [self._monitor_keys(queue, num_priorities) for queue in queues]
        calls = self._per_queue_calls(per_queue, [len(per_queue[0])])
        found = [int(n) for reply in self._shard.run_pipelined("monitor_idle", calls) for n in reply]
        return {queue for queue, n in zip(queues, found, strict=True) if not n}

    def _per_queue_calls(self, per_queue: list[list[str]], args: list[Any]) -> list[tuple[list[str], list[Any]]]:
        """The calls (keys, ``args``) of a script over the keys of many queues (as many a queue):
        one queue a call in a cluster (its slot), else as many queues as fit in
        ``QUEUE_COUNTS_KEYS_PER_CALL`` keys."""
        if self._config.is_cluster:
            return [(keys, args) for keys in per_queue]
        step = max(1, QUEUE_COUNTS_KEYS_PER_CALL // len(per_queue[0]))
        return [
            ([key for keys in per_queue[i : i + step] for key in keys], args) for i in range(0, len(per_queue), step)
        ]

    def _monitor_keys(self, queue: str, num_priorities: int) -> list[str]:
        """The keys of ``queue`` that exist while a sweep of the monitor has something to do there:
        IN_PROGRESS jobs and broker holds (claim timeouts, lapsed holds), finished jobs (GC),
        expiring jobs, dedup GC entries, and (compact layout) groups, which the monitor counts."""
        keys = self._keys(queue)
        found: list[str] = []
        for p in range(1, num_priorities + 1):
            found += [keys.set_key(p, state) for state in (JobState.IN_PROGRESS, JobState.SUCCEEDED, JobState.FAILED)]
            found += [keys.held_key(p), keys.hold_expiry_key(p)]
        found += [keys.expiry_keys()[0], keys.dedup_keys()[2], keys.dedup_runs_key()]
        if isinstance(keys, CompactQueueKeys):
            found.append(keys.group_keys()[0])
        return found

    def expired_counts(self) -> dict[str, int]:
        """The queue names, then ``expired_counts.lua`` over their counters (``keys.py``), one
        call for all (one per queue in a cluster, pipelined by master): two round trips."""
        queues = sorted(self.get_queue_names())
        counters = [self._keys(queue).expiry_keys()[1] for queue in queues]
        if not counters:
            return {}
        calls = self._per_queue_calls([[key] for key in counters], [])
        numbers = [int(n) for reply in self._shard.run_pipelined("expired_counts", calls) for n in reply]
        return {queue: n for queue, n in zip(queues, numbers, strict=True) if n}

    # -- lifecycle --------------------------------------------------------------------------

    def ping(self) -> None:
        self._shard.ping()

    def interrupt(self) -> None:
        """No call of this store runs long: each is bounded by the socket timeout."""

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._client.close()
            if self._pool is not None:
                self._pool.disconnect()
            self.aio.forget()  # its connections are closed by ``aclose`` on its loop
            self.native.forget()

    # -- the hot path ---------------------------------------------------------------------------

    def hot_path(self, offload: Offload) -> NativeHotPath:
        """On the event loop, over the store's own connection: no thread hand-off, so
        ``offload`` is not used."""
        return self.native

    async def aclose(self) -> None:
        await self.native.aclose()
        await self.aio.aclose()

    # -- helpers ----------------------------------------------------------------------------

    def _keys(self, queue: str) -> QueueKeyNames:
        return self._shard.keys(queue)

    def _run(self, script: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        return self._shard.run(script, keys, args)

    def _run_in_queue(self, script: str, queue: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        return self._shard.run_in_queue(script, queue, keys, args)

    def _require_queue(self, queue: str) -> None:
        self._shard.require_queue(queue)

    def _require_queue_call(self, queue: str, answer: T) -> ScriptCall[T]:
        """A call that only checks the queue exists (QUEUE_NOT_FOUND), then answers ``answer``."""
        return self._shard.require_queue_call(queue, lambda _reply: answer)

    def _count_evicted(self, n: Any) -> None:
        self._shard.count_evicted(n)

    def _claimed_jobs(self, out: Any) -> list[ClaimedJob]:
        self._count_evicted(out[0])
        return claimed_jobs(out)

    def _count_evicted_of_pair(self, out: Any) -> None:
        self._count_evicted(out[1])


class AsyncHotPath:
    """``RedisStore``'s hot operations as coroutines on the event loop (redis.asyncio): the same
    scripts, arguments and errors as the blocking methods of the same names, without a thread
    hand-off per call. The store's ``hot_path``, as the server calls it. Enqueue, dequeue and ack
    convert the extension's job values to and from the blocking methods' NamedTuples (as
    ``threaded.py`` does), without a Python frame per job."""

    def __init__(self, store: RedisStore, scripts: AsyncShardScripts) -> None:
        self._store = store
        self._scripts = scripts

    async def enqueue_jobs(self, queue: str, jobs: NewJobBatch, now_ms: int) -> LocalIds:
        new_jobs = list(map(new_job, jobs.to_list()))
        ids: list[int] = await self._scripts.call(self._store._enqueue_call(queue, new_jobs, now_ms))
        return LocalIds(ids)

    async def dequeue_jobs(
        self,
        queue: str,
        priority: int,
        limit: int,
        claim: str,
        now_ms: int,
        dry_run: bool,
        max_bytes: int = DEQUEUE_BYTES,
    ) -> ClaimedJobs:
        call = self._store._dequeue_call(queue, priority, limit, claim, now_ms, dry_run, max_bytes)
        claimed: list[ClaimedJob] = await self._scripts.call(call)
        return ClaimedJobs(claimed)

    async def ack_jobs(self, queue: str, acks: AckGroup, now_ms: int) -> None:
        succeeded = list(map(ack_item, acks.succeeded()))
        failed = list(map(ack_item, acks.failed()))
        await self._scripts.call(self._store._ack_call(queue, succeeded, failed, now_ms))

    async def reserve_jobs(
        self,
        queue: str,
        priority: int,
        limit: int,
        reservation: str,
        now_ms: int,
        hold_ms: int,
        max_bytes: int = DEQUEUE_BYTES,
    ) -> list[ClaimedJob]:
        shard = self._store._shard
        tail = self._store.rules.tail(queue, DEQUEUE)
        return await self._scripts.call(
            reservations.reserve_call(shard, queue, priority, limit, reservation, now_ms, hold_ms, tail, max_bytes)
        )

    async def claim_reserved(
        self, queue: str, items: Sequence[tuple[int, int, str]], reservation: str, now_ms: int
    ) -> list[tuple[int, int]]:
        tail = self._store.rules.tail(queue, DEQUEUE)
        return await self._scripts.call(
            reservations.claim_call(self._store._shard, queue, items, reservation, now_ms, tail)
        )

    async def release_reservations(
        self, queue: str, items: Sequence[tuple[int, int]], reservation: str, now_ms: int
    ) -> int:
        return await self._scripts.call(
            reservations.release_call(self._store._shard, queue, items, reservation, now_ms)
        )

    async def aclose(self) -> None:
        await self._scripts.aclose()

    def forget(self) -> None:
        """Drop the asyncio client without awaiting it (the blocking ``close``)."""
        self._scripts.forget()


def _ids(reply: Any) -> list[int]:
    return [int(i) for i in reply]


def _uniform_enqueue(jobs: Sequence[NewJob]) -> bool:
    """Whether a batch goes to the compact layout's ``enqueue_jobs.lua`` as a uniform call (see
    its header): 1 to ``UNIFORM_MAX_JOBS`` jobs alike but for their bodies, as the extension's
    ``redis_enqueue_command`` decides."""
    if not 0 < len(jobs) <= dedup.UNIFORM_MAX_JOBS:
        return False
    first = jobs[0]
    shared = (first.priority, first.attempts_allowed, first.run_after_ms, first.custom_status)
    return all((j.priority, j.attempts_allowed, j.run_after_ms, j.custom_status) == shared for j in jobs)


def _uniform_acks(succeeded: Sequence[AckItem], failed: Sequence[AckItem]) -> bool:
    """Whether acks go to the compact layout's ``ack_jobs.lua`` as a uniform call (see its header):
    1 to ``UNIFORM_MAX_JOBS`` successes of one priority that append no status, as the extension's
    ``redis_ack_command`` decides."""
    if failed or not 0 < len(succeeded) <= dedup.UNIFORM_MAX_JOBS:
        return False
    priority = succeeded[0].priority
    return all(a.priority == priority and not a.append_custom_status for a in succeeded)


def _now_seconds() -> str:
    """The queue-creation score; the seam passes no clock to create_queue, and the score is
    informational only (the original wrote the creation time there). Whole milliseconds, as
    every other time the store keeps, so the compact layout and a migration keep it exactly."""
    return seconds_arg(time.time_ns() // 1_000_000)
