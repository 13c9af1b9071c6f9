"""The compact Redis layout's keys (``"layout": "compact"`` in a shard's config).

Designed for cost, not for the original server to read: one packed record per job in one hash
per queue instead of a six-field hash per job, so a script reads and writes a whole batch of jobs
with one command, and every key of one queue shares the hash tag ``{S:Q}``, so each queue script
touches one slot and a compact shard can be a Redis Cluster. Scripts: ``lua_compact/``, with the
same ``KEYS`` positions, ``ARGV`` and replies as the original's scripts of the same names;
records: ``lua_compact/lib/records.lua``.

Per shard ``S`` and queue ``Q`` (ASCII ``[\\w.-]+`` and ``\\w+``, so no brace can end the tag early):

* ``plc:{S:Q}:j``: the records hash: field = local id (decimal), value = the job's record; and
  two fields of the queue's own, which no id can be: ``c``, its creation time in ms, while the
  queue exists (every script's "does the queue exist" check, as ``pln_S`` is in the original),
  and ``id``, the local id counter, never deleted (as the original keeps ``plj_S_Q``). So it is
  ``KEYS[1]`` of every queue script: each key a script touches is declared, as a cluster
  migrating the queue's slot needs (it answers TRYAGAIN while the keys are split, never runs a
  script with half of them).
* ``plc:{S:Q}:p{priority}:s{state}``: sorted set of local ids, scored by integer milliseconds
  with the meaning the original's scores have (run after, claim time, finish time);
  ``:h``, ``:x``, ``:o``: the dequeue broker's held set, hold expiries and holders (``lua/lib/holds.lua``).
* ``plc:{S:Q}:p{priority}:r``: the priority's ready list (``lua_compact/lib/ready.lua``): the
  PENDING jobs enqueued with run after == the enqueue's now, in (score, id as text) order, as ids
  behind markers of their score (with the places of jobs deleted or cancelled in place, until
  the list's head passes them); every other PENDING job is in ``:s0``. Written unless
  ``PINLATER_READY_LISTS=0`` (``scripts.py``). A list entry costs a few bytes
  where a sorted set member costs about a hundred. Not among ``id_sets``, which are the sorted
  sets whose members are ids (scripts ZRANGE and ZREM them): scripts take the lists as keys of
  their own (``ready_keys``), and delete_queue empties them beside the sets. The records hash's
  field ``t{priority}`` counts the list's entries that are not PENDING jobs.
* ``plc:{S:Q}:dk``, ``:di``, ``:dg``, ``:dr``: the dedup records (key -> holder, id -> key, and
  the GC's sorted sets of ids and of runs), as the original layout's ``pld_{S}_{Q}.k``, ``.i``,
  ``.g`` and ``.r`` (``keys.py``), except that a compact job's record keeps its dedup key (``dk``,
  ``lua_compact/lib/records.lua``): a keyed enqueue writes only ``:dk`` (and its pin,
  ``DEDUP_PIN``), and the job forgets its key when it ends, leaving a deferred entry in ``:dr``
  if its window is still open (``lua/lib/dedup.lua``). ``:di`` and ``:dg`` hold what earlier
  builds and moves from the original layout wrote.
* Ordered groups (``lua_compact/lib/groups.lua``): ``plc:{S:Q}:p{priority}:w``, the priority's
  waiting set (the PENDING jobs of a group that wait behind its active ones: member id, score
  run after in ms, read as PENDING beside ``:s0``); ``plc:{S:Q}:gw``, the groups' FIFOs (one
  sorted set of all scores 0 in lex order: a member per waiting job, prefixed by its group);
  ``plc:{S:Q}:ga``, the active and waiting jobs of each group (hash: group -> ``active`` or
  ``active:waiting``, then ``:`` and its first waiting job when kept there; and ``GROUPS_PIN``,
  which keeps it a hash table while it holds a group: lib/groups.lua), and ``:gb``, how
  many groups have waiting jobs (a string counter, no key at none);
  ``plc:{S:Q}:gr``, the groups' groupJobsPerSecond buckets (hash), and ``:gz``, when the
  buckets of finished groups are full again (sorted set; then deleted). A job's group is in
  its record. The group name is inside these keys' values, never in a key name, so every key
  keeps the queue's hash tag and the scripts declare each key they touch.
* Expiry and cancel: a job's expiry (ms) is the tenth item of its record (``records.lua``; the
  group's two are false for a job of no group), ``plc:{S:Q}:xe`` the expiry index (member
  the local id, score its expiry in ms) and ``plc:{S:Q}:xn`` the expired count, as the
  original layout's ``pld_{S}_{Q}.e`` and ``.n`` (``keys.py``).
* ``plc:{S}:q``: sorted set of the shard's queue names, score = creation time in ms. In another
  slot than the queues' keys, so it is written with plain commands beside the scripts, never
  inside one.
* ``pll:{S}``: the shard's layout, ``original`` or ``compact`` (``layouts.py``), or ``migrating``
  while ``pinlater migrate-layout`` moves it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pinlater.backends.base import JobState
from pinlater.backends.redis.keys import QueueKeys

COMPACT_KEY_PREFIX = "plc"

#: The field of a queue's ``ga`` hash that is no group (group keys are UTF-8, and this byte never
#: is): its long value keeps the hash a hash table, not a listpack (lua_compact/lib/groups.lua).
GROUPS_PIN = b"\xff"

#: The field of a queue's dedup records hash (``:dk``) that is no dedup key, for the same reason
#: (lua/lib/dedup.lua, DEDUP_PIN): the hash holds only live jobs' keys, often few.
DEDUP_PIN = b"\xff"


def queue_tag(shard: str, queue: str) -> str:
    """``{S:Q}``: the hash tag every key of one queue carries (one slot per queue)."""
    return f"{{{shard}:{queue}}}"


def compact_names_key(shard: str) -> str:
    """``plc:{S}:q``: the sorted set of the shard's queue names."""
    return f"{COMPACT_KEY_PREFIX}:{{{shard}}}:q"


