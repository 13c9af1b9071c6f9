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
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar, cast

from pinlater.config_files import ConfigUnreadable, read_config_text
from pinlater.errors import ConfigError
from pinlater.logthrottle import ThrottledLog

log = logging.getLogger(__name__)

Signature = tuple[int, int, int] | None
T = TypeVar("T")

#: Reads of a file that changed while it was prepared, at most, in one look (``look_now``).
LOOKS = 3


def _signature(path: Path) -> Signature:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


#: A signature no file has: the file is read at the next look, changed or not.
_READ_AGAIN: Signature = (-1, -1, -1)


@dataclass(frozen=True, slots=True)
class _Look(Generic[T]):
    """What one look at the file found (``FileWatcher._look``, on a thread of its own)."""

    signature: Signature
    #: The file's prepared content, if it changed and was read and prepared.
    prepared: T | None = None
    changed: bool = False
    #: Why it was not taken: the message to log, and whether the file is read again at the
    #: next look though unchanged (it could not be read).
    refused: ConfigError | None = None
    failed: Exception | None = None


class FileWatcher(Generic[T]):
    """Calls ``apply(prepare(text))`` at start and whenever the file changes.

    ``prepare`` (parsing the text, opening what it names) may take long or block: after start it
    runs on a thread, with the file's stat and read, so that a large file or a store that does not
    answer holds no request of the event loop's; ``apply``, which swaps the result in, runs on the
    loop. Without ``prepare`` the text itself is applied.
    """

    def __init__(
        self,
        path: Path,
        apply: Callable[[T], None],
        what: str,
        interval: float = 0.5,
        prepare: Callable[[str], T] | None = None,
        discard: Callable[[T], None] | None = None,
    ) -> None:
        self.path = path
        self.apply = apply
        self.prepare = prepare if prepare is not None else cast(Callable[[str], T], _as_is)
        #: Called with what was prepared and will not be applied (``look_now``).
        self.discard = discard
        self.what = what
        self.interval = interval
        self._seen: Signature = None
        self._task: asyncio.Task[None] | None = None
        self.reloads = 0
        self.errors = 0
        #: A file that cannot be read is tried at each look: its line once a minute at most.
        self._unread = ThrottledLog(log, 60.0, logging.ERROR)

    def load_now(self, strict: bool = False) -> bool:
        """Read and apply the file if it changed since the last look; True if applied. Blocks
        (the start-up's load; the watch itself prepares on a thread).

        With ``strict`` (start-up), a missing or bad file raises ``ConfigError`` naming it
        instead of being logged.
        """
        return self._settle(self._look(strict), strict)

    def _look(self, strict: bool) -> _Look[T]:
        """Stat, read and prepare the file if it changed (touches no state: may run on a thread)."""
        sig = _signature(self.path)
        if sig == self._seen and not strict:
            return _Look(sig)
        if sig is None:
            return _Look(sig, changed=True, refused=ConfigError(f"{self.what} {self.path} does not exist"))
        try:
            text = read_config_text(self.path, self.what, regular=True)
        except ConfigError as exc:
            # (not read: read again at the next look, so a permission put right is taken
            # without an edit, which alone would change the file's signature)
            return _Look(_READ_AGAIN if isinstance(exc, ConfigUnreadable) else sig, changed=True, refused=exc)
        try:
            return _Look(sig, self.prepare(text), changed=True)
        except Exception as exc:
            return _Look(sig, changed=True, failed=exc)

    def _settle(self, look: _Look[T], strict: bool) -> bool:
        """Take what ``_look`` found (on the loop): apply it, or log why not."""
        if not look.changed:
            return False
        self._seen = look.signature
        if look.refused is not None:
            if strict:
                raise look.refused
            self.errors += 1
            if look.signature is None:
                log.warning("%s %s is missing; keeping the last good one", self.what, self.path)
            else:
                self._unread("%s; keeping the last good one", look.refused)
            return False
        try:
            if look.failed is not None:
                raise look.failed
            self.apply(cast(T, look.prepared))
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

    async def look_now(self) -> bool:
        """One look as the watch makes it: read and prepared on a thread, applied here. A file
        that changed while it was prepared is read and prepared again (an admin edit applied at
        once must not be undone by the text read before it), at most ``LOOKS`` times; the last
        is applied all the same (a file rewritten faster than it is prepared was never taken).
        What is prepared and not applied is handed to ``discard`` (a reload's new stores are
        closed), on a cancel too, once its thread is done."""
        loop = asyncio.get_running_loop()
        for attempt in range(LOOKS):
            done = loop.run_in_executor(None, self._look, False)
            try:
                look = await asyncio.shield(done)
            except asyncio.CancelledError:
                done.add_done_callback(self._dispose_late)
                raise
            if attempt + 1 == LOOKS or not look.changed or look.refused is not None:
                break
            if _signature(self.path) == look.signature:
                break
            self._dispose(look)
        return self._settle(look, False)

    def _dispose(self, look: _Look[T]) -> None:
        if self.discard is not None and look.changed and look.refused is None and look.failed is None:
            try:
                self.discard(cast(T, look.prepared))
            except Exception:
                log.exception("%s %s: dropping what was prepared of it failed", self.what, self.path)

    def _dispose_late(self, done: asyncio.Future[_Look[T]]) -> None:
        if not done.cancelled() and done.exception() is None:
            self._dispose(done.result())

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            await self.look_now()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None


def _as_is(text: str) -> str:
    return text
