"""Moving one shard's queues between the two Redis layouts (issue #16): the original one
(``keys.py``) and the compact one (``keys_compact.py``), in either direction.

How it stays safe:

* Every step is one Lua script (``lua_migrate/to_compact.lua``, ``to_original.lua``) that moves
  a bounded batch of one queue's jobs: it reads them from one layout, writes them to the other
  and deletes them from the first, atomically. A crash between two calls loses and duplicates
  nothing, and running the command again continues where it stopped (it can also go back: a
  half-moved shard can be moved to either layout). A queue's name and hold structures leave the
  source in the call that finds its last job gone, so a queue still named in the source is a
  queue not finished yet.
* Ids are never handed out twice: each call first raises the destination counter to the
  source's, and the source keeps its counter (raised to the destination's when the queue is
  finished), as both layouts keep a deleted queue's counter: a queue created again in the
  source, by a server still writing it, goes on from there. Counters of deleted queues are
  found with SCAN and copied too (by a call that only copies: a queue it finds named in the
  source was created there during the run, and the run fails asking to be run again). A job is
  never written over one the destination holds (ids handed out twice by servers writing both
  layouts): the run stops with an error naming it, and both copies stay.
* In the original layout the counters are ``plj_{S}_{Q}``, so ``plj_1_*`` also matches shard
  ``1_x``'s counters (``plj_1_x_q``). A counter ``plj_{S}_{A}_{B}`` is taken for another
  shard's, and not copied, when shard ``{S}_{A}`` shows itself on this Redis (its queue names
  ``pln_{S}_{A}`` or ``plc:{{S}_{A}}:q``, or its marker ``pll:{{S}_{A}}``); otherwise it is this
  shard's (queue ``{A}_{B}``). The compact layout's keys are exact (``plc:{S:Q}:j``).
* One run at a time per shard: a run holds ``pll-lock:{S}`` (``SET NX`` with a TTL it renews
  as it goes), and another run of the shard, in either direction, is refused naming it.
* The shard's layout marker ``pll:{S}`` says ``migrating`` from the first write to the last, and
  then the target layout; servers refuse a shard whose marker is not their configured layout.
* The move is meant for a stopped shard (a documented short pause): it refuses to start while
  clients named ``pinlater-shard-{S}`` (our servers' connections to that shard) are connected,
  unless forced. Forced with servers running, nothing is lost either (each batch is atomic, and a
  queue gone from the source answers QUEUE_NOT_FOUND there), but an ack that a running server
  sends for a job already moved finds nothing, so that job runs again after its claim timeout.
* Dedup records (``keys.py``: ``pld_{S}_{Q}.k``, ``.i``, ``.g``, ``.r``; compact ``plc:{S:Q}:dk``,
  ``:di``, ``:dg``, ``:dr``, with the same contents) move once a queue's jobs have (``lua_migrate/dedup_records.lua``:
  renamed in one call, or merged a batch per call if the destination holds some), for
  every queue with a counter in the source, so a run stopped between a queue's last batch and
  its records moves them when run again.
* Schedules (``keys.schedule_keys``, ``keys_compact.compact_schedule_keys``: three keys per
  shard, the same contents) move last, in one call (``lua_migrate/schedules.lua``).
* Both layouts must live on one Redis server: the original layout cannot live in a Redis Cluster
  (its scripts touch keys of many slots), so a cluster is refused.

Scores and times convert exactly as ``records.lua`` does (``to_ms``, ``to_seconds``), so a
round trip gives back the same ms everywhere. The compact layout's ready lists
(``lua_compact/lib/ready.lua``) are moved to the original's PENDING sets in list order (score =
the record's ca, tombstones of deleted jobs dropped); moving to the compact layout puts every
PENDING job in the PENDING sets, which is always correct there. Held jobs (the dequeue broker's holds) stay held,
with their expiry and holder. Members whose job is gone (evicted remains) are dropped and
counted, as are compact records no set names.
"""

