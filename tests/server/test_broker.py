"""The dequeue broker through real servers: buffered jobs stay PENDING to clients, refills are
shared, reservations are handed back on stop, lapse after a crash, are released after the hold,
and several servers on one Redis deliver every job exactly once."""

from __future__ import annotations

import json
import socket
import struct
import threading
import urllib.request
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from tests.conftest import ADMIN_PASSWORD, original_password_hash
from tests.server.test_contract import FAILED, IN_PROGRESS, PENDING, SUCCEEDED, Api
from tests.support.pinlater_server import ServerProcess
from tests.support.redis_server import RedisServer
from tests.support.wait import wait_for
from thriftpy2.protocol.cybin.cybin import TCyBinaryProtocol
from thriftpy2.thrift import TMessageType
from thriftpy2.transport.memory.cymemory import TCyMemoryBuffer

from pinlater.backends.base import JobState
from pinlater.backends.redis.keys import QueueKeys
from pinlater.backends.redis.keys_compact import CompactQueueKeys
from pinlater.idl import idl

Start = Callable[..., ServerProcess]
Open = Callable[[ServerProcess], Any]
RESERVED = "~r|"


def stats(server: ServerProcess) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.admin_port}/stats.txt", timeout=5) as response:
        text = response.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        name, sep, value = line.strip().partition(": ")
        if sep:
            try:
                out[name] = float(value)
            except ValueError:
                continue
    return out


def fill(api: Api, queue: str, n: int) -> list[str]:
    api.create(queue)
    return api.enqueue(queue, *[api.job(b"job-%d" % i, numAttemptsAllowed=3) for i in range(n)])


@pytest.fixture
def start_server(start_server: Start) -> Start:
    """The broker is opt-in (BROKER_ENABLED); every server of this module turns it on."""

    def start(*extra: str, properties: dict[str, Any] | None = None, **kw: Any) -> ServerProcess:
        return start_server(*extra, properties={"BROKER_ENABLED": "true", **(properties or {})}, **kw)

    return start


def test_buffered_jobs_show_as_pending_everywhere(start_server: Start, open_client: Open, ttypes: ModuleType) -> None:
    srv = start_server()
    api = Api(open_client(srv), ttypes)
    descriptors = fill(api, "buf", 20)
    [taken] = api.dequeue("buf", limit=1).jobs
    assert stats(srv)["broker_buffered_jobs"] == 19
    found = api.lookup(*descriptors)
    assert Counter(info.jobState for info in found.values()) == {PENDING: 19, IN_PROGRESS: 1}
    assert found[taken].jobState == IN_PROGRESS and not found[taken].claimDescriptor.startswith(RESERVED)
    # held jobs look like any PENDING job: no claim descriptor, in lookups and scans alike
    assert all(info.claimDescriptor is None for d, info in found.items() if d != taken)
    assert all(info.claimDescriptor is None for info in api.scan("buf", PENDING, limit=100).scannedJobs)
    assert all(info.attemptsRemaining == 3 for info in found.values())
    assert api.count("buf", PENDING) == 19
    assert len(api.scan("buf", PENDING, limit=100).scannedJobs) == 19
    # a dry run answers from the store and shows buffered jobs; it claims nothing
    assert len(api.dequeue("buf", limit=100, dryRun=True).jobs) == 19
    assert len(api.dequeue("buf", limit=100).jobs) == 19


def test_concurrent_dequeues_share_one_refill(start_server: Start, open_client: Open, ttypes: ModuleType) -> None:
    srv = start_server(properties={"BROKER_LOW_WATER_FRACTION": "0"})
    api = Api(open_client(srv), ttypes)
    fill(api, "shared", 100)
    apis = [Api(open_client(srv), ttypes, source=f"worker-{i}") for i in range(10)]
    barrier = threading.Barrier(len(apis))
    got: list[list[str]] = [[] for _ in apis]

    def work(i: int) -> None:
        barrier.wait(10)
        got[i] = list(apis[i].dequeue("shared", limit=5).jobs)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(apis))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    delivered = [d for batch in got for d in batch]
    assert len(delivered) == 50 and len(set(delivered)) == 50
    s = stats(srv)
    assert s["broker_refills"] == 1
    assert s["broker_refill_jobs"] == 100
    assert s["dequeue_store_calls"] <= 3  # one walk: one call per priority
    assert s["broker_buffered_jobs"] == 50


