"""Fixtures for the admin tests: a server with a watched queue config and the admin password,
a small Thrift helper, and plain HTTP reads of the admin port."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.conftest import ADMIN_PASSWORD, original_password_hash
from tests.support.pinlater_server import ServerProcess

PENDING, IN_PROGRESS, SUCCEEDED, FAILED = 0, 1, 2, 3


@dataclass
class Http:
    """A status, headers and body from the admin port (errors are returned, not raised)."""

    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode("utf-8")

    def json(self) -> Any:
        return json.loads(self.body)


def http(
    srv: ServerProcess,
    path: str,
    body: Any = None,
    *,
    method: str | None = None,
    content_type: str = "application/json",
    headers: dict[str, str] | None = None,
) -> Http:
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    req = urllib.request.Request(f"http://127.0.0.1:{srv.admin_port}{path}", data=data, method=method)
    for name, value in (headers or {}).items():
        req.add_header(name, value)
    if data is not None:
        req.add_header("Content-Type", content_type)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return Http(resp.status, dict(resp.headers), resp.read())
    except urllib.error.HTTPError as exc:
        return Http(exc.code, dict(exc.headers), exc.read())


class Jobs:
    """Thrift calls the admin tests need, through the Apache-generated client."""

    def __init__(self, client: Any, t: ModuleType) -> None:
        self.c = client
        self.t = t
        self.ctx = t.RequestContext(source="admin-tests:localhost", requestId="admin-1")

    def create(self, queue: str) -> None:
        self.c.createQueue(self.ctx, queue)

    def enqueue(self, queue: str, *bodies: bytes, **kw: Any) -> list[str]:
        jobs = [self.t.PinLaterJob(body=b, **kw) for b in bodies]
        request = self.t.PinLaterEnqueueRequest(queueName=queue, jobs=jobs)
        return list(self.c.enqueueJobs(self.ctx, request).jobDescriptors)

    def dequeue(self, queue: str, limit: int = 10) -> dict[str, bytes]:
        request = self.t.PinLaterDequeueRequest(queueName=queue, limit=limit)
        return dict(self.c.dequeueJobs(self.ctx, request).jobs or {})

    def ack(self, queue: str, ok: list[str] = (), failed: list[str] = (), status: str = "") -> None:  # type: ignore[assignment]
        info = self.t.PinLaterJobAckInfo
        self.c.ackDequeuedJobs(
            self.ctx,
            self.t.PinLaterJobAckRequest(
                queueName=queue,
                jobsSucceeded=[info(jobDescriptor=d) for d in ok],
                jobsFailed=[info(jobDescriptor=d, appendCustomStatus=status) for d in failed],
            ),
        )

    def count(self, queue: str, state: int) -> int:
        return int(self.c.getJobCount(self.ctx, self.t.PinLaterGetJobCountRequest(queueName=queue, jobState=state)))

    def fail_one(self, queue: str, body: bytes, status: str = "boom") -> str:
        """Enqueue ``body`` with one attempt, dequeue it and ack it failed: it ends FAILED.

        Call it while the queue has no other runnable job (the dequeue must find this one)."""
        (descriptor,) = self.enqueue(queue, body, numAttemptsAllowed=1)
        got = self.dequeue(queue, 1)
        assert list(got) == [descriptor], f"expected to dequeue {descriptor}, got {list(got)}"
        self.ack(queue, failed=[descriptor], status=status)
        return descriptor


@dataclass
class AdminServer:
    server: ServerProcess
    jobs: Jobs
    queue_config: Path

    def get(self, path: str) -> Http:
        return http(self.server, path)

    def post(self, path: str, body: Any) -> Http:
        return http(self.server, path, body)


def start_admin_server(
    tmp_path: Path,
    start_server: Callable[..., ServerProcess],
    open_client: Callable[[ServerProcess], Any],
    ttypes: ModuleType,
    **properties: Any,
) -> AdminServer:
    """A server on a fresh embedded store with ADMIN_PASSWORD_HASH and a watched (empty) queue
    config, and any other ``properties``."""
    queue_config = tmp_path / "queues.json"
    queue_config.write_text(json.dumps({"queues": []}))
    server = start_server(
        properties={
            "ADMIN_PASSWORD_HASH": original_password_hash(ADMIN_PASSWORD),
            "QUEUE_CONFIG_FILE_PATH": queue_config,
            **properties,
        }
    )
    return AdminServer(server, Jobs(open_client(server), ttypes), queue_config)


@pytest.fixture
def admin_server(
    tmp_path: Path,
    start_server: Callable[..., ServerProcess],
    open_client: Callable[[ServerProcess], Any],
    ttypes: ModuleType,
) -> AdminServer:
    """``start_admin_server`` with nothing more."""
    return start_admin_server(tmp_path, start_server, open_client, ttypes)
