"""The per-shard storage seam.

Every backend (embedded SQLite, Redis, MySQL) implements ``ShardStore`` for ONE shard. Sharding,
priority walks, coverage, descriptors and validation live above it in ``sharded.py``, once.

Invariants every implementation keeps (the conformance suite in
``tests/backends/test_conformance.py`` checks them against each backend):

* Each method is atomic on its shard: it either applies fully or raises.
* Time never comes from the store's clock: every method that needs "now" takes ``now_ms``
  (milliseconds since the epoch), so tests and the monitor control time.
* ``local_id`` values are unique per (shard, queue, priority) and never reused while the
  job exists.
* A missing queue raises ``QueueNotFoundError``; a connection problem raises
  ``ShardConnectionError``. Nothing else is expected to escape.
* Custom status is truncated to ``custom_status_limit`` characters by the store.
* State transitions are guarded: an ack or checkpoint of a job that is not IN_PROGRESS is a
  no-op, never an error.

This is an internal seam, not a public API: it may change with the backends.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import IntEnum
from typing import TYPE_CHECKING, NamedTuple, Protocol, TypeVar, runtime_checkable

from pinlater.backends.pressure import StoreMemoryFullError
from pinlater.errors import ErrorCode, PinLaterError, ShardConnectionError

if TYPE_CHECKING:
    from pathlib import Path

    from pinlater._pinlater import (
        AckGroup,
        ClaimedJobs,
        ClaimItems,
        KeyedJobBatch,
        KeyedPlacement,
        LocalIds,
        NewJobBatch,
    )
    from pinlater.backends.shardmap import Shard
    from pinlater.config import Settings

T = TypeVar("T")


#: Every reservation string starts with this, so a claim descriptor tells a reservation from a
#: claim ("~" sorts after the characters of sources and host names).
RESERVATION_PREFIX = "~r|"

#: Most jobs one store call of an enqueue, a dequeue or an ack carries (``ShardedBackend``): a
#: request of more goes as several calls in turn. One script of a few hundred thousand jobs held
#: a Redis, every queue and server on it, for one to two seconds (and past Redis' 5 s busy
#: threshold it answers BUSY to everyone), and one write of them held an embedded shard's
#: writer; a call of this many takes a few milliseconds, and others' calls run between two.
STORE_CALL_JOBS = 1000

#: The byte budget of one dequeue by default (the server passes its ``MAX_FRAME_BYTES``, the
#: largest request it reads): a store call of a dequeue or a reserve takes jobs while the bodies
#: it took hold fewer bytes than it was given (``within_bytes``; its first job always), so a
#: reply's bodies pass the budget by less than one body (plus each job's descriptor and
#: metadata, about 60 bytes each). 300 jobs of 2 MiB asked for at once had grown a server by
#: 2.5 GB for a 629 MB reply that the client then refused, the jobs claimed for nobody.
DEQUEUE_BYTES = 16 * 1024 * 1024

#: Bytes of specs one ``due_schedules`` page holds at most (its first row always): 500 due rows of
#: schedules with 1 MiB bodies (1.4 MB of spec each, JSON and base64) made one 700 MB page, on
#: Redis one script's reply, which every client of that Redis waited for.
DUE_PAGE_BYTES = 16 * 1024 * 1024


def within_page(rows: Iterable[ScheduleRow], max_bytes: int) -> list[ScheduleRow]:
    """``rows`` from the first while their specs hold at most ``max_bytes`` (the first always);
    an iterator is read no further."""
    return within_sizes(rows, max_bytes, lambda row: len(row.spec))


def within_sizes(items: Iterable[T], max_bytes: int, size: Callable[[T], int]) -> list[T]:
    """``items`` from the first while their sizes hold at most ``max_bytes`` in all (the first
    always); an iterator is read no further."""
    page: list[T] = []
    held = 0
    for item in items:
        held += size(item)
        if page and held > max_bytes:
            break
        page.append(item)
    return page


class LookupOverBudget(PinLaterError):
    """A lookup's bodies hold more than its byte budget (the server passes ``MAX_FRAME_BYTES``,
    the most a reply may hold): the store stopped before reading them all. 200 jobs of 1 MiB
    looked up with their bodies were read whole (the server grew by 200 MB) before the reply's
    size was checked (``benches/lookup_memory.py``)."""

    def __init__(self, max_bytes: int) -> None:
        super().__init__(
            ErrorCode.UNKNOWN,
            f"invalid request: the bodies of the jobs looked up hold more than a reply may ({max_bytes}, "
            "MAX_FRAME_BYTES): look up fewer jobs at a time, or without bodies",
        )
        self.max_bytes = max_bytes

    def __reduce__(self) -> tuple[type[LookupOverBudget], tuple[int]]:  # type: ignore[override]
        return (LookupOverBudget, (self.max_bytes,))


def within_bytes(lengths: Iterable[int], max_bytes: int) -> int:
    """How many jobs, from the first, a store call takes under a byte budget, given their
    body lengths in take order: each while the bodies taken before it hold fewer than
    ``max_bytes`` bytes, the first always (rust/queue/jobs.rs ``within_bytes``, for the stores
    that claim in Python)."""
    spent = taken = 0
    for length in lengths:
        if taken and spent >= max_bytes:
            break
        spent += length
        taken += 1
    return taken


def failed_after(shard: str, what: str, exc: Exception) -> PinLaterError:
    """The error of a request done in store calls (or a store call done in steps), when one
    failed after others were applied (``what`` says what they did): a connection failure stays
    one, that may have been applied; a store out of memory is ENQUEUE_REJECTED."""
    if isinstance(exc, ShardConnectionError):
        return ShardConnectionError(shard, f"{what}: {exc.detail}", maybe_applied=True)
    if isinstance(exc, PinLaterError):
        code = ErrorCode.ENQUEUE_REJECTED if isinstance(exc, StoreMemoryFullError) else exc.code
        return PinLaterError(code, f"{what}: {exc.message}")
    return PinLaterError(ErrorCode.UNKNOWN, f"{what}: {exc!r}")


class JobState(IntEnum):
    """Job states with their wire values (Thrift ``PinLaterJobState``).

    PENDING: enqueued or retried; eligible for dequeue once ``now >= run_after``.
    IN_PROGRESS: claimed by a dequeue; left by an ack, a checkpoint with move-to-pending, or the
    monitor's claim timeout (treated like a failure ack).
    SUCCEEDED / FAILED: final; deleted by the monitor after their TTLs.
    """

    PENDING = 0
    IN_PROGRESS = 1
    SUCCEEDED = 2
    FAILED = 3


# The records made once per job on the hot path (NewJob, ClaimedJob, AckItem) are NamedTuples:
# immutable like the frozen dataclasses elsewhere here, and built in a third of the time.


class NewJob(NamedTuple):
    """A job to insert, with every default already resolved by the caller."""

    priority: int
    body: bytes
    run_after_ms: int
    attempts_allowed: int
    custom_status: str = ""


class ClaimedJob(NamedTuple):
    """A job returned by ``dequeue_jobs`` (claimed, or only looked at in a dry run)."""

    local_id: int
    body: bytes
    attempts_allowed: int
    attempts_remaining: int
    created_at_ms: int
    updated_at_ms: int


@dataclass(frozen=True, slots=True)
class JobRecord:
    """Everything known about one job, as returned by lookups and scans."""

    priority: int
    local_id: int
    state: JobState
    attempts_allowed: int
    attempts_remaining: int
    custom_status: str
    created_at_ms: int
    run_after_ms: int
    updated_at_ms: int
    claim_descriptor: str | None
    body: bytes | None = None
    #: The job's ``dedupKey`` while the shard's record of that key names this job (see
    #: ``ShardStore.enqueue_keyed_jobs``): for as long as the job exists (``gc_dedup_keys``
    #: keeps the record), unless a later job took the key, which is possible once this one is
    #: finished and its window passed.
    dedup_key: str | None = None
    #: The job's ``groupKey`` (ordered groups), for as long as the job exists.
    group_key: str | None = None
    #: The job's ``expireAtTimestampMillis`` (see "Expiry" in ``ShardStore.enqueue_keyed_jobs``),
    #: for as long as the job exists; None when it has none (or ``retry_failed_jobs`` cleared it).
    expire_at_ms: int | None = None

    def as_clients_see_it(self) -> JobRecord:
        """The record without a dequeue broker's reservation: a PENDING job held by a broker
        shows no claim descriptor, as if no broker held it (the SQL stores keep the reservation
        there; see ``RESERVATION_PREFIX``)."""
        claim = self.claim_descriptor
        if claim is not None and self.state == JobState.PENDING and claim.startswith(RESERVATION_PREFIX):
            return replace(self, claim_descriptor=None)
        return self


class KeyedJob(NamedTuple):
    """A job with a pinlater extension key (``ShardStore.enqueue_keyed_jobs``).

    ``key`` (``PinLaterJob.dedupKey``), when given: the job is inserted only if no job holds the
    key on the shard. ``window_ms`` (``dedupWindowMillis``, 0 or more) keeps the key held that
    long after this job's enqueue, even once it has finished. ``group`` (``groupKey``), when
    given: the job joins that ordered group of its queue (see "Ordered groups" in
    ``ShardStore.enqueue_keyed_jobs``). ``expire_at_ms`` (``expireAtTimestampMillis``), when
    given: the job expires then (see "Expiry" there). At least one of ``key``, ``group`` and
    ``expire_at_ms`` is given."""

    job: NewJob
    key: str | None
    window_ms: int = 0
    group: str | None = None
    expire_at_ms: int | None = None


class QueueRules(NamedTuple):
    """What the queue config file asks the stores to enforce for one queue (hot reloaded):
    ``groupConcurrency``, this shard's share of ``maxInProgress`` and ``groupJobsPerSecond``.
    ``ShardedBackend`` hands them to every store (``ShardStore.set_queue_rules``); a queue
    without an entry has ``DEFAULT_RULES``."""

    #: How many jobs of one group may be active (see ``enqueue_keyed_jobs``) at once, 1 or more.
    group_concurrency: int = 1
    #: At most this many jobs of the queue IN_PROGRESS on this shard (all priorities) after a
    #: dequeue, a reservation or a claim of reserved jobs; None: no cap. 1 or more.
    max_in_progress: int | None = None
    #: Each group of the queue is handed out at most this many jobs per second; None: no limit.
    #: 0.001 to 1e6 (``queue_rules.py``).
    group_jobs_per_second: float | None = None


DEFAULT_RULES = QueueRules()

#: Appended to the custom status of a job that ``cancel_jobs`` ended (see ``ended_status``).
CANCELLED = "cancelled"
#: Appended to the custom status of a job that expired (see "Expiry" in ``enqueue_keyed_jobs``).
EXPIRED = "expired"


def ended_status(status: str, word: str, limit: int) -> str:
    """The custom status of a job that cancel or expiry ended: ``word`` appended to ``status``
    after one space (alone when ``status`` is empty), the status cut first to its first
    ``limit - 1 - len(word)`` characters so that the word always shows (``limit`` is the store's
    ``custom_status_limit``, far longer than the words). Every store writes exactly this (in
    SQL, Lua or Rust, as it runs)."""
    if not status:
        return word
    return f"{status[: max(0, limit - 1 - len(word))]} {word}"


class ScanCursor(NamedTuple):
    """Where a paged scan of one (shard, priority) stopped: the run_after and local id of the
    last job ``scan_jobs`` returned there. The next page asks for the jobs that come after it
    in the store's scan order (``scan_jobs``'s ``after``), whether or not that job still
    matches or exists."""

    run_after_ms: int
    local_id: int


class ScheduleRow(NamedTuple):
    """One schedule as a store keeps it (``ShardStore.put_schedule``), by (queue, name).

    ``spec`` is opaque to the store: text written and read by ``schedules.py`` only (the cron
    or interval and the job to enqueue at each tick). ``next_run_ms`` is the next tick;
    ``paused`` schedules are never due."""

    queue: str
    name: str
    spec: str
    next_run_ms: int
    paused: bool = False


class GroupCounts(NamedTuple):
    """A queue's ordered groups on one shard (``ShardStore.group_counts``): ``groups`` that have
    an unfinished job, and of those, ``blocked`` ones: with a job waiting behind the group's
    active jobs."""

    groups: int
    blocked: int


class Resurrected(int):
    """What one ``ShardStore.resurrect_timed_out_jobs`` call did: the claims it changed (the int
    itself, so a caller that counts them reads it as before), of which ``failed`` ended FAILED
    (no attempt left, cancelled or past their expiry) and the rest went back to PENDING; and
    ``evicted``: claims whose job was gone (Redis' eviction), taken out of IN_PROGRESS and not
    counted as changed. The monitor publishes them as the original did, per queue:
    ``{queue}_timeout_done``, ``_timeout_retry`` and ``_timeout_evict``."""

    failed: int
    evicted: int

    def __new__(cls, changed: int, failed: int = 0, evicted: int = 0) -> Resurrected:
        if not 0 <= failed <= changed or evicted < 0:
            raise ValueError(f"resurrected {changed} claims, {failed} of them failed, {evicted} evicted")
        value = super().__new__(cls, changed)
        value.failed = failed
        value.evicted = evicted
        return value

    @property
    def retried(self) -> int:
        """The claims that went back to PENDING, an attempt less."""
        return int(self) - self.failed


class Enqueued(NamedTuple):
    """Where ``enqueue_keyed_jobs`` put one job, or which job already held its key
    (``deduplicated`` True: nothing was inserted and these are the holder's priority and id)."""

    priority: int
    local_id: int
    deduplicated: bool


class AckItem(NamedTuple):
    """One job to acknowledge. ``retry_delay_ms`` matters only for a failure with attempts left."""

    priority: int
    local_id: int
    append_custom_status: str = ""
    retry_delay_ms: int = 0


@dataclass(frozen=True, slots=True)
class CheckpointItem:
    """One checkpoint, applied only while the job is IN_PROGRESS under a claim that contains
    the caller's source (the original's ``claim_descriptor LIKE %source%`` guard).

    ``run_after_ms`` is resolved by the caller (default: now). ``new_body`` None keeps the body;
    ``attempts_allowed`` None keeps the attempts, otherwise sets allowed and remaining to it;
    ``prepend_custom_status`` None keeps the status. ``move_to_pending`` puts the job back to
    PENDING and clears its claim; otherwise it stays IN_PROGRESS and its updated time is
    refreshed, which extends the claim.
    """

    priority: int
    local_id: int
    run_after_ms: int
    move_to_pending: bool = False
    new_body: bytes | None = None
    attempts_allowed: int | None = None
    prepend_custom_status: str | None = None


@dataclass(frozen=True, slots=True)
class JobFilter:
    """Which jobs a count, scan or delete looks at, within one priority of one queue.

    ``future`` False selects ``run_after <= now``; True selects ``run_after > now``; None
    selects both (used by delete, which ignores time). ``body_regex`` is a regular expression
    searched for anywhere in the body (decoded as UTF-8 with replacement). ``deadline`` is the
    ``time.monotonic()`` by which a body filter must be done: the whole request's
    BODY_FILTER_TIME_BUDGET_SECONDS, set once by ``ShardedBackend`` for all its store calls; None
    gives each store call the budget from its own start.
    """

    state: JobState
    priority: int
    now_ms: int
    future: bool | None = False
    body_regex: str | None = None
    deadline: float | None = None


class CountKey(NamedTuple):
    """One cell of a shard's job counts (``ShardStore.queue_counts``): the jobs of one queue,
    priority and state, with ``future`` False for ``run_after <= now`` and True for later ones,
    as ``JobFilter.future`` selects them (for states other than PENDING, the time the store
    compares, as ``count_jobs`` does)."""

    queue: str
    priority: int
    state: JobState
    future: bool


@runtime_checkable
class ShardStore(Protocol):
    """Storage operations on one shard. See the module docstring for the invariants."""

    @property
    def name(self) -> str:
        """The shard name as it appears in job descriptors (``s{name}``)."""
        ...

    @property
    def custom_status_limit(self) -> int:
        """Custom status is truncated to this many characters."""
        ...

    # -- queues -----------------------------------------------------------------------------

    def create_queue(self, queue: str, num_priorities: int) -> None:
        """Create the queue with priorities 1..num_priorities; a no-op if it exists."""
        ...

    def delete_queue(self, queue: str) -> None:
        """Delete the queue, all its jobs, their keys and groups, its schedules and its expired
        count; a no-op if it does not exist."""
        ...

    def get_queue_names(self) -> set[str]:
        """The names of the queues that exist on this shard."""
        ...

    # -- the job lifecycle ------------------------------------------------------------------

    def enqueue_jobs(self, queue: str, jobs: Sequence[NewJob], now_ms: int) -> list[int]:
        """Insert jobs as PENDING in one transaction; return their local ids in order."""
        ...

    def enqueue_keyed_jobs(self, queue: str, jobs: Sequence[KeyedJob], now_ms: int) -> list[Enqueued]:
        """Insert each job as ``enqueue_jobs`` does, unless a job holds its dedup key, in one
        atomic step per call (two servers enqueueing one key at once make one job); answer per
        job, in order. The dedup keys in one call are distinct (``ShardedBackend`` collapses
        repeats first). A store that cannot keep ordered groups (``groups_refused``) is never
        passed a job with a group.

        **Dedup keys.** A key is held by the job recorded for it (the last one inserted with it on
        this shard, per queue) while that job is PENDING (ready, later, or under a broker's
        reservation) or IN_PROGRESS, and until ``now_ms + window_ms`` of its enqueue, whatever its
        state. A held key answers the holder (``deduplicated`` True) and changes nothing; a key
        that is not held is taken by the new job. The record survives restarts; ``lookup_jobs``
        and ``scan_jobs`` show the key on the job it names (``JobRecord.dedup_key``).

        **Ordered groups.** The jobs of one group of a queue (``KeyedJob.group``; every job of a
        group is on one shard) form a FIFO in enqueue order, whatever their priorities. A group's
        *active* jobs are its IN_PROGRESS jobs and the PENDING ones that dequeues may hand out;
        its other unfinished jobs *wait*. A waiting job is PENDING to everything else (counts,
        lookups, scans, deletes, dedup keys) but no dequeue, dry run or reservation returns it.

        - A grouped job enqueued while its group has fewer than ``group_concurrency`` active jobs
          (the queue's ``QueueRules``, as set now) and none waiting is active at once; otherwise
          it waits. An enqueue into a group first activates its oldest waiting jobs while fewer
          than ``group_concurrency`` are active (so a raised concurrency applies).
        - When an active job leaves its group (SUCCEEDED, FAILED with no attempt left, by an ack
          or a claim timeout, or deleted), the group's oldest waiting jobs become active, in
          enqueue order, while fewer than ``group_concurrency`` are active.
        - A failure that will be retried, a claim timeout with attempts left, and a checkpoint
          back to PENDING keep the job active and first: it runs again (after its run_after)
          before the jobs behind it.
        - ``retry_failed_jobs`` on a grouped job puts it back in its group as an enqueue would
          (active only if there is room and nothing waits).
        - A group with no unfinished job is forgotten (``group_counts`` does not count it).
        - A lowered concurrency takes nothing back: jobs already active stay so.

        **Expiry.** A job with ``expire_at_ms`` that is still PENDING (ready, later, waiting in
        a group, or under a reservation) once ``now_ms >= expire_at_ms`` is never handed out
        again: ``dequeue_jobs`` (dry runs included) and ``reserve_jobs`` skip it (and
        ``reserve_jobs`` never reserves a job that would expire under its reservation, so
        ``claim_reserved`` never meets one). It *expires*: FAILED, attempts_remaining 0, claim
        cleared, updated now, custom status ``ended_status(status, EXPIRED, limit)``; it leaves
        its group as a final failure does (the next job of the group is promoted) and its dedup
        key is no longer held by its state. Every store expires such jobs in ``expire_jobs``, and
        may also expire the ones a dequeue or reservation meets in that same step (dry runs
        change nothing), at most a bounded number per call (a queue whose million jobs expired
        together must not hold the store for one dequeue). Each expiry is counted in
        ``expired_counts``. Beside that:

        - A failure ack with attempts left whose retry would run at or after the expiry
          (``now + retry_delay_ms >= expire_at_ms``) expires the job instead of retrying it; so
          does a claim timeout with attempts left once ``now >= expire_at_ms``.
        - ``lookup_jobs`` and ``scan_jobs`` show the expiry (``JobRecord.expire_at_ms``).
        - ``retry_failed_jobs`` clears the expiry of the jobs it moves (an operator who puts a
          job back wants it run).
        - IN_PROGRESS jobs do not expire: only a PENDING job does.
        """
        ...

    def expire_jobs(self, queue: str, now_ms: int, limit: int) -> int:
        """Expire (see "Expiry" in ``enqueue_keyed_jobs``) up to ``limit`` of the queue's PENDING
        jobs, every priority, whose ``expire_at_ms <= now_ms``, soonest expiry first; return how
        many. Bounded by ``limit`` however many jobs the queue holds (an index or sorted set by
        expiry, not a scan). The monitor calls it."""
        ...

    def expired_counts(self) -> dict[str, int]:
        """How many jobs of each queue on this shard have expired so far (by ``expire_jobs`` or
        by a dequeue), kept by the store across restarts; queues without an expiry may be left
        out. One round trip (or a few) however many queues there are; ``/metrics`` exports the
        sum over shards."""
        ...

    def cancel_jobs(self, queue: str, keys: Sequence[tuple[int, int]], now_ms: int) -> int:
        """Cancel the jobs among ``(priority, local_id)`` keys; return how many changed.

        - PENDING (ready, later, waiting in a group, or under a reservation): FAILED,
          attempts_remaining 0, claim cleared, updated now, custom status
          ``ended_status(status, CANCELLED, limit)``. It leaves its group as a final failure does
          and no longer holds its dedup key by its state (the window still applies).
        - IN_PROGRESS with attempts_remaining > 0: attempts_remaining set to 0, nothing else (no
          IN_PROGRESS job has 0 otherwise, so 0 marks it cancelled). From then on a failure ack
          or a claim timeout ends it FAILED with ``ended_status(status, CANCELLED, limit)``
          (after the ack's own status is appended), whatever the retry delay; a checkpoint keeps
          attempts_remaining at 0 (its ``attempts_allowed`` sets allowed only), and a checkpoint
          with ``move_to_pending`` ends it FAILED the same way; a success ack still counts
          (SUCCEEDED, as usual).
        - Anything else (finished, already cancelled IN_PROGRESS, missing) is left alone and not
          counted.
        """
        ...

    def group_counts(self, queue: str) -> GroupCounts:
        """The queue's ordered groups on this shard (see ``GroupCounts``); (0, 0) on a store
        that refuses groups. Raises ``QueueNotFoundError`` for a missing queue."""
        ...

    @property
    def groups_refused(self) -> str | None:
        """None when this shard keeps ordered groups; otherwise why not, in a few words that
        follow "groupKey (ordered groups) " in an ENQUEUE_REJECTED message (for example "needs
        the compact Redis layout; shard 3 is in the original one")."""
        ...

    def set_queue_rules(self, rules: Mapping[str, QueueRules]) -> None:
        """Replace the rules of every queue (a queue not in ``rules`` has ``DEFAULT_RULES``).
        Called at start and at every queue config reload, from any thread; the calls that follow
        it (on the hot path too) apply the new rules.

        - ``group_concurrency``: see ``enqueue_keyed_jobs``.
        - ``max_in_progress``: ``dequeue_jobs``, ``reserve_jobs`` and ``claim_reserved`` hand out
          no more than brings the queue's IN_PROGRESS jobs on this shard (every priority) to it;
          a call at the cap returns fewer jobs or none, never an error. Dry runs ignore it.
        - ``group_jobs_per_second``: each group of the queue is handed out (by ``dequeue_jobs``
          or ``reserve_jobs``) from a token bucket of ``max(1, rate)`` tokens, refilled at
          ``rate`` per second and full at first; a group without a token is skipped (the others
          are served), and the store may move its ready job's run_after to when its next token
          is due so that dequeues do not look at it before then. Dry runs ignore it.
        """
        ...

    def monitor_idle(self, queues: Sequence[str], num_priorities: int) -> set[str]:
        """The queues of ``queues`` that hold nothing for the monitor's sweeps of priorities
        1..``num_priorities`` now (no job IN_PROGRESS, finished or with an expiry, or held by a
        reservation where a lapsed one needs the monitor; no dedup record waiting for the GC; no
        ordered group), which its pass skips; a queue missing from the store may be among them. A
        store that cannot tell cheaply returns none, and every queue gets its pass. A queue with
        only PENDING jobs is idle: nothing of it times out or is collected."""
        ...

    def gc_dedup_keys(self, queue: str, now_ms: int, limit: int) -> int:
        """Forget up to ``limit`` key records whose window has passed and whose job is gone
        (deleted, or collected by the finished-job GC); return how many. A finished job's record
        stays while the job exists (it holds no key, but lookups and scans show the key). The
        monitor calls it, so records do not outlive their jobs for long."""
        ...

    def dequeue_jobs(
        self,
        queue: str,
        priority: int,
        limit: int,
        claim: str,
        now_ms: int,
        dry_run: bool,
        max_bytes: int = DEQUEUE_BYTES,
    ) -> list[ClaimedJob]:
        """Claim up to ``limit`` PENDING jobs with ``run_after <= now`` of one priority, taking
        each while the bodies taken before it hold fewer than ``max_bytes`` bytes (the first
        always: ``within_bytes``), as if the limit were the number taken.

        Claimed jobs become IN_PROGRESS with claim descriptor ``claim`` and updated time now.
        With ``dry_run`` nothing changes and the jobs are only returned. Jobs come in order of
        run_after, then local id (oldest first), as far as the store can order them cheaply.
        A claim skips jobs under a live reservation (see ``reserve_jobs``); a dry run answers
        from the store and includes them, since they are PENDING and will be handed out.
        """
        ...

    def ack_jobs(self, queue: str, succeeded: Sequence[AckItem], failed: Sequence[AckItem], now_ms: int) -> None:
        """Apply acks in one transaction; only IN_PROGRESS jobs change.

        Success: SUCCEEDED, status appended. Failure with attempts_remaining > 1: PENDING,
        run_after = now + retry_delay_ms, attempts_remaining - 1, claim cleared. Failure with
        attempts_remaining <= 1: FAILED, attempts_remaining 0. Updated time = now in every case.
        A cancelled job's failure and a retry past the job's expiry end it FAILED instead (see
        ``cancel_jobs`` and "Expiry" in ``enqueue_keyed_jobs``).
        """
        ...

    def checkpoint_jobs(self, queue: str, items: Sequence[CheckpointItem], source: str, now_ms: int) -> int:
        """Apply checkpoints guarded by state and claim (see ``CheckpointItem``); return how
        many jobs changed."""
        ...

    # -- reservations (the dequeue broker) ----------------------------------------------------
    #
    # A reservation is a soft, self-expiring hold on a PENDING job: the job stays PENDING (counts,
    # scans and lookups see it as such, attempts are never charged for it) but no dequeue takes it
    # while the reservation is live (``now < expiry``). A lapsed reservation is no hold at all, so
    # a crashed holder needs no cleanup. Reservation strings start with ``RESERVATION_PREFIX``;
    # every store documents where it keeps them and the expiry (the SQL stores in the job's claim
    # descriptor; Redis beside the job, which leaves PENDING's set and is merged back into reads).

    def reserve_jobs(
        self,
        queue: str,
        priority: int,
        limit: int,
        reservation: str,
        now_ms: int,
        hold_ms: int,
        max_bytes: int = DEQUEUE_BYTES,
    ) -> list[ClaimedJob]:
        """Reserve up to ``limit`` ready PENDING jobs of one priority not under a live
        reservation, until ``now + hold_ms``, in dequeue order, under ``max_bytes`` as
        ``dequeue_jobs`` takes them. State, attempts and run_after
        are unchanged; the returned ``updated_at_ms`` is whatever the store now reports.

        A job whose expiry comes before the reservation would lapse (``expire_at_ms <= now +
        hold_ms``) is not reserved: a broker hands a reserved job out from memory before its
        claim is written, so only this keeps it from handing out a job past its expiry. Such a
        job is left to direct dequeues (and expires if none takes it in time)."""
        ...

    def claim_reserved(
        self, queue: str, items: Sequence[tuple[int, int, str]], reservation: str, now_ms: int
    ) -> list[tuple[int, int]]:
        """Claim ``(priority, local_id, claim)`` jobs still PENDING under this live reservation,
        exactly as ``dequeue_jobs`` claims (IN_PROGRESS, claim descriptor ``claim``, updated now),
        each with its own claim (one call serves many workers' dequeues); return the
        ``(priority, local_id)`` keys claimed. The others lapsed, were taken or deleted."""
        ...

    def release_reservations(self, queue: str, items: Sequence[tuple[int, int]], reservation: str, now_ms: int) -> int:
        """Clear live reservations held by ``reservation`` on these jobs, so they are dequeuable
        at once (claim descriptor cleared, updated now). Return how many were released."""
        ...

    # -- reads ------------------------------------------------------------------------------

    def lookup_jobs(
        self, queue: str, keys: Sequence[tuple[int, int]], include_body: bool, max_body_bytes: int | None = None
    ) -> list[JobRecord]:
        """The jobs found among ``(priority, local_id)`` keys; missing ones are left out. With
        ``include_body`` and ``max_body_bytes``: ``LookupOverBudget`` if the bodies found hold
        more than that many bytes, raised having read at most about that many (Redis counts its
        records' bytes, a little more than their bodies)."""
        ...

    def count_jobs(self, queue: str, where: JobFilter, limit: int | None) -> int:
        """How many jobs match, capped at ``limit`` when given."""
        ...

    def scan_jobs(self, queue: str, where: JobFilter, limit: int, after: ScanCursor | None = None) -> list[JobRecord]:
        """Up to ``limit`` matching jobs without bodies, newest run_after first, jobs of one
        run_after in an order of their local ids that the store fixes (descending in SQL; Redis
        may order them by their text). With ``after``, only the jobs that come after that point
        in this order (see ``ScanCursor``): paging by the last job of each page returns every job
        that keeps matching during the whole scan exactly once, whatever is added, changed or
        deleted around it. Each page costs about ``limit`` jobs of store work (plus what a body
        regex skips), however deep into the queue it starts."""
        ...

    def oldest_ready(self, num_priorities: int, now_ms: int) -> dict[tuple[str, int], int]:
        """For every (queue, priority) on the shard with ready PENDING jobs that a dequeue may
        hand out (``run_after <= now``; waiting group jobs are not; jobs under a reservation may
        be counted or not), the smallest run_after_ms among them. In a number of store round
        trips that does not grow with the queues beyond what ``queue_counts`` takes; ``/metrics``
        turns it into the age of each queue's oldest ready job."""
        ...

    def queue_counts(self, num_priorities: int, now_ms: int) -> dict[CountKey, int]:
        """The jobs of every queue on the shard, priorities 1..num_priorities, by state and
        ready/future, in a number of store round trips that does not grow with the queues (the
        dashboard's queue list). Each count equals what ``count_jobs`` answers for that filter
        without a body regex and without a cap; cells without jobs may be left out."""
        ...

    # -- bulk administration ----------------------------------------------------------------

    def retry_failed_jobs(
        self, queue: str, priority: int, attempts_to_allow: int, run_after_ms: int, limit: int, now_ms: int
    ) -> int:
        """Move up to ``limit`` FAILED jobs back to PENDING; return how many moved."""
        ...

    def delete_jobs(self, queue: str, where: JobFilter, limit: int) -> int:
        """Delete up to ``limit`` matching jobs; return how many were deleted."""
        ...

    # -- schedules --------------------------------------------------------------------------
    #
    # Schedules live in the store so that every server sees them and they survive restarts.
    # ``schedules.py`` decides when they are due and what they enqueue (each tick's job carries
    # a dedup key naming the tick, so two servers firing one tick make one job); a store only
    # keeps the rows and moves ``next_run_ms`` atomically.

    def put_schedule(self, row: ScheduleRow) -> None:
        """Create or replace the schedule (``row.queue``, ``row.name``). Raises
        ``QueueNotFoundError`` for a missing queue."""
        ...

    def delete_schedule(self, queue: str, name: str) -> bool:
        """Remove the schedule; False when there was none (or no such queue)."""
        ...

    def list_schedules(self, queue: str) -> list[ScheduleRow]:
        """The queue's schedules (paused ones too), by name; empty for a missing queue."""
        ...

    def due_schedules(self, now_ms: int, limit: int, max_bytes: int = DUE_PAGE_BYTES) -> list[ScheduleRow]:
        """Up to ``limit`` unpaused schedules of every queue with ``next_run_ms <= now_ms``,
        earliest first (an index, not a scan of every schedule), and no more once their specs
        hold ``max_bytes`` (the first row whatever its size): the rest are due at the next call."""
        ...

    def advance_schedule(self, queue: str, name: str, expected_next_ms: int, next_run_ms: int) -> bool:
        """Set the schedule's ``next_run_ms`` only if it exists and its ``next_run_ms`` is still
        ``expected_next_ms`` (a compare-and-set: of two servers that fired one tick, one moves
        it). Return whether it moved."""
        ...

    # -- maintenance (the monitor) ----------------------------------------------------------

    def resurrect_timed_out_jobs(
        self, queue: str, priority: int, claimed_before_ms: int, limit: int, now_ms: int
    ) -> Resurrected:
        """Treat up to ``limit`` IN_PROGRESS jobs last updated before ``claimed_before_ms`` as
        failed without a retry delay: back to PENDING (run_after now) with one attempt less,
        or FAILED when none is left (with ``CANCELLED`` appended for a cancelled job; expired
        when past its expiry: see ``cancel_jobs`` and "Expiry"). Return how many changed, and
        of them how many ended FAILED (``Resurrected``)."""
        ...

    def gc_finished_jobs(self, queue: str, priority: int, state: JobState, finished_before_ms: int, limit: int) -> int:
        """Delete up to ``limit`` jobs in ``state`` (SUCCEEDED or FAILED) last updated before
        ``finished_before_ms``. Return how many were deleted."""
        ...

    # -- lifecycle --------------------------------------------------------------------------

    def ping(self) -> None:
        """Raise ``ShardConnectionError`` unless the shard answers."""
        ...

    def close(self) -> None:
        """Release connections and files. Idempotent."""
        ...

    def interrupt(self) -> None:
        """The server stops: cut short the calls in progress that may run for long (a MySQL
        migration's ALTER, up to an hour), so its threads end, as the stop waits for them. What
        they did stays done or is tried again later."""
        ...

    # -- the hot path, as the server calls it -------------------------------------------------

    def hot_path(self, offload: Offload) -> HotPath:
        """The hot operations as coroutines, as the server calls them (``HotPath``).

        ``offload`` runs a blocking call on the server's thread pool: a store whose client
        blocks (embedded, MySQL) answers ``ThreadedHotPath(self, offload)`` (``threaded.py``);
        the Redis store runs them on the event loop (redis.asyncio) and does not use it.
        """
        ...

    async def aclose(self) -> None:
        """Close what the hot path opened on the running event loop, before ``close``.
        Idempotent; nothing to do for a store whose hot path runs on the thread pool."""
        ...


class Offload(Protocol):
    """Runs a blocking call off the event loop (the server's store thread pool)."""

    def __call__(self, fn: Callable[..., T], /, *args: object) -> Awaitable[T]: ...


class HotPath(Protocol):
    """A store's hot operations as coroutines, as ``ShardStore.hot_path`` runs them (on the
    event loop or on the thread pool): the ``ShardStore`` methods of the same names, with the
    same semantics and errors, but the jobs of enqueue, dequeue and ack are the extension's
    values (``NewJobBatch``, ``LocalIds``, ``ClaimedJobs``, ``AckGroup``), held in Rust, so no
    Python object is made per job between the wire and a native store. So are the broker's
    reservations (``ClaimedJobs``) and claims (``ClaimItems``: each job with its own claim);
    its releases keep Python values (rare: stale entries and shutdown). Everything else the
    server asks a store runs on the thread pool (``ShardedBackend.call_store``)."""

    async def enqueue_jobs(self, queue: str, jobs: NewJobBatch, now_ms: int) -> LocalIds: ...

    async def enqueue_keyed_jobs(self, queue: str, jobs: Sequence[KeyedJob], now_ms: int) -> list[Enqueued]:
        """``ShardStore.enqueue_keyed_jobs``, with Python values per job (``KeyedJob`` in,
        ``Enqueued`` out): the embedded store runs it on its Rust writer, the others run the
        blocking method on a worker thread."""
        ...

    async def enqueue_keyed_batch(self, queue: str, jobs: KeyedJobBatch, now_ms: int) -> KeyedPlacement:
        """A whole enqueue request whose jobs carry extensions, every job of it this shard's
        (``ShardedBackend.enqueue_keyed_batch``): its keyed jobs as ``enqueue_keyed_jobs``
        places them, its jobs without a key as ``enqueue_jobs``, and a dedup key repeated in it
        answered with its first job's place, deduplicated. The embedded store hands it whole to
        its Rust writer (one transaction, no Python value per job), Redis to one script call
        packed in Rust (``redis_enqueue_keyed_command``); MySQL splits it in Python
        (``place_keyed_batch``)."""
        ...

    async def dequeue_jobs(
        self,
        queue: str,
        priority: int,
        limit: int,
        claim: str,
        now_ms: int,
        dry_run: bool,
        max_bytes: int = DEQUEUE_BYTES,
    ) -> ClaimedJobs: ...

    async def ack_jobs(self, queue: str, acks: AckGroup, now_ms: int) -> None: ...

    async def ack_and_dequeue_jobs(
        self,
        queue: str,
        acks: AckGroup,
        priority: int,
        limit: int,
        claim: str,
        now_ms: int,
        max_bytes: int = DEQUEUE_BYTES,
    ) -> ClaimedJobs:
        """``ack_jobs(queue, acks, now_ms)``, then ``dequeue_jobs(queue, priority, limit, claim,
        now_ms, False, max_bytes)``: a dequeue's piggy-backed acks of this shard, successes only (a failed
        job could be claimed again by this dequeue, and a repeat of the two after a lost answer
        would fail it twice; a store given failures awaits the two in turn), with the dequeue's
        first store call there, in one hand-off where the store allows (Redis: both scripts in one
        write on one connection; MySQL: one worker, the ack's statements and COMMIT in the
        dequeue's first round trip; embedded: both queued to the writer at once, as a rule one
        group commit). The acks are applied first; if they fail, that is raised and no job is
        handed out (on Redis and the embedded store, should the ack alone fail while the
        dequeue ran, the jobs it claimed come back at their claim timeout, as when a dequeue's
        answer is lost). ``limit`` is at least 1. A store without such a hand-off awaits the two
        in turn (``sequential_ack_and_dequeue``)."""
        ...

    async def reserve_jobs(
        self,
        queue: str,
        priority: int,
        limit: int,
        reservation: str,
        now_ms: int,
        hold_ms: int,
        max_bytes: int = DEQUEUE_BYTES,
    ) -> ClaimedJobs: ...

    async def claim_reserved(self, queue: str, items: ClaimItems, reservation: str, now_ms: int) -> list[int]:
        """``ShardStore.claim_reserved``; the positions in ``items`` (from 0) of the jobs *not*
        claimed (lapsed, taken or deleted meanwhile), ascending: none, as a rule."""
        ...

    async def release_reservations(
        self, queue: str, items: Sequence[tuple[int, int]], reservation: str, now_ms: int
    ) -> int: ...

    @property
    def reserves_behind_enqueue(self) -> bool:
        """Whether ``enqueue_and_reserve_jobs`` can run the reserve right behind the enqueue
        (else it runs the enqueue alone, and the broker asks it nothing)."""
        ...

    async def enqueue_and_reserve_jobs(
        self,
        queue: str,
        jobs: NewJobBatch,
        now_ms: int,
        priority: int,
        limit: int,
        reservation: str,
        hold_ms: int,
        max_bytes: int = DEQUEUE_BYTES,
    ) -> tuple[LocalIds, ClaimedJobs | None]:
        """``enqueue_jobs(queue, jobs, now_ms)``, and where the store can run it right behind
        the enqueue in the same hand-off, ``reserve_jobs(queue, priority, limit, reservation,
        now_ms, hold_ms, max_bytes)``: the dequeue broker's refill riding on its own server's enqueue, so
        the jobs are in its buffer when the enqueue is answered (Redis: the reserve written
        behind the enqueue on the same connection, so Redis runs it after). The enqueue is the
        call: its errors are raised as ``enqueue_jobs`` raises them. The reserve is an extra:
        None when it did not run right after the enqueue (a store with nothing to gain from it,
        which runs the enqueue alone: the embedded store and MySQL, whose reserves run on the
        thread pool, and a Redis Cluster; no live connection; or it failed), and the broker
        refills as it would have."""
        ...


def sort_keyed(
    keys: Sequence[tuple[str | None, int, str | None, int | None]],
) -> tuple[list[int], list[int], list[tuple[int, int]]]:
    """The jobs of a request by their keys (``(dedup_key, window_ms, group, expire_at_ms)``
    each): the indexes of those a keyed enqueue places (a key, a group or an expiry; each dedup
    key's first job), of those without any (plain), and ``(i, j)`` for each job ``i`` whose
    dedup key job ``j`` has already (answered with ``j``'s place)."""
    first: dict[str, int] = {}
    keyed: list[int] = []
    plain: list[int] = []
    repeats: list[tuple[int, int]] = []
    for i, (key, _window_ms, group, expire_at_ms) in enumerate(keys):
        if key is None and group is None and expire_at_ms is None:
            plain.append(i)
        elif key is not None and key in first:
            repeats.append((i, first[key]))
        else:
            if key is not None:
                first[key] = i
            keyed.append(i)
    return keyed, plain, repeats


class KeyedEnqueues(Protocol):
    """The two enqueues of a ``HotPath`` that ``place_keyed_batch`` splits a request into."""

    def enqueue_jobs(self, queue: str, jobs: NewJobBatch, now_ms: int, /) -> Awaitable[LocalIds]: ...
    def enqueue_keyed_jobs(self, queue: str, jobs: Sequence[KeyedJob], now_ms: int, /) -> Awaitable[list[Enqueued]]: ...


async def place_keyed_batch(hot: KeyedEnqueues, queue: str, jobs: KeyedJobBatch, now_ms: int) -> KeyedPlacement:
    """``HotPath.enqueue_keyed_batch`` through the store's ``enqueue_keyed_jobs`` (its jobs
    with a key, a group or an expiry, each dedup key once) and ``enqueue_jobs`` (the others,
    after the keyed ones succeeded, as ``ShardedBackend.enqueue_keyed_jobs`` orders them)."""
    from pinlater._pinlater import KeyedPlacement, NewJobBatch

    new = jobs.batch().to_list()
    keys = jobs.keys()
    placed: list[tuple[int, int, bool]] = [(0, 0, False)] * len(keys)
    keyed, plain, repeats = sort_keyed(keys)
    if keyed:
        batch = [KeyedJob(NewJob(*new[i]), *keys[i]) for i in keyed]
        answers = await hot.enqueue_keyed_jobs(queue, batch, now_ms)
        for i, answer in zip(keyed, answers, strict=True):
            placed[i] = (answer.priority, answer.local_id, answer.deduplicated)
    if plain:
        ids = await hot.enqueue_jobs(queue, NewJobBatch([new[i] for i in plain]), now_ms)
        for i, local_id in zip(plain, ids.to_list(), strict=True):
            placed[i] = (new[i][0], local_id, False)
    for i, j in repeats:
        priority, local_id, _ = placed[j]
        placed[i] = (priority, local_id, True)
    return KeyedPlacement(placed)


async def sequential_ack_and_dequeue(
    hot: HotPath,
    queue: str,
    acks: AckGroup,
    priority: int,
    limit: int,
    claim: str,
    now_ms: int,
    max_bytes: int = DEQUEUE_BYTES,
) -> ClaimedJobs:
    """``HotPath.ack_and_dequeue_jobs`` as two calls in turn, for a store with nothing to gain
    from doing them together."""
    await hot.ack_jobs(queue, acks, now_ms)
    return await hot.dequeue_jobs(queue, priority, limit, claim, now_ms, False, max_bytes)


@runtime_checkable
class ShardConfig(Protocol):
    """One shard's entry in a backend config file, as a backend parsed it (a frozen dataclass).

    Two configs compare equal when they describe the same connection; ``dequeue_only`` is
    compared separately so that flipping it keeps the open store.
    """

    @property
    def dequeue_only(self) -> bool: ...


class BackendDriver(Protocol):
    """One backend kind, as the server sees it: every kind (embedded, Redis, MySQL) is a driver,
    so the server never asks which one it has (``drivers.driver_for`` picks it from settings).

    The shards are listed in a JSON config file (``config_path``; watched, and reloaded without a
    restart) or by the settings alone (``config_path`` None: the embedded store's
    ``EMBEDDED_NUM_SHARDS``). ``parse_config`` raises ``ConfigError`` with a one-line reason for
    a bad file. The shared layer (``reload.py``) diffs successive configs on reload: unchanged
    shards keep their store, changed ones are reopened, removed ones closed.
    """

    kind: str

    def config_path(self, settings: Settings) -> Path | None:
        """The file that lists the shards (watched for edits), or None when the settings do."""
        ...

    def shard_configs(self, settings: Settings) -> dict[str, ShardConfig]:
        """The shards to open at start: from ``config_path`` (parsed; ``ConfigError`` if it
        cannot be read or lists none) or from the settings."""
        ...

    def parse_config(self, text: str, source: str) -> dict[str, ShardConfig]: ...

    def open_store(self, name: str, config: ShardConfig, settings: Settings) -> ShardStore: ...

    def acquire(self, settings: Settings) -> None:
        """Take what one server must hold alone before it opens a store (the embedded data
        directory's lock), or raise ``StoreLockedError``."""
        ...

    def release(self) -> None:
        """Let go of what ``acquire`` took, once every store is closed. Idempotent."""
        ...

    def count_limit(self, settings: Settings) -> int | None:
        """The cap on a shard's answer to a count (``ShardedBackend.count_limit``)."""
        ...

    def warnings(self, store: ShardStore) -> list[str]:
        """What the store's own settings put at risk (jobs lost on a restart), one line each.
        Blocking: the server calls it on its thread pool."""
        ...

    def gauges(self, shards: Callable[[], Iterable[Shard]]) -> Mapping[str, Callable[[], float]]:
        """Gauges of this kind for ``/stats.txt`` and ``/metrics``, over the shards configured
        when read: what this process's stores counted, so each is summed over the server
        processes."""
        ...
