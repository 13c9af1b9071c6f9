"""``MySQLStore``: one shard of the MySQL backend, in the original PinLater schema.

Layout (``names.py``): a database ``plq_{shard}_{queue}`` per queue, a table ``jobs_p{priority}``
per priority, DDL in ``sql/schema/``. Every operation is one transaction of statements from
``sql/`` (``queries.py``), batched: enqueue is one multi-row INSERT per priority, dequeue one
``UPDATE ... LIMIT`` stamping the claim plus one SELECT by claim, acks one UPDATE per (priority,
outcome, appended status[, retry delay]) group.

Time: every "now" is a parameter. Columns are TIMESTAMP(3) in databases created here, so
milliseconds survive; databases the original created have TIMESTAMP (seconds) and the server
drops the milliseconds when writing them. The session time zone is UTC (``session_setup.sql``), so
datetimes cross the wire as UTC. Times are clamped to TIMESTAMP's range (1970-01-01 00:00:01 to
2038-01-19 03:14:07.999 UTC).

Errors: a body over ``MAX_BODY_BYTES`` (the BLOB column) is ENQUEUE_REJECTED, checked before
any statement runs; a missing database or table is ``QueueNotFoundError``; deadlocks, lock wait
timeouts and lost connections are retried ``num_auto_retries`` times, then
``ShardConnectionError``, as is any failure to connect; a bad body regex is ``ValueError``. A
retry after a connection lost during COMMIT may repeat a transaction that did commit (an enqueue
then inserts its jobs twice): delivery is at least once, as in the original, which retried the
same way. A lookup naming a priority the queue has no table for finds nothing there.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

import pymysql

from pinlater.backends.base import (
    RESERVATION_PREFIX,
    AckItem,
    CheckpointItem,
    ClaimedJob,
    JobFilter,
    JobRecord,
    JobState,
    NewJob,
)
from pinlater.backends.mysql import names, queries
from pinlater.backends.mysql.config import MySQLShardConfig
from pinlater.backends.mysql.pool import (
    RETRYABLE_ERRORS,
    ConnectionPool,
    PoolTimeout,
    error_code,
    is_connection_failure,
)
from pinlater.errors import ErrorCode, PinLaterError, QueueNotFoundError, ShardConnectionError

log = logging.getLogger(__name__)

T = TypeVar("T")
Cursor = Any  # pymysql.cursors.Cursor (PyMySQL ships no type information)

#: The original's CUSTOM_STATUS_SIZE_BYTES, the width of the custom_status column.
CUSTOM_STATUS_LIMIT = 5000
#: The claim_descriptor column is VARCHAR(200).
MAX_CLAIM_LENGTH = 200
#: The body column is a BLOB (in the original's tables too): at most 2**16 - 1 bytes.
MAX_BODY_BYTES = 65_535

_EPOCH = datetime(1970, 1, 1)
_MS = timedelta(milliseconds=1)
_TS_MIN_MS = 1_000  # 1970-01-01 00:00:01 UTC
_TS_MAX_MS = 2_147_483_647_999  # 2038-01-19 03:14:07.999 UTC
_NO_TABLE_ERROR = 1146
_NO_QUEUE_ERRORS = frozenset({1049, _NO_TABLE_ERROR})
_NAME_TOO_LONG_ERRORS = frozenset({1059, 1102})
_REGEX_ERROR = 1139
_ENQUEUE_ROW_WIDTH = 8
_NO_LIMIT = 2**62

#: How ids of a multi-row INSERT are recovered; None picks from the server's settings.
INSERT_ID_STRATEGIES = ("last_insert_id", "returning", "per_row")


def to_db_time(ms: int) -> datetime:
    """Milliseconds since the epoch as a naive UTC datetime, clamped to TIMESTAMP's range."""
    return _EPOCH + _MS * min(max(ms, _TS_MIN_MS), _TS_MAX_MS)


