"""Redis Cluster for the hot path: which master serves a key, and ``ClusterHotClient``, the
store's pipelined connections (``hot_client.HotClient``) routed by slot.

A compact shard can be a Redis Cluster because every key of one (shard, queue) carries the hash
tag ``{S:Q}`` (compact-spec.md): every queue script touches one slot. The slot of a key is
CRC16 (XMODEM) of its hash tag, modulo 16384, as Redis computes it (``key_slot``).

``ClusterHotClient`` keeps a ``SlotMap`` (slot -> master, from ``CLUSTER SLOTS``) and one
``HotClient`` per master, each with its own pipelined connection and its own loaded scripts. A
command goes to the master of its first key's slot. The replies that mean Redis ran nothing are
followed, so resending is always safe:

* ``-MOVED slot host:port``: the slot has a new owner for good; the map takes it (the whole map
  is read again when the owner is a node it does not know, as after a failover) and the command
  goes there (``:port``, no host: the host asked).
* ``-ASK slot host:port``: the slot is migrating and the keys are on the target; ``ASKING`` then
  the command go to that node, once; the map stays (the slot is still the source's).
* ``-TRYAGAIN``: the slot is migrating and the keys are split between the nodes (or some of the
  script's keys do not exist, which the target cannot tell from "not moved yet"); sent again
  after a short pause, as long as the call's timeout allows, then ``ShardConnectionError``.
* ``-CLUSTERDOWN``: the map is read again and the call fails with ``ShardConnectionError``.

A connection failure keeps ``HotClient``'s rules (one repeat on a fresh connection where
``connections.repeatable`` allows it: never an enqueue once written). After that the map is read
again; when the slot has another owner now (a failover), the call goes there once more, only if
nothing was written or the script is safe to run twice.

The map is read at most once in ``REFRESH_INTERVAL`` (concurrent callers share a read): a slot
no master serves, ``MOVED`` to unknown nodes or a master that stays dead cannot make every call
read it; between two reads a call uses the map as it is (or fails at once with the last read's
failure), except after a dead master, when it waits for the next read if its timeout allows.
A ``CLUSTER SLOTS`` reply that is not a slot map, or a redirect that names no node, is a shard
that is down (``ShardConnectionError``). The connection to a node is closed once the map names
it no more (the latest ``MAX_ASK_TARGETS`` nodes an ``-ASK`` named are kept).

A call keeps to its timeout (``BACKEND_SOCKET_TIMEOUT_SECONDS``) from its start: its first try
on a known owner is that node's own ``HotClient`` call; map reads (all nodes asked within the
timeout in all), redirects, pauses and later tries get what is left of it, and a try cut short
is a ``ShardConnectionError`` that may have been applied.
"""

from __future__ import annotations

import asyncio
import binascii
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TypeVar

import redis

from pinlater._pinlater import redis_pack_command
from pinlater.backends.redis.config import RedisEndpoint, RedisShardConfig
from pinlater.backends.redis.connections import NOT_REPEATED_ONCE_SENT
from pinlater.backends.redis.hot_client import Call, HotClient, _Broken, _Connection
from pinlater.backends.redis.layouts import ShardLayout
from pinlater.errors import ShardConnectionError

T = TypeVar("T")
U = TypeVar("U")

log = logging.getLogger(__name__)

SLOTS = 16384

MAX_REDIRECTS = 16
"""MOVED and ASK replies followed in a row (between two TRYAGAIN rounds) before a call fails
(redis-py's request TTL)."""

TRYAGAIN_PAUSES = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05)
"""Pauses before resending after ``-TRYAGAIN`` (the last repeats until the call's timeout)."""

REFRESH_INTERVAL = 0.2
"""The slot map is read at most once in this many seconds (concurrent callers share a read);
calls in between use the map as it is, or fail at once as a shard that is down when the last
read failed: a slot no master serves, or MOVED to nodes the map does not know, cannot make every
call read the map again."""

MAX_ASK_TARGETS = 4
"""The nodes of the latest ``-ASK`` replies whose connections are kept though the map does not
name them as masters (any other node's is closed once the map no longer names it)."""

_CLUSTER_SLOTS = redis_pack_command(("CLUSTER", "SLOTS"))


def key_slot(key: bytes) -> int:
    """The cluster slot of ``key``: CRC16 of its hash tag (the text between the first ``{`` and
    the next ``}``, when not empty), else of the whole key."""
    start = key.find(b"{")
    if start >= 0:
        end = key.find(b"}", start + 1)
        if end > start + 1:
            key = key[start + 1 : end]
    return binascii.crc_hqx(key, 0) % SLOTS


