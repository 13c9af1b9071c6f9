"""Backend drivers: the one place a backend kind's name is read (``driver_for``).

Every kind is a ``BackendDriver`` (``base.py``); ``DriverDefaults`` holds what most of them share,
and each kind overrides what it does differently (the embedded store's shards and lock, MySQL's
count cap, Redis's durability warnings and eviction gauge).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from pinlater.backends.base import BackendDriver, ShardConfig, ShardStore
from pinlater.config_files import read_config_text
from pinlater.errors import ConfigError

if TYPE_CHECKING:
    from pathlib import Path

    from pinlater.backends.shardmap import Shard
    from pinlater.config import Settings


def driver_for(settings: Settings) -> BackendDriver:
    """The driver of ``settings.backend`` (imported lazily: Redis and MySQL need optional deps)."""
    kind = settings.backend
    if kind == "embedded":
        from pinlater.backends.embedded import EmbeddedDriver

        return EmbeddedDriver()
    if kind == "redis":
        from pinlater.backends.redis import RedisDriver

        return RedisDriver()
    if kind == "mysql":
        from pinlater.backends.mysql import MySQLDriver

        return MySQLDriver.from_settings(settings)
    raise ConfigError(f"unknown backend {kind!r}")


class DriverDefaults:
    """A driver whose shards are listed in ``BACKEND_CONFIG_PATH``, that holds nothing, caps no
    count, warns about nothing and adds no gauges."""

    def config_path(self, settings: Settings) -> Path | None:
        return settings.backend_config_path

    def shard_configs(self: BackendDriver, settings: Settings) -> dict[str, ShardConfig]:
        path = self.config_path(settings)
        if path is None:
            raise ConfigError(f"the {self.kind} backend needs a backend config file (BACKEND_CONFIG_PATH)")
        configs = self.parse_config(read_config_text(path, "backend config"), str(path))
        if not configs:
            raise ConfigError(f"{path}: no shards configured")
        return configs

    def acquire(self, settings: Settings) -> None:
        return None

    def release(self) -> None:
        return None

    def count_limit(self, settings: Settings) -> int | None:
        return None

    def warnings(self, store: ShardStore) -> list[str]:
        return []

    def gauges(self, shards: Callable[[], Iterable[Shard]]) -> Mapping[str, Callable[[], float]]:
        return {}
