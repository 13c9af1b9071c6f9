"""SERVER_PROCESSES: ``pinlater serve`` as several processes sharing the Thrift port, end to end.

Real ``pinlater serve --processes 2`` over a real redis-server, driven by the library's client
over many connections. Which process serves a connection is read from ``/proc`` (the process
holding the accepted socket), never guessed. Waits are ``wait_for`` on a condition.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from tests.server.test_contract import Api
from tests.support.pinlater_server import ServerProcess
from tests.support.redis_server import RedisServer, write_shard_config
from tests.support.wait import wait_for

from pinlater.client import PinLaterClient
from pinlater.config import Settings, processes, resolve_settings
from pinlater.errors import ConfigError
from pinlater.server.metrics import Metrics, Timing

pytestmark = pytest.mark.redis

PIDS = re.compile(r"2 server processes \(pids (\d+) (\d+)\)")
CHILD_SERVING = re.compile(r"server process 1 serving \(pid (\d+)\)")
QUEUE = "procs"


@pytest.fixture
def redis_config(tmp_path: Path) -> Iterator[Path]:
    with RedisServer(tmp_path / "redis") as redis:
        yield write_shard_config(tmp_path / "redis.json", {"1": redis})


def start_two(start_server: Callable[..., ServerProcess], config: Path, **properties: object) -> ServerProcess:
    props = {"PINLATER_BACKEND": "redis", "BACKEND_CONFIG_PATH": str(config), "SERVER_PROCESSES": 2, **properties}
    return start_server(properties=props)


def pids_of(server: ServerProcess) -> tuple[int, int]:
    m = PIDS.search(server.output())
    assert m, server.output()
    return int(m.group(1)), int(m.group(2))


def stats(server: ServerProcess) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.admin_port}/stats.txt", timeout=5) as response:
        text = response.read().decode()
    out = {}
    for line in text.splitlines():
        name, sep, value = line.strip().partition(": ")
        if sep and not value.startswith("("):
            out[name] = float(value) if value != "nan" else float("nan")
    return out


def established(pid: int, port: int) -> int:
    """Connections to ``port`` accepted by process ``pid`` and open now (from /proc)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for row in f.read().splitlines()[1:]:
                fields = row.split()
                local_port = int(fields[1].rsplit(":", 1)[1], 16)
                if local_port == port and fields[3] == "01" and fields[9] in inodes:
                    count += 1
    return count


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


# -- serving from two processes -------------------------------------------------------------------


def test_two_processes_serve_one_port_and_stats_show_the_sum(
    start_server: Callable[..., ServerProcess], redis_config: Path
) -> None:
    server = start_two(start_server, redis_config)
    parent, child = pids_of(server)
    assert parent == server.pid and alive(child)
    assert any("thrift server listening" in line and "server_process=1" in line for line in server.lines)
    clients = [PinLaterClient(f"127.0.0.1:{server.port}", max_connections=1) for _ in range(24)]
    try:
        clients[0].create_queue(QUEUE)
        errors: list[BaseException] = []
        acked: list[int] = []

        def cycle(client: PinLaterClient) -> None:
            try:
                for _ in range(5):
                    client.enqueue(QUEUE, [b"x"] * 10)
                    jobs = client.dequeue(QUEUE, 10)
                    client.ack(QUEUE, succeeded=[j.descriptor for j in jobs])
                    acked.append(len(jobs))
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=cycle, args=(c,)) for c in clients]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not errors, errors
        # Each client holds one connection; the kernel spread them over both processes.
        by_pid = {pid: established(pid, server.port) for pid in (parent, child)}
        assert sum(by_pid.values()) == len(clients), by_pid
        assert all(n > 0 for n in by_pid.values()), by_pid
        # Process 0's pages count both: every call made, whichever process served it.
        calls = len(clients) * 5
        wait_for(
            lambda: (
                [stats(server).get(f"{m}_ok") for m in ("enqueue_jobs", "dequeue_jobs", "ack_dequeued_jobs")]
                == [calls] * 3
            ),
            10,
            what=f"/stats.txt to count all {calls * 3} calls",
        )
        now = stats(server)
        assert now["server_processes"] == 2
        assert now["connections_open"] == len(clients)  # a summed gauge
        assert now[f"{QUEUE}_enqueue"] == len(clients) * 50
        assert now[f"{QUEUE}_ack_succeeded"] == sum(acked)
        with urllib.request.urlopen(f"http://127.0.0.1:{server.admin_port}/metrics", timeout=5) as response:
            metrics = response.read().decode()
        assert f'pinlater_jobs_enqueued_total{{queue="{QUEUE}"}} {float(len(clients) * 50)}' in metrics
    finally:
        for c in clients:
            c.close()


