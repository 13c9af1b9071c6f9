"""pinlater's native core (Rust, PyO3): job descriptors, dequeue rate limits, the dequeue broker's
buffer, the Thrift struct walk, the hot calls decoded from their frames and their replies, the
hot path's jobs as Rust values, the MySQL backend's enqueue INSERT, the Redis backend's commands
and replies, and body filters.

Every function is safe to call from many threads at once. A Rust panic inside any of them is
raised as ``NativeError`` (never as PyO3's ``PanicException``, which is a ``BaseException``).
"""

from collections.abc import Callable, Sequence
from typing import Any, Final, NoReturn, Protocol, TypeVar, final

__all__ = [
    "DETACH_BYTES",
    "DETACH_JOBS",
    "MAX_ENQUEUE_JOBS",
    "MAX_TIMESTAMP_MS",
    "THRIFT_IDL",
    "AckCall",
    "AckGroup",
    "AnswerSignal",
    "BodyFilterTimeout",
    "BodyMatcher",
    "BodyPatternError",
    "ClaimFlush",
    "ClaimItems",
    "ClaimedJobs",
    "DequeueCall",
    "DescriptorError",
    "EnqueueCall",
    "HandOut",
    "JobBuffer",
    "JobRejected",
    "KeyedJobBatch",
    "KeyedPlacement",
    "KeyedSplit",
    "LocalIds",
    "MalformedThriftError",
    "MissingFieldError",
    "MySQLShard",
    "NativeError",
    "NewJobBatch",
    "NotUtf8Error",
    "RateLimiter",
    "RedisErrorReply",
    "RedisScriptTail",
    "SplitPlacement",
    "SqliteShard",
    "WriteGate",
    "__version__",
    "_panic_for_tests",
    "decode_descriptor",
    "decode_descriptors",
    "decode_hot_call",
    "decode_hot_frame",
    "encode_dequeue_batches",
    "encode_dequeue_handout",
    "encode_dequeue_reply",
    "encode_descriptor",
    "encode_descriptors",
    "encode_enqueue_descriptors",
    "encode_enqueue_reply",
    "encode_keyed_enqueue_reply",
    "encode_split_enqueue_reply",
    "encode_void_reply",
    "mysql_insert_statements",
    "redis_ack_command",
    "redis_ack_reply",
    "redis_claim_command",
    "redis_claimed_jobs",
    "redis_claimed_reply",
    "redis_claimed_split",
    "redis_dequeue_command",
    "redis_enqueue_command",
    "redis_enqueue_keyed_command",
    "redis_ids_reply",
    "redis_int_reply",
    "redis_keyed_placement",
    "redis_pack_command",
    "redis_reply_end",
    "redis_require_queue_command",
    "sqlite_library_version",
    "thrift_struct_end",
    "thrift_struct_objects",
]

__version__: Final[str]
"""The package version (from Cargo.toml)."""

THRIFT_IDL: Final[str]
"""The text of ``thrift/pinlater.thrift``, embedded at build time: the wire contract."""

DETACH_BYTES: Final[int]
"""Payloads at least this long are decoded (``decode_hot_frame``, ``thrift_struct_end``) with
the interpreter released, so a caller on another thread does not hold up the event loop."""

DETACH_JOBS: Final[int]
"""Batches of at least this many jobs are built (``EnqueueCall.keyed``) and cut
(``KeyedJobBatch.chunks``) with the GIL released, 0.1-0.6 us a job each (warm to cold): the caller
sends such a call to a worker thread (``pinlater.eventloop.off_loop``), and the event loop serves
other connections meanwhile."""

MAX_TIMESTAMP_MS: Final[int]
#: Most jobs one ``enqueueJobs`` takes: a call declaring more is walked, not decoded (its
#: ``len`` is what it declared, its jobs none), for the handler to refuse.
MAX_ENQUEUE_JOBS: Final[int]
"""The latest run-after or expiry a job keeps, in ms since the epoch (the last millisecond of the
year 9999): a later one, in an enqueue, a checkpoint or a retry of failed jobs, is cut to it."""

class DescriptorError(ValueError):
    """A job descriptor, or a part given to build one, is malformed.

    The message names the offending descriptor (and its index in a batch) and what is wrong,
    e.g. ``descriptor at index 2: invalid job descriptor "q:s1:p0:7": priority "0" is not a
    decimal integer in 1..=127``.
    """

class MalformedThriftError(ValueError):
    """The bytes are not a well-formed Thrift binary-protocol struct.

    The message says what is wrong, worded for a PROTOCOL_ERROR reply: ``struct truncated``,
    ``string truncated``, ``negative string length``, ``list header truncated``, ``map header
    truncated``, ``unknown wire type 99``, ``negative container size``, ``unknown element type in
    (99,)`` (or ``(11, 99)`` for a map's key and value), ``container truncated``, ``structs nested
    too deeply`` or ``containers nested too deeply``. From ``decode_hot_call``, also a ``string``
    field that is not UTF-8 (``NotUtf8Error``).
    """

class NotUtf8Error(MalformedThriftError):
    """From ``decode_hot_call``: a ``string`` field that is not UTF-8, worded as Python's
    ``UnicodeDecodeError`` (``'utf-8' codec can't decode byte 0xff in position 0: invalid start
    byte``)."""

class MissingFieldError(ValueError):
    """A hot call without a struct argument, or without a ``required`` field. The message is the
    server's PROTOCOL_ERROR reply: ``missing argument enqueueJobs.request``, ``missing required
    field PinLaterJob.body at request.jobs[3].body`` (the first missing, depth first in field
    order)."""

class JobRejected(ValueError):
    """A job of an enqueue that the server refuses, as ``PinLaterException(code, message)``:
    ``ENQUEUE_REJECTED`` (``numAttemptsAllowed must be at least 1, not 0``) or
    ``PRIORITY_NOT_SUPPORTED`` (``priority 9 is not in 1..3``)."""

    code: int
    """The ``ErrorCode`` (an int)."""

class BodyPatternError(ValueError):
    """A body regex that ``BodyMatcher`` cannot take; the message is the reason in one line:
    a syntax error (``unclosed group``), ``backreferences are not supported``, ``look-around,
    including look-ahead and look-behind, is not supported``, a pattern longer than 4096 bytes,
    or one whose compiled program would pass 1 MiB (e.g. ``\\w{50}``).
    """

class BodyFilterTimeout(TimeoutError):
    """``BodyMatcher.match_indices`` ran past its budget; the message says how many bodies of
    the batch it had matched."""

class RedisErrorReply(Exception):
    """Redis answered with an error: the message is its text without the ``-``
    (``NOSCRIPT No matching script...``), for the store to map as ``shard_errors`` does."""

class NativeError(RuntimeError):
    """An internal failure of the extension: a Rust panic or a resource it could not get.

    Never the caller's fault; the message says which function failed and why.
    """

# Job descriptors: "{queue}:s{shard}:p{priority}:{local_id}", e.g. "test_queue:s1d1:p1:42".
# queue and shard are non-empty ASCII [A-Za-z0-9_]; priority is 1..=127; local_id is an
# unsigned 64-bit integer written in decimal digits only.

def encode_descriptor(queue: str, shard: str, priority: int, local_id: int) -> str:
    """Build one job descriptor, ``f"{queue}:s{shard}:p{priority}:{local_id}"``.

    ``shard`` is the shard name without its ``s`` prefix.

    Raises:
        DescriptorError: a name is empty or has a character outside ASCII ``[A-Za-z0-9_]``,
            ``priority`` is outside 1..=127, or ``local_id`` is outside 0..2**64.
        TypeError: ``priority`` or ``local_id`` is not an int.
    """

def encode_descriptors(queue: str, shard: str, priorities: Sequence[int], local_ids: Sequence[int]) -> list[str]:
    """Build one descriptor per ``(priorities[i], local_ids[i])``, all for one queue and shard.

    The whole batch crosses into Rust once; prefer it to a loop over ``encode_descriptor``.

    Raises:
        DescriptorError: the sequences differ in length, a name is invalid, or an item is out
            of range (the message gives its index).
        TypeError: an argument is not a sequence (a lone ``str`` is refused) or an item is not
            an int.
    """

