"""Long-poll dequeue (``waitMillis``, a compatible extension of the dequeue request)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

from tests.server.test_contract import Api
from tests.server.test_hostile_peers import gauge
from tests.support.pinlater_server import ServerProcess
from tests.support.thrift_client import connect
from tests.support.wait import wait_for

Start = Callable[..., ServerProcess]


def in_flight(srv: ServerProcess) -> int:
    return gauge(srv, "requests_in_flight")


def background_dequeue(srv: ServerProcess, ttypes: ModuleType, **kw: Any) -> tuple[threading.Thread, dict[str, Any]]:
    result: dict[str, Any] = {}

    def run() -> None:
        client, transport = connect("127.0.0.1", srv.port, timeout=60)
        try:
            start = time.monotonic()
            result["response"] = Api(client, ttypes, source="poller").dequeue("lp", limit=5, **kw)
            result["elapsed"] = time.monotonic() - start
        except Exception as exc:
            result["error"] = exc
        finally:
            transport.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread, result


def test_a_waiting_dequeue_is_woken_by_an_enqueue(server: ServerProcess, client: Any, ttypes: ModuleType) -> None:
    api = Api(client, ttypes)
    api.create("lp")
    thread, result = background_dequeue(server, ttypes, waitMillis=20_000)
    wait_for(lambda: in_flight(server) >= 1, timeout=10, what="the long poll to be waiting")
    (descriptor,) = api.enqueue("lp", api.job(b"wake up"))
    thread.join(30)
    assert "error" not in result, result
    assert list(result["response"].jobs) == [descriptor]
    assert result["elapsed"] < 10, "woken by the enqueue, not by the 20 s timeout"


def test_a_waiting_dequeue_returns_empty_when_the_wait_ends(
    server: ServerProcess, client: Any, ttypes: ModuleType
) -> None:
    api = Api(client, ttypes)
    api.create("lp")
    start = time.monotonic()
    assert api.dequeue("lp", waitMillis=600).jobs == {}
    assert time.monotonic() - start >= 0.55
    start = time.monotonic()
    assert api.dequeue("lp").jobs == {}, "without waitMillis the answer is immediate"
    assert time.monotonic() - start < 0.55


def test_a_job_becoming_ready_later_is_found_by_the_recheck(
    server: ServerProcess, client: Any, ttypes: ModuleType
) -> None:
    api = Api(client, ttypes)
    api.create("lp")
    (descriptor,) = api.enqueue("lp", api.job(b"soon", runAfterTimestampMillis=int(time.time() * 1000) + 700))
    got = api.dequeue("lp", waitMillis=15_000)
    assert list(got.jobs) == [descriptor]


def test_shutdown_ends_waiting_dequeues_promptly(start_server: Start, open_client: Any, ttypes: ModuleType) -> None:
    srv = start_server()
    Api(open_client(srv), ttypes).create("lp")
    thread, result = background_dequeue(srv, ttypes, waitMillis=30_000)
    wait_for(lambda: in_flight(srv) >= 1, timeout=10, what="the long poll to be waiting")
    start = time.monotonic()
    assert srv.terminate(timeout=20) == 0
    thread.join(30)
    assert time.monotonic() - start < 10
    assert result.get("response") is not None and result["response"].jobs == {}, result


def test_waiting_long_polls_hold_no_request_slot(start_server: Start, open_client: Any, ttypes: ModuleType) -> None:
    """More long polls waiting than MAX_CONCURRENT_REQUESTS allows requests at once: another
    client is still served (before, the polls held every slot and its calls waited for them to
    expire, past its socket timeout), and each poll takes a slot again for the job it gets."""
    srv = start_server(properties={"MAX_CONCURRENT_REQUESTS": 2})
    api = Api(open_client(srv), ttypes)
    api.create("lp")
    api.create("other")
    polls = [background_dequeue(srv, ttypes, waitMillis=30_000) for _ in range(4)]
    wait_for(lambda: gauge(srv, "long_polls_waiting") == 4, timeout=10, what="four long polls to be waiting")
    assert gauge(srv, "requests_in_flight") == 4
    other_client, other_transport = connect("127.0.0.1", srv.port, timeout=10)
    try:
        other = Api(other_client, ttypes)
        (descriptor,) = other.enqueue("other", other.job(b"served"))
        assert list(other.dequeue("other").jobs) == [descriptor]
    finally:
        other_transport.close()
    assert all(thread.is_alive() for thread, _ in polls), "the polls still wait"
    woken = api.enqueue("lp", *(api.job(b"job-%d" % i) for i in range(20)))  # five a poll
    for thread, _ in polls:
        thread.join(30)
    assert all(len(result["response"].jobs) == 5 and result["elapsed"] < 20 for _, result in polls), polls
    got = [descriptor for _, result in polls for descriptor in result["response"].jobs]
    assert sorted(got) == sorted(woken)
    assert gauge(srv, "long_polls_waiting") == 0


def counted_dequeues(tmp_path: Any, monkeypatch: Any) -> tuple[Any, Any, Any, list[int]]:
    """In process, to count a long poll's dequeues: an embedded store with queue ``polled``, its
    backend, a handler, and the count of the handler's dequeues (``[n]``, kept up to date)."""
    from pinlater.backends.embedded import EmbeddedStore
    from pinlater.backends.sharded import ShardedBackend
    from pinlater.backends.shardmap import Shard, ShardMap
    from pinlater.server.handler import PinLaterHandler
    from pinlater.server.metrics import Metrics

    store = EmbeddedStore(tmp_path / "data", "1")
    store.create_queue("polled", 3)
    backend = ShardedBackend(ShardMap([Shard("1", store)]), num_priorities=3, parallelism=4)
    dequeues = [0]
    dequeue = PinLaterHandler._dequeue

    def counted(self: PinLaterHandler, *args: Any) -> Any:
        dequeues[0] += 1
        return dequeue(self, *args)

    monkeypatch.setattr(PinLaterHandler, "_dequeue", counted)
    return store, backend, PinLaterHandler(backend, Metrics()), dequeues