def test_sigterm_stops_every_process_and_lets_long_polls_finish(
    start_server: Callable[..., ServerProcess], redis_config: Path
) -> None:
    server = start_two(start_server, redis_config)
    parent, child = pids_of(server)
    clients = [PinLaterClient(f"127.0.0.1:{server.port}", max_connections=1, retries=0) for _ in range(12)]
    try:
        clients[0].create_queue(QUEUE)
        results: list[object] = []

        def poll(client: PinLaterClient) -> None:
            try:
                results.append(client.dequeue(QUEUE, 1, wait=25))
            except BaseException as exc:
                results.append(exc)

        threads = [threading.Thread(target=poll, args=(c,)) for c in clients]
        for t in threads:
            t.start()
        wait_for(
            lambda: established(parent, server.port) + established(child, server.port) == len(clients),
            10,
            what="every long poll to be connected",
        )
        assert established(child, server.port) > 0
        assert server.terminate(30) == 0
        for t in threads:
            t.join(10)
        # In flight when the signal came, every long poll was answered (empty), none failed.
        assert results == [[]] * len(clients)
        wait_for(lambda: not alive(child), 10, what=f"server process 1 (pid {child}) to exit")
        assert not alive(parent)
    finally:
        for c in clients:
            c.close()


def test_a_child_outlives_no_killed_parent(start_server: Callable[..., ServerProcess], redis_config: Path) -> None:
    server = start_two(start_server, redis_config)
    parent, child = pids_of(server)
    server.kill()  # SIGKILL: no chance to stop its children
    wait_for(lambda: not alive(child), 15, what=f"server process 1 (pid {child}) to stop without its parent")
    assert not alive(parent)
    assert "server process 1: the supervisor is gone; stopping" in server.output()


def test_a_killed_process_is_replaced_and_its_claimed_jobs_come_back(
    start_server: Callable[..., ServerProcess], redis_config: Path
) -> None:
    server = start_two(
        start_server,
        redis_config,
        BROKER_ENABLED="true",  # buffered reservations are lost with the process too
        BACKEND_MONITOR_JOB_CLAIMED_TIMEOUT_SECONDS=2,
        BACKEND_MONITOR_THREAD_DELAY_SECONDS=0.2,
    )
    _, child = pids_of(server)
    clients = [PinLaterClient(f"127.0.0.1:{server.port}", max_connections=1) for _ in range(16)]
    try:
        clients[0].create_queue(QUEUE)
        enqueued = set(clients[0].enqueue(QUEUE, [f"job {i}".encode() for i in range(200)]))
        claimed = set()
        for c in clients:  # claimed over every connection, so both processes hold some
            claimed |= {j.descriptor for j in c.dequeue(QUEUE, 5)}
        assert claimed and established(child, server.port) > 0
        os.kill(child, signal.SIGKILL)
        replaced = wait_for(
            lambda: [int(p) for p in CHILD_SERVING.findall(server.output()) if int(p) != child],
            30,
            what="another server process 1",
        )
        assert alive(replaced[0])
        assert f"server process 1 (pid {child}) was killed by SIGKILL" in server.output()
        wait_for(lambda: stats(server).get("server_processes") == 2, 10, what="two live processes again")
    finally:
        for c in clients:
            c.close()
    # At least once: every job is handed out again (the claimed ones after the claim timeout).
    acked: set[str] = set()
    with PinLaterClient(f"127.0.0.1:{server.port}") as client:

        def drained() -> bool:
            jobs = client.dequeue(QUEUE, 100)
            client.ack(QUEUE, succeeded=[j.descriptor for j in jobs])
            acked.update(j.descriptor for j in jobs)
            return acked >= enqueued

        wait_for(drained, 40, interval=0.2, what="every enqueued job to be dequeued and acked")
    assert acked == enqueued


def test_every_process_holds_a_share_of_the_rate_limit_and_reloads_the_queue_config(
    start_server: Callable[..., ServerProcess],
    redis_config: Path,
    tmp_path: Path,
    open_client: Callable[[ServerProcess], Any],
    ttypes: ModuleType,
) -> None:
    queue_config = tmp_path / "queues.json"
    write_rate(queue_config, 1000)
    server = start_two(start_server, redis_config, QUEUE_CONFIG_FILE_PATH=queue_config)
    parent, child = pids_of(server)
    # Generated clients keep their connection through a refusal (a Thrift exception reply).
    apis = [Api(open_client(server), ttypes) for _ in range(16)]
    apis[0].create(QUEUE)
    assert established(parent, server.port) > 0 and established(child, server.port) > 0

    def refusal(api: Api, limit: int) -> str:
        with pytest.raises(ttypes.PinLaterException) as info:
            api.dequeue(QUEUE, limit)
        assert info.value.errorCode == ttypes.ErrorCode.DEQUEUE_RATE_LIMITED
        return str(info.value.message)

    messages = []
    for api in apis:
        with contextlib.suppress(ttypes.PinLaterException):
            api.dequeue(QUEUE, 1000)  # the first on each process is granted, and charged in full
        messages.append(refusal(api, 1))
    # 1000 jobs/s split between the two processes, in each of them.
    assert all("limited to 500 jobs/s on this server process" in m for m in messages), messages
    write_rate(queue_config, 0)  # paused: every process reloads the file
    wait_for(lambda: all("is paused" in refusal(api, 1) for api in apis), 10, what="every process to pause the queue")