def test_hand_outs_come_from_memory_and_acks_never_race_their_claims(
    start_server: Start, open_client: Open, ttypes: ModuleType
) -> None:
    srv = start_server(properties={"BROKER_LOW_WATER_FRACTION": "0"})  # no background refills
    api = Api(open_client(srv), ttypes)
    descriptors = fill(api, "fast", 60)
    api.dequeue("fast", limit=1)  # fills the buffer: one refill
    assert api.count("fast", IN_PROGRESS) == 1  # a count waits for the queue's claims
    before = stats(srv)
    acked: list[str] = []
    for _ in range(20):  # each ack follows its dequeue at once, on the same connection
        jobs = list(api.dequeue("fast", limit=2).jobs)
        api.ack("fast", ok=jobs)
        acked += jobs
    after = stats(srv)
    assert after["broker_refills"] == before["broker_refills"], "served from the buffer, no refill"
    assert after["broker_claimed"] - before["broker_claimed"] == 40, "every hand-out claimed"
    assert after.get("broker_lapsed", 0) == 0
    found = api.lookup(*acked)
    assert len(found) == 40 and {info.jobState for info in found.values()} == {SUCCEEDED}
    assert api.count("fast", SUCCEEDED) == 40
    assert api.count("fast", PENDING) + api.count("fast", IN_PROGRESS) == len(descriptors) - 40


def test_each_worker_gets_its_own_claim(start_server: Start, open_client: Open, ttypes: ModuleType) -> None:
    srv = start_server()
    api = Api(open_client(srv), ttypes)
    fill(api, "mine", 10)
    workers = [Api(open_client(srv), ttypes, source=f"worker-{k}") for k in range(3)]
    taken = [next(iter(w.dequeue("mine", limit=1).jobs)) for w in workers]
    found = api.lookup(*taken)
    for k, descriptor in enumerate(taken):
        assert found[descriptor].jobState == IN_PROGRESS
        assert found[descriptor].claimDescriptor.startswith(f"worker-{k}|")
    # the checkpoint guard: only the worker that holds the job may move it
    t = ttypes
    other = t.PinLaterCheckpointJobsRequest(
        queueName="mine", requests=[t.PinLaterCheckpointJobRequest(jobDescriptor=taken[0], moveToPending=True)]
    )
    workers[1].c.checkpointJobs(workers[1].ctx, other)
    assert api.lookup(taken[0])[taken[0]].jobState == IN_PROGRESS
    workers[0].c.checkpointJobs(workers[0].ctx, other)
    assert api.lookup(taken[0])[taken[0]].jobState == PENDING


def test_graceful_stop_releases_reservations_at_once(
    start_server: Start, open_client: Open, ttypes: ModuleType
) -> None:
    props = {"BROKER_HOLD_SECONDS": "60"}
    srv = start_server(properties=props)
    api = Api(open_client(srv), ttypes)
    descriptors = fill(api, "bye", 10)
    [taken] = api.dequeue("bye", limit=1).jobs
    rest = [d for d in descriptors if d != taken]
    assert stats(srv)["broker_buffered_jobs"] == len(rest)
    assert srv.terminate() == 0

    srv2 = start_server(properties=props)
    api2 = Api(open_client(srv2), ttypes)
    found = api2.lookup(*rest)
    assert all(info.jobState == PENDING and info.claimDescriptor is None for info in found.values())
    response = api2.dequeue("bye", limit=20)  # a 60 s hold would block them, had they not been released
    assert sorted(response.jobs) == sorted(rest)
    assert all(m.attemptsRemaining == 3 for m in response.jobMetadata.values())