def test_many_waiting_long_polls_recheck_at_a_bounded_rate(tmp_path: Any, monkeypatch: Any) -> None:
    """3,000 long polls of 4 s on one server, on an empty queue (in process, to count their
    dequeues): once each has waited once, they recheck at most RECHECKS_PER_SECOND times a
    second together (each every 1.5 s here, where every 0.2 s made 15,000 dequeues a second), and
    a job made ready behind the server's back (no enqueue through it wakes them) is still found,
    by a recheck."""
    import asyncio

    from pinlater.backends.base import NewJob
    from pinlater.server.handler import RECHECKS_PER_SECOND

    store, backend, handler, dequeues = counted_dequeues(tmp_path, monkeypatch)
    waiters = 3000
    assert max(backend.empty_recheck_ms / 1000, waiters / RECHECKS_PER_SECOND) == 1.5

    async def go() -> tuple[list[Any], int, float]:
        loop = asyncio.get_running_loop()
        polls = [
            asyncio.create_task(handler._long_poll("polled", 1, "test", 1.0, 4000, 1 << 20)) for _ in range(waiters)
        ]
        await asyncio.sleep(1.6)  # each has waited once (the first ones while fewer waited: less)
        before, started = dequeues[0], loop.time()
        await asyncio.sleep(2.0)
        counted_, window = dequeues[0] - before, loop.time() - started
        store.enqueue_jobs("polled", [NewJob(1, b"behind its back", 0, 1)], 0)  # (not through the backend)
        backend.forget_empty()  # (as the shards' empty hints expire: up to 3.2 s)
        return await asyncio.gather(*polls), counted_, window

    try:
        found, in_window, window = asyncio.run(go())
    finally:
        backend.close()
    assert in_window <= RECHECKS_PER_SECOND * window * 1.3, (in_window, window)
    assert sum(len(jobs) for jobs in found) == 1, "found by a recheck"


