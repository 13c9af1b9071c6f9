"""Reading a configuration file's text: one rule for every file a person writes (properties,
shard configs, the queue config, the ServerSet).

UTF-8, with a byte order mark taken away (an editor's BOM made the first key another key, and
its setting was dropped unseen); a file that is not UTF-8, cannot be read (``ConfigUnreadable``),
or is past ``MAX_CONFIG_BYTES`` (a 100 MB queue config held the event loop 22 s) is a
``ConfigError`` naming it, and so is a watched one that is not a regular file (a FIFO read on
the event loop hung the server past SIGTERM; a file read once at start may be a pipe:
``--properties <(envsubst < template)``).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from pinlater.errors import ConfigError

__all__ = ["MAX_CONFIG_BYTES", "ConfigUnreadable", "read_config_text"]

#: The longest configuration file read (bytes).
MAX_CONFIG_BYTES = 16 * 1024 * 1024


class ConfigUnreadable(ConfigError):
    """The file could not be opened or read (it may be put right without a change to it: a
    permission)."""


def read_config_text(path: Path, what: str, *, regular: bool = False) -> str:
    """The text of ``what`` (a properties file, a backend config, ...) at ``path``; with
    ``regular`` (a file watched from the event loop), only a regular file's."""
    try:  # (a FIFO opens at once, to be refused: blocking, the open waited for a writer)
        fd = os.open(path, os.O_RDONLY | (os.O_NONBLOCK if regular else 0))
    except OSError as exc:
        raise ConfigUnreadable(f"cannot read {what} {path}: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if regular and not stat.S_ISREG(info.st_mode):
            raise ConfigError(f"cannot read {what} {path}: not a regular file")
        if info.st_size > MAX_CONFIG_BYTES:
            raise ConfigError(f"{what} {path} is {info.st_size} bytes, past the {MAX_CONFIG_BYTES} taken")
        with os.fdopen(fd, "rb", closefd=False) as file:
            data = file.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ConfigUnreadable(f"cannot read {what} {path}: {exc.strerror}") from None
    finally:
        os.close(fd)
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{what} {path} is past the {MAX_CONFIG_BYTES} bytes taken")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{what} {path} is not UTF-8: byte {exc.start} is {data[exc.start]:#04x}") from None