def test_a_killed_servers_reservations_lapse_and_nothing_is_charged(
    start_server: Start, open_client: Open, ttypes: ModuleType
) -> None:
    props = {"BROKER_HOLD_SECONDS": "1"}
    srv = start_server(properties=props)
    api = Api(open_client(srv), ttypes)
    descriptors = fill(api, "crash", 10)
    [taken] = api.dequeue("crash", limit=1).jobs
    # Its claim is written behind the response; a lookup on the same server waits for it. (Had
    # the server died before writing it, the job would be delivered again: at least once.)
    assert api.lookup(taken)[taken].jobState == IN_PROGRESS
    srv.kill()

    srv2 = start_server(properties=props)
    api2 = Api(open_client(srv2), ttypes)
    rest = {d for d in descriptors if d != taken}
    assert {info.jobState for info in api2.lookup(*rest).values()} == {PENDING}
    got: dict[str, Any] = {}

    def step() -> bool:
        response = api2.dequeue("crash", limit=20)
        got.update(response.jobMetadata)
        return len(got) >= len(rest)

    wait_for(step, 15, interval=0.1, what="the lapsed reservations to be dequeued")
    assert set(got) == rest
    assert all(m.attemptsRemaining == 3 for m in got.values())


def test_entries_older_than_the_hold_bound_are_released(
    start_server: Start, open_client: Open, ttypes: ModuleType
) -> None:
    srv = start_server(properties={"BROKER_HOLD_SECONDS": "0.5"})
    api = Api(open_client(srv), ttypes)
    descriptors = fill(api, "old", 10)
    [taken] = api.dequeue("old", limit=1).jobs
    rest = [d for d in descriptors if d != taken]
    wait_for(lambda: stats(srv).get("broker_released", 0) >= 9, 10, what="the old entries to be released")
    assert stats(srv)["broker_buffered_jobs"] == 0
    found = api.lookup(*rest)
    assert all(info.jobState == PENDING and info.claimDescriptor is None for info in found.values())
    assert sorted(api.dequeue("old", limit=20).jobs) == sorted(rest)
    assert stats(srv).get("broker_lapsed", 0) == 0


def redis_config(redis: RedisServer, tmp_path: Path, layout: str) -> str:
    config = tmp_path / "redis.json"
    shard = {"name": "1", "shardConfig": {"master": {"host": redis.host, "port": redis.port}}, "layout": layout}
    config.write_text(json.dumps({"shards": [shard]}))
    return str(config)


@pytest.mark.redis
@pytest.mark.parametrize("layout", ["original", "compact"])
def test_a_killed_servers_holds_on_redis_come_back_to_a_server_without_the_broker(
    start_server: Start, open_client: Open, ttypes: ModuleType, tmp_path: Path, layout: str
) -> None:
    keys = QueueKeys("1", "crash") if layout == "original" else CompactQueueKeys("1", "crash")
    with RedisServer(tmp_path / "redis") as redis:
        backend = ("--backend", "redis", "--backend-config", redis_config(redis, tmp_path, layout))
        srv = start_server(*backend, properties={"BROKER_HOLD_SECONDS": "1"})
        api = Api(open_client(srv), ttypes)
        descriptors = fill(api, "crash", 10)
        [taken] = api.dequeue("crash", limit=1).jobs
        rest = {d for d in descriptors if d != taken}
        assert {info.jobState for info in api.lookup(*rest).values()} == {PENDING}  # held, shown PENDING
        # the lookup waits for the hand-out's claim to be written (killed before that, the taken
        # job's hold would lapse too and it would come back as the eleventh PENDING job)
        assert api.lookup(taken)[taken].jobState == IN_PROGRESS
        srv.kill()

        # A server that never reserves: its monitor puts the lapsed holds back in PENDING ...
        props = {"BROKER_ENABLED": "false", "BACKEND_MONITOR_THREAD_DELAY_SECONDS": "0.2"}
        srv2 = start_server(*backend, properties=props)
        api2 = Api(open_client(srv2), ttypes)
        assert api2.count("crash", PENDING) == len(rest)
        raw = redis.client()
        wait_for(lambda: raw.zcard(keys.set_key(1, JobState.PENDING)) == len(rest), 15, what="the monitor's sweep")
        assert not raw.exists(*keys.hold_keys(1))
        # ... and its dequeues take them, no attempt charged
        got: dict[str, Any] = {}

        def step() -> bool:
            got.update(api2.dequeue("crash", limit=20).jobMetadata)
            return len(got) >= len(rest)

        wait_for(step, 15, interval=0.1, what="the lapsed holds to be dequeued")
        assert set(got) == rest
        assert all(m.attemptsRemaining == 3 for m in got.values())