def decode_descriptor(descriptor: str) -> tuple[str, str, int, int]:
    """Split one descriptor into ``(queue, shard, priority, local_id)``.

    ``shard`` comes without its ``s`` prefix. Leading zeros in the numbers are accepted.

    Raises:
        DescriptorError: the descriptor is malformed; the message says how.
    """

def decode_descriptors(descriptors: Sequence[str]) -> list[tuple[str, str, int, int]]:
    """Split each descriptor into ``(queue, shard, priority, local_id)``, in input order.

    The whole batch crosses into Rust once; prefer it to a loop over ``decode_descriptor``.

    Raises:
        DescriptorError: a descriptor is malformed; the message names the first bad one and
            its index. Nothing is returned for the good ones.
        TypeError: ``descriptors`` is a lone ``str`` or not iterable, or an item is not a str.
    """

@final
class RateLimiter:
    """Dequeue rate limits per queue: one token bucket per queue. Thread-safe.

    A queue with no rate is unlimited. A bucket accrues ``rate`` tokens per second up to a
    capacity of ``max(rate, 1.0) * burst_seconds`` and starts full. A request for ``n`` jobs is
    granted when the bucket holds at least ``min(n, capacity)`` tokens, and is then charged all
    ``n``: the balance may go negative, and the debt is repaid by later accrual, so large
    batches at low rates still keep the long-run rate.
    """

    def __new__(cls, burst_seconds: float = 1.0) -> RateLimiter:
        """Create a limiter with no rates set.

        Raises:
            ValueError: ``burst_seconds`` is not a finite number > 0.
        """

    @property
    def burst_seconds(self) -> float:
        """Seconds of accrual a bucket can hold (at least one job's worth)."""

    def set_rate(self, queue: str, jobs_per_second: float) -> None:
        """Set or change ``queue``'s rate in jobs per second. ``0`` pauses the queue.

        Changing a rate keeps the tokens accrued so far, clamped to the new capacity; a new
        queue starts with a full bucket.

        Raises:
            ValueError: ``jobs_per_second`` is negative, NaN or infinite.
        """

    def remove(self, queue: str) -> None:
        """Make ``queue`` unlimited again (forgetting its bucket). Unknown queues are ignored."""

    def rates(self) -> dict[str, float]:
        """A snapshot of the rates set, by queue."""

    def try_acquire(self, queue: str, n: int = 1) -> bool:
        """Whether ``n`` jobs of ``queue`` may be dequeued now; if so they are charged.

        Always ``True`` for a queue with no rate, always ``False`` for a paused one (rate 0).

        Raises:
            OverflowError: ``n`` is negative or at least 2**64.
        """

@final
class JobBuffer:
    """The dequeue broker's buffer of reserved jobs for one queue. Thread-safe.

    Holds at most ``capacity`` entries, pushed from a reserve call's ``ClaimedJobs`` and held in
    Rust. An entry, where one comes back to Python (``take``, ``take_older_than``, ``drain``,
    ``HandOut.stale``: to release), is ``(shard, priority, local_id, body, attempts_allowed,
    attempts_remaining, reserved_at_ms)``. Every entry comes out of exactly one ``take``,
    ``hand_out``, ``take_older_than`` or ``drain`` and is then forgotten.
    """

    def __new__(cls, capacity: int) -> JobBuffer:
        """An empty buffer.

        Raises:
            ValueError: ``capacity`` is negative.
        """

    @property
    def capacity(self) -> int:
        """The most entries held at once."""

    @property
    def room(self) -> int:
        """``capacity - len(self)``: how many jobs a refill may add."""

    @property
    def bytes(self) -> int:
        """The bytes of the bodies held now."""

    def __len__(self) -> int:
        """Entries held now."""

    def len_priority(self, priority: int) -> int:
        """Entries held for one priority."""

    def lengths(self) -> dict[int, int]:
        """Entries held by priority, for priorities that hold any."""

    def push(self, shard: str, priority: int, jobs: ClaimedJobs, reserved_at_ms: int) -> list[int]:
        """Append the jobs of one reserve call (one shard and priority), reserved at
        ``reserved_at_ms``, while there is room; return the local ids that did not fit (their
        reservations are the caller's to release)."""

    def take(self, limit: int) -> list[_Entry]:
        """Remove and return up to ``limit`` entries: priority 1 first, then first in, first out."""

    def hand_out(self, queue: str, limit: int, max_bytes: int, fresh_after_ms: int) -> HandOut:
        """Remove up to ``limit`` entries as ``take`` does, for a dequeue of ``queue``, each
        while the bodies removed before it hold fewer than ``max_bytes`` bytes (the first
        always: ``within_bytes``): those
        reserved at or after ``fresh_after_ms`` are the jobs handed out; older ones, whose
        reservation may be about to lapse, are kept apart (``HandOut.stale``, to release).

        Raises:
            DescriptorError: ``queue`` or a shard name cannot appear in a descriptor (the
                entries taken are then dropped: their reservations lapse after the hold).
        """

    def take_older_than(self, cutoff_ms: int) -> list[_Entry]:
        """Remove and return every entry reserved before ``cutoff_ms``."""

    def take_named(self, jobs: list[tuple[str, int, int]]) -> list[_Entry]:
        """Remove and return the entries of these ``(shard, priority, local_id)`` jobs (those
        it holds), in take order; the others keep their places."""

    def drain(self) -> list[_Entry]:
        """Remove and return every entry."""

#: ``(shard, priority, local_id, body, attempts_allowed, attempts_remaining, reserved_at_ms)``.
_Entry = tuple[str, int, int, bytes, int, int, int]

@final
class HandOut:
    """What one broker dequeue took from a queue's buffer, held in Rust: ``len()`` jobs for the
    worker, in order (``encode_dequeue_handout`` writes the reply from them), and apart the
    stale entries to release."""

    def __len__(self) -> int: ...
    @property
    def queue(self) -> str:
        """The queue the jobs were handed out of."""

    @property
    def stale_count(self) -> int:
        """How many entries were too old to hand out."""

    def stale(self) -> list[_Entry]:
        """The entries too old to hand out."""

    def withholding(
        self, shards: set[str] | frozenset[str], jobs: set[tuple[str, int, int]] | frozenset[tuple[str, int, int]]
    ) -> HandOut:
        """The hand-out without the jobs whose claims were not written: all on ``shards`` (their
        claim calls failed) and the ``(shard, priority, local_id)`` ones of ``jobs`` (a store
        that answered found them lapsed, taken or deleted), in the same order; the jobs left out
        are its ``stale`` entries, to release."""

    def to_list(self) -> list[tuple[str, bytes, int, int]]:
        """``(descriptor, body, attempts_allowed, attempts_remaining)`` per job, in order (for
        tests and tools; the server never builds these).

        Raises:
            DescriptorError: a priority or local id that cannot form a descriptor.
        """

@final
class ClaimFlush:
    """The claims of the hand-outs of one turn of the loop, until they are written: per (queue,
    shard) the ``ClaimItems`` of one store call, and which jobs they name. Thread-safe."""

    def __new__(cls) -> ClaimFlush: ...
    def add(self, claim: str, hand_out: HandOut) -> None:
        """Book the claims of the hand-out's jobs, each under ``claim``."""

    def __len__(self) -> int:
        """Jobs booked."""

    def holds_queue(self, queue: str) -> bool:
        """Whether any job of ``queue`` is booked."""

    @staticmethod
    def holding(flushes: Sequence[ClaimFlush], jobs: Sequence[tuple[str, str, int, int]]) -> list[int]:
        """The positions in ``flushes`` of those that hold any of the ``(queue, shard, priority,
        local_id)`` jobs (decoded descriptors are such tuples: an id past i64, which no job has,
        is held by none)."""

    def batches(self) -> list[tuple[str, str, ClaimItems]]:
        """``(queue, shard, items)`` per (queue, shard), in the order first booked."""

