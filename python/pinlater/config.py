"""Server settings: the original's properties keys, with flags layered on top.

``Settings`` is frozen; build it with ``Settings.from_properties`` (a properties file's text,
key=value per line, ``#`` or ``!`` comments) and ``dataclasses.replace`` for flags. Every value
is validated here, so the rest of the server can trust it; a bad value raises ``ConfigError``
naming the key.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pinlater.errors import ConfigError

BACKENDS = ("embedded", "redis", "mysql")


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything a server needs to know at start-up. Defaults are the original's."""

    host: str = "127.0.0.1"
    port: int = 9010  # THRIFT_PORT
    admin_host: str = "127.0.0.1"
    admin_port: int = 9999  # OSTRICH_PORT
    num_priority_levels: int = 3  # NUM_PRIORITY_LEVELS
    admin_password_hash: str = ""  # ADMIN_PASSWORD_HASH; empty: deleteQueue is refused
    queue_config_file_path: Path | None = None  # QUEUE_CONFIG_FILE_PATH
    server_set_enabled: bool = False  # SERVER_SET_ENABLED
    server_set_path: Path | None = None  # SERVER_SET_PATH
    max_concurrent_requests: int = 1000  # MAX_CONCURRENT_REQUESTS
    backend_connections_per_shard: int = 8  # BACKEND_CONNECTIONS_PER_SHARD
    backend_dequeue_concurrency_per_queue_per_shard: int = 1
    backend_query_parallelism: int = 16  # BACKEND_QUERY_PARALLELISM: threads for store calls
    backend_num_auto_retries: int = 1  # BACKEND_NUM_AUTO_RETRIES
    backend_socket_timeout_seconds: float = 5.0  # BACKEND_SOCKET_TIMEOUT_SECONDS
    backend_monitor_thread_delay_seconds: float = 10.0
    backend_monitor_update_max_size: int = 1000
    backend_monitor_job_claimed_timeout_seconds: float = 180.0
    backend_monitor_job_succeeded_gc_ttl_hours: float = 1.0
    backend_monitor_job_failed_gc_ttl_hours: float = 2.0
    mysql_num_db_per_queue: int = 1  # MYSQL_NUM_DB_PER_QUEUE
    mysql_count_limit: int = 100_000  # MYSQL_COUNT_LIMIT
    shard_allowed_hostname_prefix: str = ""  # SHARD_ALLOWED_HOSTNAME_PREFIX: stripped from MySQL shard keys
    backend: str = "embedded"  # PINLATER_BACKEND
    backend_config_path: Path | None = None  # BACKEND_CONFIG_PATH (or --backend-config)
    data_dir: Path = field(default_factory=lambda: Path("pinlater-data"))  # EMBEDDED_DATA_DIR
    embedded_num_shards: int = 1  # EMBEDDED_NUM_SHARDS: SQLite files, each its own shard
    embedded_synchronous: str = "FULL"  # EMBEDDED_SYNCHRONOUS: FULL (power-safe) or NORMAL
    max_frame_bytes: int = 16 * 1024 * 1024  # MAX_FRAME_BYTES
    # BROKER_ENABLED: serve dequeues from memory, from a per-queue buffer of reservations. Off by
    # default: it costs the store a reservation write per job (see README, issue 5).
    broker_enabled: bool = False
    broker_buffer_size: int = 1000  # BROKER_BUFFER_SIZE: jobs reserved ahead, per queue and server
    broker_low_water_fraction: float = 0.25  # BROKER_LOW_WATER_FRACTION: refill in the background below
    # BROKER_HOLD_SECONDS: how long a reservation lasts; None: min(20 s, claim timeout / 4). Buffered
    # jobs are released after half of it, well before the reservation could lapse.
    broker_hold_seconds: float | None = None
    # BODY_FILTER_TIME_BUDGET_SECONDS: how long one store call (a shard and priority) may spend on a
    # bodyRegexToMatch filter (count, scan, delete) on the embedded and Redis stores; past it the
    # request fails with an error naming this key instead of returning a partial answer.
    body_filter_time_budget_seconds: float = 10.0

    @property
    def broker_hold_ms(self) -> int:
        """The reservation hold in effect (see ``broker_hold_seconds``)."""
        if self.broker_hold_seconds is not None:
            return int(self.broker_hold_seconds * 1000)
        return int(min(20.0, self.backend_monitor_job_claimed_timeout_seconds / 4) * 1000)

    @classmethod
    def from_properties(cls, text: str, source: str = "properties") -> Settings:
        """Parse a properties file's text; unknown keys are ignored (the original had more)."""
        values: dict[str, Any] = {}
        for lineno, raw in enumerate(text.splitlines(), start=1):
            line = raw.strip()
            if not line or line[0] in "#!":
                continue
            key, sep, value = _split_property(line)
            if not sep:
                raise ConfigError(f"{source}:{lineno}: expected KEY=VALUE, got {line!r}")
            spec = _PROPERTIES.get(key)
            if spec is None:
                continue
            attr, convert = spec
            try:
                values[attr] = convert(value)
            except ValueError as exc:
                raise ConfigError(f"{source}:{lineno}: {key}={value!r}: {exc}") from None
        return cls().with_values(values, source)

    def with_values(self, values: Mapping[str, Any], source: str = "flags") -> Settings:
        """A copy with ``values`` (attribute names) applied, then validated."""
        updated = dataclasses.replace(self, **values)
        updated.validate(source)
        return updated

    def validate(self, source: str = "settings") -> None:
        """Raise ``ConfigError`` on the first value out of range."""
        checks: list[tuple[bool, str]] = [
            (0 <= self.port <= 65535, f"port {self.port} is not in 0..65535"),
            (0 <= self.admin_port <= 65535, f"admin port {self.admin_port} is not in 0..65535"),
            (1 <= self.num_priority_levels <= 127, "NUM_PRIORITY_LEVELS must be in 1..127"),
            (self.backend in BACKENDS, f"backend must be one of {', '.join(BACKENDS)}, not {self.backend!r}"),
            (self.max_concurrent_requests >= 1, "MAX_CONCURRENT_REQUESTS must be at least 1"),
            (self.backend_query_parallelism >= 1, "BACKEND_QUERY_PARALLELISM must be at least 1"),
            (self.backend_connections_per_shard >= 1, "BACKEND_CONNECTIONS_PER_SHARD must be at least 1"),
            (self.backend_num_auto_retries >= 0, "BACKEND_NUM_AUTO_RETRIES must not be negative"),
            (self.backend_socket_timeout_seconds > 0, "BACKEND_SOCKET_TIMEOUT_SECONDS must be positive"),
            (self.backend_monitor_thread_delay_seconds > 0, "BACKEND_MONITOR_THREAD_DELAY_SECONDS must be positive"),
            (self.backend_monitor_update_max_size >= 1, "BACKEND_MONITOR_UPDATE_MAX_SIZE must be at least 1"),
            (self.backend_monitor_job_claimed_timeout_seconds > 0, "claim timeout must be positive"),
            (self.backend_monitor_job_succeeded_gc_ttl_hours >= 0, "succeeded GC TTL must not be negative"),
            (self.backend_monitor_job_failed_gc_ttl_hours >= 0, "failed GC TTL must not be negative"),
            (self.mysql_num_db_per_queue >= 1, "MYSQL_NUM_DB_PER_QUEUE must be at least 1"),
            (self.mysql_count_limit >= 1, "MYSQL_COUNT_LIMIT must be at least 1"),
            (self.embedded_num_shards >= 1, "EMBEDDED_NUM_SHARDS must be at least 1"),
            (self.embedded_synchronous in ("FULL", "NORMAL"), "EMBEDDED_SYNCHRONOUS must be FULL or NORMAL"),
            (self.max_frame_bytes >= 1024, "MAX_FRAME_BYTES must be at least 1024"),
            (self.body_filter_time_budget_seconds > 0, "BODY_FILTER_TIME_BUDGET_SECONDS must be positive"),
            (self.broker_buffer_size >= 1, "BROKER_BUFFER_SIZE must be at least 1"),
            (0 <= self.broker_low_water_fraction <= 1, "BROKER_LOW_WATER_FRACTION must be in 0..1"),
            (
                self.broker_hold_seconds is None
                or 0.01 <= self.broker_hold_seconds <= self.backend_monitor_job_claimed_timeout_seconds / 2,
                "BROKER_HOLD_SECONDS must be at least 0.01 and at most half the claim timeout",
            ),
            (
                not self.server_set_enabled or self.server_set_path is not None,
                "SERVER_SET_ENABLED needs SERVER_SET_PATH",
            ),
            (
                self.backend == "embedded" or self.backend_config_path is not None,
                f"the {self.backend} backend needs a backend config file (--backend-config)",
            ),
        ]
        for ok, message in checks:
            if not ok:
                raise ConfigError(f"{source}: {message}")


