"""A server shared by one test module (starting one costs seconds on a small machine).

Tests that share it use their own queue names (``unique_queue``). The server has the admin
password of ``tests.conftest`` and a queue config in which the queue ``paused`` is rate limited
to 0 jobs per second, so every dequeue from it is DEQUEUE_RATE_LIMITED.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ADMIN_PASSWORD, original_password_hash
from tests.support.pinlater_server import ServerProcess

PAUSED_QUEUE = "paused"
_names = itertools.count(1)


def shared_server(tmp_path_factory: pytest.TempPathFactory, broker: bool = False) -> Iterator[ServerProcess]:
    """``broker``: dequeues served through the dequeue broker (``BROKER_ENABLED``)."""
    tmp = tmp_path_factory.mktemp("shared-server")
    queues = tmp / "queues.json"
    queues.write_text(json.dumps({"queues": [{"name": PAUSED_QUEUE, "queueConfig": {"maxJobsPerSecond": 0}}]}))
    props = tmp / "pinlater.properties"
    props.write_text(
        f"ADMIN_PASSWORD_HASH={original_password_hash(ADMIN_PASSWORD)}\nQUEUE_CONFIG_FILE_PATH={queues}\n"
        f"BROKER_ENABLED={str(broker).lower()}\n"
    )
    server = ServerProcess(Path(tmp / "data"), properties=props).start()
    try:
        yield server
    finally:
        server.stop()


def unique_queue(request: pytest.FixtureRequest) -> str:
    """A fresh queue name (``\\w+``, within the contract's length) for one test."""
    stem = re.sub(r"\W", "_", request.node.name)[:40]
    return f"{stem}_{next(_names)}"