def from_db_time(value: object) -> int:
    """A TIMESTAMP read back (naive UTC datetime) as milliseconds since the epoch; zero dates are 0."""
    if isinstance(value, datetime):
        return (value - _EPOCH) // _MS
    return 0


class MySQLStore:
    """``ShardStore`` for one shard on one MySQL/MariaDB server. Thread-safe."""

    def __init__(
        self,
        name: str,
        config: MySQLShardConfig,
        *,
        pool_size: int = 8,
        socket_timeout: float = 5.0,
        num_auto_retries: int = 1,
        insert_id_strategy: str | None = None,
        longest_shard_name: Callable[[], str] | None = None,
    ) -> None:
        """``longest_shard_name`` gives the longest shard name of the whole config (the driver
        passes it): ``create_queue`` checks the queue's database name against it, so a name
        too long for any shard is created on none."""
        if insert_id_strategy is not None and insert_id_strategy not in INSERT_ID_STRATEGIES:
            raise ValueError(f"insert_id_strategy must be one of {INSERT_ID_STRATEGIES}")
        self._name = names.check_shard_name(name)
        self.config = config
        self.num_auto_retries = num_auto_retries
        self.insert_id_strategy = insert_id_strategy
        self._longest_shard_name = longest_shard_name
        self.pool = ConnectionPool(
            host=config.master.host,
            port=config.master.port,
            user=config.user,
            password=config.passwd,
            size=pool_size,
            timeout=socket_timeout,
        )

    @property
    def name(self) -> str:
        return self._name

    @property
    def custom_status_limit(self) -> int:
        return CUSTOM_STATUS_LIMIT

    # -- plumbing ---------------------------------------------------------------------------

    def _run(self, queue: str | None, op: Callable[[Cursor], T]) -> T:
        """Run ``op`` in a transaction, retrying deadlocks and lost connections, mapping errors."""
        attempt = 0
        while True:
            try:
                with self.pool.transaction() as cur:
                    return op(cur)
            except PoolTimeout as exc:
                raise ShardConnectionError(self._name, str(exc)) from exc
            except pymysql.err.MySQLError as exc:
                code = error_code(exc)
                if code in _NO_QUEUE_ERRORS and queue is not None:
                    raise QueueNotFoundError(queue) from exc
                if code == _REGEX_ERROR:
                    raise ValueError(f"invalid body regex: {exc.args[1] if len(exc.args) > 1 else exc}") from exc
                retryable = code in RETRYABLE_ERRORS or isinstance(exc, pymysql.err.InterfaceError)
                if retryable and attempt < self.num_auto_retries:
                    attempt += 1
                    log.info("shard %s: retrying after MySQL error %s (attempt %d)", self._name, code, attempt)
                    continue
                if retryable or is_connection_failure(exc):
                    raise ShardConnectionError(self._name, f"MySQL error {code}: {_message(exc)}") from exc
                raise
            except (OSError, EOFError) as exc:
                raise ShardConnectionError(self._name, f"{type(exc).__name__}: {exc}") from exc

    def _table(self, queue: str, priority: int) -> str:
        return names.quoted_table(self._name, queue, priority)

    # -- queues -----------------------------------------------------------------------------

    def create_queue(self, queue: str, num_priorities: int) -> None:
        if self._longest_shard_name is not None:
            # Fails on every shard alike, before any of them creates anything.
            names.database_name(max(self._name, self._longest_shard_name(), key=len), queue)
        database = names.quoted_database(self._name, queue)
        tables = [self._table(queue, priority) for priority in range(1, num_priorities + 1)]

        def op(cur: Cursor) -> None:
            cur.execute(queries.CREATE_DATABASE.render(database=database))
            for table in tables:
                cur.execute(queries.CREATE_JOBS_TABLE.render(table=table))

        try:
            self._run(None, op)
        except pymysql.err.MySQLError as exc:
            if error_code(exc) in _NAME_TOO_LONG_ERRORS:
                raise PinLaterError(ErrorCode.QUEUE_NAME_TOO_LONG, f"queue name too long: {queue}") from exc
            raise

    def delete_queue(self, queue: str) -> None:
        database = names.quoted_database(self._name, queue)
        self._run(None, lambda cur: cur.execute(queries.DROP_DATABASE.render(database=database)))

    def get_queue_names(self) -> set[str]:
        def op(cur: Cursor) -> set[str]:
            cur.execute(queries.LIST_QUEUE_DATABASES.render(), (names.queue_database_pattern(self._name),))
            found = (names.queue_from_database(str(row[0]), self._name) for row in cur.fetchall())
            return {queue for queue in found if queue is not None}

        return self._run(None, op)

    # -- the job lifecycle ------------------------------------------------------------------

    def enqueue_jobs(self, queue: str, jobs: Sequence[NewJob], now_ms: int) -> list[int]:
        if not jobs:
            return []
        by_priority: dict[int, list[int]] = defaultdict(list)
        for index, job in enumerate(jobs):
            _check_body_size(job.body, f"the body of job {index} (counting from 0) of the request")
            by_priority[job.priority].append(index)
        tables = {priority: self._table(queue, priority) for priority in by_priority}
        now = to_db_time(now_ms)

        def op(cur: Cursor) -> list[int]:
            ids = [0] * len(jobs)
            for priority, indexes in by_priority.items():
                for chunk in self._insert_chunks(indexes, jobs):
                    rows = [_enqueue_row(jobs[i], now) for i in chunk]
                    for index, local_id in zip(chunk, self._insert(cur, tables[priority], rows), strict=True):
                        ids[index] = local_id
            return ids

        return self._run(queue, op)

    def _insert_chunks(self, indexes: list[int], jobs: Sequence[NewJob]) -> list[list[int]]:
        """Split one priority's jobs so each INSERT stays well under max_allowed_packet."""
        info = self.pool.server_info
        budget = (info.max_allowed_packet if info else 16 * 1024 * 1024) // 2
        chunks: list[list[int]] = [[]]
        size = 0
        for index in indexes:
            job = jobs[index]
            # Escaped bytes take up to twice their size; a character up to 4 bytes.
            cost = 2 * len(job.body) + 4 * min(len(job.custom_status), CUSTOM_STATUS_LIMIT) + 200
            if chunks[-1] and size + cost > budget:
                chunks.append([])
                size = 0
            chunks[-1].append(index)
            size += cost
        return chunks

    def _insert(self, cur: Cursor, table: str, rows: list[tuple[Any, ...]]) -> list[int]:
        """One multi-row INSERT; the new ids in row order."""
        strategy = self.insert_id_strategy or self._default_insert_id_strategy()
        if strategy == "returning":
            cur.execute(
                queries.ENQUEUE_JOBS_RETURNING.render(table=table, rows=(len(rows), _ENQUEUE_ROW_WIDTH)),
                [value for row in rows for value in row],
            )
            ids = [int(row[0]) for row in cur.fetchall()]
        elif strategy == "last_insert_id":
            cur.execute(
                queries.ENQUEUE_JOBS.render(table=table, rows=(len(rows), _ENQUEUE_ROW_WIDTH)),
                [value for row in rows for value in row],
            )
            first = int(cur.lastrowid)
            info = self.pool.server_info
            step = info.auto_increment_increment if info else 1
            ids = [first + k * step for k in range(cur.rowcount)]
        else:
            ids = []
            single = queries.ENQUEUE_JOBS.render(table=table, rows=(1, _ENQUEUE_ROW_WIDTH))
            for row in rows:
                cur.execute(single, row)
                ids.append(int(cur.lastrowid))
        if len(ids) != len(rows):
            raise RuntimeError(f"inserted {len(rows)} jobs into {table} but recovered {len(ids)} ids")
        return ids

    def _default_insert_id_strategy(self) -> str:
        info = self.pool.server_info
        if info is None or info.consecutive_insert_ids:
            return "last_insert_id"
        return "returning" if info.supports_insert_returning else "per_row"

    def dequeue_jobs(
        self, queue: str, priority: int, limit: int, claim: str, now_ms: int, dry_run: bool
    ) -> list[ClaimedJob]:
        if limit <= 0:
            return []
        if len(claim) > MAX_CLAIM_LENGTH:
            raise ValueError(f"claim descriptor longer than {MAX_CLAIM_LENGTH} characters")
        table = self._table(queue, priority)
        now = to_db_time(now_ms)

        def peek(cur: Cursor) -> list[ClaimedJob]:
            cur.execute(queries.PEEK_JOBS.render(table=table), (now, limit))
            return [_claimed_job(row) for row in cur.fetchall()]

        def claim_jobs(cur: Cursor) -> list[ClaimedJob] | None:
            claimed = cur.execute(
                queries.DEQUEUE_JOBS.render(table=table),
                (claim, now, now, now, RESERVATION_PREFIX, RESERVATION_PREFIX, limit),
            )
            if not claimed:
                return []
            cur.execute(queries.SELECT_CLAIMED_JOBS.render(table=table), (claim,))
            rows = cur.fetchall()
            if len(rows) != claimed:
                return None  # the claim was not unique: redo telling our rows from the others
            return [_claimed_job(row) for row in rows]

        def claim_jobs_reused_claim(cur: Cursor) -> list[ClaimedJob]:
            select_claimed = queries.SELECT_CLAIMED_JOBS.render(table=table)
            cur.execute(select_claimed, (claim,))
            before = {int(row[0]) for row in cur.fetchall()}
            cur.execute(
                queries.DEQUEUE_JOBS.render(table=table),
                (claim, now, now, now, RESERVATION_PREFIX, RESERVATION_PREFIX, limit),
            )
            cur.execute(select_claimed, (claim,))
            return [_claimed_job(row) for row in cur.fetchall() if int(row[0]) not in before]

        if dry_run:
            return self._run(queue, peek)
        jobs = self._run(queue, _rollback_if_none(claim_jobs))
        if jobs is None:
            jobs = self._run(queue, claim_jobs_reused_claim)
        return jobs

    # -- reservations (the dequeue broker) ----------------------------------------------------
    # A reserved job: claim_descriptor = the reservation, updated_at = its expiry (see
    # reserve_jobs.sql). Live while updated_at > now.

    def reserve_jobs(
        self, queue: str, priority: int, limit: int, reservation: str, now_ms: int, hold_ms: int
    ) -> list[ClaimedJob]:
        if len(reservation) > MAX_CLAIM_LENGTH:
            raise ValueError(f"reservation longer than {MAX_CLAIM_LENGTH} characters")
        table = self._table(queue, priority)
        now = to_db_time(now_ms)
        prefix = RESERVATION_PREFIX

        def op(cur: Cursor) -> list[ClaimedJob]:
            if limit <= 0:
                cur.execute(queries.PEEK_JOBS.render(table=table), (now, 0))  # QUEUE_NOT_FOUND check
                return []
            # Ours already live before this call are not part of its answer.
            select = queries.SELECT_RESERVED_JOBS.render(table=table)
            cur.execute(select, (reservation, now))
            before = {int(row[0]) for row in cur.fetchall()}
            until = to_db_time(now_ms + hold_ms)
            reserved = cur.execute(
                queries.RESERVE_JOBS.render(table=table), (reservation, until, now, now, prefix, prefix, limit)
            )
            if not reserved:
                return []
            cur.execute(select, (reservation, now))
            return [_claimed_job(row) for row in cur.fetchall() if int(row[0]) not in before]

        return self._run(queue, op)

    def claim_reserved(
        self, queue: str, items: Sequence[tuple[int, int]], reservation: str, claim: str, now_ms: int
    ) -> list[tuple[int, int]]:
        by_priority = _ids_by_priority(items)
        tables = {priority: self._table(queue, priority) for priority in by_priority}
        now = to_db_time(now_ms)

        def op(cur: Cursor) -> list[tuple[int, int]]:
            claimed: list[tuple[int, int]] = []
            for priority, ids in sorted(by_priority.items()):
                table = tables[priority]
                n = len(ids)
                if not cur.execute(
                    queries.CLAIM_RESERVED_JOBS.render(table=table, ids=n), (claim, now, reservation, now, *ids)
                ):
                    continue
                cur.execute(queries.SELECT_CLAIMED_IDS.render(table=table, ids=n), (claim, *ids))
                claimed += [(priority, int(row[0])) for row in cur.fetchall()]
            return claimed

        if not items:
            return []
        return self._run(queue, op)

    def release_reservations(self, queue: str, items: Sequence[tuple[int, int]], reservation: str, now_ms: int) -> int:
        by_priority = _ids_by_priority(items)
        tables = {priority: self._table(queue, priority) for priority in by_priority}
        now = to_db_time(now_ms)

        def op(cur: Cursor) -> int:
            released = 0
            for priority, ids in sorted(by_priority.items()):
                sql = queries.RELEASE_RESERVATIONS.render(table=tables[priority], ids=len(ids))
                released += int(cur.execute(sql, (now, reservation, now, *ids)))
            return released

        if not items:
            return 0
        return self._run(queue, op)

    def ack_jobs(self, queue: str, succeeded: Sequence[AckItem], failed: Sequence[AckItem], now_ms: int) -> None:
        if not succeeded and not failed:
            return
        now = to_db_time(now_ms)
        successes: dict[tuple[int, str], list[int]] = defaultdict(list)
        for item in succeeded:
            successes[(item.priority, item.append_custom_status)].append(item.local_id)
        failures: dict[tuple[int, str, int], list[int]] = defaultdict(list)
        for item in failed:
            failures[(item.priority, item.append_custom_status, item.retry_delay_ms)].append(item.local_id)
        priorities = {key[0] for key in successes} | {key[0] for key in failures}
        tables = {priority: self._table(queue, priority) for priority in priorities}

        def op(cur: Cursor) -> None:
            # Sorted groups and ids: concurrent acks lock rows in one order, which avoids deadlocks.
            for (priority, status), ids in sorted(successes.items()):
                sql = queries.ACK_SUCCEEDED_JOBS.render(table=tables[priority], ids=len(ids))
                cur.execute(sql, (status, CUSTOM_STATUS_LIMIT, now, *sorted(ids)))
            for (priority, status, delay), ids in sorted(failures.items()):
                sql = queries.ACK_FAILED_JOBS.render(table=tables[priority], ids=len(ids))
                cur.execute(sql, (to_db_time(now_ms + delay), status, CUSTOM_STATUS_LIMIT, now, *sorted(ids)))

        self._run(queue, op)

    def checkpoint_jobs(self, queue: str, items: Sequence[CheckpointItem], source: str, now_ms: int) -> int:
        if not items:
            return 0
        for item in items:
            if item.new_body is not None:
                _check_body_size(item.new_body, f"the new body of checkpointed job {item.local_id}")
        tables = {item.priority: self._table(queue, item.priority) for item in items}
        now = to_db_time(now_ms)

        def op(cur: Cursor) -> int:
            changed = 0
            for item in items:
                changed += cur.execute(
                    queries.CHECKPOINT_JOB.render(table=tables[item.priority]),
                    (
                        int(JobState.PENDING if item.move_to_pending else JobState.IN_PROGRESS),
                        to_db_time(item.run_after_ms),
                        now,
                        item.new_body,
                        item.attempts_allowed,
                        item.attempts_allowed,
                        item.prepend_custom_status,
                        item.prepend_custom_status,
                        CUSTOM_STATUS_LIMIT,
                        int(item.move_to_pending),
                        item.local_id,
                        source,
                    ),
                )
            return changed

        return self._run(queue, op)

    # -- reads ------------------------------------------------------------------------------

    def lookup_jobs(self, queue: str, keys: Sequence[tuple[int, int]], include_body: bool) -> list[JobRecord]:
        if not keys:
            return []
        by_priority: dict[int, list[int]] = defaultdict(list)
        for priority, local_id in keys:
            if local_id not in by_priority[priority]:
                by_priority[priority].append(local_id)
        tables = {priority: self._table(queue, priority) for priority in by_priority}

        def op(cur: Cursor) -> list[JobRecord]:
            found: dict[tuple[int, int], JobRecord] = {}
            missing_tables: list[pymysql.err.MySQLError] = []
            for priority, ids in by_priority.items():
                try:
                    cur.execute(
                        queries.LOOKUP_JOBS.render(table=tables[priority], ids=len(ids)), (int(include_body), *ids)
                    )
                except pymysql.err.ProgrammingError as exc:
                    # A descriptor of a priority the queue lacks finds nothing; the others still
                    # do. (A statement error leaves the transaction usable.)
                    if error_code(exc) != _NO_TABLE_ERROR:
                        raise
                    missing_tables.append(exc)
                    continue
                for row in cur.fetchall():
                    record = _job_record(priority, row, row[9] if include_body else None)
                    found[(priority, record.local_id)] = record
            if len(missing_tables) == len(by_priority):
                raise missing_tables[0]  # no table at all: the queue is not here (QueueNotFoundError)
            return [found.pop(key) for key in keys if key in found]

        return self._run(queue, op)

    def count_jobs(self, queue: str, where: JobFilter, limit: int | None) -> int:
        table = self._table(queue, where.priority)

        def op(cur: Cursor) -> int:
            cap = _NO_LIMIT if limit is None else limit
            cur.execute(queries.COUNT_JOBS.render(table=table), (*_filter_args(where), cap))
            row = cur.fetchone()
            return int(row[0]) if row else 0

        return self._run(queue, op)

    def scan_jobs(self, queue: str, where: JobFilter, limit: int) -> list[JobRecord]:
        table = self._table(queue, where.priority)

        def op(cur: Cursor) -> list[JobRecord]:
            cur.execute(queries.SCAN_JOBS.render(table=table), (*_filter_args(where), limit))
            return [_job_record(where.priority, row, None) for row in cur.fetchall()]

        return self._run(queue, op)

    # -- bulk administration ----------------------------------------------------------------

    def retry_failed_jobs(
        self, queue: str, priority: int, attempts_to_allow: int, run_after_ms: int, limit: int, now_ms: int
    ) -> int:
        sql = queries.RETRY_FAILED_JOBS.render(table=self._table(queue, priority))
        args = (attempts_to_allow, to_db_time(run_after_ms), to_db_time(now_ms), limit)
        return self._run(queue, lambda cur: int(cur.execute(sql, args)))

    def delete_jobs(self, queue: str, where: JobFilter, limit: int) -> int:
        sql = queries.DELETE_JOBS.render(table=self._table(queue, where.priority))
        args = (*_filter_args(where), limit)
        return self._run(queue, lambda cur: int(cur.execute(sql, args)))

    # -- maintenance (the monitor) ----------------------------------------------------------

    def resurrect_timed_out_jobs(
        self, queue: str, priority: int, claimed_before_ms: int, limit: int, now_ms: int
    ) -> int:
        sql = queries.RESURRECT_TIMED_OUT_JOBS.render(table=self._table(queue, priority))
        now = to_db_time(now_ms)
        args = (now, now, to_db_time(claimed_before_ms), limit)
        return self._run(queue, lambda cur: int(cur.execute(sql, args)))

    def gc_finished_jobs(self, queue: str, priority: int, state: JobState, finished_before_ms: int, limit: int) -> int:
        sql = queries.GC_FINISHED_JOBS.render(table=self._table(queue, priority))
        args = (int(state), to_db_time(finished_before_ms), limit)
        return self._run(queue, lambda cur: int(cur.execute(sql, args)))

    # -- lifecycle --------------------------------------------------------------------------

    def ping(self) -> None:
        self._run(None, lambda cur: cur.execute(queries.PING.render()))

    def warm_up(self) -> bool:
        """Open a first connection (reading the server's settings) without failing: a shard that
        is down at start-up is reported here and retried by later calls. True if it answered."""
        try:
            self.ping()
        except ShardConnectionError as exc:
            log.warning("MySQL shard %s is not reachable yet: %s", self._name, exc.detail)
            return False
        return True

    def close(self) -> None:
        self.pool.close()

    def __repr__(self) -> str:
        return f"MySQLStore({self._name!r}, {self.config.master.host}:{self.config.master.port})"


