"""``EmbeddedDriver``: the embedded store as a backend driver like Redis and MySQL.

Its shards are named by the settings (``EMBEDDED_NUM_SHARDS`` files under ``EMBEDDED_DATA_DIR``),
not listed in a config file, so there is nothing to watch or reload; and one server holds the
data directory alone (``DataDirLock``, taken by ``acquire`` before any file is opened).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pinlater.backends.drivers import DriverDefaults
from pinlater.backends.embedded.lock import DataDirLock
from pinlater.backends.embedded.store import EmbeddedStore, WriterCounts
from pinlater.errors import ConfigError

if TYPE_CHECKING:
    from pinlater.backends.base import ShardConfig
    from pinlater.backends.shardmap import Shard
    from pinlater.config import Settings


@dataclass(frozen=True, slots=True)
class EmbeddedShardConfig:
    """One embedded shard: a file named after the shard in the data directory. Every embedded
    shard takes new jobs."""

    dequeue_only: bool = False


class EmbeddedDriver(DriverDefaults):
    """``base.BackendDriver`` for the embedded store (see the module docstring)."""

    kind = "embedded"

    def __init__(self) -> None:
        self._lock: DataDirLock | None = None

    def config_path(self, settings: Settings) -> Path | None:
        return None

    def shard_configs(self, settings: Settings) -> dict[str, ShardConfig]:
        """Shards "1", "2", ... up to ``EMBEDDED_NUM_SHARDS``; a data dir holding a shard's file
        past them is a ``ConfigError``: its jobs would be served by no one (the key lowered, a
        restart hid half the jobs, unsaid)."""
        count = settings.embedded_num_shards
        beyond = sorted(
            number
            for path in settings.data_dir.glob("shard-*.sqlite3")
            if (number := _shard_number(path.name)) is not None and number > count
        )
        if beyond:
            raise ConfigError(
                f"{settings.data_dir} holds shard {', '.join(map(str, beyond[:5]))} past EMBEDDED_NUM_SHARDS={count}:"
                f" its jobs would not be served; set EMBEDDED_NUM_SHARDS to {beyond[-1]} or more"
            )
        return {str(number): EmbeddedShardConfig() for number in range(1, count + 1)}

    def gauges(self, shards: Callable[[], Iterable[Shard]]) -> Mapping[str, Callable[[], float]]:
        """The Rust writers' counts (``WriterCounts``) over the shards, as ``embedded_commits``,
        ``embedded_wal_syncs``, ``embedded_checkpoints_copied``, ``embedded_checkpoints_by_writer``
        and ``embedded_checkpoint_fallbacks``: totals since start."""

        def total(field: int) -> Callable[[], float]:
            def read() -> float:
                return sum(s.store.writer_counts()[field] for s in shards() if isinstance(s.store, EmbeddedStore))

            return read

        return {f"embedded_{name}": total(i) for i, name in enumerate(WriterCounts._fields)}

    def parse_config(self, text: str, source: str) -> dict[str, ShardConfig]:
        raise ConfigError(
            f"{source}: the embedded backend takes no backend config file (its files are in EMBEDDED_DATA_DIR)"
        )

    def open_store(self, name: str, config: ShardConfig, settings: Settings) -> EmbeddedStore:
        return EmbeddedStore(
            settings.data_dir,
            name,
            settings.embedded_synchronous,
            # How long a call waits for SQLite's write lock: the same budget as a socket timeout.
            int(settings.backend_socket_timeout_seconds * 1000),
            settings.body_filter_time_budget_seconds,
        )

    def acquire(self, settings: Settings) -> None:
        if self._lock is None:
            lock = DataDirLock(settings.data_dir)
            lock.acquire()
            self._lock = lock

    def release(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None


def _shard_number(file_name: str) -> int | None:
    """N of ``shard-N.sqlite3`` (the store's file of shard "N"), or None for another name."""
    middle = file_name[len("shard-") : -len(".sqlite3")]
    return int(middle) if middle.isascii() and middle.isdigit() else None
