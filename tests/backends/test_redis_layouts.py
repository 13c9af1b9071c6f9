"""Which layout a Redis shard is served in (``layouts.py``): the config's ``"layout"``, the
shard's record of its layout, and what it already holds; never both layouts on one shard."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from tests.support.redis_server import RedisServer, write_shard_config

from pinlater._pinlater import NewJobBatch
from pinlater.backends.base import NewJob
from pinlater.backends.redis import RedisEndpoint, RedisShardConfig, RedisStore
from pinlater.backends.redis.layouts import layout_key
from pinlater.errors import ConfigError, ShardConnectionError

pytestmark = pytest.mark.redis

NOW = 1_700_000_000_000


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    with RedisServer(tmp_path / "redis") as srv:
        yield srv


@pytest.fixture
def raw(server: RedisServer) -> Iterator[redis.Redis]:
    client = redis.Redis(server.host, server.port)
    yield client
    client.close()


def open_store(server: RedisServer, layout: str | None) -> RedisStore:
    return RedisStore("1", RedisShardConfig(RedisEndpoint(server.host, server.port), layout=layout))


def served(server: RedisServer, layout: str | None) -> str:
    store = open_store(server, layout)
    try:
        store.create_queue("q", 3)
        assert len(store.enqueue_jobs("q", [NewJob(1, b"x", NOW, 1)], NOW)) == 1
        return store.layout.name
    finally:
        store.close()


def test_an_empty_shard_is_written_compact(server: RedisServer, raw: redis.Redis) -> None:
    assert served(server, None) == "compact"
    assert raw.get(layout_key("1")) == b"compact"
    assert raw.exists("plc:{1:q}:j") and not raw.exists("pln_1")
    assert served(server, None) == "compact"  # the record decides from now on


def test_a_shard_holding_the_originals_queues_stays_original(server: RedisServer, raw: redis.Redis) -> None:
    raw.zadd("pln_1", {"q": 1_700_000_000.0})  # as the original server creates a queue
    assert served(server, None) == "original"
    assert raw.get(layout_key("1")) == b"original"
    assert raw.exists("plh_1_q.1") and not raw.exists("plc:{1:q}:j")


def test_the_config_names_the_layout_of_an_empty_shard(server: RedisServer, raw: redis.Redis) -> None:
    assert served(server, "original") == "original"
    assert raw.get(layout_key("1")) == b"original"
    assert served(server, None) == "original"


@pytest.mark.parametrize(
    ("holds", "configured"),
    [("original", "compact"), ("compact", "original")],
)
def test_a_config_naming_the_other_layout_is_refused(server: RedisServer, holds: str, configured: str) -> None:
    served(server, holds)
    with pytest.raises(ConfigError, match=f'"layout": "{configured}" but the shard holds the {holds} layout'):
        open_store(server, configured)


def test_a_shard_the_original_emptied_of_queues_stays_original(server: RedisServer, raw: redis.Redis) -> None:
    """The original keeps a queue's id counter when the queue is deleted (and its names set goes
    with its last name): served compact, a queue created again would hand out those ids twice."""
    old = open_store(server, "original")
    old.create_queue("q", 3)
    ids = old.enqueue_jobs("q", [NewJob(1, b"x", NOW, 1)] * 5, NOW)
    old.delete_queue("q")
    old.close()
    raw.delete(layout_key("1"))  # as an original PinLater server leaves it: it writes no record
    assert raw.exists("plj_1_q") and not raw.exists("pln_1")
    assert served(server, None) == "original"
    store = open_store(server, None)
    try:
        assert store.enqueue_jobs("q", [NewJob(1, b"y", NOW, 1)], NOW)[0] > max(ids)
    finally:
        store.close()


def test_original_data_without_a_record_is_not_served_compact(server: RedisServer, raw: redis.Redis) -> None:
    raw.zadd("pln_1", {"q": 1_700_000_000.0})
    with pytest.raises(ConfigError, match="holds the original layout"):
        open_store(server, "compact")
    assert raw.get(layout_key("1")) is None  # nothing written by the refused store


def test_a_shard_being_migrated_is_refused(server: RedisServer, raw: redis.Redis) -> None:
    raw.set(layout_key("1"), "migrating")
    with pytest.raises(ConfigError, match="migrate-layout"):
        open_store(server, None)


def refused_until_checked(store: RedisStore) -> None:
    """Every path of an unchecked store fails as a down shard, the event loop's hot path too."""
    assert not store.layout.checked
    hot = store.hot_path(None)  # type: ignore[arg-type]  # offload unused
    with pytest.raises(ShardConnectionError, match="layout record is not read yet"):
        asyncio.run(hot.enqueue_jobs("q", NewJobBatch([]), NOW))


