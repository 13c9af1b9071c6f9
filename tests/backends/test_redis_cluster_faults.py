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
from redis.backoff import NoBackoff
from redis.retry import Retry

from pinlater._pinlater import redis_int_reply, redis_pack_command, redis_reply_end
from pinlater.backends.redis.cluster import (
    MAX_ASK_TARGETS,
    REFRESH_INTERVAL,
    ClusterHotClient,
    key_slot,
    read_slot_map,
)
from pinlater.backends.redis.config import RedisEndpoint, RedisShardConfig
from pinlater.backends.redis.hot_client import HotClient, script_sha
from pinlater.backends.redis.layouts import ShardLayout
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


def _ranges_to(port: int) -> bytes:
    return slots_reply(port, [(0, 16383)])


class FakeNode:
    """Answers CLUSTER SLOTS with ``slots(port)`` and EVALSHA with ``evalsha(port)``."""

    def __init__(self, slots: Callable[[int], bytes], evalsha: Callable[[int], bytes] | None = None) -> None:
        self.slots = slots
        self.evalsha = evalsha or (lambda _port: b":0\r\n")
        self.slot_reads = 0
        self.connections = 0
        self.open = 0  # connections not closed yet
        self.server: asyncio.Server | None = None
        self.port = 0

    async def start(self) -> RedisEndpoint:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return RedisEndpoint("127.0.0.1", self.port)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.open += 1
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
            self.open -= 1
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


@pytest.mark.parametrize("port", [0, 65536, 99999999])
def test_a_redirect_to_no_tcp_port_is_a_shard_error(port: int) -> None:
    async def body() -> None:
        node = FakeNode(_ranges_to, lambda _port: b"-MOVED 1 127.0.0.1:%d\r\n" % port)
        seed = await node.start()
        try:
            client = hot_client([seed])
            with pytest.raises(ShardConnectionError, match=f"a redirect to port {port}"):
                await client.call("count_jobs", count_command(), redis_int_reply)
            await client.aclose()
        finally:
            node.close()

    run(body)


def test_a_redirect_without_a_host_is_to_the_host_asked() -> None:
    """Redis 7 answers ``-MOVED slot :port`` when it does not know its endpoint (``cluster-
    preferred-endpoint-type unknown-endpoint``): the host is the one asked."""

    async def body() -> None:
        target = FakeNode(_ranges_to)
        end = await target.start()
        first = iter([True])  # the seed's map: its own, then (read again at the MOVED) the target's
        node = FakeNode(
            lambda port: _ranges_to(port if next(first, False) else end.port),
            lambda _port: b"-MOVED %d :%d\r\n" % (key_slot(KEY.encode()), end.port),
        )
        seed = await node.start()
        try:
            client = hot_client([seed])
            assert await client.call("count_jobs", count_command(), redis_int_reply) == 0
            assert target.connections == 1
            await client.aclose()
        finally:
            node.close()
            target.close()

    run(body)


def test_a_null_host_in_the_slot_map_is_the_host_asked() -> None:
    """Behind a load balancer (``cluster-preferred-endpoint-type unknown-endpoint``) Redis 7
    names a master's host NULL in CLUSTER SLOTS: the host asked, with that port. Refused, every
    map read failed and the shard was down for good."""

    async def body() -> None:
        node = FakeNode(lambda port: b"*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$-1\r\n:%d\r\n" % port)
        seed = await node.start()
        try:
            client = hot_client([seed])
            assert await client.call("count_jobs", count_command(), redis_int_reply) == 0
            await client.aclose()
            assert node.slot_reads == 1
        finally:
            node.close()

    run(body)


def test_a_slot_served_by_no_master_does_not_reread_the_map_at_every_call() -> None:
    """A slot with no owner (a master lost with no replica, cluster-require-full-coverage no)
    made every call for it read CLUSTER SLOTS again, on a new connection; now the map is read at
    most once in REFRESH_INTERVAL, and the calls in between fail at once."""
    slot = key_slot(KEY.encode())

    async def body() -> None:
        loop = asyncio.get_running_loop()
        ranges = [(0, slot - 1), (slot + 1, 16383)] if slot else [(1, 16383)]
        node = FakeNode(lambda port: slots_reply(port, ranges))
        seed = await node.start()
        try:
            client = hot_client([seed])
            start = loop.time()
            for _ in range(50):
                with pytest.raises(ShardConnectionError, match="served by no master"):
                    await client.call("count_jobs", count_command(), redis_int_reply)
            reads = int((loop.time() - start) / REFRESH_INTERVAL) + 1
            assert node.slot_reads <= reads, f"{node.slot_reads} CLUSTER SLOTS reads for 50 calls"
            await asyncio.sleep(REFRESH_INTERVAL)
            with pytest.raises(ShardConnectionError, match="served by no master"):
                await client.call("count_jobs", count_command(), redis_int_reply)
            assert node.slot_reads == reads + 1  # read again once the interval is over
            await client.aclose()
        finally:
            node.close()

    run(body)


