"""Server settings: the original's properties keys, with flags layered on top.

``Settings`` is frozen. ``resolve_settings`` builds it from layers: the defaults, then a
properties file (``parse_properties``/``load_properties``: key=value per line, ``#`` or ``!``
comments), then the flags; a later layer wins, and the result is validated once, so checks that
read two values (the backend and its config file) see them wherever each came from. A bad value
raises ``ConfigError`` naming its source: the flag, or the file, line and key.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import logging
import math
import os
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pinlater.config_files import read_config_text
from pinlater.errors import ConfigError

log = logging.getLogger(__name__)

#: The largest number a setting takes (2**40): a TTL of that many hours is still a 64-bit count
#: of milliseconds, and a count of that many jobs or bytes a Rust usize.
MAX_SETTING = 2**40

#: A request on the admin port that has run this long has its connection closed
#: (``server/admin_conns.py``); an admin body's timeout is below it.
ADMIN_REQUEST_SECONDS = 120.0

BACKENDS = ("embedded", "redis", "mysql")
EVENT_LOOPS = ("auto", "uvloop", "asyncio")


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
    # BROKER_BUFFER_BYTES: a refill stops once the queue's buffer holds bodies of this many bytes
    broker_buffer_bytes: int = 64 * 1024 * 1024
    broker_low_water_fraction: float = 0.25  # BROKER_LOW_WATER_FRACTION: refill in the background below
    # BROKER_HOLD_SECONDS: how long a reservation lasts; None: min(20 s, claim timeout / 4). Buffered
    # jobs are released after half of it, well before the reservation could lapse.
    broker_hold_seconds: float | None = None
    # Limits on what one peer can hold (issue 14). MAX_CONNECTIONS is kept below the open-files
    # limit less OPEN_FILES_RESERVE (the files stores, SQLite and the admin port need).
    max_connections: int = 10_000  # MAX_CONNECTIONS
    # MAX_CONNECTIONS_PER_PEER: connections one host may hold; None: nine tenths of the cap in
    # force, so one host opening connections in a loop leaves the rest a tenth of the slots
    max_connections_per_peer: int | None = None
    open_files_reserve: int = 1024  # OPEN_FILES_RESERVE
    frame_timeout_seconds: float = 60.0  # FRAME_TIMEOUT_SECONDS: a frame arrives whole within this
    # ADMIN_BODY_TIMEOUT_SECONDS: an admin request's body arrives whole within this, or is answered 408
    admin_body_timeout_seconds: float = 30.0
    # ADMIN_ALLOWED_HOSTS: host names (comma-separated) a request to an admin port listening
    # beyond loopback may name in its Host header, besides IP addresses, localhost and this
    # machine's own names; "*" takes any (no defence against DNS rebinding)
    admin_allowed_hosts: tuple[str, ...] = ()
    # ADMIN_STOP_COMMANDS: the admin port's Ostrich stop commands (/shutdown, /quiesce,
    # /quitquitquit, /abortabortabort), without a password, from a peer on loopback only
    admin_stop_commands: bool = False
    # MAX_PENDING_FRAME_BYTES: bytes held in unfinished frames over all connections
    max_pending_frame_bytes: int = 256 * 1024 * 1024
    # SERVER_CONN_MAX_IDLE_TIME_MINUTES (the original's key and value): idle connections close; 0 never
    server_conn_max_idle_time_minutes: float = 5.0
    max_scan_limit: int = 10_000  # MAX_SCAN_LIMIT: most jobs in one scanJobs reply (a larger limit gets this)
    # MAX_QUEUES: createQueue of a new queue is refused while the shards hold this many queues (a
    # peer creating queues in a loop makes a database per queue on MySQL, and the monitor's passes
    # grow with the queues); queues already there are served whatever their number.
    max_queues: int = 10_000
    # REDIS_MEMORY_HIGH_WATER_FRACTION: a shard whose store reports memory used at or above this
    # fraction of its limit (Redis used_memory / maxmemory) takes no new jobs; when every shard
    # is there, enqueue is refused (ENQUEUE_REJECTED) while dequeue and ack drain the backlog.
    # 0.8: claiming a backlog of small jobs grows it by about 13% until GC (backends/redis/memory.py).
    redis_memory_high_water_fraction: float = 0.8
    # REDIS_MEMORY_PROBE_INTERVAL_SECONDS: how often each shard's memory is read (one INFO each).
    redis_memory_probe_interval_seconds: float = 1.0
    # BODY_FILTER_TIME_BUDGET_SECONDS: how long one request may spend on a bodyRegexToMatch filter
    # (count, scan, delete; over all its shards and priorities) on the embedded and Redis stores; past it the
    # request fails with an error naming this key instead of returning a partial answer.
    body_filter_time_budget_seconds: float = 10.0
    # SERVER_PROCESSES (or --processes): server processes sharing the Thrift port (SO_REUSEPORT;
    # the kernel spreads connections), each a full server over the same shards; "auto" is the
    # cores this process may run on. 1 by default: the store (Redis, MariaDB) often shares the
    # machine and is the limit, every process holds its own store connections and broker buffers,
    # and the embedded store serves from one process only (server/processes.py).
    server_processes: int = 1
    # EVENT_LOOP: what runs the server's asyncio code. "auto" (the default): uvloop where it is
    # installed (a dependency on Linux and macOS: the same loop in C over libuv, about a tenth
    # less server CPU per job), else asyncio's own; "uvloop" insists on it; "asyncio" never uses it.
    event_loop: str = "auto"

    @property
    def broker_hold_ms(self) -> int:
        """The reservation hold in effect (see ``broker_hold_seconds``)."""
        if self.broker_hold_seconds is not None:
            return int(self.broker_hold_seconds * 1000)
        return int(min(20.0, self.backend_monitor_job_claimed_timeout_seconds / 4) * 1000)

    @classmethod
    def from_properties(cls, text: str, source: str = "properties") -> Settings:
        """Parse a properties file's text over the defaults and validate the result."""
        return resolve_settings(parse_properties(text, source))

    def with_values(self, values: Mapping[str, Any], source: str = "flags") -> Settings:
        """A copy with ``values`` (attribute names) applied, then validated."""
        updated = dataclasses.replace(self, **values)
        updated.validate({attr: f"{source} {_KEY_OF.get(attr, attr)}" for attr in values})
        return updated

    def validate(self, origins: Mapping[str, str] | None = None) -> None:
        """Raise ``ConfigError`` on the first value out of range, naming where that value came
        from (``origins``: attribute name -> a flag or ``FILE:LINE KEY``; defaults name the key).
        Every number must be finite and at most ``MAX_SETTING`` either way first: ``inf`` passed
        "positive" and crashed the start, 1e300 hours of GC TTL failed every monitor pass."""
        for item in dataclasses.fields(self):
            value = getattr(self, item.name)
            if isinstance(value, int | float) and not isinstance(value, bool):
                if not (math.isfinite(value) and -MAX_SETTING <= value <= MAX_SETTING):
                    where = _origin_of((item.name,), origins or {})
                    raise ConfigError(f"{where}: {value!r} is not a finite number within +-{MAX_SETTING}")
        for ok, attrs, message in self._checks():
            if not ok:
                raise ConfigError(f"{_origin_of(attrs, origins or {})}: {message}")

    def _checks(self) -> list[tuple[bool, tuple[str, ...], str]]:
        """(holds, the attributes it reads, what is wrong when it does not)."""
        return [
            (0 <= self.port <= 65535, ("port",), f"port {self.port} is not in 0..65535"),
            (0 <= self.admin_port <= 65535, ("admin_port",), f"admin port {self.admin_port} is not in 0..65535"),
            (1 <= self.num_priority_levels <= 127, ("num_priority_levels",), "must be in 1..127"),
            (
                self.backend in BACKENDS,
                ("backend",),
                f"backend must be one of {', '.join(BACKENDS)}, not {self.backend!r}",
            ),
            (self.max_concurrent_requests >= 1, ("max_concurrent_requests",), "must be at least 1"),
            (self.backend_query_parallelism >= 1, ("backend_query_parallelism",), "must be at least 1"),
            (self.backend_connections_per_shard >= 1, ("backend_connections_per_shard",), "must be at least 1"),
            (self.backend_num_auto_retries >= 0, ("backend_num_auto_retries",), "must not be negative"),
            (self.backend_socket_timeout_seconds > 0, ("backend_socket_timeout_seconds",), "must be positive"),
            (
                self.backend_monitor_thread_delay_seconds > 0,
                ("backend_monitor_thread_delay_seconds",),
                "must be positive",
            ),
            (self.backend_monitor_update_max_size >= 1, ("backend_monitor_update_max_size",), "must be at least 1"),
            (
                self.backend_monitor_job_claimed_timeout_seconds > 0,
                ("backend_monitor_job_claimed_timeout_seconds",),
                "claim timeout must be positive",
            ),
            (
                self.backend_monitor_job_succeeded_gc_ttl_hours >= 0,
                ("backend_monitor_job_succeeded_gc_ttl_hours",),
                "succeeded GC TTL must not be negative",
            ),
            (
                self.backend_monitor_job_failed_gc_ttl_hours >= 0,
                ("backend_monitor_job_failed_gc_ttl_hours",),
                "failed GC TTL must not be negative",
            ),
            (self.mysql_num_db_per_queue >= 1, ("mysql_num_db_per_queue",), "must be at least 1"),
            (self.mysql_count_limit >= 1, ("mysql_count_limit",), "must be at least 1"),
            (self.embedded_num_shards >= 1, ("embedded_num_shards",), "must be at least 1"),
            (self.embedded_synchronous in ("FULL", "NORMAL"), ("embedded_synchronous",), "must be FULL or NORMAL"),
            (self.max_frame_bytes >= 1024, ("max_frame_bytes",), "must be at least 1024"),
            (self.broker_buffer_size >= 1, ("broker_buffer_size",), "must be at least 1"),
            (self.broker_buffer_bytes >= 1, ("broker_buffer_bytes",), "must be at least 1"),
            (0 <= self.broker_low_water_fraction <= 1, ("broker_low_water_fraction",), "must be in 0..1"),
            (self.max_connections >= 1, ("max_connections",), "must be at least 1"),
            (
                self.max_connections_per_peer is None or self.max_connections_per_peer >= 1,
                ("max_connections_per_peer",),
                "must be at least 1",
            ),
            (self.open_files_reserve >= 0, ("open_files_reserve",), "must not be negative"),
            (self.frame_timeout_seconds > 0, ("frame_timeout_seconds",), "must be positive"),
            (
                0 < self.admin_body_timeout_seconds < ADMIN_REQUEST_SECONDS,
                ("admin_body_timeout_seconds",),
                f"must be positive and below {ADMIN_REQUEST_SECONDS:g} (a request's most seconds on the admin port)",
            ),
            (
                self.max_pending_frame_bytes >= self.max_frame_bytes,
                ("max_pending_frame_bytes", "max_frame_bytes"),
                "MAX_PENDING_FRAME_BYTES must be at least MAX_FRAME_BYTES",
            ),
            (
                self.server_conn_max_idle_time_minutes >= 0,
                ("server_conn_max_idle_time_minutes",),
                "must not be negative",
            ),
            (self.max_scan_limit >= 1, ("max_scan_limit",), "must be at least 1"),
            (self.max_queues >= 1, ("max_queues",), "must be at least 1"),
            (self.body_filter_time_budget_seconds > 0, ("body_filter_time_budget_seconds",), "must be positive"),
            (1 <= self.server_processes <= 1024, ("server_processes",), "must be in 1..1024 (or auto)"),
            (self.event_loop in EVENT_LOOPS, ("event_loop",), f"must be one of {', '.join(EVENT_LOOPS)}"),
            (
                self.event_loop != "uvloop" or uvloop_installed(),
                ("event_loop",),
                "uvloop is not installed here (pip install uvloop), or set EVENT_LOOP to auto or asyncio",
            ),
            (
                self.backend != "embedded" or self.server_processes == 1,
                ("server_processes", "backend"),
                f"the embedded backend serves from one process (one process holds its data directory), "
                f"not {self.server_processes}: set SERVER_PROCESSES to 1, or use the redis or mysql backend",
            ),
            (
                self.broker_hold_seconds is None
                or 0.01 <= self.broker_hold_seconds <= self.backend_monitor_job_claimed_timeout_seconds / 2,
                ("broker_hold_seconds", "backend_monitor_job_claimed_timeout_seconds"),
                "BROKER_HOLD_SECONDS must be at least 0.01 and at most half the claim timeout",
            ),
            (
                0 < self.redis_memory_high_water_fraction <= 1,
                ("redis_memory_high_water_fraction",),
                "must be more than 0 and at most 1",
            ),
            (
                self.redis_memory_probe_interval_seconds > 0,
                ("redis_memory_probe_interval_seconds",),
                "must be positive",
            ),
            (
                not self.server_set_enabled or self.server_set_path is not None,
                ("server_set_enabled", "server_set_path"),
                "SERVER_SET_ENABLED needs SERVER_SET_PATH",
            ),
            (
                self.backend != "embedded" or self.backend_config_path is None,
                ("backend", "backend_config_path"),
                "the embedded backend takes no backend config file (its files are in EMBEDDED_DATA_DIR)",
            ),
            (
                self.backend == "embedded" or self.backend_config_path is not None,
                ("backend", "backend_config_path"),
                f"the {self.backend} backend needs a backend config file (--backend-config or BACKEND_CONFIG_PATH)",
            ),
        ]


