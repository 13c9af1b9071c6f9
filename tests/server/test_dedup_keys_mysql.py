"""Dedup keys through servers on MySQL: several servers racing on the same keys over two shards
make one job per key, lookups and scans show the keys, and a queue the original made (no key
table) takes keys from its first keyed enqueue."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from tests.server.test_contract import PENDING, Api
from tests.server.test_mysql_server import mariadb, serve, shard_of  # noqa: F401 (mariadb: a fixture)
from tests.support.mariadb_server import MariaDBServer
from tests.support.pinlater_server import ServerProcess

pytestmark = pytest.mark.mysql

Q = "dedup_mysql"


def enqueue(api: Api, *jobs: Any) -> tuple[list[str], list[bool] | None]:
    response = api.c.enqueueJobs(api.ctx, api.t.PinLaterEnqueueRequest(queueName=Q, jobs=list(jobs)))
    flags = response.deduplicated
    return list(response.jobDescriptors), None if flags is None else list(flags)


def test_servers_racing_on_the_same_keys_make_one_job_per_key(
    tmp_path: Path,
    mariadb: MariaDBServer,  # noqa: F811
    start_server: Callable[..., ServerProcess],
    open_client: Callable[[ServerProcess], Any],
    ttypes: Any,
) -> None:
    shards = {"1": (mariadb, False), "2": (mariadb, False)}
    servers = [serve(start_server, tmp_path, shards) for _ in range(2)]
    apis = [Api(open_client(s), ttypes) for s in servers for _ in range(3)]
    apis[0].create(Q)
    keys = [f"race:{i}" for i in range(30)]

    def one(n: int) -> list[str]:
        api = apis[n]
        order = keys[n:] + keys[:n]  # each caller in its own order
        placed: dict[str, str] = {}
        for start in range(0, len(order), 3):  # three keys and a keyless job a request
            chunk = order[start : start + 3]
            descriptors, _ = enqueue(api, *(api.job(k.encode(), dedupKey=k) for k in chunk), api.job(b"plain"))
            placed.update(zip(chunk, descriptors, strict=False))
        return [placed[k] for k in keys]

    with ThreadPoolExecutor(len(apis)) as pool:
        answers = list(pool.map(one, range(len(apis))))
    assert all(a == answers[0] for a in answers), "every server answered each key with the same job"
    assert {shard_of(d) for d in answers[0]} == {"1", "2"}
    plain = len(apis) * 10
    assert apis[0].count(Q, PENDING) == len(keys) + plain
    infos = apis[0].lookup(*answers[0], body=True)
    assert {d: info.dedupKey for d, info in infos.items()} == dict(zip(answers[0], keys, strict=True))
    scanned = [j.dedupKey for j in apis[0].scan(Q, PENDING, limit=1000).scannedJobs]
    assert sorted(k for k in scanned if k is not None) == sorted(keys) and scanned.count(None) == plain


def test_a_queue_the_original_made_takes_keys(
    tmp_path: Path,
    mariadb: MariaDBServer,  # noqa: F811
    start_server: Callable[..., ServerProcess],
    open_client: Callable[[ServerProcess], Any],
    ttypes: Any,
) -> None:
    api = Api(open_client(serve(start_server, tmp_path, {"1": (mariadb, False)})), ttypes)
    api.create(Q)
    mariadb.query(f"DROP TABLE plq_1_{Q}.dedup_keys")  # as the original leaves a queue
    (plain,) = api.enqueue(Q, api.job(b"old"))
    assert api.lookup(plain)[plain].dedupKey is None
    (first,), flags = enqueue(api, api.job(b"a", dedupKey="k"))
    assert flags is None
    (again,), flags = enqueue(api, api.job(b"b", dedupKey="k"))
    assert (again, flags) == (first, [True])
    assert api.lookup(first)[first].dedupKey == "k"
