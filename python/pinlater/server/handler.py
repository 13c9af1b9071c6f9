"""The PinLater service: validate each request, call the backend, map errors to Thrift.

This is the only place where errors become ``PinLaterException``: a ``PinLaterError`` keeps its
code, and so does a job the extension's enqueue decoder refuses (``JobRejected``); a malformed
descriptor is UNKNOWN with the reason (as the original answered it); anything else is UNKNOWN
with the traceback logged once. Method names are the Thrift names in snake_case; ``dispatch.py``
maps them.

The three hot methods (``enqueue_jobs``, ``dequeue_jobs``, ``ack_dequeued_jobs``) take the call
as the extension decoded it (``EnqueueCall``, ``DequeueCall``, ``AckCall``) and the message's
seqid, and answer the reply message's bytes, written by the extension from the jobs as the
stores (or the broker's buffer) gave them: no Python object is made per job on their way.
The others take and answer thriftpy2 objects.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import hmac
import logging
import math
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from time import perf_counter
from typing import Any, Final, TypeVar

from pinlater import schedules
from pinlater._pinlater import (
    DETACH_JOBS,
    MAX_ENQUEUE_JOBS,
    MAX_TIMESTAMP_MS,
    AckCall,
    AckGroup,
    ClaimedJobs,
    DequeueCall,
    DescriptorError,
    EnqueueCall,
    HandOut,
    JobRejected,
    KeyedJobBatch,
    LocalIds,
    NewJobBatch,
    SplitPlacement,
    encode_dequeue_batches,
    encode_dequeue_handout,
    encode_descriptors,
    encode_enqueue_descriptors,
    encode_enqueue_reply,
    encode_keyed_enqueue_reply,
    encode_split_enqueue_reply,
    encode_void_reply,
)
from pinlater.backends import body_filter, scan_pages
from pinlater.backends.base import CheckpointItem, JobRecord, JobState, NewJob
from pinlater.backends.scan_pages import ScanQuery
from pinlater.backends.sharded import ReadyBatch, ShardedBackend, decoded, require_queue_of
from pinlater.broker import DequeueBroker
from pinlater.errors import ErrorCode, PinLaterError, QueueNotFoundError, shown
from pinlater.eventloop import off_loop
from pinlater.idl import idl
from pinlater.logthrottle import ThrottledLog
from pinlater.ratelimit import QueueRateLimits
from pinlater.server.guesses import Guesses, caller_host
from pinlater.server.lease import current_lease
from pinlater.server.metrics import Metrics, original_error_counter, outcome_counter

log = logging.getLogger(__name__)

#: The original's salt for ADMIN_PASSWORD_HASH = sha256(password + salt), kept so that
#: existing hashes keep working.
PASSWORD_SALT = "VHzMjY2Kb9BYlyrbtpyFvnHVPZAvB5Rm"

QUEUE_NAME = re.compile(r"\w+", re.ASCII)
#: Longest queue name on every backend, so a queue can move between backends; MySQL's
#: 64-character database names make its own limit tighter (its store checks that).
MAX_QUEUE_NAME_LENGTH = 128
#: ``MAX_QUEUES``'s default (``config.Settings.max_queues``).
DEFAULT_MAX_QUEUES = 10_000
#: Longest long-poll a dequeue may ask for (waitMillis), so a request never outlives a client
#: timeout by much and shutdown stays prompt.
MAX_WAIT_MILLIS = 30_000
#: Valid queue names remembered by the handler (forgotten all at once beyond this).
MAX_VALID_NAMES_KEPT = 4096
#: Most jobs one scanJobs reply carries (MAX_SCAN_LIMIT); a larger limit gets this many, so a
#: limit of 2**31-1 cannot build a reply of every job in the queue.
DEFAULT_MAX_SCAN_LIMIT = 10_000
#: Most bytes one lookupJobs reply carries (the server's MAX_FRAME_BYTES), as ``_info_bytes``
#: counts them.
DEFAULT_MAX_REPLY_BYTES = 16 * 1024 * 1024
#: What a ``PinLaterJobInfo`` takes on the wire besides its strings and body: its field headers,
#: lengths, state, attempts and times (about 60 bytes), rounded up.
JOB_INFO_BYTES = 64
#: A descriptor's bytes besides its queue and shard names, at most: ":s", ":p", a priority of
#: three digits, ":" and a local id of twenty.
DESCRIPTOR_EXTRA_BYTES = 28


def _info_bytes(descriptor: str | int, record: JobRecord) -> int:
    """About what a job takes in a ``lookupJobs`` reply: its descriptor twice (the map's key and
    the info's; or ``descriptor`` bytes, given as a number), its status, claim, keys and body in
    UTF-8, and ``JOB_INFO_BYTES``."""
    texts = (record.custom_status, record.claim_descriptor, record.dedup_key, record.group_key)
    length = descriptor if isinstance(descriptor, int) else len(descriptor.encode())
    size = 2 * length + sum(len(text.encode()) for text in texts if text)
    return size + len(record.body or b"") + JOB_INFO_BYTES


I32_MAX = 2**31 - 1
#: The most bytes a call of a method that takes no list nor body may take (``ARGUMENT_BYTES``).
SMALL_CALL_BYTES = 1024 * 1024
#: Most descriptors one cancelJobs takes (each store call gets at most CANCEL_CHUNK of them).
MAX_CANCEL = 100_000
#: Most requests one checkpointJobs takes: a 16 MiB frame holds about 800,000 of a short
#: descriptor, each a Python value and a hint of the queue's walk.
MAX_CHECKPOINT = 100_000
#: Most descriptors one lookupJobs takes: a lookup of 400,000 took the server 5 to 7 s of reads
#: before the size of its reply refused it. The reply of this many holds about 10 MB without
#: bodies, under the 16 MiB a reply may hold.
MAX_LOOKUP = 100_000
#: Most jobs one enqueueJobs takes, and most acks one ackDequeuedJobs (or a dequeue's acks): a
#: 16 MiB frame holds two million empty jobs, which held 724 MB and the event loop up to a
#: second while their batch and reply were made, and whose reply (40 MB) no client with a 16 MiB
#: frame limit could read, after the jobs were stored (a retry duplicated them).
MAX_ENQUEUE = MAX_ENQUEUE_JOBS  # (one past it is refused unread: the Rust decoder's)
MAX_ACKS = 100_000
#: A descriptor's bytes in an enqueue's reply besides its queue name and shard name: its length
#: prefix, ``:s``, ``:p``, a priority and an id of up to 20 digits, and slack.
DESCRIPTOR_REPLY_BYTES = 40

#: Most items of one request turned into Python values between two turns of the event loop
#: (lookups answered, checkpoints read): a request of 100,000 held the server's other clients
#: for 150 ms and more.
ITEMS_PER_TURN = 1000
#: Rechecks a second that the long polls waiting on one server make in all, at most: each waits
#: ``empty_recheck_ms`` (0.2 s) between its own while at most 400 wait, longer beyond (9,000
#: waiting polls, one peer's connections, woke 45,000 times a second, each walking the shards'
#: hints on the event loop). Jobs made ready elsewhere are found by the polls' rechecks, up to
#: that many dequeues a second.
RECHECKS_PER_SECOND = 2000

F = TypeVar("F", bound=Callable[..., Awaitable[Any]])
T = TypeVar("T")


def hash_password(password: str) -> str:
    """The value ADMIN_PASSWORD_HASH holds for ``password``."""
    return hashlib.sha256((password + PASSWORD_SALT).encode("utf-8")).hexdigest()


def password_matches(password: object, expected: str) -> bool:
    """Whether ``password`` is the admin password: text that hashes to ``expected``, compared in
    constant time (not one holding a lone surrogate, which JSON can spell)."""
    if not isinstance(password, str):
        return False
    try:
        return hmac.compare_digest(hash_password(password).encode(), expected.encode())
    except UnicodeEncodeError:  # (or an expected hash that is not text: matched by nothing)
        return False


def _thrift_errors(fn: F) -> F:
    """Time the call and turn every failure into the contract's PinLaterException."""
    method = fn.__name__
    counted = {ok: outcome_counter(method, ok) for ok in (True, False)}  # (``Metrics.timing``'s)
    errors = {code: original_error_counter(method, code) for code in ErrorCode}  # (the original's names)
    # An unexpected error's traceback, once per 5 s per method with a count of the others: a
    # request that meets one can be sent again at will, a traceback each.
    unexpected = ThrottledLog(log, level=logging.ERROR)

    @functools.wraps(fn)
    async def wrapper(self: PinLaterHandler, *args: Any, **kwargs: Any) -> Any:
        start = perf_counter()
        ok = cancelled = False
        code = ErrorCode.UNKNOWN
        try:
            result = await fn(self, *args, **kwargs)
            ok = True
            return result
        except asyncio.CancelledError:  # its peer went (a long poll, ended with its connection)
            cancelled = True
            raise
        except PinLaterError as exc:
            code = exc.code
            raise _exception(exc.code, exc.message) from None
        except JobRejected as exc:
            code = ErrorCode(exc.code)
            raise _exception(code, str(exc)) from None
        except DescriptorError as exc:
            raise _exception(ErrorCode.UNKNOWN, f"invalid job descriptor: {exc}") from None
        except body_filter.BodyPatternError as exc:  # a store's filter refused it: a bad request all the same
            raise _exception(ErrorCode.UNKNOWN, f"invalid request: bodyRegexToMatch: {exc}") from None
        except Exception as exc:
            unexpected("unexpected error in %s from %s", method, _who(_context(args, kwargs)), exc_info=True)
            raise _exception(ErrorCode.UNKNOWN, f"internal error in {method}: {type(exc).__name__}: {exc}") from None
        finally:
            millis = (perf_counter() - start) * 1000.0
            metrics = self.metrics  # (``Metrics.timing``, one call fewer on every request)
            metrics.timings[method].add(millis)
            if not cancelled:  # neither answered nor failed
                metrics.counters[counted[ok]] += 1
                if not ok:
                    metrics.counters[errors[code]] += 1
            if log.isEnabledFor(logging.DEBUG):
                who = _who(_context(args, kwargs))
                log.debug("%s from %s: %s in %.1f ms", method, who, "ok" if ok else "error", millis)

    return wrapper  # type: ignore[return-value]


def _context(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """A handler method's first argument: its ``RequestContext``, or a hot method's call."""
    return kwargs.get("context", args[0] if args else None)


def _check_ack_count(call: AckCall) -> None:
    """Refuse an ack of more than ``MAX_ACKS`` jobs, alone or carried by a dequeue, whole."""
    if call.succeeded + call.failed > MAX_ACKS:
        raise PinLaterError(
            ErrorCode.UNKNOWN,
            f"invalid request: an ack takes at most {MAX_ACKS} jobs, not {call.succeeded + call.failed}: "
            "ack fewer at a time (nothing was acked)",
        )


def _exception(code: ErrorCode, message: str) -> Exception:
    exc: Exception = idl.PinLaterException(errorCode=int(code), message=message)
    return exc


#: Characters of a caller's source and request id a log line shows (``_who``).
MAX_LOGGED_ID = 120


def _who(context: Any) -> str:
    """The caller, from a ``RequestContext`` or a hot method's decoded call, each of its texts cut
    to ``MAX_LOGGED_ID`` characters: they are the peer's, up to a frame long, and a 16 MiB source
    made a log line of 16 to 64 MB (repr writes a control character as four) at every create,
    delete or retry."""
    if context is None:
        return "unknown caller"
    request_id = context.requestId if hasattr(context, "requestId") else getattr(context, "request_id", "")
    return f"source={_shown(context.source)} requestId={_shown(request_id)}"


def _shown(text: str | None) -> str:
    if text is None or len(text) <= MAX_LOGGED_ID:
        return repr(text)
    return f"{text[:MAX_LOGGED_ID]!r}... ({len(text)} characters)"


def _cut_time(ms: int) -> int:
    """A run-after from a checkpoint or a retry, cut to ``MAX_TIMESTAMP_MS`` as an enqueue's is: a
    later one read back past ``i64`` from a Redis score, and every lookup or scan of the job failed."""
    return min(ms, MAX_TIMESTAMP_MS)


def _source(context: Any) -> str:
    return str(context.source) if context is not None and context.source else ""


#: A dequeue's jobs: the walk's batches (a direct dequeue), or the broker's hand-out.
Dequeued = list[ReadyBatch[ClaimedJobs]] | HandOut

#: The Thrift names of the hot methods, for their replies.
ENQUEUE, DEQUEUE, ACK = "enqueueJobs", "dequeueJobs", "ackDequeuedJobs"
#: The reply to an enqueue of no jobs: no descriptor is written, so any valid shard name does.
_NO_JOBS, _NO_IDS, _NO_SHARD = NewJobBatch([]), LocalIds([]), "0"


def _taken(dequeued: Dequeued) -> int:
    """The jobs a dequeue got."""
    return len(dequeued) if isinstance(dequeued, HandOut) else sum(len(b.jobs) for b in dequeued)


def _dequeue_reply(seqid: int, queue: str, dequeued: Dequeued) -> tuple[int, bytes]:
    """How many jobs, and the reply message: ``PinLaterDequeueResponse(jobs={descriptor: body},
    jobMetadata={descriptor: PinLaterDequeueMetadata(attemptsAllowed, attemptsRemaining)})``,
    written by the extension straight from the jobs, in their order."""
    if isinstance(dequeued, HandOut):  # the broker's
        return len(dequeued), encode_dequeue_handout(DEQUEUE, seqid, dequeued)
    batches = []
    count = 0
    for b in dequeued:  # (a loop, not a comprehension and a generator: on every dequeue)
        batches.append((b.shard, b.priority, b.jobs))
        count += len(b.jobs)
    return count, encode_dequeue_batches(DEQUEUE, seqid, queue, batches)


class PinLaterHandler:
    """Implements every method of the ``PinLater`` service over a ``ShardedBackend``."""

    #: The most objects a call of these decodes into (``dispatch._Method.most_objects``): twice
    #: what the method takes (a descriptor is one, a checkpoint request up to four), so one just
    #: past it is decoded and gets the method's own error, and one of millions of short strings
    #: (2.4 million fit a 16 MiB frame) is refused unread, where it was decoded, holding the GIL,
    #: to be refused then.
    #: The most bytes a call of these may take (``dispatch._Method.most_bytes``): each takes a
    #: queue name, a regex of 4 KiB at most, a caller's source and id; a frame of up to 16 MiB of
    #: padding in fields the decoder skips held the GIL 170 ms a call. The others take lists of
    #: descriptors or job bodies: the frame limit.
    ARGUMENT_BYTES: Final = dict.fromkeys(
        (
            "createQueue",
            "deleteQueue",
            "getQueueNames",
            "getJobCount",
            "scanJobs",
            "retryFailedJobs",
            "deleteJobs",
            "listSchedules",
            "deleteSchedule",
        ),
        SMALL_CALL_BYTES,
    )
    ARGUMENT_OBJECTS: Final = {
        "lookupJobs": 2 * MAX_LOOKUP + 16,
        "cancelJobs": 2 * MAX_CANCEL + 16,
        "checkpointJobs": 2 * 4 * MAX_CHECKPOINT + 16,
    }

    def __init__(
        self,
        backend: ShardedBackend,
        metrics: Metrics,
        admin_password_hash: str = "",
        rate_limits: QueueRateLimits | None = None,
        broker: DequeueBroker | None = None,
        max_scan_limit: int = DEFAULT_MAX_SCAN_LIMIT,
        max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES,
        max_queues: int = DEFAULT_MAX_QUEUES,
    ) -> None:
        self.backend = backend
        #: deleteQueue's wrong admin passwords by address, a tally of its own (``guesses.py``).
        self.password_guesses = Guesses()
        #: createQueue of a new queue is refused while the shards hold this many (``MAX_QUEUES``).
        self.max_queues = max_queues
        #: deleteQueue's wrong-password line, one per 5 s at most with a count of the others: a
        #: peer guessing wrote a line a guess.
        self._wrong_password = ThrottledLog(log)
        self.max_scan_limit = max_scan_limit
        #: A lookup's reply may hold at most this many bytes (``_info_bytes``; ``MAX_FRAME_BYTES``),
        #: and a dequeue takes jobs while their bodies hold fewer (``DEQUEUE_BYTES``).
        self.max_reply_bytes = max_reply_bytes
        #: The shard map whose longest name ``_reply_budget`` last measured, and that length.
        self._named_shards: object = None
        self._longest_shard_name = 0
        self.broker = broker
        self.metrics = metrics
        self.admin_password_hash = admin_password_hash.lower()
        self.rate_limits = rate_limits
        #: Queue names found valid (checked once, not per request; at most MAX_VALID_NAMES_KEPT).
        #: (A dict of each name to itself: ``_valid_names.get(name) or self._queue(name)`` is a
        #: ``str`` with no Python call for a name seen before, on every request.)
        self._valid_names: dict[str | None, str] = {}

    # -- validation ---------------------------------------------------------------------------

    def _queue(self, name: str | None) -> str:
        known = self._valid_names.get(name)
        if known is not None:
            return known
        if not name or not QUEUE_NAME.fullmatch(name):
            raise PinLaterError(
                ErrorCode.QUEUE_NAME_INVALID,
                f"queue name {shown(name or '')} must be letters, digits and underscores",
            )
        if len(name) > MAX_QUEUE_NAME_LENGTH:
            raise PinLaterError(
                ErrorCode.QUEUE_NAME_TOO_LONG, f"queue name is {len(name)} characters; at most {MAX_QUEUE_NAME_LENGTH}"
            )
        if len(self._valid_names) >= MAX_VALID_NAMES_KEPT:
            self._valid_names.clear()
        self._valid_names[name] = name
        return name

    def _priority(self, priority: int | None, default: int = 1) -> int:
        value = default if priority is None else priority
        if not 1 <= value <= self.backend.num_priorities:
            raise PinLaterError(
                ErrorCode.PRIORITY_NOT_SUPPORTED,
                f"priority {value} is not in 1..{self.backend.num_priorities}",
            )
        return value

    def _optional_priority(self, priority: int | None) -> int | None:
        return None if priority is None else self._priority(priority)

    @staticmethod
    def _state(state: int | None) -> JobState:
        try:
            return JobState(-1 if state is None else state)
        except ValueError:
            raise PinLaterError(ErrorCode.UNKNOWN, f"invalid request: job state {state!r} is not 0..3") from None

    @staticmethod
    async def _filtered(regex: str | None, call: Awaitable[T]) -> T:
        """``call``, a count, scan or delete of the backend; with a body filter, made with the
        request's slot given back (``lease.py``), taken again, in line, for what follows. Its
        store calls take turns (``ShardedBackend.call_filtered``: at most ``FILTERED_CALLS`` at
        once), which bound the work of all such requests; holding a slot too, thousands of them
        waiting for a turn held every slot, and every other call waited behind them."""
        lease = current_lease.get()
        if regex is None or lease is None:
            return await call
        lease.rest(idle=False)  # (a call that fails leaves it given back: the request ends)
        result = await call
        await lease.take()
        return result

    @staticmethod
    async def _regex(pattern: str | None) -> str | None:
        """A body filter the linear-time engine takes (``backends.body_filter``), checked here for
        every backend, so MySQL accepts the same patterns; a refused one is a bad request. Compiled
        off the event loop (``body_filter.checked``)."""
        if not pattern:
            return None
        try:
            await body_filter.checked(pattern)
        except body_filter.BodyPatternError as exc:
            raise PinLaterError(ErrorCode.UNKNOWN, f"invalid request: bodyRegexToMatch: {exc}") from None
        return pattern

    # -- queues -------------------------------------------------------------------------------

    @_thrift_errors
    async def create_queue(self, context: Any, name: str) -> None:
        """Create the queue on the shards that lack it (the original created it on every shard,
        again for a queue that exists, which puts it on shards that lack it): one listing of each
        shard's queues, and nothing written where it exists (on MySQL a create is a CREATE
        DATABASE and a CREATE TABLE per priority, which a peer's repeated createQueue ran each
        time). A new queue past ``MAX_QUEUES`` is refused: the count is read from the shards at
        each call, so servers creating at once may pass it by a few."""
        queue = self._queue(name)
        listed = await self.backend.queue_names_by_shard()
        known: set[str] = set().union(*(names for names in listed.values() if names is not None))
        if queue not in known and len(known) >= self.max_queues:
            raise PinLaterError(
                ErrorCode.UNKNOWN,
                f"queue {queue} not created: the shards hold {len(known)} queues, at most {self.max_queues} "
                "(MAX_QUEUES); delete queues no longer used, or raise MAX_QUEUES",
            )
        lacking = [shard for shard, names in listed.items() if names is None or queue not in names]
        if lacking:
            await self.backend.create_queue(queue, lacking)
        if queue not in known:  # (creating one that exists is a no-op a client may repeat: no line)
            log.info("queue %s created by %s", queue, _who(context))

    @_thrift_errors
    async def delete_queue(self, context: Any, name: str, password: str | None) -> None:
        queue = self._queue(name)
        if not self.admin_password_hash:
            raise PinLaterError(ErrorCode.PASSWORD_INVALID, "deleteQueue is disabled: no ADMIN_PASSWORD_HASH is set")
        host, now = caller_host.get(), time.monotonic()
        if wait := self.password_guesses.wait(host, now):  # (its password not even looked at)
            self._wrong_password("deleteQueue %s refused: too many wrong passwords from %s", queue, host or "here")
            raise PinLaterError(
                ErrorCode.PASSWORD_INVALID,
                f"too many wrong admin passwords from this address: try again in {math.ceil(wait)} s",
            )
        if not password_matches(password or "", self.admin_password_hash):
            self.password_guesses.wrong(host, now)
            self._wrong_password("deleteQueue %s refused: wrong password from %s (%s)", queue, _who(context), host)
            raise PinLaterError(ErrorCode.PASSWORD_INVALID, "invalid admin password")
        if self.broker is not None:
            await self.broker.around_delete(queue, lambda: _one(self.backend.delete_queue(queue)))
        else:
            await self.backend.delete_queue(queue)
        log.warning("queue %s deleted by %s", queue, _who(context))

    @_thrift_errors
    async def get_queue_names(self, context: Any) -> set[str]:
        return await self.backend.get_queue_names()

    # -- the job lifecycle ----------------------------------------------------------------------

    @_thrift_errors
    async def enqueue_jobs(self, call: EnqueueCall, seqid: int) -> bytes:
        queue = self._valid_names.get(call.queue) or self._queue(call.queue)
        if not len(call):  # no job, but an unknown queue is still QUEUE_NOT_FOUND (as a dequeue of none)
            if queue not in await self.backend.get_queue_names():
                raise QueueNotFoundError(queue)
            return encode_enqueue_reply(ENQUEUE, seqid, queue, _NO_SHARD, _NO_JOBS, _NO_IDS)
        if len(call) > MAX_ENQUEUE or len(call) * self._descriptor_bytes(queue) > self.max_reply_bytes:
            most = min(MAX_ENQUEUE, self.max_reply_bytes // self._descriptor_bytes(queue))
            raise PinLaterError(
                ErrorCode.UNKNOWN,
                f"invalid request: enqueueJobs takes at most {most} jobs to {queue}, not {len(call)}: "
                "enqueue fewer at a time (nothing was enqueued)",
            )
        # every default resolved, each job checked (JobRejected) as the original did, in Rust
        now = self.backend.clock.now_ms()
        # None unless a job has an extension; a big call is built on a worker, the GIL released
        if len(call) < DETACH_JOBS or not call.extended:
            keyed = call.keyed(self.backend.num_priorities, now)
        else:
            keyed = await off_loop(call.keyed, self.backend.num_priorities, now)
        if keyed is not None:
            return await self._enqueue_keyed(queue, keyed, now, seqid)
        batch = call.batch(self.backend.num_priorities, now)
        if self.broker is not None:  # which may reserve jobs for its buffer right behind
            shard, ids = await self.broker.enqueue(queue, batch, now)
        else:
            shard, ids = await self.backend.enqueue_jobs(queue, batch, now)  # run after == now: ready lists
        self.metrics.counters[f"{queue}_enqueue"] += len(batch)  # (``incr``, inline: the batch is not empty)
        return encode_enqueue_reply(ENQUEUE, seqid, queue, shard, batch, ids)

    async def _enqueue_keyed(self, queue: str, keyed: KeyedJobBatch, now: int, seqid: int) -> bytes:
        """An enqueue whose jobs carry dedup or group keys or an expiry: in one store call where
        one shard takes new jobs, else in one per key shard (``enqueue_keyed_batch``), with no
        Python value per job; placed job by job (``enqueue_keyed_jobs``) only where no shard
        takes new jobs, which that refuses. The response's ``deduplicated`` is sent when some
        job was."""
        whole = await self.backend.enqueue_keyed_batch(queue, keyed, now)
        if isinstance(whole, SplitPlacement):
            repeated = whole.deduplicated
            self.metrics.incr(f"{queue}_enqueue", len(whole) - repeated)
            self.metrics.incr(f"{queue}_enqueue_deduplicated", repeated)
            return encode_split_enqueue_reply(ENQUEUE, seqid, queue, whole)
        if whole is not None:
            shard, placement = whole
            repeated = placement.deduplicated
            self.metrics.incr(f"{queue}_enqueue", len(placement) - repeated)
            self.metrics.incr(f"{queue}_enqueue_deduplicated", repeated)
            return encode_keyed_enqueue_reply(ENQUEUE, seqid, queue, shard, placement)
        jobs = [NewJob(*job) for job in keyed.batch().to_list()]
        placed = await self.backend.enqueue_keyed_jobs(queue, jobs, keyed.keys(), now)
        flags = [deduplicated for _, deduplicated in placed]
        repeated = sum(flags)
        self.metrics.incr(f"{queue}_enqueue", len(jobs) - repeated)
        self.metrics.incr(f"{queue}_enqueue_deduplicated", repeated)
        descriptors = [descriptor for descriptor, _ in placed]
        return encode_enqueue_descriptors(ENQUEUE, seqid, descriptors, flags if repeated else None)

    @_thrift_errors
    async def dequeue_jobs(self, call: DequeueCall, seqid: int) -> bytes:
        queue = self._valid_names.get(call.queue) or self._queue(call.queue)
        acks = call.ack
        limit = call.limit
        dry_run = bool(call.dry_run)
        # Successes of this queue with a direct dequeue go with the walk's first store call
        # (``ShardedBackend.dequeue_jobs``); any other acks are applied first, on their own.
        carried = None
        if acks is not None:
            _check_ack_count(acks)  # (before the acks carried with the walk are decoded)
            if acks.succeeded and not acks.failed and acks.queue == queue and limit > 0 and not dry_run:
                if self.broker is None:
                    carried = acks.groups()  # decoded first: a malformed descriptor fails the call
            if carried is None:
                await self._ack(acks)
        if limit <= 0:  # no job asked for, but an unknown queue is still QUEUE_NOT_FOUND, as in the original
            # (acks carried asked the store already; a worker acking through dequeues of no job
            # would list every shard's queues at each one)
            if acks is None and queue not in await self.backend.get_queue_names():
                raise QueueNotFoundError(queue)
            return encode_dequeue_batches(DEQUEUE, seqid, queue, [])
        limit, max_bytes = self._reply_budget(queue, limit)
        if self.rate_limits is not None and not dry_run:
            try:
                self.rate_limits.check_dequeue(queue, limit)
            except PinLaterError:
                self.metrics.incr(f"{queue}_dequeue_requests_rate_limited")
                if acks is not None and carried is not None:
                    await self._ack(acks)
                raise
        coverage = 1.0 if math.isnan(call.coverage) else call.coverage
        coverage = min(1.0, max(coverage, 1e-9))
        source = call.source or ""  # (``_source``)
        if acks is not None and carried is not None:
            dequeued = await self._dequeue_with_acks(queue, limit, source, coverage, acks, carried, max_bytes)
        else:
            dequeued = await self._dequeue(queue, limit, source, dry_run, coverage, max_bytes)
        wait_ms = min(call.wait_millis or 0, MAX_WAIT_MILLIS)
        if not dequeued and wait_ms > 0 and not dry_run:
            dequeued = await self._long_poll(queue, limit, source, coverage, wait_ms, max_bytes)
        count, reply = _dequeue_reply(seqid, queue, dequeued)
        if count and not dry_run:  # (``incr``, inline)
            self.metrics.counters[f"{queue}_dequeue"] += count
        return reply

    # (``_dequeue`` and ``_dequeue_with_acks`` answer the store's coroutine to await, rather than
    # await it in one of their own: a coroutine fewer on every dequeue.)

    def _shard_name_bytes(self) -> int:
        """The longest shard name's bytes (measured again when the shard map changes)."""
        shards = self.backend.shards
        if shards is not self._named_shards:
            self._longest_shard_name = max((len(name.encode()) for name in shards.names()), default=0)
            self._named_shards = shards
        return self._longest_shard_name

    def _descriptor_bytes(self, queue: str) -> int:
        """The most bytes one job's descriptor takes in an enqueue's reply (``MAX_ENQUEUE``)."""
        return len(queue) + self._shard_name_bytes() + DESCRIPTOR_REPLY_BYTES  # (names are ASCII)

    def _reply_budget(self, queue: str, limit: int) -> tuple[int, int]:
        """The jobs and body bytes a dequeue asking for ``limit`` takes at most, so that its reply
        holds about ``max_reply_bytes`` (past it by less than one body, as a store call's budget
        of bodies is passed). Besides its body each job costs the reply its descriptor twice and
        27 bytes (the jobs map and the metadata map); that share is kept to half the budget, and
        the bodies get the rest. A budget of bodies alone let 300,000 one-byte jobs make a reply
        of 21.6 MB, past a MAX_FRAME_BYTES of 16 MiB that clients may enforce too."""
        # descriptor: queue ':' shard ':p' priority ':' id (a priority and an id of 20 digits at most)
        per_job = 2 * (len(queue.encode()) + self._shard_name_bytes() + 46) + 27
        limit = min(limit, max(1, self.max_reply_bytes // (2 * per_job)))
        return limit, self.max_reply_bytes - limit * per_job

    def _dequeue(
        self, queue: str, limit: int, source: str, dry_run: bool, coverage: float, max_bytes: int
    ) -> Awaitable[Dequeued]:
        """Through the broker, unless it is off or the request needs the direct walk (a dry run
        answers from the store; a coverage below 1 asks for a random part of the shards)."""
        if self.broker is not None and not dry_run and coverage >= 1.0:
            return self.broker.dequeue(queue, limit, source, max_bytes)
        return self.backend.dequeue_jobs(queue, limit, source, dry_run=dry_run, coverage=coverage, max_bytes=max_bytes)

    def _dequeue_with_acks(
        self,
        queue: str,
        limit: int,
        source: str,
        coverage: float,
        acks: AckCall,
        groups: list[tuple[str, AckGroup]],
        max_bytes: int,
    ) -> Awaitable[Dequeued]:
        """A direct dequeue carrying its acks, successes only (``_ack``, with the broker off)."""

        def acked() -> None:
            self.metrics.incr(f"{queue}_ack_succeeded", acks.succeeded)

        return self.backend.dequeue_jobs(
            queue, limit, source, coverage=coverage, acks=groups, on_acked=acked, max_bytes=max_bytes
        )

    async def _long_poll(
        self, queue: str, limit: int, source: str, coverage: float, wait_ms: int, max_bytes: int
    ) -> Dequeued:
        """Wait for jobs: woken at once by this server's enqueues, and re-checking every
        ``empty_recheck_ms`` for jobs made ready elsewhere (less often while hundreds wait:
        ``RECHECKS_PER_SECOND``). The rate limit was charged once. The
        request's slot is given back while it waits and taken again for each dequeue
        (``lease.py``), so idle long polls never starve other requests."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_ms / 1000.0
        signals = self.backend.signals
        lease = current_lease.get()
        while (remaining := deadline - loop.time()) > 0:
            if lease is not None:
                lease.rest()
            # every waiter of this server rechecks RECHECKS_PER_SECOND times a second in all, at most
            every = max(self.backend.empty_recheck_ms / 1000.0, signals.waiters / RECHECKS_PER_SECOND)
            # (a poll over part of the shards may miss the jobs: woken along with others, for none)
            want = limit if coverage >= 1.0 else 0
            woken = await signals.wait(queue, min(remaining, every), want)
            if signals.closed or (lease is not None and lease.lost):
                if woken:
                    signals.pass_on(queue, want)  # (it makes no dequeue: the next poll does)
                break
            if lease is not None:
                await lease.take()
            dequeued = await self._dequeue(queue, limit, source, False, coverage, max_bytes)
            if woken and 0 < (taken := _taken(dequeued)) < want:
                signals.pass_on(queue, want - taken)  # (its bytes' bound left some: the next polls')
            if dequeued:
                return dequeued
        return []

    @_thrift_errors
    async def ack_dequeued_jobs(self, call: AckCall, seqid: int) -> bytes:
        await self._ack(call)
        return encode_void_reply(ACK, seqid)

    async def _ack(self, call: AckCall) -> None:
        queue = self._queue(call.queue)
        if not call.succeeded and not call.failed:
            return
        _check_ack_count(call)
        groups = call.groups()  # by shard; a malformed descriptor raises DescriptorError
        # jobs the broker handed out: their claims are written first (the keys, one tuple per
        # job, are built only while some claim is still being written)
        if self.broker is not None and self.broker.settling:
            await self.broker.settle(call.keys())
        # (retried() decodes every descriptor again: only worth it when some job failed; groups()
        # has already refused a malformed one)
        if await self.backend.ack_jobs(queue, groups, call.retried() if call.failed else ()):
            self.metrics.incr(f"{queue}_ack_succeeded", call.succeeded)
            self.metrics.incr(f"{queue}_ack_failed", call.failed)

    @_thrift_errors
    async def checkpoint_jobs(self, context: Any, request: Any) -> None:
        queue = self._queue(request.queueName)
        requests = request.requests or []
        if not requests:
            return
        if len(requests) > MAX_CHECKPOINT:
            raise PinLaterError(
                ErrorCode.UNKNOWN,
                f"invalid request: checkpointJobs takes at most {MAX_CHECKPOINT} requests, not {len(requests)}: "
                "checkpoint fewer jobs at a time",
            )
        parsed = await decoded([r.jobDescriptor for r in requests])
        if self.broker is not None:
            await self.broker.settle(parsed)
        now = self.backend.clock.now_ms()
        items = []
        for i, (r, (_q, shard, priority, local_id)) in enumerate(zip(requests, parsed, strict=True)):
            if i and not i % ITEMS_PER_TURN:
                await asyncio.sleep(0)
            items.append(
                (
                    shard,
                    CheckpointItem(
                        priority=priority,
                        local_id=local_id,
                        run_after_ms=now if r.runAfterTimestampMillis is None else _cut_time(r.runAfterTimestampMillis),
                        move_to_pending=bool(r.moveToPending),
                        new_body=None if r.newBody is None else r.newBody.encode("utf-8"),
                        # (below 1 is 1: one attempt, as the original's Redis ran it)
                        attempts_allowed=None if r.numOfAttemptsAllowed is None else max(1, r.numOfAttemptsAllowed),
                        prepend_custom_status=r.prependCustomStatus,
                    ),
                )
            )
        changed = await self.backend.checkpoint_jobs(queue, _source(context), items)
        self.metrics.incr(f"{queue}_checkpoint", changed)

    # -- reads ----------------------------------------------------------------------------------

    @_thrift_errors
    async def lookup_jobs(self, context: Any, request: Any) -> dict[str, Any]:
        descriptors = request.jobDescriptors or []
        if not descriptors:
            return {}
        if len(descriptors) > MAX_LOOKUP:
            raise PinLaterError(
                ErrorCode.UNKNOWN,
                f"invalid request: lookupJobs takes at most {MAX_LOOKUP} descriptors, not {len(descriptors)}: "
                "look up fewer jobs at a time",
            )
        if self.broker is not None:
            await self.broker.settle(await decoded(descriptors))
        # the store calls stop once the bodies pass what a reply may hold (LookupOverBudget)
        found = await self.backend.lookup_jobs(descriptors, bool(request.includeBody), self.max_reply_bytes)
        spelled = await _spellings(found, descriptors)
        size = sum(_info_bytes(d, r) for d, r in found.items() if d not in spelled.dropped)
        # (a job is answered under each spelling sent: each a copy of its info in the reply)
        size += sum(_info_bytes(d, found[written]) for d, written in spelled.added)
        if size > self.max_reply_bytes:
            # A reply no client with our frame limit could read, held in memory while a peer that
            # does not read it is written to: 20 jobs of 15 MiB made each such lookup 300 MB.
            raise PinLaterError(
                ErrorCode.UNKNOWN,
                f"invalid request: the reply about {len(found)} jobs would be about {size} bytes, more than a "
                f"reply may ({self.max_reply_bytes}, MAX_FRAME_BYTES): look up fewer jobs at a time"
                + (", or without bodies" if request.includeBody else ""),
            )
        infos = {}
        for i, (descriptor, record) in enumerate(found.items()):
            if i and not i % ITEMS_PER_TURN:
                await asyncio.sleep(0)
            infos[descriptor] = _job_info(descriptor, record)
        for descriptor, written in spelled.added:
            infos[descriptor] = infos[written]
        for written in spelled.dropped:
            del infos[written]
        return infos

    @_thrift_errors
    async def get_job_count(self, context: Any, request: Any) -> int:
        queue = self._queue(request.queueName)
        if self.broker is not None:
            await self.broker.settle_queue(queue)
        state, priority = self._state(request.jobState), self._optional_priority(request.priority)
        regex = await self._regex(request.bodyRegexToMatch)
        count = await self._filtered(
            regex, self.backend.count_jobs(queue, state, priority, bool(request.countFutureJobs), regex)
        )
        return min(count, I32_MAX)

    @_thrift_errors
    async def scan_jobs(self, context: Any, request: Any) -> Any:
        queue = self._queue(request.queueName)
        continuation = scan_pages.START if request.continuation is None else request.continuation
        state, priority = self._state(request.jobState), self._optional_priority(request.priority)
        regex = await self._regex(request.bodyRegexToMatch)
        query = ScanQuery(queue, state, priority, bool(request.scanFutureJobs), regex)
        # Capped, not refused: the original had no cap, so a caller may ask for more; the
        # continuation resumes after the last job returned.
        limit = min(100 if request.limit is None else request.limit, self.max_scan_limit)
        if limit <= 0:  # no page: the scan ends, as the original's ended every scan (a loop
            # reading pages until CONTINUATION_END would ask again for ever)
            scan_pages.decode(query, continuation)  # CONTINUATION_INVALID still applies
            return idl.PinLaterScanJobsResponse(scannedJobs=[], continuation=scan_pages.END)
        if self.broker is not None:
            await self.broker.settle_queue(queue)
        # The page ends where its reply would pass what a reply may hold (10,000 jobs of long
        # statuses and keys made replies of 50 MB and more): the continuation resumes there.
        descriptor_bytes = len(queue.encode()) + DESCRIPTOR_EXTRA_BYTES

        def size(walk: tuple[str, int], record: JobRecord) -> int:
            return _info_bytes(descriptor_bytes + len(walk[0].encode()), record)

        found, resume = await self._filtered(
            regex, self.backend.scan_page(query, limit, continuation, self.max_reply_bytes, size)
        )
        jobs = []
        for i, (descriptor, record) in enumerate(found):
            if i and not i % ITEMS_PER_TURN:
                await asyncio.sleep(0)
            jobs.append(_job_info(descriptor, record))
        return idl.PinLaterScanJobsResponse(scannedJobs=jobs, continuation=resume)

    # -- bulk administration --------------------------------------------------------------------

    @_thrift_errors
    async def retry_failed_jobs(self, context: Any, request: Any) -> int:
        queue = self._queue(request.queueName)
        # below 1 is 1: one attempt, as the original's Redis ran it (its MySQL left such a job
        # IN_PROGRESS for good after a failure)
        attempts = 1 if request.attemptsToAllow is None else max(1, request.attemptsToAllow)
        limit = 1000 if request.limit is None else request.limit
        if limit <= 0:
            return 0
        run_after = request.runAfterTimestampMillis
        if run_after is not None:
            run_after = _cut_time(run_after)
        priority = self._priority(request.priority)
        count = await self.backend.retry_failed_jobs(queue, priority, attempts, run_after, limit)
        if count:  # (a call that changes nothing writes no line: a peer may repeat one at will)
            log.info("%d failed jobs of %s retried by %s", count, queue, _who(context))
        return count

    @_thrift_errors
    async def delete_jobs(self, context: Any, request: Any) -> int:
        queue = self._queue(request.queueName)
        limit = 1000 if request.limit is None else request.limit
        if limit <= 0:
            return 0
        state, priority = self._state(request.jobState), self._priority(request.priority)
        regex = await self._regex(request.bodyRegexToMatch)
        delete = functools.partial(self.backend.delete_jobs, queue, state, priority, regex, limit)
        if self.broker is not None and state is JobState.PENDING:
            count = await self._filtered(regex, self.broker.around_delete(queue, delete))
        else:
            count = await self._filtered(regex, delete())
        if count:
            log.info("%d jobs of %s deleted by %s", count, queue, _who(context))
        return count

    # -- job control (pinlater extensions) ------------------------------------------------------

    @_thrift_errors
    async def cancel_jobs(self, context: Any, request: Any) -> int:
        queue = self._queue(request.queueName)
        descriptors = request.jobDescriptors or []
        if not descriptors:
            return 0
        if len(descriptors) > MAX_CANCEL:
            raise PinLaterError(
                ErrorCode.UNKNOWN, f"cancelJobs takes at most {MAX_CANCEL} descriptors, not {len(descriptors)}"
            )
        if self.broker is not None:
            keys = await decoded(descriptors)
            for i, (job_queue, *_rest) in enumerate(keys):  # refused before the buffer is touched
                require_queue_of(queue, job_queue, i)
            cancel = functools.partial(self.backend.cancel_jobs, queue, descriptors)
            changed = await self.broker.around_cancel(queue, keys, cancel)
        else:
            changed = await self.backend.cancel_jobs(queue, descriptors)
        self.metrics.incr(f"{queue}_cancel", changed)
        if changed:
            log.info("%d jobs of %s cancelled by %s", changed, queue, _who(context))
        return min(changed, I32_MAX)

    @_thrift_errors
    async def upsert_schedule(self, context: Any, schedule: Any) -> None:
        stored = await schedules.upsert(self.backend, self._schedule(schedule))
        log.info("schedule %s of %s set by %s", stored.name, stored.queue, _who(context))

    @_thrift_errors
    async def delete_schedule(self, context: Any, queueName: str, name: str) -> None:
        if await schedules.delete(self.backend, self._queue(queueName), name or ""):
            log.info("schedule %s of %s deleted by %s", name, queueName, _who(context))

    @_thrift_errors
    async def list_schedules(self, context: Any, queueName: str) -> list[Any]:
        return [_schedule_info(s) for s in await schedules.listing(self.backend, self._queue(queueName))]

    def _schedule(self, schedule: Any) -> schedules.Schedule:
        """A ``PinLaterSchedule`` as ``schedules`` takes it; ENQUEUE_REJECTED for what a schedule's
        job cannot carry."""
        queue = self._queue(schedule.queueName)
        name = schedule.name or ""
        job = schedule.job

        def reject(why: str) -> PinLaterError:
            return PinLaterError(ErrorCode.ENQUEUE_REJECTED, f"schedule {shown(name)}: {why}")

        if job.body is None:
            raise reject("its job needs a body")
        if len(job.body) > schedules.MAX_BODY_BYTES:
            raise reject(f"its job's body is {len(job.body)} bytes, at most {schedules.MAX_BODY_BYTES}")
        for field, value in (
            ("runAfterTimestampMillis", job.runAfterTimestampMillis),
            ("dedupKey", job.dedupKey),
            ("expireAtTimestampMillis", job.expireAtTimestampMillis),
        ):
            if value is not None:
                raise reject(f"its job cannot carry {field} (each tick's job runs at once, with a dedupKey of its own)")
        if job.dedupWindowMillis:
            raise reject("its job cannot carry dedupWindowMillis")
        body = job.body if isinstance(job.body, bytes) else str(job.body).encode("utf-8")
        return schedules.Schedule(
            queue=queue,
            name=name,
            job=schedules.ScheduledJob(
                body,
                1 if job.priority is None else job.priority,
                2 if job.numAttemptsAllowed is None else job.numAttemptsAllowed,
                job.customStatus or "",
                job.groupKey,
            ),
            cron=schedule.cron,
            interval_ms=schedule.intervalMillis,
            paused=bool(schedule.paused),
        )


def _schedule_info(schedule: schedules.Schedule) -> Any:
    job = schedule.job
    return idl.PinLaterSchedule(
        queueName=schedule.queue,
        name=schedule.name,
        cron=schedule.cron,
        intervalMillis=schedule.interval_ms,
        job=idl.PinLaterJob(
            body=job.body,
            priority=job.priority,
            numAttemptsAllowed=job.attempts_allowed,
            customStatus=job.custom_status,
            groupKey=job.group_key,
            dedupWindowMillis=None,
        ),
        paused=schedule.paused,
        nextRunTimestampMillis=schedule.next_run_ms,
    )


def _job_info(descriptor: str, record: JobRecord) -> Any:
    return idl.PinLaterJobInfo(
        jobDescriptor=descriptor,
        jobState=int(record.state),
        attemptsAllowed=record.attempts_allowed,
        attemptsRemaining=record.attempts_remaining,
        customStatus=record.custom_status,
        createdAtTimestampMillis=record.created_at_ms,
        runAfterTimestampMillis=record.run_after_ms,
        updatedAtTimestampMillis=record.updated_at_ms,
        claimDescriptor=record.claim_descriptor,
        body=record.body,
        dedupKey=record.dedup_key,
        groupKey=record.group_key,
        expireAtTimestampMillis=record.expire_at_ms,
    )


async def _one(done: Awaitable[None]) -> int:
    """``done`` awaited, counted as one change (``Broker.around_delete`` after a queue's delete)."""
    await done
    return 1


@dataclass(slots=True)
class _Spellings:
    """Descriptors a lookup was sent spelled otherwise than the store writes them (``q:s1:p1:042``
    for ``q:s1:p1:42``): each ``(as sent, as written)`` to answer under, and the written ones the
    client did not send, to leave out."""

    added: list[tuple[str, str]]
    dropped: set[str]


async def _spellings(found: dict[str, JobRecord], descriptors: list[str]) -> _Spellings:
    """Key lookupJobs' reply by the descriptors as the client spelled them, as the original did:
    one written otherwise than the store's named the job under the store's spelling alone, which
    the client did not look for. A job's info keeps its descriptor as the store writes it."""
    sent = set(descriptors)
    others = [d for d in sent if d not in found]
    spelled = _Spellings([], set())
    if not others:
        return spelled
    for i, (descriptor, (queue, shard, priority, local_id)) in enumerate(
        zip(others, await decoded(others), strict=True)
    ):
        if i and not i % ITEMS_PER_TURN:
            await asyncio.sleep(0)
        written = encode_descriptors(queue, shard, [priority], [local_id])[0]
        if written in found:
            spelled.added.append((descriptor, written))
            if written not in sent:
                spelled.dropped.add(written)
    return spelled
