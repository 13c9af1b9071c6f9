"""``EmbeddedStore``: one shard in one SQLite file, durable without a server.

Design:

* One file per shard (``{data_dir}/shard-{name}.sqlite3``) in WAL mode. ``synchronous`` FULL
  has the WAL synced after each commit before its calls return (survives power loss; the hot
  path's Rust writer has a thread of its own sync it, for every commit made since the last
  sync, and commits its next group meanwhile; after a failed sync it refuses every write until
  the store is opened again); NORMAL survives a killed process but may lose the last commits
  on power loss. Either way a method that returned is committed.
* One connection serves every call; every method is atomic on its own, and writes arriving
  together share one transaction and one sync (group commit, see ``connection``).
* SQL lives in ``sql/*.sql``, one statement per file, values always bound as parameters.
* The hot path (enqueue, dequeue, ack as the server calls them) runs in Rust on a connection of
  its own (``native_hot``), opened at the first ``hot_path``; the methods below are the same
  operations for everyone else (tests, tools).
* Dedup keys (#17) are rows of ``dedup_keys`` in the same file (``dedup_keys``); ordered groups
  (#17) are a WAITING state (-1) of ``jobs`` and rows of ``group_jobs`` and ``groups``, never a
  column of ``jobs`` (``groups``). The hot path's keyed enqueue and ack do the same on the Rust
  writer.
* Job control (#18): a job's expiry is a column of ``jobs`` (``expire_at_ms``, NULL for most
  jobs; version 4 files get it at open), read by dequeues, reservations and claims from the row
  they read anyway, and found by ``expire_jobs`` along a partial index of unfinished jobs with one.
  A queue that ever had an expiring job has a row of ``expiries`` (its expired count); only such a
  queue's failure acks and claim timeouts run the statements that may expire a retry. A
  cancelled IN_PROGRESS job is one with no attempt remaining (see ``cancel_jobs``). Schedules
  are rows of ``schedules``.
* Queue rules (``set_queue_rules``) live in this object, read at every call (the hot path hands
  them to Rust per request). A queue with ``DEFAULT_RULES`` and no grouped job runs the
  statements it ran before groups existed, plus one probe per ack call (``queue_has_groups``).
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from pinlater.backends.base import (
    DEFAULT_RULES,
    DEQUEUE_BYTES,
    DUE_PAGE_BYTES,
    RESERVATION_PREFIX,
    AckItem,
    CheckpointItem,
    ClaimedJob,
    CountKey,
    Enqueued,
    GroupCounts,
    JobFilter,
    JobRecord,
    JobState,
    KeyedJob,
    LookupOverBudget,
    NewJob,
    QueueRules,
    Resurrected,
    ScanCursor,
    ScheduleRow,
    within_bytes,
    within_page,
)
from pinlater.backends.body_filter import DEFAULT_BUDGET_SECONDS, BodyFilter
from pinlater.backends.dedup_sweep import SweepCursors
from pinlater.backends.embedded import dedup_keys, groups, sql
from pinlater.backends.embedded.body_filtered import BodyFilteredReads
from pinlater.backends.embedded.connection import connect
from pinlater.backends.embedded.native_hot import NativeEmbeddedHotPath, open_native_shard
from pinlater.backends.threaded import BlockingStore
from pinlater.errors import QueueNotFoundError, ShardConnectionError

if TYPE_CHECKING:
    from pinlater._pinlater import SqliteShard, WriteGate
    from pinlater.backends.base import HotPath, Offload
    from pinlater.config import Settings

CUSTOM_STATUS_LIMIT = 5000  # characters, as the original's MySQL backend
SYNCHRONOUS_MODES = ("FULL", "NORMAL")
MIN_SQLITE_VERSION = (3, 35, 0)  # UPDATE ... RETURNING

# Python's connection copies the log into the file (a checkpoint, holding the write lock) when a
# commit of its own leaves it holding this many pages: SQLite's 1,000 until the hot path opens,
# then this, the Rust writer's WAL_FALLBACK_PAGES (rust/store/sqlite_shard.rs), as the hot path's
# checkpointer copies the log at 10,000 pages without holding the lock.
NATIVE_AUTOCHECKPOINT_PAGES = 40_000
#: Most due jobs a dequeue (or reservation) of a queue with expiring jobs expires before it
#: claims (the Rust writer's ``EXPIRE_ON_DEQUEUE``): expired jobs do not pile up at the front of
#: the queue between the monitor's ``expire_jobs`` sweeps, for one probe when none is due.
EXPIRE_ON_DEQUEUE = 256
#: Columns added to tables of earlier schema versions at open (``connection.connect``).
ADDED_COLUMNS = (("jobs", "expire_at_ms", "INTEGER"),)  # version 5
#: Statements run once at the first open of a file of an earlier version (``connection.connect``).
UPGRADES = ((6, sql.load("dedup_keys_orphans_forget")),)

# run_after bounds standing for "no bound" when a filter ignores time (SQLite integers are i64).
_I64_MIN = -(2**63)
_I64_MAX = 2**63 - 1


def shard_path(data_dir: Path, name: str) -> Path:
    """Where shard ``name`` keeps its database file."""
    return data_dir / f"shard-{name}.sqlite3"


class WriterCounts(NamedTuple):
    """What the shard's Rust writer did since it opened (``SqliteShard``): all 0 before the hot
    path opens it. ``checkpoint_fallbacks`` above 0: its checkpointer failed or fell behind, and
    the writer copied the whole log itself, holding up the calls queued meanwhile."""

    commits: int
    wal_syncs: int
    checkpoints_copied: int
    checkpoints_by_writer: int
    checkpoint_fallbacks: int


class EmbeddedStore(BlockingStore, BodyFilteredReads):
    """``ShardStore`` for one shard on a local SQLite file (see the module docstring)."""

    def __init__(
        self,
        data_dir: Path,
        name: str,
        synchronous: str = "FULL",
        busy_timeout_ms: int = 5000,
        body_filter_budget_seconds: float = DEFAULT_BUDGET_SECONDS,
    ) -> None:
        if synchronous not in SYNCHRONOUS_MODES:
            raise ValueError(f"synchronous must be one of {', '.join(SYNCHRONOUS_MODES)}, not {synchronous!r}")
        if sqlite3.sqlite_version_info < MIN_SQLITE_VERSION:
            raise ShardConnectionError(name, f"SQLite >= 3.35 is needed (RETURNING), found {sqlite3.sqlite_version}")
        self._name = name
        self._path = shard_path(data_dir, name)
        self._synchronous = synchronous
        self._busy_timeout_ms = busy_timeout_ms
        self._native: SqliteShard | None = None  # the hot path's writer, from the first hot_path
        self._init_transactions()
        self._body_filter_budget = body_filter_budget_seconds  # BODY_FILTER_TIME_BUDGET_SECONDS
        self._dedup_sweep: SweepCursors[dedup_keys.Position] = SweepCursors()
        self._rules: Mapping[str, QueueRules] = {}
        try:
            data_dir.mkdir(parents=True, exist_ok=True)
            self._conn = connect(self._path, synchronous, busy_timeout_ms, sql.load("schema"), ADDED_COLUMNS, UPGRADES)
        except (OSError, sqlite3.Error) as exc:
            raise ShardConnectionError(name, f"cannot open {self._path}: {exc}") from exc

    @property
    def name(self) -> str:
        return self._name

    @property
    def custom_status_limit(self) -> int:
        return CUSTOM_STATUS_LIMIT

    @property
    def path(self) -> Path:
        """The shard's database file."""
        return self._path

    @property
    def write_gate(self) -> WriteGate:
        """The file's write lock in this process, shared with the native hot path."""
        return self._gate

    def native_hot_path(self, offload: Offload) -> NativeEmbeddedHotPath:
        """The hot path in Rust (``native_hot``), opening its connection the first time."""
        with self._lock:
            if self._conn is None:
                raise ShardConnectionError(self._name, "the store is closed")
            if self._native is None:
                self._native = open_native_shard(self, self._synchronous, self._busy_timeout_ms)
                # The hot path's checkpointer copies the log from now on, off the write lock.
                # Python's commits copy it only past the pages where the Rust writer would too.
                self._conn.execute(f"PRAGMA wal_autocheckpoint = {NATIVE_AUTOCHECKPOINT_PAGES}")
            return NativeEmbeddedHotPath(self, self._native, offload)

    def hot_path(self, offload: Offload) -> HotPath:
        return self.native_hot_path(offload)

    def writer_counts(self) -> WriterCounts:
        """The Rust writer's commits, syncs and checkpoints so far (``WriterCounts``)."""
        native = self._native
        if native is None:
            return WriterCounts(0, 0, 0, 0, 0)
        return WriterCounts(native.commits, native.syncs, *native.checkpoints)

    # -- ordered groups and queue rules -------------------------------------------------------

    @property
    def groups_refused(self) -> str | None:
        return None

    def set_queue_rules(self, rules: Mapping[str, QueueRules]) -> None:
        self._rules = dict(rules)  # one reference swap: a call sees the old rules or the new

    def rules(self, queue: str) -> QueueRules:
        """The rules in force for ``queue`` (``DEFAULT_RULES`` unless set)."""
        return self._rules.get(queue, DEFAULT_RULES)

    def monitor_idle(self, queues: Sequence[str], num_priorities: int) -> set[str]:
        """One read (``monitor_idle.sql``): a few index probes per queue."""
        if not queues:
            return set()
        params = {"queues": json.dumps(list(queues)), "num_priorities": num_priorities}
        with self._read() as conn:
            return {row[0] for row in conn.execute(sql.load("monitor_idle"), params)}

    def group_counts(self, queue: str) -> GroupCounts:
        with self._read() as conn:
            _require_queue(conn, queue)
            return GroupCounts(*groups.counts(conn, queue))

    # -- queues -----------------------------------------------------------------------------

    def create_queue(self, queue: str, num_priorities: int) -> None:
        with self._write() as conn:
            # created_at is informational only; the seam passes no clock to create_queue.
            now_ms = time.time_ns() // 1_000_000
            conn.execute(sql.load("create_queue"), {"queue": queue, "num_priorities": num_priorities, "now_ms": now_ms})

    def delete_queue(self, queue: str) -> None:
        with self._write() as conn:
            conn.execute(sql.load("delete_queue_group_jobs"), {"queue": queue})  # before the jobs
            conn.execute(sql.load("delete_queue_jobs"), {"queue": queue})
            conn.execute(sql.load("delete_queue_dedup_keys"), {"queue": queue})
            conn.execute(sql.load("delete_queue_groups"), {"queue": queue})
            conn.execute(sql.load("delete_queue_schedules"), {"queue": queue})
            conn.execute(sql.load("delete_queue_expiries"), {"queue": queue})
            conn.execute(sql.load("delete_queue"), {"queue": queue})
        self._dedup_sweep.move(queue, None)

    def get_queue_names(self) -> set[str]:
        with self._read() as conn:
            return {row[0] for row in conn.execute(sql.load("queue_names"))}

    # -- the job lifecycle ------------------------------------------------------------------

    def enqueue_jobs(self, queue: str, jobs: Sequence[NewJob], now_ms: int) -> list[int]:
        with self._write() as conn:
            _require_queue(conn, queue)
            return _insert_jobs(conn, queue, jobs, now_ms)

    def enqueue_keyed_jobs(self, queue: str, jobs: Sequence[KeyedJob], now_ms: int) -> list[Enqueued]:
        """One write transaction: see ``dedup_keys`` and ``groups``."""
        concurrency = self.rules(queue).group_concurrency

        def insert(conn: sqlite3.Connection, new: Sequence[KeyedJob]) -> list[int]:
            if all(job.group is None and job.expire_at_ms is None for job in new):
                return _insert_jobs(conn, queue, [job.job for job in new], now_ms)
            promoted: dict[str, int] = {}
            return [_insert_keyed(conn, queue, job, concurrency, now_ms, promoted) for job in new]

        with self._write() as conn:
            _require_queue(conn, queue)
            if any(job.expire_at_ms is not None for job in jobs):
                conn.execute(sql.load("expiries_touch"), {"queue": queue})
            return dedup_keys.enqueue(conn, queue, jobs, now_ms, insert)

    def gc_dedup_keys(self, queue: str, now_ms: int, limit: int) -> int:
        """Also forgets up to ``limit`` idle groups whose rate bucket is full again (the
        monitor's periodic per-queue sweep; not counted in the answer)."""
        rate = self.rules(queue).group_jobs_per_second
        with self._write() as conn:
            _require_queue(conn, queue)
            groups.forget_idle(conn, queue, rate, now_ms, limit)
            return dedup_keys.forget_unheld(conn, queue, now_ms, limit, self._dedup_sweep)

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
        params: dict[str, Any] = {"queue": queue, "priority": priority, "limit": _limit(limit), "now_ms": now_ms}
        if dry_run:
            with self._read() as conn:
                _require_queue(conn, queue)
                rows: list[Row] = []
                spent = 0
                for row in conn.execute(sql.load("dequeue_jobs_dry_run"), params):  # (in claim order)
                    if rows and spent >= max_bytes:  # (``within_bytes``; no body past it is read)
                        break
                    rows.append(row)
                    spent += len(row[1])
        else:
            rules = self.rules(queue)
            claim_params = {**params, "claim": claim, "reserved_prefix": RESERVATION_PREFIX}
            with self._write() as conn:
                num_priorities, expiring = _queue_info(conn, queue)
                if expiring:  # as the Rust writer does (EXPIRE_ON_DEQUEUE)
                    self._expire_due(conn, queue, now_ms, EXPIRE_ON_DEQUEUE)
                claim_params["limit"] = _room(conn, queue, num_priorities, rules, claim_params["limit"])
                take = _by_ids(conn, sql.load("claim_jobs_by_id"), claim_params)
                if rules.group_jobs_per_second is None:
                    rows = _fitting(conn, sql.load("dequeue_jobs"), claim_params, max_bytes, take)
                else:
                    rows = _take_by_rate(conn, claim_params, rules.group_jobs_per_second, take, max_bytes)
            rows.sort(key=_claim_order)  # RETURNING has no order; run_after, id
        return [ClaimedJob(*row[:6]) for row in rows]

    def ack_jobs(self, queue: str, succeeded: Sequence[AckItem], failed: Sequence[AckItem], now_ms: int) -> None:
        def params(item: AckItem) -> dict[str, Any]:  # ack_succeeded.sql ignores retry_delay_ms
            return {
                "queue": queue,
                "priority": item.priority,
                "local_id": item.local_id,
                "append": item.append_custom_status,
                "status_limit": CUSTOM_STATUS_LIMIT,
                "retry_delay_ms": item.retry_delay_ms,
                "now_ms": now_ms,
            }

        with self._write() as conn:
            _, expiring = _queue_info(conn, queue)
            ended: list[tuple[Any, ...]] = []
            if expiring and failed:  # a retry past the job's expiry expires it instead
                expire_sql = sql.load("ack_failed_expire")
                ended = [(row[0], 3) for i in failed for row in conn.execute(expire_sql, params(i))]
                _count_expired(conn, queue, len(ended))
            if not groups.any_in(conn, queue):  # no group can move: the plain statements
                if succeeded:
                    conn.executemany(sql.load("ack_succeeded"), [params(i) for i in succeeded])
                if failed:
                    conn.executemany(sql.load("ack_failed"), [params(i) for i in failed])
                return
            # (group_key, state) of each job acked; RETURNING rules out executemany.
            succeeded_sql, failed_sql = sql.load("ack_succeeded_grouped"), sql.load("ack_failed_grouped")
            ended += [(row[0], 2) for i in succeeded for row in conn.execute(succeeded_sql, params(i))]
            ended += [tuple(row) for i in failed for row in conn.execute(failed_sql, params(i))]
            self._leave_groups(conn, queue, ended)

    def checkpoint_jobs(self, queue: str, items: Sequence[CheckpointItem], source: str, now_ms: int) -> int:
        # A descriptor's id may be any u64; one past SQLite's INTEGER names no job (as an ack's).
        rows = [
            {
                "queue": queue,
                "priority": item.priority,
                "local_id": item.local_id,
                "source": source,
                "run_after_ms": item.run_after_ms,
                "move_to_pending": int(item.move_to_pending),
                "new_body": item.new_body,
                "attempts": item.attempts_allowed,
                "prepend": item.prepend_custom_status,
                "status_limit": CUSTOM_STATUS_LIMIT,
                "now_ms": now_ms,
            }
            for item in items
            if item.local_id <= _I64_MAX
        ]
        with self._write() as conn:
            _require_queue(conn, queue)
            statement = sql.load("checkpoint_if_claimed")
            # (group_key, state) of each job changed: a cancelled one moved to pending ended FAILED.
            changed = [tuple(found) for row in rows for found in conn.execute(statement, row)]
            self._leave_groups(conn, queue, changed)
            return len(changed)

    # -- reservations (the dequeue broker) ----------------------------------------------------
    # A reserved job: claim_descriptor = the reservation, updated_at_ms = its expiry (see
    # reserve_jobs.sql). Live while updated_at_ms > now.

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
        params: dict[str, Any] = {
            "queue": queue,
            "priority": priority,
            "limit": _limit(limit),
            "reservation": reservation,
            "until_ms": now_ms + hold_ms,
            "now_ms": now_ms,
            "reserved_prefix": RESERVATION_PREFIX,
        }
        rules = self.rules(queue)
        with self._write() as conn:
            num_priorities, expiring = _queue_info(conn, queue)
            if expiring:  # as dequeue_jobs does
                self._expire_due(conn, queue, now_ms, EXPIRE_ON_DEQUEUE)
            params["limit"] = _room(conn, queue, num_priorities, rules, params["limit"])
            take = _by_ids(conn, sql.load("reserve_jobs_by_id"), params)
            if rules.group_jobs_per_second is None:
                rows = _fitting(conn, sql.load("reserve_jobs"), params, max_bytes, take)
            else:
                rows = _take_by_rate(conn, params, rules.group_jobs_per_second, take, max_bytes)
        rows.sort(key=_claim_order)
        return [ClaimedJob(*row[:6]) for row in rows]

    def claim_reserved(
        self, queue: str, items: Sequence[tuple[int, int, str]], reservation: str, now_ms: int
    ) -> list[tuple[int, int]]:
        # One statement per (priority, claim): in-process statements are cheap, the transaction
        # is what costs, and there is one.
        by_claim: dict[tuple[int, str], list[int]] = {}
        for priority, local_id, claim in items:
            by_claim.setdefault((priority, claim), []).append(local_id)
        claimed: list[tuple[int, int]] = []
        rules = self.rules(queue)
        with self._write() as conn:
            num_priorities = _require_queue(conn, queue)
            chosen = by_claim
            if rules.max_in_progress is not None:
                room = _room(conn, queue, num_priorities, rules, len(items))
                chosen = _first_items(by_claim, room)
            for (priority, claim), ids in by_claim.items():
                params = {
                    "queue": queue,
                    "priority": priority,
                    "ids": json.dumps(ids),
                    "reservation": reservation,
                    "claim": claim,
                    "now_ms": now_ms,
                }
                taken: list[Any] = []
                if mine := chosen.get((priority, claim)):
                    taken = conn.execute(sql.load("claim_reserved"), {**params, "ids": json.dumps(mine)}).fetchall()
                if len(taken) < len(ids):  # an earlier run of this call may have claimed the others
                    taken = conn.execute(sql.load("claimed_already"), params).fetchall()
                claimed += [(priority, row[0]) for row in taken]
        return claimed

    def release_reservations(self, queue: str, items: Sequence[tuple[int, int]], reservation: str, now_ms: int) -> int:
        released = 0
        with self._write() as conn:
            _require_queue(conn, queue)
            for priority, ids in _ids_by_priority(items).items():
                params = {
                    "queue": queue,
                    "priority": priority,
                    "ids": json.dumps(ids),
                    "reservation": reservation,
                    "now_ms": now_ms,
                }
                released += conn.execute(sql.load("release_reservations"), params).rowcount
        return released

    # -- reads ------------------------------------------------------------------------------

    def lookup_jobs(
        self, queue: str, keys: Sequence[tuple[int, int]], include_body: bool, max_body_bytes: int | None = None
    ) -> list[JobRecord]:
        wanted = list(dict.fromkeys(keys))  # unique, in the caller's order
        ids = json.dumps(sorted({local_id for _, local_id in wanted}))
        asked = set(wanted)
        found: dict[tuple[int, int], JobRecord] = {}
        held = 0
        with self._read() as conn:
            _require_queue(conn, queue)
            rows = conn.execute(
                sql.load("lookup_jobs"), {"queue": queue, "ids": ids, "include_body": int(include_body)}
            )
            for row in rows:  # row by row: a lookup past its budget stops reading
                if (row[0], row[1]) not in asked:
                    continue
                if include_body and max_body_bytes is not None:
                    held += len(row[-1] or b"")
                    if held > max_body_bytes:
                        raise LookupOverBudget(max_body_bytes)
                found[(row[0], row[1])] = _record(row)
        return [found[key] for key in wanted if key in found]

    def count_jobs(self, queue: str, where: JobFilter, limit: int | None) -> int:
        if where.body_regex is not None:
            body_filter = BodyFilter(where.body_regex, self._body_filter_budget, where.deadline)
            return self._count_matching(_filter_params(queue, where), body_filter, limit, _require_queue)
        params = {**_filter_params(queue, where), "limit": -1 if limit is None else _limit(limit)}
        with self._read() as conn:
            _require_queue(conn, queue)
            return int(conn.execute(sql.load("count_jobs"), params).fetchone()[0])

    def scan_jobs(self, queue: str, where: JobFilter, limit: int, after: ScanCursor | None = None) -> list[JobRecord]:
        """Pages resume before ``after`` along ``jobs_by_run_after`` (see ``scan_jobs.sql``)."""
        if where.body_regex is not None:
            body_filter = BodyFilter(where.body_regex, self._body_filter_budget, where.deadline)
            rows = self._scan_matching(_filter_params(queue, where), body_filter, limit, _require_queue, after)
            return [_record(row) for row in rows]
        filters = _filter_params(queue, where)
        before = (filters["run_after_le"], _I64_MAX)
        if after is not None:
            before = min(before, (after.run_after_ms, after.local_id))
        params = {
            **filters,
            "limit": _limit(limit),
            "before_run_after": before[0],
            "before_id": before[1],
        }
        with self._read() as conn:
            _require_queue(conn, queue)
            return [_record(row) for row in conn.execute(sql.load("scan_jobs"), params)]

    def oldest_ready(self, num_priorities: int, now_ms: int) -> dict[tuple[str, int], int]:
        """One statement over the shard file: a probe per queue and priority (``oldest_ready.sql``)."""
        params = {"num_priorities": num_priorities, "now_ms": now_ms}
        with self._read() as conn:
            rows = conn.execute(sql.load("oldest_ready"), params).fetchall()
        return {(queue, priority): oldest for queue, priority, oldest in rows if oldest is not None}

    def queue_counts(self, num_priorities: int, now_ms: int) -> dict[CountKey, int]:
        """One statement over the whole shard file (``queue_counts.sql``)."""
        params = {"now_ms": now_ms, "num_priorities": num_priorities}
        with self._read() as conn:
            rows = conn.execute(sql.load("queue_counts"), params).fetchall()
        counts: dict[CountKey, int] = {}
        for queue, priority, state, total, future in rows:
            job_state = JobState(max(state, 0))  # WAITING jobs are PENDING to readers
            for key, count in (
                (CountKey(queue, priority, job_state, False), total - future),
                (CountKey(queue, priority, job_state, True), future),
            ):
                counts[key] = counts.get(key, 0) + count
        return counts

    # -- job control (#18) --------------------------------------------------------------------

    def cancel_jobs(self, queue: str, keys: Sequence[tuple[int, int]], now_ms: int) -> int:
        changed = 0
        with self._write() as conn:
            _require_queue(conn, queue)
            for priority, ids in _ids_by_priority(list(dict.fromkeys(keys))).items():
                params = {
                    "queue": queue,
                    "priority": priority,
                    "ids": json.dumps(ids),
                    "status_limit": CUSTOM_STATUS_LIMIT,
                    "now_ms": now_ms,
                }
                rows = conn.execute(sql.load("cancel_jobs"), params).fetchall()
                changed += len(rows)
                # A PENDING job ended (FAILED); one IN_PROGRESS stays in its group until its ack.
                self._ended_unrun(conn, queue, [row for row in rows if row[1] == JobState.FAILED])
        return changed

    def expire_jobs(self, queue: str, now_ms: int, limit: int) -> int:
        with self._write() as conn:
            _require_queue(conn, queue)
            return self._expire_due(conn, queue, now_ms, limit)

    def _expire_due(self, conn: sqlite3.Connection, queue: str, now_ms: int, limit: int) -> int:
        """Expire up to ``limit`` of the queue's due jobs (``expire_jobs.sql``), counting them."""
        params = {"queue": queue, "now_ms": now_ms, "limit": _limit(limit), "status_limit": CUSTOM_STATUS_LIMIT}
        rows = conn.execute(sql.load("expire_jobs"), params).fetchall()
        self._ended_unrun(conn, queue, [(row[0], JobState.FAILED, row[1], row[2]) for row in rows])
        _count_expired(conn, queue, len(rows))
        return len(rows)

    def expired_counts(self) -> dict[str, int]:
        with self._read() as conn:
            return {queue: int(count) for queue, count in conn.execute(sql.load("expired_counts"))}

    # -- schedules ----------------------------------------------------------------------------

    def put_schedule(self, row: ScheduleRow) -> None:
        params = {
            "queue": row.queue,
            "name": row.name,
            "spec": row.spec,
            "next_run_ms": row.next_run_ms,
            "paused": int(row.paused),
        }
        with self._write() as conn:
            _require_queue(conn, row.queue)
            conn.execute(sql.load("schedule_put"), params)

    def delete_schedule(self, queue: str, name: str) -> bool:
        with self._write() as conn:
            return conn.execute(sql.load("schedule_delete"), {"queue": queue, "name": name}).rowcount > 0

    def list_schedules(self, queue: str) -> list[ScheduleRow]:
        with self._read() as conn:
            return [_schedule(row) for row in conn.execute(sql.load("schedules_of"), {"queue": queue})]

    def due_schedules(self, now_ms: int, limit: int, max_bytes: int = DUE_PAGE_BYTES) -> list[ScheduleRow]:
        """Rows are read one at a time, and the reading stops at the byte budget."""
        params = {"now_ms": now_ms, "limit": _limit(limit)}
        with self._read() as conn:
            return within_page(map(_schedule, conn.execute(sql.load("schedules_due"), params)), max_bytes)

    def advance_schedule(self, queue: str, name: str, expected_next_ms: int, next_run_ms: int) -> bool:
        params = {"queue": queue, "name": name, "expected_next_ms": expected_next_ms, "next_run_ms": next_run_ms}
        with self._write() as conn:
            return conn.execute(sql.load("schedule_advance"), params).rowcount > 0

    # -- bulk administration ----------------------------------------------------------------

    def retry_failed_jobs(
        self, queue: str, priority: int, attempts_to_allow: int, run_after_ms: int, limit: int, now_ms: int
    ) -> int:
        params = {
            "queue": queue,
            "priority": priority,
            "attempts": attempts_to_allow,
            "run_after_ms": run_after_ms,
            "limit": _limit(limit),
            "now_ms": now_ms,
        }
        concurrency = self.rules(queue).group_concurrency
        with self._write() as conn:
            _require_queue(conn, queue)
            rows = conn.execute(sql.load("retry_failed_jobs"), params).fetchall()
            promoted: dict[str, int] = {}
            for local_id, group in sorted(rows):  # rejoin in enqueue order
                if group is not None and groups.join(conn, queue, group, concurrency, promoted) == groups.WAITING:
                    groups.wait(conn, local_id)
            return len(rows)

    def delete_jobs(self, queue: str, where: JobFilter, limit: int) -> int:
        if where.body_regex is not None:
            body_filter = BodyFilter(where.body_regex, self._body_filter_budget, where.deadline)
            return self._delete_matching(_filter_params(queue, where), body_filter, limit, _require_queue)
        params = {**_filter_params(queue, where), "limit": _limit(limit)}
        with self._write() as conn:
            _require_queue(conn, queue)
            rows = conn.execute(sql.load("delete_jobs"), params).fetchall()
            self._jobs_deleted(conn, queue, rows)
            return len(rows)

    # -- maintenance (the monitor) ----------------------------------------------------------

    def resurrect_timed_out_jobs(
        self, queue: str, priority: int, claimed_before_ms: int, limit: int, now_ms: int
    ) -> Resurrected:
        """The timed-out claims are found in a read transaction (``timed_out_candidates.sql``:
        every job in progress of the queue and priority is read), then changed in a write of
        their own, so the write lock is held for the jobs resurrected, not for the walk; a pass
        that finds none writes nothing."""
        params: dict[str, Any] = {
            "queue": queue,
            "priority": priority,
            "claimed_before_ms": claimed_before_ms,
            "limit": _limit(limit),
        }
        with self._read() as conn:
            _require_queue(conn, queue)
            ids = [row[0] for row in conn.execute(sql.load("timed_out_candidates"), params)]
        if not ids:
            return Resurrected(0)
        params.update(ids=json.dumps(ids), status_limit=CUSTOM_STATUS_LIMIT, now_ms=now_ms)
        with self._write() as conn:
            _, expiring = _queue_info(conn, queue)
            rows: list[Any] = []
            if expiring:  # those past their expiry expire instead of a retry
                rows = [(row[0], 3) for row in conn.execute(sql.load("resurrect_expire"), params)]
                _count_expired(conn, queue, len(rows))
            rows += conn.execute(sql.load("resurrect_timed_out_jobs"), params).fetchall()
            self._leave_groups(conn, queue, rows)
            return Resurrected(len(rows), sum(1 for row in rows if row[1] == JobState.FAILED))

    def gc_finished_jobs(self, queue: str, priority: int, state: JobState, finished_before_ms: int, limit: int) -> int:
        params = {
            "queue": queue,
            "priority": priority,
            "state": int(state),
            "finished_before_ms": finished_before_ms,
            "limit": _limit(limit),
        }
        with self._write() as conn:
            _require_queue(conn, queue)
            ids = [row[0] for row in conn.execute(sql.load("gc_finished_jobs"), params)]
            if ids and conn.execute(sql.load("file_has_group_jobs")).fetchone() is not None:
                conn.execute(sql.load("group_jobs_forget"), {"ids": json.dumps(ids)})  # their group records
            if ids and conn.execute(sql.load("queue_has_dedup_keys"), {"queue": queue}).fetchone() is not None:
                forget = {"queue": queue, "ids": json.dumps(ids)}
                conn.execute(sql.load("dedup_keys_of_jobs_forget"), forget)  # their keys without a window
            return len(ids)

    # -- group accounting (see groups.py) -----------------------------------------------------

    def _leave_groups(self, conn: sqlite3.Connection, queue: str, ended: Sequence[Sequence[Any]]) -> None:
        """Jobs that were IN_PROGRESS ended in the ``(group_key, state)`` rows: a grouped one that
        is final (SUCCEEDED, FAILED) left its group."""
        changes = groups.changes_of(((row[0], row[1]) for row in ended), (JobState.SUCCEEDED, JobState.FAILED))
        if changes:
            groups.release(conn, queue, self.rules(queue).group_concurrency, changes)

    def _ended_unrun(self, conn: sqlite3.Connection, queue: str, rows: Sequence[Sequence[Any]]) -> None:
        """PENDING jobs that ended FAILED without running (cancelled, expired), ``(local_id, state,
        group_key, waiting)`` rows: a grouped one left its group, as an active job that ended (it
        was active) or as a waiting one deleted (it was waiting, and waits no longer)."""
        waited = [row[0] for row in rows if row[3] == 1]
        if waited:
            conn.execute(sql.load("group_jobs_unwait"), {"ids": json.dumps(waited)})
        changes: dict[str, groups.Change] = {}
        for _, _, group, waiting in rows:
            if group is not None:
                left, deleted = changes.get(group, (0, 0))
                changes[group] = (left, deleted + 1) if waiting == 1 else (left + 1, deleted)
        if changes:
            groups.release(conn, queue, self.rules(queue).group_concurrency, changes)

    def _jobs_deleted(self, conn: sqlite3.Connection, queue: str, rows: Sequence[Sequence[Any]]) -> None:
        """Deleted jobs, ``(group_key, state, local_id)`` rows: a grouped one's record goes, an
        unfinished one left its group, and the records of their keys without a window go."""
        groups.forget_jobs(conn, ((row[0], row[2]) for row in rows))
        if rows:
            ids = json.dumps([row[2] for row in rows])
            conn.execute(sql.load("dedup_keys_of_jobs_forget"), {"queue": queue, "ids": ids})
        changes = groups.changes_of(((row[0], row[1]) for row in rows), (JobState.PENDING, JobState.IN_PROGRESS))
        if changes:
            groups.release(conn, queue, self.rules(queue).group_concurrency, changes)

    # -- lifecycle --------------------------------------------------------------------------

    def ping(self) -> None:
        with self._read() as conn:
            conn.execute(sql.load("ping")).fetchone()

    def close(self) -> None:
        with self._lock:
            native, self._native = self._native, None
        if native is not None:
            native.close()  # answers every request queued first
        self._close_connection()  # commits any open write group first


