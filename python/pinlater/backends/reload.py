"""Applying an edited backend config to a running server without a restart.

``plan_reload`` compares the running ``ShardMap`` with a freshly parsed config and builds the
next map: unchanged shards keep their open store (and their health), a shard whose only change
is ``dequeue_only`` keeps its store with the new flag, a shard whose connection changed is
reopened, new shards are opened and removed ones retired. Retired stores are returned rather
than closed, so the caller can close them once requests that started on the old map are done.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pinlater.backends.base import BackendDriver, ShardConfig, ShardStore
from pinlater.backends.shardmap import Shard, ShardMap, diff_configs
from pinlater.config import Settings


@dataclass(frozen=True, slots=True)
class ReloadPlan:
    shards: ShardMap
    added: list[str]
    removed: list[str]
    reopened: list[str]
    flag_changed: list[str]
    retired: list[ShardStore]

    @property
    def changed(self) -> bool:
        return bool(self.added or self.removed or self.reopened or self.flag_changed)

    def describe(self) -> str:
        parts = [
            f"{label} {', '.join(names)}"
            for label, names in (
                ("added", self.added),
                ("removed", self.removed),
                ("reopened", self.reopened),
                ("dequeue-only changed", self.flag_changed),
            )
            if names
        ]
        return "; ".join(parts) or "no change"


def plan_reload(
    current: ShardMap, wanted: Mapping[str, ShardConfig], driver: BackendDriver, settings: Settings
) -> ReloadPlan:
    """Open what is new and build the next map. Stores opened here are closed again if a
    later one fails, so a failed reload leaves nothing behind."""
    added, removed, reopened, flag_changed = diff_configs(current, wanted)
    opened: dict[str, ShardStore] = {}
    try:
        for name in added + reopened:
            opened[name] = driver.open_store(name, wanted[name], settings)
    except BaseException:
        for store in opened.values():
            store.close()
        raise
    shards: list[Shard] = []
    retired: list[ShardStore] = []
    for name, config in wanted.items():
        old = current.get(name)
        if name in opened:
            shards.append(Shard(name, opened[name], config.dequeue_only, config))
            if old is not None:
                retired.append(old.store)
        else:
            assert old is not None
            old.dequeue_only = config.dequeue_only
            old.config = config
            shards.append(old)
    for name in removed:
        old = current.get(name)
        if old is not None:
            retired.append(old.store)
    return ReloadPlan(ShardMap(shards), added, removed, reopened, flag_changed, retired)