@dataclass(frozen=True, slots=True)
class CompactQueueKeys:
    """Every key of one queue on one shard in the compact layout, with ``keys.QueueKeys``'s
    attributes and methods (so the store builds the scripts' ``KEYS`` and ``ARGV`` alike)."""

    shard: str
    queue: str
    #: ``ARGV[2]`` of the scripts that read jobs: the records hash.
    jobs_arg: str = field(init=False)
    #: The id counter: field ``id`` of the records hash.
    id_key: str = field(init=False)
    #: ``KEYS[1]`` of every queue script: the records hash, whose field ``c`` says the queue exists.
    exists_key: str = field(init=False)
    _base: str = field(init=False, repr=False)

    def __post_init__(self) -> None:
        base = f"{COMPACT_KEY_PREFIX}:{queue_tag(self.shard, self.queue)}:"
        object.__setattr__(self, "_base", base)
        object.__setattr__(self, "jobs_arg", base + "j")
        object.__setattr__(self, "id_key", base + "j")
        object.__setattr__(self, "exists_key", base + "j")

    def set_key(self, priority: int, state: JobState) -> str:
        return f"{self._base}p{priority:d}:s{int(state):d}"

    def held_key(self, priority: int) -> str:
        return f"{self._base}p{priority:d}:h"

    def hold_expiry_key(self, priority: int) -> str:
        return f"{self._base}p{priority:d}:x"

    def holders_key(self, priority: int) -> str:
        return f"{self._base}p{priority:d}:o"

    def hold_keys(self, priority: int) -> list[str]:
        return [self.held_key(priority), self.hold_expiry_key(priority), self.holders_key(priority)]

    def priority_sets(self, priority: int) -> list[str]:
        return [self.set_key(priority, state) for state in JobState]

    def id_sets(self, priority: int) -> list[str]:
        return [
            *self.priority_sets(priority),
            self.held_key(priority),
            self.hold_expiry_key(priority),
            self.waiting_key(priority),
        ]

    def waiting_key(self, priority: int) -> str:
        """The priority's waiting set: jobs of ordered groups waiting behind the active ones."""
        return f"{self._base}p{priority:d}:w"

    def group_keys(self) -> list[str]:
        """The groups' keys (``lua_compact/lib/groups.lua``): active and waiting counts, blocked count,
        the FIFOs, the rate buckets and their refill times."""
        return [self._base + "ga", self._base + "gb", self._base + "gw", self._base + "gr", self._base + "gz"]

    def retired_keys(self) -> list[str]:
        """Keys earlier versions wrote and this one no longer does, deleted with the queue:
        ``:gn``, the blocked groups as a hash (now the ``:gb`` count). A shard upgraded while
        groups were waiting counts those groups as blocked only from their next wait."""
        return [self._base + "gn"]

    def dedup_keys(self) -> list[str]:
        """The dedup records: key -> holder, id -> key, and the GC's sorted set."""
        return [self._base + "dk", self._base + "di", self._base + "dg"]

    def dedup_runs_key(self) -> str:
        """The GC's sorted set of runs of dedup records (``keys.py``'s ``.r``)."""
        return self._base + "dr"

    def expiry_keys(self) -> list[str]:
        """The expiry index and the expired count, in that order (``keys.QueueKeys.expiry_keys``)."""
        return [self._base + "xe", self._base + "xn"]

    def ready_key(self, priority: int) -> str:
        """The priority's ready list (``lua_compact/lib/ready.lua``)."""
        return f"{self._base}p{priority:d}:r"


QueueKeyNames = QueueKeys | CompactQueueKeys
"""The keys of one queue in either layout."""


def ready_keys(keys: QueueKeyNames, priority: int) -> list[str]:
    """The ready list of a priority as the scripts that take one get it at the end of their
    ``KEYS``: none in the original layout, whose scripts' ``KEYS`` stay as they are."""
    return [keys.ready_key(priority)] if isinstance(keys, CompactQueueKeys) else []


def ending_keys(keys: QueueKeyNames, priority: int) -> list[str]:
    """What the dequeue and reserve scripts take after their other keys (the ready list's
    too) to expire the jobs they meet: the priority's FAILED set, the expiry index and the
    expired count, then (compact layout) ``dedup_end_keys``."""
    return [keys.set_key(priority, JobState.FAILED), *keys.expiry_keys(), *dedup_end_keys(keys)]


def dedup_end_keys(keys: QueueKeyNames) -> list[str]:
    """What a compact script that ends jobs (ack, checkpoint, cancel, expiry, delete, claim
    timeouts; retry_failed_jobs, which puts them back) takes last before its rules tail: the
    dedup records and runs, since a job's record keeps its dedup key and the job forgets the
    key when it ends (``lua/lib/dedup.lua``, forget_keys). None in the original layout, whose
    scripts' ``KEYS`` stay as they are."""
    if isinstance(keys, CompactQueueKeys):
        return [keys.dedup_keys()[0], keys.dedup_runs_key()]
    return []


def compact_schedule_keys(shard: str) -> list[str]:
    """``plc:{S}:sd``, ``:sn``, ``:si``: the shard's schedules (definitions, due, index; see
    ``lua/lib/schedules.lua``), under the hash tag of ``compact_names_key``: a schedule call
    checks the queue in the names set and writes its rows in one slot, on a Redis Cluster too."""
    base = f"{COMPACT_KEY_PREFIX}:{{{shard}}}:"
    return [base + "sd", base + "sn", base + "si"]