def open_embedded_shards(settings: Settings) -> dict[str, EmbeddedStore]:
    """Open ``settings.embedded_num_shards`` shards named "1", "2", ... under ``settings.data_dir``
    (as ``EmbeddedDriver`` opens them).

    The data directory lock (``DataDirLock``) is the caller's to take, before this is called.
    """
    from pinlater.backends.embedded.driver import EmbeddedDriver

    driver = EmbeddedDriver()
    stores: dict[str, EmbeddedStore] = {}
    try:
        for name, config in driver.shard_configs(settings).items():
            stores[name] = driver.open_store(name, config, settings)
    except BaseException:
        for store in stores.values():
            store.close()
        raise
    return stores


def _insert_jobs(conn: sqlite3.Connection, queue: str, jobs: Sequence[NewJob], now_ms: int) -> list[int]:
    """Insert ``jobs`` as PENDING inside the caller's write transaction; their local ids."""
    if not jobs:
        return []
    rows = [
        {
            "queue": queue,
            "priority": job.priority,
            "attempts": job.attempts_allowed,
            "custom_status": job.custom_status[:CUSTOM_STATUS_LIMIT],
            "now_ms": now_ms,
            "run_after_ms": job.run_after_ms,
            "body": job.body,
        }
        for job in jobs
    ]
    conn.executemany(sql.load("enqueue_jobs"), rows)
    # AUTOINCREMENT gives each row the highest id ever used plus one, and this transaction
    # holds the write lock, so the batch got consecutive ids ending here.
    last = int(conn.execute(sql.load("last_job_id")).fetchone()[0])
    return list(range(last - len(rows) + 1, last + 1))


