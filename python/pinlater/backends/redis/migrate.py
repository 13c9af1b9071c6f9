"""Moving one shard's queues between the two Redis layouts (issue #16): the original one
(``keys.py``) and the compact one (``keys_compact.py``), in either direction.

How it stays safe:

* Every step is one Lua script (``lua_migrate/to_compact.lua``, ``to_original.lua``) that moves
  a bounded batch of one queue's jobs: it reads them from one layout, writes them to the other
  and deletes them from the first, atomically. A crash between two calls loses and duplicates
  nothing, and running the command again continues where it stopped (it can also go back: a
  half-moved shard can be moved to either layout). A queue's name, counter and hold structures
  leave the source in the call that finds its last job gone, so a queue still named in the
  source is a queue not finished yet.
* Ids are never handed out twice: each call first raises the destination counter to the
  source's. Counters of deleted queues (kept by both layouts so that a re-created queue does not
  reuse ids) are found with SCAN and copied too, but left in place in the source.
* The shard's layout marker ``pll:{S}`` says ``migrating`` from the first write to the last, and
  then the target layout; servers refuse a shard whose marker is not their configured layout.
* The move is meant for a stopped shard (a documented short pause): it refuses to start while
  clients named ``pinlater-shard-{S}`` (our servers' connections to that shard) are connected,
  unless forced. Forced with servers running, nothing is lost either (each batch is atomic, and a
  queue gone from the source answers QUEUE_NOT_FOUND there), but an ack that a running server
  sends for a job already moved finds nothing, so that job runs again after its claim timeout.
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

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields, replace
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any, Literal

from pinlater.backends.base import JobState
from pinlater.backends.redis.config import LAYOUTS
from pinlater.backends.redis.keys import QueueKeys, job_id_key, queue_names_key
from pinlater.backends.redis.keys_compact import CompactQueueKeys, compact_names_key
from pinlater.backends.redis.layouts import MIGRATING, layout_key
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
    and not ``force``, a bad argument). An exception from Redis or from ``on_progress`` stops the
    run between two calls; running it again continues (the marker stays ``migrating``)."""
    if target not in LAYOUTS:
        raise MigrationError(f"unknown layout {target!r} (one of {', '.join(LAYOUTS)})")
    if not _QUEUE.fullmatch(shard):
        raise MigrationError(f"shard names are letters, digits or underscores, not {shard!r}")
    if batch < 1 or batch_bytes < 1:
        raise MigrationError("the batch size must be at least 1")
    if int(client.info("cluster").get("cluster_enabled", 0)):
        raise MigrationError("this Redis is a cluster node: the original layout cannot live in a cluster")
    if not force:
        _refuse_if_served(client, shard)
    marker = layout_key(shard)
    previous = client.get(marker)
    summary = MigrationSummary(shard, target, None if previous is None else _text(previous))
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
    mover = _Mover(client, shard, target, batch, batch_bytes)
    for queue in mover.live_queues():
        moved = mover.move_queue(queue, on_progress)
        if moved is not None:  # None: not a queue after all (a name without c, in the compact layout)
            summary.moved.add(moved)
            summary.queues.append(queue)
    for queue in mover.counter_only_queues():
        mover.move_queue(queue, None)  # a not-live queue: the call only copies its counter
        summary.counters += 1
    left = mover.live_queues()
    if left:  # servers ran anyway (forced) and created queues meanwhile: the next run takes them
        raise MigrationError(
            f"queue(s) {', '.join(left)} appeared in the {mover.source} layout during the move; run again"
        )
    client.set(marker, target)
    return summary


def _refuse_if_served(client: redis.Redis, shard: str) -> None:
    name = server_client_name(shard)
    connected = [c for c in client.client_list() if c.get("name") == name]
    if connected:
        addresses = ", ".join(sorted({str(c.get("addr", "?")).rsplit(":", 1)[0] for c in connected}))
        raise MigrationError(
            f"{len(connected)} connection(s) named {name} are open (from {addresses}): stop the servers "
            f"of shard {shard} first, or pass --force"
        )


class _Mover:
    """One direction of the move for one shard: the script, the keys of each queue."""

    def __init__(self, client: redis.Redis, shard: str, target: Layout, batch: int, batch_bytes: int) -> None:
        self._client = client
        self._shard = shard
        self._target = target
        self._batch = batch
        self._batch_bytes = batch_bytes
        self.source: Layout = "original" if target == "compact" else "compact"
        self._script = client.register_script(script_source(f"to_{target}"))

    def live_queues(self) -> list[str]:
        """The queues still in the source layout (named there), oldest first."""
        if self.source == "original":
            return self._names(queue_names_key(self._shard))
        names = self._names(compact_names_key(self._shard))
        # A queue exists while its records hash has c; one whose name never reached the names
        # set (a crash between the two writes of create_queue) is found by that hash.
        unnamed = [q for q in self._scan_queues() if q not in names and self._client.hexists(self._records(q), "c")]
        return names + sorted(unnamed)

    def _names(self, key: str) -> list[str]:
        members: list[Any] = self._client.zrange(key, 0, -1)
        return [_text(m) for m in members]

    def counter_only_queues(self) -> list[str]:
        """Queues whose counter is left in the source after their deletion. In the original
        layout the pattern ``plj_{S}_*`` also matches the counters of a shard named ``{S}_x`` on
        the same Redis, which is why counters are copied but never deleted here."""
        return sorted(set(self._scan_queues()))

    def _scan_queues(self) -> Iterable[str]:
        """Queues with a counter in the source: ``plj_{S}_{Q}``, or a compact records hash
        (which holds the counter, field ``id``)."""
        if self.source == "original":
            prefix, suffix = job_id_key(self._shard, ""), ""
        else:
            prefix, suffix = self._records("\0").split("\0")
        for key in self._client.scan_iter(match=f"{prefix}*{suffix}", count=SCAN_COUNT):
            queue = _text(key)[len(prefix) : -len(suffix) or None]
            if _QUEUE.fullmatch(queue):
                yield queue

    def _records(self, queue: str) -> str:
        """The compact records hash, which also holds the queue's fields c and id."""
        return CompactQueueKeys(self._shard, queue).jobs_arg

    def move_queue(self, queue: str, on_progress: ProgressCallback | None) -> Moved | None:
        """Call the script until the queue is finished: what moved, or None if the source holds
        no such queue (then only its counter was copied)."""
        keys, args = self._call(queue)
        total = Moved()
        batches = 0
        while True:
            reply = self._script(keys, args, client=self._client)
            batches += 1
            done, *counts = (int(v) for v in reply)
            if done == NOT_IN_SOURCE:
                return None
            total.add(Moved(*counts))
            if on_progress is not None:
                on_progress(QueueProgress(queue, batches, replace(total), bool(done)))
            if done:
                return total

    def _call(self, queue: str) -> tuple[list[str], list[Any]]:
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
        return keys, [queue, original.jobs_arg, self._batch, self._batch_bytes, len(priorities)]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