@dataclass(frozen=True, slots=True)
class SettingsLayer:
    """Values from one source (a properties file, the command line), by attribute name, each
    with where it came from: ``origins[attr]`` is ``FILE:LINE KEY`` or a flag such as ``--port``."""

    values: Mapping[str, Any]
    origins: Mapping[str, str]


def resolve_settings(*layers: SettingsLayer) -> Settings:
    """The defaults, then each layer in turn (a later one wins: pass the properties file, then
    the flags), validated once, so a check that reads two values (say the backend and its
    config file) sees them wherever each came from. A bad value is a ``ConfigError`` naming
    its source and key."""
    values: dict[str, Any] = {}
    origins: dict[str, str] = {}
    for layer in layers:
        values.update(layer.values)
        origins.update(layer.origins)
    config_path = values.get("backend_config_path")
    if "backend" not in values and config_path is not None:
        # The original's MySQL properties files name no backend (anything but "redis" meant
        # MySQL there); its two config formats tell the backend apart.
        try:
            values["backend"] = backend_of_config(config_path)
        except ConfigError as exc:
            raise ConfigError(f"{origins.get('backend_config_path', 'BACKEND_CONFIG_PATH')}: {exc}") from None
        origins["backend"] = f"{origins['backend_config_path']} (a {values['backend']} shard config)"
    settings = dataclasses.replace(Settings(), **values)
    settings.validate(origins)
    return settings


