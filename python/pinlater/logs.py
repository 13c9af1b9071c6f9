"""Logging setup for the server: plain text for people, JSON lines for log pipelines.

Levels mean something here: DEBUG is per request (admin HTTP requests; never per job), INFO is a
notable event that needs nothing (server started, queue created, config reloaded), WARNING is
something an operator should look at (a shard unhealthy, a password refused, jobs deleted),
ERROR is a failure that lost a request or a reload. No line is logged per job on the hot path.

``--log-format json`` writes one JSON object per line with ``ts`` (UTC, ISO 8601 with
milliseconds), ``level``, ``logger``, ``msg``, any ``extra={...}`` fields the call passed
(``remote``, ``queue``, ``action``, ...) and ``exc`` with the traceback when there is one::

    {"ts": "2025-01-02T03:04:05.678Z", "level": "WARNING", "logger": "pinlater.server.admin",
     "msg": "admin retry refused: wrong admin password", "remote": "10.0.0.7"}
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import IO, Any

FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

#: Attributes every LogRecord has; anything else on a record came from ``extra=``.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": _iso(record.created),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_"):
                out[key] = value
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            out["exc"] = record.exc_text
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        return json.dumps(out, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """The classic line, with any ``extra=`` fields appended as ``key=value``."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        extras = [f"{k}={v}" for k, v in record.__dict__.items() if k not in _STANDARD and not k.startswith("_")]
        if not extras:
            return line
        head, sep, tail = line.partition("\n")  # keep a traceback below the extras
        return f"{head} [{' '.join(extras)}]{sep}{tail}"


def _iso(created: float) -> str:
    seconds = int(created)
    millis = int((created - seconds) * 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z"


def setup_logging(level: str | int = "INFO", fmt: str = "text", stream: IO[str] | None = None) -> None:
    """Send the root logger's records to ``stream`` (stderr) in ``fmt`` ("text" or "json").

    Replaces handlers set up earlier, so calling it twice does not double every line. Noisy
    third-party loggers (aiohttp's access log) stay at WARNING unless ``level`` is DEBUG.
    """
    if fmt not in FORMATS:
        raise ValueError(f"log format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    numeric = logging.getLevelName(level) if isinstance(level, str) else level
    root.setLevel(numeric)
    if numeric > logging.DEBUG:
        logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
