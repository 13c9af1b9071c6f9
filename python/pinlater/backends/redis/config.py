"""The Redis backend's JSON shard config, in the original's format, and its driver.

The original file is read unchanged::

    {"shards": [{"name": "1",
                 "shardConfig": {"master": {"host": "10.0.0.1", "port": 6379},
                                 "slave": {"host": "10.0.0.2", "port": 6379},
                                 "dequeueOnly": false}}]}

``slave`` and ``dequeueOnly`` are optional, and so is ours, ``"layout"``: ``"original"`` or
``"compact"`` (``keys_compact.py``), beside ``"name"`` and ``"shardConfig"``; without it the shard's
own record of its layout decides (``layouts.py``). As with the original (Jackson's defaults), an unknown
field is an error, so a misspelt ``dequeueOnly`` does not pass silently. Shard names appear in key
names and job descriptors, so they must be letters, digits, ``_``, ``-`` or ``.`` (the original
took any name without ``:``; these cover the usual ones, and none of them is
special in a key name, a SCAN pattern or a Cluster hash tag), and unique.

A shard on a Redis Cluster lists seed nodes (any of its nodes; the masters are found from them)
instead of ``master`` and ``slave``; it is always in the compact layout (``"layout": "original"``
beside ``"cluster"`` is an error)::

    {"name": "2", "shardConfig": {"cluster": [{"host": "10.0.0.3", "port": 7000},
                                              {"host": "10.0.0.4", "port": 7000}]}}
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pinlater.backends.drivers import DriverDefaults
from pinlater.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

    from pinlater.backends.base import ShardConfig, ShardStore
    from pinlater.backends.shardmap import Shard
    from pinlater.config import Settings

#: A Redis shard's name (``SHARD_NAME_RULE``), as job descriptors take it (``rust/queue/descriptor.rs``).
SHARD_NAME = re.compile(r"[\w.-]+", re.ASCII)
SHARD_NAME_RULE = "letters, digits, '_', '-' or '.'"

LAYOUTS = ("original", "compact")
"""The values of a shard's ``"layout"``."""


@dataclass(frozen=True, slots=True)
class RedisEndpoint:
    """One Redis server."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class RedisShardConfig:
    """One shard: its master, an optional replica, and whether it takes new jobs.

    The replica is parsed and kept, but every read and write goes to the master for now (the
    original did the same). ``dequeue_only`` is left out of equality on purpose: flipping it
    keeps the open store (see ``base.ShardConfig``).

    ``cluster``: the seed nodes of a Redis Cluster, or empty for one server. A cluster shard has
    ``master`` set to its first seed (named in messages only), no ``slave``, and the compact
    layout.
    """

    master: RedisEndpoint
    slave: RedisEndpoint | None = None
    dequeue_only: bool = field(default=False, compare=False)
    #: ``"original"``, ``"compact"``, or None: whatever the shard holds (``layouts.choose_layout``).
    layout: str | None = None
    cluster: tuple[RedisEndpoint, ...] = ()

    @property
    def is_cluster(self) -> bool:
        return bool(self.cluster)


def parse_redis_config(text: str, source: str) -> dict[str, RedisShardConfig]:
    """Parse the JSON text of a Redis backend config; ``source`` names the file in errors.

    Raises ``ConfigError`` with a one-line reason for anything that is not a valid config.
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{source}: not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})") from None
    where = "the top level"
    _check_object(data, where, source, required={"shards"}, allowed={"shards"})
    shards = data["shards"]
    if not isinstance(shards, list):
        raise ConfigError(f'{source}: "shards" must be a list')
    result: dict[str, RedisShardConfig] = {}
    for i, entry in enumerate(shards):
        where = f"shards[{i}]"
        _check_object(entry, where, source, required={"name", "shardConfig"}, allowed={"name", "shardConfig", "layout"})
        layout = entry.get("layout")
        if layout is not None and layout not in LAYOUTS:
            raise ConfigError(
                f"{source}: {where}.layout must be one of {', '.join(map(repr, LAYOUTS))}, not {layout!r}"
            )
        name = entry["name"]
        if isinstance(name, int) and not isinstance(name, bool):
            name = str(name)
        if not isinstance(name, str) or not SHARD_NAME.fullmatch(name):
            raise ConfigError(f"{source}: {where}.name must be {SHARD_NAME_RULE}, not {name!r}")
        if name in result:
            raise ConfigError(f"{source}: shard name {name!r} appears twice")
        shard = entry["shardConfig"]
        where = f"shard {name!r} shardConfig"
        _check_object(shard, where, source, required=set(), allowed={"master", "slave", "cluster", "dequeueOnly"})
        dequeue_only = shard.get("dequeueOnly", False)
        if not isinstance(dequeue_only, bool):
            raise ConfigError(f"{source}: {where}.dequeueOnly must be true or false, not {dequeue_only!r}")
        if "cluster" in shard:
            result[name] = _cluster_shard(shard, dequeue_only, layout, where, source)
            continue
        if "master" not in shard:
            raise ConfigError(f"{source}: {where} is missing 'master' (or 'cluster', a list of seed nodes)")
        slave = shard.get("slave")
        result[name] = RedisShardConfig(
            master=_endpoint(shard["master"], f"{where}.master", source),
            slave=None if slave is None else _endpoint(slave, f"{where}.slave", source),
            dequeue_only=dequeue_only,
            layout=layout,
        )
    return result


