"""How long a job body each MySQL jobs table holds, and the refusal of a body that does not fit.

Tables the original created hold bodies in a BLOB (at most 65,535 bytes); tables created here
in a MEDIUMBLOB (16,777,215 bytes, the default frame limit less one). Every table holds
``BLOB_BYTES``, so a batch whose bodies all fit in that costs nothing here. A longer body makes
the store read the queue's body columns from information_schema (``sql/body_columns.sql``) once,
cached per store: forgotten when the queue is created or deleted, and read again before a body
is refused, so an ``ALTER TABLE`` run by hand takes effect on the next call.

Nothing is ever truncated: sessions run in strict mode (``sql/session_setup.sql``), so a body
too long for a column that changed under the cache fails with error 1406, which the store turns
into the same refusal. A body must also fit, hex-encoded, in one statement under the server's
``max_allowed_packet`` (MariaDB's default, 16 MiB, carries bodies up to about 8 MiB).

A refusal is ENQUEUE_REJECTED naming the body's size, the limit, the table, and the statement
that lifts the limit.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import dataclass

from pinlater.errors import ErrorCode, PinLaterError

#: What every body column holds: a BLOB's capacity (the original's tables).
BLOB_BYTES = 65_535
#: A MEDIUMBLOB's capacity (the tables created here).
MEDIUMBLOB_BYTES = 16_777_215

#: Room left in a statement for everything but the body: the INSERT's head, the other columns
#: (a custom status of 5,000 characters, escaped, is at most 40,000 bytes), and framing.
_STATEMENT_ROOM = 64 * 1024

_JOBS_TABLE = re.compile(r"jobs_p(\d+)")


@dataclass(frozen=True, slots=True)
class BodyColumn:
    """The body column of one jobs table."""

    table: str
    """The table, quoted and database-qualified (from ``names.py``)."""
    data_type: str
    """As information_schema spells it: ``blob``, ``mediumblob``, ..."""
    capacity: int
    """The longest body it holds, in bytes."""


#: Reads the body columns of one queue's tables: priority -> (data type, capacity).
ColumnReader = Callable[[str], dict[int, tuple[str, int]]]


class BodyLimits:
    """The body columns of one shard's tables, learned per queue on first need. Thread-safe."""

    def __init__(self, read: ColumnReader, table_name: Callable[[str, int], str]) -> None:
        """``read(queue)`` asks the server; ``table_name(queue, priority)`` quotes a table."""
        self._read = read
        self._table_name = table_name
        self._lock = threading.Lock()
        self._columns: dict[str, dict[int, tuple[str, int]]] = {}

    def forget(self, queue: str) -> None:
        """Drop what is known of ``queue`` (created, deleted, or a column changed under us)."""
        with self._lock:
            self._columns.pop(queue, None)

    def column(self, queue: str, priority: int, *, fresh: bool = False) -> BodyColumn | None:
        """The body column of ``queue``'s table of ``priority`` (None: no such table here)."""
        with self._lock:
            known = None if fresh else self._columns.get(queue)
        if known is None:
            known = self._read(queue)
            if known:  # a queue not here (yet) is asked about again next time
                with self._lock:
                    if len(self._columns) >= 4096:  # queues are few; this only bounds a misuse
                        self._columns.clear()
                    self._columns[queue] = known
        found = known.get(priority)
        if found is None:
            return None
        return BodyColumn(self._table_name(queue, priority), found[0], found[1])

    def check(self, queue: str, priority: int, body: bytes, what: str, max_allowed_packet: int) -> None:
        """Refuse ``body`` (ENQUEUE_REJECTED) if ``queue``'s table of ``priority`` cannot hold
        it or one statement cannot carry it. ``what`` names the body in the message."""
        size = len(body)
        if size <= BLOB_BYTES:
            return
        check_packet(body, what, max_allowed_packet)
        column = self.column(queue, priority)
        if column is None or size <= column.capacity:
            return
        column = self.column(queue, priority, fresh=True)  # an ALTER TABLE may have lifted it
        if column is not None and size > column.capacity:
            raise too_long(what, size, column)


def jobs_tables(rows: list[tuple[object, ...]]) -> dict[int, object]:
    """Rows of (table name, value) as priority -> value, for the jobs tables only."""
    return {int(m.group(1)): value for table, value in rows if (m := _JOBS_TABLE.fullmatch(str(table)))}


def parse_columns(rows: list[tuple[object, ...]]) -> dict[int, tuple[str, int]]:
    """Rows of ``body_columns.sql`` as priority -> (data type, capacity); other tables skipped."""
    columns: dict[int, tuple[str, int]] = {}
    for table, data_type, capacity in rows:
        m = _JOBS_TABLE.fullmatch(str(table))
        if m and capacity is not None:
            columns[int(m.group(1))] = (str(data_type).lower(), int(str(capacity)))
    return columns


def too_long(what: str, size: int, column: BodyColumn) -> PinLaterError:
    """The refusal of a body longer than ``column`` holds, with the statement that lifts it."""
    wider = "MEDIUMBLOB" if size <= MEDIUMBLOB_BYTES else "LONGBLOB"
    kind = column.data_type.upper()
    origin = f"a {kind}, as the original PinLater created it" if kind == "BLOB" else f"a {kind}"
    return PinLaterError(
        ErrorCode.ENQUEUE_REJECTED,
        f"{what} is {size} bytes, over the limit of {column.capacity} bytes of table {column.table}"
        f" (its body column is {origin}); nothing was written. To lift the limit, run:"
        f" ALTER TABLE {column.table} MODIFY body {wider} NOT NULL",
    )


def check_packet(body: bytes, what: str, max_allowed_packet: int) -> None:
    """Refuse ``body`` if it cannot travel in one statement under max_allowed_packet. An enqueue
    sends a body hex-encoded (two bytes a byte, ``_pinlater.mysql_insert_statements``); a
    checkpoint escaped, which is never longer."""
    needed = 2 * len(body) + _STATEMENT_ROOM
    if needed > max_allowed_packet:
        raise PinLaterError(
            ErrorCode.ENQUEUE_REJECTED,
            f"{what} is {len(body)} bytes, too long for one statement under the MySQL server's"
            f" max_allowed_packet of {max_allowed_packet} bytes (a body travels hex-encoded, twice its size);"
            f" nothing was written. To lift the limit, run: SET GLOBAL max_allowed_packet = {_packet_to_allow(needed)}"
            " (and set it in the server's configuration)",
        )


def _packet_to_allow(needed: int) -> int:
    """``needed`` rounded up to a whole MiB."""
    mib = 1024 * 1024
    return -(-needed // mib) * mib
