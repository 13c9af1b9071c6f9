"""The original MySQL backend config file, and the driver that opens its shards.

The file is the original's JSON, accepted unchanged::

    {"pinlaterdb001": {"master": {"host": "db1", "port": 3306}, "slave": {...},
                       "user": "pinlater", "passwd": "secret", "dequeueOnly": false}}

Each key names one MySQL instance. The original stripped ``SHARD_ALLOWED_HOSTNAME_PREFIX`` from
the key and read the rest as the instance id (so ``pinlaterlocaldb001`` with the prefix
``pinlaterlocaldb`` is instance 1); with ``MYSQL_NUM_DB_PER_QUEUE`` = n the instance then serves
the shards ``1``, ``1d1`` .. ``1d{n-1}`` (see ``names.shard_name``). Here, with a prefix given,
keys without it are skipped as in the original; without one, a key ending in digits has its
letters dropped (``pinlaterlocaldb001`` -> ``1``, ``2`` -> ``2``), and any other key made of
letters and digits is used as it is.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pinlater.backends.base import ShardConfig
from pinlater.backends.drivers import DriverDefaults
from pinlater.backends.mysql.names import shard_name
from pinlater.errors import ConfigError

if TYPE_CHECKING:
    from pinlater.backends.mysql.store import MySQLStore
    from pinlater.config import Settings

_NUMBERED_KEY = re.compile(r"[A-Za-z]*([0-9]+)")
_NAMED_KEY = re.compile(r"[A-Za-z0-9]+")
_SHARD_KEYS = frozenset({"master", "slave", "user", "passwd", "dequeueOnly"})


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A MySQL server address."""

    host: str
    port: int = 3306


@dataclass(frozen=True, slots=True)
class MySQLShardConfig:
    """One shard's connection. ``dequeue_only`` takes no part in equality (a flag flip keeps
    the open store). ``slave`` is parsed and kept but not used: every query goes to the master,
    as in the original."""

    master: Endpoint
    user: str
    passwd: str = field(default="", repr=False)
    slave: Endpoint | None = None
    dequeue_only: bool = field(default=False, compare=False)


def parse_mysql_config(
    text: str, source: str, *, num_db_per_queue: int = 1, shard_name_prefix: str = ""
) -> dict[str, MySQLShardConfig]:
    """Parse the original JSON into ``{shard name: config}``, expanded to every database of each
    instance. Raises ``ConfigError`` with a one-line reason naming ``source``."""
    if num_db_per_queue < 1:
        raise ConfigError(f"{source}: MYSQL_NUM_DB_PER_QUEUE must be at least 1")
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"{source}: not valid JSON: {exc}") from None
    if not isinstance(document, dict):
        raise ConfigError(f"{source}: expected a JSON object of shards, got {type(document).__name__}")
    shards: dict[str, MySQLShardConfig] = {}
    owner: dict[str, str] = {}
    for key, entry in document.items():
        base = _base_shard_name(key, source, shard_name_prefix)
        if base is None:
            continue
        config = _parse_shard(entry, f"{source}: shard {key!r}")
        for db_index in range(num_db_per_queue):
            name = shard_name(int(base), db_index) if base.isascii() and base.isdigit() else _named(base, db_index)
            if name in owner:
                raise ConfigError(f"{source}: shards {owner[name]!r} and {key!r} both map to shard name {name!r}")
            owner[name] = key
            shards[name] = config
    return shards


def _named(base: str, db_index: int) -> str:
    return base if db_index == 0 else f"{base}d{db_index}"


def _base_shard_name(key: str, source: str, prefix: str) -> str | None:
    if prefix:
        if not key.startswith(prefix):
            return None
        rest = key[len(prefix) :]
        if not (rest.isascii() and rest.isdigit()):
            raise ConfigError(f"{source}: shard {key!r}: expected digits after the prefix {prefix!r}")
        return str(int(rest))
    numbered = _NUMBERED_KEY.fullmatch(key)
    if numbered:
        return str(int(numbered.group(1)))
    if _NAMED_KEY.fullmatch(key):
        return key
    raise ConfigError(f"{source}: shard {key!r}: a shard name must be letters and digits only")