from __future__ import annotations

import os
import re
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields, replace
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any, Literal, cast

from pinlater.backends.base import JobState
from pinlater.backends.redis.config import LAYOUTS, SHARD_NAME, SHARD_NAME_RULE
from pinlater.backends.redis.keys import QueueKeys, job_id_key, queue_names_key, schedule_keys
from pinlater.backends.redis.keys_compact import CompactQueueKeys, compact_names_key, compact_schedule_keys
from pinlater.backends.redis.layouts import LAYOUT_KEY_PREFIX, MIGRATING, layout_key
from pinlater.backends.redis.scripts import INCLUDE

if TYPE_CHECKING:
    import redis

Layout = Literal["original", "compact"]

BATCH_JOBS = 500
"""Jobs moved per script call by default: a few milliseconds of Redis's time."""

BATCH_BYTES = 8 << 20
"""A call moves no further job once the bodies it moved reach this many bytes (at least one)."""

MAX_PRIORITY = 127
"""Every call covers every priority the server accepts (``num_priority_levels`` <= 127), so no
set is missed whatever priorities a queue used: an empty set costs Redis a dictionary lookup."""

NOT_IN_SOURCE = 2
"""The scripts' first value for a queue the source does not hold (1: finished, 0: more to move)."""

SCAN_COUNT = 1000
"""Keys examined per SCAN call when looking for counters and queues outside the names set."""

MAX_BATCH = 10_000
"""The most jobs one call may move (``--batch``): the byte bound alone does not bound a call's
time when bodies are tiny."""

LOCK_TTL_SECONDS = 30
"""How long the run's lock outlives a run that stops without releasing it (a crash, a lost
connection): another run is refused until then. A run renews it as it goes."""

LOCK_RENEW_SECONDS = 2.0
"""The lock is renewed after a call once this long has passed since it was last renewed."""

COLLISION = 3
"""The scripts' first value when a job to move is already held by the destination."""

LIVE = 4
"""The scripts' first value when a counter-only call finds the queue in the source."""

GROUPED = 5
"""to_original.lua's first value when the queue's other jobs are moved and jobs of ordered groups
are left (made by a compact server during a forced move): the queue is not finished."""

_QUEUE = re.compile(r"\w+", re.ASCII)


class MigrationError(RuntimeError):
    """The move cannot start or went wrong; the message is one line meant for the operator."""


def server_client_name(shard: str) -> str:
    """The client name our stores give their connections to ``shard`` (see ``store.py``)."""
    return f"pinlater-shard-{shard}"


def priority_keys(keys: QueueKeys | CompactQueueKeys, priority: int) -> list[str]:
    """The sets s0 s1 s2 s3 of one priority, then its held set, expiry set and holders hash."""
    return [*keys.priority_sets(priority), *keys.hold_keys(priority)]


@dataclass(slots=True)
class Moved:
    """What calls moved (or dropped), added up. ``held`` jobs are also counted in ``pending``, as
    are ``unheld`` ones (held without an expiry or holder, so put back in PENDING)."""

    pending: int = 0
    in_progress: int = 0
    succeeded: int = 0
    failed: int = 0
    held: int = 0
    unheld: int = 0
    evicted: int = 0
    orphans: int = 0
    tombstones: int = 0

    @property
    def progress(self) -> int:
        """Everything that left the source: jobs moved and remains dropped."""
        return self.jobs + self.evicted + self.orphans + self.tombstones

    @property
    def jobs(self) -> int:
        return self.pending + self.in_progress + self.succeeded + self.failed

    def add(self, other: Moved) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def by_state(self) -> dict[JobState, int]:
        return {
            JobState.PENDING: self.pending,
            JobState.IN_PROGRESS: self.in_progress,
            JobState.SUCCEEDED: self.succeeded,
            JobState.FAILED: self.failed,
        }