def backend_of_config(path: Path) -> str:
    """Which backend a shard config file is for, by its shape: the original's Redis files are
    ``{"shards": [...]}``, its MySQL files map shard names to ``{"master": {...}, ...}``."""
    text = read_config_text(path, "backend config")
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"backend config {path} is not JSON: {exc}") from None
    if isinstance(data, dict) and "shards" in data:
        return "redis"
    if isinstance(data, dict) and data and all(isinstance(v, dict) and "master" in v for v in data.values()):
        return "mysql"
    raise ConfigError(f"cannot tell which backend {path} is for: set PINLATER_BACKEND or --backend")


#: Keys of the original's properties that this server has no use for: taken without a word.
ORIGINAL_UNUSED_KEYS = frozenset({"BACKEND_CONNECTION_MAX_WAIT_MILLIS"})


def parse_properties(text: str, source: str = "properties") -> SettingsLayer:
    """A properties file's text as a layer, read as the original read it (Apache Commons
    Configuration, Java's properties format: ``java_properties``): ``KEY=VALUE``, ``KEY: VALUE``
    or ``KEY VALUE``, ``#`` or ``!`` comments, a line ending in a backslash continued on the next,
    backslash escapes (``\\t``, ``\\uXXXX``, ``\\=``...), integers in hex (``0x10``) too. A key
    set twice takes its first value, as the original's ``getString`` did, with a warning. A key
    this server does not know is ignored with a warning naming it (a typo's setting was dropped
    unseen), except the original's unused ones (``ORIGINAL_UNUSED_KEYS``); a value that does not
    convert is a ``ConfigError`` naming ``source:line`` and the key."""
    values: dict[str, Any] = {}
    origins: dict[str, str] = {}
    first_line: dict[str, int] = {}
    for lineno, key, value in java_properties(text, source):
        if key in first_line:
            log.warning(
                "%s:%d: %s is set again (first at line %d): the first value is used, as the original did",
                source,
                lineno,
                key[:80],
                first_line[key],
            )
            continue
        first_line[key] = lineno
        spec = _PROPERTIES.get(key)
        if spec is None:
            if key not in ORIGINAL_UNUSED_KEYS:
                log.warning("%s:%d: %s is not a key of this server: ignored (a typo?)", source, lineno, key[:80])
            continue
        attr, convert = spec
        try:
            values[attr] = convert(value)
        except ValueError as exc:
            raise ConfigError(f"{source}:{lineno}: {key}={value!r}: {exc}") from None
        origins[attr] = f"{source}:{lineno} {key}={value}"
    return SettingsLayer(values, origins)


