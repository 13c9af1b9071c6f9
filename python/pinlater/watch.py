"""Watching configuration files and reloading them on change.

A ``FileWatcher`` polls a file's identity (inode, size, mtime) and, when it changes, reads the
text and hands it to a callback. A callback that raises is logged with the reason and the
last good configuration stays in force: a bad edit never takes a running server down.
Polling (default every 0.5 s) keeps this portable and makes "reloaded within a second" hold.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from pathlib import Path

from pinlater.config_files import ConfigUnreadable, read_config_text
from pinlater.errors import ConfigError
from pinlater.logthrottle import ThrottledLog

log = logging.getLogger(__name__)

Signature = tuple[int, int, int] | None


def _signature(path: Path) -> Signature:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


#: A signature no file has: the file is read at the next look, changed or not.
_READ_AGAIN: Signature = (-1, -1, -1)


class FileWatcher:
    """Calls ``on_change(text)`` at start and whenever the file changes."""

    def __init__(self, path: Path, on_change: Callable[[str], None], what: str, interval: float = 0.5) -> None:
        self.path = path
        self.on_change = on_change
        self.what = what
        self.interval = interval
        self._seen: Signature = None
        self._task: asyncio.Task[None] | None = None
        self.reloads = 0
        self.errors = 0
        #: A file that cannot be read is tried at each look: its line once a minute at most.
        self._unread = ThrottledLog(log, 60.0, logging.ERROR)

    def load_now(self, strict: bool = False) -> bool:
        """Read and apply the file if it changed since the last look; True if applied.

        With ``strict`` (start-up), a missing or bad file raises ``ConfigError`` naming it
        instead of being logged.
        """
        sig = _signature(self.path)
        if sig == self._seen and not strict:
            return False
        self._seen = sig
        if sig is None:
            if strict:
                raise ConfigError(f"{self.what} {self.path} does not exist")
            self.errors += 1
            log.warning("%s %s is missing; keeping the last good one", self.what, self.path)
            return False
        try:
            text = read_config_text(self.path, self.what, regular=True)
        except ConfigError as exc:
            if strict:
                raise
            if isinstance(exc, ConfigUnreadable):
                # (not read: read again at the next look, so a permission put right is taken
                # without an edit, which alone would change the file's signature)
                self._seen = _READ_AGAIN
            self.errors += 1
            self._unread("%s; keeping the last good one", exc)
            return False
        try:
            self.on_change(text)
        except Exception as exc:
            if strict:
                raise ConfigError(f"{self.what} {self.path}: {exc}") from None
            self.errors += 1
            log.error("%s %s rejected, keeping the last good one: %s", self.what, self.path, exc)
            return False
        self.reloads += 1
        log.info("%s %s loaded", self.what, self.path)
        return True

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"watch:{self.path}")

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            self.load_now()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
