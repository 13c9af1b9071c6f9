"""Queue rules on the MySQL store, on a real MariaDB: ``max_in_progress`` kept by the store's
methods and by its Rust hot path as the server calls it (``ShardedBackend.hot_path``), across two
stores (two servers) racing from threads, for reservations and their claims, and as it changes;
and ordered groups refused with a reason.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from tests.support.mariadb_server import MariaDBServer, shared_server

from pinlater._pinlater import AckGroup, ClaimItems
from pinlater.backends.base import AckItem, ClaimedJob, JobFilter, JobState, KeyedJob, NewJob, QueueRules
from pinlater.backends.mysql import Endpoint, MySQLShardConfig, MySQLStore
from pinlater.backends.mysql.native_hot import NativeMySQLHotPath
from pinlater.backends.mysql.store import GROUPS_REFUSED
from pinlater.backends.sharded import ShardedBackend
from pinlater.backends.shardmap import Shard, ShardMap
from pinlater.errors import ErrorCode, PinLaterError, QueueNotFoundError

pytestmark = pytest.mark.mysql

T0 = 1_700_000_000_000
Q, FREE = "capped", "free"
HOLD_MS = 60_000
PATHS = ["store", "native"]


class Server:
    """One pinlater server's view of the shard: a ``MySQLStore`` and the hot path the server
    gets for it (``ShardedBackend.hot_path``), on an event loop of its own."""

    def __init__(self, mariadb: MariaDBServer, *, pool_size: int = 4) -> None:
        config = MySQLShardConfig(Endpoint(mariadb.host, mariadb.port), mariadb.user, mariadb.password)
        self.store = MySQLStore("1", config, pool_size=pool_size)
        self.shard = Shard("1", self.store)
        self.backend = ShardedBackend(ShardMap([self.shard]), num_priorities=3, parallelism=4)
        self.loop = asyncio.new_event_loop()
        self.hot = self.backend.hot_path(self.shard)
        assert isinstance(self.hot, NativeMySQLHotPath), "the Rust hot path"

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def cap(self, queue: str, cap: int | None) -> None:
        self.store.set_queue_rules({} if cap is None else {queue: QueueRules(max_in_progress=cap)})

    def dequeue(self, path: str, queue: str, priority: int, limit: int, *, dry_run: bool = False) -> list[int]:
        claim = f"claim|{path}"
        if path == "store":
            return [j.local_id for j in self.store.dequeue_jobs(queue, priority, limit, claim, T0, dry_run)]
        claimed = self.run(self.hot.dequeue_jobs(queue, priority, limit, claim, T0, dry_run))
        return [ClaimedJob._make(j).local_id for j in claimed.to_list()]

    def reserve(self, path: str, queue: str, priority: int, limit: int, reservation: str) -> list[int]:
        if path == "store":
            return [j.local_id for j in self.store.reserve_jobs(queue, priority, limit, reservation, T0, HOLD_MS)]
        reserved = self.run(self.hot.reserve_jobs(queue, priority, limit, reservation, T0, HOLD_MS))
        return [ClaimedJob._make(j).local_id for j in reserved.to_list()]

    def claim_reserved(self, path: str, queue: str, items: list[tuple[int, int, str]], reservation: str) -> int:
        if path == "store":
            return len(self.store.claim_reserved(queue, items, reservation, T0))
        return len(items) - len(self.run(self.hot.claim_reserved(queue, ClaimItems(items), reservation, T0)))

    def ack(self, queue: str, succeeded: Sequence[tuple[int, int]], failed: Sequence[tuple[int, int]] = ()) -> None:
        acks = AckGroup([AckItem(p, i) for p, i in succeeded], [AckItem(p, i, "", 0) for p, i in failed])
        self.run(self.hot.ack_jobs(queue, acks, T0))

    def close(self) -> None:
        self.run(self.backend.aclose())
        self.backend.close()
        self.loop.close()


@pytest.fixture
def mariadb() -> MariaDBServer:
    shared = shared_server()
    shared.drop_queue_databases()
    return shared


@pytest.fixture
def server(mariadb: MariaDBServer) -> Iterator[Server]:
    s = Server(mariadb)
    s.store.create_queue(Q, 3)
    s.store.create_queue(FREE, 3)
    try:
        yield s
    finally:
        s.close()


def enqueue(store: MySQLStore, queue: str, priority: int, n: int) -> list[int]:
    return store.enqueue_jobs(queue, [NewJob(priority, b"job", T0 - 1, 3) for _ in range(n)], T0)


def in_progress(mariadb: MariaDBServer, queue: str) -> int:
    """The queue's IN_PROGRESS jobs on the shard, every priority, read by the test's own root."""
    parts = " UNION ALL ".join(f"SELECT state FROM `plq_1_{queue}`.`jobs_p{p}`" for p in (1, 2, 3))
    return int(mariadb.query(f"SELECT COUNT(*) FROM ({parts}) AS jobs WHERE state = 1")[0][0])


# -- ordered groups ---------------------------------------------------------------------------


def test_ordered_groups_are_refused_with_a_reason(server: Server) -> None:
    store = server.store
    assert store.groups_refused == GROUPS_REFUSED
    assert f"groupKey (ordered groups) {store.groups_refused}" == (
        "groupKey (ordered groups) is not kept by MySQL shards: the original schema has no place for a group"
    )
    # A caller that passes a grouped job anyway has it refused, never its group ignored.
    with pytest.raises(PinLaterError) as refused:
        store.enqueue_keyed_jobs(Q, [KeyedJob(NewJob(1, b"g", T0, 1), "k", 0, "group-a")], T0)
    assert refused.value.code == ErrorCode.ENQUEUE_REJECTED and GROUPS_REFUSED in str(refused.value)
    with pytest.raises(PinLaterError):
        store.enqueue_keyed_jobs(Q, [KeyedJob(NewJob(1, b"g", T0, 1), None, 0, "group-a")], T0)
    assert store.count_jobs(Q, JobFilter(JobState.PENDING, 1, T0, future=None), None) == 0, "nothing inserted"
    # Dedup keys still work; no job has a group.
    (made,) = store.enqueue_keyed_jobs(Q, [KeyedJob(NewJob(1, b"d", T0, 1), "k")], T0)
    (again,) = store.enqueue_keyed_jobs(Q, [KeyedJob(NewJob(1, b"d", T0, 1), "k")], T0)
    assert not made.deduplicated and again.deduplicated and again.local_id == made.local_id
    (record,) = store.lookup_jobs(Q, [(1, made.local_id)], False)
    assert record.dedup_key == "k" and record.group_key is None
    assert store.group_counts(Q) == (0, 0)
    with pytest.raises(QueueNotFoundError):
        store.group_counts("missing")
    # Group rules are accepted and change nothing.
    store.set_queue_rules({Q: QueueRules(group_concurrency=3, group_jobs_per_second=0.5)})
    assert len(server.dequeue("store", Q, 1, 5)) == 1


# -- max_in_progress ---------------------------------------------------------------------------


@pytest.mark.parametrize("path", PATHS)
def test_the_cap_counts_every_priority(server: Server, mariadb: MariaDBServer, path: str) -> None:
    p1, p2 = enqueue(server.store, Q, 1, 4), enqueue(server.store, Q, 2, 4)
    enqueue(server.store, FREE, 1, 6)
    server.cap(Q, 3)
    assert server.dequeue(path, Q, 1, 2) == p1[:2]
    assert server.dequeue(path, Q, 2, 5) == p2[:1], "one slot left, whatever the priority"
    assert server.dequeue(path, Q, 2, 5) == [] and server.dequeue(path, Q, 1, 1) == []
    assert len(server.dequeue(path, Q, 1, 5, dry_run=True)) == 2, "a dry run ignores the cap"
    assert len(server.dequeue(path, FREE, 1, 6)) == 6, "another queue has no cap"
    assert in_progress(mariadb, Q) == 3
    # A success frees a slot; a failure that will be retried frees one too (the job is PENDING).
    server.ack(Q, [(1, p1[0])], [(2, p2[0])])
    assert len(server.dequeue(path, Q, 2, 5)) == 2
    assert server.dequeue(path, Q, 1, 5) == []
    assert in_progress(mariadb, Q) == 3


@pytest.mark.parametrize("path", PATHS)
def test_a_cap_lowered_and_raised_between_calls(server: Server, mariadb: MariaDBServer, path: str) -> None:
    ids = enqueue(server.store, Q, 1, 10)
    server.cap(Q, 4)
    assert server.dequeue(path, Q, 1, 10) == ids[:4]
    server.cap(Q, 2)  # lowered below what runs: nothing is taken back, nothing more handed out
    assert server.dequeue(path, Q, 1, 10) == []
    server.ack(Q, [(1, ids[0])])
    assert server.dequeue(path, Q, 1, 10) == [], "3 still run, the cap is 2"
    server.ack(Q, [(1, ids[1]), (1, ids[2])])
    assert server.dequeue(path, Q, 1, 10) == ids[4:5]
    server.cap(Q, 5)  # raised: the room grows at the next call
    assert server.dequeue(path, Q, 1, 10) == ids[5:8]
    server.cap(Q, None)  # removed
    assert server.dequeue(path, Q, 1, 10) == ids[8:]
    assert in_progress(mariadb, Q) == 7


@pytest.mark.parametrize("path", PATHS)
def test_reservations_and_their_claims_under_a_cap(server: Server, mariadb: MariaDBServer, path: str) -> None:
    ids = enqueue(server.store, Q, 1, 6) + enqueue(server.store, Q, 2, 2)
    server.cap(Q, 4)
    assert server.dequeue(path, Q, 1, 1) == ids[:1]
    assert server.reserve(path, Q, 1, 10, "~r|a") == ids[1:4], "no more than the room (3)"
    assert server.reserve(path, Q, 2, 10, "~r|b") == ids[6:8], "reading the room takes no lock, and holds none"
    assert server.dequeue(path, Q, 1, 1) == ids[4:5], "the jobs nobody reserved still come"
    # Room for 2 more: of the jobs given, the first ones still reserved are claimed, in order.
    items = [(1, 999_999, "w|gone"), (1, ids[3], "w|3"), (1, ids[1], "w|1"), (1, ids[2], "w|2")]
    assert server.claim_reserved(path, Q, items, "~r|a") == 2
    claims = {r.local_id: r.claim_descriptor for r in server.store.lookup_jobs(Q, [(1, i) for i in ids[1:4]], False)}
    assert claims == {ids[3]: "w|3", ids[1]: "w|1", ids[2]: "~r|a"}, "the third stays reserved"
    assert server.claim_reserved(path, Q, [(2, ids[6], "w|6")], "~r|b") == 0, "at the cap"
    assert in_progress(mariadb, Q) == 4
    assert server.store.release_reservations(Q, [(1, ids[2])], "~r|a", T0) == 1
    server.ack(Q, [(1, ids[0])])
    assert server.claim_reserved(path, Q, [(2, ids[7], "w|7"), (2, ids[6], "w|6")], "~r|b") == 1
    (record,) = server.store.lookup_jobs(Q, [(2, ids[7])], False)
    assert record.claim_descriptor == "w|7"
    assert in_progress(mariadb, Q) == 4


def test_two_servers_racing_never_pass_the_cap(server: Server, mariadb: MariaDBServer) -> None:
    """Four threads on one server's store methods and twelve concurrent Rust hot-path dequeues on
    another's, all at once, for a queue with room for 5: 5 are claimed, in two rounds."""
    other = Server(mariadb, pool_size=6)
    try:
        enqueue(server.store, Q, 1, 40)
        enqueue(server.store, Q, 2, 40)
        for s in (server, other):
            s.cap(Q, 5)
        for _ in range(2):
            claimed = _race(server, other)
            assert len(claimed) == 5, claimed
            assert in_progress(mariadb, Q) == 5
            server.ack(Q, claimed)  # the next round has room for 5 again
    finally:
        other.close()


