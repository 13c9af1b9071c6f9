"""The queue config file's rules for ordered groups and in-progress caps (pinlater extensions).

Beside the original's ``maxJobsPerSecond`` (``ratelimit.py``), a queue's ``queueConfig`` may set:

- ``groupConcurrency``: how many jobs of one ordered group (``groupKey``) run at once (default 1);
- ``maxInProgress``: at most that many jobs of the queue IN_PROGRESS at once, across every server;
- ``groupJobsPerSecond``: each group of the queue is handed out at most that many jobs a second.

The stores enforce them (``ShardStore.set_queue_rules``); ``ShardedBackend`` splits
``maxInProgress`` between the shards. Like the rates, they are reloaded when the file changes.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from pinlater.backends.base import QueueRules
from pinlater.errors import ConfigError

#: The rule keys of a ``queueConfig``, besides the original's ``maxJobsPerSecond``.
RULE_KEYS = ("groupConcurrency", "maxInProgress", "groupJobsPerSecond")

#: The largest ``groupConcurrency`` and ``maxInProgress`` taken (a store keeps them as integers).
MAX_COUNT = 1_000_000_000
#: The range of ``groupJobsPerSecond`` taken: a token at most every 1,000 s (a store moves a
#: metered job's run-after to its next token, which must stay a sane time), at most a million a
#: second (a bucket holds that many).
MIN_GROUP_RATE, MAX_GROUP_RATE = 0.001, 1_000_000.0


def queue_entries(text: str) -> list[tuple[str, dict[str, Any], list[str]]]:
    """Each listed queue's name, ``queueConfig`` (``{}`` when absent) and the entry's other keys,
    in file order; ``ConfigError`` with the reason for a file that is not ``{"queues": [...]}``."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"not JSON: {exc}") from None
    queues = data.get("queues") if isinstance(data, dict) else None
    if not isinstance(queues, list):
        raise ConfigError('expected {"queues": [...]}')
    out: list[tuple[str, dict[str, Any], list[str]]] = []
    seen: set[str] = set()
    for i, entry in enumerate(queues):
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise ConfigError(f"queues[{i}]: expected an object with a string 'name'")
        try:
            entry["name"].encode("utf-8")
        except UnicodeEncodeError:  # JSON's "\ud800": no queue can have it, and the limiter took part of the file
            raise ConfigError(f"queues[{i}]: 'name' {entry['name']!r} is not text (a lone surrogate)") from None
        config = entry.get("queueConfig", {})
        if not isinstance(config, dict):
            raise ConfigError(f"queues[{i}] ({entry['name']}): queueConfig must be an object")
        if entry["name"] in seen:  # (the last one was in force, the first looked to be)
            raise ConfigError(f"queues[{i}]: {entry['name']!r} is listed before: list a queue once")
        seen.add(entry["name"])
        out.append((entry["name"], config, [key for key in entry if key not in ("name", "queueConfig")]))
    return out


@dataclass(frozen=True, slots=True)
class QueueConfig:
    """A queue config file, parsed and checked whole (``parse_queue_file``)."""

    #: Queue name -> max jobs per second (0: paused), for the queues that set one.
    rates: dict[str, float]
    #: Queue name -> its rules, for the queues that set any (``max_in_progress`` is the whole
    #: queue's cap here, not a shard's share).
    rules: dict[str, QueueRules]
    #: What the file says that this server ignores (unknown keys), one line each, for the
    #: server to log when it takes the file.
    warnings: tuple[str, ...] = ()


#: Where the admin's pause (``admin_files.pause_queue``) remembers the rate it replaced, in the
#: queue's ``queueConfig``, whose unknown keys the original ignored (its ``Queue`` entries took no
#: key but ``name`` and ``queueConfig``: an earlier build's key beside them made an original
#: server refuse the whole file).
PAUSED_FROM = "pausedFromMaxJobsPerSecond"

#: The keys of a ``queueConfig`` this server reads.
KNOWN_KEYS = frozenset({"maxJobsPerSecond", PAUSED_FROM, *RULE_KEYS})


