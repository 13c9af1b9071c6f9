"""Text fitted to the character set of the original's tables, as its MySQL fitted it.

The original created each queue's database in the server's default character set, ``latin1`` on
MySQL 5.x, and MySQL wrote each character such a column cannot hold as ``?``. This server sends
text as ``utf8mb4`` in strict mode, so the same text made MySQL refuse the statement: error 1366
(incorrect string value) writing the column, or 1267 (illegal mix of collations) appending to
it. An enqueue or an ack refused so (rolled back: nothing applied) runs again with each status
fitted to its table's ``custom_status`` column, read from information_schema at each such
refusal (rare: the statuses fitted are not refused again), an enqueue of jobs with dedup keys or
expiries too (``MySQLStore.enqueue_keyed_jobs``), and a checkpoint's status to prepend is
fitted so too: each character the column cannot hold becomes ``?``. Tables created here are ``utf8mb4``
and never refuse one.
"""

from __future__ import annotations

import codecs

#: MySQL's errors for text a column's character set cannot hold.
TEXT_REFUSED_ERRORS = frozenset({1366, 1267})

#: MySQL character sets and the Python codec of the same repertoire (MySQL's ``latin1`` is
#: Windows-1252); one not here is fitted to ASCII, which every one of them holds.
_CODECS = {
    "latin1": "cp1252",
    "ascii": "ascii",
    "latin2": "iso8859_2",
    "greek": "iso8859_7",
    "hebrew": "iso8859_8",
    "cp1250": "cp1250",
    "cp1251": "cp1251",
    "cp1256": "cp1256",
    "cp1257": "cp1257",
}


def fit_text(text: str, charset: str | None) -> str:
    """``text`` with each character the MySQL character set ``charset`` cannot hold as ``?``
    (``utf8mb4``, or None, holds all: unchanged)."""
    if charset is None or charset == "utf8mb4" or text.isascii():
        return text
    if charset in ("utf8", "utf8mb3"):  # three bytes at most: no character past U+FFFF
        return "".join(c if ord(c) <= 0xFFFF else "?" for c in text)
    codec = _CODECS.get(charset, "ascii")
    try:
        codecs.lookup(codec)
    except LookupError:
        codec = "ascii"
    return text.encode(codec, "replace").decode(codec)
