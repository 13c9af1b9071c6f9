"""Log lines that a hostile or broken peer can trigger, at most one per interval.

A fuzzer or a flood of connections can cause the same event thousands of times a minute; each
kind gets a ``ThrottledLog``, which writes the first occurrence at once, drops the rest for
``interval`` seconds, and tells on its next line how many it dropped.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping

__all__ = ["ThrottleFilter", "ThrottledLog"]


class _Window:
    """At most one occurrence let through per ``interval`` seconds; the others counted."""

    __slots__ = ("_last", "interval", "suppressed")

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._last = float("-inf")
        self.suppressed = 0

    def admit(self) -> int | None:
        """None if this occurrence is dropped; else how many were dropped since the last one let
        through (the count starts again)."""
        now = time.monotonic()
        if now - self._last < self.interval:
            self.suppressed += 1
            return None
        self._last = now
        dropped, self.suppressed = self.suppressed, 0
        return dropped


_MORE = " (and %d more like this since the last such line)"


class ThrottledLog:
    """One kind of event: at most one line per ``interval`` seconds, with a count of the others."""

    __slots__ = ("_logger", "_window", "level")

    def __init__(self, logger: logging.Logger, interval: float = 5.0, level: int = logging.WARNING) -> None:
        self._logger = logger
        self._window = _Window(interval)
        self.level = level

    @property
    def interval(self) -> float:
        return self._window.interval

    def __call__(
        self, msg: str, *args: object, exc_info: bool = False, extra: Mapping[str, object] | None = None
    ) -> bool:
        """Log ``msg % args`` unless a line of this kind went out less than ``interval`` ago
        (with the exception being handled and its traceback, if ``exc_info``; with ``extra``'s
        fields, which JSON logs carry as keys).

        Returns whether the line was written.
        """
        dropped = self._window.admit()
        if dropped is None:
            return False
        if dropped:
            msg += _MORE
            args = (*args, dropped)
        self._logger.log(self.level, msg, *args, exc_info=exc_info, extra=extra)
        return True

    @property
    def suppressed(self) -> int:
        """Occurrences dropped since the last line written."""
        return self._window.suppressed


class ThrottleFilter(logging.Filter):
    """For a logger of a library's that a peer drives (aiohttp's ``aiohttp.server``, which logs
    every malformed request with its traceback, the request's own bytes in it): records of an
    exception of ``kinds`` (what a peer causes) at most one per ``interval`` seconds, with a count
    of the others, each cut to ``cut`` characters and its exception to one line; any other record
    (a fault of the server's) as it is. A flood of 8 KB malformed headers wrote 19 MB of log a
    second."""

    def __init__(self, kinds: tuple[type[BaseException], ...], interval: float = 5.0, cut: int = 300) -> None:
        super().__init__()
        self.kinds = kinds
        self.cut = cut
        self._window = _Window(interval)

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if not isinstance(exc, self.kinds):
            return True
        dropped = self._window.admit()
        if dropped is None:
            return False
        text = f"{record.getMessage()}: {type(exc).__name__}: {exc}"
        if len(text) > self.cut:
            text = text[: self.cut] + f"... ({len(text) - self.cut} more characters)"
        if dropped:
            text += _MORE % dropped
        record.msg, record.args = text.replace("\n", " "), None
        record.exc_info = record.exc_text = None
        record.stack_info = None
        return True