def write_rate(path: Path, rate: float) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"queues": [{"name": QUEUE, "queueConfig": {"maxJobsPerSecond": rate}}]}))
    os.replace(tmp, path)


# -- settings -------------------------------------------------------------------------------------


def test_embedded_backend_refuses_more_than_one_process(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "pinlater.cli", "serve", "--port", "0", "--admin-port", "0"]
    cmd += ["--data-dir", str(tmp_path / "data"), "--processes", "2"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert done.stderr.strip().startswith("pinlater serve: --processes 2: the embedded backend serves from one process")
    assert "set SERVER_PROCESSES to 1" in done.stderr
    assert not (tmp_path / "data").exists()  # refused before anything was opened


def test_server_processes_setting() -> None:
    assert Settings().server_processes == 1
    assert processes("auto") == len(os.sched_getaffinity(0))
    layer = Settings.from_properties("PINLATER_BACKEND=redis\nBACKEND_CONFIG_PATH=/x.json\nSERVER_PROCESSES=3\n")
    assert layer.server_processes == 3
    with pytest.raises(ConfigError, match=r"^f:1: SERVER_PROCESSES='two': expected a whole number or auto$"):
        Settings.from_properties("SERVER_PROCESSES=two\n", "f")
    with pytest.raises(ConfigError, match=r"^f:1 SERVER_PROCESSES=0: must be in 1\.\.1024"):
        Settings.from_properties("SERVER_PROCESSES=0\nPINLATER_BACKEND=redis\nBACKEND_CONFIG_PATH=/x\n", "f")
    with pytest.raises(ConfigError, match=r"^f:1 SERVER_PROCESSES=2: the embedded backend serves from one process"):
        Settings.from_properties("SERVER_PROCESSES=2\n", "f")
    assert resolve_settings().server_processes == 1


def test_metrics_merge_adds_counts_timings_and_summed_gauges() -> None:
    parent, child = Metrics(), Metrics()
    parent.gauge("connections_open", lambda: 3, summed=True)
    parent.gauge("shards", lambda: 2)
    child.gauge("connections_open", lambda: 4, summed=True)
    child.gauge("shards", lambda: 2)
    parent.incr("q_enqueue", 5)
    child.incr("q_enqueue", 7)
    parent.timing("enqueueJobs", 1.0, True)
    child.timing("enqueueJobs", 3.0, True)
    parent.merge("p1", child.take_delta())
    assert not child.counters and not child.timings  # a delta is sent once
    assert parent.counters["q_enqueue"] == 12
    assert parent.counters["enqueueJobs_ok"] == 2
    timing: Timing = parent.timings["enqueueJobs"]
    assert (timing.count, timing.total, timing.minimum, timing.maximum) == (2, 4.0, 1.0, 3.0)
    assert sorted(timing.sample) == [1.0, 3.0]
    assert parent.gauges() == {"connections_open": 7.0, "shards": 2.0}
    parent.forget("p1")
    assert parent.gauges()["connections_open"] == 3.0
    assert parent.counters["q_enqueue"] == 12  # a process that ended keeps its counts


def test_a_total_of_a_process_that_ended_still_counts() -> None:
    """A ``total`` gauge (a count since its process started) keeps an ended process's last
    reading, so the sum over the processes never goes back when a child is restarted."""
    parent, child, restarted = Metrics(), Metrics(), Metrics()
    for metrics, rejected in ((parent, 1), (child, 2), (restarted, 5)):
        metrics.gauge("connections_rejected", lambda n=rejected: n, total=True)
        metrics.gauge("connections_open", lambda n=rejected: 10 * n, summed=True)
    parent.merge("p1", child.take_delta())
    assert parent.gauges() == {"connections_rejected": 3.0, "connections_open": 30.0}
    parent.forget("p1")
    assert parent.gauges() == {"connections_rejected": 3.0, "connections_open": 10.0}
    parent.merge("p1", restarted.take_delta())  # the child started again, from 0
    assert parent.gauges() == {"connections_rejected": 8.0, "connections_open": 60.0}