@final
class ClaimItems:
    """The claims of handed-out jobs of one queue on one shard, in hand-out order: what one
    ``claim_reserved`` call writes, each job with its own claim."""

    def __new__(cls, items: Sequence[tuple[int, int, str]]) -> ClaimItems:
        """From ``(priority, local_id, claim)`` items, for stores and tests."""

    def __len__(self) -> int: ...
    def to_list(self) -> list[tuple[int, int, str]]:
        """One ``(priority, local_id, claim)`` per job, in order."""

#: ``(priority, body, run_after_ms, attempts_allowed, custom_status)``: ``backends.base.NewJob``.
_NewJobTuple = tuple[int, bytes, int, int, str]
#: ``(local_id, body, attempts_allowed, attempts_remaining, created_at_ms, updated_at_ms)``:
#: ``backends.base.ClaimedJob``.
_ClaimedTuple = tuple[int, bytes, int, int, int, int]
#: ``(priority, local_id, append_custom_status, retry_delay_ms)``: ``backends.base.AckItem``.
_AckTuple = tuple[int, int, str, int]

@final
class NewJobBatch:
    """The jobs of one enqueue, every default resolved, in request order: held in Rust, handed
    from the wire decoder to a store without a Python object per job."""

    def __new__(cls, jobs: Sequence[_NewJobTuple]) -> NewJobBatch:
        """A batch of Python jobs (``NewJob`` tuples), for stores and tests."""

    def __len__(self) -> int: ...
    @property
    def body_bytes(self) -> int:
        """The sum of the bodies' lengths."""

    def priorities(self) -> list[int]:
        """The distinct priorities, ascending."""

    def ready_priorities(self, now_ms: int) -> list[int]:
        """The distinct priorities of the jobs ready at ``now_ms``, ascending."""

    def later(self, now_ms: int) -> list[tuple[int, int]]:
        """Distinct ``(priority, run_after_ms)`` of the jobs not ready at ``now_ms``, ascending."""

    def chunks(self, size: int) -> list[NewJobBatch]:
        """The batch in parts of at most ``size`` jobs (at least 1), in order: a request too
        large for one store call (``backends.base.STORE_CALL_JOBS``). The parts copy the jobs."""

    def to_list(self) -> list[_NewJobTuple]:
        """One ``NewJob`` tuple per job."""

_KeysTuple = tuple[str | None, int, str | None, int | None]

@final
class KeyedJobBatch:
    """The jobs of one enqueue of which some carry a pinlater extension, each with its keys
    ``(dedup_key, window_ms, group, expire_at_ms)`` (any of them, or none), in request order:
    held in Rust, as ``NewJobBatch``; a store that takes it whole places every job in one call."""

    def __new__(cls, jobs: Sequence[_NewJobTuple], keys: Sequence[_KeysTuple]) -> KeyedJobBatch:
        """A batch of Python jobs with their keys, for stores and tests.

        Raises:
            ValueError: not one keys tuple per job.
        """

    def __len__(self) -> int: ...
    def batch(self) -> NewJobBatch:
        """The jobs alone."""

    def keys(self) -> list[_KeysTuple]:
        """Each job's ``(dedup_key, window_ms, group, expire_at_ms)``, in job order."""

    @property
    def max_priority(self) -> int:
        """The highest priority of the jobs (0 for no job)."""

    @property
    def first_grouped(self) -> int | None:
        """The index of the first job of an ordered group, if any job has one."""

    def chunks(self, size: int) -> tuple[list[KeyedJobBatch], list[tuple[int, int]]]:
        """The batch in parts of at most ``size`` jobs (at least 1), in order, each job with its
        keys, for a request too large for one store call (``backends.base.STORE_CALL_JOBS``);
        and ``(index, first)`` for each job left out of them, whose dedup key an earlier job of
        the batch has (``first``): it is answered with that job's place
        (``KeyedPlacement.concat``), as a store answers a key repeated in one call, even when
        that job ended before a later part was sent. The parts copy the jobs, with the GIL
        released for a batch of ``DETACH_JOBS`` jobs or more."""

    def written(self, placement: KeyedPlacement) -> tuple[int, int, int, int]:
        """``(jobs, body_bytes, keys, key_bytes)`` of the jobs ``placement`` wrote (not
        deduplicated): how many, their bodies' bytes, how many carry a dedup key and those
        keys' UTF-8 bytes."""

    def written_ready(self, placement: KeyedPlacement, now_ms: int) -> tuple[list[int], list[tuple[int, int]]]:
        """The distinct priorities of the jobs ``placement`` wrote that are ready at ``now_ms``,
        and the distinct ``(priority, run_after_ms)`` of those that are not, both ascending."""

    @property
    def needs_loose(self) -> bool:
        """Whether a job has an expiry and no dedup key or group: ``split`` then needs a
        ``loose`` shard for it."""

    def first_grouped_on(self, queue: str, shards: Sequence[str], among: Sequence[int]) -> tuple[int, int] | None:
        """The first job (a dedup key's repeats aside) whose group lives on one of the shards
        ``among`` (indexes into ``shards``, as ``split`` takes them): ``(request index, shard
        index)``, or None. A request a shard would refuse for its groups is refused before
        anything is written."""

    def split(
        self, queue: str, shards: Sequence[str], loose: int | None
    ) -> tuple[KeyedSplit, list[tuple[int, KeyedJobBatch]], NewJobBatch | None]:
        """The request spread over ``shards`` (the names of the shards that take new jobs) by its
        keys, as ``ShardedBackend.enqueue_keyed_jobs`` spreads it (``sharded.key_shard``, the
        same hash): each shard's jobs as a batch of their own, ``(index into shards, batch)``;
        the jobs without any extension as one batch (None if none); and the ``KeyedSplit`` that
        puts the shards' answers back in request order. A job with a group goes to its group's
        shard, one with a dedup key alone to its key's, one with only an expiry to ``loose``;
        a dedup key repeated in the request goes to no shard (its first job answers it).

        Raises:
            ValueError: a job with a key or group and no shard, or a job with only an expiry and
                no ``loose`` shard.
        """

@final
class KeyedSplit:
    """Where ``KeyedJobBatch.split`` sent each job of a request."""

    def merge(self, placements: Sequence[KeyedPlacement], plain: tuple[str, LocalIds] | None) -> SplitPlacement:
        """Every job's place in request order: each part's placement (one per part, in order),
        the jobs without an extension enqueued on shard ``plain[0]`` with ids ``plain[1]``, and
        each repeat of a dedup key answered with its first job's place, deduplicated.

        Raises:
            ValueError: a placement or the plain ids do not match their jobs.
        """

@final
class SplitPlacement:
    """Where a keyed enqueue spread over shards put each job of its request, in job order."""

    def __len__(self) -> int: ...
    @property
    def deduplicated(self) -> int:
        """How many jobs were deduplicated."""

    def to_list(self) -> list[tuple[str, int, int, bool]]:
        """One ``(shard, priority, local_id, deduplicated)`` per job."""

@final
class KeyedPlacement:
    """Where a keyed enqueue put each job of its request, in job order: ``(priority, local_id,
    deduplicated)``, the place of the job holding its dedup key when deduplicated."""

    def __new__(cls, placed: Sequence[tuple[int, int, bool]]) -> KeyedPlacement: ...
    def __len__(self) -> int: ...
    @staticmethod
    def concat(parts: Sequence[KeyedPlacement], repeats: Sequence[tuple[int, int]]) -> KeyedPlacement:
        """The places of a batch's jobs from the answers to its ``chunks``: the parts' places in
        order, each job of ``repeats`` (``(index, first)``) at its index, answered with its first
        job's place, deduplicated. ValueError if ``repeats`` names a job beyond the parts' or one
        that repeats no earlier job."""

    @property
    def deduplicated(self) -> int:
        """How many jobs were deduplicated."""

    def to_list(self) -> list[tuple[int, int, bool]]:
        """One ``(priority, local_id, deduplicated)`` per job."""

