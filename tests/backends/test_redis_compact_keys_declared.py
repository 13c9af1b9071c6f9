"""Every key a compact script touches is one of the KEYS its caller passed (the ready lists
included), through both callers: the store's Python calls and the hot path's Rust-packed ones.

A Redis Cluster migrating a queue's slot decides where a script runs from its declared keys
only (ASK, TRYAGAIN): a key a script touches without declaring it may already be on the other
node, and the script would then see it empty. A slot migration test only catches that by luck,
so this one watches a standalone Redis with MONITOR while the store runs every compact script:
each command a script runs (MONITOR's ``[0 lua]`` lines, between its EVALSHA and the next
client command) must name only keys of that EVALSHA's KEYS, by the key positions Redis gives
for the command (``COMMAND``).
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import threading
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

import pytest
from tests.support.redis_server import RedisServer

from pinlater._pinlater import AckGroup, NewJobBatch
from pinlater.backends.base import (
    AckItem,
    CheckpointItem,
    JobFilter,
    JobState,
    KeyedJob,
    NewJob,
    QueueRules,
    ScanCursor,
    ScheduleRow,
)
from pinlater.backends.redis import RedisEndpoint, RedisShardConfig, RedisStore
from pinlater.backends.redis import scripts as script_sources

pytestmark = pytest.mark.redis

T0 = 1_700_000_000_000
STOP = b"keys-declared-stop"
_ARG = re.compile(rb'"((?:[^"\\]|\\.)*)"')
_LINE = re.compile(rb"^\d+\.\d+ \[\d+ ([^\]]*)\] (.*)$", re.DOTALL)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    with RedisServer(tmp_path / "redis") as srv:
        yield srv


def compact_script_names() -> dict[str, str]:
    """The SHA1 of each compact script's text (as loaded) -> its name."""
    folder = resources.files("pinlater.backends.redis").joinpath("lua_compact")
    names = [p.name.removesuffix(".lua") for p in folder.iterdir() if p.name.endswith(".lua")]
    return {hashlib.sha1(script_sources.source(n, "compact").encode()).hexdigest(): n for n in names}


def run_every_script(store: RedisStore) -> None:
    """Each compact script, most of them on jobs in the ready lists (run after == now)."""
    q = "q"
    store.create_queue(q, 3)
    now = T0
    jobs = [NewJob(1 + i % 3, b"job-%d" % i, now, 2) for i in range(12)]
    jobs += [NewJob(1, b"later", now + 60_000, 2), NewJob(2, b"past", now - 5, 2)]
    ids = store.enqueue_jobs(q, jobs, now)
    store.enqueue_jobs(q, [NewJob(1, b"job-next", now + 10, 1)], now + 10)  # a second marker
    keyed = [KeyedJob(NewJob(1 + i % 3, b"keyed", now + 10, 1), f"key:{i}_x", 5 * i) for i in range(4)]
    ids += [e.local_id for e in store.enqueue_keyed_jobs(q, keyed, now + 10)]
    store.enqueue_keyed_jobs(q, keyed, now + 15)  # every key held: answered by its holder

    async def native() -> None:
        hot = store.native
        await hot.enqueue_jobs(q, NewJobBatch([NewJob(p, b"native", now + 20, 3) for p in (1, 2, 3)]), now + 20)
        claimed = await hot.dequeue_jobs(q, 3, 2, "native-claim", now + 30, False)
        await hot.dequeue_jobs(q, 3, 1, "", now + 30, True)
        await hot.dequeue_jobs(q, 3, 0, "", now + 30, False)  # only whether the queue exists
        await hot.ack_jobs(q, AckGroup([AckItem(3, j[0]) for j in claimed.to_list()], []), now + 40)
        await hot.reserve_jobs(q, 3, 1, "native-reservation", now + 40, 60_000)
        await hot.aclose()

    asyncio.run(native())
    for future in (False, True, None):
        for priority in (1, 2, 3):
            where = JobFilter(JobState.PENDING, priority, now + 50, future)
            store.count_jobs(q, where, None)
            store.scan_jobs(q, where, 100)
    store.count_jobs(q, JobFilter(JobState.PENDING, 1, now + 50, False, body_regex="job-[0-9]"), None)
    store.scan_jobs(q, JobFilter(JobState.PENDING, 1, now + 50, None, body_regex="job"), 100)
    store.lookup_jobs(q, [(1 + i % 3, local_id) for i, local_id in enumerate(ids)], True)
    store.queue_counts(3, now + 50)
    # deletes: in place in a list (a tombstone), by regex and by range
    store.delete_jobs(q, JobFilter(JobState.PENDING, 2, now + 50, None, body_regex="^job-4$"), 10)
    store.delete_jobs(q, JobFilter(JobState.PENDING, 3, now + 50, None), 1)
    claimed = store.dequeue_jobs(q, 2, 3, "claim", now + 60, False)  # meets the tombstone
    store.dequeue_jobs(q, 1, 2, "", now + 60, True)
    held = store.reserve_jobs(q, 1, 3, "reservation", now + 70, 60_000)
    store.claim_reserved(q, [(1, held[0].local_id, "claim")], "reservation", now + 80)
    store.release_reservations(q, [(1, j.local_id) for j in held[1:]], "reservation", now + 80)
    store.ack_jobs(q, [AckItem(2, claimed[0].local_id)], [AckItem(2, claimed[1].local_id, "x", 10)], now + 90)
    store.ack_jobs(q, [], [AckItem(1, held[0].local_id, "fail", 0)], now + 90)
    back = CheckpointItem(2, claimed[2].local_id, now + 100, move_to_pending=True)
    store.checkpoint_jobs(q, [back], "claim", now + 95)
    store.resurrect_timed_out_jobs(q, 3, now + 10**6, 100, now + 100)
    store.retry_failed_jobs(q, 1, 2, now + 110, 100, now + 110)
    store.gc_finished_jobs(q, 2, JobState.SUCCEEDED, now + 10**6, 100)
    store.dequeue_jobs(q, 1, 100, "drain", now + 10**6, False)
    store.gc_dedup_keys(q, now + 10**6, 100)
    run_expiry_scripts(store, q, now + 10**6)
    run_group_scripts(store, q, now + 2 * 10**6)
    run_job_control_scripts(store, q, now + 3 * 10**6)
    store.get_queue_names()
    assert store.monitor_idle([q, "q_none"], 3) == {"q_none"}
    store.delete_queue(q)


