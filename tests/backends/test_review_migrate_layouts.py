"""Review findings (layout migration, layout choice) on a real redis-server. Each test states
what the code should do; a failing test is the finding."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from tests.support.redis_layouts import T0, compact_view
from tests.support.redis_server import RedisServer

from pinlater.backends.base import NewJob
from pinlater.backends.redis import RedisEndpoint, RedisShardConfig, RedisStore
from pinlater.backends.redis.layouts import layout_key
from pinlater.backends.redis.migrate import MigrationError, QueueProgress, migrate_shard

pytestmark = pytest.mark.redis


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    with RedisServer(tmp_path / "redis") as srv:
        yield srv


@pytest.fixture
def raw(server: RedisServer) -> Iterator[redis.Redis]:
    client = server.client()
    yield client
    client.close()


def open_store(server: RedisServer, layout: str | None = "original") -> RedisStore:
    return RedisStore("1", RedisShardConfig(RedisEndpoint(server.host, server.port), layout=layout))


def test_a_queue_created_again_in_the_source_after_its_move_does_not_reuse_ids(
    server: RedisServer, raw: redis.Redis
) -> None:
    """to_compact.lua deletes the original counter plj_1_q when it finishes a queue (line 159),
    although the original layout never deletes it (keys.py: "never reset, so ids are not
    reused"). A server still on the original layout (--force, a PinLater Java server that the
    CLIENT LIST check cannot see, or one of ours with no connection open at that instant) that
    creates the queue again starts its ids at 1; the next run moves that job over compact job 1:
    one job is silently lost. README: "--force ... Nothing is lost then either"."""
    store = open_store(server)
    store.create_queue("q", 1)
    assert store.enqueue_jobs("q", [NewJob(1, b"old-%d" % i, T0, 1) for i in range(3)], T0) == [1, 2, 3]

    def recreate(progress: QueueProgress) -> None:
        if progress.done:  # the queue is gone from the original: its server creates it again
            store.create_queue("q", 1)
            store.enqueue_jobs("q", [NewJob(1, b"new", T0, 1)], T0)

    try:
        # The re-created queue is not even reported: its plj_1_q makes it a "counter only" queue
        # (migrate.py:203), whose script call moves its jobs anyway (the queue is named in pln_1)
        # and whose counts are thrown away; live_queues() is then empty, so no "appeared" error.
        summary = migrate_shard(raw, "1", "compact", force=True, on_progress=recreate)
    finally:
        store.close()
    bodies = sorted(job.body for job in compact_view(raw, "1").jobs.values())
    assert summary.moved.jobs == 3 and summary.counters == 1
    assert bodies == [b"new", b"old-0", b"old-1", b"old-2"]  # fails: old-0 was overwritten by new


def test_a_compact_shard_unreachable_at_start_is_served_once_reached(tmp_path: Path) -> None:
    """README step 3 of the migration: 'Set "layout": "compact" ... (or leave "layout" out, and
    the shard's record decides)'. With "layout" left out, a server that starts while the Redis
    is down (a host reboot, Redis slower to start than the servers) fixes the shard's layout to
    "original" (layouts.py:100) and, once Redis is up, refuses it forever with a message that
    says the config names "original" (it names nothing): the shard is never served until the
    server is restarted."""
    with RedisServer(tmp_path / "redis", appendonly=True) as server:
        raw = server.client()
        try:
            _unreachable_at_start(server, raw)
        finally:
            raw.close()


def _unreachable_at_start(server: RedisServer, raw: redis.Redis) -> None:
    store = open_store(server, layout="compact")
    store.create_queue("q", 1)
    store.enqueue_jobs("q", [NewJob(1, b"x", T0, 1)], T0)
    store.close()
    assert raw.get(layout_key("1")) == b"compact"

    server.stop()
    store = open_store(server, layout=None)  # the record decides, as the README allows
    try:
        server.start()
        store.ping()  # fails: ShardConnectionError 'the config says "layout": "original" ...'
        assert store.layout.name == "compact"
        assert store.get_queue_names() == {"q"}
    finally:
        store.close()


def test_counters_of_another_shard_are_not_copied_into_this_one(server: RedisServer, raw: redis.Redis) -> None:
    """migrate.py:262 scans plj_1_* for counters of shard 1's deleted queues; that also matches
    shard 1_x's counters (plj_1_x_q), so moving shard 1 writes compact hashes for a queue 'x_q'
    shard 1 never had and reports them as 'counters of deleted queues copied'."""
    other = RedisStore("1_x", RedisShardConfig(RedisEndpoint(server.host, server.port), layout="original"))
    other.create_queue("q", 1)
    other.enqueue_jobs("q", [NewJob(1, b"x", T0, 1)], T0)
    other.close()
    store = open_store(server)
    store.create_queue("a", 1)
    store.close()
    summary = migrate_shard(raw, "1", "compact")
    assert summary.counters == 0  # fails: 1 (plj_1_x_q, shard 1_x's)
    assert not raw.exists("plc:{1:x_q}:j")
