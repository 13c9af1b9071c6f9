"""The server as a process: durability across SIGKILL, graceful stop, the data-dir lock,
the background monitor, rate limits from a watched file, and many clients at once."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import urllib.request
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from tests.server.test_contract import FAILED, IN_PROGRESS, PENDING, SUCCEEDED, Api
from tests.support.pinlater_server import ServerProcess
from tests.support.thrift_client import connect
from tests.support.wait import wait_for

Start = Callable[..., ServerProcess]
Open = Callable[[ServerProcess], Any]


def test_nothing_acknowledged_is_lost_when_the_server_is_killed(
    start_server: Start, open_client: Open, ttypes: ModuleType, tmp_path: Path
) -> None:
    srv = start_server()
    api = Api(open_client(srv), ttypes)
    api.create("durable")
    descriptors: list[str] = []
    for batch in range(5):
        descriptors += api.enqueue("durable", *[api.job(f"{batch}-{i}".encode()) for i in range(100)])
    claimed = list(api.dequeue("durable", limit=30).jobs)
    api.ack("durable", ok=claimed[:10])
    srv.kill()

    srv2 = start_server()
    api2 = Api(open_client(srv2), ttypes)
    found = api2.lookup(*descriptors, body=True)
    assert len(found) == 500
    states = Counter(info.jobState for info in found.values())
    assert states == {PENDING: 470, IN_PROGRESS: 20, SUCCEEDED: 10}
    assert found[descriptors[123]].body == b"1-23"
    assert len(set(api2.enqueue("durable", api2.job(b"after")))) == 1
    assert set(api2.c.getQueueNames(api2.ctx)) == {"durable"}


def test_sigterm_finishes_and_exits_zero(start_server: Start, open_client: Open, ttypes: ModuleType) -> None:
    srv = start_server()
    api = Api(open_client(srv), ttypes)
    api.create("bye")
    api.enqueue("bye", api.job(b"x"))
    assert srv.terminate() == 0
    assert "pinlater stopped" in srv.output()


def test_a_second_server_on_the_same_data_dir_is_refused(start_server: Start, tmp_path: Path) -> None:
    start_server()
    second = subprocess.run(
        [
            sys.executable,
            "-m",
            "pinlater.cli",
            "serve",
            "--port",
            "0",
            "--admin-port",
            "0",
            "--data-dir",
            str(tmp_path / "data"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert second.returncode == 2
    lines = second.stderr.strip().splitlines()
    assert len(lines) == 1 and str(tmp_path / "data") in lines[0], second.stderr


def test_monitor_resurrects_timed_out_claims_and_collects_finished_jobs(
    start_server: Start, open_client: Open, ttypes: ModuleType
) -> None:
    srv = start_server(
        properties={
            "BACKEND_MONITOR_THREAD_DELAY_SECONDS": "0.1",
            "BACKEND_MONITOR_JOB_CLAIMED_TIMEOUT_SECONDS": "0.5",
            "BACKEND_MONITOR_JOB_SUCCEEDED_GC_TTL_HOURS": "0",
            "BACKEND_MONITOR_JOB_FAILED_GC_TTL_HOURS": "1",
        }
    )
    api = Api(open_client(srv), ttypes)
    api.create("mon")
    twice, once, done = api.enqueue(
        "mon", api.job(b"twice", numAttemptsAllowed=2), api.job(b"once", numAttemptsAllowed=1), api.job(b"done")
    )
    assert set(api.dequeue("mon", limit=3).jobs) == {twice, once, done}
    api.ack("mon", ok=[done])

    def settled() -> bool:
        found = api.lookup(twice, once, done)
        return done not in found and found[twice].jobState == PENDING and found[once].jobState == FAILED

    wait_for(settled, timeout=15, what="the monitor to resurrect and collect")
    # counted per queue as the original's monitor counted them, in /stats.txt and /metrics (at
    # the end of the queue's pass, which may still run)
    admin = f"http://127.0.0.1:{srv.admin_port}"
    counted = ("mon_timeout_done: 1", "mon_timeout_retry: 1", "mon_succeeded_gc: 1")

    def stats() -> str:
        return str(urllib.request.urlopen(f"{admin}/stats.txt", timeout=10).read().decode())

    wait_for(lambda: all(f"  {line}\n" in stats() for line in counted), timeout=15, what="the monitor's counters")
    assert "mon_failed_gc" not in stats(), "the failed job is not collected: none counted"
    scrape = urllib.request.urlopen(f"{admin}/metrics", timeout=10).read().decode()
    assert 'pinlater_claims_timed_out_total{queue="mon",result="failed"} 1.0' in scrape
    assert 'pinlater_claims_timed_out_total{queue="mon",result="retried"} 1.0' in scrape
    assert 'pinlater_jobs_collected_total{queue="mon",state="succeeded"} 1.0' in scrape
    info = api.lookup(twice)[twice]
    assert info.attemptsRemaining == 1
    assert list(api.dequeue("mon").jobs) == [twice]
    assert api.lookup(once)[once].jobState == FAILED, "failed jobs are kept for their own TTL"


def test_rate_limits_from_the_watched_queue_config(
    start_server: Start, open_client: Open, ttypes: ModuleType, tmp_path: Path
) -> None:
    config = tmp_path / "queues.json"
    config.write_text(json.dumps({"queues": [{"name": "paused", "queueConfig": {"maxJobsPerSecond": 0}}]}))
    srv = start_server(properties={"QUEUE_CONFIG_FILE_PATH": config})
    api = Api(open_client(srv), ttypes)
    api.create("paused")
    api.create("free")
    api.enqueue("paused", api.job(b"p"))
    assert api.error_code(api.dequeue, "paused") == api.t.ErrorCode.DEQUEUE_RATE_LIMITED
    assert api.dequeue("free").jobs == {}
    assert len(api.dequeue("paused", dryRun=True).jobs) == 1, "a dry run claims nothing and is not charged"

    config.write_text("{not json")
    wait_for(lambda: "rejected, keeping the last good one" in srv.output(), timeout=10, what="the bad file to be seen")
    assert api.error_code(api.dequeue, "paused") == api.t.ErrorCode.DEQUEUE_RATE_LIMITED, "last good config stays"
    config.write_text(json.dumps({"queues": [{"name": "paused", "queueConfig": {"maxJobsPerSecond": 1000}}]}))
    got = wait_for(lambda: api.dequeue("paused").jobs, timeout=10, what="the new rate to apply")
    assert len(got) == 1

    wait_for(lambda: "paused_dequeue_requests_rate_limited: 2" in _stats(srv), timeout=5, what="stats")
    stats = urllib.request.urlopen(f"http://127.0.0.1:{srv.admin_port}/stats.txt", timeout=10).read().decode()
    assert "paused_dequeue: 1" in stats


def test_the_acks_a_dequeue_carries_are_applied_and_counted_whatever_the_dequeue_does(
    start_server: Start, open_client: Open, ttypes: ModuleType, tmp_path: Path
) -> None:
    """Successes carried by a dequeue: applied with its claim, when it is rate-limited, when it
    is a dry run and when they are of another queue, and counted once each in /stats.txt."""
    config = tmp_path / "queues.json"
    config.write_text(json.dumps({"queues": [{"name": "slow", "queueConfig": {"maxJobsPerSecond": 0.001}}]}))
    srv = start_server(properties={"QUEUE_CONFIG_FILE_PATH": config})
    api = Api(open_client(srv), ttypes)
    api.create("slow")
    api.create("free")
    api.enqueue("slow", api.job(b"s"))
    api.enqueue("free", *(api.job(b"f%d" % i) for i in range(4)))
    (slow,) = api.dequeue("slow", limit=1).jobs  # the bucket's one token
    f1, f2, f3 = api.dequeue("free", limit=3).jobs
    limited = api.ack_request("slow", ok=[slow])
    assert api.error_code(api.dequeue, "slow", limit=1, jobAckRequest=limited) == api.t.ErrorCode.DEQUEUE_RATE_LIMITED
    assert api.dequeue("free", limit=1, dryRun=True, jobAckRequest=api.ack_request("free", ok=[f1])).jobs
    assert len(api.dequeue("slow", limit=1, dryRun=True, jobAckRequest=api.ack_request("free", ok=[f2])).jobs) == 0
    (f4,) = api.dequeue("free", limit=5, jobAckRequest=api.ack_request("free", ok=[f3])).jobs
    assert f4 not in (f1, f2, f3)
    found = api.lookup(slow, f1, f2, f3)
    assert [found[d].jobState for d in (slow, f1, f2, f3)] == [SUCCEEDED] * 4
    wait_for(lambda: "free_ack_succeeded: 3" in _stats(srv), timeout=5, what="stats")
    assert "slow_ack_succeeded: 1" in _stats(srv)


def test_bad_queue_config_at_start_is_a_one_line_error(tmp_path: Path) -> None:
    config = tmp_path / "queues.json"
    config.write_text('{"queues": [{"name": "q", "queueConfig": {"maxJobsPerSecond": true}}]}')
    props = tmp_path / "p.properties"
    props.write_text(f"QUEUE_CONFIG_FILE_PATH={config}\n")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pinlater.cli",
            "serve",
            "--port",
            "0",
            "--admin-port",
            "0",
            "--data-dir",
            str(tmp_path / "d"),
            "--properties",
            str(props),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert str(config) in done.stderr and "maxJobsPerSecond" in done.stderr


def test_eight_producers_and_eight_consumers_deliver_every_job_exactly_once(
    server: ServerProcess, ttypes: ModuleType
) -> None:
    producers, consumers, batches, batch_size = 8, 8, 10, 25
    total = producers * batches * batch_size
    setup, transport = connect("127.0.0.1", server.port)
    Api(setup, ttypes).create("mpmc")
    transport.close()
    seen: Counter[bytes] = Counter()
    seen_lock = threading.Lock()
    produced = threading.Event()
    errors: list[BaseException] = []

    def produce(p: int) -> None:
        client, tr = connect("127.0.0.1", server.port)
        try:
            api = Api(client, ttypes, source=f"producer-{p}")
            for b in range(batches):
                api.enqueue("mpmc", *[api.job(f"{p}-{b}-{i}".encode()) for i in range(batch_size)])
        except BaseException as exc:
            errors.append(exc)
        finally:
            tr.close()

    def consume(c: int) -> None:
        client, tr = connect("127.0.0.1", server.port)
        try:
            api = Api(client, ttypes, source=f"consumer-{c}")
            pending_acks: list[str] = []
            while True:
                with seen_lock:
                    if sum(seen.values()) >= total:
                        break
                acks = api.ack_request("mpmc", ok=pending_acks) if pending_acks else None
                got = api.dequeue("mpmc", limit=20, jobAckRequest=acks)
                pending_acks = list(got.jobs)
                with seen_lock:
                    seen.update(got.jobs.values())
                if not got.jobs and produced.is_set():
                    with seen_lock:
                        if sum(seen.values()) >= total:
                            break
            if pending_acks:
                api.ack("mpmc", ok=pending_acks)
        except BaseException as exc:
            errors.append(exc)
        finally:
            tr.close()

    threads = [threading.Thread(target=produce, args=(p,)) for p in range(producers)]
    readers = [threading.Thread(target=consume, args=(c,)) for c in range(consumers)]
    for t in threads + readers:
        t.start()
    for t in threads:
        t.join(120)
    produced.set()
    for t in readers:
        t.join(120)
    assert not errors, errors
    assert len(seen) == total and max(seen.values()) == 1, "every job delivered once"
    check, tr = connect("127.0.0.1", server.port)
    api = Api(check, ttypes)
    assert api.count("mpmc", SUCCEEDED) == total
    assert api.count("mpmc", PENDING) == 0 and api.count("mpmc", IN_PROGRESS) == 0
    tr.close()


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/stats.txt"])
def test_admin_endpoints_answer(server: ServerProcess, path: str) -> None:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.admin_port}{path}", timeout=10) as response:
        assert response.status == 200
        body = response.read().decode()
    assert body.strip()


def test_serve_freezes_what_start_up_made(server: ServerProcess) -> None:
    """Full garbage collections must not walk the modules and pools made at start-up (they
    stalled every request for tens of milliseconds): `pinlater serve` freezes them."""
    frozen = re.search(r"^\s*gc_frozen_objects: (\d+)$", _stats(server), re.MULTILINE)
    assert frozen, "gc_frozen_objects missing from /stats.txt"
    assert int(frozen.group(1)) > 10_000


def _stats(srv: ServerProcess) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{srv.admin_port}/stats.txt", timeout=10) as response:
        return str(response.read().decode())


def test_rate_limits_are_split_between_the_servers_of_the_server_set(
    start_server: Start, open_client: Open, ttypes: ModuleType, tmp_path: Path
) -> None:
    config = tmp_path / "queues.json"
    config.write_text(json.dumps({"queues": [{"name": "split", "queueConfig": {"maxJobsPerSecond": 40}}]}))
    server_set = tmp_path / "serverset"
    server_set.write_text("10.0.0.1:9010\n10.0.0.2:9010\n10.0.0.3:9010\n10.0.0.4:9010\n")
    srv = start_server(
        properties={"QUEUE_CONFIG_FILE_PATH": config, "SERVER_SET_ENABLED": "true", "SERVER_SET_PATH": server_set}
    )
    api = Api(open_client(srv), ttypes)
    api.create("split")
    # 40 jobs/s over 4 servers is 10/s here: one second's burst is 10 jobs, so a second
    # request for 10 right away is refused (undivided, both would pass).
    assert api.dequeue("split", limit=10).jobs == {}
    assert api.error_code(api.dequeue, "split", limit=10) == api.t.ErrorCode.DEQUEUE_RATE_LIMITED

    server_set.write_text("")  # an empty file keeps the old count
    wait_for(lambda: "lists no servers" in srv.output(), timeout=10, what="the empty server set to be seen")

    def two_bursts_in_a_row() -> bool:
        try:
            api.dequeue("split", limit=10)
            api.dequeue("split", limit=10)
        except api.t.PinLaterException:
            return False
        return True

    # Polled once a second, so the bucket refills between tries: at 10/s (burst 10) the pair
    # never passes; at 40/s (burst 40) it does.
    assert not two_bursts_in_a_row()
    server_set.write_text("10.0.0.1:9010\n")
    wait_for(two_bursts_in_a_row, timeout=15, interval=1.0, what="the full rate on a one-server set")