def run_expiry_scripts(store: RedisStore, q: str, now: int) -> None:
    """Cancel and expiry (test_redis_job_control.py): jobs with an expiry met by every script."""
    expiring = [KeyedJob(NewJob(1 + i % 3, b"x", now, 3), None, 0, None, now + 10 + i) for i in range(9)]
    ids = [(e.priority, e.local_id) for e in store.enqueue_keyed_jobs(q, expiring, now)]
    store.lookup_jobs(q, ids, False)
    claimed = store.dequeue_jobs(q, 1, 1, "claim", now, False)
    store.cancel_jobs(q, [*ids[3:5], (1, claimed[0].local_id)], now)
    store.ack_jobs(q, [], [AckItem(1, claimed[0].local_id, "x", 0)], now + 1)
    store.dequeue_jobs(q, 2, 5, "claim", now + 20, False)  # meets expired jobs
    store.reserve_jobs(q, 3, 5, "reservation", now + 20, 1000)
    store.expire_jobs(q, now + 30, 100)
    store.expired_counts()


def run_group_scripts(store: RedisStore, q: str, now: int) -> None:
    """The scripts again on jobs of ordered groups, with every rule set (test_redis_groups.py)."""
    store.set_queue_rules({q: QueueRules(group_concurrency=1, max_in_progress=50, group_jobs_per_second=1.0)})
    grouped = [KeyedJob(NewJob(1 + i % 3, b"g", now, 2), f"gk{i}" if i % 2 else None, 0, f"g{i % 2}") for i in range(6)]
    ids = [(e.priority, e.local_id) for e in store.enqueue_keyed_jobs(q, grouped, now)]
    store.lookup_jobs(q, ids, False)
    for priority in (1, 2, 3):
        store.scan_jobs(q, JobFilter(JobState.PENDING, priority, now, None), 100)
        store.count_jobs(q, JobFilter(JobState.PENDING, priority, now, None), None)
    store.queue_counts(3, now)
    claimed = store.dequeue_jobs(q, 1, 10, "claim", now, False)
    store.ack_jobs(q, [AckItem(1, j.local_id) for j in claimed], [], now)

    async def native() -> None:
        hot = store.native
        got = await hot.dequeue_jobs(q, 2, 10, "native-claim", now + 1000, False)
        await hot.ack_jobs(q, AckGroup([], [AckItem(2, j[0], "", 0) for j in got.to_list()]), now + 1000)
        await hot.reserve_jobs(q, 3, 1, "native-reservation", now + 2000, 60_000)
        await hot.aclose()

    asyncio.run(native())
    held = store.reserve_jobs(q, 2, 3, "reservation", now + 3000, 60_000)
    store.claim_reserved(q, [(2, j.local_id, "claim") for j in held], "reservation", now + 3000)
    store.resurrect_timed_out_jobs(q, 2, now + 10**6, 100, now + 10**6)
    store.retry_failed_jobs(q, 2, 2, now + 10**6, 100, now + 10**6)
    store.delete_jobs(q, JobFilter(JobState.PENDING, 3, now, None), 1)
    store.delete_jobs(q, JobFilter(JobState.PENDING, 1, now, None, body_regex="g"), 10)
    store.group_counts(q)
    # groups with expiries: a cancel of an active and a waiting job, expiries met and swept
    later = now + 2 * 10**6
    expiring = [KeyedJob(NewJob(1 + i % 3, b"gx", later, 2), None, 0, f"x{i % 2}", later + 10) for i in range(6)]
    ids = [(e.priority, e.local_id) for e in store.enqueue_keyed_jobs(q, expiring, later)]
    store.cancel_jobs(q, ids[:1] + ids[-1:], later)
    store.dequeue_jobs(q, 2, 5, "claim", later + 20, False)
    store.expire_jobs(q, later + 20, 100)