@final
class LocalIds:
    """The local ids a store gave an enqueue's jobs, in job order."""

    def __new__(cls, ids: Sequence[int]) -> LocalIds: ...
    def __len__(self) -> int: ...
    @staticmethod
    def concat(parts: Sequence[LocalIds]) -> LocalIds:
        """The ids of ``parts``, one after the other: the answers of a batch's ``chunks``, in order."""

    def to_list(self) -> list[int]: ...

@final
class ClaimedJobs:
    """The jobs one store call of a dequeue claimed, in dequeue order, held in Rust."""

    def __new__(cls, jobs: Sequence[_ClaimedTuple], cut: bool = False) -> ClaimedJobs:
        """Claimed jobs from Python values (``ClaimedJob`` tuples), for stores and tests."""

    def __len__(self) -> int: ...
    @property
    def cut(self) -> bool:
        """The store call stopped at one of its work budgets before its limit: due jobs may be
        left behind what it passed (``ShardedBackend.walk_ready`` calls again)."""
    @property
    def body_bytes(self) -> int:
        """The length of every job's body, summed: what a dequeue walk counts against its
        reply's byte budget (``DEQUEUE_BYTES``)."""
    def to_list(self) -> list[_ClaimedTuple]:
        """One ``ClaimedJob`` tuple per job."""

@final
class AckGroup:
    """The acks of one queue on one shard, held in Rust."""

    def __new__(cls, succeeded: Sequence[_AckTuple], failed: Sequence[_AckTuple]) -> AckGroup: ...
    def __len__(self) -> int: ...
    def priorities(self) -> list[int]:
        """The distinct priorities, ascending."""

    def chunks(self, size: int) -> list[AckGroup]:
        """The acks in parts of at most ``size`` (at least 1), successes first, each part's in
        the order a store applies the whole group's: for stores taken a part at a time."""

    def succeeded(self) -> list[_AckTuple]:
        """One ``AckItem`` tuple per success."""

    def failed(self) -> list[_AckTuple]:
        """One ``AckItem`` tuple per failure."""

@final
class WriteGate:
    """An embedded shard file's write lock in this process: a FIFO ticket lock that Python's
    connection and the ``SqliteShard`` writer take around each write transaction."""

    def __new__(cls) -> WriteGate: ...
    def acquire(self) -> None:
        """Wait (with the GIL released) for the caller's turn to write the file."""

    def release(self) -> None:
        """End the caller's turn: exactly once per ``acquire``."""

_Settle = Callable[[list[tuple[Any, Any, tuple[int, str] | None]]], object]

@final
class AnswerSignal:
    """A socket pair by which ``SqliteShard`` tells a listening loop that answers wait for it;
    open as long as this object lives."""

    def fileno(self) -> int:
        """The descriptor the loop watches for reading."""

@final
class SqliteShard:
    """The embedded store's hot writes (enqueue, dequeue, ack) on a Rust thread with a
    connection of its own, group committed (``rust/store/sqlite_shard.rs``).

    A request is submitted with an asyncio future and its loop; after the ``COMMIT`` holding it,
    a second thread (so the writer never waits for the GIL) hands its answer on. For a loop that
    listens (``listen``) it queues the answer without the GIL and wakes the loop, which calls
    ``drain``; for any other (or for an answer whose wake-up byte could not be written) it calls
    ``loop.call_soon_threadsafe(settle, [...])`` once per loop for the groups waiting. Either
    way ``settle`` gets ``[(future, value, error), ...]``: ``value`` is ``LocalIds``,
    ``ClaimedJobs`` or ``None``; ``error`` is ``None``, ``(1, queue)`` (no such queue) or
    ``(2, message)`` (a connection problem). Submitting answers False when the shard is closed.
    """

    def __new__(
        cls,
        path: str,
        synchronous: str,
        busy_timeout_ms: int,
        group_max_ops: int,
        custom_status_limit: int,
        reserved_prefix: str,
        statements: dict[str, str],
        gate: WriteGate,
        settle: _Settle,
        profile_path: str | None = None,
    ) -> SqliteShard:
        """Open ``path`` (WAL, ``synchronous``, busy timeout) and start the writer thread (with
        ``FULL``, also a thread that syncs the WAL after each commit, before its answers go out).
        ``statements``: the text of each of ``queue_get``, ``enqueue_jobs``, ``last_job_id``,
        ``dequeue_jobs_dry_run``, ``dequeue_rows``, ``dequeue_claim_rows``, ``dequeue_claim_range``, ``ack_succeeded``,
        ``ack_succeeded_many``, ``ack_succeeded_range``,
        ``ack_failed``, ``queue_has_groups``, ``ack_failed_grouped``, ``dedup_holders``, ``dedup_records``,
        ``dedup_records_fresh``, ``next_job_id``, ``enqueue_keyed_jobs``, ``groups_get``, ``groups_put``,
        ``groups_forget``, ``groups_unwait_oldest``, ``groups_first_waiting``, ``jobs_promote``, ``group_jobs_record``,
        ``group_jobs_of``, ``count_in_progress``, ``ack_failed_expire``, ``expiries_touch``,
        ``expiries_add``, ``expire_jobs``, ``group_jobs_unwait`` (``native_hot.STATEMENTS``). ``enqueue_jobs``,
        ``enqueue_keyed_jobs``, ``dedup_records``, ``dedup_records_fresh``, ``group_jobs_record``
        and ``groups_put`` are one ``VALUES`` row each, repeated into multi-row statements. With
        ``profile_path``, the writer times each statement it runs (SQLite's profile events) and,
        as it ends, writes every statement timed in the process there: a JSON array of ``{"sql", "runs", "ns"}``
        (``native_hot.STATEMENT_TIMES_ENV``).

        Raises:
            OSError: the file cannot be opened as a WAL database.
            ValueError: a statement is missing.
        """

    def listen(self, event_loop: Any) -> AnswerSignal:
        """Have the answers of ``event_loop``'s requests queued for it without the GIL from now
        on: the caller, on that loop, watches the signal (``loop.add_reader(signal.fileno(),
        shard.drain, loop)``). The same signal for a loop that listens already; loops found
        closed here stop listening."""

    def drain(self, event_loop: Any) -> None:
        """Call ``settle`` with the answers queued for ``event_loop`` (on its thread)."""

    @property
    def commits(self) -> int:
        """Write transactions committed so far."""

    @property
    def syncs(self) -> int:
        """Syncs of the WAL file tried so far, a failed one too, off the writer thread (``FULL``;
        none with ``NORMAL``)."""

    @property
    def checkpoints(self) -> tuple[int, int, int]:
        """Checkpoints of the shard file so far: ``(copied, by_writer, fallbacks)``, those its
        checkpointer thread completed, those the writer ran itself (each the few pages that
        finish a copy, or a whole copy), and of those the ones it ran because the WAL passed the
        fallback mark with no copy finished (the checkpointer failed or fell behind)."""

    def enqueue(self, queue: str, jobs: NewJobBatch, now_ms: int, future: Any, event_loop: Any) -> bool: ...
    def enqueue_keyed(
        self,
        queue: str,
        jobs: Sequence[tuple[tuple[int, bytes, int, int, str], str | None, int, str | None, int | None]],
        group_concurrency: int,
        now_ms: int,
        future: Any,
        event_loop: Any,
    ) -> bool:
        """An enqueue of keyed jobs (``backends.base.KeyedJob``s, read as they are: each job with
        its dedup key, window, ordered group and expiry; ``group_concurrency``: the queue's), in
        the writer's group commit; ``future`` gets a ``KeyedPlacement`` (a dedup key repeated in
        the call answered with its first job's place)."""
    def enqueue_keyed_batch(
        self, queue: str, batch: KeyedJobBatch, group_concurrency: int, now_ms: int, future: Any, event_loop: Any
    ) -> bool:
        """``enqueue_keyed`` of a request's jobs with their keys as one ``KeyedJobBatch``; the
        jobs without a key are inserted as PENDING jobs of no group. ``future`` gets a
        ``KeyedPlacement``."""
    def dequeue(
        self,
        queue: str,
        priority: int,
        limit: int,
        claim: str,
        now_ms: int,
        dry_run: bool,
        max_in_progress: int | None,
        group_concurrency: int,
        max_bytes: int,
        future: Any,
        event_loop: Any,
    ) -> bool:
        """A dequeue claiming no more than brings the queue's IN_PROGRESS jobs on the shard to
        ``max_in_progress`` (None: no cap; a dry run ignores it), each job while the bodies
        before it hold fewer than ``max_bytes`` bytes (the first always). On a queue that ever
        had an expiring job it first expires some of the queue's due jobs (``group_concurrency``:
        the queue's, for their groups); it never hands out an expired job."""
    def ack(
        self, queue: str, acks: AckGroup, now_ms: int, group_concurrency: int, future: Any, event_loop: Any
    ) -> bool:
        """Acks; a grouped job that ends for good leaves its group, whose oldest waiting jobs are
        promoted while fewer than ``group_concurrency`` are active."""
    def close(self) -> None:
        """Answer the requests queued, stop the thread and close the connection; then each
        listening loop settles what waits for it and stops watching its signal (scheduled on the
        loop). Idempotent."""

