"""Schedules in the Redis store (``ShardStore.put_schedule`` and the rest): the calls of
``put_schedule.lua``, ``delete_schedules.lua``, ``list_schedules.lua``, ``due_schedules.lua`` and
``advance_schedule.lua``, the same code in either layout (``lua/lib/schedules.lua``).

Three keys per shard (``keys.schedule_keys``; ``keys_compact.compact_schedule_keys``, under the
hash tag of the compact queue names set ``plc:{S}:q``): the definitions hash, the due set (the
unpaused ones by next run) and the index (every schedule, by ``{queue}:{name}``). Every call names
the queue names set first where the queue matters, so on a Redis Cluster a call touches one slot:
the names set's, not the queue's.

Why a deleted queue's schedules cannot linger: ``put_schedule.lua`` checks the queue in the names
set in the same step as it writes, and ``delete_queue`` drops the queue's schedules in a call of
its own once the queue is out of the names set (it cannot be in delete_queue.lua's calls: on a
cluster they run in the queue's slot). A put that ran before the queue left the names set is
dropped by that call; one after it finds no queue. Only a ``delete_queue`` that failed between
the two leaves rows behind: the next ``delete_queue`` drops them, and meanwhile their firing finds
no queue (QUEUE_NOT_FOUND from the enqueue).
"""

from __future__ import annotations

from pinlater.backends.base import ScheduleRow
from pinlater.backends.redis.keys import queue_names_key, schedule_keys
from pinlater.backends.redis.keys_compact import compact_names_key, compact_schedule_keys
from pinlater.backends.redis.script_calls import ShardScripts


def _keys(shard: ShardScripts, name: str) -> list[str]:
    """The queue names set, then the definitions hash, the due set and the index."""
    shard.check_layout()  # the layout decides the names: known first
    if shard.layout.compact:
        return [compact_names_key(name), *compact_schedule_keys(name)]
    return [queue_names_key(name), *schedule_keys(name)]


def put_schedule(shard: ShardScripts, name: str, row: ScheduleRow) -> None:
    names, definitions, due, index = _keys(shard, name)
    args = [row.queue, row.name, str(row.next_run_ms), "1" if row.paused else "0", row.spec]
    shard.run_in_queue("put_schedule", row.queue, [names, definitions, due, index], args)


def delete_schedule(shard: ShardScripts, name: str, queue: str, schedule: str) -> bool:
    _names, definitions, due, index = _keys(shard, name)
    return int(shard.run("delete_schedules", [definitions, due, index], [queue, schedule])) > 0


def drop_queue_schedules(shard: ShardScripts, name: str, queue: str) -> None:
    """Every schedule of a queue that ``delete_queue`` took out of the names set."""
    _names, definitions, due, index = _keys(shard, name)
    shard.run("delete_schedules", [definitions, due, index], [queue])


def list_schedules(shard: ShardScripts, name: str, queue: str) -> list[ScheduleRow]:
    names, definitions, _due, index = _keys(shard, name)
    out = shard.run("list_schedules", [names, definitions, index], [queue])
    return [_row(queue, out[i].decode(), out[i + 1]) for i in range(0, len(out), 2)]


def due_schedules(shard: ShardScripts, name: str, now_ms: int, limit: int, max_bytes: int) -> list[ScheduleRow]:
    if limit <= 0:
        return []
    _names, definitions, due, _index = _keys(shard, name)
    out = shard.run("due_schedules", [definitions, due], [str(now_ms), limit, max(max_bytes, 0)])
    rows = []
    for i in range(0, len(out), 2):
        queue, schedule = out[i].decode().split(":", 1)  # queue names are \w+
        rows.append(_row(queue, schedule, out[i + 1]))
    return rows


def advance_schedule(
    shard: ShardScripts, name: str, queue: str, schedule: str, expected_next_ms: int, next_run_ms: int
) -> bool:
    _names, definitions, due, _index = _keys(shard, name)
    args = [queue, schedule, str(expected_next_ms), str(next_run_ms)]
    return int(shard.run("advance_schedule", [definitions, due], args)) == 1


def _row(queue: str, schedule: str, definition: bytes) -> ScheduleRow:
    """A row from ``{next_run_ms}|{paused}|{spec}`` (``lua/lib/schedules.lua``)."""
    next_run, paused, spec = definition.decode().split("|", 2)
    return ScheduleRow(queue, schedule, spec, int(next_run), paused == "1")