def _race(threads_server: Server, native_server: Server) -> list[tuple[int, int]]:
    start = threading.Barrier(5)
    claimed: list[tuple[int, int]] = []
    lock = threading.Lock()

    def by_threads(priority: int) -> None:
        start.wait()
        for _ in range(3):
            got = threads_server.dequeue("store", Q, priority, 2)
            with lock:
                claimed.extend((priority, i) for i in got)

    async def by_native() -> None:
        async def one(priority: int) -> list[tuple[int, int]]:
            got = await native_server.hot.dequeue_jobs(Q, priority, 2, f"claim|n{priority}", T0, False)
            return [(priority, ClaimedJob._make(j).local_id) for j in got.to_list()]

        start.wait()
        answers = await asyncio.gather(*(one(1 + k % 2) for k in range(12)))
        with lock:
            claimed.extend(key for answer in answers for key in answer)

    workers = [threading.Thread(target=by_threads, args=(1 + k % 2,)) for k in range(4)]
    for w in workers:
        w.start()
    native_server.run(by_native())
    for w in workers:
        w.join()
    assert len(set(claimed)) == len(claimed), "no job claimed twice"
    return claimed


@pytest.mark.parametrize("path", PATHS)
def test_a_queue_made_without_the_claim_lock_table(server: Server, mariadb: MariaDBServer, path: str) -> None:
    """A queue the original server made has no claim_lock table: uncapped claims never need it,
    the first capped one makes it; a capped claim of a missing queue is QUEUE_NOT_FOUND."""
    mariadb.query(f"DROP TABLE `plq_1_{Q}`.`claim_lock`")
    ids = enqueue(server.store, Q, 1, 4)
    assert server.dequeue(path, Q, 1, 1) == ids[:1]
    assert not mariadb.query(f"SHOW TABLES FROM `plq_1_{Q}` LIKE 'claim_lock'"), "uncapped: untouched"
    server.cap(Q, 2)
    assert server.dequeue(path, Q, 1, 5) == ids[1:2]
    assert mariadb.query(f"SHOW TABLES FROM `plq_1_{Q}` LIKE 'claim_lock'")
    server.store.set_queue_rules({"missing": QueueRules(max_in_progress=2)})
    with pytest.raises(QueueNotFoundError):
        server.dequeue(path, "missing", 1, 1)
    with pytest.raises(QueueNotFoundError):
        server.claim_reserved(path, "missing", [(1, 1, "w")], "~r|a")