def sqlite_library_version() -> str:
    """The version of the SQLite library the extension links (the system one, as ``sqlite3``)."""

class _InsertJob(Protocol):
    """What ``mysql_insert_statements`` reads of a job (``pinlater.backends.base.NewJob``)."""

    @property
    def body(self) -> bytes: ...
    @property
    def attempts_allowed(self) -> int: ...
    @property
    def custom_status(self) -> str: ...
    @property
    def run_after_ms(self) -> int: ...

@final
class MySQLShard:
    """The hot path (enqueue, dequeue, ack) of one MySQL shard, on Rust threads over the pure
    Rust ``mysql`` client: up to ``pool_size`` worker threads, each with one connection, started
    as calls need them. Each call returns at once; a worker runs the transaction without the GIL
    and files the answer, and the event loop, watching ``wake_fd()`` (``loop.add_reader``), calls
    ``drain()``, which completes each answered future with ``settle(future, value, error)``.
    ``error`` is None or ``(kind, detail, code, maybe_applied)``: kind ``queue_not_found``
    (detail: the queue), ``connection`` (past ``num_auto_retries``; with ``maybe_applied`` when
    an enqueue's COMMIT was cut off), ``server`` (an unmapped MySQL error ``code``), ``priority``
    (no table can have it) or ``internal``.

    ``sql`` maps ``session_setup``, ``server_info``, ``enqueue_jobs``, ``enqueue_jobs_returning``,
    ``dequeue_jobs``, ``select_claimed_jobs``, ``peek_jobs``, ``ack_succeeded_jobs``,
    ``ack_failed_jobs``, ``lock_claims``, ``create_claim_lock_table`` (``schema/``),
    ``list_jobs_tables``, ``count_in_progress_table``, ``ack_expire_jobs``, ``expiring_readd``,
    ``expired_count_reset``, ``expired_count_tally`` and ``expired_count_add_tallied`` to the text
    of those SQL files (``queries.py``'s ``Sql.text``). ``cancelled_word`` and ``expired_word`` are
    ``backends.base``'s ``CANCELLED`` and ``EXPIRED`` (what a failure ack appends: ``ended_status``).
    """

    def __new__(
        cls,
        shard: str,
        host: str,
        port: int,
        user: str,
        password: str,
        *,
        pool_size: int,
        socket_timeout: float,
        num_auto_retries: int,
        insert_id_strategy: str | None,
        reservation_prefix: str,
        custom_status_limit: int,
        cancelled_word: str,
        expired_word: str,
        sql: dict[str, str],
        settle: Callable[[Any, Any, tuple[str, str, int, bool] | None], None],
    ) -> MySQLShard:
        """Raises ``ValueError`` for an unknown ``insert_id_strategy``, a missing SQL text or a
        timeout that is not positive. Connects nothing yet."""

    def enqueue_jobs(self, queue: str, database: str, jobs: NewJobBatch, now_ms: int, future: Any) -> None:
        """Insert ``jobs`` into ``database`` (``queue``'s); ``future`` gets their ``LocalIds``."""

    def dequeue_jobs(
        self,
        queue: str,
        database: str,
        priority: int,
        limit: int,
        claim: str,
        now_ms: int,
        dry_run: bool,
        max_in_progress: int | None,
        max_bytes: int,
        future: Any,
    ) -> None:
        """Claim (dry: peek at) up to ``limit`` ready jobs of ``priority``; ``future`` gets
        ``ClaimedJobs``. With ``max_in_progress`` (the queue's cap on this shard, every priority)
        a claim takes the queue's claim lock first and leaves at most that many of the queue's
        jobs IN_PROGRESS (``claim_cap.py``); a dry run ignores it. Each job is taken while the
        bodies before it hold fewer than ``max_bytes`` bytes (the first always): a claim past it
        is rolled back and made again for fewer."""

    def ack_jobs(self, queue: str, database: str, acks: AckGroup, now_ms: int, future: Any) -> None:
        """Settle ``acks``; ``future`` gets None."""

    def ack_and_dequeue_jobs(
        self,
        queue: str,
        database: str,
        acks: AckGroup,
        priority: int,
        limit: int,
        claim: str,
        now_ms: int,
        max_in_progress: int | None,
        max_bytes: int,
        future: Any,
    ) -> None:
        """``ack_jobs``, then ``dequeue_jobs`` (not dry), on one worker: the acks' statements and
        their COMMIT go in the round trip of the claim's UPDATE and SELECT, and a failing one
        stops the rest (nothing claimed); ``future`` gets ``ClaimedJobs``."""

    def call_blocking(
        self,
        method: str,
        queue: str,
        database: str,
        now_ms: int,
        *,
        jobs: NewJobBatch | None = None,
        acks: AckGroup | None = None,
        priority: int = 0,
        limit: int = 0,
        claim: str | None = None,
        dry_run: bool = False,
        max_in_progress: int | None = None,
        max_bytes: int = ...,
    ) -> tuple[Any, tuple[str, str, int, bool] | None]:
        """``method`` (``enqueue_jobs``, ``dequeue_jobs`` or ``ack_jobs``) run on the calling thread
        with the GIL released, answering ``(value, error)`` as ``settle`` takes them: the
        alternative to the workers, for ``benches/mysql_native_hot.py``. ``ValueError`` for
        another method or one without its ``jobs``/``acks``."""

    @staticmethod
    def long_bodies(jobs: NewJobBatch, longer_than: int) -> list[tuple[int, int, bytes]]:
        """``(index, priority, body)`` of each job whose body is longer than ``longer_than`` bytes."""

    def wake_fd(self) -> int:
        """The socket the event loop watches: readable when answers wait for ``drain``."""

    def drain(self) -> int:
        """Complete the future of every answered call through ``settle`` (on the loop's thread);
        how many. An exception of ``settle`` is raised after the others are completed."""

    def max_allowed_packet(self) -> int | None:
        """The server's ``max_allowed_packet``, once a connection has read it."""

    def worker_count(self) -> int:
        """Worker threads started so far."""

    def close(self) -> None:
        """Take no more calls; wait for the workers to answer those taken. Idempotent."""

