"""The Lua scripts of the Redis store: one file per operation in ``lua/`` (the original layout)
and in ``lua_compact/`` (the compact one, ``keys_compact.py``), shipped as package data.

Each file opens with a header naming its ``KEYS``/``ARGV`` and return values. ``register`` reads
them through ``importlib.resources`` and registers them on a client; redis-py's ``Script`` runs
EVALSHA and loads the script again when the server answers NOSCRIPT (after a restart or a
``SCRIPT FLUSH``). Helpers shared by several scripts of a layout live in its ``lib/{name}.lua``;
a line ``--@include {name}`` in a script is replaced by that file (Redis has no module system),
or by ``lua/lib/{name}.lua`` where the layout has none (a helper both layouts use ships once).

The compact layout's ready lists (``lua_compact/lib/ready.lua``) hold the jobs enqueued to run at
once, a few bytes each where a sorted set member costs about a hundred. ``PINLATER_READY_LISTS=0``
in the environment turns them off: every PENDING job then goes to its sorted set, and the
scripts still read the lists, so a shard that holds some is served (as every build since the
lists came does).
"""

from __future__ import annotations

import os
import re
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
    "enqueue_keyed_jobs",
    "gc_dedup_keys",
    "dequeue_jobs",
    "reserve_jobs",
    "claim_reserved",
    "release_reservations",
    "ack_jobs",
    "checkpoint_jobs",
    "lookup_jobs",
    "count_jobs",
    "queue_counts",
    "scan_jobs",
    "delete_jobs",
    "retry_failed_jobs",
    "resurrect_timed_out_jobs",
    "gc_finished_jobs",
    "cancel_jobs",
    "expire_jobs",
    "expired_counts",
    "monitor_idle",
    # job control (issue 18): queue depth and schedules
    "oldest_ready",
    "put_schedule",
    "delete_schedules",
    "list_schedules",
    "due_schedules",
    "advance_schedule",
)

QUEUE_NOT_FOUND = -1
"""What every script that names a queue returns when the queue is not registered."""


INCLUDE = re.compile(r"^--@include (\w+)$", re.MULTILINE)


SCRIPT_DIRS = {"original": "lua", "compact": "lua_compact"}
"""Each layout's directory of scripts."""


READY_LISTS_ENV = "PINLATER_READY_LISTS"
"""Set to 0 not to write the compact layout's ready lists (see the module docstring)."""

READY_LISTS_OFF = "local READY_LISTS = false\n"


def source(name: str, layout: str = "original") -> str:
    """The text of the layout's ``{name}.lua``, with its ``--@include`` lines expanded."""
    # (the usual spellings of off: "false" or "off" left the lists on, unseen)
    return _source(name, layout, os.environ.get(READY_LISTS_ENV, "").strip().lower() not in ("0", "false", "no", "off"))


@cache
def _source(name: str, layout: str, ready_lists: bool) -> str:
    folder = SCRIPT_DIRS[layout]
    text = INCLUDE.sub(lambda m: _library(folder, m.group(1)), _read(folder, f"{name}.lua"))
    if ready_lists:
        text = text.replace(READY_LISTS_OFF, "local READY_LISTS = true\n")
    return text


def _library(folder: str, name: str) -> str:
    """``{folder}/lib/{name}.lua``, or the original layout's ``lua/lib/{name}.lua``."""
    path = resources.files("pinlater.backends.redis").joinpath(folder, "lib", f"{name}.lua")
    return _read(folder if path.is_file() else SCRIPT_DIRS["original"], "lib", f"{name}.lua")


def _read(*parts: str) -> str:
    return resources.files("pinlater.backends.redis").joinpath(*parts).read_text(encoding="utf-8")


def register(client: redis.Redis | redis.RedisCluster, layout: str = "original") -> dict[str, Script]:
    """Every script of ``layout``, registered on ``client`` (nothing is sent until a script first
    runs)."""
    return {name: client.register_script(source(name, layout)) for name in SCRIPT_NAMES}