def _split_property(line: str) -> tuple[str, str, str]:
    for i, ch in enumerate(line):
        if ch in "=:":
            return line[:i].strip(), ch, line[i + 1 :].strip()
    return line, "", ""


def _bool(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("true", "yes", "1", "on"):
        return True
    if lowered in ("false", "no", "0", "off"):
        return False
    raise ValueError("expected true or false")


def _path(value: str) -> Path | None:
    return Path(value) if value else None


def _lower(value: str) -> str:
    return value.strip().lower()


def _upper(value: str) -> str:
    return value.strip().upper()


_PROPERTIES: dict[str, tuple[str, Callable[[str], Any]]] = {
    "THRIFT_PORT": ("port", int),
    "OSTRICH_PORT": ("admin_port", int),
    "NUM_PRIORITY_LEVELS": ("num_priority_levels", int),
    "ADMIN_PASSWORD_HASH": ("admin_password_hash", _lower),
    "QUEUE_CONFIG_FILE_PATH": ("queue_config_file_path", _path),
    "SERVER_SET_ENABLED": ("server_set_enabled", _bool),
    "SERVER_SET_PATH": ("server_set_path", _path),
    "MAX_CONCURRENT_REQUESTS": ("max_concurrent_requests", int),
    "BACKEND_CONNECTIONS_PER_SHARD": ("backend_connections_per_shard", int),
    "BACKEND_DEQUEUE_CONCURRENCY_PER_QUEUE_PER_SHARD": ("backend_dequeue_concurrency_per_queue_per_shard", int),
    "BACKEND_QUERY_PARALLELISM": ("backend_query_parallelism", int),
    "BACKEND_NUM_AUTO_RETRIES": ("backend_num_auto_retries", int),
    "BACKEND_SOCKET_TIMEOUT_SECONDS": ("backend_socket_timeout_seconds", float),
    "BACKEND_MONITOR_THREAD_DELAY_SECONDS": ("backend_monitor_thread_delay_seconds", float),
    "BACKEND_MONITOR_UPDATE_MAX_SIZE": ("backend_monitor_update_max_size", int),
    "BACKEND_MONITOR_JOB_CLAIMED_TIMEOUT_SECONDS": ("backend_monitor_job_claimed_timeout_seconds", float),
    "BACKEND_MONITOR_JOB_SUCCEEDED_GC_TTL_HOURS": ("backend_monitor_job_succeeded_gc_ttl_hours", float),
    "BACKEND_MONITOR_JOB_FAILED_GC_TTL_HOURS": ("backend_monitor_job_failed_gc_ttl_hours", float),
    "MYSQL_NUM_DB_PER_QUEUE": ("mysql_num_db_per_queue", int),
    "MYSQL_COUNT_LIMIT": ("mysql_count_limit", int),
    "SHARD_ALLOWED_HOSTNAME_PREFIX": ("shard_allowed_hostname_prefix", str.strip),
    "PINLATER_BACKEND": ("backend", _lower),
    "BACKEND_CONFIG_PATH": ("backend_config_path", _path),
    "EMBEDDED_DATA_DIR": ("data_dir", Path),
    "EMBEDDED_NUM_SHARDS": ("embedded_num_shards", int),
    "EMBEDDED_SYNCHRONOUS": ("embedded_synchronous", _upper),
    "MAX_FRAME_BYTES": ("max_frame_bytes", int),
    "BROKER_ENABLED": ("broker_enabled", _bool),
    "BROKER_BUFFER_SIZE": ("broker_buffer_size", int),
    "BROKER_LOW_WATER_FRACTION": ("broker_low_water_fraction", float),
    "BROKER_HOLD_SECONDS": ("broker_hold_seconds", float),
    "BODY_FILTER_TIME_BUDGET_SECONDS": ("body_filter_time_budget_seconds", float),
}


def load_properties_file(path: Path) -> Settings:
    """Read and parse a properties file; a missing or unreadable file is a ``ConfigError``."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read properties file {path}: {exc.strerror}") from None
    return Settings.from_properties(text, source=str(path))
