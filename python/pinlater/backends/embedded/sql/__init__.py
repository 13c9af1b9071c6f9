"""The embedded store's SQL, one statement (or the schema script) per ``.sql`` file.

Files ship as package data; ``load`` reads one through ``importlib.resources`` so an installed
wheel and a source tree behave the same. Values are always bound as named parameters.

The write statements of the hot path (``native_hot.STATEMENTS``) and those they share with
``store.py`` say ``INSERT OR FAIL`` / ``UPDATE OR FAIL``. Every write of either connection runs
in its own ``SAVEPOINT``, rolled back on any error (``connection.py``; the Rust writer's
``Writer::one``), so a statement that stops half-way never leaves its first rows behind. SQLite
would otherwise keep a statement journal for each statement that writes many rows and may abort
(a copy of every page it changes, taken again by every statement of the transaction: about 2% of
the writer's instructions per job). Without one, an I/O error, a full disk or a lack of memory
in the middle of such a statement rolls back the whole transaction, which both connections
already answer as a failed write of every request of the group.
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files


@cache
def load(name: str) -> str:
    """The text of ``sql/{name}.sql``; raises ``FileNotFoundError`` for an unknown name."""
    return files(__name__).joinpath(f"{name}.sql").read_text(encoding="utf-8")


def names() -> list[str]:
    """Every statement file's name (without ``.sql``), for the test that compiles them all."""
    return sorted(p.name[: -len(".sql")] for p in files(__name__).iterdir() if p.name.endswith(".sql"))