def first_key(command: bytes) -> bytes:
    """The first key of a packed ``EVALSHA sha numkeys key ...`` (RESP array of bulk strings)."""
    pos = command.index(b"\r\n") + 2
    for _ in range(3):  # EVALSHA, the sha, numkeys
        end = command.index(b"\r\n", pos)
        pos = end + 2 + int(command[pos + 1 : end]) + 2
    end = command.index(b"\r\n", pos)
    size = int(command[pos + 1 : end])
    return command[end + 2 : end + 2 + size]


class SlotMap:
    """Which master serves each slot (``None``: not served)."""

    def __init__(self, owners: Sequence[RedisEndpoint | None]) -> None:
        if len(owners) != SLOTS:
            raise ValueError(f"a slot map has {SLOTS} slots, not {len(owners)}")
        self._owners = list(owners)

    @classmethod
    def from_cluster_slots(cls, reply: list[object], asked: RedisEndpoint) -> SlotMap:
        """The map of a ``CLUSTER SLOTS`` reply from the node ``asked`` (whose host stands in
        where the reply gives none: ``""`` or ``"?"``). ``ValueError`` (one line) for a reply
        that is not one: every entry and range is checked before anything is allocated."""
        owners: list[RedisEndpoint | None] = [None] * SLOTS
        for entry in reply:
            start, end, node = _slots_entry(entry, asked)
            owners[start : end + 1] = [node] * (end - start + 1)
        return cls(owners)

    def owner(self, slot: int) -> RedisEndpoint | None:
        return self._owners[slot]

    def masters(self) -> list[RedisEndpoint]:
        """The masters serving at least one slot, in slot order."""
        return list(dict.fromkeys(node for node in self._owners if node is not None))

    def move(self, slot: int, node: RedisEndpoint) -> None:
        self._owners[slot] = node


def _slots_entry(entry: object, asked: RedisEndpoint) -> tuple[int, int, RedisEndpoint]:
    """One ``CLUSTER SLOTS`` entry, ``[start, end, [host, port, ...], replicas...]``, checked:
    ``0 <= start <= end < SLOTS``, a host string and a TCP port; else ``ValueError``."""
    if not isinstance(entry, list) or len(entry) < 3:
        raise ValueError(f"not a CLUSTER SLOTS entry: {entry!r:.100}")
    start, end, master = entry[0], entry[1], entry[2]
    if type(start) is not int or type(end) is not int or not 0 <= start <= end < SLOTS:
        raise ValueError(f"not a slot range in CLUSTER SLOTS: {start!r:.30} {end!r:.30}")
    if not isinstance(master, list) or len(master) < 2:
        raise ValueError(f"not a master in CLUSTER SLOTS: {master!r:.100}")
    host, port = master[0], master[1]
    if host is None:  # NULL: "the host asked" (cluster-preferred-endpoint-type unknown-endpoint)
        host = b""
    if not isinstance(host, bytes) or type(port) is not int or not 0 < port < 65536:
        raise ValueError(f"not a master address in CLUSTER SLOTS: {host!r:.60} {port!r:.30}")
    name = host.decode("utf-8", "replace")
    return start, end, RedisEndpoint(name if name not in ("", "?") else asked.host, port)