_ESCAPED = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_JAVA_LINES = re.compile(r"\r\n|\r|\n")
_KEY_END = re.compile(r"(?:\\.|[^=:\s\\])*", re.DOTALL)


def java_properties(text: str, source: str = "properties") -> Iterator[tuple[int, str, str]]:
    """(line number, key, value) of each entry of a Java properties text, in order: a line whose
    first non-blank character is ``#`` or ``!`` is a comment; one ending in an odd number of
    backslashes goes on with the next (less its leading blanks); the key ends at the first
    ``=``, ``:`` or blank not escaped, and blanks, then one ``=`` or ``:``, then blanks separate
    it from the value (a line of a key alone has an empty value; trailing blanks are dropped);
    ``\\t``, ``\\n``, ``\\r``,
    ``\\f`` and ``\\uXXXX`` are unescaped, and a backslash before any other character stands
    for that character."""
    lines = _JAVA_LINES.split(text)  # (Java's line ends only: splitlines also split at \f, \v, U+2028...)
    i = 0
    while i < len(lines):
        lineno, logical = i + 1, lines[i].lstrip(" \t\f")
        i += 1
        if not logical or logical[0] in "#!":
            continue
        while _continued(logical) and i < len(lines):
            logical = logical[:-1] + lines[i].lstrip(" \t\f")
            i += 1
        if _continued(logical):  # (a last line's trailing backslash: dropped, as Java does)
            logical = logical[:-1]
        key_end = _KEY_END.match(logical)
        assert key_end is not None  # (the pattern matches the empty string)
        raw_key, rest = logical[: key_end.end()], logical[key_end.end() :].lstrip(" \t\f")
        if rest[:1] in ("=", ":"):
            rest = rest[1:].lstrip(" \t\f")
        # (a value's trailing blanks dropped, as this server always did: Java kept them, which
        # broke a path or a number read by the original, so its files have none that matter)
        try:
            yield lineno, _unescape(raw_key), _unescape(rest.rstrip(" \t\f"))
        except ValueError as exc:
            raise ConfigError(f"{source}:{lineno}: {exc}") from None


