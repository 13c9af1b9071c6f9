"""The MySQL backend's SQL: one file per operation under ``sql/`` (DDL under ``sql/schema/``),
shipped as package data and loaded once through ``importlib.resources``.

Files take values only as ``%s`` parameters (PyMySQL's paramstyle). The few tokens a file may
hold are filled by ``Sql.render``: ``{table}``, ``{side}`` (a second table: a queue's side table
beside its jobs table) and ``{database}`` with identifiers from ``names.py``, ``{ids}`` with a
list of ``%s`` for an ``IN``, ``{rows}`` with ``%s`` row groups for a multi-row ``INSERT``.
``--`` comment lines document each file and are not sent.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

_TOKEN = re.compile(r"\{(\w+)\}")
_TOKENS = frozenset({"table", "side", "database", "ids", "rows"})


@dataclass(frozen=True, slots=True)
class Sql:
    """One SQL file, comments stripped."""

    name: str
    text: str
    tokens: frozenset[str]

    def render(
        self,
        *,
        table: str | None = None,
        side: str | None = None,
        database: str | None = None,
        ids: int = 0,
        rows: tuple[int, int] = (0, 0),
    ) -> str:
        """The statement with its tokens filled. ``table``/``side``/``database`` must come from
        ``names.py``; ``ids`` is the number of ``IN`` values; ``rows`` is (rows, values per row)."""
        given = {
            "table": table is not None,
            "side": side is not None,
            "database": database is not None,
            "ids": ids > 0,
            "rows": rows[0] > 0,
        }
        wanted = {token for token, present in given.items() if present}
        if wanted != self.tokens:
            raise ValueError(f"{self.name}.sql takes {sorted(self.tokens)}, got {sorted(wanted)}")
        text = self.text
        if table is not None:
            text = text.replace("{table}", table)
        if side is not None:
            text = text.replace("{side}", side)
        if database is not None:
            text = text.replace("{database}", database)
        if ids:
            text = text.replace("{ids}", _placeholders(ids))
        if rows[0]:
            text = text.replace("{rows}", _row_groups(*rows))
        return text

    def around_rows(self, *, table: str) -> tuple[str, str]:
        """The statement before and after its ``{rows}``, with ``table`` (from ``names.py``)
        filled in: for a multi-row INSERT whose rows are rendered already escaped
        (``_pinlater.mysql_insert_statements``)."""
        if self.tokens != {"table", "rows"}:
            raise ValueError(f"{self.name}.sql takes {sorted(self.tokens)}, not table and rows")
        head, tail = self.text.replace("{table}", table).split("{rows}")
        if "%s" in head or "%s" in tail:
            raise ValueError(f"{self.name}.sql: parameters outside {{rows}} cannot be pre-rendered")
        return head, tail


@lru_cache(maxsize=256)
def _placeholders(n: int) -> str:
    return ", ".join(["%s"] * n)


@lru_cache(maxsize=256)
def _row_groups(n: int, width: int) -> str:
    return ", ".join([f"({_placeholders(width)})"] * n)


def load(name: str) -> Sql:
    """Load ``sql/{name}.sql`` (``name`` may be ``schema/...``)."""
    raw = resources.files(__package__).joinpath("sql").joinpath(f"{name}.sql").read_text(encoding="utf-8")
    lines = [line for line in raw.splitlines() if not line.lstrip().startswith("--")]
    text = "\n".join(lines).strip()
    tokens = frozenset(_TOKEN.findall(text))
    unknown = tokens - _TOKENS
    if unknown:
        raise ValueError(f"{name}.sql: unknown token(s) {sorted(unknown)}")
    if "%" in text.replace("%s", ""):
        raise ValueError(f"{name}.sql: a literal % must not appear (PyMySQL formats with %s)")
    return Sql(name=name, text=text, tokens=tokens)


def all_names() -> list[str]:
    """Every SQL file shipped, as ``load`` names (tests execute each one)."""
    root = resources.files(__package__).joinpath("sql")
    names = [f"schema/{f.name[:-4]}" for f in root.joinpath("schema").iterdir() if f.name.endswith(".sql")]
    names += [f.name[:-4] for f in root.iterdir() if f.name.endswith(".sql")]
    return sorted(names)


CREATE_DATABASE = load("schema/create_database")
CREATE_JOBS_TABLE = load("schema/create_jobs_table")
CREATE_DEDUP_KEYS_TABLE = load("schema/create_dedup_keys_table")
CREATE_CLAIM_LOCK_TABLE = load("schema/create_claim_lock_table")
DROP_DATABASE = load("schema/drop_database")
SESSION_SETUP = load("session_setup")
SERVER_INFO = load("server_info")
PING = load("ping")
LIST_QUEUE_DATABASES = load("list_queue_databases")
BODY_COLUMNS = load("body_columns")
STATUS_CHARSETS = load("status_charsets")
LIST_QUEUE_TABLES = load("list_queue_tables")
QUEUE_COUNTS_TABLE = load("queue_counts_table")
LIST_MONITOR_TABLES = load("list_monitor_tables")
MONITOR_BUSY_JOBS_TABLE = load("monitor_busy_jobs_table")
MONITOR_BUSY_SIDE_TABLE = load("monitor_busy_side_table")
ENQUEUE_JOBS = load("enqueue_jobs")
ENQUEUE_JOBS_RETURNING = load("enqueue_jobs_returning")
DEQUEUE_JOBS = load("dequeue_jobs")
SELECT_CLAIMED_JOBS = load("select_claimed_jobs")
PEEK_JOBS = load("peek_jobs")
RESERVE_JOBS = load("reserve_jobs")
SELECT_RESERVED_JOBS = load("select_reserved_jobs")
CLAIM_RESERVED_JOBS = load("claim_reserved_jobs")
SELECT_CLAIMED_IDS = load("select_claimed_ids")
RELEASE_RESERVATIONS = load("release_reservations")
SELECT_RESERVED_IDS = load("select_reserved_ids")
LOCK_CLAIMS = load("lock_claims")
LIST_JOBS_TABLES = load("list_jobs_tables")
COUNT_IN_PROGRESS_TABLE = load("count_in_progress_table")
ACK_SUCCEEDED_JOBS = load("ack_succeeded_jobs")
ACK_FAILED_JOBS = load("ack_failed_jobs")
CHECKPOINT_JOB = load("checkpoint_job")
LOOKUP_JOBS = load("lookup_jobs")
COUNT_JOBS = load("count_jobs")
SCAN_JOBS = load("scan_jobs")
RETRY_FAILED_JOBS = load("retry_failed_jobs")
DELETE_JOBS = load("delete_jobs")
# Body filters, matched in the server (body_filtered.py).
FILTER_TIES = load("filter_ties")
FILTER_AFTER = load("filter_after")
FILTER_TIES_NEWEST = load("filter_ties_newest")
FILTER_BEFORE = load("filter_before")
RECORDS_BY_ID = load("records_by_id")
BODIES_BY_ID = load("bodies_by_id")
BODY_BYTES_BY_ID = load("body_bytes_by_id")
DELETE_JOBS_BY_ID = load("delete_jobs_by_id")
LOCK_BODIES_BY_ID = load("lock_bodies_by_id")
RESURRECT_TIMED_OUT_JOBS = load("resurrect_timed_out_jobs")
GC_FINISHED_JOBS = load("gc_finished_jobs")
GC_FINISHED_JOBS_ALL = load("gc_finished_jobs_all")
DEDUP_LOCK_KEYS = load("dedup_lock_keys")
DEDUP_RECORDS = load("dedup_records")
DEDUP_TAKE_KEYS = load("dedup_take_keys")
DEDUP_KEYS_OF_JOBS = load("dedup_keys_of_jobs")
DEDUP_GC_CANDIDATES = load("dedup_gc_candidates")
DEDUP_FORGET = load("dedup_forget")
# Job control (#18): expiry, cancel, paged scans, queue depth, schedules (expiry.py, control.py, schedule_rows.py).
CREATE_EXPIRING_TABLE = load("schema/create_expiring_table")
CREATE_SCHEDULES_TABLE = load("schema/create_schedules_table")
CREATE_EXPIRED_COUNT_TABLE = load("schema/create_expired_count_table")
ADD_EXPIRE_COLUMN = load("add_expire_column")
TABLES_WITHOUT_EXPIRY = load("tables_without_expiry")
SET_EXPIRY = load("set_expiry")
EXPIRING_ADD = load("expiring_add")
EXPIRING_READD = load("expiring_readd")
EXPIRING_DUE = load("expiring_due")
EXPIRING_FORGET = load("expiring_forget")
EXPIRE_JOBS = load("expire_jobs")
ACK_EXPIRE_JOBS = load("ack_expire_jobs")
SELECT_TIMED_OUT_JOBS = load("select_timed_out_jobs")
RESURRECT_EXPIRE_JOBS = load("resurrect_expire_jobs")
CANCEL_PENDING_JOBS = load("cancel_pending_jobs")
CANCEL_IN_PROGRESS_JOBS = load("cancel_in_progress_jobs")
EXPIRED_COUNT_ADD = load("expired_count_add")
EXPIRED_COUNT_RESET = load("expired_count_reset")
EXPIRED_COUNT_TALLY = load("expired_count_tally")
EXPIRED_COUNT_ADD_TALLIED = load("expired_count_add_tallied")
SCAN_JOBS_AFTER = load("scan_jobs_after")
OLDEST_READY_TABLE = load("oldest_ready_table")
PUT_SCHEDULE = load("put_schedule")
DELETE_SCHEDULE = load("delete_schedule")
LIST_SCHEDULES = load("list_schedules")
ADVANCE_SCHEDULE = load("advance_schedule")
EXPIRED_COUNT_TABLE = load("expired_count_table")
LIST_QUEUE_SIDE_TABLES = load("list_queue_side_tables")
DUE_SCHEDULE_SIZES_TABLE = load("due_schedule_sizes_table")
SCHEDULE_SPECS_TABLE = load("schedule_specs_table")
