"""``MySQLStore``: one shard of the MySQL backend, in the original PinLater schema.

Layout (``names.py``): a database ``plq_{shard}_{queue}`` per queue, a table ``jobs_p{priority}``
per priority, and ``dedup_keys``, ``claim_lock``, ``expiring``, ``expired_count`` and
``schedules`` (ours, made on demand: ``dedup_keys.py``, ``claim_cap.py``, ``expiry.py``,
``schedule_rows.py``), DDL in ``sql/schema/``. Every operation is one transaction of statements
from ``sql/`` (``queries.py``), batched: enqueue is one multi-row INSERT per priority, dequeue one
``UPDATE ... LIMIT`` stamping the claim plus one SELECT by claim, acks one UPDATE per (priority,
outcome, appended status[, retry delay]) group.

Job control (#18): a job's expiry is a nullable column of its row, added to tables made without
it at their first use (``expiry.py``: where and why); cancel, paged scans and queue depth are in
``control.py``.

Queue rules (``set_queue_rules``): ``max_in_progress`` is kept under a per-queue lock row, taken
only by the claims of a capped queue (``claim_cap.py``). Ordered groups are refused
(``groups_refused``): the original schema, a table per priority, has no place for a group, whose
jobs span priorities; so ``group_concurrency`` and ``group_jobs_per_second`` have nothing to act on.

Time: every "now" is a parameter; ``db_time.py`` converts (milliseconds survive in databases
created here) and clamps to TIMESTAMP's range. The session time zone is UTC
(``session_setup.sql``), so datetimes cross the wire as UTC.

Bodies: tables created here hold bodies up to a MEDIUMBLOB (16 MiB - 1), the original's up to a
BLOB (64 KiB - 1); a body longer than its table holds is ENQUEUE_REJECTED naming the table and
the ``ALTER TABLE`` that lifts the limit, checked before any statement runs (``bodies.py``), and
never truncated (sessions run in strict mode).

Errors: a missing database or table is ``QueueNotFoundError``; deadlocks, lock wait
timeouts and lost connections are retried ``num_auto_retries`` times, then
``ShardConnectionError``, as is any failure to connect; a bad body regex is ``ValueError`` (body
filters are matched in the server: ``body_filtered.py``). A
stale pooled connection (after a server restart) is replaced before use, or once it fails
before COMMIT, at no cost to ``num_auto_retries``. A transaction whose COMMIT was cut off is
repeated only where a repeat is harmless: not an enqueue (it would insert its jobs twice, where
the original retried and duplicated), nor the limit-bounded bulk writes retry_failed_jobs and
delete_jobs (``transactions.py``). A lookup naming a priority the queue has no table for finds nothing there.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence

import pymysql

from pinlater.backends.base import (
    CANCELLED,
    DEFAULT_RULES,
    DEQUEUE_BYTES,
    DUE_PAGE_BYTES,
    EXPIRED,
    RESERVATION_PREFIX,
    AckItem,
    CheckpointItem,
    ClaimedJob,
    CountKey,
    Enqueued,
    GroupCounts,
    HotPath,
    JobFilter,
    JobRecord,
    JobState,
    KeyedJob,
    LookupOverBudget,
    NewJob,
    Offload,
    QueueRules,
    Resurrected,
    ScanCursor,
    ScheduleRow,
    within_bytes,
)
from pinlater.backends.body_filter import DEFAULT_BUDGET_SECONDS, BodyFilter
from pinlater.backends.dedup_sweep import SweepCursors
from pinlater.backends.mysql import (
    body_filtered,
    claim_cap,
    control,
    dedup_keys,
    expiry,
    job_rows,
    names,
    queries,
    reservations,
    schedule_rows,
)
from pinlater.backends.mysql.bodies import BLOB_BYTES, MEDIUMBLOB_BYTES, BodyLimits, jobs_tables, parse_columns
from pinlater.backends.mysql.config import MySQLShardConfig
from pinlater.backends.mysql.db_time import from_db_time, to_db_time
from pinlater.backends.mysql.inserts import DEFAULT_MAX_ALLOWED_PACKET, INSERT_ID_STRATEGIES, insert_jobs
from pinlater.backends.mysql.job_rows import CUSTOM_STATUS_LIMIT, MAX_CLAIM_LENGTH
from pinlater.backends.mysql.native_hot import NativeMySQLHotPath
from pinlater.backends.mysql.pool import ConnectionPool, error_code
from pinlater.backends.mysql.text_charsets import TEXT_REFUSED_ERRORS, fit_text
from pinlater.backends.mysql.transactions import (
    NAME_TOO_LONG_ERRORS,
    NO_TABLE_ERROR,
    Cursor,
    T,
    fitted,
    rollback_unless_list,
    run_transaction,
)
from pinlater.backends.threaded import BlockingStore
from pinlater.errors import ErrorCode, PinLaterError, QueueNotFoundError, ShardConnectionError

__all__ = [
    "BLOB_BYTES",
    "CUSTOM_STATUS_LIMIT",
    "GROUPS_REFUSED",
    "INSERT_ID_STRATEGIES",
    "MAX_CLAIM_LENGTH",
    "MEDIUMBLOB_BYTES",
    "MySQLStore",
    "from_db_time",
    "to_db_time",
]

log = logging.getLogger(__name__)

_NO_LIMIT = 2**62
#: MySQL's ER_DATA_TOO_LONG: in strict mode, a value too long for its column.
DATA_TOO_LONG_ERROR = 1406

GROUPS_REFUSED = "is not kept by MySQL shards: the original schema has no place for a group"
"""Why a MySQL shard refuses ordered groups (``groups_refused``): the words that follow
"groupKey (ordered groups) " in the ENQUEUE_REJECTED message."""

QUEUE_COUNTS_TABLES_PER_STATEMENT = 1000
"""Jobs tables counted per statement of ``queue_counts`` (one UNION ALL part each): a bound on
the tables one statement opens at once (MariaDB's table_open_cache is 2000 by default) and on
its size (about 150 bytes a part)."""


#: A dequeue or reservation of a queue with expiring jobs first expires up to this many due ones
#: (``MySQLStore.expire_met``) ...
LAZY_EXPIRY_LIMIT = 256
#: ... at most once in this long per queue and store.
LAZY_EXPIRY_EVERY_MS = 100
#: A lazy pass that expired its whole ``LAZY_EXPIRY_LIMIT`` met a backlog (jobs that expired
#: together): a thread of the store's expires the rest, in calls of this many, one after another
#: until three in a row expire none (``MySQLStore.expire_met``). Every dequeue's statement reads
#: past each expired row ahead of the first live one (0.6 s a dequeue behind 200,000 here), so
#: the backlog is ended as fast as MySQL takes it, not 256 a dequeue.
EXPIRY_DRAIN_LIMIT = 1000
#: Queues of one store drained at once, at most (each drain holds one pooled connection per call).
MAX_EXPIRY_DRAINS = 2
#: Seconds between the GC's calls per table and state without the run_after bound
#: (``sql/gc_finished_jobs_all.sql``), which may read every finished row of the table.
GC_FULL_SWEEP_SECONDS = 3600.0
#: Tables whose last such call is remembered at most (all forgotten beyond it).
MAX_GC_SWEPT_KEPT = 100_000


#: The queue's tables of ours the monitor has work in while they hold a row (``monitor_idle``).
_MONITORED_SIDE_TABLES = {
    names.EXPIRING_TABLE: names.quoted_expiring_table,
    names.DEDUP_KEYS_TABLE: names.quoted_dedup_keys_table,
}


def _again_if_dropped(cur: Cursor, read: Callable[[Cursor], T]) -> T:
    """``read(cur)``, once more if a table it named from the data dictionary was dropped
    meanwhile (a queue deleted): reads over every queue's tables (``queue_counts``,
    ``monitor_idle``) list them, then read them."""
    try:
        return read(cur)
    except pymysql.err.ProgrammingError as exc:
        if error_code(exc) != NO_TABLE_ERROR:
            raise
        return read(cur)


class MySQLStore(BlockingStore):
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
        body_filter_budget_seconds: float = DEFAULT_BUDGET_SECONDS,
    ) -> None:
        """``longest_shard_name`` gives the longest shard name of the whole config (the driver
        passes it): ``create_queue`` checks the queue's database name against it, so a name
        too long for any shard is created on none."""
        if insert_id_strategy is not None and insert_id_strategy not in INSERT_ID_STRATEGIES:
            raise ValueError(f"insert_id_strategy must be one of {INSERT_ID_STRATEGIES}")
        self._name = names.check_shard_name(name)
        self.config = config
        self.num_auto_retries = num_auto_retries
        self.pool_size = pool_size
        self.socket_timeout = socket_timeout
        self.insert_id_strategy = insert_id_strategy
        self._longest_shard_name = longest_shard_name
        self._body_filter_budget = body_filter_budget_seconds  # BODY_FILTER_TIME_BUDGET_SECONDS
        #: Held by ``expiry.migrate``: one migration of this shard's tables at a time.
        self.migration_lock = threading.Lock()
        self.pool = ConnectionPool(
            host=config.master.host,
            port=config.master.port,
            user=config.user,
            password=config.passwd,
            size=pool_size,
            timeout=socket_timeout,
        )
        #: The body column of each table, learned when a body longer than a BLOB first needs it.
        self.bodies = BodyLimits(self._read_body_columns, self._table)
        #: When the GC last called without its run_after bound, per (table, state).
        self._gc_swept: dict[tuple[str, JobState], float] = {}
        #: Where each queue's walk of ``gc_dedup_keys`` goes on (``dedup_sweep``).
        self.dedup_sweep: SweepCursors[dedup_keys.Position] = SweepCursors()
        #: The Rust hot paths handed out (``hot_path``), closed with the store.
        self._hot_paths: list[NativeMySQLHotPath] = []
        #: Each queue's rules (``set_queue_rules``), replaced whole: a reader sees one mapping.
        self._rules: Mapping[str, QueueRules] = {}
        #: Queues known to have expiring jobs (this store enqueued one, or expired one), with
        #: when a dequeue or reservation last expired their due jobs (``expire_met``).
        self._expiring: dict[str, int] = {}
        #: The threads expiring a backlog, by queue (``expire_met``), and whether ``close`` began.
        self._drains: dict[str, threading.Thread] = {}
        self._drain_lock = threading.Lock()
        self._closing = False

    @property
    def name(self) -> str:
        return self._name

    @property
    def custom_status_limit(self) -> int:
        return CUSTOM_STATUS_LIMIT

    # -- plumbing ---------------------------------------------------------------------------

    def _run(self, queue: str | None, op: Callable[[Cursor], T], *, repeatable: bool = True) -> T:
        """Run ``op`` in a transaction, retrying deadlocks and lost connections, mapping errors;
        ``repeatable`` False: not run again once its COMMIT may have been applied. A table
        without ``expire_at`` (made by the original server, or before #18) is migrated
        (``expiry.migrate``: the queue's, or every queue's for ``queue`` None) and ``op`` run
        again: it failed on the unknown column, before anything was committed."""
        try:
            return self._run_plain(queue, op, repeatable=repeatable)
        except pymysql.err.MySQLError as exc:
            if error_code(exc) != expiry.UNKNOWN_COLUMN_ERROR:
                raise
            log.info("shard %s: adding expire_at to the jobs tables of %s", self._name, queue or "every queue")
            expiry.migrate(self, queue)
        return self._run_plain(queue, op, repeatable=repeatable)

    def _run_plain(self, queue: str | None, op: Callable[[Cursor], T], *, repeatable: bool = True) -> T:
        """``_run`` without the migration."""
        return run_transaction(self.pool, self._name, self.num_auto_retries, queue, op, repeatable=repeatable)

    def body_filter(self, where: JobFilter) -> BodyFilter:
        """The filter of a count, scan or delete with a body regex: matched here, in batches
        (``body_filtered.py``), within the request's budget."""
        assert where.body_regex is not None
        return BodyFilter(where.body_regex, self._body_filter_budget, where.deadline)

    def _table(self, queue: str, priority: int) -> str:
        return names.quoted_table(self._name, queue, priority)

    def kept_priorities(self, cur: Cursor, queue: str) -> set[int]:
        """The priorities the queue has a table of here (none: the queue is not here). A descriptor
        may name any priority up to 127, and a server's levels may be fewer than a queue's: an ack,
        checkpoint or cancel naming a priority without a table names no job, and the others go on."""
        return set(self._body_columns(cur, queue))

    def _body_columns(self, cur: Cursor, queue: str) -> dict[int, tuple[str, int]]:
        cur.execute(queries.BODY_COLUMNS.render(), (names.database_name(self._name, queue),))
        return parse_columns(list(cur.fetchall()))

    def _read_body_columns(self, queue: str) -> dict[int, tuple[str, int]]:
        return self._run(None, lambda cur: self._body_columns(cur, queue))

    def status_charsets(self, queue: str) -> dict[int, str]:
        """The character set of each of the queue's tables' ``custom_status`` (priority -> name),
        read now (``text_charsets.py``)."""
        return self._run(None, lambda cur: self._status_charsets(cur, queue))

    def _status_charsets(self, cur: Cursor, queue: str) -> dict[int, str]:
        cur.execute(queries.STATUS_CHARSETS.render(), (names.database_name(self._name, queue),))
        return {p: str(charset).lower() for p, charset in jobs_tables(list(cur.fetchall())).items() if charset}

    def _check_body(self, queue: str, priority: int, body: bytes, what: str) -> None:
        info = self.pool.server_info
        max_packet = info.max_allowed_packet if info else DEFAULT_MAX_ALLOWED_PACKET
        self.bodies.check(queue, priority, body, what, max_packet)

    def _run_writing_bodies(
        self, queue: str, op: Callable[[Cursor], T], check_again: Callable[[], None], *, repeatable: bool
    ) -> T:
        """``_run`` for a write of bodies: a body the server finds too long for its column (the
        cache missed an ALTER TABLE) is refused as the checks before it would have."""
        try:
            return self._run(queue, op, repeatable=repeatable)
        except pymysql.err.DataError as exc:
            if error_code(exc) != DATA_TOO_LONG_ERROR:
                raise
            self.bodies.forget(queue)
            check_again()  # raises the refusal naming the body and its table
            raise PinLaterError(ErrorCode.ENQUEUE_REJECTED, f"a value is too long for its column: {exc}") from exc

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
            dedup_keys.create_table(cur, self._name, queue)
            claim_cap.create_table(cur, self._name, queue)
            expiry.create_table(cur, self._name, queue)

        try:
            self._run(None, op)
        except pymysql.err.MySQLError as exc:
            if error_code(exc) in NAME_TOO_LONG_ERRORS:
                raise PinLaterError(ErrorCode.QUEUE_NAME_TOO_LONG, f"queue name too long: {queue}") from exc
            raise
        finally:
            self.bodies.forget(queue)

    def delete_queue(self, queue: str) -> None:
        database = names.quoted_database(self._name, queue)
        try:
            self._run(None, lambda cur: cur.execute(queries.DROP_DATABASE.render(database=database)))
        finally:
            self.bodies.forget(queue)
            self.dedup_sweep.move(queue, None)

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
        by_priority: dict[int, list[NewJob]] = defaultdict(list)
        long_bodies = False
        for job in jobs:
            long_bodies = long_bodies or len(job.body) > BLOB_BYTES
            by_priority[job.priority].append(job)

        def check_bodies() -> None:
            for index, job in enumerate(jobs):
                what = f"the body of job {index} (counting from 0) of the request"
                self._check_body(queue, job.priority, job.body, what)

        if long_bodies:
            check_bodies()
        tables = {priority: self._table(queue, priority) for priority in by_priority}

        def op(cur: Cursor) -> list[int]:
            ids = {
                priority: iter(insert_jobs(self.pool, self.insert_id_strategy, cur, tables[priority], group, now_ms))
                for priority, group in by_priority.items()
            }
            if len(ids) == 1:
                return list(next(iter(ids.values())))
            return [next(ids[job.priority]) for job in jobs]

        return self._run_writing_bodies(queue, op, check_bodies, repeatable=False)

    def enqueue_keyed_jobs(self, queue: str, jobs: Sequence[KeyedJob], now_ms: int) -> list[Enqueued]:
        """One transaction, keys locked first: see ``dedup_keys``; expiries: ``expiry.mark_enqueued``.
        A custom status an original table's character set cannot hold (``text_charsets.py``)
        got the transaction refused and rolled back: it runs again with the statuses fitted."""
        try:
            placed = dedup_keys.enqueue_keyed_jobs(self, queue, jobs, now_ms)
        except pymysql.err.MySQLError as exc:
            if error_code(exc) not in TEXT_REFUSED_ERRORS:
                raise
            charsets = self.status_charsets(queue)
            fitted = [(k, fit_text(k.job.custom_status, charsets.get(k.job.priority))) for k in jobs]
            jobs = [k._replace(job=k.job._replace(custom_status=status)) for k, status in fitted]
            placed = dedup_keys.enqueue_keyed_jobs(self, queue, jobs, now_ms)
        if any(job.expire_at_ms is not None for job in jobs):
            self._expiring.setdefault(queue, 0)
        return placed

    # -- job control (#18): expiry.py, control.py, schedule_rows.py ------------------------------

    def expire_jobs(self, queue: str, now_ms: int, limit: int) -> int:
        expired = expiry.expire_jobs(self, queue, now_ms, limit)
        if expired:
            self._expiring.setdefault(queue, 0)
        return expired

    def expire_met_due(self, queue: str, now_ms: int) -> bool:
        """Whether ``expire_met`` would do anything now (so the hot path offloads it only then):
        not while a drain of the queue runs."""
        last = self._expiring.get(queue)
        return last is not None and now_ms - last >= LAZY_EXPIRY_EVERY_MS and queue not in self._drains

    def expire_met(self, queue: str, now_ms: int) -> int:
        """Expire, before a dequeue or reservation of a queue known to have expiring jobs, up to
        ``LAZY_EXPIRY_LIMIT`` of its due ones (``expire_jobs``: one more round trip), at most
        once per ``LAZY_EXPIRY_EVERY_MS`` per queue: so a dequeue that meets expired jobs (which
        its statement skips) has them FAILED "expired" at once, not at the monitor's next pass.
        A queue this store never saw an expiring job of does nothing here; the monitor's first
        ``expire_jobs`` that expires one teaches it. A pass that expired its whole limit starts a
        drain of the queue's jobs due by ``now_ms`` on a thread of its own (``EXPIRY_DRAIN_LIMIT``),
        unless ``MAX_EXPIRY_DRAINS`` run already or the store is closing."""
        if not self.expire_met_due(queue, now_ms):
            return 0
        self._expiring[queue] = now_ms
        expired = self.expire_jobs(queue, now_ms, LAZY_EXPIRY_LIMIT)
        if expired >= LAZY_EXPIRY_LIMIT:
            self._drain_expired(queue, now_ms)
        return expired

    def _drain_expired(self, queue: str, now_ms: int) -> None:
        with self._drain_lock:
            if self._closing or queue in self._drains or len(self._drains) >= MAX_EXPIRY_DRAINS:
                return
            thread = threading.Thread(
                target=self._drain, args=(queue, now_ms), name=f"pinlater-expiry-{self._name}", daemon=True
            )
            # started under the lock, so ``close`` never finds one it cannot join; one that cannot
            # start leaves the backlog to the lazy passes and the monitor, as before
            try:
                thread.start()
            except RuntimeError as exc:
                log.warning("shard %s: no thread to expire the backlog of queue %s: %s", self._name, queue, exc)
                return
            self._drains[queue] = thread

    def _drain(self, queue: str, now_ms: int) -> None:
        expired = misses = 0
        try:
            # A call that ends none may have lost every row it read to a monitor's pass ending the
            # same jobs at once (each call forgets the rows it read): the drain stops at the
            # third such call in a row.
            while not self._closing and misses < 3:
                n = self.expire_jobs(queue, now_ms, EXPIRY_DRAIN_LIMIT)
                expired += n
                misses = 0 if n else misses + 1
        except QueueNotFoundError:
            pass  # deleted meanwhile
        except Exception as exc:  # the lazy passes and the monitor go on with the rest
            log.warning("shard %s: expiring the backlog of queue %s stopped: %r", self._name, queue, exc)
        finally:
            with self._drain_lock:
                self._drains.pop(queue, None)
            log.info("shard %s: expired a backlog of %d more jobs of queue %s", self._name, expired, queue)

    def wait_expiry_drains(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the backlog drains running now to end; whether
        they all did (for ``close`` and tests)."""
        with self._drain_lock:
            threads = list(self._drains.values())
        deadline = time.monotonic() + timeout
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return not any(thread.is_alive() for thread in threads)

    def expired_counts(self) -> dict[str, int]:
        return expiry.expired_counts(self)

    def cancel_jobs(self, queue: str, keys: Sequence[tuple[int, int]], now_ms: int) -> int:
        return control.cancel_jobs(self, queue, keys, now_ms)

    def oldest_ready(self, num_priorities: int, now_ms: int) -> dict[tuple[str, int], int]:
        return control.oldest_ready(self, num_priorities, now_ms)

    def put_schedule(self, row: ScheduleRow) -> None:
        schedule_rows.put_schedule(self, row)

    def delete_schedule(self, queue: str, name: str) -> bool:
        return schedule_rows.delete_schedule(self, queue, name)

    def list_schedules(self, queue: str) -> list[ScheduleRow]:
        return schedule_rows.list_schedules(self, queue)

    def due_schedules(self, now_ms: int, limit: int, max_bytes: int = DUE_PAGE_BYTES) -> list[ScheduleRow]:
        """The page is cut by the specs' sizes before any spec is read (``schedule_rows``)."""
        return schedule_rows.due_schedules(self, now_ms, limit, max_bytes)

    def advance_schedule(self, queue: str, name: str, expected_next_ms: int, next_run_ms: int) -> bool:
        return schedule_rows.advance_schedule(self, queue, name, expected_next_ms, next_run_ms)

    def gc_dedup_keys(self, queue: str, now_ms: int, limit: int) -> int:
        return dedup_keys.gc_dedup_keys(self, queue, now_ms, limit)

    # -- ordered groups (refused) and queue rules -----------------------------------------------

    @property
    def groups_refused(self) -> str | None:
        return GROUPS_REFUSED

    def monitor_idle(self, queues: Sequence[str], num_priorities: int) -> set[str]:
        """The queues of ``queues`` with tables and nothing in them for the monitor's sweeps: no
        job IN_PROGRESS, SUCCEEDED or FAILED in priorities 1 to ``num_priorities``, no row in
        their expiring and dedup_keys tables (PENDING jobs, reserved or not, are not its work:
        a lapsed reservation simply lapses). Two statements whatever the number of queues, as
        ``queue_counts``: the shard's tables by name, then one UNION ALL of an index probe a
        table (``QUEUE_COUNTS_TABLES_PER_STATEMENT`` a statement). The sweeps cost about a dozen
        statements a queue and pass however empty the queue."""
        wanted = set(queues)
        if not wanted:
            return set()

        def tables(cur: Cursor) -> tuple[set[str], list[tuple[str, str]]]:
            """The queues found, and a probe (sql, queue) a table to look into."""
            pattern = names.queue_database_pattern(self._name)
            cur.execute(
                queries.LIST_MONITOR_TABLES.render(),
                (pattern, names.JOBS_TABLE_PATTERN, names.EXPIRING_TABLE, names.DEDUP_KEYS_TABLE),
            )
            found: set[str] = set()
            probes: list[tuple[str, str]] = []
            for database, table in sorted(cur.fetchall()):
                queue = names.queue_from_database(str(database), self._name)
                if queue is None or queue not in wanted:
                    continue
                priority = names.priority_from_table(str(table))
                if priority is not None:
                    found.add(queue)
                    if priority <= num_priorities:
                        probes.append(
                            (queries.MONITOR_BUSY_JOBS_TABLE.render(table=self._table(queue, priority)), queue)
                        )
                elif (quoted := _MONITORED_SIDE_TABLES.get(str(table))) is not None:
                    probes.append((queries.MONITOR_BUSY_SIDE_TABLE.render(table=quoted(self._name, queue)), queue))
            return found, probes

        def busy(cur: Cursor, probes: list[tuple[str, str]]) -> set[str]:
            out: set[str] = set()
            step = QUEUE_COUNTS_TABLES_PER_STATEMENT
            for start in range(0, len(probes), step):
                chunk = probes[start : start + step]
                cur.execute("\nUNION ALL\n".join(sql for sql, _ in chunk), [queue for _, queue in chunk])
                out.update(str(row[0]) for row in cur.fetchall())
            return out

        def idle(cur: Cursor) -> set[str]:
            found, probes = tables(cur)
            return found - busy(cur, probes)

        return self._run(None, lambda cur: _again_if_dropped(cur, idle))

    def group_counts(self, queue: str) -> GroupCounts:
        """No groups, ever; QueueNotFoundError for a missing queue (one read of the data
        dictionary: the queue's jobs tables)."""
        database = names.database_name(self._name, queue)

        def op(cur: Cursor) -> None:
            cur.execute(queries.LIST_JOBS_TABLES.render(), (database, names.JOBS_TABLE_PATTERN))
            if not cur.fetchall():
                raise QueueNotFoundError(queue)

        self._run(queue, op)
        return GroupCounts(0, 0)

    def set_queue_rules(self, rules: Mapping[str, QueueRules]) -> None:
        """Only ``max_in_progress`` acts here (groups are refused); the next call, on any thread
        or the Rust hot path (handed the cap per call), applies the new rules."""
        self._rules = dict(rules)

    def rules(self, queue: str) -> QueueRules:
        """The queue's rules as last set (``DEFAULT_RULES`` if none)."""
        return self._rules.get(queue, DEFAULT_RULES)

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
        if limit <= 0:
            return []
        if len(claim) > MAX_CLAIM_LENGTH:
            raise ValueError(f"claim descriptor longer than {MAX_CLAIM_LENGTH} characters")
        if not dry_run:
            self.expire_met(queue, now_ms)
        table = self._table(queue, priority)
        now = to_db_time(now_ms)
        cap = self.rules(queue).max_in_progress

        ask = limit  # lowered where a claim's bodies passed the byte budget (``fitted``)

        def allowed(cur: Cursor) -> int:
            """The limit; under a cap, the room left (the claim lock held from here on)."""
            return ask if cap is None else min(ask, claim_cap.room(self, cur, queue, cap, lock=True))

        def peek(cur: Cursor) -> list[ClaimedJob]:
            cur.execute(queries.PEEK_JOBS.render(table=table), (now, now_ms, limit))
            jobs = [job_rows.claimed_job(row) for row in cur.fetchall()]
            return jobs[: within_bytes((len(job.body) for job in jobs), max_bytes)]

        def claim_jobs(cur: Cursor) -> list[ClaimedJob] | int | None:
            n = allowed(cur)
            if n <= 0:
                return []
            claimed = cur.execute(
                queries.DEQUEUE_JOBS.render(table=table),
                (claim, now, now, now_ms, now, RESERVATION_PREFIX, RESERVATION_PREFIX, n),
            )
            if not claimed:
                return []
            cur.execute(queries.SELECT_CLAIMED_JOBS.render(table=table), (claim,))
            rows = cur.fetchall()
            if len(rows) != claimed:
                return None  # the claim was not unique: redo telling our rows from the others
            return fitted([job_rows.claimed_job(row) for row in job_rows.in_claim_order(rows)], max_bytes)

        def claim_jobs_reused_claim(cur: Cursor) -> list[ClaimedJob] | int | None:
            n = allowed(cur)
            if n <= 0:
                return []
            select_claimed = queries.SELECT_CLAIMED_JOBS.render(table=table)
            cur.execute(select_claimed, (claim,))
            before = {int(row[0]) for row in cur.fetchall()}
            cur.execute(
                queries.DEQUEUE_JOBS.render(table=table),
                (claim, now, now, now_ms, now, RESERVATION_PREFIX, RESERVATION_PREFIX, n),
            )
            cur.execute(select_claimed, (claim,))
            rows = job_rows.in_claim_order(cur.fetchall())
            return fitted([job_rows.claimed_job(row) for row in rows if int(row[0]) not in before], max_bytes)

        if dry_run:
            return self._run(queue, peek)
        op = claim_jobs
        while True:
            jobs = self._run(queue, rollback_unless_list(op))
            if isinstance(jobs, list):
                return jobs
            if jobs is None:
                op = claim_jobs_reused_claim
            else:
                ask = jobs

    # -- reservations (the dequeue broker): see reservations.py --------------------------------

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
        self.expire_met(queue, now_ms)
        return reservations.reserve_jobs(self, queue, priority, limit, reservation, now_ms, hold_ms, max_bytes)

    def claim_reserved(
        self, queue: str, items: Sequence[tuple[int, int, str]], reservation: str, now_ms: int
    ) -> list[tuple[int, int]]:
        return reservations.claim_reserved(self, queue, items, reservation, now_ms)

    def release_reservations(self, queue: str, items: Sequence[tuple[int, int]], reservation: str, now_ms: int) -> int:
        return reservations.release_reservations(self, queue, items, reservation, now_ms)

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
        cut = expiry.ended_cut(EXPIRED)

        def op(cur: Cursor) -> None:
            # Sorted groups and ids: concurrent acks lock rows in one order, which avoids deadlocks.
            for (priority, status), ids in sorted(successes.items()):
                sql = queries.ACK_SUCCEEDED_JOBS.render(table=tables[priority], ids=len(ids))
                cur.execute(sql, (status, CUSTOM_STATUS_LIMIT, now, *sorted(ids)))
            if not failures:
                return
            # A retry at or after the job's expiry expires it instead (#18), tallied in a session
            # variable and counted before the COMMIT: the statements the Rust hot path sends in
            # one round trip (rust/store/mysql_shard.rs), in the same order.
            cur.execute(queries.EXPIRED_COUNT_RESET.render())
            for (priority, status, delay), ids in sorted(failures.items()):
                ids = sorted(ids)
                retry_ms = now_ms + delay
                sql = queries.ACK_EXPIRE_JOBS.render(table=tables[priority], ids=len(ids))
                cur.execute(sql, (status, EXPIRED, status, cut, EXPIRED, now, retry_ms, *ids))
                cur.execute(queries.EXPIRED_COUNT_TALLY.render())
                sql = queries.ACK_FAILED_JOBS.render(table=tables[priority], ids=len(ids))
                cancelled = (status, CANCELLED, status, expiry.ended_cut(CANCELLED), CANCELLED)
                cur.execute(sql, (to_db_time(retry_ms), status, CUSTOM_STATUS_LIMIT, *cancelled, now, *ids))
                expiry.readd(cur, self, queue, priority, ids)
            cur.execute(queries.EXPIRED_COUNT_ADD_TALLIED.render(table=expiry.count_table(self._name, queue)))

        self._run(queue, op)

    def checkpoint_jobs(self, queue: str, items: Sequence[CheckpointItem], source: str, now_ms: int) -> int:
        if not items:
            return 0

        def check_bodies() -> None:
            for item in items:
                if item.new_body is not None:
                    what = f"the new body of checkpointed job {item.local_id}"
                    self._check_body(queue, item.priority, item.new_body, what)

        check_bodies()
        tables = {item.priority: self._table(queue, item.priority) for item in items}
        now = to_db_time(now_ms)

        def checkpoint(cur: Cursor, item: CheckpointItem, prepend: str | None) -> int:
            move = int(item.move_to_pending)
            return int(
                cur.execute(
                    queries.CHECKPOINT_JOB.render(table=tables[item.priority]),
                    (
                        move,
                        int(JobState.PENDING if item.move_to_pending else JobState.IN_PROGRESS),
                        to_db_time(item.run_after_ms),
                        now,
                        item.new_body,
                        *(move, prepend, CANCELLED, prepend, expiry.ended_cut(CANCELLED), CANCELLED),
                        *(prepend, prepend, CUSTOM_STATUS_LIMIT),
                        item.attempts_allowed,
                        item.attempts_allowed,
                        move,
                        item.local_id,
                        source,
                    ),
                )
            )

        def op(cur: Cursor) -> int:
            changed = 0
            for item in items:
                prepend = item.prepend_custom_status
                try:
                    done = checkpoint(cur, item, prepend)
                except pymysql.err.ProgrammingError as exc:
                    if error_code(exc) != NO_TABLE_ERROR or not self.kept_priorities(cur, queue):
                        raise
                    continue  # no table of its priority here: no such job (kept_priorities)
                except pymysql.err.MySQLError as exc:
                    if prepend is None or error_code(exc) not in TEXT_REFUSED_ERRORS:
                        raise
                    # a status its table's character set cannot hold (text_charsets.py); the
                    # refused statement changed nothing
                    done = checkpoint(
                        cur, item, fit_text(prepend, self._status_charsets(cur, queue).get(item.priority))
                    )
                if done and item.move_to_pending:
                    expiry.readd(cur, self, queue, item.priority, [item.local_id])
                changed += done
            return changed

        return self._run_writing_bodies(queue, op, check_bodies, repeatable=True)

    # -- reads ------------------------------------------------------------------------------

    def lookup_jobs(
        self, queue: str, keys: Sequence[tuple[int, int]], include_body: bool, max_body_bytes: int | None = None
    ) -> list[JobRecord]:
        if not keys:
            return []
        budgeted = include_body and max_body_bytes is not None
        by_priority: dict[int, list[int]] = defaultdict(list)
        for priority, local_id in dict.fromkeys(keys):  # each once, in order (a list's `in` was quadratic)
            by_priority[priority].append(local_id)
        tables = {priority: self._table(queue, priority) for priority in by_priority}

        def op(cur: Cursor) -> list[JobRecord]:
            found: dict[tuple[int, int], JobRecord] = {}
            missing_tables: list[pymysql.err.MySQLError] = []
            held = 0
            for priority, ids in by_priority.items():
                try:
                    if budgeted:  # the bodies' bytes first: a lookup past its budget reads none of them
                        cur.execute(queries.BODY_BYTES_BY_ID.render(table=tables[priority], ids=len(ids)), ids)
                        held += int((cur.fetchone() or (0,))[0] or 0)
                        if max_body_bytes is not None and held > max_body_bytes:
                            raise LookupOverBudget(max_body_bytes)
                    cur.execute(
                        queries.LOOKUP_JOBS.render(table=tables[priority], ids=len(ids)), (int(include_body), *ids)
                    )
                except pymysql.err.ProgrammingError as exc:
                    # A descriptor of a priority the queue lacks finds nothing; the others still
                    # do. (A statement error leaves the transaction usable.)
                    if error_code(exc) != NO_TABLE_ERROR:
                        raise
                    missing_tables.append(exc)
                    continue
                rows = cur.fetchall()
                dedup = dedup_keys.keys_of_jobs(cur, self, queue, priority, [int(row[0]) for row in rows])
                for row in rows:
                    local_id = int(row[0])
                    body = row[10] if include_body else None
                    found[(priority, local_id)] = job_rows.job_record(priority, row, body, dedup.get(local_id))
            if len(missing_tables) == len(by_priority):
                raise missing_tables[0]  # no table at all: the queue is not here (QueueNotFoundError)
            return [found.pop(key) for key in keys if key in found]

        return self._run(queue, op)

    def count_jobs(self, queue: str, where: JobFilter, limit: int | None) -> int:
        table = self._table(queue, where.priority)
        cap = _NO_LIMIT if limit is None else limit
        if where.body_regex is not None:
            return body_filtered.count_matching(self, queue, where, cap)

        def op(cur: Cursor) -> int:
            cur.execute(queries.COUNT_JOBS.render(table=table), (*job_rows.filter_args(where), cap))
            row = cur.fetchone()
            return int(row[0]) if row else 0

        return self._run(queue, op)

    def queue_counts(self, num_priorities: int, now_ms: int) -> dict[CountKey, int]:
        """Two statements whatever the number of queues: the shard's jobs tables (by name, from
        the data dictionary), then one UNION ALL of ``queue_counts_table.sql`` over them,
        ``QUEUE_COUNTS_TABLES_PER_STATEMENT`` tables a statement. Exact counts, not capped: a
        capped count needs a statement per (table, state, ready/future), which is what makes
        the per-queue path slow; ``ShardedBackend.queue_counts`` caps each count as
        ``count_jobs`` would. A queue dropped in between is looked for again, once."""
        now = to_db_time(now_ms)

        def tables(cur: Cursor) -> list[tuple[str, int]]:
            cur.execute(
                queries.LIST_QUEUE_TABLES.render(),
                (names.queue_database_pattern(self._name), names.JOBS_TABLE_PATTERN),
            )
            found = []
            for database, table in cur.fetchall():
                queue = names.queue_from_database(str(database), self._name)
                priority = names.priority_from_table(str(table))
                if queue is not None and priority is not None and priority <= num_priorities:
                    found.append((queue, priority))
            return sorted(found)

        def count(cur: Cursor, found: list[tuple[str, int]]) -> dict[CountKey, int]:
            counts: dict[CountKey, int] = {}
            step = QUEUE_COUNTS_TABLES_PER_STATEMENT
            for start in range(0, len(found), step):
                chunk = found[start : start + step]
                parts = [queries.QUEUE_COUNTS_TABLE.render(table=self._table(q, p)) for q, p in chunk]
                cur.execute("\nUNION ALL\n".join(parts), [arg for q, p in chunk for arg in (q, p, now)])
                for queue, priority, state, total, future in cur.fetchall():
                    counts[CountKey(str(queue), int(priority), JobState(int(state)), False)] = int(total) - int(future)
                    counts[CountKey(str(queue), int(priority), JobState(int(state)), True)] = int(future)
            return counts

        return self._run(None, lambda cur: _again_if_dropped(cur, lambda c: count(c, tables(c))))

    def scan_jobs(self, queue: str, where: JobFilter, limit: int, after: ScanCursor | None = None) -> list[JobRecord]:
        """Paged by ``after`` as ``control.scan_jobs`` reads it."""
        return control.scan_jobs(self, queue, where, limit, after)

    # -- bulk administration ----------------------------------------------------------------

    def retry_failed_jobs(
        self, queue: str, priority: int, attempts_to_allow: int, run_after_ms: int, limit: int, now_ms: int
    ) -> int:
        sql = queries.RETRY_FAILED_JOBS.render(table=self._table(queue, priority))
        args = (attempts_to_allow, to_db_time(run_after_ms), to_db_time(now_ms), limit)
        return self._run(queue, lambda cur: int(cur.execute(sql, args)), repeatable=False)

    def delete_jobs(self, queue: str, where: JobFilter, limit: int) -> int:
        table = self._table(queue, where.priority)
        if where.body_regex is not None:
            return body_filtered.delete_matching(self, queue, where, limit)
        sql = queries.DELETE_JOBS.render(table=table)
        args = (*job_rows.filter_args(where), limit)
        return self._run(queue, lambda cur: int(cur.execute(sql, args)), repeatable=False)

    # -- maintenance (the monitor) ----------------------------------------------------------

    def resurrect_timed_out_jobs(
        self, queue: str, priority: int, claimed_before_ms: int, limit: int, now_ms: int
    ) -> Resurrected:
        """The timed-out jobs picked and locked, then by id: those past their expiry expire
        (#18), the others fail as a failure ack without delay would fail them: back to PENDING
        those with more than one attempt left (read with the lock), the rest FAILED."""
        table = self._table(queue, priority)
        now = to_db_time(now_ms)

        def op(cur: Cursor) -> Resurrected:
            cur.execute(queries.SELECT_TIMED_OUT_JOBS.render(table=table), (to_db_time(claimed_before_ms), limit))
            rows = cur.fetchall()
            ids = sorted(int(row[0]) for row in rows)
            if not ids:
                return Resurrected(0)
            with_attempts_left = sum(1 for row in rows if int(row[1] or 0) > 1)
            expired = int(
                cur.execute(
                    queries.RESURRECT_EXPIRE_JOBS.render(table=table, ids=len(ids)),
                    (*expiry.ended_args(EXPIRED), now, now_ms, *ids),
                )
            )
            timed_out = int(
                cur.execute(
                    queries.RESURRECT_TIMED_OUT_JOBS.render(table=table, ids=len(ids)),
                    (now, *expiry.ended_args(CANCELLED), now, *ids),
                )
            )
            expiry.readd(cur, self, queue, priority, ids)
            expiry.count(cur, self, queue, expired)
            changed = expired + timed_out
            retried = min(max(with_attempts_left - expired, 0), changed)  # (as read under the lock: exact)
            return Resurrected(changed, changed - retried)

        if limit <= 0:
            return Resurrected(0)
        return self._run(queue, op)

    def gc_finished_jobs(self, queue: str, priority: int, state: JobState, finished_before_ms: int, limit: int) -> int:
        table = self._table(queue, priority)
        cutoff = to_db_time(finished_before_ms)
        now = time.monotonic()
        args: tuple[object, ...]
        if now - self._gc_swept.get((table, state), -math.inf) >= GC_FULL_SWEEP_SECONDS:
            if len(self._gc_swept) >= MAX_GC_SWEPT_KEPT:
                self._gc_swept.clear()
            self._gc_swept[(table, state)] = now
            sql, args = queries.GC_FINISHED_JOBS_ALL.render(table=table), (int(state), cutoff, limit)
        else:
            sql, args = queries.GC_FINISHED_JOBS.render(table=table), (int(state), cutoff, cutoff, limit)
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

    def hot_path(self, offload: Offload) -> HotPath:
        """Enqueue, dequeue and ack in Rust (``native_hot.py``); the broker's operations here."""
        hot = NativeMySQLHotPath(self, offload)
        self._hot_paths.append(hot)
        return hot

    async def aclose(self) -> None:
        """The event loop stops watching the Rust hot paths' wake-up sockets."""
        for hot in self._hot_paths:
            hot.unwatch()

    def interrupt(self) -> None:
        """Abandon a migration's ALTER in progress (``ConnectionPool.abandon_unbounded``): MySQL
        finishes it (the column is there at the next start), the thread waiting for it ends."""
        self.pool.abandon_unbounded()

    def close(self) -> None:
        with self._drain_lock:
            self._closing = True
        # (a drain stops after its call in progress, which the socket timeout bounds)
        self.wait_expiry_drains(2 * self.socket_timeout + 1)
        for hot in self._hot_paths:
            hot.close()
        self.pool.close()

    def __repr__(self) -> str:
        return f"MySQLStore({self._name!r}, {self.config.master.host}:{self.config.master.port})"
