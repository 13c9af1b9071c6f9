"""The embedded store's SQL, one statement (or the schema script) per ``.sql`` file.

Files ship as package data; ``load`` reads one through ``importlib.resources`` so an installed
wheel and a source tree behave the same. Values are always bound as named parameters.
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