def _parse_shard(entry: Any, where: str) -> MySQLShardConfig:
    if not isinstance(entry, dict):
        raise ConfigError(f"{where}: expected an object")
    unknown = sorted(set(entry) - _SHARD_KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown field(s) {', '.join(unknown)}")
    if "master" not in entry:
        raise ConfigError(f'{where}: missing "master"')
    master = _parse_endpoint(entry["master"], f"{where}: master")
    slave = None if entry.get("slave") is None else _parse_endpoint(entry["slave"], f"{where}: slave")
    user = entry.get("user")
    passwd = entry.get("passwd", "")
    dequeue_only = entry.get("dequeueOnly", False)
    if not isinstance(user, str) or not user:
        raise ConfigError(f'{where}: "user" must be a non-empty string')
    if passwd is None:
        passwd = ""
    if not isinstance(passwd, str):
        raise ConfigError(f'{where}: "passwd" must be a string')
    if not isinstance(dequeue_only, bool):
        raise ConfigError(f'{where}: "dequeueOnly" must be true or false')
    return MySQLShardConfig(master=master, user=user, passwd=passwd, slave=slave, dequeue_only=dequeue_only)


def _parse_endpoint(value: Any, where: str) -> Endpoint:
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: expected an object with host and port")
    host = value.get("host")
    port = value.get("port", 3306)
    if not isinstance(host, str) or not host:
        raise ConfigError(f'{where}: "host" must be a non-empty string')
    if isinstance(port, str) and port.isascii() and port.isdigit():
        port = int(port)
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise ConfigError(f'{where}: "port" must be an integer in 1..65535')
    return Endpoint(host=host, port=port)


class MySQLDriver(DriverDefaults):
    """``BackendDriver`` for ``kind="mysql"``.

    ``num_db_per_queue`` (MYSQL_NUM_DB_PER_QUEUE) expands each instance into its shards at parse
    time; ``shard_name_prefix`` is the original's SHARD_ALLOWED_HOSTNAME_PREFIX (empty: see the
    module docstring). Build it with ``MySQLDriver.from_settings(settings)``.

    The driver remembers the longest shard name of the last config it parsed (a server parses
    only the config it is about to apply) and its stores read it when creating a queue: a queue
    name whose database would pass 64 characters on any shard is refused on every shard.
    """

    kind = "mysql"

    def __init__(self, num_db_per_queue: int = 1, shard_name_prefix: str = "") -> None:
        self.num_db_per_queue = num_db_per_queue
        self.shard_name_prefix = shard_name_prefix
        self.longest_shard_name = ""

    @classmethod
    def from_settings(cls, settings: Settings) -> MySQLDriver:
        return cls(
            num_db_per_queue=settings.mysql_num_db_per_queue,
            shard_name_prefix=settings.shard_allowed_hostname_prefix,
        )

    def count_limit(self, settings: Settings) -> int | None:
        return settings.mysql_count_limit

    def parse_config(self, text: str, source: str) -> dict[str, ShardConfig]:
        shards = parse_mysql_config(
            text, source, num_db_per_queue=self.num_db_per_queue, shard_name_prefix=self.shard_name_prefix
        )
        if shards:
            self.longest_shard_name = max(shards, key=len)
        return dict(shards)

    def open_store(self, name: str, config: ShardConfig, settings: Settings) -> MySQLStore:
        from pinlater.backends.mysql.store import MySQLStore

        if not isinstance(config, MySQLShardConfig):
            raise TypeError(f"expected a MySQLShardConfig for shard {name!r}, got {type(config).__name__}")
        store = MySQLStore(
            name,
            config,
            pool_size=settings.backend_connections_per_shard,
            socket_timeout=settings.backend_socket_timeout_seconds,
            num_auto_retries=settings.backend_num_auto_retries,
            longest_shard_name=lambda: self.longest_shard_name,
            body_filter_budget_seconds=settings.body_filter_time_budget_seconds,
        )
        store.warm_up()  # as the original did: connect now, but a shard that is down is not fatal
        return store
