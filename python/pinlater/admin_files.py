"""Editing PinLater's configuration files in place, atomically.

A temp file is written beside the original, fsynced and renamed over it, so a watcher never reads
half a file. ``set_queue_rate``, ``pause_queue`` and ``resume_queue`` edit the queue config;
``set_shard_dequeue_only`` edits a backend config (Redis or MySQL format). Every server watching the
file picks the change up within a second. ``pinlater.admin`` re-exports these.
"""

from __future__ import annotations

import functools
import json
import os
import re
import tempfile
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from pinlater.config_files import read_config_text
from pinlater.queue_rules import PAUSED_FROM, RULE_KEYS
from pinlater.ratelimit import parse_queue_config

P = ParamSpec("P")
T = TypeVar("T")

_EDITING = threading.Lock()


def _one_edit_at_a_time(edit: Callable[P, T]) -> Callable[P, T]:
    """Run ``edit`` (a read, change and write of a file) while no other edit of this process runs:
    the admin API edits on the loop's executor threads, and twenty concurrent rate changes of
    twenty queues each read the file before the others wrote it, so 14 of them were lost while
    every one answered 200 (a probe). Edits from other processes are not ordered by it."""

    @functools.wraps(edit)
    def edited(*args: P.args, **kwargs: P.kwargs) -> T:
        with _EDITING:
            return edit(*args, **kwargs)

    return edited