@dataclass(frozen=True, slots=True)
class QueueProgress:
    """Reported after every call: the queue, its calls so far, what they moved, and whether
    the queue is finished (``done``)."""

    queue: str
    batches: int
    moved: Moved
    done: bool


@dataclass(slots=True)
class MigrationSummary:
    """The whole run: the layout the shard was in (its marker before the run; None if it had
    none), the queues finished, counters of deleted queues copied, and what moved."""

    shard: str
    target: Layout
    previous_marker: str | None
    queues: list[str] = field(default_factory=list)
    counters: int = 0
    moved: Moved = field(default_factory=Moved)
    #: Dedup records moved (or merged) into the target layout.
    dedup_records: int = 0
    #: Schedules the target layout's keys gained (``lua_migrate/schedules.lua``).
    schedules: int = 0


@cache
def script_source(name: str) -> str:
    """``lua_migrate/{name}.lua`` with its ``--@include`` lines expanded: ``records`` and
    ``ready`` from ``lua_compact/lib``, ``holds`` from ``lua/lib`` (each library ships once,
    shared)."""
    text = _read("lua_migrate", f"{name}.lua")
    return INCLUDE.sub(lambda m: _read(*_LIBRARIES[m.group(1)]), text)


_LIBRARIES = {
    "records": ("lua_compact", "lib", "records.lua"),
    "ready": ("lua_compact", "lib", "ready.lua"),
    "holds": ("lua", "lib", "holds.lua"),
    "dedup": ("lua", "lib", "dedup.lua"),
}


def _read(*parts: str) -> str:
    return resources.files("pinlater.backends.redis").joinpath(*parts).read_text(encoding="utf-8")


ProgressCallback = Callable[[QueueProgress], None]


def migrate_shard(
    client: redis.Redis,
    shard: str,
    target: Layout,
    *,
    batch: int = BATCH_JOBS,
    batch_bytes: int = BATCH_BYTES,
    force: bool = False,
    on_progress: ProgressCallback | None = None,
) -> MigrationSummary:
    """Move every queue of ``shard`` on the Redis behind ``client`` to the ``target`` layout.

    Raises ``MigrationError`` when it must not start (a cluster, servers of the shard connected
    and not ``force``, another run of the shard, a marker it does not know, a bad argument) or
    must stop (a job in both layouts, a queue created in the source meanwhile, a call that moved
    nothing). An exception from Redis or from ``on_progress`` stops the run between two calls;
    running it again continues (the marker stays ``migrating``)."""
    if target not in LAYOUTS:
        raise MigrationError(f"unknown layout {target!r} (one of {', '.join(LAYOUTS)})")
    if not SHARD_NAME.fullmatch(shard):
        raise MigrationError(f"shard names are {SHARD_NAME_RULE}, not {shard!r}")
    if batch < 1 or batch_bytes < 1:
        raise MigrationError("the batch size must be at least 1")
    if batch > MAX_BATCH:
        raise MigrationError(f"the batch size must be at most {MAX_BATCH}, not {batch}")
    if int(client.info("cluster").get("cluster_enabled", 0)):
        raise MigrationError("this Redis is a cluster node: the original layout cannot live in a cluster")
    if not force:
        _refuse_if_served(client, shard)
    with _Lock(client, shard, target) as lock:
        return _migrate(client, shard, target, batch, batch_bytes, force, on_progress, lock)


