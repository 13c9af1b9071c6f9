"""Calling one shard's Lua scripts: key names per queue, error mapping, the QUEUE_NOT_FOUND
reply, and the count of evicted jobs the scripts report.

A connection error, a timeout, or a server that cannot take writes (loading, read-only replica,
failing persistence) raises ``ShardConnectionError``; a queue missing from ``pln_{S}`` raises
``QueueNotFoundError`` (scripts return -1).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import redis

from pinlater.backends.base import JobState
from pinlater.backends.redis import scripts
from pinlater.backends.redis.config import RedisShardConfig
from pinlater.backends.redis.keys import QueueKeys
from pinlater.errors import QueueNotFoundError, ShardConnectionError

# Server answers that mean "this shard cannot serve now", not "this request is wrong".
_UNAVAILABLE = ("BUSY", "LOADING", "MASTERDOWN", "MISCONF", "NOREPLICAS", "READONLY", "TRYAGAIN")


class ShardScripts:
    """The scripts of one shard, called through its client. Thread-safe."""

    def __init__(self, name: str, config: RedisShardConfig, client: redis.Redis) -> None:
        self._name = name
        self._config = config
        self._scripts = scripts.register(client)
        self._queue_keys: dict[str, QueueKeys] = {}
        self._lock = threading.Lock()
        self._evicted_jobs = 0

    @property
    def evicted_jobs(self) -> int:
        """Jobs found without their hash (evicted) and removed, since the store opened."""
        return self._evicted_jobs

    def keys(self, queue: str) -> QueueKeys:
        keys = self._queue_keys.get(queue)
        if keys is None:
            if len(self._queue_keys) > 4096:  # queue names are few; this only bounds a misuse
                self._queue_keys.clear()
            keys = self._queue_keys[queue] = QueueKeys(self._name, queue)
        return keys

    @contextmanager
    def errors(self) -> Iterator[None]:
        try:
            yield
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise ShardConnectionError(self._name, f"{self._config.master}: {type(exc).__name__}: {exc}") from exc
        except redis.ResponseError as exc:
            if str(exc).startswith(_UNAVAILABLE):
                raise ShardConnectionError(self._name, f"{self._config.master}: {exc}") from exc
            raise

    def run(self, script: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        with self.errors():
            return self._scripts[script](keys=list(keys), args=list(args))

    def run_in_queue(self, script: str, queue: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        result = self.run(script, keys, args)
        if isinstance(result, int) and result == scripts.QUEUE_NOT_FOUND:
            raise QueueNotFoundError(queue)
        return result

    def require_queue(self, queue: str) -> None:
        keys = self.keys(queue)
        self.run_in_queue("count_jobs", queue, [keys.names_key, keys.set_key(1, JobState.PENDING)], [queue, 0, 0])

    def count_evicted(self, n: Any) -> None:
        if n := int(n):
            with self._lock:
                self._evicted_jobs += n


def priority_keys(keys: QueueKeys, priorities: set[int], per: int) -> tuple[list[str], dict[int, int]]:
    """KEYS for scripts that take ``per`` state sets per priority (PENDING first), after the
    queue-names key, and each priority's 1-based index of its PENDING set in them."""
    key_list = [keys.names_key]
    index: dict[int, int] = {}
    for p in sorted(priorities):
        index[p] = len(key_list) + 1
        key_list += keys.priority_sets(p)[:per]
    return key_list, index