def write_atomically(path: str | os.PathLike[str], text: str) -> None:
    """Replace ``path`` with ``text``: write a temp file beside it, fsync, rename over it.

    The file keeps its permissions. A reader sees the old file or the new one, never a mix.
    """
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        try:
            os.chmod(tmp, os.stat(target).st_mode & 0o7777)
        except FileNotFoundError:
            os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(target.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _load_queue_config(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {"queues": []}
    text = read_config_text(path, "queue config")  # (as the server reads it: a BOM skipped)
    parse_queue_config(text)  # refuse to edit a file the server would reject
    document: dict[str, Any] = json.loads(text)
    return document


def _save_queue_config(path: Path, document: dict[str, Any]) -> str:
    text = json.dumps(document, indent=2) + "\n"
    parse_queue_config(text)
    write_atomically(path, text)
    return text


def _entry(document: dict[str, Any], queue: str) -> dict[str, Any] | None:
    for entry in document["queues"]:
        if entry.get("name") == queue:
            found: dict[str, Any] = entry
            return found
    return None


def read_queue_rates(path: str | os.PathLike[str]) -> dict[str, float]:
    """The rates a queue config file sets: ``{queue: maxJobsPerSecond}`` (0 = paused)."""
    return parse_queue_config(read_config_text(Path(path), "queue config"))


@_one_edit_at_a_time
def set_queue_rate(path: str | os.PathLike[str], queue: str, rate: float | None) -> str:
    """Set ``queue``'s maxJobsPerSecond (``None`` removes its limit); returns the new file text.

    Other queues, and any other keys in the file, are kept as they were.

    >>> set_queue_rate("queues.json", "emails", 25)      # doctest: +SKIP
    """
    if rate is not None and (not isinstance(rate, int | float) or rate != rate or rate < 0 or rate == float("inf")):
        raise ValueError(f"rate must be a finite number >= 0, not {rate!r}")
    target = Path(path)
    document = _load_queue_config(target)
    entry = _entry(document, queue)
    if rate is None:
        _drop_rate(document, entry)
    elif entry is None:
        document["queues"].append({"name": queue, "queueConfig": {"maxJobsPerSecond": rate}})
    else:
        entry.setdefault("queueConfig", {})["maxJobsPerSecond"] = rate
        _paused_from(entry)  # (a rate set is no pause to undo)
    return _save_queue_config(target, document)


def _paused_from(entry: dict[str, Any]) -> Any:
    """Take the rate a pause remembered out of ``entry``: its ``queueConfig``'s ``PAUSED_FROM``,
    or one an earlier build kept beside ``name`` (which an original server refused)."""
    config = entry.get("queueConfig")
    kept = config.pop(PAUSED_FROM, None) if isinstance(config, dict) else None
    legacy = entry.pop(PAUSED_FROM, None)
    return kept if kept is not None else legacy


@_one_edit_at_a_time
def set_queue_rules(path: str | os.PathLike[str], queue: str, rules: Mapping[str, int | float | None]) -> str:
    """Set some of ``queue``'s rules (``queue_rules.RULE_KEYS``: ``groupConcurrency``,
    ``maxInProgress``, ``groupJobsPerSecond``; None removes one); returns the new file text. The
    queue's rate limit, the other queues and any other keys are kept; a file the server would
    refuse is not written (``ConfigError``).

    >>> set_queue_rules("queues.json", "payments", {"maxInProgress": 200})      # doctest: +SKIP
    """
    unknown = set(rules) - set(RULE_KEYS)
    if unknown:
        raise ValueError(f"not a rule: {', '.join(sorted(unknown))} (rules: {', '.join(RULE_KEYS)})")
    target = Path(path)
    document = _load_queue_config(target)
    entry = _entry(document, queue)
    if entry is None:
        entry = {"name": queue, "queueConfig": {}}
        document["queues"].append(entry)
    config = entry.setdefault("queueConfig", {})
    for key, value in rules.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    if config.get("maxJobsPerSecond") is None and not any(key in config for key in RULE_KEYS):
        # neither a rate (a paused queue has rate 0) nor a rule left: the entry goes (with any
        # key of its own this server ignores), where kept it would pause the queue, as the
        # original read an entry of no rate
        document["queues"] = [e for e in document["queues"] if e is not entry]
    return _save_queue_config(target, document)


@_one_edit_at_a_time
def pause_queue(path: str | os.PathLike[str], queue: str) -> str:
    """Set ``queue``'s rate to 0 (dequeues are refused), remembering the rate it had."""
    target = Path(path)
    document = _load_queue_config(target)
    entry = _entry(document, queue)
    if entry is None:
        document["queues"].append({"name": queue, "queueConfig": {"maxJobsPerSecond": 0, PAUSED_FROM: None}})
    else:
        config = entry.setdefault("queueConfig", {})
        remembered = _paused_from(entry)
        config[PAUSED_FROM] = config.get("maxJobsPerSecond") if config.get("maxJobsPerSecond") != 0 else remembered
        config["maxJobsPerSecond"] = 0
    return _save_queue_config(target, document)


@_one_edit_at_a_time
def resume_queue(path: str | os.PathLike[str], queue: str) -> str:
    """Undo ``pause_queue``: restore the remembered rate, or no limit if there was none."""
    target = Path(path)
    document = _load_queue_config(target)
    entry = _entry(document, queue)
    if entry is None:
        return _save_queue_config(target, document)
    previous = _paused_from(entry)
    if previous is None:
        _drop_rate(document, entry)
    else:
        entry.setdefault("queueConfig", {})["maxJobsPerSecond"] = previous
    return _save_queue_config(target, document)


def _drop_rate(document: dict[str, Any], entry: dict[str, Any] | None) -> None:
    """Remove a queue's rate limit: its whole entry, unless it also sets pinlater's rules (then
    the rate goes, and the rate a pause remembered with it: nothing is paused any more)."""
    config = entry.get("queueConfig") if entry is not None else None
    if entry is not None and isinstance(config, dict) and any(key in config for key in RULE_KEYS):
        config.pop("maxJobsPerSecond", None)
        _paused_from(entry)
        return
    document["queues"] = [e for e in document["queues"] if e is not entry]


_NUMBERED_KEY = re.compile(r"[A-Za-z]*([0-9]+)")
_SHARD_NAME = re.compile(r"([0-9]+)(?:d[0-9]+)?")


@_one_edit_at_a_time
def set_shard_dequeue_only(path: str | os.PathLike[str], shard: str, dequeue_only: bool = True) -> list[str]:
    """Flip ``dequeueOnly`` for ``shard`` in a backend config file; returns the entries changed.

    Redis format (``{"shards": [{"name": "1", "shardConfig": {...}}]}``): the entry named
    ``shard``. MySQL format (``{"pinlaterdb001": {...}}``): the key ``shard`` itself, or the
    instance serving shard ``shard`` (``"1"`` and ``"1d2"`` are both served by
    ``pinlaterdb001``; the flag applies to the whole instance). A dequeue-only shard takes no new
    jobs but is still drained. Raises ``KeyError`` naming the shards there are.
    """
    target = Path(path)
    document = json.loads(read_config_text(target, "backend config"))
    changed: list[str] = []
    if isinstance(document, dict) and isinstance(document.get("shards"), list):
        names = [str(e.get("name")) for e in document["shards"] if isinstance(e, dict)]
        for entry in document["shards"]:
            if isinstance(entry, dict) and str(entry.get("name")) == shard:
                entry.setdefault("shardConfig", {})["dequeueOnly"] = dequeue_only
                changed.append(shard)
    elif isinstance(document, dict):
        names = list(document)
        keys = [shard] if shard in document else [k for k in document if _mysql_key_serves(k, shard)]
        for key in keys:
            if isinstance(document[key], dict):
                document[key]["dequeueOnly"] = dequeue_only
                changed.append(key)
    else:
        raise ValueError(f"{target}: not a Redis or MySQL backend config")
    if not changed:
        raise KeyError(f"{target}: no shard {shard!r}; the file has {', '.join(names) or 'none'}")
    write_atomically(target, json.dumps(document, indent=2) + "\n")
    return changed


def _mysql_key_serves(key: str, shard: str) -> bool:
    k, s = _NUMBERED_KEY.fullmatch(key), _SHARD_NAME.fullmatch(shard)
    return bool(k and s and int(k.group(1)) == int(s.group(1)))
