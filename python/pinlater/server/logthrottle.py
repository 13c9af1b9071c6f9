"""Log lines that a hostile or broken peer can trigger, at most one per interval.

A fuzzer or a flood of connections can cause the same event thousands of times a minute; each
kind gets a ``ThrottledLog``, which writes the first occurrence at once, drops the rest for
``interval`` seconds, and tells on its next line how many it dropped.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping

__all__ = ["ThrottledLog"]


class ThrottledLog:
    """One kind of event: at most one line per ``interval`` seconds, with a count of the others."""

    __slots__ = ("_last", "_logger", "_suppressed", "interval", "level")

    def __init__(self, logger: logging.Logger, interval: float = 5.0, level: int = logging.WARNING) -> None:
        self._logger = logger
        self.interval = interval
        self.level = level
        self._last = float("-inf")
        self._suppressed = 0

    def __call__(
        self, msg: str, *args: object, exc_info: bool = False, extra: Mapping[str, object] | None = None
    ) -> bool:
        """Log ``msg % args`` unless a line of this kind went out less than ``interval`` ago
        (with the exception being handled and its traceback, if ``exc_info``; with ``extra``'s
        fields, which JSON logs carry as keys).

        Returns whether the line was written.
        """
        now = time.monotonic()
        if now - self._last < self.interval:
            self._suppressed += 1
            return False
        self._last = now
        if self._suppressed:
            msg += " (and %d more like this since the last such line)"
            args = (*args, self._suppressed)
            self._suppressed = 0
        self._logger.log(self.level, msg, *args, exc_info=exc_info, extra=extra)
        return True

    @property
    def suppressed(self) -> int:
        """Occurrences dropped since the last line written."""
        return self._suppressed