def _insert_keyed(
    conn: sqlite3.Connection, queue: str, job: KeyedJob, concurrency: int, now_ms: int, promoted: dict[str, int]
) -> int:
    """Insert one keyed job inside the caller's write transaction, joining its group if it has one
    (``promoted``: as ``groups.join`` takes it, shared by the request's jobs)."""
    state = 0 if job.group is None else groups.join(conn, queue, job.group, concurrency, promoted)
    new = job.job
    params = {
        "queue": queue,
        "priority": new.priority,
        "state": state,
        "attempts": new.attempts_allowed,
        "custom_status": new.custom_status[:CUSTOM_STATUS_LIMIT],
        "now_ms": now_ms,
        "run_after_ms": new.run_after_ms,
        "body": new.body,
        "expire_at_ms": job.expire_at_ms,
    }
    local_id = int(conn.execute(sql.load("enqueue_keyed_job"), params).fetchone()[0])
    if job.group is not None:
        groups.record(conn, queue, job.group, local_id, state)
    return local_id


def _room(conn: sqlite3.Connection, queue: str, num_priorities: int, rules: QueueRules, limit: int) -> int:
    """``limit``, cut to what the queue's maxInProgress share leaves (no cap: ``limit``)."""
    cap = rules.max_in_progress
    if cap is None or limit <= 0:
        return limit
    params = {"queue": queue, "num_priorities": num_priorities, "cap": cap}
    in_progress = int(conn.execute(sql.load("count_in_progress"), params).fetchone()[0])
    return max(0, min(limit, cap - in_progress))