def _continued(line: str) -> bool:
    """Whether ``line`` ends in an odd number of backslashes (the last one escapes the newline)."""
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch != "\\" or i + 1 == len(text):
            out.append(ch)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "u":
            digits = text[i + 2 : i + 6]
            if len(digits) != 4 or not all(c in "0123456789abcdefABCDEF" for c in digits):
                raise ValueError(f"malformed \\uXXXX escape {text[i : i + 6]!r}")
            out.append(chr(int(digits, 16)))
            i += 6
            continue
        out.append(_ESCAPED.get(nxt, nxt))
        i += 2
    return "".join(out)


_JAVA_INT = re.compile(r"[+-]?(?:0[xX][0-9a-fA-F]+|0[bB][01]+|[0-9]+)", re.ASCII)


def _java_int(value: str) -> int:
    """An integer as the original's configuration read one: decimal digits, or ``0x`` hex or
    ``0b`` binary, with a sign (ASCII only: Python's ``int`` took other scripts' digits)."""
    text = value.strip()
    if not _JAVA_INT.fullmatch(text):
        raise ValueError(f"expected an integer, not {value[:40]!r}")
    return int(text, 0) if text.lstrip("+-")[:2].lower() in ("0x", "0b") else int(text, 10)


def _origin_of(attrs: tuple[str, ...], origins: Mapping[str, str]) -> str:
    """Where the first of ``attrs`` that was set came from; else the first one's key (a default)."""
    for attr in attrs:
        if attr in origins:
            return origins[attr]
    return _KEY_OF.get(attrs[0], attrs[0])