@pytest.mark.redis
@pytest.mark.parametrize("layout", ["original", "compact"])
def test_three_servers_on_one_redis_deliver_every_job_exactly_once(
    start_server: Start, open_client: Open, ttypes: ModuleType, tmp_path: Path, layout: str
) -> None:
    with RedisServer(tmp_path / "redis") as redis:
        config = redis_config(redis, tmp_path, layout)
        props = {"BROKER_BUFFER_SIZE": "40", "BROKER_HOLD_SECONDS": "5"}
        servers = [start_server("--backend", "redis", "--backend-config", config, properties=props) for _ in range(3)]
        api = Api(open_client(servers[0]), ttypes)
        api.create("many")
        enqueued: list[str] = []
        for batch in range(6):
            enqueued += api.enqueue("many", *[api.job(b"%d-%d" % (batch, i)) for i in range(100)])
        delivered: list[list[str]] = [[] for _ in servers]
        done = threading.Event()
        errors: list[BaseException] = []

        def consume(k: int, server: ServerProcess) -> None:
            worker = Api(open_client(server), ttypes, source=f"consumer-{k}")
            try:
                while not done.is_set():
                    jobs = list(worker.dequeue("many", limit=7, waitMillis=200).jobs)
                    delivered[k] += jobs
                    if jobs:
                        worker.ack("many", ok=jobs)
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=consume, args=(k, s)) for k, s in enumerate(servers) for _ in range(2)]
        for t in threads:
            t.start()
        try:
            wait_for(lambda: sum(map(len, delivered)) >= len(enqueued), 60, what="every job delivered")
        finally:
            done.set()
            for t in threads:
                t.join(30)
        assert not errors, errors
        counts = Counter(d for batch in delivered for d in batch)
        assert set(counts) == set(enqueued)
        assert max(counts.values()) == 1, [d for d, n in counts.items() if n > 1][:5]
        assert sum(1 for batch in delivered if batch) >= 2, "more than one server handed out jobs"
        assert {info.jobState for info in api.lookup(*enqueued).values()} == {SUCCEEDED}


@pytest.mark.redis
@pytest.mark.parametrize("layout", ["original", "compact"])
def test_an_ack_through_another_server_finds_its_hand_outs_claim_written(
    start_server: Start, open_client: Open, ttypes: ModuleType, tmp_path: Path, layout: str
) -> None:
    """A client that spreads its calls over servers (as ``PinLaterClient`` given several does)
    acks through a server other than the one that handed the jobs out. The hand-out's claims
    were written behind its reply: such an ack often came first, found the jobs still PENDING
    and changed nothing, though answered OK (6% of the batches of a probe), and the jobs ran
    again at their claim timeout. The reply now goes out once its claims are written."""
    with RedisServer(tmp_path / "redis") as redis:
        config = redis_config(redis, tmp_path, layout)
        props = {"BROKER_LOW_WATER_FRACTION": "0"}  # no background refills: hand-outs from memory
        giver, acker = (start_server("--backend", "redis", "--backend-config", config, properties=props) for _ in "ab")
        worker, other = Api(open_client(giver), ttypes), Api(open_client(acker), ttypes)
        descriptors = fill(worker, "spread", 300)
        acked: list[str] = []
        for _ in range(60):
            jobs = list(worker.dequeue("spread", limit=5).jobs)
            other.ack("spread", ok=jobs)
            found = other.lookup(*jobs)
            assert {d: info.jobState for d, info in found.items()} == dict.fromkeys(jobs, SUCCEEDED)
            acked += jobs
        assert len(set(acked)) == len(acked) == 300 == len(descriptors)
        assert stats(giver)["broker_refills"] <= 3, "served from the buffer"
        assert other.count("spread", SUCCEEDED) == 300


