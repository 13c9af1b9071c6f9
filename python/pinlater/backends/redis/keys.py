"""The original PinLater Redis key layout, in one place.

Kept byte for byte so that a Redis written by the original server (``RedisBackendUtils.java``)
is readable by ours and the other way round. Nothing else in the package, Lua included, spells a
key name: the store builds keys here and hands them to scripts as ``KEYS`` or as a prefix in
``ARGV``.

Per shard ``S`` and queue ``Q``:

* ``plq_{S}_{Q}.p{priority}_s{state}``: sorted set of local ids (members are decimal strings).
  The score is seconds since the epoch as a float and means, by state:
  PENDING: run after (eligible once ``score <= now``);
  IN_PROGRESS: claim time (set by dequeue, refreshed by a checkpoint), read by the claim timeout;
  SUCCEEDED / FAILED: finish time (the ack or the timeout), read by the GC TTLs.
* ``plh_{S}_{Q}.{local_id}``: hash with the fields of ``JobField``.
* ``plj_{S}_{Q}``: string counter (INCR) that hands out local ids; one per queue, shared by all
  priorities, never reset (so ids are not reused even after a queue is deleted and re-created).
* ``pln_{S}``: sorted set of queue names; score = creation time in seconds. (The original uses
  a sorted set, not a plain set: ``ZADD``/``ZRANGE``.)

Ours alone, for the dequeue broker (``QueueKeys.hold_keys``, ``lua/lib/holds.lua``): per priority,
``plq_{S}_{Q}.p{priority}_h`` (held jobs, scored by run after), ``_x`` (hold expiries) and ``_o``
(holders). A held job is out of its PENDING set, so the original server does not see it; our
servers count, scan and look it up as PENDING, and put it back in PENDING when its hold lapses
or is released. Stop our servers gracefully (they release their holds) before pointing only
original servers at a shard, or jobs held at that moment stay out of their sight.

Ours alone, for dedup keys (``ShardStore.enqueue_keyed_jobs``, ``lua/enqueue_keyed_jobs.lua``),
under a prefix of their own, ``pld``, which the original server never reads, scans or deletes:

* ``pld_{S}_{Q}.k``: hash, field = the dedup key (its UTF-8 bytes, compared exactly), value =
  ``{priority}:{local_id}:{held_until_ms}``: the job that holds it (the last one inserted with
  it) and its enqueue time plus its window (at most 2**53, ``dedup.HELD_FOREVER_MS``). Keys may
  hold ``:`` or ``_``: they are only ever hash fields, never parts of key names or patterns.
* ``pld_{S}_{Q}.i``: hash, field = local id, value = the dedup key that names it (ids are unique
  per queue whatever the priority), so lookups and scans read the keys of a page of jobs with
  one HMGET.
* ``pld_{S}_{Q}.g``: sorted set, member = local id, score = when the GC looks at the record
  next (ms): its held-until at first; a record whose job still exists then is put later
  (``lua/gc_dedup_keys.lua``). Builds before runs (below) wrote an entry per record here; a
  migration's merge still does.
* ``pld_{S}_{Q}.r``: sorted set, member = a run ``{first}-{last}`` (or one id) of the ids whose
  records one enqueue wrote with one held-until (``lua/lib/dedup.lua``), score as in ``.g``: a
  batch's keys cost one entry, not one each. A key of its own, so that a server of an earlier
  build, which would read a run as a stray id and drop it, never sees one.

The compact layout keeps the same three with the same contents (``keys_compact.py``), so a
migration moves them with RENAME.

Ours alone, for expiry (``expireAtTimestampMillis``, "Expiry" in ``ShardStore.enqueue_keyed_jobs``)
and cancel (``ShardStore.cancel_jobs``), under the same ``pld`` prefix:

* the job hash's field ``ex``: the job's expiry, integer ms, only on a job that has one (the
  original server reads the fields it knows, by name, and never this one);
* ``pld_{S}_{Q}.e``: sorted set, member = the local id of a job with an expiry (unique in the
  queue whatever the priority), score = its expiry (ms): ``expire_jobs``' index. The scripts
  that end such a job remove its entry; one may still outlive the job's PENDING state (a delete,
  a job that went IN_PROGRESS): ``expire_jobs`` drops those when it meets them;
* ``pld_{S}_{Q}.n``: string, how many of the queue's jobs expired (``expired_counts``).

A cancelled IN_PROGRESS job is marked by ``ar`` 0 alone (no other IN_PROGRESS job has 0).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from pinlater.backends.base import JobState

QUEUE_KEY_PREFIX = "plq"
JOB_HASH_KEY_PREFIX = "plh"
JOB_ID_KEY_PREFIX = "plj"
QUEUE_NAMES_KEY_PREFIX = "pln"
DEDUP_KEY_PREFIX = "pld"


class JobField:
    """Field names of the job hash (``PINLATER_JOB_HASH_*_FIELD`` in the original)."""

    BODY = "bd"
    ATTEMPTS_ALLOWED = "al"
    ATTEMPTS_REMAINING = "ar"
    CREATED_AT = "ca"  # seconds since the epoch, float as text
    UPDATED_AT = "ua"  # seconds since the epoch, float as text
    CUSTOM_STATUS = "cs"
    CLAIM_DESCRIPTOR = "cd"  # absent unless the job was claimed (removed when it goes back to PENDING)
    EXPIRE_AT = "ex"  # ours: integer ms, only on a job with an expiry (unknown to the original server)


CUSTOM_STATUS_LIMIT = 3000
"""Characters kept of a custom status (``CUSTOM_STATUS_SIZE_BYTES`` in the original, which
counted Java chars)."""


def queue_set_key(shard: str, queue: str, priority: int, state: JobState) -> str:
    """``plq_{shard}_{queue}.p{priority}_s{state}``: the sorted set of one priority and state."""
    return f"{QUEUE_KEY_PREFIX}_{shard}_{queue}.p{priority:d}_s{int(state):d}"


def job_hash_prefix(shard: str, queue: str) -> str:
    """``plh_{shard}_{queue}.``: job hash keys are this prefix followed by the local id."""
    return f"{JOB_HASH_KEY_PREFIX}_{shard}_{queue}."


def job_hash_key(shard: str, queue: str, local_id: int) -> str:
    """``plh_{shard}_{queue}.{local_id}``: the hash of one job."""
    return f"{job_hash_prefix(shard, queue)}{local_id:d}"


def job_id_key(shard: str, queue: str) -> str:
    """``plj_{shard}_{queue}``: the local id counter of a queue."""
    return f"{JOB_ID_KEY_PREFIX}_{shard}_{queue}"


def queue_names_key(shard: str) -> str:
    """``pln_{shard}``: the sorted set of the shard's queue names."""
    return f"{QUEUE_NAMES_KEY_PREFIX}_{shard}"


