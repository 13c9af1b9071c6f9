"""Logging: JSON lines with extras, the text format, and ``pinlater serve --log-format json``."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Callable, Iterator

import pytest

from pinlater.logs import setup_logging
from tests.admin.conftest import http
from tests.conftest import ADMIN_PASSWORD, original_password_hash
from tests.support.pinlater_server import ServerProcess


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)


def test_json_lines_carry_level_logger_message_and_extras(restore_logging: None) -> None:
    out = io.StringIO()
    setup_logging("INFO", "json", out)
    setup_logging("INFO", "json", out)  # twice: still one handler
    log = logging.getLogger("pinlater.test")
    log.debug("not shown")
    log.warning("queue %s paused", "emails", extra={"remote": "10.0.0.1", "queue": "emails"})
    try:
        raise ValueError("bad")
    except ValueError:
        log.exception("it failed")
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert len(lines) == 2
    first, second = lines
    assert first["level"] == "WARNING" and first["logger"] == "pinlater.test"
    assert first["msg"] == "queue emails paused"
    assert first["remote"] == "10.0.0.1" and first["queue"] == "emails"
    assert first["ts"].endswith("Z") and "T" in first["ts"]
    assert second["level"] == "ERROR" and "ValueError: bad" in second["exc"]


def test_text_lines_append_extras(restore_logging: None) -> None:
    out = io.StringIO()
    setup_logging("DEBUG", "text", out)
    logging.getLogger("pinlater.test").info("hello %d", 5, extra={"remote": "::1"})
    line = out.getvalue().strip()
    assert line.endswith("INFO pinlater.test: hello 5 [remote=::1]")
    with pytest.raises(ValueError):
        setup_logging("INFO", "xml", out)


def test_serve_with_json_logs(start_server: Callable[..., ServerProcess]) -> None:
    server = start_server(
        "--log-format", "json", properties={"ADMIN_PASSWORD_HASH": original_password_hash(ADMIN_PASSWORD)}
    )
    assert http(server, "/api/retry", {"queue": "q", "password": "wrong"}).status == 403
    server.stop()
    records = [json.loads(line) for line in server.lines if line.strip()]
    assert records, "the server logged nothing"
    assert all({"ts", "level", "logger", "msg"} <= r.keys() for r in records)
    assert any(r["msg"].startswith("serving PinLater on") and r["level"] == "INFO" for r in records)
    refused = [r for r in records if "refused" in r["msg"]]
    assert refused and refused[0]["level"] == "WARNING" and refused[0]["remote"] == "127.0.0.1"