def test_both_paths_send_the_same_capped_claim(server: Server, mariadb: MariaDBServer) -> None:
    """The Rust hot path's capped dequeue sends the Python store's statements, as the server's
    general log shows them (the Rust path sends the claim's UPDATE and SELECT in one query)."""
    py, rs = "pyq", "rsq"  # the same length: their statements differ only in the name
    for queue in (py, rs):
        server.store.create_queue(queue, 2)
        enqueue(server.store, queue, 2, 3)
    server.store.set_queue_rules({py: QueueRules(max_in_progress=2), rs: QueueRules(max_in_progress=2)})
    server.store.ping()
    server.dequeue("native", rs, 1, 1, dry_run=True)  # both paths connected before the log starts

    def logged(path: str, queue: str) -> list[str]:
        mariadb.query("SET GLOBAL log_output = 'TABLE'")
        mariadb.query("TRUNCATE mysql.general_log")
        mariadb.query("SET GLOBAL general_log = 1")
        try:
            assert len(server.dequeue(path, queue, 2, 5)) == 2
        finally:
            mariadb.query("SET GLOBAL general_log = 0")
        rows = mariadb.query(
            "SELECT CONVERT(argument USING utf8mb4) FROM mysql.general_log"
            " WHERE command_type = 'Query' AND user_host LIKE %s ORDER BY event_time",
            (f"{mariadb.user}[%",),
        )
        return [statement for row in rows for statement in str(row[0]).split(";\n")]

    py_log, rs_log = logged("store", py), logged("native", rs)
    assert any(s.startswith(f"INSERT INTO `plq_1_{py}`.`claim_lock`") for s in py_log)
    assert any("UNION ALL" in s for s in py_log), "the count over both priorities"
    assert rs_log == [s.replace(py, rs).replace("claim|store", "claim|native") for s in py_log]
