"""Applying an edited backend config to a running server without a restart.

``plan_reload`` compares the running ``ShardMap`` with a freshly parsed config and builds the
next map: unchanged shards keep their open store (and their health), a shard whose only change
is ``dequeue_only`` keeps its store with the new flag, a shard whose connection changed is
reopened, new shards are opened and removed ones retired. Retired stores are returned rather
than closed, so the caller can close them once requests that started on the old map are done.

``create_missing_queues`` then gives the shards that take new jobs every queue another shard
has (the server runs it at start-up too), so an enqueue can land on any of them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from pinlater.backends.base import BackendDriver, ShardConfig, ShardStore
from pinlater.backends.sharded import ShardedBackend, create_on
from pinlater.backends.shardmap import Shard, ShardMap, diff_configs
from pinlater.config import Settings

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ReloadPlan:
    shards: ShardMap
    added: list[str]
    removed: list[str]
    reopened: list[str]
    flag_changed: list[str]
    retired: list[ShardStore]
    #: The kept shards' new configs (their ``dequeue_only`` among them), set by ``settle``.
    kept: list[tuple[Shard, ShardConfig]] = field(default_factory=list)

    def abandon(self) -> None:
        """Close the stores this plan opened (added or reopened shards): a plan not applied."""
        for shard in self.shards:
            if shard.name in self.added or shard.name in self.reopened:
                shard.store.close()

    def settle(self) -> None:
        """Give the kept shards their new configs: on the loop, when the map is swapped in (the
        plan may be made on a thread, while the old map still serves)."""
        for shard, config in self.kept:
            shard.dequeue_only = config.dequeue_only
            shard.config = config

    @property
    def changed(self) -> bool:
        return bool(self.added or self.removed or self.reopened or self.flag_changed)

    def needing_queues(self) -> list[Shard]:
        """Shards that may lack queues and now take new jobs: added, reopened, or no longer
        dequeue-only."""
        changed = {*self.added, *self.reopened, *self.flag_changed}
        return [s for s in self.shards if s.name in changed and not s.dequeue_only]

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
    """Open what is new and build the next map (``ReloadPlan.settle`` then updates the kept
    shards). Stores opened here are closed again if a later one fails, so a failed reload
    leaves nothing behind. Opening a store may block (it connects): a server calls this off
    its event loop."""
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
    kept: list[tuple[Shard, ShardConfig]] = []
    for name, config in wanted.items():
        old = current.get(name)
        if name in opened:
            shards.append(Shard(name, opened[name], config.dequeue_only, config))
            if old is not None:
                retired.append(old.store)
        else:
            assert old is not None
            kept.append((old, config))
            shards.append(old)
    for name in removed:
        old = current.get(name)
        if old is not None:
            retired.append(old.store)
    return ReloadPlan(ShardMap(shards), added, removed, reopened, flag_changed, retired, kept)


async def create_missing_queues(backend: ShardedBackend, targets: Sequence[Shard]) -> list[tuple[str, str]]:
    """Create on each of ``targets`` every queue that some shard of ``backend`` has and it lacks.

    The original created a queue on every shard at once; shards added later or restored from a
    backup may lack some, and an enqueue landing there would fail. A shard that cannot be asked
    is logged and skipped (reads treat a shard without a queue as empty meanwhile). Returns the
    (queue, shard) pairs created; each is logged once.
    """
    if not targets:
        return []
    shards = backend.shards.all()
    listed = await asyncio.gather(
        *(backend.call_store(s, s.store.get_queue_names) for s in shards), return_exceptions=True
    )
    have: dict[str, set[str]] = {}
    for shard, names in zip(shards, listed, strict=True):
        if isinstance(names, BaseException):
            log.warning("could not list the queues on shard %s: %s", shard.name, names)
        else:
            have[shard.name] = names
    everywhere = set().union(*have.values())

    async def fill(shard: Shard) -> list[tuple[str, str]]:
        created = []
        for queue in sorted(everywhere - have[shard.name]):
            created += [(queue, name) for name in await create_on(backend, queue, [shard])]
        return created

    done = await asyncio.gather(*(fill(s) for s in targets if s.name in have))
    return [pair for pairs in done for pair in pairs]