def _first_items(by_claim: dict[tuple[int, str], list[int]], room: int) -> dict[tuple[int, str], list[int]]:
    """The first ``room`` items of ``by_claim``, in its order."""
    kept: dict[tuple[int, str], list[int]] = {}
    for key, ids in by_claim.items():
        if room <= 0:
            break
        kept[key] = ids[:room]
        room -= len(kept[key])
    return kept


Row = Sequence[Any]
Take = Callable[[list[int]], list[Row]]

_RATE_LOOK_FACTOR = 4
"""A rate-limited dequeue looks at no more than this many candidates per job asked for (plus
``_RATE_LOOK_EXTRA``): each one looked at is claimed or deferred past now, so the bound only
matters when many groups are out of tokens at once."""
_RATE_LOOK_EXTRA = 16


def _by_ids(conn: sqlite3.Connection, statement: str, params: dict[str, Any]) -> Take:
    """Claims (or reserves) chosen jobs by id with ``statement`` and ``params``."""

    def take(ids: list[int]) -> list[Row]:
        return conn.execute(statement, {**params, "ids": json.dumps(ids)}).fetchall()

    return take


def _claim_order(row: Row) -> tuple[int, int]:
    """(run_after, id): the order of a claim's rows (RETURNING has none)."""
    return row[6], row[0]


