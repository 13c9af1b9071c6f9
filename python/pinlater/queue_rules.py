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


def queue_entries(text: str) -> list[tuple[str, dict[str, Any]]]:
    """Each listed queue's name and ``queueConfig`` (``{}`` when absent), in file order;
    ``ConfigError`` with the reason for a file that is not ``{"queues": [...]}``."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"not JSON: {exc}") from None
    queues = data.get("queues") if isinstance(data, dict) else None
    if not isinstance(queues, list):
        raise ConfigError('expected {"queues": [...]}')
    out: list[tuple[str, dict[str, Any]]] = []
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
        out.append((entry["name"], config))
    return out


def parse_queue_rules(text: str) -> dict[str, QueueRules]:
    """Queue name -> its rules, for the queues that set any (``max_in_progress`` is the whole
    queue's cap here, not a shard's share); raises ``ConfigError`` with the reason."""
    rules: dict[str, QueueRules] = {}
    for i, (name, config) in enumerate(queue_entries(text)):
        if not any(key in config for key in RULE_KEYS):
            continue
        where = f"queues[{i}] ({name})"
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
            raise ConfigError(
                f"{where}: groupJobsPerSecond must be a number from {MIN_GROUP_RATE:g} to {MAX_GROUP_RATE:g}"
            )
        rules[name] = QueueRules(concurrency, cap, None if rate is None else float(rate))
    return rules


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