@lru_cache(maxsize=1024)
def seconds_arg(ms: int) -> str:
    """Milliseconds as the seconds-as-float text the original stores in scores and hashes
    (cached: a batch's jobs mostly share one time, and formatting a float is not free)."""
    return repr(ms / 1000.0)


def ms_from_seconds(value: bytes | str | float | None, default: int = 0) -> int:
    """Seconds-as-float (a score or an ``ca``/``ua`` field, in our or Java's notation, such as
    ``1.4E9``) back to milliseconds, rounded to the nearest one; ``default`` when absent."""
    if value is None:
        return default
    return round(float(value) * 1000.0)  # float() reads ASCII bytes as they are


@dataclass(frozen=True, slots=True)
class QueueKeys:
    """Every key of one queue on one shard in the original layout, built once and cached by the
    store. ``keys_compact.CompactQueueKeys`` has the same attributes and methods, so the store
    builds a script's ``KEYS`` and ``ARGV`` the same way in either layout."""

    shard: str
    queue: str
    #: ``ARGV[2]`` of the scripts that read jobs: where they find them (the job hash key prefix).
    jobs_arg: str = field(init=False)
    #: The id counter (``KEYS[2]`` of enqueue_jobs).
    id_key: str = field(init=False)
    #: ``KEYS[1]`` of every queue script: the key that says the queue exists (the names set).
    exists_key: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "jobs_arg", job_hash_prefix(self.shard, self.queue))
        object.__setattr__(self, "id_key", job_id_key(self.shard, self.queue))
        object.__setattr__(self, "exists_key", queue_names_key(self.shard))

    def set_key(self, priority: int, state: JobState) -> str:
        return queue_set_key(self.shard, self.queue, priority, state)

    def held_key(self, priority: int) -> str:
        """``plq_{shard}_{queue}.p{priority}_h``: jobs the dequeue broker holds, out of PENDING
        (member: local id, score: run after, as in PENDING). See ``lua/lib/holds.lua``."""
        return f"{QUEUE_KEY_PREFIX}_{self.shard}_{self.queue}.p{priority:d}_h"

    def hold_expiry_key(self, priority: int) -> str:
        """``plq_{shard}_{queue}.p{priority}_x``: when each hold lapses (member: local id,
        score: seconds)."""
        return f"{QUEUE_KEY_PREFIX}_{self.shard}_{self.queue}.p{priority:d}_x"

    def holders_key(self, priority: int) -> str:
        """``plq_{shard}_{queue}.p{priority}_o``: hash of local id -> the reservation holding it."""
        return f"{QUEUE_KEY_PREFIX}_{self.shard}_{self.queue}.p{priority:d}_o"

    def hold_keys(self, priority: int) -> list[str]:
        """The held set, the expiry set and the holders hash of one priority, in that order."""
        return [self.held_key(priority), self.hold_expiry_key(priority), self.holders_key(priority)]

    def dedup_keys(self) -> list[str]:
        """The dedup records: key -> holder, id -> key, and the GC's sorted set (see the module
        docstring), in that order."""
        base = f"{DEDUP_KEY_PREFIX}_{self.shard}_{self.queue}."
        return [base + "k", base + "i", base + "g"]

    def dedup_runs_key(self) -> str:
        """``pld_{shard}_{queue}.r``: the GC's sorted set of runs of dedup records (see the
        module docstring)."""
        return f"{DEDUP_KEY_PREFIX}_{self.shard}_{self.queue}.r"

    def expiry_keys(self) -> list[str]:
        """The expiry index and the expired count (see the module docstring), in that order."""
        base = f"{DEDUP_KEY_PREFIX}_{self.shard}_{self.queue}."
        return [base + "e", base + "n"]

    def legacy_reserved_key(self, priority: int) -> str:
        """``plq_{shard}_{queue}.p{priority}_r``: where servers before the held set kept
        reservations (jobs stayed in PENDING). Read by nothing; delete_queue removes it."""
        return f"{QUEUE_KEY_PREFIX}_{self.shard}_{self.queue}.p{priority:d}_r"

    def priority_sets(self, priority: int) -> list[str]:
        """The four sets of one priority, indexed by ``JobState`` value (PENDING first)."""
        return [self.set_key(priority, state) for state in JobState]

    def id_sets(self, priority: int) -> list[str]:
        """Every set of one priority whose members are job ids, for delete_queue: the state sets,
        the held and hold expiry sets, and the set servers before the held set left."""
        return [
            *self.priority_sets(priority),
            self.held_key(priority),
            self.hold_expiry_key(priority),
            self.legacy_reserved_key(priority),
        ]


# -- schedules (ShardStore.put_schedule and the rest; lua/lib/schedules.lua) ---------------------

SCHEDULE_KEY_PREFIX = "pls"
"""Ours alone, as ``pld``: the original server never reads, scans or deletes these keys."""


def schedule_keys(shard: str) -> list[str]:
    """``pls_{shard}.d``, ``.n``, ``.i``: the shard's schedules' definitions hash, due sorted set
    (unpaused ones by next run, ms) and index (every schedule, score 0, by ``{queue}:{name}``);
    see ``lua/lib/schedules.lua``."""
    base = f"{SCHEDULE_KEY_PREFIX}_{shard}."
    return [base + "d", base + "n", base + "i"]