def _fitting(conn: sqlite3.Connection, statement: str, params: dict[str, Any], max_bytes: int, take: Take) -> list[Row]:
    """What a claim (or reservation) of up to ``params["limit"]`` jobs takes under a byte
    budget: the jobs ``statement`` (dequeue_jobs.sql, reserve_jobs.sql) finds, with their
    bodies' lengths only, as many of the first as the budget takes (``within_bytes``), then
    taken by id (``take``) with their bodies. The write lock is held throughout: the same jobs."""
    if params["limit"] <= 0:
        return []
    sizes = conn.execute(statement, params).fetchall()
    n = within_bytes((length or 0 for _, length in sizes), max_bytes)
    return take([local_id for local_id, _ in sizes[:n]]) if n else []


def _take_by_rate(
    conn: sqlite3.Connection, params: dict[str, Any], rate: float, take: Take, max_bytes: int
) -> list[Row]:
    """A dequeue (or reservation) of up to ``params["limit"]`` ready jobs where each grouped one
    needs a token of its group (``groups.take_token``); a job whose group has none is deferred
    to when its next token is due (``defer_job.sql``), so later dequeues skip it without a look.
    Jobs are chosen while the bodies chosen before hold fewer than ``max_bytes`` bytes."""
    limit = params["limit"]
    queue, now_ms = params["queue"], params["now_ms"]
    rows: list[Row] = []
    spent = 0  # the chosen jobs' body bytes
    budget = limit * _RATE_LOOK_FACTOR + _RATE_LOOK_EXTRA
    while len(rows) < limit and budget > 0:
        want = min(limit - len(rows), budget)
        candidates = conn.execute(sql.load("dequeue_candidates"), {**params, "limit": want}).fetchall()
        budget -= len(candidates)
        chosen: list[int] = []
        full = False
        for local_id, group, length in candidates:
            if (rows or chosen) and spent >= max_bytes:
                full = True
                break
            due = None if group is None else groups.take_token(conn, queue, group, rate, now_ms)
            if due is None:
                chosen.append(local_id)
                spent += length or 0
            else:
                conn.execute(sql.load("defer_job"), {"local_id": local_id, "run_after_ms": due})
        if chosen:
            rows += take(chosen)
        if full or len(candidates) < want:
            break
    return rows