def mysql_insert_statements(
    head: str,
    tail: str,
    jobs: Sequence[_InsertJob],
    now_ms: int,
    *,
    budget: int,
    custom_status_limit: int,
    no_backslash_escapes: bool,
) -> list[tuple[int, bytes]]:
    """The MySQL backend's multi-row enqueue INSERT for ``jobs``, as ``(rows, statement)`` pairs
    whose rows together are the jobs in order.

    Each statement is ``head``, then one ``(0, attempts_allowed, attempts_allowed,
    'custom_status', 'now', 'now', 'run_after', X'body')`` group per job separated by ``", "``,
    then ``tail``: byte for byte what PyMySQL sends for ``enqueue_jobs.sql`` with those
    parameters. ``custom_status`` is cut to ``custom_status_limit`` characters and quoted with
    PyMySQL's escapes (only ``'`` doubled when ``no_backslash_escapes``, the session's
    NO_BACKSLASH_ESCAPES status); times (``now_ms``, ``run_after_ms``) are clamped to
    TIMESTAMP's range and written as naive UTC with microseconds; the body is a hex literal.

    A statement grows to at most ``budget`` bytes; a job that alone passes it gets a statement of
    its own (so ``budget=0`` gives one statement per job). No jobs give no statements.

    Raises:
        TypeError: ``jobs`` is not a sequence, or a job's ``body`` is not bytes, its
            ``custom_status`` not a str, or a number not an int.
        AttributeError: a job lacks one of the four attributes.
        OverflowError: ``attempts_allowed`` does not fit 64 bits, or a size is negative.
        UnicodeEncodeError: ``custom_status`` holds a lone surrogate (not UTF-8 encodable).
    """

def encode_enqueue_reply(method: str, seqid: int, queue: str, shard: str, batch: NewJobBatch, ids: LocalIds) -> bytes:
    """The strict Thrift binary REPLY message of ``method`` (``enqueueJobs``) for ``seqid``, whose
    result's ``success`` is ``PinLaterEnqueueResponse(jobDescriptors=[...])``, byte for byte what
    thriftpy2 writes: one ``{queue}:s{shard}:p{priority}:{id}`` per job of ``batch``, ``ids[i]``
    being the local id the store gave job ``i`` on ``shard``.

    Raises:
        DescriptorError: a bad queue or shard name, a priority or id that cannot form a
            descriptor, or not one id per job.
        ValueError: a length beyond 2**31 - 1.
    """

def encode_keyed_enqueue_reply(method: str, seqid: int, queue: str, shard: str, placement: KeyedPlacement) -> bytes:
    """The ``enqueueJobs`` REPLY message for ``seqid`` of a keyed enqueue on one shard: a
    descriptor per job of ``placement`` in ``queue`` on ``shard`` and, when some job was
    deduplicated, ``deduplicated`` as the response's field 2.

    Raises:
        DescriptorError: a part that cannot form a descriptor.
    """

def encode_split_enqueue_reply(method: str, seqid: int, queue: str, placement: SplitPlacement) -> bytes:
    """``encode_keyed_enqueue_reply`` of a keyed enqueue spread over shards: each job's
    descriptor on its own shard.

    Raises:
        DescriptorError: a part that cannot form a descriptor.
    """

def encode_enqueue_descriptors(
    method: str, seqid: int, descriptors: Sequence[str], deduplicated: Sequence[bool] | None = None
) -> bytes:
    """The ``enqueueJobs`` REPLY message for ``seqid`` of jobs placed one by one (dedup keys):
    ``jobDescriptors`` in job order and, when given, ``deduplicated`` (parallel to them) as the
    response's field 2.

    Raises:
        DescriptorError: not one flag per descriptor.
        ValueError: a length beyond 2**31 - 1.
    """

def encode_dequeue_batches(
    method: str, seqid: int, queue: str, batches: Sequence[tuple[str, int, ClaimedJobs]]
) -> bytes:
    """The REPLY message of ``method`` (``dequeueJobs``) for ``seqid``, exactly as
    ``encode_dequeue_reply`` writes it for the same jobs: ``batches`` are ``(shard, priority,
    ClaimedJobs)``, one per store call; each job's descriptor is built from its batch, jobs in
    order. Descriptors must be distinct (a dequeue's are).

    Raises:
        DescriptorError: a bad queue or shard name, or a priority or id that cannot form a
            descriptor.
        ValueError: attempts that do not fit a Thrift i32, or a length beyond 2**31 - 1.
    """

def encode_void_reply(method: str, seqid: int) -> bytes:
    """The REPLY message of a void ``method`` (``ackDequeuedJobs``) for ``seqid``: an empty result
    struct, as thriftpy2 writes it."""

def encode_dequeue_handout(method: str, seqid: int, hand_out: HandOut) -> bytes:
    """The REPLY message of ``method`` (``dequeueJobs``) for ``seqid`` with the jobs of a broker
    ``HandOut``, in order, each with its descriptor for the hand-out's queue: the bytes
    ``encode_dequeue_reply`` writes for the same jobs.

    Raises:
        DescriptorError: a priority or id that cannot form a descriptor.
        ValueError: attempts that do not fit a Thrift i32, or a length beyond 2**31 - 1.
    """

def encode_dequeue_reply(method: str, seqid: int, jobs: list[Any]) -> bytes:
    """The strict Thrift binary REPLY message of ``method`` (``dequeueJobs``) for ``seqid``, whose
    result's ``success`` is ``PinLaterDequeueResponse(jobs={descriptor: body}, jobMetadata=
    {descriptor: PinLaterDequeueMetadata(attemptsAllowed, attemptsRemaining)})``, byte for byte
    what thriftpy2 writes for those objects, entries in the order of ``jobs``.

    ``jobs`` are ``DequeuedJob`` tuples ``(descriptor, ClaimedJob)``; body and attempts come from
    the ``ClaimedJob`` (items 1, 2 and 3). Descriptors must be distinct (a dequeue's are).
    100 jobs take about 11 µs, against 177 µs through thriftpy2 objects.

    Raises:
        TypeError: a job is not such a tuple, a descriptor not a str, a body not bytes.
        ValueError: attempts that do not fit a Thrift i32, or a length beyond 2**31 - 1.
        NativeError: a bug in the extension.
    """

@final
class EnqueueCall:
    """An ``enqueueJobs`` call decoded by ``decode_hot_call``; its jobs stay in Rust (in the
    frame's bytes, which it keeps) until ``batch`` makes them ``NewJob`` values."""

    @property
    def source(self) -> str | None:
        """``RequestContext.source``."""

    @property
    def request_id(self) -> str:
        """``RequestContext.requestId``; ``""`` when absent (its IDL default)."""

    @property
    def queue(self) -> str | None:
        """``request.queueName``, not yet checked."""

    @property
    def extended(self) -> bool:
        """Whether any job asks for a pinlater extension (a dedup key or window, a group, an
        expiry): ``keyed`` builds a batch only then."""

    def __len__(self) -> int:
        """The number of jobs."""

    def batch(self, num_priorities: int, now_ms: int) -> NewJobBatch:
        """The jobs, defaults resolved as the handler does: attempts 2, priority 1, run after
        ``now_ms``, custom status ``""``.

        Raises:
            JobRejected: the first job (in request order; attempts checked before priority) with
                ``numAttemptsAllowed`` below 1 (``ENQUEUE_REJECTED``) or a priority outside
                ``1..num_priorities`` (``PRIORITY_NOT_SUPPORTED``).
        """

    def keyed(self, num_priorities: int, now_ms: int) -> KeyedJobBatch | None:
        """The jobs as ``batch`` makes them, each with its ``(dedupKey, dedupWindowMillis,
        groupKey, expireAtTimestampMillis)``, or None when no job asks for a pinlater extension
        (no key, no expiry, window 0): then nothing per job is built, and ``batch`` serves. Built
        with the GIL released for a call of ``DETACH_JOBS`` jobs or more.

        Raises:
            JobRejected: ``ENQUEUE_REJECTED`` for the first job that ``batch`` refuses, then
                for the first (``jobs[i]: ...``) with an empty key (either kind) or one over
                1,024 bytes, a window below 0 or over ten years, or a window above 0 without a
                dedup key, or an expiry below 0.
        """