def _ids_by_priority(items: Sequence[tuple[int, int]]) -> dict[int, list[int]]:
    """Local ids by priority, each list sorted (rows are locked in one order: no deadlocks)."""
    by_priority: dict[int, list[int]] = defaultdict(list)
    for priority, local_id in items:
        by_priority[priority].append(local_id)
    return {priority: sorted(ids) for priority, ids in by_priority.items()}


def _rollback_if_none(op: Callable[[Cursor], T | None]) -> Callable[[Cursor], T | None]:
    """``op`` whose None result rolls the transaction back (and is still returned)."""

    def wrapped(cur: Cursor) -> T | None:
        result = op(cur)
        if result is None:
            cur.connection.rollback()
        return result

    return wrapped


def _check_body_size(body: bytes, what: str) -> None:
    if len(body) > MAX_BODY_BYTES:
        raise PinLaterError(
            ErrorCode.ENQUEUE_REJECTED,
            f"{what} is {len(body)} bytes; the MySQL backend stores bodies of at most {MAX_BODY_BYTES} bytes (BLOB)",
        )


def _message(exc: BaseException) -> str:
    return str(exc.args[1]) if len(exc.args) > 1 else str(exc)


def _enqueue_row(job: NewJob, now: datetime) -> tuple[Any, ...]:
    return (
        int(JobState.PENDING),
        job.attempts_allowed,
        job.attempts_allowed,
        job.custom_status[:CUSTOM_STATUS_LIMIT],
        now,
        now,
        to_db_time(job.run_after_ms),
        job.body,
    )


