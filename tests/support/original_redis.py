"""What the original PinLater wrote to Redis, for tests that serve its data as it is.

The key layout of the original's ``RedisBackendUtils.java``, written out here independently of
the server's ``backends/redis/keys.py``: per shard ``S`` and queue ``Q``, the queue names in the
sorted set ``pln_{S}``, the id counter ``plj_{S}_{Q}``, one hash ``plh_{S}_{Q}.{id}`` per job and
one sorted set ``plq_{S}_{Q}.p{priority}_s{state}`` per priority and state. Times are seconds as
Java's ``Double.toString`` wrote them (``1.6999999905E9``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from decimal import Decimal

import redis

#: Job states as the original numbered them.
PENDING, IN_PROGRESS, SUCCEEDED, FAILED = 0, 1, 2, 3


def java_double(seconds: float) -> str:
    """``Double.toString`` of a time in seconds (>= 10^7: computerized scientific notation)."""
    d = Decimal(repr(float(seconds)))
    digits = "".join(map(str, d.as_tuple().digits)).rstrip("0") or "0"
    return f"{digits[0]}.{digits[1:] or '0'}E{d.adjusted()}"


def seed_original_queue(
    raw: redis.Redis, shard: str, queue: str, jobs: Sequence[tuple[int, int, bytes]], attempts: int = 3
) -> list[int]:
    """Write a queue on one shard as the original did, with ``jobs`` given as (priority, state,
    body): created ten minutes ago, a pending one runnable since a minute ago, a finished one
    finished then, ``attempts`` allowed (none left if FAILED). Returns the jobs' local ids."""
    now = time.time()
    raw.zadd(f"pln_{shard}", {queue: java_double(now - 3600)})
    ids = []
    for local_id, (priority, state, body) in enumerate(jobs, start=1):
        raw.hset(
            f"plh_{shard}_{queue}.{local_id}",
            mapping={
                "bd": body,
                "al": str(attempts),
                "ar": "0" if state == FAILED else str(attempts),
                "ca": java_double(now - 600),
                "ua": java_double(now - 60),
                "cs": "",
            },
        )
        raw.zadd(f"plq_{shard}_{queue}.p{priority}_s{state}", {str(local_id): java_double(now - 60)})
        ids.append(local_id)
    raw.set(f"plj_{shard}_{queue}", len(jobs))
    return ids
