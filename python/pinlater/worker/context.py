"""``JobContext``: what a handler receives, one per job in hand."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pinlater.client.types import Checkpoint, DequeuedJob, JobInfo

if TYPE_CHECKING:
    from pinlater.worker.queue_runner import QueueRunner


class HandlerTimeout(TimeoutError):
    """A handler ran past its registration's ``timeout``: its job fails as if it had raised this
    (retried by the retry policy while attempts remain)."""

    @classmethod
    def after(cls, limit: float) -> HandlerTimeout:
        return cls(f"the handler ran past its timeout of {limit:g}s")


@dataclass(frozen=True, slots=True)
class JobKeys:
    """What a job was enqueued with beyond its body: its keys (``Job.dedup_key``,
    ``Job.group_key``) and its expiry (``Job.expire_at_ms``); None where it has none. The expiry
    does not stop a run in hand; a retry (or a claim timeout) at or after it ends the job FAILED
    with "expired" instead of running it again."""

    dedup_key: str | None = None
    group_key: str | None = None
    expire_at_ms: int | None = None


class JobContext:
    """One dequeued job and the means to checkpoint it.

    ``checkpoint`` (from a sync handler's thread) and ``acheckpoint`` (from an async handler)
    extend the claim, replace the body, reset attempts or prepend to the custom status. With
    ``move_to_pending=True`` the job goes back to PENDING without charging an attempt and the
    worker sends no ack for it: another worker may hold it by the time this handler returns.

    ``keys`` (sync) and ``akeys`` (async) give the job's dedup and group keys and its expiry,
    which a dequeue does not carry: see their cost there. ``cancel`` / ``acancel`` cancel jobs of
    the queue (this one included: it then gets no further attempt).
    """

    __slots__ = ("_keys", "job", "lease_ms", "released", "renewed", "runner", "started", "timed_out")

    def __init__(self, runner: QueueRunner, job: DequeuedJob, claimed: float = 0.0) -> None:
        self.runner = runner
        self.job = job
        #: Set once the job went back to PENDING (by the handler or at shutdown): no ack follows.
        self.released = False
        #: ``time.monotonic()`` when the handler started; None until then.
        self.started: float | None = None
        #: ``time.monotonic()`` of the claim, or of its last renewal (``QueueRunner.renew_claims``).
        self.renewed = claimed
        #: Set once the handler ran past its timeout: its failure is acked, what it returns later
        #: is ignored, and its checkpoints are refused.
        self.timed_out = False
        #: The latest run-after (ms since the epoch) the handler's own checkpoints gave the job
        #: while it runs: on Redis its lease, which a renewal keeps (``QueueRunner.renew_claims``).
        self.lease_ms: int | None = None
        self._keys: JobKeys | None = None

    @property
    def queue(self) -> str:
        return self.runner.queue

    @property
    def descriptor(self) -> str:
        return self.job.descriptor

    @property
    def body(self) -> bytes:
        return self.job.body

    @property
    def attempt(self) -> int:
        """1 on the first run; ``attempts_allowed`` on the last."""
        return self.job.attempt

    @property
    def attempts_allowed(self) -> int:
        return self.job.attempts_allowed

    @property
    def attempts_remaining(self) -> int:
        """Counting this run: 1 means a failure now makes the job FAILED."""
        return self.job.attempts_remaining

    def keys(self) -> JobKeys:
        """The job's dedup and group keys and expiry, from a sync handler (blocks its thread).

        Cost: the dequeue response does not carry the keys, so the first call makes one
        ``lookupJobs`` round trip for this job (a read on its shard, body not fetched); later
        calls answer from this context. A handler that never asks costs nothing. Raises
        ``LookupError`` if the job is gone (deleted while in hand).
        """
        if self._keys is None:
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                pass
            else:
                raise RuntimeError("JobContext.keys() would block the event loop: use await ctx.akeys()")
            self._keys = self._keys_of(self.runner.worker.sync_client.lookup([self.descriptor]))
        return self._keys

    async def akeys(self) -> JobKeys:
        """The job's dedup and group keys and expiry, from an async handler; costs as ``keys``
        does (one ``lookupJobs`` call the first time, then none)."""
        if self._keys is None:
            self._keys = self._keys_of(await self.runner.worker.client.lookup([self.descriptor]))
        return self._keys

    def _keys_of(self, found: dict[str, JobInfo]) -> JobKeys:
        info = found.get(self.descriptor)
        if info is None:
            raise LookupError(f"job {self.descriptor} not found: deleted while in hand?")
        return JobKeys(info.dedup_key, info.group_key, info.expire_at_ms)

    def cancel(self, descriptors: Iterable[str]) -> int:
        """Cancel jobs of this queue from a sync handler (blocks its thread); returns how many
        changed (``PinLaterClient.cancel``). Cancelling this job leaves it to this run: a
        failure ends it FAILED with "cancelled" and no retry, a success still counts."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise RuntimeError("JobContext.cancel() would block the event loop: use await ctx.acancel()")
        return self.runner.worker.sync_client.cancel(self.queue, descriptors)

    async def acancel(self, descriptors: Iterable[str]) -> int:
        """Cancel jobs of this queue from an async handler, as ``cancel``."""
        return await self.runner.worker.client.cancel(self.queue, descriptors)

    def _checkpoint(
        self,
        new_body: str | bytes | None,
        move_to_pending: bool,
        run_after: float | None,
        attempts_allowed: int | None,
        prepend_status: str | None,
    ) -> Checkpoint:
        if self.timed_out:  # (its failure is acked: a release now would undo it, a change act on its retry)
            raise HandlerTimeout(f"job {self.descriptor} ran past its handler's timeout and was failed")
        run_after_ms = None if run_after is None else int(run_after * 1000)
        return Checkpoint(self.descriptor, new_body, move_to_pending, run_after_ms, attempts_allowed, prepend_status)

    def _checkpointed(self, cp: Checkpoint) -> None:
        """After the handler's own checkpoint: a release, or a renewal of the claim (its time,
        and a later run-after it gave, which the worker's renewals then keep)."""
        if cp.move_to_pending:
            self.released = True
            return
        self.renewed = time.monotonic()
        if cp.run_after_ms is not None:
            self.lease_ms = cp.run_after_ms

    def checkpoint(
        self,
        *,
        new_body: str | bytes | None = None,
        move_to_pending: bool = False,
        run_after: float | None = None,
        attempts_allowed: int | None = None,
        prepend_status: str | None = None,
    ) -> None:
        """Checkpoint from a sync handler (blocks its thread). ``run_after``: Unix time in seconds."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise RuntimeError("JobContext.checkpoint() would block the event loop: use await ctx.acheckpoint()")
        cp = self._checkpoint(new_body, move_to_pending, run_after, attempts_allowed, prepend_status)
        self.runner.worker.sync_client.checkpoint(self.queue, [cp])
        self._checkpointed(cp)

    async def acheckpoint(
        self,
        *,
        new_body: str | bytes | None = None,
        move_to_pending: bool = False,
        run_after: float | None = None,
        attempts_allowed: int | None = None,
        prepend_status: str | None = None,
    ) -> None:
        """Checkpoint from an async handler."""
        cp = self._checkpoint(new_body, move_to_pending, run_after, attempts_allowed, prepend_status)
        await self.runner.worker.client.checkpoint(self.queue, [cp])
        self._checkpointed(cp)

    def retry_later(self, delay: float) -> None:
        """Put the job back to PENDING for ``delay`` seconds without using an attempt (sync handlers)."""
        self.checkpoint(move_to_pending=True, run_after=time.time() + delay)

    def __repr__(self) -> str:
        return f"JobContext({self.descriptor!r}, attempt {self.attempt} of {self.attempts_allowed})"
