"""``DataDirLock``: one server process per embedded data directory.

SQLite would let two processes share the shard files, but two servers would each run a
monitor over the same jobs and each believe it owns them. The lock is ``flock`` on
``{data_dir}/LOCK``: the kernel drops it when the holder exits, however it exits, so a
SIGKILLed server never leaves a stale lock behind. The holder's pid is written into the file
only so that the error can name it.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from types import TracebackType

from pinlater.errors import StoreLockedError

LOCK_FILE_NAME = "LOCK"


class DataDirLock:
    """An exclusive, non-blocking lock on a data directory (created if missing).

    ``acquire`` raises ``StoreLockedError`` naming the directory and the holder's pid when
    another open lock holds it, in this process or another. ``release`` is idempotent. Use it
    as a context manager or call ``acquire``/``release``.
    """

    def __init__(self, data_dir: Path) -> None:
        self._data_dir = data_dir
        self._path = data_dir / LOCK_FILE_NAME
        self._fd: int | None = None

    @property
    def path(self) -> Path:
        """The lock file."""
        return self._path

    @property
    def held(self) -> bool:
        """Whether this object holds the lock."""
        return self._fd is not None

    def acquire(self) -> DataDirLock:
        """Take the lock; return self. Raise ``StoreLockedError`` if another holder has it."""
        if self._fd is not None:
            return self
        self._data_dir.mkdir(parents=True, exist_ok=True)
        # os.open makes the descriptor non-inheritable (PEP 446), so children never hold the lock.
        fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_pid(fd)
            os.close(fd)
            who = f"pid {holder}" if holder else "another process"
            raise StoreLockedError(
                f"data directory {self._data_dir} is in use by {who} (lock file {self._path})"
            ) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        """Give the lock up; a no-op when not held.

        The file stays: removing it would let a process that opened the old file and one that
        creates a new one both "hold" the lock.
        """
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            os.ftruncate(fd, 0)  # no stale pid for the next reader to blame
        finally:
            os.close(fd)  # closing the last descriptor releases the flock

    def __enter__(self) -> DataDirLock:
        return self.acquire()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


def _read_pid(fd: int) -> int | None:
    """The pid the holder wrote, or None while it is still being written (or was garbled)."""
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        return int(text) if text else None
    except (OSError, ValueError):
        return None
