"""Dedup keys (``PinLaterJob.dedupKey``, ``dedupWindowMillis``) through a real ``pinlater serve``
and a client generated from the IDL by Apache Thrift's compiler."""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
from tests.server.test_contract import PENDING, SUCCEEDED, Api
from tests.support.pinlater_server import ServerProcess

Q = "dedup_q"


@pytest.fixture
def api(client: Any, ttypes: ModuleType) -> Api:
    api = Api(client, ttypes)
    api.create(Q)
    return api


def enqueue(api: Api, *jobs: Any) -> tuple[list[str], list[bool] | None]:
    response = api.c.enqueueJobs(api.ctx, api.t.PinLaterEnqueueRequest(queueName=Q, jobs=list(jobs)))
    flags = response.deduplicated
    return list(response.jobDescriptors), None if flags is None else list(flags)


def test_a_held_key_answers_the_live_job_and_makes_none(api: Api) -> None:
    (first,), flags = enqueue(api, api.job(b"one", dedupKey="order-1"))
    assert flags is None  # nothing was deduplicated: the field is left out
    (again,), flags = enqueue(api, api.job(b"two", dedupKey="order-1", priority=2))
    assert again == first and flags == [True]
    assert api.count(Q, PENDING) == 1
    info = api.lookup(first, body=True)[first]
    assert info.body == b"one" and info.dedupKey == "order-1" and info.groupKey is None


def test_repeats_in_one_request_and_plain_jobs_beside_them(api: Api) -> None:
    descriptors, flags = enqueue(
        api,
        api.job(b"a", dedupKey="k"),
        api.job(b"plain"),
        api.job(b"b", dedupKey="k"),
        api.job(b"c", dedupKey="other"),
    )
    assert flags == [False, False, True, False]
    assert descriptors[2] == descriptors[0]
    assert len(set(descriptors)) == 3
    assert api.count(Q, PENDING) == 3
    scanned = {j.jobDescriptor: j.dedupKey for j in api.scan(Q, PENDING).scannedJobs}
    assert scanned == {descriptors[0]: "k", descriptors[1]: None, descriptors[3]: "other"}


def test_a_finished_job_frees_its_key_unless_its_window_holds_it(api: Api) -> None:
    (plain,), _ = enqueue(api, api.job(b"x", dedupKey="free-after"))
    (windowed,), _ = enqueue(api, api.job(b"y", dedupKey="held", dedupWindowMillis=600_000))
    dequeued = api.dequeue(Q, 10).jobs
    assert set(dequeued) == {plain, windowed}
    (again,), flags = enqueue(api, api.job(b"x2", dedupKey="free-after"))
    assert flags == [True] and again == plain  # IN_PROGRESS still holds
    api.ack(Q, ok=[plain, windowed])
    finished = api.lookup(plain, windowed)
    assert {d: (info.jobState, info.dedupKey) for d, info in finished.items()} == {
        plain: (SUCCEEDED, "free-after"),
        windowed: (SUCCEEDED, "held"),
    }, "a finished job still shows its key"
    descriptors, flags = enqueue(api, api.job(b"x3", dedupKey="free-after"), api.job(b"y2", dedupKey="held"))
    assert flags == [False, True]
    assert descriptors[0] != plain and descriptors[1] == windowed


def test_keys_spread_over_shards_and_each_stays_on_its_own(
    start_server: Callable[..., ServerProcess], open_client: Callable[[ServerProcess], Any], ttypes: ModuleType
) -> None:
    server = start_server(properties={"EMBEDDED_NUM_SHARDS": 3})
    api = Api(open_client(server), ttypes)
    api.create(Q)
    jobs = [api.job(f"j{i}".encode(), dedupKey=f"key-{i}") for i in range(60)]
    first, flags = enqueue(api, *jobs)
    assert flags is None
    shards = {d.split(":")[1] for d in first}
    assert shards == {"s1", "s2", "s3"}, "60 keys hash to every one of 3 shards"
    for _ in range(2):  # again, in another order: every key is found on its shard
        again, flags = enqueue(api, *reversed(jobs))
        assert again == list(reversed(first)) and flags == [True] * 60
    assert api.count(Q, PENDING) == 60


