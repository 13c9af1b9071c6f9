"""Ordered groups (``PinLaterJob.groupKey``) and the queue config's rules (``groupConcurrency``,
``maxInProgress``, ``groupJobsPerSecond``) through a real ``pinlater serve`` on the embedded
store and a client generated from the IDL, with the dequeue broker off and on."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from tests.server.test_contract import PENDING, Api
from tests.support.pinlater_server import ServerProcess
from tests.support.wait import wait_for

Q = "groups_q"
Start = Callable[..., ServerProcess]


def write_rules(path: Path, **config: Any) -> None:
    path.write_text(json.dumps({"queues": [{"name": Q, "queueConfig": config}]}))


@pytest.fixture(params=["direct", "broker"])
def broker(request: pytest.FixtureRequest) -> str:
    return str(request.param == "broker").lower()


@pytest.fixture
def rules_file(tmp_path: Path) -> Path:
    path = tmp_path / "queues.json"
    write_rules(path, groupConcurrency=1)
    return path


@pytest.fixture
def server(start_server: Start, rules_file: Path, broker: str) -> ServerProcess:
    return start_server(
        properties={
            "QUEUE_CONFIG_FILE_PATH": rules_file,
            "BROKER_ENABLED": broker,
            "BACKEND_MONITOR_THREAD_DELAY_SECONDS": "0.2",
        }
    )


@pytest.fixture
def api(server: ServerProcess, open_client: Callable[[ServerProcess], Any], ttypes: ModuleType) -> Api:
    api = Api(open_client(server), ttypes)
    api.create(Q)
    return api


def dequeue_bodies(api: Api, limit: int = 10) -> dict[str, bytes]:
    return dict(api.dequeue(Q, limit=limit).jobs)


def wait_dequeue(api: Api, expected: int, limit: int = 10) -> dict[str, bytes]:
    """Dequeue until ``expected`` jobs came back in all (the broker may hand them out over more
    than one call while it refills); fail if more come."""
    got: dict[str, bytes] = {}

    def enough() -> bool:
        got.update(dequeue_bodies(api, limit))
        assert len(got) <= expected, got
        return len(got) == expected

    wait_for(enough, timeout=10, what=f"{expected} jobs")
    return got


def admin_json(server: ServerProcess, path: str) -> Any:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.admin_port}{path}", timeout=5) as response:
        return json.loads(response.read())


def metric_samples(server: ServerProcess) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """``/metrics`` as ``{(name, sorted labels): value}``."""
    with urllib.request.urlopen(f"http://127.0.0.1:{server.admin_port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_a_group_runs_in_enqueue_order_beside_other_work(api: Api, server: ServerProcess) -> None:
    a = api.enqueue(
        Q,
        api.job(b"a1", groupKey="a", priority=3),
        api.job(b"a2", groupKey="a", priority=1),
        api.job(b"b1", groupKey="b"),
        api.job(b"plain"),
        api.job(b"a3", groupKey="a"),
    )
    first = wait_dequeue(api, 3)
    assert sorted(first.values()) == [b"a1", b"b1", b"plain"], "a1 first although a2 has a higher priority"
    info = api.lookup(a[1])[a[1]]
    assert (info.jobState, info.groupKey, info.dedupKey) == (PENDING, "a", None)
    assert {j.jobDescriptor: j.groupKey for j in api.scan(Q, PENDING, priority=1).scannedJobs}[a[1]] == "a"

    counted = admin_json(server, f"/api/queues?queue={Q}")["queues"][0]
    assert counted["groups"] == {"all": 2, "blocked": 1}, "b runs its only job: nothing waits"
    assert counted["rules"] == {"group_concurrency": 1, "max_in_progress": None, "group_jobs_per_second": None}

    assert dequeue_bodies(api) == {}
    api.ack(Q, ok=[a[0]])
    assert list(wait_dequeue(api, 1).values()) == [b"a2"]
    api.ack(Q, ok=[a[1]])
    assert list(wait_dequeue(api, 1).values()) == [b"a3"]


def test_a_retried_failure_keeps_the_head_of_its_group(api: Api) -> None:
    head, behind = api.enqueue(Q, api.job(b"head", groupKey="g"), api.job(b"behind", groupKey="g"))
    assert list(wait_dequeue(api, 1)) == [head]
    api.ack(Q, failed=[api.t.PinLaterJobAckInfo(jobDescriptor=head, retryDelayMillis=300)])
    assert list(wait_dequeue(api, 1)) == [head], "the retry runs before the job behind it"
    api.ack(Q, ok=[head])
    assert list(wait_dequeue(api, 1)) == [behind]


def test_the_rules_come_from_the_queue_config_and_reload(api: Api, server: ServerProcess, rules_file: Path) -> None:
    api.enqueue(Q, *[api.job(b"g%d" % i, groupKey="g") for i in range(6)], *[api.job(b"p%d" % i) for i in range(6)])
    write_rules(rules_file, groupConcurrency=3, maxInProgress=4)

    def reloaded() -> bool:
        rules = admin_json(server, f"/api/queues?queue={Q}")["queues"][0]["rules"]
        return bool(rules == {"group_concurrency": 3, "max_in_progress": 4, "group_jobs_per_second": None})

    wait_for(reloaded, timeout=10, what="the new rules")
    got = wait_dequeue(api, 4)
    assert sorted(got.values())[:1] == [b"g0"] and sum(b.startswith(b"g") for b in got.values()) <= 3
    assert dequeue_bodies(api) == {}, "at the cap: fewer jobs, no error"
    samples = metric_samples(server)
    assert samples[("pinlater_queue_max_in_progress", (("queue", Q),))] == 4.0
    assert samples[("pinlater_queue_group_concurrency", (("queue", Q),))] == 3.0
    blocked = ("pinlater_queue_groups", (("kind", "blocked"), ("queue", Q)))
    wait_for(lambda: metric_samples(server).get(blocked) == 1.0, timeout=10, what="the monitor's count")

    api.ack(Q, ok=list(got))
    assert len(wait_dequeue(api, 4)) == 4


def test_a_rule_out_of_range_is_a_one_line_error_at_start(tmp_path: Path) -> None:
    config = tmp_path / "queues.json"
    write_rules(config, groupConcurrency=0)
    props = tmp_path / "p.properties"
    props.write_text(f"QUEUE_CONFIG_FILE_PATH={config}\n")
    command = [sys.executable, "-m", "pinlater.cli", "serve", "--port", "0", "--admin-port", "0"]
    done = subprocess.run(
        [*command, "--data-dir", str(tmp_path / "d"), "--properties", str(props)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "groupConcurrency must be a whole number from 1" in lines[0], done.stderr


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"groupKey": ""}, "jobs[1]: groupKey must not be empty"),
        ({"groupKey": "g" * 1025}, "jobs[1]: groupKey is 1025 bytes, at most 1024"),
    ],
)
def test_a_bad_group_key_refuses_the_request(api: Api, fields: dict[str, Any], message: str) -> None:
    with pytest.raises(api.t.PinLaterException) as info:
        api.enqueue(Q, api.job(b"fine", groupKey="ok"), api.job(b"bad", **fields))
    assert info.value.errorCode == api.t.ErrorCode.ENQUEUE_REJECTED
    assert message in info.value.message
    assert api.count(Q, PENDING) == 0
