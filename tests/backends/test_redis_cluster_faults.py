"""``cluster.py`` against a broken or hostile cluster node (a fake one speaking RESP on
loopback): a slot map or a redirect it cannot use is a shard that is down
(``ShardConnectionError``, ``redis.ConnectionError`` from ``read_slot_map``), never another
exception; the map is not read again at every call; connections to nodes that left the map are
closed; and a call, reading the map included, keeps to its timeout."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
from collections.abc import Awaitable, Callable

import pytest
import redis

from pinlater._pinlater import redis_int_reply, redis_pack_command, redis_reply_end
from pinlater.backends.redis.cluster import ClusterHotClient, key_slot, read_slot_map
from pinlater.backends.redis.config import RedisEndpoint, RedisShardConfig
from pinlater.backends.redis.hot_client import HotClient, script_sha
from pinlater.errors import ShardConnectionError

SHA = script_sha("count_jobs")
KEY = "{c:q}n"


def _bulks(packed: bytes) -> list[bytes]:
    parts = packed.split(b"\r\n")
    return [parts[i] for i in range(2, len(parts) - 1, 2)]


def slots_reply(port: int, ranges: list[tuple[int, int]]) -> bytes:
    out = b"*%d\r\n" % len(ranges)
    for start, end in ranges:
        out += b"*3\r\n:%d\r\n:%d\r\n*2\r\n$9\r\n127.0.0.1\r\n:%d\r\n" % (start, end, port)
    return out


class FakeNode:
    """Answers CLUSTER SLOTS with ``slots(port)`` and EVALSHA with ``evalsha(port)``."""

    def __init__(self, slots: Callable[[int], bytes], evalsha: Callable[[int], bytes] | None = None) -> None:
        self.slots = slots
        self.evalsha = evalsha or (lambda _port: b":0\r\n")
        self.slot_reads = 0
        self.connections = 0
        self.server: asyncio.Server | None = None
        self.port = 0

    async def start(self) -> RedisEndpoint:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return RedisEndpoint("127.0.0.1", self.port)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        buf = b""
        try:
            while True:
                end = redis_reply_end(buf, 0, 1 << 30) if buf else -1
                if end < 0:
                    data = await reader.read(65536)
                    if not data:
                        return
                    buf += data
                    continue
                args, buf = _bulks(buf[:end]), buf[end:]
                if args[0] == b"CLUSTER":
                    self.slot_reads += 1
                    writer.write(self.slots(self.port))
                elif args[0] in (b"CLIENT", b"ASKING"):
                    writer.write(b"+OK\r\n")
                elif args[0] == b"SCRIPT":
                    writer.write(b"$40\r\n" + hashlib.sha1(args[2]).hexdigest().encode() + b"\r\n")
                else:
                    writer.write(self.evalsha(self.port))
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    def close(self) -> None:
        if self.server is not None:
            self.server.close()


def hot_client(seeds: list[RedisEndpoint], timeout: float = 1.0) -> ClusterHotClient:
    config = RedisShardConfig(seeds[0])
    return ClusterHotClient(
        "c", seeds, timeout, lambda node: HotClient("c", dataclasses.replace(config, master=node), timeout)
    )


def count_command() -> bytes:
    return redis_pack_command(("EVALSHA", SHA, 2, KEY, "{c:q}s", "q", "-inf", "+inf"))


def run(body: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(body(), 20))


# CLUSTER SLOTS replies a broken or hostile node may give (before the checks, IndexError,
# TypeError and MemoryError came out of read_slot_map and of every call of the shard).
GARBAGE = {
    "empty master": b"*1\r\n*3\r\n:0\r\n:16383\r\n*0\r\n",
    "master without port": b"*1\r\n*3\r\n:0\r\n:16383\r\n*1\r\n$1\r\nh\r\n",
    "nil start": b"*1\r\n*3\r\n$-1\r\n:16383\r\n*2\r\n$1\r\nh\r\n:1\r\n",
    "string start": b"*1\r\n*3\r\n$1\r\n0\r\n:16383\r\n*2\r\n$1\r\nh\r\n:1\r\n",
    "integer host": b"*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n:1\r\n:1\r\n",
    "port 0": b"*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$1\r\nh\r\n:0\r\n",
    "port 70000": b"*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$1\r\nh\r\n:70000\r\n",
    "slot 16384": b"*1\r\n*3\r\n:0\r\n:16384\r\n*2\r\n$1\r\nh\r\n:1\r\n",
    "negative start": b"*1\r\n*3\r\n:-1\r\n:10\r\n*2\r\n$1\r\nh\r\n:1\r\n",
    "start after end": b"*1\r\n*3\r\n:10\r\n:9\r\n*2\r\n$1\r\nh\r\n:1\r\n",
    "entry not an array": b"*1\r\n:1\r\n",
    "deep nesting": b"*1\r\n" * 5000 + b":1\r\n",  # the Rust reply scanner refuses it
    # owners[0:end+1] = [node] * (end + 1) was an 8 PB list: MemoryError (with end = 2**27, a
    # 1 GiB list built before SlotMap's length check refused it); the range is refused first.
    "huge range": b"*1\r\n*3\r\n:0\r\n:1000000000000000\r\n*2\r\n$9\r\n127.0.0.1\r\n:1\r\n",
    "2**27 range": b"*1\r\n*3\r\n:0\r\n:134217728\r\n*2\r\n$9\r\n127.0.0.1\r\n:1\r\n",
}


@pytest.mark.parametrize("reply", GARBAGE.values(), ids=GARBAGE.keys())
def test_a_garbage_slot_map_is_a_connection_error(reply: bytes) -> None:
    async def body() -> None:
        node = FakeNode(lambda _port: reply)
        seed = await node.start()
        try:
            with pytest.raises(redis.ConnectionError, match="no cluster node answered") as raised:
                await read_slot_map([seed], 1.0)
            assert "\n" not in str(raised.value)
            client = hot_client([seed])
            with pytest.raises(ShardConnectionError) as failed:
                await client.call("count_jobs", count_command(), redis_int_reply)
            assert not failed.value.maybe_applied and "\n" not in failed.value.detail
            await client.aclose()
        finally:
            node.close()

    run(body)


MALFORMED_REDIRECTS = [b"-MOVED x\r\n", b"-ASK x\r\n", b"-MOVED 1 nohostport\r\n", b"-ASK 1 h:port\r\n"]


@pytest.mark.parametrize("reply", MALFORMED_REDIRECTS, ids=[r.decode().strip() for r in MALFORMED_REDIRECTS])
def test_a_malformed_redirect_is_a_shard_error(reply: bytes) -> None:
    """``-MOVED x``: redis-py's MovedError (AskError) refuses it with a ValueError, which came
    out of HotClient and ClusterHotClient raw; the node is not usable: a shard that is down."""

    async def body() -> None:
        node = FakeNode(lambda port: slots_reply(port, [(0, 16383)]), lambda _port: reply)
        seed = await node.start()
        try:
            for client in (hot_client([seed]), HotClient("c", RedisShardConfig(seed), 1.0)):
                with pytest.raises(ShardConnectionError, match="malformed"):
                    await client.call("count_jobs", count_command(), redis_int_reply)
                await client.aclose()
        finally:
            node.close()

    run(body)


def test_a_slot_served_by_no_master_does_not_reread_the_map_at_every_call() -> None:
    """A slot with no owner (a master lost with no replica, cluster-require-full-coverage no):
    ``_owner`` reads CLUSTER SLOTS again, on a new TCP connection, at every call for that slot,
    however many calls come: one connect and one CLUSTER SLOTS per request."""
    slot = key_slot(KEY.encode())

    async def body() -> None:
        ranges = [(0, slot - 1), (slot + 1, 16383)] if slot else [(1, 16383)]
        node = FakeNode(lambda port: slots_reply(port, ranges))
        seed = await node.start()
        try:
            client = hot_client([seed])
            for _ in range(50):
                with pytest.raises(ShardConnectionError, match="served by no master"):
                    await client.call("count_jobs", count_command(), redis_int_reply)
            await client.aclose()
            assert node.slot_reads <= 5, f"{node.slot_reads} CLUSTER SLOTS reads for 50 calls"
        finally:
            node.close()

    run(body)


def test_moved_to_ever_new_nodes_does_not_keep_a_connection_to_each() -> None:
    """Every node a MOVED or ASK names gets a HotClient (and its connection) in ``_nodes``, kept
    forever: nothing removes a node that left the map. A node redirecting to ever-new addresses
    (hostile, or a cluster whose nodes come back on new addresses, as pods do) makes the
    connections grow without bound, and every MOVED to an unknown node reads the map again."""

    async def body() -> None:
        targets = [FakeNode(lambda port: slots_reply(port, [(0, 16383)])) for _ in range(20)]
        ends = [await t.start() for t in targets]
        turn = iter(range(len(ends)))
        slot = key_slot(KEY.encode())
        node = FakeNode(
            lambda port: slots_reply(port, [(0, 16383)]),
            lambda _port: b"-MOVED %d 127.0.0.1:%d\r\n" % (slot, ends[next(turn)].port),
        )
        seed = await node.start()
        try:
            client = hot_client([seed])
            for _ in range(20):
                assert await client.call("count_jobs", count_command(), redis_int_reply) == 0
            open_clients = len(client._nodes)  # noqa: SLF001
            await client.aclose()
            assert open_clients <= 5, f"{open_clients} node connections kept after 20 redirects"
        finally:
            node.close()
            for t in targets:
                t.close()

    run(body)


def test_a_call_fails_within_its_timeout_when_the_seeds_do_not_answer() -> None:
    """read_slot_map tries every known master and seed in turn, each with the full timeout (to
    connect, then again to answer), and ``_owner`` waits for it outside the call's deadline: with
    three silent seeds a call takes three timeouts (six if their connects hang too), not one."""

    async def body() -> None:
        loop = asyncio.get_running_loop()
        nodes = [FakeNode(lambda _port: b"") for _ in range(3)]  # accept, never answer
        seeds = [await n.start() for n in nodes]
        try:
            client = hot_client(seeds, timeout=0.5)
            start = loop.time()
            with pytest.raises(ShardConnectionError):
                await client.call("count_jobs", count_command(), redis_int_reply)
            took = loop.time() - start
            await client.aclose()
            assert took < 1.0, f"the call took {took:.2f} s with a 0.5 s timeout"
        finally:
            for n in nodes:
                n.close()

    run(body)