def hot_lifecycle(store: RedisStore) -> list[tuple[int, bytes]]:
    """Enqueue a job through the store's hot path (the server's) and dequeue every job there:
    their ids and bodies."""
    hot = store.hot_path(None)  # type: ignore[arg-type]  # offload unused

    async def run() -> list[tuple[int, bytes]]:
        try:
            await hot.enqueue_jobs("q", NewJobBatch([NewJob(1, b"hot", NOW, 1, "")]), NOW)
            claimed = (await hot.dequeue_jobs("q", 1, 10, "c", NOW, False)).to_list()
            return [(local_id, body) for local_id, body, *_ in claimed]
        finally:
            await store.aclose()

    return asyncio.run(run())


@pytest.mark.parametrize("recorded", ["original", "compact"])
def test_a_shard_unreachable_at_open_without_a_layout_is_served_in_the_one_it_holds(
    tmp_path: Path, recorded: str
) -> None:
    """Without "layout" in the config (the record decides), a shard reached only after the store
    opened (Redis slower to start than the server) is served, once reached, in the layout it holds."""
    with RedisServer(tmp_path / "durable", appendonly=True) as server:
        raw = server.client()
        try:
            served_once_reached(server, raw, recorded)
        finally:
            raw.close()


def served_once_reached(server: RedisServer, raw: redis.Redis, recorded: str) -> None:
    first = open_store(server, recorded)
    first.create_queue("q", 3)
    assert first.enqueue_jobs("q", [NewJob(1, b"before", NOW, 1)], NOW) == [1]
    first.close()
    server.stop()
    store = open_store(server, None)
    try:
        refused_until_checked(store)
        server.start()
        store.ping()  # reads the record
        assert store.layout.checked and store.layout.name == recorded
        assert store.get_queue_names() == {"q"}
        assert hot_lifecycle(store) == [(1, b"before"), (2, b"hot")], "ids continue, in the layout held"
        assert raw.get(layout_key("1")) == recorded.encode()
        marker = layout_key("1").encode()
        written = {key.decode().split(":")[0].split("_")[0] for key in raw.keys("pl*") if key != marker}
        assert written == ({"plc"} if recorded == "compact" else {"pln", "plq", "plh", "plj"})
    finally:
        store.close()


def test_an_empty_shard_unreachable_at_open_is_written_compact_once_reached(
    server: RedisServer, raw: redis.Redis
) -> None:
    server.stop()
    store = open_store(server, None)
    try:
        refused_until_checked(store)
        server.start()
        store.create_queue("q", 3)  # a blocking call reads the record first, as the ping does
        assert store.layout.checked and store.layout.name == "compact"
        assert raw.get(layout_key("1")) == b"compact"
        assert hot_lifecycle(store) == [(1, b"hot")]
    finally:
        store.close()


def test_a_shard_unreachable_at_open_holding_the_other_layout_stays_down(server: RedisServer, raw: redis.Redis) -> None:
    server.stop()
    store = open_store(server, "original")
    try:
        refused_until_checked(store)
        server.start()
        raw.set(layout_key("1"), "compact")  # another server made it compact meanwhile
        with pytest.raises(ShardConnectionError, match="holds the compact layout"):
            store.ping()
        with pytest.raises(ShardConnectionError):
            store.create_queue("q", 3)
        assert raw.keys("pl[a-z]_*") == []  # nothing written in the wrong layout
        raw.delete(layout_key("1"))
        store.ping()  # reads the shard (empty, no record): served and recorded as the config says
        assert store.layout.checked and raw.get(layout_key("1")) == b"original"
        store.create_queue("q", 3)
        assert store.enqueue_jobs("q", [NewJob(1, b"x", NOW, 1)], NOW) == [1]
    finally:
        store.close()


def test_the_server_refuses_to_start_on_the_other_layout(tmp_path: Path, server: RedisServer, raw: redis.Redis) -> None:
    raw.set(layout_key("1"), "compact")
    config = write_shard_config(tmp_path / "redis.json", {"1": server}, layout="original")
    done = subprocess.run(
        [sys.executable, "-m", "pinlater.cli", "serve", "--backend", "redis", "--backend-config", str(config),
         "--port", "0", "--admin-port", "0"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode != 0
    assert "the shard holds the compact layout" in done.stderr
    assert done.stderr.strip().count("\n") == 0, done.stderr  # one line