def _bool(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("true", "yes", "1", "on"):
        return True
    if lowered in ("false", "no", "0", "off"):
        return False
    raise ValueError("expected true or false")


def _path(value: str) -> Path | None:
    return Path(value) if value else None


def directory(value: str) -> Path:
    """A directory's path: an empty one was the current directory, unsaid (a store's files
    written where the command ran)."""
    if not value.strip():
        raise ValueError("must name a directory, not be empty")
    return Path(value)


def _lower(value: str) -> str:
    return value.strip().lower()


def _upper(value: str) -> str:
    return value.strip().upper()


def processes(value: str) -> int:
    """SERVER_PROCESSES: a whole number, or ``auto``: the cores this process may run on."""
    if value.strip().lower() == "auto":
        return usable_cores()
    try:
        return int(value)
    except ValueError:
        raise ValueError("expected a whole number or auto") from None


def uvloop_installed() -> bool:
    """Whether ``uvloop`` can be imported (EVENT_LOOP)."""
    return importlib.util.find_spec("uvloop") is not None


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity; all cores where that is unknown)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _host_names(text: str) -> tuple[str, ...]:
    """A comma-separated list of host names, each lowercased, without a trailing dot, and a name
    of other than ASCII in the form a browser sends in ``Host`` (IDNA: ``bücher.example`` is
    ``xn--bcher-kva.example``), which it was compared with as written, and never matched."""
    names = (name.strip().lower().rstrip(".") for name in text.split(",") if name.strip())
    return tuple(name if name.isascii() else _idna(name) for name in names)


def _idna(name: str) -> str:
    try:
        return name.encode("idna").decode("ascii")
    except UnicodeError as exc:
        raise ValueError(f"{name!r} is not a host name IDNA can encode ({exc})") from None