def _cluster_shard(
    shard: dict[str, Any], dequeue_only: bool, layout: str | None, where: str, source: str
) -> RedisShardConfig:
    """A shard on a Redis Cluster: always the compact layout (the original's keys of one queue
    are spread over slots, and its scripts name keys of several queues)."""
    if layout == "original":
        raise ConfigError(
            f'{source}: {where} has "cluster" but the shard says "layout": "original": a Redis Cluster shard '
            'needs the compact layout (every key of a queue in one slot); drop "layout" or say "compact"'
        )
    both = sorted({"master", "slave"} & shard.keys())
    if both:
        names = " and ".join(repr(b) for b in both)
        raise ConfigError(
            f"{source}: {where} has 'cluster' and {names}: a cluster shard lists seed nodes only "
            "(the cluster says which are masters)"
        )
    seeds = shard["cluster"]
    if not isinstance(seeds, list) or not seeds:
        raise ConfigError(f"{source}: {where}.cluster must be a non-empty list of {{host, port}} seed nodes")
    nodes = tuple(_endpoint(seed, f"{where}.cluster[{i}]", source) for i, seed in enumerate(seeds))
    return RedisShardConfig(
        master=nodes[0], dequeue_only=dequeue_only, layout="compact", cluster=tuple(dict.fromkeys(nodes))
    )


def _check_object(value: Any, where: str, source: str, *, required: set[str], allowed: set[str]) -> None:
    if not isinstance(value, dict):
        raise ConfigError(f"{source}: {where} must be a JSON object")
    missing = sorted(required - value.keys())
    if missing:
        raise ConfigError(f"{source}: {where} is missing {', '.join(repr(m) for m in missing)}")
    unknown = sorted(value.keys() - allowed)
    if unknown:
        raise ConfigError(f"{source}: {where} has unknown field(s) {', '.join(repr(u) for u in unknown)}")


def _endpoint(value: Any, where: str, source: str) -> RedisEndpoint:
    _check_object(value, where, source, required={"host", "port"}, allowed={"host", "port"})
    host, port = value["host"], value["port"]
    if not isinstance(host, str) or not host:
        raise ConfigError(f"{source}: {where}.host must be a non-empty string")
    if isinstance(port, str) and port.isascii() and port.isdigit():
        port = int(port)
    if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
        raise ConfigError(f"{source}: {where}.port must be a number in 1..65535, not {port!r}")
    return RedisEndpoint(host, port)


class RedisDriver(DriverDefaults):
    """``base.BackendDriver`` for Redis: parses the original JSON and opens one store per shard;
    warns at start about a shard's own settings that could lose jobs; counts evicted jobs."""

    kind = "redis"

    def warnings(self, store: ShardStore) -> list[str]:
        from pinlater.backends.redis.durability import durability_warnings
        from pinlater.backends.redis.store import RedisStore

        return durability_warnings(store) if isinstance(store, RedisStore) else []

    def gauges(self, shards: Callable[[], Iterable[Shard]]) -> Mapping[str, Callable[[], float]]:
        # Jobs met without their hash (evicted) and skipped, over the shards configured now.
        return {"redis_evicted_jobs": lambda: sum(getattr(s.store, "evicted_jobs", 0) for s in shards())}

    def parse_config(self, text: str, source: str) -> dict[str, ShardConfig]:
        return dict(parse_redis_config(text, source))

    def open_store(self, name: str, config: ShardConfig, settings: Settings) -> ShardStore:
        from pinlater.backends.redis.store import RedisStore

        if not isinstance(config, RedisShardConfig):
            raise TypeError(f"shard {name}: expected a RedisShardConfig, got {type(config).__name__}")
        return RedisStore(name, config, settings)