def test_concurrent_calls_share_one_read_of_the_map() -> None:
    async def body() -> None:
        node = FakeNode(lambda port: slots_reply(port, [(0, 16383)]))
        seed = await node.start()
        try:
            client = hot_client([seed])
            calls = (client.call("count_jobs", count_command(), redis_int_reply) for _ in range(20))
            assert await asyncio.gather(*calls) == [0] * 20
            assert node.slot_reads == 1
            await client.aclose()
        finally:
            node.close()

    run(body)


def test_a_failed_read_of_the_map_is_not_repeated_at_every_call() -> None:
    """No seed answers: the first call tries them; the next ones within REFRESH_INTERVAL fail at
    once with the same reason."""

    async def body() -> None:
        node = FakeNode(lambda _port: b"-ERR This instance has cluster support disabled\r\n")
        seed = await node.start()
        try:
            client = hot_client([seed])
            for _ in range(20):
                with pytest.raises(ShardConnectionError, match="cluster support disabled") as failed:
                    await client.call("count_jobs", count_command(), redis_int_reply)
                assert not failed.value.maybe_applied
            assert node.slot_reads == 1
            await client.aclose()
        finally:
            node.close()

    run(body)


async def _dead_endpoint() -> RedisEndpoint:
    """A loopback port nothing listens on (any more)."""
    gone = FakeNode(_ranges_to)
    end = await gone.start()
    gone.close()
    assert gone.server is not None
    await gone.server.wait_closed()
    return end


def test_a_dead_master_right_after_a_read_still_gets_a_fresh_map() -> None:
    """A master found dead within REFRESH_INTERVAL of the last read (a failover just after it):
    the call waits for the next read, not the interval's map, and goes to the new owner."""

    async def body() -> None:
        loop = asyncio.get_running_loop()
        dead = await _dead_endpoint()
        maps = iter([dead.port])
        node = FakeNode(lambda port: _ranges_to(next(maps, port)))  # then: the seed took over
        seed = await node.start()
        try:
            client = hot_client([seed])
            start = loop.time()
            assert await client.call("count_jobs", count_command(), redis_int_reply) == 0
            assert loop.time() - start >= REFRESH_INTERVAL * 0.9
            assert node.slot_reads == 2 and client.slot_map is not None
            assert client.slot_map.owner(0) == seed
            await client.aclose()
        finally:
            node.close()

    run(body)


def test_a_dead_master_with_no_failover_is_not_a_read_of_the_map_per_call() -> None:
    async def body() -> None:
        loop = asyncio.get_running_loop()
        dead = await _dead_endpoint()
        node = FakeNode(lambda _port: _ranges_to(dead.port))
        seed = await node.start()
        try:
            client = hot_client([seed])
            start = loop.time()
            calls = [client.call("count_jobs", count_command(), redis_int_reply) for _ in range(30)]
            for failed in await asyncio.gather(*calls, return_exceptions=True):
                assert isinstance(failed, ShardConnectionError) and "Connect call failed" in failed.detail
            for _ in range(3):
                with pytest.raises(ShardConnectionError, match="Connect call failed"):
                    await client.call("count_jobs", count_command(), redis_int_reply)
            reads = int((loop.time() - start) / REFRESH_INTERVAL) + 2
            assert node.slot_reads <= reads, f"{node.slot_reads} CLUSTER SLOTS reads for 33 calls"
            await client.aclose()
        finally:
            node.close()

    run(body)