def _migrate(
    client: redis.Redis,
    shard: str,
    target: Layout,
    batch: int,
    batch_bytes: int,
    force: bool,
    on_progress: ProgressCallback | None,
    lock: _Lock,
) -> MigrationSummary:
    marker = layout_key(shard)
    previous = client.get(marker)
    known = None if previous is None else _loose_text(previous)
    if known is not None and known not in (*LAYOUTS, MIGRATING):
        raise MigrationError(
            f"{marker} holds {known!r}, which is no layout ({', '.join((*LAYOUTS, MIGRATING))}): "
            "not this tool's to overwrite; find out what wrote it"
        )
    summary = MigrationSummary(shard, target, known)
    mover = _Mover(client, shard, target, batch, batch_bytes, lock)
    if target == "original":
        _refuse_ordered_groups(client, shard, mover.live_queues(), lock)
    client.set(marker, MIGRATING)
    if not force:
        try:  # a server may have connected just before the marker was set
            _refuse_if_served(client, shard)
        except MigrationError:
            if previous is None:
                client.delete(marker)
            else:
                client.set(marker, previous)
            raise
    for queue in mover.live_queues():
        moved = mover.move_queue(queue, on_progress)
        if moved is not None:  # None: not a queue after all (a name without c, in the compact layout)
            summary.moved.add(moved)
            summary.queues.append(queue)
    appeared: list[str] = []
    finished = set(summary.queues)
    in_target = set(mover.target_queues())
    for queue in mover.counter_only_queues():
        if not mover.copy_counter(queue):
            appeared.append(queue)  # named in the source again: created there during the run
            continue
        summary.dedup_records += mover.move_dedup_records(queue)
        mover.move_expiry_keys(queue)
        if queue not in finished and queue not in in_target:
            summary.counters += 1
    left = sorted({*appeared, *mover.live_queues()})
    if left:  # servers ran anyway (forced) and created queues meanwhile: the next run takes them
        raise MigrationError(
            f"queue(s) {', '.join(left)} appeared in the {mover.source} layout during the move; run again"
        )
    summary.schedules += mover.move_schedules()
    client.set(marker, target)
    return summary


GROUPED_SCAN_COUNT = 1000
"""Records looked at per call of ``grouped_records.lua`` (HSCAN COUNT)."""


def _refuse_ordered_groups(client: redis.Redis, shard: str, queues: Iterable[str], lock: _Lock) -> None:
    """The original layout's keys have no place for an ordered group (``groupKey``): a compact
    queue that holds a job of a group, unfinished (its ``ga`` hash or ``gb`` count, ``keys_compact.py``)
    or finished (its record, which a retry would put back in the group: ``grouped_records.lua``,
    a page of records per call, reading only each record's first byte), stops the move before
    anything is written. (Nothing to check the other way: the original layout never holds groups.)
    ``queues``: every queue the move takes, the unnamed ones too (a records hash with ``c``)."""
    script = client.register_script(script_source("grouped_records"))
    for queue in queues:
        keys = CompactQueueKeys(shard, queue)
        active, blocked, *_others = keys.group_keys()
        grouped = bool(client.exists(active, blocked))
        cursor: Any = "0"
        while not grouped:
            cursor, found = script(keys=[keys.jobs_arg], args=[cursor, GROUPED_SCAN_COUNT])
            lock.renew()  # (a shard of 20 million records takes longer than the lock lives)
            grouped = int(found) == 1
            if _loose_text(cursor) == "0":
                break
        if grouped:
            raise MigrationError(
                f"queue {queue} holds jobs of ordered groups (groupKey), which the original layout cannot hold; "
                "let them finish and be collected, or delete them, then run again"
            )


def _refuse_if_served(client: redis.Redis, shard: str) -> None:
    name = server_client_name(shard)
    connected = [c for c in client.client_list() if c.get("name") == name]
    if connected:
        addresses = ", ".join(sorted({str(c.get("addr", "?")).rsplit(":", 1)[0] for c in connected}))
        raise MigrationError(
            f"{len(connected)} connection(s) named {name} are open (from {addresses}): stop the servers "
            f"of shard {shard} first, or pass --force"
        )


def lock_key(shard: str) -> str:
    """``pll-lock:{S}``: held by the run moving shard ``S``; its value says which run."""
    return f"{LAYOUT_KEY_PREFIX}-lock:{{{shard}}}"


_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