def test_an_enqueue_wakes_as_many_long_polls_as_it_has_jobs(tmp_path: Any, monkeypatch: Any) -> None:
    """300 long polls of one job each wait on a queue (their rechecks pushed out of the test's
    reach): an enqueue of 3 jobs through the server wakes the 3 that waited longest, which make
    3 dequeues and take a job each; the others go on waiting (before, every poll of the queue
    woke and dequeued, 297 of them for nothing). An enqueue of 2 jobs then wakes 2 polls of 5."""
    import asyncio

    from pinlater._pinlater import NewJobBatch

    _store, backend, handler, dequeues = counted_dequeues(tmp_path, monkeypatch)
    backend.empty_recheck_ms = 60_000  # no recheck within the test: only wake-ups dequeue

    async def until(condition: Callable[[], bool]) -> None:
        for _ in range(2000):
            if condition():
                return
            await asyncio.sleep(0.005)
        raise AssertionError("not within 10 s")

    def jobs(poll: asyncio.Task[Any]) -> int:
        return sum(len(batch.jobs) for batch in poll.result())  # (ReadyBatch per shard and priority)

    async def go() -> None:
        def poll(limit: int) -> asyncio.Task[Any]:
            return asyncio.create_task(handler._long_poll("polled", limit, "test", 1.0, 30_000, 1 << 20))

        polls = []
        for _ in range(300):
            polls.append(poll(1))
            await asyncio.sleep(0)  # each starts waiting in turn: polls[0] waits longest
        await until(lambda: backend.signals.waiters == 300)
        before = dequeues[0]
        await backend.enqueue_jobs("polled", NewJobBatch([(1, b"job", 0, 1, "")] * 3))
        await until(lambda: sum(p.done() for p in polls) == 3)
        for _ in range(20):  # any other poll woken would have dequeued by now
            await asyncio.sleep(0)
        assert dequeues[0] - before == 3
        assert [p.done() for p in polls[:3]] == [True] * 3 and not any(p.done() for p in polls[3:])
        assert [jobs(p) for p in polls[:3]] == [1, 1, 1]
        assert backend.signals.waiters == 297

        for p in polls[3:]:
            p.cancel()
        await asyncio.gather(*polls[3:], return_exceptions=True)
        assert backend.signals.waiters == 0 and backend.signals._queues == {}
        fives = []
        for _ in range(10):
            fives.append(poll(5))
            await asyncio.sleep(0)
        await until(lambda: backend.signals.waiters == 10)
        before = dequeues[0]
        await backend.enqueue_jobs("polled", NewJobBatch([(1, b"job", 0, 1, "")] * 7))  # 7 jobs: 2 polls of 5
        await until(lambda: sum(p.done() for p in fives) == 2)
        for _ in range(20):
            await asyncio.sleep(0)
        # (the one that took 2 of its 5 passed 3 on, in case its bytes' bound left some: one
        # more poll looked, found none, and waits again)
        assert dequeues[0] - before == 3
        assert sorted(jobs(p) for p in fives[:2]) == [2, 5] and backend.signals.waiters == 8
        for p in fives[2:]:
            p.cancel()
        await asyncio.gather(*fives[2:], return_exceptions=True)

        # polls whose bytes' bound (100) takes one 100-byte job each (of the 3 each wants): each woken
        # one passes the rest on, and the 3 jobs are taken at once, no recheck needed
        small = []
        for _ in range(5):
            small.append(asyncio.create_task(handler._long_poll("polled", 3, "test", 1.0, 30_000, 100)))
            await asyncio.sleep(0)
        await until(lambda: backend.signals.waiters == 5)
        await backend.enqueue_jobs("polled", NewJobBatch([(1, b"x" * 100, 0, 1, "")] * 3))
        await until(lambda: sum(p.done() for p in small) == 3)
        assert [jobs(p) for p in small[:3]] == [1, 1, 1]
        for p in small[3:]:
            p.cancel()
        await asyncio.gather(*small[3:], return_exceptions=True)

    try:
        asyncio.run(go())
    finally:
        backend.close()


def test_a_long_poll_cancelled_once_woken_passes_its_wake_on() -> None:
    """A poll woken for a job and cancelled before it could dequeue (its connection lost) wakes
    the next poll in its place; on Python 3.11 ``asyncio.wait_for`` swallowed that cancel."""
    import asyncio

    import pytest

    from pinlater.wakeup import QueueSignals

    async def go() -> None:
        signals = QueueSignals()
        first = asyncio.create_task(signals.wait("q", 30, 1))
        await asyncio.sleep(0)
        second = asyncio.create_task(signals.wait("q", 30, 1))
        await asyncio.sleep(0)
        assert signals.waiters == 2
        signals.notify("q", 1)  # wakes the first
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        assert await asyncio.wait_for(second, 5) is True, "woken in its place"
        assert signals.waiters == 0 and signals._queues == {}

    asyncio.run(go())