def test_a_request_spread_over_shards_answers_each_job_with_its_own_shard(
    start_server: Callable[..., ServerProcess], open_client: Callable[[ServerProcess], Any], ttypes: ModuleType
) -> None:
    """Keys, groups, repeats and plain jobs in one request over three shards: each job with a
    key or group on its key's shard (``key_shard``, the hash every server uses), a repeat
    answered with its first job's descriptor, and each job readable where its descriptor says."""
    from pinlater.backends.sharded import key_shard

    server = start_server(properties={"EMBEDDED_NUM_SHARDS": 3})
    api = Api(open_client(server), ttypes)
    api.create(Q)
    jobs = [api.job(f"k{i}".encode(), dedupKey=f"key-{i}") for i in range(12)]
    jobs += [api.job(f"g{i}".encode(), groupKey=f"group-{i % 4}") for i in range(8)]
    jobs += [
        api.job(b"plain"),
        api.job(b"again", dedupKey="key-3", groupKey="group-1"),
        api.job(b"plain 2", priority=2),
    ]
    descriptors, flags = enqueue(api, *jobs)
    assert flags == [False] * 21 + [True, False]
    assert descriptors[21] == descriptors[3]
    assert len(set(descriptors)) == 22

    shards: Any = [SimpleNamespace(name=n) for n in ("1", "2", "3")]  # key_shard reads only names
    want = [key_shard(Q, f"key-{i}", shards).name for i in range(12)]
    want += [key_shard(Q, f"group-{i % 4}", shards, space="group").name for i in range(8)]
    assert [d.split(":")[1] for d in descriptors[:20]] == [f"s{n}" for n in want]
    assert len({d.split(":")[1] for d in descriptors[:20]}) == 3
    assert [d.split(":")[2] for d in descriptors[20:]] == ["p1", "p1", "p2"]
    found = api.lookup(*descriptors, body=True)
    assert [found[d].body for d in descriptors] == [j.body for j in jobs[:21]] + [b"k3", b"plain 2"]
    assert api.count(Q, PENDING) == 22


def test_concurrent_enqueues_of_one_key_make_one_job(
    server: ServerProcess, open_client: Callable[[ServerProcess], Any], ttypes: ModuleType
) -> None:
    apis = [Api(open_client(server), ttypes) for _ in range(6)]
    apis[0].create(Q)

    def one(api: Api) -> list[str]:
        return [enqueue(api, api.job(b"c", dedupKey=f"race-{n}"))[0][0] for n in range(20)]

    with ThreadPoolExecutor(len(apis)) as pool:
        answers = list(pool.map(one, apis))
    assert all(a == answers[0] for a in answers)
    assert apis[0].count(Q, PENDING) == 20


def test_a_key_in_a_queue_that_does_not_exist_is_queue_not_found(api: Api) -> None:
    """As for a job without a key: the enqueue does not make the queue."""
    code = api.error_code(api.enqueue, "no_such_queue", api.job(b"x", dedupKey="k"))
    assert code == api.t.ErrorCode.QUEUE_NOT_FOUND
    assert "no_such_queue" not in api.c.getQueueNames(api.ctx)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"dedupKey": ""}, "jobs[1]: dedupKey must not be empty"),
        ({"dedupKey": "x" * 1025}, "jobs[1]: dedupKey is 1025 bytes, at most 1024"),
        ({"dedupKey": "k", "dedupWindowMillis": -1}, "jobs[1]: dedupWindowMillis must be 0 to"),
        ({"dedupWindowMillis": 5}, "jobs[1]: dedupWindowMillis needs a dedupKey"),
        # SQLite's JSON, through which the embedded store reads keys, cuts a string at U+0000: such
        # a key was not held, and such a group never let its next job go
        ({"dedupKey": "k\0x"}, "jobs[1]: dedupKey must not contain a NUL character (U+0000)"),
        ({"groupKey": "acct\0007"}, "jobs[1]: groupKey must not contain a NUL character (U+0000)"),
    ],
)
def test_a_bad_extension_refuses_the_request_and_writes_nothing(api: Api, fields: dict[str, Any], message: str) -> None:
    with pytest.raises(api.t.PinLaterException) as info:
        enqueue(api, api.job(b"fine", dedupKey="ok"), api.job(b"bad", **fields))
    assert info.value.errorCode == api.t.ErrorCode.ENQUEUE_REJECTED
    assert message in info.value.message
    assert api.count(Q, PENDING) == 0


def test_the_default_window_alone_is_an_ordinary_job(api: Api) -> None:
    (descriptor,), flags = enqueue(api, api.job(b"plain", dedupWindowMillis=0))
    assert flags is None
    assert api.lookup(descriptor)[descriptor].dedupKey is None


def test_metrics_count_deduplicated_jobs(api: Api, server: ServerProcess) -> None:
    enqueue(api, api.job(b"a", dedupKey="m"), api.job(b"b", dedupKey="m"))
    enqueue(api, api.job(b"c", dedupKey="m"))
    with urllib.request.urlopen(f"http://127.0.0.1:{server.admin_port}/metrics", timeout=5) as response:
        text = response.read().decode()
    deduplicated = re.search(rf'pinlater_jobs_deduplicated_total\{{queue="{Q}"\}} (\S+)', text)
    enqueued = re.search(rf'pinlater_jobs_enqueued_total\{{queue="{Q}"\}} (\S+)', text)
    assert deduplicated is not None and float(deduplicated.group(1)) == 2
    assert enqueued is not None and float(enqueued.group(1)) == 1