_TAKE_OVER = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end
return 0
"""

_HOLDER_CLIENT = re.compile(r"client (\d+)(?: of redis run ([0-9a-f]+))?")


class _Lock:
    """The run's hold on ``pll-lock:{S}``: taken with ``SET NX`` and a TTL, renewed as the run
    goes (``renew``), released at its end, whatever the end. A run that finds it held by
    another, or loses it (its TTL ran out meanwhile), stops with one line naming the other.
    The value names the holder's connection (``CLIENT ID``) and the Redis process it was made
    on (its ``run_id``, new at each start: Redis numbers connections from 1 again, so after a
    restart the dead run's id could name a live connection, and the lock was refused until its
    TTL ran out): a lock whose holder's connection is gone (the run was killed, or the Redis
    restarted) is taken over at once, so that running the command again continues without
    waiting for the TTL."""

    def __init__(self, client: redis.Redis, shard: str, target: Layout) -> None:
        self._client = client
        self._key = lock_key(shard)
        self._run_id = str(client.info("server")["run_id"])
        self._token = (
            f"pinlater-migrate-{shard} to {target}, pid {os.getpid()} on {socket.gethostname()}, "
            f"client {client.client_id()} of redis run {self._run_id}, "
            f"started {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}"
        )
        self._renewed = 0.0
        self._renew = client.register_script(_RENEW)
        self._release = client.register_script(_RELEASE)
        self._take_over = client.register_script(_TAKE_OVER)

    def __enter__(self) -> _Lock:
        if not self._client.set(self._key, self._token, nx=True, ex=LOCK_TTL_SECONDS):
            held = self._client.get(self._key)
            if held is None or not self._holder_gone(_loose_text(held)):
                raise MigrationError(f"another run holds {self._key}: {self._held_by()}; wait for it to finish")
            args: list[bytes | str | int] = [held, self._token, LOCK_TTL_SECONDS * 1000]
            if not int(self._take_over([self._key], args, client=self._client)):
                raise MigrationError(f"another run holds {self._key}: {self._held_by()}; wait for it to finish")
        self._renewed = time.monotonic()
        return self

    def _holder_gone(self, held: str) -> bool:
        found = _HOLDER_CLIENT.search(held)
        if found is None:
            return False
        if found.group(2) is not None and found.group(2) != self._run_id:
            return True  # made on a Redis process that has stopped since: every connection of it is gone
        return not any(str(c.get("id")) == found.group(1) for c in self._client.client_list())

    def __exit__(self, *exc: object) -> None:
        self._release([self._key], [self._token], client=self._client)

    def renew(self) -> None:
        now = time.monotonic()
        if now - self._renewed < LOCK_RENEW_SECONDS:
            return
        if not int(self._renew([self._key], [self._token, LOCK_TTL_SECONDS * 1000], client=self._client)):
            raise MigrationError(f"this run lost {self._key} (now held by {self._held_by()}); run again")
        self._renewed = now

    def _held_by(self) -> str:
        value = self._client.get(self._key)
        return "no one" if value is None else _loose_text(value)


class _Mover:
    """One direction of the move for one shard: the script, the keys of each queue."""

    def __init__(
        self, client: redis.Redis, shard: str, target: Layout, batch: int, batch_bytes: int, lock: _Lock
    ) -> None:
        self._client = client
        self._shard = shard
        self._target = target
        self._batch = batch
        self._batch_bytes = batch_bytes
        self._lock = lock
        self.source: Layout = "original" if target == "compact" else "compact"
        self._script = client.register_script(script_source(f"to_{target}"))
        self._dedup_script = client.register_script(script_source("dedup_records"))

    def live_queues(self) -> list[str]:
        """The queues still in the source layout (named there), oldest first."""
        if self.source == "original":
            return self._names(queue_names_key(self._shard))
        names = self._names(compact_names_key(self._shard))
        # A queue exists while its records hash has c; one whose name never reached the names
        # set (a crash between the two writes of create_queue) is found by that hash.
        unnamed = [q for q in self._scan_queues() if q not in names and self._client.hexists(self._records(q), "c")]
        return names + sorted(unnamed)

    def target_queues(self) -> list[str]:
        """The queues named in the target layout."""
        if self._target == "original":
            return self._names(queue_names_key(self._shard))
        return self._names(compact_names_key(self._shard))

    def _names(self, key: str) -> list[str]:
        members: list[Any] = self._client.zrange(key, 0, -1)
        return [_queue_name(m, key) for m in members]

    def counter_only_queues(self) -> list[str]:
        """Queues with a counter in the source (deleted ones, and those this run finished)."""
        return sorted(set(self._scan_queues()))

    def _scan_queues(self) -> Iterable[str]:
        """Queues with a counter in the source: ``plj_{S}_{Q}`` (not another shard's, see the
        module's notes), or a compact records hash (which holds the counter, field ``id``)."""
        if self.source == "original":
            prefix, suffix = job_id_key(self._shard, ""), ""
        else:
            prefix, suffix = self._records("\0").split("\0")
        cursor: Any = 0
        while True:  # (by page, the lock renewed at each: pages of other shards' keys match nothing)
            cursor, keys = self._client.scan(cursor, match=f"{prefix}*{suffix}", count=SCAN_COUNT)
            self._lock.renew()
            for key in keys:
                queue = _loose_text(key)[len(prefix) : -len(suffix) or None]
                if _QUEUE.fullmatch(queue) and (self.source == "compact" or not self._other_shards(queue)):
                    yield queue
            if int(cursor) == 0:
                return

    def _other_shards(self, rest: str) -> list[str]:
        """Shards ``{S}_{A}`` shown on this Redis for which ``plj_{S}_{rest}`` could be their
        counter (``rest`` = ``{A}_{B}``)."""
        found = []
        parts = rest.split("_")
        for i in range(1, len(parts)):
            other = f"{self._shard}_{'_'.join(parts[:i])}"
            if self._client.exists(queue_names_key(other), compact_names_key(other), layout_key(other)):
                found.append(other)
        return found

    def _records(self, queue: str) -> str:
        """The compact records hash, which also holds the queue's fields c and id."""
        return CompactQueueKeys(self._shard, queue).jobs_arg

    def copy_counter(self, queue: str) -> bool:
        """Raise the target's counter of ``queue`` to the source's; False if the source holds
        the queue (then nothing else is done)."""
        self._lock.renew()
        keys, args = self._call(queue, "counter")
        done = int(self._script(keys, args, client=self._client)[0])
        return done != LIVE

    def move_dedup_records(self, queue: str) -> int:
        """Move the queue's dedup records to the target layout's keys; how many it gained."""
        self._lock.renew()
        original_keys, compact_keys = QueueKeys(self._shard, queue), CompactQueueKeys(self._shard, queue)
        original = [*original_keys.dedup_keys(), original_keys.dedup_runs_key()]
        compact = [*compact_keys.dedup_keys(), compact_keys.dedup_runs_key()]
        keys = [*original, *compact] if self._target == "compact" else [*compact, *original]
        gained = 0
        while True:  # a merge moves a batch per call; a rename all at once
            added, left = (int(v) for v in self._dedup_script(keys, [self._batch], client=self._client))
            gained += added
            if not left:
                return gained
            self._lock.renew()

    def move_expiry_keys(self, queue: str) -> None:
        """Move the queue's expiry index and expired count to the target layout's keys (the same
        contents in both: ``keys.py``): renamed when the target has none, else merged (the index's
        union, the lower score kept) ``--batch`` entries a transaction, each moved once; the
        counts summed in one. (One ZUNIONSTORE of the whole index, run even with no source left,
        held Redis 3.2 s for a million entries.)"""
        original = QueueKeys(self._shard, queue).expiry_keys()
        compact = CompactQueueKeys(self._shard, queue).expiry_keys()
        (index, count), (to_index, to_count) = (original, compact) if self._target == "compact" else (compact, original)
        self._lock.renew()
        if self._client.exists(index):
            if not self._client.exists(to_index):
                self._client.rename(index, to_index)
            while entries := self._client.zrange(index, 0, self._batch - 1, withscores=True):
                scores = dict(cast(list[tuple[bytes, float]], entries))
                pipe = self._client.pipeline(transaction=True)
                pipe.zadd(to_index, scores, lt=True)
                pipe.zrem(index, *scores)
                pipe.execute()
                self._lock.renew()
        n = int(self._client.get(count) or 0)
        if n:
            pipe = self._client.pipeline(transaction=True)
            pipe.incrby(to_count, n)
            pipe.delete(count)
            pipe.execute()

    def move_schedules(self) -> int:
        """Move the shard's schedules to the target layout's keys; how many it gained."""
        self._lock.renew()
        original, compact = schedule_keys(self._shard), compact_schedule_keys(self._shard)
        keys = [*original, *compact] if self._target == "compact" else [*compact, *original]
        return int(self._client.register_script(script_source("schedules"))(keys, [], client=self._client))

    def move_queue(self, queue: str, on_progress: ProgressCallback | None) -> Moved | None:
        """Call the script until the queue is finished: what moved, or None if the source holds
        no such queue (then only its counter was copied)."""
        keys, args = self._call(queue, "move")
        total = Moved()
        batches = 0
        while True:
            reply = self._script(keys, args, client=self._client)
            batches += 1
            done, *counts, collision = (int(v) for v in reply)
            if done == NOT_IN_SOURCE:
                return None
            moved = Moved(*counts)
            total.add(moved)
            if done == GROUPED:
                raise MigrationError(
                    f"queue {queue} holds jobs of ordered groups (groupKey) made during the move, which the original "
                    "layout cannot hold; they are left in the compact layout: let them finish, or delete them, then "
                    "run again"
                )
            if done == COLLISION:
                raise MigrationError(
                    f"queue {queue}: job {collision} is in both layouts (ids handed out twice, by servers "
                    f"writing both); nothing was overwritten: keep one of the two, then run again"
                )
            if not done and not moved.progress:
                raise MigrationError(
                    f"queue {queue}: a call moved nothing while jobs are left in the {self.source} layout "
                    "(a bug in the migration script); stopped"
                )
            if on_progress is not None:
                on_progress(QueueProgress(queue, batches, replace(total), bool(done)))
            self._lock.renew()
            if done:
                return total

    def _call(self, queue: str, mode: str) -> tuple[list[str], list[Any]]:
        original = QueueKeys(self._shard, queue)
        compact = CompactQueueKeys(self._shard, queue)
        names = compact_names_key(self._shard)
        priorities = range(1, MAX_PRIORITY + 1)
        if self._target == "compact":
            keys = [original.exists_key, original.id_key, names, compact.jobs_arg]
            for p in priorities:
                keys += priority_keys(original, p) + priority_keys(compact, p)
            keys += [original.legacy_reserved_key(p) for p in priorities]
        else:
            keys = [names, compact.jobs_arg, original.exists_key, original.id_key]
            for p in priorities:
                keys += priority_keys(compact, p) + priority_keys(original, p)
            keys += [compact.ready_key(p) for p in priorities]
            keys += compact.group_keys()[:2] + [compact.waiting_key(p) for p in priorities]
        return keys, [queue, original.jobs_arg, self._batch, self._batch_bytes, len(priorities), mode]


def _queue_name(value: Any, key: str) -> str:
    """A queue name read from ``key``; one that is not text is refused with one line."""
    if not isinstance(value, bytes):
        return str(value)
    try:
        return value.decode()
    except UnicodeDecodeError:
        raise MigrationError(
            f"{key} names a queue that is not UTF-8 text ({value!r}): no server writes such a name; "
            "remove it from there, then run again"
        ) from None


def _loose_text(value: Any) -> str:
    """A value read from Redis as text, any bytes that are not UTF-8 replaced (for messages,
    and for keys that are then matched against a name pattern)."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