async def read_slot_map(nodes: Iterable[RedisEndpoint], timeout: float) -> SlotMap:
    """The slot map as the first of ``nodes`` that answers ``CLUSTER SLOTS`` sees it, within
    ``timeout`` in all; redis-py's ``ConnectionError`` naming every node tried when none answers
    (or its reply is not a slot map). Each node gets what is left of ``timeout`` shared over the
    nodes not tried yet: one that refuses at once leaves its share to the next, a silent one
    cannot hold the others out."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    candidates = list(dict.fromkeys(nodes))
    failures: list[str] = []
    for tried, node in enumerate(candidates):
        budget = (deadline - loop.time()) / (len(candidates) - tried)
        if budget <= 0:
            failures.append(f"{len(candidates) - tried} more not tried within {timeout:g} s")
            break
        node_deadline = loop.time() + budget
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(lambda: _Connection(64 << 20), node.host, node.port), budget
            )
        except (OSError, TimeoutError) as exc:
            failures.append(f"{node}: {exc or type(exc).__name__}")
            continue
        try:
            reply = conn.send(_CLUSTER_SLOTS, max(node_deadline - loop.time(), 0.001))  # (a late reply breaks it)
            value, _ = parse_resp(await reply, 0)
            if not isinstance(value, list):
                failures.append(f"{node}: CLUSTER SLOTS answered {value!s:.100}")
                continue
            return SlotMap.from_cluster_slots(value, node)
        except (_Broken, ValueError, RecursionError) as exc:
            failures.append(f"{node}: {exc or type(exc).__name__}")
        finally:
            conn.close()
    raise redis.ConnectionError(f"no cluster node answered CLUSTER SLOTS ({'; '.join(failures)})")


def parse_resp(buf: bytes, pos: int) -> tuple[object, int]:
    """One RESP2 value at ``pos`` (arrays, bulk and simple strings, integers; an error reply as
    a ``redis.ResponseError`` value) and the position after it. For the rare replies the store
    reads itself (``CLUSTER SLOTS``), not for the hot path."""
    end = buf.index(b"\r\n", pos)
    kind, head = buf[pos : pos + 1], buf[pos + 1 : end]
    pos = end + 2
    if kind == b"$":
        size = int(head)
        return (None, pos) if size < 0 else (buf[pos : pos + size], pos + size + 2)
    if kind == b":":
        return int(head), pos
    if kind == b"+":
        return head, pos
    if kind == b"-":
        return redis.ResponseError(head.decode("utf-8", "replace")), pos
    if kind == b"*":
        items: list[object] = []
        for _ in range(max(int(head), 0)):
            item, pos = parse_resp(buf, pos)
            items.append(item)
        return items, pos
    raise ValueError(f"not a RESP2 reply: {buf[pos - len(head) - 3 : pos][:32]!r}")


class ClusterHotClient:
    """``HotClient``'s ``call`` over a Redis Cluster (see the module docstring)."""

    pipelines = False

    def __init__(
        self,
        name: str,
        seeds: Sequence[RedisEndpoint],
        timeout: float,
        node_client: Callable[[RedisEndpoint], HotClient],
    ) -> None:
        if not seeds:
            raise ValueError(f"shard {name}: a cluster needs at least one seed node")
        self._name = name
        self._seeds = list(seeds)
        self._timeout = timeout
        self._node_client = node_client
        self._nodes: dict[RedisEndpoint, HotClient] = {}
        self.shas = node_client(self._seeds[0]).shas
        self._map: SlotMap | None = None
        self._slots: dict[bytes, int] = {}
        self._refreshing: asyncio.Task[SlotMap] | None = None
        self._refreshed_at = -REFRESH_INTERVAL  # time.monotonic() when the last read ended
        self._read_started = -REFRESH_INTERVAL  # and when it began
        self._loop: asyncio.AbstractEventLoop | None = None
        #: The nodes of the latest ``-ASK`` replies (oldest first): kept though not masters.
        self._asked: dict[RedisEndpoint, None] = {}
        #: Calls under way on each client; a client dropped while busy is closed by its last.
        self._busy: dict[HotClient, int] = {}
        self._retired: set[HotClient] = set()

    @property
    def slot_map(self) -> SlotMap | None:
        """The map as last read (``None`` before the first call)."""
        return self._map

    async def call_pair(self, first: Call[T], second: Call[U]) -> tuple[T, U]:
        """One after the other: each follows its own redirects (a slot may move between them)."""
        return await self.call(*first), await self.call(*second)

    async def call_then(self, first: Call[T], second: Call[U]) -> tuple[T, U | None]:
        """The first alone: each call finds its node and follows its own redirects, so the
        second cannot be written behind the first."""
        return await self.call(*first), None

    async def call(self, script: str, command: bytes, parse: Callable[[bytes], T]) -> T:
        """Send ``command`` (an EVALSHA of ``script``) to the master of its first key's slot and
        read its reply with ``parse``, following redirects (see the module docstring)."""
        deadline = time.monotonic() + self._timeout
        key = first_key(command)
        slot = self._slots.get(key)
        if slot is None:
            if len(self._slots) > 65536:  # a few keys per queue; this only bounds a misuse
                self._slots.clear()
            slot = self._slots[key] = key_slot(key)
        slot_map = self._map
        owner = None if slot_map is None else slot_map.owner(slot)
        # The first try on a known owner is the node's own call (its timeout starts now); a map
        # read, a redirect or a pause before a try leaves it what is left of the call's timeout.
        direct = owner is not None
        node = owner if owner is not None else await self._owner(slot, deadline)
        asking = False
        redirects = 0
        pauses = iter(TRYAGAIN_PAUSES)
        moved_after_failure = False
        busy = self._busy
        while True:
            client = self._client(node)
            busy[client] = busy.get(client, 0) + 1
            try:
                if direct:
                    return await client.call(script, command, parse, asking=asking)
                return await self._within(deadline, node, client.call(script, command, parse, asking=asking))
            except redis.exceptions.AskError as exc:  # MovedError too: a subclass
                redirects += 1
                if redirects > MAX_REDIRECTS:
                    raise ShardConnectionError(self._name, f"{node}: more than {MAX_REDIRECTS} redirects") from exc
                if not 0 < exc.port < 65536:
                    raise ShardConnectionError(self._name, f"{node}: a redirect to port {exc.port}") from exc
                target = RedisEndpoint(exc.host or node.host, exc.port)  # ":port": the host asked
                asking = not isinstance(exc, redis.exceptions.MovedError)
                if asking:
                    await self._asked_to(target)
                else:
                    target = await self._moved(slot, target, deadline, node)
                node = target
            except ShardConnectionError as exc:
                cause = exc.__cause__
                asking = False
                if isinstance(cause, redis.exceptions.TryAgainError):
                    pause = next(pauses, TRYAGAIN_PAUSES[-1])
                    if time.monotonic() + pause > deadline:
                        raise
                    await asyncio.sleep(pause)
                    node, redirects = await self._owner(slot, deadline), 0  # the deadline bounds these rounds
                    continue
                if not isinstance(cause, redis.ConnectionError) or moved_after_failure:
                    raise
                # A dead master: read the map again; after a failover the slot has a new owner.
                try:
                    now = await self._owner(slot, deadline, refresh=True)
                except ShardConnectionError:
                    raise exc from None
                if now == node or (exc.maybe_applied and script in NOT_REPEATED_ONCE_SENT):
                    raise
                log.info("shard %s: %s again on %s (slot %d moved) after: %s", self._name, script, now, slot, exc)
                node, moved_after_failure = now, True
            except redis.exceptions.ClusterDownError as exc:
                await self._refresh_quietly(deadline)
                raise ShardConnectionError(self._name, f"{node}: CLUSTERDOWN {exc}") from exc
            finally:
                direct = False
                left = busy[client] - 1
                if left:
                    busy[client] = left
                else:
                    del busy[client]
                    if client in self._retired:
                        self._retired.discard(client)
                        await client.aclose()

    async def _within(self, deadline: float, node: RedisEndpoint, call: Awaitable[T]) -> T:
        """``call`` on ``node``, cut at ``deadline`` (what may have run there is not known then)."""
        left = deadline - time.monotonic()
        if left <= 0:
            close = getattr(call, "close", None)
            if close is not None:
                close()  # never started: nothing was sent
            raise ShardConnectionError(self._name, f"{node}: not tried, out of the call's {self._timeout:g} s")
        try:
            return await asyncio.wait_for(call, left)
        except TimeoutError:
            detail = f"{node}: no reply within what was left of the call's {self._timeout:g} s"
            raise ShardConnectionError(self._name, detail, maybe_applied=True) from None

    def _client(self, node: RedisEndpoint) -> HotClient:
        client = self._nodes.get(node)
        if client is None:
            client = self._nodes[node] = self._node_client(node)
        return client

    async def _owner(self, slot: int, deadline: float, refresh: bool = False) -> RedisEndpoint:
        """The master of ``slot``; with ``refresh`` (its master is dead), from a map read since."""
        slot_map = self._map
        if slot_map is None or refresh or slot_map.owner(slot) is None:
            slot_map = await self._refresh(deadline, fresh=refresh)
        node = slot_map.owner(slot)
        if node is None:
            raise ShardConnectionError(self._name, f"cluster slot {slot} is served by no master")
        return node

    async def _moved(self, slot: int, node: RedisEndpoint, deadline: float, by: RedisEndpoint) -> RedisEndpoint:
        """After ``-MOVED`` (from ``by``): the slot is ``node``'s in the map, where to send the
        call. A node the map does not know means the cluster changed more (a failover, a new
        master): the map is read again (waiting out ``REFRESH_INTERVAL`` within ``deadline``)
        and must name ``node`` as the slot's master, or the redirect makes no sense and the
        shard counts as down: followed blindly, one bogus ``-MOVED`` (a misconfigured or hostile
        node) sent the queue's calls, with their bodies, to any host:port for good. A node left
        serving nothing is closed."""
        slot_map = self._map
        if slot_map is not None and node in slot_map.masters():
            slot_map.move(slot, node)
        else:
            try:
                owner = (await self._refresh(deadline, fresh=True)).owner(slot)
            except ShardConnectionError as exc:
                raise ShardConnectionError(self._name, f"{by}: -MOVED to {node}, and {exc.detail}") from None
            if owner != node:
                raise ShardConnectionError(
                    self._name, f"{by}: -MOVED slot {slot} to {node}, which the slot map read since does not name"
                )
        await self._prune()
        return node

    async def _asked_to(self, node: RedisEndpoint) -> None:
        """After ``-ASK``: ``node`` is among the latest ``MAX_ASK_TARGETS`` asked (kept though
        the map does not name it: a node importing its first slots serves none yet)."""
        asked = self._asked
        if asked.pop(node, False) is None:
            asked[node] = None
            return
        asked[node] = None
        if len(asked) > MAX_ASK_TARGETS:
            del asked[next(iter(asked))]
            await self._prune()

    async def _prune(self) -> None:
        """Close the clients of nodes that are neither masters in the map nor recently asked."""
        slot_map = self._map
        if slot_map is None:
            return
        keep = set(slot_map.masters())
        keep.update(self._asked)
        for node in [node for node in self._nodes if node not in keep]:
            client = self._nodes.pop(node)
            if client in self._busy:
                self._retired.add(client)  # closed when its last call ends
            else:
                await client.aclose()

    async def _refresh_quietly(self, deadline: float) -> None:
        try:
            await self._refresh(deadline)
        except ShardConnectionError as exc:
            log.warning("shard %s: cannot read the cluster's slot map: %s", self._name, exc.detail)

    async def _refresh(self, deadline: float, fresh: bool = False) -> SlotMap:
        """Read the slot map (one read at a time; concurrent callers share it), waiting for it
        until ``deadline`` at most. Within ``REFRESH_INTERVAL`` of the last read, that read
        stands: the map as it is now, or its failure, at once; with ``fresh`` (a master was found
        dead since), the next read once the interval is over, if that is before ``deadline``."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self._loop, self._refreshing = loop, None
        since = time.monotonic()
        while True:
            task = self._refreshing
            if task is None or (task.done() and time.monotonic() - self._refreshed_at >= REFRESH_INTERVAL):
                known = [] if self._map is None else self._map.masters()
                task = self._refreshing = loop.create_task(self._read_map([*known, *self._seeds]))
                task.add_done_callback(lambda t: t.cancelled() or t.exception())
                self._read_started = time.monotonic()
                break
            if not task.done() or not fresh or self._read_started >= since:
                break
            wake = self._refreshed_at + REFRESH_INTERVAL
            if wake >= deadline:
                break
            await asyncio.sleep(wake - time.monotonic())
        if task.done():
            failure = None if task.cancelled() else task.exception()
            if failure is None and self._map is not None:
                return self._map
            detail = f"{failure or 'the slot map read was cancelled'} (read again in {REFRESH_INTERVAL:g} s at most)"
            raise ShardConnectionError(self._name, detail, maybe_applied=False)
        try:
            return await asyncio.wait_for(asyncio.shield(task), max(deadline - time.monotonic(), 0))
        except TimeoutError:
            detail = f"no cluster node answered CLUSTER SLOTS within the call's {self._timeout:g} s"
            raise ShardConnectionError(self._name, detail, maybe_applied=False) from None
        except redis.ConnectionError as exc:
            raise ShardConnectionError(self._name, str(exc), maybe_applied=False) from exc

    async def _read_map(self, nodes: list[RedisEndpoint]) -> SlotMap:
        """The map from ``read_slot_map``, made the current one; clients of nodes it does not
        name are closed."""
        try:
            slot_map = await read_slot_map(nodes, self._timeout)
        finally:
            self._refreshed_at = time.monotonic()
        if self._refreshing is asyncio.current_task():  # not the read of a loop since forgotten
            self._map = slot_map
            await self._prune()
        return slot_map

    async def aclose(self) -> None:
        """Close every master's connection (on the loop that made them)."""
        clients = [*self._nodes.values(), *self._retired]
        self._refreshing = None
        self._nodes.clear()
        self._retired.clear()
        self._asked.clear()
        for client in clients:
            await client.aclose()

    def forget(self) -> None:
        """Drop the connections of another loop without touching them."""
        self._refreshing, self._loop = None, None
        for client in [*self._nodes.values(), *self._retired]:
            client.forget()


def cluster_hot_client(name: str, config: RedisShardConfig, timeout: float, layout: ShardLayout) -> ClusterHotClient:
    """The hot client of a cluster shard: a ``HotClient`` per master, in the shard's layout."""

    def node_client(node: RedisEndpoint) -> HotClient:
        return HotClient(name, dataclasses.replace(config, master=node, cluster=()), timeout, layout=layout)

    return ClusterHotClient(name, config.cluster, timeout, node_client)
