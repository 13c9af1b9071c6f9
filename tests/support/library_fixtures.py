"""Fixtures shared by the client and worker suites: one server per module, a client, a queue.

Each suite's conftest imports them, so both run against the same kind of setup.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pinlater.client import PinLaterClient
from tests.client.fixtures import shared_server, unique_queue
from tests.support.pinlater_server import ServerProcess


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    yield from shared_server(tmp_path_factory)


@pytest.fixture
def address(srv: ServerProcess) -> str:
    return f"127.0.0.1:{srv.port}"


@pytest.fixture
def pl(address: str) -> Iterator[PinLaterClient]:
    with PinLaterClient(address, timeout=10) as client:
        yield client


@pytest.fixture
def queue(request: pytest.FixtureRequest, pl: PinLaterClient) -> str:
    name = unique_queue(request)
    pl.create_queue(name)
    return name