def run_job_control_scripts(store: RedisStore, q: str, now: int) -> None:
    """Paged scans from a point, the oldest ready jobs and the schedules' scripts (their keys are
    the names set's slot, not the queue's)."""
    ids = store.enqueue_jobs(q, [NewJob(1, b"p", now, 1) for _ in range(5)], now)
    store.scan_jobs(q, JobFilter(JobState.PENDING, 1, now, None), 2, ScanCursor(now, ids[-1]))
    store.oldest_ready(3, now)
    store.put_schedule(ScheduleRow(q, "s", "spec", now))
    store.list_schedules(q)
    store.due_schedules(now, 10)
    store.advance_schedule(q, "s", now, now + 60_000)
    store.delete_schedule(q, "s")
    store.put_schedule(ScheduleRow(q, "t", "spec", now))  # dropped by delete_queue


def test_compact_scripts_touch_only_the_keys_they_are_passed(server: RedisServer) -> None:
    watcher = server.client()
    key_positions = {
        name.lower(): (int(c["first_key_pos"]), int(c["last_key_pos"]), int(c["step_count"]))
        for name, c in watcher.command().items()
    }
    lines: list[bytes] = []
    monitor = watcher.monitor()
    connection = monitor.__enter__()

    def watch() -> None:
        while True:
            line = connection.connection.read_response()
            lines.append(line)
            if STOP in line:
                return

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    store = RedisStore("k", RedisShardConfig(RedisEndpoint(server.host, server.port), layout="compact"))
    try:
        run_every_script(store)
    finally:
        store.close()
        with server.client() as client:
            client.echo(STOP)
        thread.join(10)
        monitor.__exit__(None, None, None)
        watcher.close()
    assert not thread.is_alive()

    names = compact_script_names()
    ran: set[str] = set()
    undeclared: set[tuple[str, str, bytes]] = set()
    declared: set[bytes] | None = None
    script = ""
    for line in lines:
        match = _LINE.match(line)
        assert match, line[:200]
        source, args = match.group(1), _ARG.findall(match.group(2))
        command = args[0].decode().lower()
        if source != b"lua":
            declared = None
            if command == "evalsha":
                script = names.get(args[1].decode(), args[1].decode())
                ran.add(script)
                declared = set(args[3 : 3 + int(args[2])])
            continue
        assert declared is not None, f"a script command outside a script: {line[:200]!r}"
        first, last, step = key_positions[command]
        if first <= 0:
            continue
        last = len(args) + last if last < 0 else last  # -1: up to the last argument
        for key in args[first : last + 1 : step]:
            if key not in declared:
                undeclared.add((script, command, key))
    assert not undeclared, sorted(undeclared)
    assert ran >= set(names.values()) - {"get_queue_names"}, sorted(set(names.values()) - ran)