def test_moved_to_ever_new_nodes_is_not_followed_and_keeps_no_connection_to_them() -> None:
    """Every node a MOVED named got a HotClient (and its connection), kept forever, and the call
    went there. Here every other call is redirected to a node never seen before (hostile, or
    misconfigured) that the slot map, read again, does not name: the call fails as a shard that
    is down, nothing is sent to that node nor kept for it, and the map is read at most once an
    interval."""

    async def body() -> None:
        loop = asyncio.get_running_loop()
        slot = key_slot(KEY.encode())
        targets: list[FakeNode] = []
        ends: list[RedisEndpoint] = []
        answers = iter(range(40))  # every other EVALSHA: MOVED to a new node

        def evalsha(_port: int) -> bytes:
            turn = next(answers)
            return b"-MOVED %d 127.0.0.1:%d\r\n" % (slot, ends[turn // 2].port) if turn % 2 == 0 else b":0\r\n"

        for _ in range(10):
            targets.append(FakeNode(lambda port: slots_reply(port, [(0, 16383)]), evalsha))
            ends.append(await targets[-1].start())
        node = FakeNode(lambda port: slots_reply(port, [(0, 16383)]), evalsha)
        seed = await node.start()
        try:
            client = hot_client([seed])
            start = loop.time()
            for _ in range(10):
                with pytest.raises(ShardConnectionError, match="which the slot map read since does not name") as info:
                    await client.call("count_jobs", count_command(), redis_int_reply)
                assert not info.value.maybe_applied
                assert await client.call("count_jobs", count_command(), redis_int_reply) == 0
            reads = int((loop.time() - start) / REFRESH_INTERVAL) + 2  # the first read, one per interval
            open_clients = len(client._nodes)
            await client.aclose()
            assert open_clients == 1, f"{open_clients} node clients kept after 10 redirects"
            assert sum(t.connections for t in targets) == 0, "nothing sent to a node the map does not name"
            assert node.slot_reads <= reads, f"{node.slot_reads} CLUSTER SLOTS reads for 20 calls"
        finally:
            for n in [node, *targets]:
                n.close()

    run(body)


def test_ask_targets_are_bounded() -> None:
    """Nodes an -ASK names are kept though the map does not name them (a node importing its first
    slots serves none yet), the latest MAX_ASK_TARGETS of them only."""

    async def body() -> None:
        slot = key_slot(KEY.encode())
        targets = [FakeNode(lambda port: slots_reply(port, [(0, 16383)])) for _ in range(10)]
        ends = [await t.start() for t in targets]
        turn = iter(range(10))
        node = FakeNode(
            lambda port: slots_reply(port, [(0, 16383)]),
            lambda _port: b"-ASK %d 127.0.0.1:%d\r\n" % (slot, ends[next(turn)].port),
        )
        seed = await node.start()
        try:
            client = hot_client([seed])
            for _ in range(10):
                assert await client.call("count_jobs", count_command(), redis_int_reply) == 0
            kept = set(client._nodes)
            assert kept == {seed, *ends[-MAX_ASK_TARGETS:]}
            await asyncio.sleep(0.05)
            assert [t.open for t in targets] == [0] * (10 - MAX_ASK_TARGETS) + [1] * MAX_ASK_TARGETS
            await client.aclose()
        finally:
            node.close()
            for t in targets:
                t.close()

    run(body)


def test_a_call_fails_within_its_timeout_when_the_seeds_do_not_answer() -> None:
    """read_slot_map tried every known master and seed in turn, each with the full timeout (to
    connect, then again to answer): with three silent seeds a call took three timeouts, not one."""

    async def body() -> None:
        loop = asyncio.get_running_loop()
        nodes = [FakeNode(lambda _port: b"") for _ in range(3)]  # accept, never answer
        seeds = [await n.start() for n in nodes]
        try:
            client = hot_client(seeds, timeout=0.5)
            start = loop.time()
            with pytest.raises(ShardConnectionError, match="no cluster node answered"):
                await client.call("count_jobs", count_command(), redis_int_reply)
            took = loop.time() - start
            await client.aclose()
            assert took < 0.8, f"the call took {took:.2f} s with a 0.5 s timeout"
            assert all(n.slot_reads == 1 for n in nodes)  # each had its share of the time
        finally:
            for n in nodes:
                n.close()

    run(body)


def test_a_map_read_after_a_redirect_keeps_to_the_calls_timeout() -> None:
    """MOVED to a node the map does not know reads the map again, and then the call goes to that
    node: both waited their own full timeout after the redirect. Here the map read and the node
    are silent: the call still ends within its timeout."""

    async def body() -> None:
        loop = asyncio.get_running_loop()
        silent = FakeNode(lambda _port: b"", lambda _port: b"")
        end = await silent.start()
        answers = iter([b":0\r\n", b"-MOVED %d 127.0.0.1:%d\r\n" % (key_slot(KEY.encode()), end.port)])
        slot_replies = iter([True])
        node = FakeNode(
            lambda port: slots_reply(port, [(0, 16383)]) if next(slot_replies, False) else b"",
            lambda _port: next(answers),
        )
        seed = await node.start()
        try:
            client = hot_client([seed], timeout=0.5)
            assert await client.call("count_jobs", count_command(), redis_int_reply) == 0  # the map read
            await asyncio.sleep(REFRESH_INTERVAL)
            start = loop.time()
            with pytest.raises(ShardConnectionError, match="no cluster node answered CLUSTER SLOTS") as failed:
                await client.call("count_jobs", count_command(), redis_int_reply)
            took = loop.time() - start
            await client.aclose()
            assert took < 0.8, f"the call took {took:.2f} s with a 0.5 s timeout"
            assert not failed.value.maybe_applied  # the map read took the time: nothing sent there
            assert node.slot_reads == 2, "the map read again"
            assert silent.connections == 0, "a node no map named is not asked, nor sent the call"
        finally:
            node.close()
            silent.close()

    run(body)


def test_node_clients_of_a_checked_layout_add_no_layout_listener() -> None:
    """A HotClient per node the cluster names (every redirect target): one made once the layout
    is checked does not listen to it (it changes no more), so the layout does not keep every
    node client ever made."""

    async def body() -> None:
        dead = await _dead_endpoint()
        config = RedisShardConfig(dead, layout="compact")
        layout = ShardLayout("c", config, redis.Redis(dead.host, dead.port, retry=Retry(NoBackoff(), 0)))
        assert not layout.checked  # the shard was not reached: provisional
        HotClient("c", config, 1.0, layout=layout)
        layout.checked = True  # as check() leaves it once the record is read
        for _ in range(50):
            HotClient("c", config, 1.0, layout=layout)
        assert len(layout._listeners) == 1

    run(body)
