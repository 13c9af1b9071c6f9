"""The Lua scripts of the Redis store: one file per operation in ``lua/``, shipped as package data.

Each file opens with a header naming its ``KEYS``/``ARGV`` and return values. ``register`` reads
them through ``importlib.resources`` and registers them on a client; redis-py's ``Script`` runs
EVALSHA and loads the script again when the server answers NOSCRIPT (after a restart or a
``SCRIPT FLUSH``).
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import redis
    from redis.commands.core import Script

SCRIPT_NAMES = (
    "create_queue",
    "delete_queue",
    "get_queue_names",
    "enqueue_jobs",
    "dequeue_jobs",
    "reserve_jobs",
    "claim_reserved",
    "release_reservations",
    "ack_jobs",
    "checkpoint_jobs",
    "lookup_jobs",
    "count_jobs",
    "scan_jobs",
    "delete_jobs",
    "retry_failed_jobs",
    "resurrect_timed_out_jobs",
    "gc_finished_jobs",
)

QUEUE_NOT_FOUND = -1
"""What every script that names a queue returns when the queue is not registered."""


@cache
def source(name: str) -> str:
    """The text of ``lua/{name}.lua``."""
    return resources.files("pinlater.backends.redis").joinpath("lua", f"{name}.lua").read_text(encoding="utf-8")


def register(client: redis.Redis) -> dict[str, Script]:
    """Every script, registered on ``client`` (nothing is sent until a script first runs)."""
    return {name: client.register_script(source(name)) for name in SCRIPT_NAMES}