def _ids_by_priority(items: Sequence[tuple[int, int]]) -> dict[int, list[int]]:
    by_priority: dict[int, list[int]] = {}
    for priority, local_id in items:
        by_priority.setdefault(priority, []).append(local_id)
    return by_priority


def _limit(limit: int) -> int:
    """A LIMIT value. SQLite reads a negative LIMIT as "no limit"; here it asks for nothing."""
    return max(limit, 0)


def _require_queue(conn: sqlite3.Connection, queue: str) -> int:
    """The queue's number of priorities; raises ``QueueNotFoundError`` for a missing queue."""
    return _queue_info(conn, queue)[0]


def _queue_info(conn: sqlite3.Connection, queue: str) -> tuple[int, bool]:
    """The queue's number of priorities and whether it ever had a job with an expiry (a row of
    ``expiries``); raises ``QueueNotFoundError`` for a missing queue."""
    row = conn.execute(sql.load("queue_get"), {"queue": queue}).fetchone()
    if row is None:
        raise QueueNotFoundError(queue)
    return int(row[0]), bool(row[1])


def _count_expired(conn: sqlite3.Connection, queue: str, count: int) -> None:
    """``count`` more of the queue's jobs expired (its row of ``expiries`` exists: it had one)."""
    if count:
        conn.execute(sql.load("expiries_add"), {"queue": queue, "count": count})


