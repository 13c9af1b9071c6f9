"""A Redis shard's memory, as ``pressure.py`` wants it: ``used_memory`` against ``maxmemory``.

``RedisStore.memory`` is a ``RedisMemoryProbe``. ``refresh`` sends one ``INFO memory`` through the
store's blocking pool and keeps the reading; the server's ``MemoryWatch`` calls it for every shard
each REDIS_MEMORY_PROBE_INTERVAL_SECONDS, and an enqueue calls it again when Redis refused a
write for memory. Nothing on the request path asks Redis for its memory; between two readings, each enqueue this
server makes adds its estimated size to the last reading (``note_enqueued``), so a burst of
enqueues cannot run far past the mark before the next reading.

Why it matters: with ``maxmemory-policy noeviction`` (the only policy that loses no job hash), a
Redis at ``maxmemory`` refuses every script whose first write could grow it, so enqueues fail
and, in the original's scripts, acks too. Measured here (Redis 7.0, 100-byte bodies), a PENDING
job takes about 730 bytes, and claiming it adds about 95 (the claim descriptor; 13%), which stay
until the monitor's GC deletes the acked job after BACKEND_MONITOR_JOB_SUCCEEDED_GC_TTL_HOURS: a
backlog that fills a shard to the mark grows by up to an eighth while it drains. Hence the
default mark of 0.8.

A cluster shard reads ``INFO memory`` on every master and reports the fullest (the highest
used/maxmemory; without any limit, the most used): one full master refuses the writes of its
slots, whatever the others hold.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from pinlater.backends.pressure import MemoryUse
from pinlater.backends.redis.cluster_scripts import LazyRedisCluster, cluster_errors
from pinlater.backends.redis.script_calls import shard_errors

if TYPE_CHECKING:
    import redis

    from pinlater.backends.redis.config import RedisShardConfig

JOB_OVERHEAD_BYTES = 640
"""What a new PENDING job costs Redis beyond its body (measured: 731 bytes with a 100-byte body,
1,681 with 1,000 bytes): the hash, its fields, and the member of the PENDING set."""


DEDUP_RECORD_OVERHEAD_BYTES = 160
"""What a dedup key's record costs beyond its key, which it holds twice (key -> holder and id ->
key; the GC's entry is one per run of a batch's records: ``keys.py``; measured per record of a
batch of 100: 200 bytes with 36-byte keys in the original layout). The compact layout holds the
key in the job's record and in ``:dk`` only (112 bytes there with a 36-byte key), until the job
ends: the estimate between readings stays the original's, an upper bound."""


class RedisMemoryProbe:
    """``pressure.MemoryProbe`` for one Redis shard. Thread-safe: ``refresh`` runs on a worker
    thread, ``note_enqueued`` on the event loop."""

    def __init__(self, name: str, config: RedisShardConfig, client: redis.Redis | LazyRedisCluster) -> None:
        self._name = name
        self._config = config
        self._client = client
        self._lock = threading.Lock()
        self._read: MemoryUse | None = None
        self._written = 0  # estimated bytes this server enqueued since the reading
        #: ``MemoryProbe.limited`` (an attribute, set with each reading: read on every enqueue).
        self.limited = False

    @property
    def latest(self) -> MemoryUse | None:
        with self._lock:
            read, written = self._read, self._written
        if read is None or not written:
            return read
        return MemoryUse(read.used_bytes + written, read.max_bytes)

    def refresh(self) -> MemoryUse:
        with self._lock:
            before = self._written  # writes noted by now are in the answer below
        with shard_errors(self._name, self._config), cluster_errors():
            if isinstance(self._client, LazyRedisCluster):
                use = fullest([_use(node.info("memory")) for node in self._client.primaries().values()])
            else:
                use = _use(self._client.info("memory"))
        with self._lock:
            self._read = use
            self.limited = use.max_bytes > 0
            self._written = max(0, self._written - before)
        return use

    def note_enqueued(self, jobs: int, body_bytes: int, keys: int = 0, key_bytes: int = 0) -> None:
        with self._lock:
            self._written += jobs * JOB_OVERHEAD_BYTES + body_bytes + keys * DEDUP_RECORD_OVERHEAD_BYTES + 2 * key_bytes


def _use(info: dict[str, Any]) -> MemoryUse:
    return MemoryUse(int(info.get("used_memory", 0)), int(info.get("maxmemory", 0)))


def fullest(uses: list[MemoryUse]) -> MemoryUse:
    """The reading of the fullest master: the highest fraction of its limit, or without any
    limit, the most bytes used."""
    limited = [use for use in uses if use.fraction is not None]
    if limited:
        return max(limited, key=lambda use: use.used_bytes / use.max_bytes)
    return max(uses, key=lambda use: use.used_bytes, default=MemoryUse(0, 0))