@final
class DequeueCall:
    """A ``dequeueJobs`` call decoded by ``decode_hot_call``."""

    @property
    def source(self) -> str | None: ...
    @property
    def request_id(self) -> str: ...
    @property
    def queue(self) -> str | None: ...
    @property
    def limit(self) -> int: ...
    @property
    def dry_run(self) -> bool:
        """``dryRun``, ``False`` when absent."""

    @property
    def coverage(self) -> float:
        """``coverage`` as sent (``1.0`` when absent; may be NaN or out of range)."""

    @property
    def wait_millis(self) -> int | None:
        """``waitMillis``, ``None`` when absent."""

    @property
    def ack(self) -> AckCall | None:
        """The piggy-backed ``jobAckRequest``, if any."""

@final
class AckCall:
    """A ``PinLaterJobAckRequest`` decoded by ``decode_hot_call``: an ``ackDequeuedJobs`` call, or
    a dequeue's piggy-backed acks. Descriptors are decoded by each method below, so a bad one is
    raised there (after the caller checked the queue name), as ``decode_descriptors`` raises it
    for the successes followed by the failures."""

    @property
    def queue(self) -> str | None: ...
    @property
    def succeeded(self) -> int:
        """How many jobs succeeded."""

    @property
    def failed(self) -> int:
        """How many jobs failed."""

    def groups(self) -> list[tuple[str, AckGroup]]:
        """``(shard, AckGroup)`` per shard, in first-seen order (successes first), items in
        request order: ``AckItem(priority, local_id, appendCustomStatus or "",
        max(0, retryDelayMillis))``. The descriptors' queue is ignored. A local id beyond 2**63 - 1
        (which no store hands out) is left out: acking it would change nothing.

        Raises:
            DescriptorError: a bad descriptor.
        """

    def retried(self) -> list[tuple[str, int, int]]:
        """``(shard, priority, retry_delay_ms)`` per failed job (as in ``groups``), in request order.

        Raises:
            DescriptorError: a bad descriptor.
        """

    def keys(self) -> list[tuple[str, str, int, int]]:
        """``(queue, shard, priority, local_id)`` per job, successes first: what
        ``decode_descriptors`` returns for the descriptors (for the broker's settle).

        Raises:
            DescriptorError: a bad descriptor.
        """

def decode_hot_frame(payload: bytes) -> tuple[str, int, EnqueueCall | DequeueCall | AckCall] | None:
    """``(method, seqid, call)`` for a message that is a well-formed ``CALL`` of ``enqueueJobs``,
    ``dequeueJobs`` or ``ackDequeuedJobs`` (its header, strict or old style, then its arguments as
    ``decode_hot_call`` reads them); ``None`` for any other message, and for one whose header or
    arguments do not decode, which the caller's general path reads again and answers."""

def decode_hot_call(method: str, payload: bytes, offset: int) -> EnqueueCall | DequeueCall | AckCall:
    """Decode the arguments of ``method`` (``enqueueJobs``, ``dequeueJobs`` or
    ``ackDequeuedJobs``) at ``offset`` in ``payload`` (just past the message header), as
    thriftpy2's Cython decoder with ``strict_decode`` does: the struct is walked first
    (``thrift_struct_end``), unknown fields and fields of another wire type are skipped, a list
    of another element type is empty, a later duplicate wins, absent optional fields take their
    IDL defaults. No Python object is made per job.

    Raises:
        MalformedThriftError: not a well-formed struct, or a ``string`` field not UTF-8.
        MissingFieldError: a struct argument or a required field missing.
        ValueError: ``method`` is not one of the three.
    """

def redis_pack_command(args: tuple[str | int | float | bytes, ...]) -> bytes:
    """``args`` as one Redis command in RESP (``*<n>``, then ``$<len>`` and the bytes of each),
    byte for byte as ``hiredis.pack_command(args)`` packs it: a ``str`` as UTF-8, an ``int`` in
    decimal, a ``float`` as its ``repr``, ``bytes`` as they are; exact types only, as hiredis.

    A 100-job enqueue script's 510 arguments take about 10 µs, against 65-110 µs through hiredis.

    Raises:
        TypeError: an argument of another type (a subclass, ``bool``, ``None``, ``bytearray``;
            also a ``memoryview``, which hiredis takes: the caller makes it ``bytes``).
        UnicodeEncodeError: a ``str`` with a lone surrogate.
        NativeError: a bug in the extension.
    """

def thrift_struct_end(payload: bytes, offset: int = 0) -> int:
    """Walk the Thrift binary-protocol struct at ``offset`` without building it; return the offset
    just past its STOP.

    The guard in front of a decoder that trusts lengths: when it returns, every length and count
    met fits in ``payload``, every wire type is a real Thrift type, and structs and containers nest
    at most 32 deep, so decoding the same bytes is O(len(payload)). Strings are bytes to the walk
    (UTF-8 is the decoder's check, where the IDL says ``string``); required fields are not looked
    at; bytes after the STOP are ignored. An empty container is accepted whatever its element
    types. A 1,000-job enqueue (126 KB) takes about 30 µs, with the GIL held; from 1 MiB on the
    GIL is released while walking (a 16 MiB payload takes about 4 ms).

    Raises:
        MalformedThriftError: the struct is truncated, has a negative length or size, an unknown
            wire type, or nests too deeply; ``offset`` at or past the end is ``struct truncated``.
        TypeError: ``payload`` is not ``bytes``.
        OverflowError: ``offset`` is negative.
    """

def thrift_struct_objects(payload: bytes, offset: int = 0) -> tuple[int, int]:
    """``thrift_struct_end``, and how many objects a decoder makes of the struct: ``(end,
    objects)``, counting the struct itself and every struct, string and container in it (not
    fixed-width values). The walk bounds a decode's time by the bytes; this bounds its memory,
    where an element can take one byte on the wire (an empty struct: its STOP) and a hundred or
    more as an object (the server's general calls: ``dispatch.MAX_OBJECTS``).

    Raises:
        MalformedThriftError: as ``thrift_struct_end``.
    """

_Job = TypeVar("_Job")

def redis_claimed_jobs(reply: list[Any], make: Callable[[tuple[int, bytes, int, int, int, int]], _Job]) -> list[_Job]:
    """The jobs of a Redis dequeue or reserve reply, ordered by (run after, id), each built as
    ``make((local_id, body, attempts_allowed, attempts_remaining, created_at_ms, updated_at_ms))``
    (``functools.partial(tuple.__new__, ClaimedJob)`` builds named tuples fastest).

    ``reply[0]`` is the evicted count; then 7 values per job: id, run-after score, body,
    attempts allowed, attempts remaining, created and updated time (bytes as redis-py returns
    them; a count or time may be ``None``, read as 0). Ids are read as ``int(id)`` and times as
    ``round(float(seconds) * 1000)``, halves to even, exactly as Python reads them; equal
    (score, id) keys keep the reply's order.

    Raises:
        ValueError: a value is not the number its place holds, or the rows are not whole.
        TypeError: a value is neither bytes, str, int nor None, or a body is not bytes.
    """

@final
class BodyMatcher:
    """A compiled body filter (``bodyRegexToMatch``), searched anywhere in a body's bytes in time
    linear in the body's length, whatever the pattern (the Rust ``regex`` crate).

    On valid UTF-8, ``.`` and the classes match code points, as on the decoded text; an invalid
    UTF-8 byte is matched by no Unicode class (``(?-u:.)`` matches any byte). The dialect is the
    ``regex`` crate's: ``$`` matches only at the very end, and there are no backreferences or
    look-around. Safe to share between threads.
    """

    def __new__(cls, pattern: str) -> BodyMatcher:
        """Compile ``pattern`` (with the GIL released; about 15 ms at worst).

        Raises:
            BodyPatternError: the pattern is refused (see there).
        """

    @property
    def pattern(self) -> str:
        """The pattern as given."""

    def is_match(self, body: bytes) -> bool:
        """Whether the pattern occurs in ``body`` (the GIL released from 64 KiB on). Unbudgeted:
        a large pattern over a large body can take a minute; the server uses ``match_indices``."""

    def match_indices(self, bodies: Sequence[bytes | None], budget_seconds: float) -> list[int]:
        """Positions in ``bodies`` of the bodies the pattern occurs in (``None`` never matches),
        matched with the GIL released.

        The clock is read before each body, and every 256 bytes within a body whose worst case is
        large (its automaton's states times its length): once ``budget_seconds`` have passed (at
        once when it is 0 or negative and a body remains), the batch stops with
        ``BodyFilterTimeout``, milliseconds late at most.

        Raises:
            BodyFilterTimeout: the budget ran out.
            TypeError: ``bodies`` is a single ``bytes`` or ``str``, or an item is neither
                ``bytes`` nor ``None``.
            ValueError: ``budget_seconds`` is NaN.
        """