_PROPERTIES: dict[str, tuple[str, Callable[[str], Any]]] = {
    "THRIFT_PORT": ("port", _java_int),
    "OSTRICH_PORT": ("admin_port", _java_int),
    "NUM_PRIORITY_LEVELS": ("num_priority_levels", _java_int),
    "ADMIN_PASSWORD_HASH": ("admin_password_hash", _lower),
    "QUEUE_CONFIG_FILE_PATH": ("queue_config_file_path", _path),
    "SERVER_SET_ENABLED": ("server_set_enabled", _bool),
    "SERVER_SET_PATH": ("server_set_path", _path),
    "MAX_CONCURRENT_REQUESTS": ("max_concurrent_requests", _java_int),
    "BACKEND_CONNECTIONS_PER_SHARD": ("backend_connections_per_shard", _java_int),
    "BACKEND_DEQUEUE_CONCURRENCY_PER_QUEUE_PER_SHARD": ("backend_dequeue_concurrency_per_queue_per_shard", _java_int),
    "BACKEND_QUERY_PARALLELISM": ("backend_query_parallelism", _java_int),
    "BACKEND_NUM_AUTO_RETRIES": ("backend_num_auto_retries", _java_int),
    "BACKEND_SOCKET_TIMEOUT_SECONDS": ("backend_socket_timeout_seconds", float),
    "BACKEND_MONITOR_THREAD_DELAY_SECONDS": ("backend_monitor_thread_delay_seconds", float),
    "BACKEND_MONITOR_UPDATE_MAX_SIZE": ("backend_monitor_update_max_size", _java_int),
    "BACKEND_MONITOR_JOB_CLAIMED_TIMEOUT_SECONDS": ("backend_monitor_job_claimed_timeout_seconds", float),
    "BACKEND_MONITOR_JOB_SUCCEEDED_GC_TTL_HOURS": ("backend_monitor_job_succeeded_gc_ttl_hours", float),
    "BACKEND_MONITOR_JOB_FAILED_GC_TTL_HOURS": ("backend_monitor_job_failed_gc_ttl_hours", float),
    "MYSQL_NUM_DB_PER_QUEUE": ("mysql_num_db_per_queue", _java_int),
    "MYSQL_COUNT_LIMIT": ("mysql_count_limit", _java_int),
    "SHARD_ALLOWED_HOSTNAME_PREFIX": ("shard_allowed_hostname_prefix", str.strip),
    "PINLATER_BACKEND": ("backend", _lower),
    "BACKEND_CONFIG_PATH": ("backend_config_path", _path),
    "EMBEDDED_DATA_DIR": ("data_dir", directory),
    "EMBEDDED_NUM_SHARDS": ("embedded_num_shards", _java_int),
    "EMBEDDED_SYNCHRONOUS": ("embedded_synchronous", _upper),
    "MAX_FRAME_BYTES": ("max_frame_bytes", _java_int),
    "BROKER_ENABLED": ("broker_enabled", _bool),
    "BROKER_BUFFER_SIZE": ("broker_buffer_size", _java_int),
    "BROKER_BUFFER_BYTES": ("broker_buffer_bytes", _java_int),
    "BROKER_LOW_WATER_FRACTION": ("broker_low_water_fraction", float),
    "BROKER_HOLD_SECONDS": ("broker_hold_seconds", float),
    "MAX_CONNECTIONS": ("max_connections", _java_int),
    "MAX_CONNECTIONS_PER_PEER": ("max_connections_per_peer", _java_int),
    "OPEN_FILES_RESERVE": ("open_files_reserve", _java_int),
    "FRAME_TIMEOUT_SECONDS": ("frame_timeout_seconds", float),
    "ADMIN_BODY_TIMEOUT_SECONDS": ("admin_body_timeout_seconds", float),
    "ADMIN_ALLOWED_HOSTS": ("admin_allowed_hosts", _host_names),
    "ADMIN_STOP_COMMANDS": ("admin_stop_commands", _bool),
    "MAX_PENDING_FRAME_BYTES": ("max_pending_frame_bytes", _java_int),
    "SERVER_CONN_MAX_IDLE_TIME_MINUTES": ("server_conn_max_idle_time_minutes", float),
    "MAX_SCAN_LIMIT": ("max_scan_limit", _java_int),
    "MAX_QUEUES": ("max_queues", _java_int),
    "REDIS_MEMORY_HIGH_WATER_FRACTION": ("redis_memory_high_water_fraction", float),
    "REDIS_MEMORY_PROBE_INTERVAL_SECONDS": ("redis_memory_probe_interval_seconds", float),
    "BODY_FILTER_TIME_BUDGET_SECONDS": ("body_filter_time_budget_seconds", float),
    "SERVER_PROCESSES": ("server_processes", processes),
    "EVENT_LOOP": ("event_loop", _lower),
}

#: Attribute name -> its properties key, for errors about a value left at its default.
_KEY_OF: dict[str, str] = {attr: key for key, (attr, _convert) in _PROPERTIES.items()}


def load_properties(path: Path) -> SettingsLayer:
    """Read and parse a properties file; a missing or unreadable file is a ``ConfigError``."""
    return parse_properties(read_config_text(path, "properties file"), source=str(path))