def parse_queue_file(text: str) -> QueueConfig:
    """The rates and rules of a queue config file, in one pass over one parse of it (a server
    takes a file of a hundred thousand queues in a second or two, on a thread of its own: it
    was parsed three times on the event loop); ``ConfigError`` with the reason refuses the file
    whole. Nothing is logged here: what it says that this server ignores or reads as the original
    did is in ``warnings`` (an admin edit parses a file several times, the server once).

    ``maxJobsPerSecond`` is read as the original read it (Jackson into a ``double``, then 0 or
    less pauses the queue): absent or null is 0, a negative rate pauses, a number in a string
    ("5") is that number, each with a warning, where they had stopped the server at start. An
    entry with pinlater's rules (``RULE_KEYS``) and no rate (absent or null) has no rate limit. A rate that is
    not a finite number, ``true`` or a string of no number refuses the file (the original failed
    on them too)."""
    rates: dict[str, float] = {}
    rules: dict[str, QueueRules] = {}
    warnings: list[str] = []
    for i, (name, config, extra) in enumerate(queue_entries(text)):
        where = f"queues[{i}] ({name})"
        if not config.keys() <= KNOWN_KEYS:  # (kept, as the original kept them; but a typo's rule was dropped unseen)
            unknown = sorted(key for key in config if key not in KNOWN_KEYS)
            warnings.append(f"queue config: {where}: {unknown[:5]} not a key of this server: ignored")
        if extra:
            warnings.append(
                f"queue config: {where}: {sorted(extra)[:5]} beside name and queueConfig: ignored here, "
                "and an original server refuses the whole file"
            )
        has_rules = any(key in config for key in RULE_KEYS)
        if config.get("maxJobsPerSecond") is not None or not has_rules:  # (rules, no rate or null: no limit)
            rate, read_as = _original_rate(config.get("maxJobsPerSecond"))
            if rate is None:
                raise ConfigError(f"{where}: maxJobsPerSecond must be a number >= 0")
            if read_as:
                warnings.append(f"queue config: {where}: maxJobsPerSecond {read_as}")
            rates[name] = rate
        if has_rules:
            rules[name] = _rules(where, config)
    return QueueConfig(rates, rules, tuple(warnings))


def _original_rate(value: Any) -> tuple[float | None, str]:
    """A ``maxJobsPerSecond`` as the original read it, and how it was read when not plainly (for
    a warning); None if it refused it too."""
    if value is None:
        return 0.0, "not set: the queue is paused (0), as the original read it"
    how = ""
    if isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            return None, ""
        value, how = number, f"is a string ({value[:20]!r}): read as {number:g}"
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None, ""
    if value < 0:
        return 0.0, f"is {value:g}: the queue is paused (0), as the original read it"
    return float(value), how


def parse_queue_rules(text: str) -> dict[str, QueueRules]:
    """Queue name -> its rules, for the queues that set any (``parse_queue_file``)."""
    return parse_queue_file(text).rules


def _rules(where: str, config: dict[str, Any]) -> QueueRules:
    concurrency = config.get("groupConcurrency", 1)
    if not _is_count(concurrency):
        raise ConfigError(f"{where}: groupConcurrency must be a whole number from 1 to {MAX_COUNT}")
    cap = config.get("maxInProgress")
    if cap is not None and not _is_count(cap):
        raise ConfigError(f"{where}: maxInProgress must be a whole number from 1 to {MAX_COUNT}")
    rate = config.get("groupJobsPerSecond")
    if rate is not None and (
        isinstance(rate, bool)
        or not isinstance(rate, int | float)
        or not math.isfinite(rate)
        or not MIN_GROUP_RATE <= rate <= MAX_GROUP_RATE
    ):
        raise ConfigError(f"{where}: groupJobsPerSecond must be a number from {MIN_GROUP_RATE:g} to {MAX_GROUP_RATE:g}")
    return QueueRules(concurrency, cap, None if rate is None else float(rate))


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_COUNT


def cap_share(cap: int | None, index: int, shards: int) -> int | None:
    """Shard ``index``'s (of ``shards``, in name order) share of a queue's ``maxInProgress``:
    the cap split evenly, the remainder to the first shards, so the shares add up to the cap. A
    share is at least 1 (a shard with none could never hand out its jobs), so a cap below the
    number of shards is exceeded, by at most one job a shard."""
    if cap is None:
        return None
    return max(1, cap // shards + (1 if index < cap % shards else 0))
