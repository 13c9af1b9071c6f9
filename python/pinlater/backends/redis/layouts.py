"""Which layout a Redis shard is served in, and the shard's own record of it.

Each shard records its layout in Redis, at ``pll:{S}`` (``original`` or ``compact``; ``migrating``
while ``pinlater migrate-layout`` moves it). A store reads it when it opens:

* the config's ``"layout"`` wins where the shard holds nothing yet;
* without it, the record decides; a shard with no record that holds the original's queue names
  (``pln_S``, written by the original server or ours) is original, so pointing our server at an
  original PinLater Redis stays safe; an empty shard is written compact;
* a config that names the other layout than the shard holds, or a shard being migrated, is a
  ``ConfigError`` with one line saying so: the server refuses to start (or a reload to load), and
  never mixes the two layouts on one shard.

The first store to serve a shard writes the record (``SET NX``, so two servers starting at once
agree). A shard that cannot be reached when its store opens is decided the same way once
reached: until its record was read there (``ShardLayout.check``, run by the first blocking call or
the health checker's ping), every call fails as if the shard were down, so nothing is written in
a layout the shard does not hold. The parts of the store that depend on the layout (script
SHAs, key names) are told the layout found (``ShardLayout.on_change``) before the first call.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

import redis

from pinlater.backends.redis.config import LAYOUTS
from pinlater.backends.redis.keys import JOB_ID_KEY_PREFIX, queue_names_key
from pinlater.backends.redis.keys_compact import compact_names_key
from pinlater.errors import ConfigError, ShardConnectionError

if TYPE_CHECKING:
    from pinlater.backends.redis.config import RedisShardConfig

log = logging.getLogger(__name__)

LAYOUT_KEY_PREFIX = "pll"
MIGRATING = "migrating"


def layout_key(shard: str) -> str:
    """``pll:{S}``: the shard's record of its layout."""
    return f"{LAYOUT_KEY_PREFIX}:{{{shard}}}"


def choose_layout(client: redis.Redis | redis.RedisCluster, shard: str, wanted: str | None) -> str:
    """The layout to serve ``shard`` in (see the module docstring), recorded in the shard if it
    had no record. Raises ``ConfigError`` on a conflict, redis-py's errors if unreachable."""
    key = layout_key(shard)
    for _ in range(2):  # a second pass only if another server recorded a layout meanwhile
        recorded = _text(client.get(key))
        if recorded == MIGRATING:
            raise ConfigError(
                f"shard {shard}: `pinlater migrate-layout` is moving it to another layout ({key} = {MIGRATING}); "
                "run it again to finish before serving the shard"
            )
        if recorded is not None and recorded not in LAYOUTS:
            raise ConfigError(f"shard {shard}: unknown layout {recorded!r} recorded at {key}")
        held = recorded or _layout_of_data(client, shard)
        if wanted is not None and held is not None and wanted != held:
            where = f"recorded at {key}" if recorded else "its keys"
            raise ConfigError(
                f'shard {shard}: the config says "layout": "{wanted}" but the shard holds the {held} layout '
                f"({where}); change the config or run `pinlater migrate-layout`"
            )
        layout = wanted or held or "compact"
        if recorded is not None or client.set(key, layout, nx=True):
            return layout
    raise ConfigError(f"shard {shard}: its layout record {key} keeps changing; is a migration running?")


def _layout_of_data(client: redis.Redis | redis.RedisCluster, shard: str) -> str | None:
    """What a shard without a layout record holds: ``original`` if it has the original's queue
    names, or id counters of queues since deleted (the original keeps ``plj_S_Q`` when a queue
    goes: served compact, a queue created again would hand out its ids a second time);
    ``compact`` if it has the compact layout's names (written before records existed); else None.
    The counters are found by one SCAN of the keyspace, once per shard (the record is written
    then); a counter of a shard whose name extends this one's (``S_x``) also counts, which only
    keeps this shard original. A Redis Cluster never holds the original layout."""
    if client.exists(queue_names_key(shard)):
        return "original"
    if client.exists(compact_names_key(shard)):
        return "compact"
    if isinstance(client, redis.Redis):
        for _ in client.scan_iter(match=f"{JOB_ID_KEY_PREFIX}_{_glob_escaped(shard)}_*", count=1000):
            return "original"
    return None


def _glob_escaped(text: str) -> str:
    """``text`` matched literally in a SCAN MATCH pattern."""
    return "".join(f"\\{c}" if c in "*?[]\\" else c for c in text)


def _text(value: object) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


class ShardLayout:
    """The layout one store serves its shard in, and whether the shard's record was checked."""

    def __init__(self, shard: str, config: RedisShardConfig, client: redis.Redis | redis.RedisCluster) -> None:
        self._shard = shard
        self._wanted = config.layout
        self._client = client
        self._listeners: list[Callable[[str], None]] = []
        try:
            #: The layout served; until ``checked``, only a provisional one (calls are refused).
            self.name = choose_layout(client, shard, config.layout)
            self.checked = True
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            self.name = config.layout or "original"
            self.checked = False
            log.warning(
                "shard %s: cannot read its layout now (%s); it serves nothing until it is reached and its layout read",
                shard,
                exc,
            )

    @property
    def known(self) -> bool:
        """Whether ``name`` is the layout the shard is served in, if it is served at all: read
        from the shard, or named by the config (a record that disagrees keeps the shard down)."""
        return self.checked or self._wanted is not None

    @property
    def compact(self) -> bool:
        return self.name == "compact"

    def on_change(self, listener: Callable[[str], None]) -> None:
        """Call ``listener`` with the layout's name if ``check`` finds another layout than the
        provisional one (a shard unreachable at open, whose config names no layout)."""
        self._listeners.append(listener)

    def check(self) -> None:
        """Read the shard's record if not done yet (blocking), as at open. A record that
        disagrees with the config raises ``ShardConnectionError`` (the shard stays down) and logs
        why; without a layout in the config, the record (or the data) decides, and the listeners
        hear of it before any call is let through."""
        if self.checked:
            return
        try:
            found = choose_layout(self._client, self._shard, self._wanted)
        except ConfigError as exc:
            log.error("%s", exc)
            raise ShardConnectionError(self._shard, str(exc)) from exc
        if found != self.name:
            log.info("shard %s: reached; it holds the %s layout and is served in it", self._shard, found)
            self.name = found
            for listener in self._listeners:
                listener(found)
        self.checked = True
        self._listeners.clear()  # a checked layout changes no more

    def require(self) -> None:
        """For calls that cannot block (the event loop's): fail as a down shard until checked."""
        if not self.checked:
            raise ShardConnectionError(self._shard, "its layout record is not read yet (the health check reads it)")
