"""Start-up check of a Redis shard's own durability settings.

A queue must not lose acknowledged jobs. On Redis that needs the append-only file (``appendonly
yes``; ``appendfsync always``, or ``everysec`` accepting up to a second of loss), no eviction
(``maxmemory-policy noeviction``: an evicted job hash is a lost job), and, where replicas exist,
``min-replicas-to-write`` so that a failover cannot drop acknowledged writes. The original's
README warned that Redis-backed queues can lose data; this says which risk applies, once, at
start (the server logs each string). A cluster shard is checked on every master, each warning
naming its master.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import redis

from pinlater.backends.redis.cluster_scripts import LazyRedisCluster

if TYPE_CHECKING:
    from pinlater.backends.redis.store import RedisStore


def durability_warnings(store: RedisStore) -> list[str]:
    """Warnings about ``store``'s Redis settings, each naming the shard and the risk; empty
    when the shard is set up as a durable queue. Never raises: a shard that cannot be read
    yields a warning saying so."""
    client = store.client
    if not isinstance(client, LazyRedisCluster):
        assert isinstance(client, redis.Redis)
        return _node_warnings(f"redis shard {store.name} ({store.config.master})", client)
    seeds = ",".join(str(seed) for seed in store.config.cluster)
    try:
        masters = client.primaries()
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        return [f"redis shard {store.name} (cluster {seeds}): cannot check durability settings: {exc}"]
    warnings = []
    for address, node in sorted(masters.items()):
        warnings += _node_warnings(f"redis shard {store.name} (cluster master {address})", node)
    return warnings


def _node_warnings(where: str, client: redis.Redis) -> list[str]:
    try:
        config: dict[Any, Any] = client.config_get("*")
        replication: dict[str, Any] = client.info("replication")
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        return [f"{where}: cannot check durability settings, the server did not answer: {exc}"]
    except redis.ResponseError as exc:
        return [f"{where}: cannot read CONFIG/INFO ({exc}); durability settings unknown, check them by hand"]
    settings = {_text(k): _text(v) for k, v in config.items()}
    return [f"{where}: {message}" for message in _risks(settings, replication)]


def _risks(config: dict[str, str], replication: dict[str, Any]) -> list[str]:
    risks = []
    if config.get("appendonly", "no") != "yes":
        risks.append(
            "appendonly is no (AOF off): jobs written since the last RDB snapshot are lost if Redis stops; "
            "set appendonly yes with appendfsync always (or everysec, up to 1 s of loss)"
        )
    elif config.get("appendfsync") == "no":
        risks.append(
            "appendfsync is no: the OS decides when the AOF reaches disk, so a crash can lose tens of seconds "
            "of jobs; set appendfsync always (or everysec, up to 1 s of loss)"
        )
    policy = config.get("maxmemory-policy", "noeviction")
    if policy != "noeviction":
        maxmemory = config.get("maxmemory", "0")
        limit = "no maxmemory is set now, but one set later" if maxmemory == "0" else f"at maxmemory {maxmemory}"
        risks.append(
            f"maxmemory-policy is {policy}: {limit} makes Redis evict keys, and an evicted job hash is a lost job; "
            "set maxmemory-policy noeviction (writes then fail loudly instead)"
        )
    role = str(replication.get("role", "master"))
    if role != "master":
        risks.append(f"the server is a {role}, not the master: it refuses writes, so enqueue and dequeue will fail")
    elif int(replication.get("connected_slaves", 0)) > 0 and config.get("min-replicas-to-write", "0") == "0":
        risks.append(
            "replicas are connected but min-replicas-to-write is 0: a failover can drop acknowledged jobs; "
            "set min-replicas-to-write 1"
        )
    return risks


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