def _exchange(port: int, message: bytes) -> bytes:
    """One framed message to the server and its framed reply, over a plain socket."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(struct.pack(">i", len(message)) + message)
        reader = sock.makefile("rb")
        (size,) = struct.unpack(">i", reader.read(4))
        reply: bytes = reader.read(size)
        assert len(reply) == size
        return reply


def test_a_broker_hand_out_is_the_reply_thriftpy2_writes_for_its_jobs(
    start_server: Start, open_client: Open, ttypes: ModuleType
) -> None:
    """The reply of a broker dequeue, written by the extension from the buffered jobs, has the
    direct dequeue's shape byte for byte: every descriptor with its body and attempts, priority 1
    first, as thriftpy2 writes the same response."""
    srv = start_server(properties={"EMBEDDED_NUM_SHARDS": "3", "BROKER_LOW_WATER_FRACTION": "0"})
    api = Api(open_client(srv), ttypes)
    api.create("shape")
    expected: dict[str, tuple[bytes, int, int]] = {}  # descriptor -> body, priority, attempts
    # one shard per enqueue, picked at random: enqueue until the jobs are on two shards at least
    # (six enqueues at least, 20 at most: the dequeue's limit of 100 jobs; all 20 on one shard of
    # 3 would take odds of 3 ** -19), so that the hand-out mixes shards
    for r in range(20):
        jobs = [(b"\x00\xff%d-%d" % (r, i) * (i % 3), 1 + (r + i) % 2, 1 + i % 4) for i in range(5)]
        made = api.enqueue("shape", *[api.job(b, priority=p, numAttemptsAllowed=a) for b, p, a in jobs])
        expected.update(zip(made, jobs, strict=True))
        if r >= 5 and len({d.split(":")[1] for d in expected}) > 1:
            break
    assert len({d.split(":")[1] for d in expected}) > 1, "jobs on several shards"
    call = idl.PinLater.dequeueJobs_args(
        context=idl.RequestContext(source="shape-test", requestId="r"),
        request=idl.PinLaterDequeueRequest(queueName="shape", limit=100),
    )
    buf = TCyMemoryBuffer()
    proto = TCyBinaryProtocol(buf)
    proto.write_message_begin("dequeueJobs", TMessageType.CALL, 77)
    proto.write_struct(call)
    reply = _exchange(srv.port, buf.getvalue())
    assert stats(srv)["broker_handed_out"] == len(expected), "served by the broker"

    reader = TCyBinaryProtocol(TCyMemoryBuffer(reply))
    assert reader.read_message_begin() == ("dequeueJobs", TMessageType.REPLY, 77)
    result = idl.PinLater.dequeueJobs_result()
    reader.read_struct(result)
    response = result.success
    assert set(response.jobs) == set(expected)
    assert list(response.jobMetadata) == list(response.jobs), "both maps in one order"
    for descriptor, body in response.jobs.items():
        want_body, priority, attempts = expected[descriptor]
        assert body == want_body and descriptor.split(":")[2] == f"p{priority}"
        meta = response.jobMetadata[descriptor]
        assert (meta.attemptsAllowed, meta.attemptsRemaining) == (attempts, attempts)
    priorities = [d.split(":")[2] for d in response.jobs]
    assert priorities == sorted(priorities), "priority 1 first"
    out = TCyMemoryBuffer()
    writer = TCyBinaryProtocol(out)
    writer.write_message_begin("dequeueJobs", TMessageType.REPLY, 77)
    writer.write_struct(idl.PinLater.dequeueJobs_result(success=response))
    assert reply == out.getvalue()
    assert api.count("shape", IN_PROGRESS) == len(expected)


def test_a_cancel_that_names_no_job_here_leaves_the_buffer(
    start_server: Start, open_client: Open, ttypes: ModuleType
) -> None:
    """A cancel dropped the queue's buffer (releasing its reservations, the next dequeue waiting
    for a refill) before anything was checked: a descriptor of another queue or of a shard not in
    the map, sent over and over, kept the buffer from ever serving a worker."""
    srv = start_server(properties={"BROKER_LOW_WATER_FRACTION": "0"})  # no background refills
    api = Api(open_client(srv), ttypes)
    fill(api, "kept", 20)
    api.dequeue("kept", limit=1)  # fills the buffer: one refill
    before = stats(srv)
    other = ttypes.PinLaterCancelJobsRequest(queueName="kept", jobDescriptors=["other:s1:p1:1"])
    unknown_shard = ttypes.PinLaterCancelJobsRequest(queueName="kept", jobDescriptors=["kept:snope:p1:1"])
    for _ in range(5):
        with pytest.raises(ttypes.PinLaterException, match="is a job of queue 'other'"):
            api.c.cancelJobs(api.ctx, other)
        assert api.c.cancelJobs(api.ctx, unknown_shard) == 0
    assert len(api.dequeue("kept", limit=5).jobs) == 5
    after = stats(srv)
    assert after["broker_refills"] == before["broker_refills"], "served from the buffer it kept"


def test_a_cancel_takes_only_its_jobs_out_of_the_buffer(
    start_server: Start, open_client: Open, ttypes: ModuleType
) -> None:
    """A cancel takes the jobs it names out of this server's buffer (releasing their
    reservations) and leaves the others buffered: no dequeue hands a cancelled job out, and the
    rest are served from memory without a refill. (It dropped the whole buffer, so a peer
    cancelling one job, or none, over and over made every dequeue refill from the store.)"""
    srv = start_server(properties={"BROKER_LOW_WATER_FRACTION": "0"})  # no background refills
    api = Api(open_client(srv), ttypes)
    descriptors = fill(api, "kept", 20)
    first = api.dequeue("kept", limit=1).jobs  # fills the buffer: one refill
    before = stats(srv)
    buffered = [d for d in descriptors if d not in first]
    cancelled = buffered[3:6]
    shard = cancelled[0].split(":")[1]
    unknown = f"kept:{shard}:p1:999999"  # a job no shard holds, on a shard of the map
    for _ in range(3):
        nothing = ttypes.PinLaterCancelJobsRequest(queueName="kept", jobDescriptors=[unknown])
        assert api.c.cancelJobs(api.ctx, nothing) == 0
    request = ttypes.PinLaterCancelJobsRequest(queueName="kept", jobDescriptors=cancelled)
    assert api.c.cancelJobs(api.ctx, request) == len(cancelled)
    left = set(buffered) - set(cancelled)
    served = set(api.dequeue("kept", limit=len(left) - 1).jobs)  # (one kept: an empty buffer refills)
    after = stats(srv)
    assert after["broker_refills"] == before["broker_refills"], "served from the buffer it kept"
    served |= set(api.dequeue("kept", limit=5).jobs)
    assert served == left, "each buffered job but the cancelled ones"
    # taken out of the buffer, not handed out and withheld once their claims found them FAILED
    assert stats(srv).get("broker_withheld", 0) == before.get("broker_withheld", 0)
    assert api.count("kept", FAILED) == len(cancelled)


def test_jobs_deleted_in_the_store_are_not_handed_out_from_the_buffer(
    start_server: Start, open_client: Open, ttypes: ModuleType
) -> None:
    """The broker's jobs are PENDING in the store: a deleteJobs of PENDING jobs, or a deleteQueue,
    deleted them there while the buffer still handed them out (their claims found nothing, and
    the workers ran deleted jobs). A delete of other states, or of none, leaves the buffer alone."""
    srv = start_server(
        properties={"BROKER_LOW_WATER_FRACTION": "0", "ADMIN_PASSWORD_HASH": original_password_hash(ADMIN_PASSWORD)}
    )
    api = Api(open_client(srv), ttypes)
    fill(api, "gone", 10)
    assert len(api.dequeue("gone", limit=1).jobs) == 1  # the other 9 in the buffer
    before = stats(srv)
    failed = ttypes.PinLaterDeleteJobsRequest(queueName="gone", jobState=FAILED)
    assert api.c.deleteJobs(api.ctx, failed) == 0
    assert stats(srv).get("broker_released", 0) == before.get("broker_released", 0), "FAILED: buffer kept"
    matching_none = ttypes.PinLaterDeleteJobsRequest(queueName="gone", jobState=PENDING, bodyRegexToMatch="^nothing$")
    assert api.c.deleteJobs(api.ctx, matching_none) == 0
    assert stats(srv).get("broker_released", 0) == before.get("broker_released", 0), "none deleted: buffer kept"
    pending = ttypes.PinLaterDeleteJobsRequest(queueName="gone", jobState=PENDING)
    assert api.c.deleteJobs(api.ctx, pending) == 9
    assert len(api.dequeue("gone", limit=10).jobs) == 0, "none handed out after its delete"
    assert api.count("gone", PENDING) == 0

    fill(api, "dropped", 10)
    assert len(api.dequeue("dropped", limit=1).jobs) == 1
    api.c.deleteQueue(api.ctx, "dropped", ADMIN_PASSWORD)
    api.create("dropped")
    assert len(api.dequeue("dropped", limit=10).jobs) == 0, "none of the deleted queue's"
