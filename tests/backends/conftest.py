"""The ``store`` fixture: one fresh, empty shard per test, for every backend kind."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.stores import STORE_KINDS, make_store

from pinlater.backends.base import ShardStore

# Kinds that need a server process carry the pytest marker of the same name (see pyproject).
_SERVER_KINDS = ("redis", "mysql")
_PARAMS = [
    pytest.param(k, marks=getattr(pytest.mark, k.split("-")[0])) if k.split("-")[0] in _SERVER_KINDS else k
    for k in STORE_KINDS
]


@pytest.fixture(params=_PARAMS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ShardStore]:
    with make_store(request.param, tmp_path) as shard:
        yield shard