def _schedule(row: Sequence[Any]) -> ScheduleRow:
    """A ``ScheduleRow`` from a row of ``schedules_of.sql``'s columns."""
    return ScheduleRow(row[0], row[1], row[2], int(row[3]), bool(row[4]))


def _filter_params(queue: str, where: JobFilter) -> dict[str, Any]:
    """Parameters for the filter shared by count, scan and delete (see ``count_jobs.sql``)."""
    if where.future is None:
        bounds = (_I64_MIN, _I64_MAX)
    elif where.future:
        bounds = (where.now_ms, _I64_MAX)
    else:
        bounds = (_I64_MIN, where.now_ms)
    return {
        "queue": queue,
        "priority": where.priority,
        "state": int(where.state),
        # PENDING includes the jobs waiting in their groups (groups.WAITING); -2 matches nothing.
        "also_state": groups.WAITING if where.state == JobState.PENDING else -2,
        "run_after_gt": bounds[0],
        "run_after_le": bounds[1],
    }


def _record(row: Sequence[Any]) -> JobRecord:
    """A ``JobRecord`` from a lookup or scan row (column order of ``lookup_jobs.sql``)."""
    body = row[13] if len(row) > 13 else None
    return JobRecord(
        priority=row[0],
        local_id=row[1],
        state=JobState(row[2]),
        attempts_allowed=row[3],
        attempts_remaining=row[4],
        custom_status=row[5],
        created_at_ms=row[6],
        run_after_ms=row[7],
        updated_at_ms=row[8],
        claim_descriptor=row[9],
        body=None if body is None else bytes(body),
        dedup_key=row[10],
        group_key=row[11],
        expire_at_ms=row[12],
    )