def _filter_args(where: JobFilter) -> tuple[Any, ...]:
    """(state, run_after from, run_after to, regex, regex) for count/scan/delete."""
    if where.future is None:
        low, high = _TS_MIN_MS, _TS_MAX_MS
    elif where.future:
        low, high = where.now_ms + 1, _TS_MAX_MS
    else:
        low, high = _TS_MIN_MS, where.now_ms
    return (int(where.state), to_db_time(low), to_db_time(high), where.body_regex, where.body_regex)


def _claimed_job(row: Sequence[Any]) -> ClaimedJob:
    # local_id, body, attempts_allowed, attempts_remaining, created_at, updated_at
    return ClaimedJob(
        local_id=int(row[0]),
        body=bytes(row[1]),
        attempts_allowed=int(row[2] or 0),
        attempts_remaining=int(row[3]),
        created_at_ms=from_db_time(row[4]),
        updated_at_ms=from_db_time(row[5]),
    )


def _job_record(priority: int, row: Sequence[Any], body: bytes | None) -> JobRecord:
    # local_id, state, attempts_allowed, attempts_remaining, custom_status, created_at, run_after,
    # updated_at, claim_descriptor
    return JobRecord(
        priority=priority,
        local_id=int(row[0]),
        state=JobState(int(row[1])),
        attempts_allowed=int(row[2] or 0),
        attempts_remaining=int(row[3]),
        custom_status=row[4] or "",
        created_at_ms=from_db_time(row[5]),
        run_after_ms=from_db_time(row[6]),
        updated_at_ms=from_db_time(row[7]),
        claim_descriptor=row[8],
        body=None if body is None else bytes(body),
    )