def _panic_for_tests(message: str) -> NoReturn:
    """Test-only: panic in Rust with ``message``, which Python must see as ``NativeError``."""

# The Redis store's hot scripts over the store's own connection (backends/redis/hot_client.py):
# commands packed from the batches held in Rust, replies read into them.

def redis_enqueue_command(
    sha: str, shard: str, queue: str, jobs: NewJobBatch, now_ms: int, layout: str = "original"
) -> bytes:
    """``EVALSHA sha`` of ``enqueue_jobs.lua`` for ``jobs``, in RESP: the keys and arguments
    ``RedisStore._enqueue_call`` sends (key names as ``keys.py``, or ``keys_compact.py`` for
    ``layout="compact"``, spells them, times as ``keys.seconds_arg``, statuses cut to
    ``CUSTOM_STATUS_LIMIT`` characters). Every ``redis_*_command`` takes ``layout`` alike.

    Raises:
        ValueError: ``layout`` is neither ``"original"`` nor ``"compact"``.
    """

def redis_enqueue_keyed_command(
    sha: str,
    keys: Sequence[str],
    queue: str,
    jobs_arg: str,
    now_ms: int,
    priorities: int,
    per: int,
    held_forever_ms: int,
    batch: KeyedJobBatch,
    tail: RedisScriptTail | None = None,
    uniform: bool = False,
) -> bytes:
    """``EVALSHA sha`` of ``enqueue_keyed_jobs.lua`` for a whole request, in RESP: ``keys``
    (``dedup.enqueue_keyed_keys`` over ``priorities`` priorities, ``per`` keys each) then the
    tail's, and the arguments ``dedup.enqueue_keyed_call`` sends, packed from the batch: a dedup
    key repeated in the request is sent once, its first job's (``redis_keyed_placement``
    answers the others); windows are kept between 0 and ``held_forever_ms - now_ms``. With
    ``uniform`` (``dedup.takes_uniform_calls``), jobs alike but for body, key and group go as a
    uniform call, three arguments a job."""

def redis_keyed_placement(batch: KeyedJobBatch, values: LocalIds, beyond: int) -> tuple[KeyedPlacement | None, int]:
    """Where ``enqueue_keyed_jobs.lua`` put each job of ``batch``, from the values
    ``redis_ids_reply`` read of its reply to ``redis_enqueue_keyed_command``: ``(placement, 0)``,
    or ``(None, priority)`` when the first value is ``beyond`` (``dedup.PRIORITY_BEYOND_KEYS``:
    call again passing that many priorities).

    Raises:
        ValueError: not three values per job sent.
    """

@final
class RedisScriptTail:
    """What a queue's rules add at the end of a hot Redis script's ``KEYS`` and ``ARGV`` (the
    "tail" of ``lua_compact/lib/groups.lua`` and ``lua/lib/rules.lua``), held in Rust: built once
    per rules change (``backends/redis/rules.py``) and passed to the command packers as is."""

    def __new__(cls, keys: list[str], args: list[str]) -> RedisScriptTail: ...
    @property
    def keys(self) -> list[str]:
        """The keys appended, in order."""
    @property
    def args(self) -> list[str]:
        """The arguments appended, in order."""

def redis_dequeue_command(
    sha: str,
    shard: str,
    queue: str,
    priority: int,
    limit: int,
    claim: str,
    now_ms: int,
    dry_run: bool,
    max_bytes: int,
    layout: str = "original",
    tail: RedisScriptTail | None = None,
) -> bytes:
    """``EVALSHA sha`` of ``dequeue_jobs.lua``, as ``RedisStore._dequeue_call`` sends it for a
    limit above 0, with ``tail`` (the queue's rules) at the end of its keys and arguments."""

def redis_ack_command(
    sha: str,
    shard: str,
    queue: str,
    acks: AckGroup,
    now_ms: int,
    layout: str = "original",
    tail: RedisScriptTail | None = None,
) -> bytes:
    """``EVALSHA sha`` of ``ack_jobs.lua`` for the group (successes first), as
    ``RedisStore._ack_call`` sends it, with ``tail`` at the end of its keys and arguments."""

def redis_claim_command(
    sha: str,
    shard: str,
    queue: str,
    items: ClaimItems,
    reservation: str,
    now_ms: int,
    layout: str = "original",
    tail: RedisScriptTail | None = None,
) -> bytes:
    """``EVALSHA sha`` of ``claim_reserved.lua`` for the broker's claims of one queue on one
    shard, as ``reservations.claim_call`` sends it; its reply (the numbers of the jobs claimed,
    or -1 for a missing queue) reads with ``redis_ids_reply``."""

def redis_require_queue_command(sha: str, shard: str, queue: str, layout: str = "original") -> bytes:
    """``EVALSHA sha`` of ``count_jobs.lua`` counting nothing (``ShardScripts.require_queue_call``):
    answers -1 when the queue does not exist."""

def redis_reply_end(buf: bytes, start: int, max_bytes: int) -> int:
    """Where the first whole RESP2 reply of ``buf[start:]`` ends (an offset into ``buf``); when it
    is not whole yet, minus the length ``buf`` must reach before it can be (a lower bound: scan
    again once that much has arrived).

    Raises:
        ValueError: not RESP2, nested deeper than 8, a line over 64 KiB, or a reply whose headers
            already announce more than ``max_bytes`` (the connection is out of step: close it).
        NativeError: a bug in the extension.
    """

def redis_ids_reply(reply: bytes) -> LocalIds | None:
    """The local ids of an ``enqueue_jobs.lua`` reply; ``None`` when the queue does not exist (-1).

    Raises:
        RedisErrorReply: the reply is an error.
        ValueError: the reply is not this script's (a malformed Redis reply).
    """

def redis_claimed_reply(reply: bytes) -> tuple[ClaimedJobs, int] | None:
    """The jobs of a ``dequeue_jobs.lua`` reply in (run after, id) order, and its evicted count,
    read as ``redis_claimed_jobs`` reads them; ``None`` when the queue does not exist (-1).

    Raises:
        RedisErrorReply: the reply is an error.
        ValueError: the reply is not this script's (a malformed Redis reply).
    """

def redis_claimed_split(buf: bytes, start: int, max_bytes: int) -> int | tuple[int, tuple[ClaimedJobs, int] | None]:
    """``redis_reply_end`` for a ``dequeue_jobs.lua`` (or ``reserve_jobs.lua``) reply, read on the
    way in one walk of its bytes: ``(end, redis_claimed_reply's value)`` when the first reply of
    ``buf[start:]`` is whole and such a reply (its jobs, or the queue missing). Anything else is
    ``redis_reply_end``'s answer: the end of a whole reply that is an error or not the script's
    (``redis_claimed_reply`` of it raises as it would), or minus the length ``buf`` must reach.
    Splits the stream where ``redis_reply_end`` splits it, whatever the bytes.

    Raises:
        ValueError: as ``redis_reply_end``.
        NativeError: a bug in the extension.
    """

def redis_ack_reply(reply: bytes) -> int | None:
    """The evicted count of an ``ack_jobs.lua`` reply ``{changed, evicted}``; ``None`` when the
    queue does not exist (-1).

    Raises:
        RedisErrorReply: the reply is an error.
        ValueError: the reply is not this script's.
    """

def redis_int_reply(reply: bytes) -> int | None:
    """An integer reply (``count_jobs.lua``); ``None`` for -1 (the queue does not exist).

    Raises:
        RedisErrorReply: the reply is an error.
        ValueError: not an integer reply.
    """
