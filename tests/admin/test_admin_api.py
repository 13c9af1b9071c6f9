"""``pinlater.admin``: the Python admin API against a real server, and the config-file editors."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from pinlater.admin import (
    Admin,
    AdminError,
    PasswordRefused,
    pause_queue,
    read_queue_rates,
    resume_queue,
    set_queue_rate,
    set_shard_dequeue_only,
)
from tests.admin.conftest import FAILED, PENDING, AdminServer, http
from tests.conftest import ADMIN_PASSWORD
from tests.support.pinlater_server import ServerProcess
from tests.support.wait import wait_for


@pytest.fixture
def admin(admin_server: AdminServer) -> Admin:
    return Admin("127.0.0.1", admin_server.server.admin_port, password=ADMIN_PASSWORD)


def test_a_loopback_admin_port_is_reached_directly_whatever_http_proxy_says(
    admin: Admin, monkeypatch: pytest.MonkeyPatch
) -> None:
    """urllib sends 127.0.0.1 through ``http_proxy`` unless ``no_proxy`` names it, the admin
    password with it, in clear; here through a proxy that is not there."""
    for name in ("no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")
    assert isinstance(admin.queues(), list)


def test_reads_queues_counts_scan_lookup_and_stats(admin_server: AdminServer, admin: Admin) -> None:
    jobs = admin_server.jobs
    jobs.create("beta")
    jobs.create("alpha")
    failed = jobs.fail_one("alpha", b"\x00\xffbinary", status="it broke")
    jobs.enqueue("alpha", b"x", b"y", priority=2)

    assert admin.queues() == ["alpha", "beta"]
    counts = admin.counts("alpha")
    assert counts["pending"] == [0, 2, 0] and counts["failed"] == [1, 0, 0]
    with pytest.raises(AdminError) as info:
        admin.counts("gamma")
    assert info.value.status == 404

    (job,) = admin.scan("alpha", "failed")
    assert job["descriptor"] == failed and job["custom_status"] == "it broke" and job["attempts_remaining"] == 0
    assert len(admin.scan("alpha", "pending", priority=2, limit=1)) == 1
    assert admin.scan("alpha", "pending", body_regex="^y$")[0]["state"] == "pending"

    found = admin.lookup(failed)
    assert found is not None
    assert found["body_hex"] == "00 ff 62 69 6e 61 72 79" and found["body_text"] == "\x00\ufffdbinary"
    assert admin.lookup("alpha:s1:p1:424242") is None

    stats = admin.stats()
    assert stats["counters"]["alpha_enqueue"] == 3
    assert "alpha_enqueue: 3" in admin.stats_text()
    families = {f.name for f in text_string_to_metric_families(admin.metrics_text())}
    assert {"pinlater_jobs_enqueued", "pinlater_request_duration_seconds"} <= families
    assert admin.ready() is True
    assert "alpha" in admin.rates()["queues"]


def test_changes_need_the_password(admin_server: AdminServer, admin: Admin) -> None:
    jobs = admin_server.jobs
    jobs.create("fixme")
    jobs.fail_one("fixme", b"a")
    jobs.fail_one("fixme", b"b")
    stranger = Admin("127.0.0.1", admin_server.server.admin_port)
    with pytest.raises(PasswordRefused):
        stranger.retry("fixme")
    with pytest.raises(PasswordRefused):
        admin.delete("fixme", "failed", password="guess")
    assert jobs.count("fixme", FAILED) == 2

    assert admin.retry("fixme", limit=1) == 1
    assert stranger.retry("fixme", password=ADMIN_PASSWORD) == 1
    assert (jobs.count("fixme", FAILED), jobs.count("fixme", PENDING)) == (0, 2)
    assert admin.delete("fixme", "pending", body_regex="^a$") == 1
    assert jobs.count("fixme", PENDING) == 1


def test_rate_limits_through_the_api_are_in_force_at_once(admin_server: AdminServer, admin: Admin) -> None:
    jobs = admin_server.jobs
    jobs.create("throttled")
    jobs.enqueue("throttled", b"1")
    assert admin.set_rate("throttled", 2.5)["rate"]["configured"] == 2.5
    assert read_queue_rates(admin_server.queue_config) == {"throttled": 2.5}
    admin.pause("throttled")
    with pytest.raises(jobs.t.PinLaterException):
        jobs.dequeue("throttled")
    assert admin.overview("throttled")["queues"][0]["rate"]["paused"] is True
    admin.resume("throttled")
    assert read_queue_rates(admin_server.queue_config) == {"throttled": 2.5}
    assert len(jobs.dequeue("throttled", 1)) == 1
    admin.set_rate("throttled", None)
    assert read_queue_rates(admin_server.queue_config) == {}


def test_unreachable_server_is_a_clear_error() -> None:
    with pytest.raises(AdminError) as info:
        Admin("127.0.0.1", 1, timeout=2).queues()
    assert info.value.status == 0 and "cannot reach" in str(info.value)


# -- the config-file editors ------------------------------------------------------------------------


def test_queue_config_edits_keep_other_entries_and_are_atomic(tmp_path: Path) -> None:
    path = tmp_path / "queues.json"
    path.write_text(json.dumps({"queues": [{"name": "keep", "queueConfig": {"maxJobsPerSecond": 1}, "note": "x"}]}))
    os.chmod(path, 0o640)
    inode = path.stat().st_ino
    set_queue_rate(path, "q", 10)
    assert path.stat().st_ino != inode, "replaced by rename, not rewritten in place"
    assert path.stat().st_mode & 0o777 == 0o640
    pause_queue(path, "q")
    assert read_queue_rates(path) == {"keep": 1, "q": 0}
    resume_queue(path, "q")
    assert read_queue_rates(path) == {"keep": 1, "q": 10}
    pause_queue(path, "new")  # no limit before: resume removes the entry again
    resume_queue(path, "new")
    assert read_queue_rates(path) == {"keep": 1, "q": 10}
    assert json.loads(path.read_text())["queues"][0]["note"] == "x"
    with pytest.raises(ValueError):
        set_queue_rate(path, "q", -1)
    assert [p.name for p in tmp_path.iterdir()] == ["queues.json"], "no temp file left behind"


def test_dequeue_only_in_the_mysql_format(tmp_path: Path) -> None:
    path = tmp_path / "mysql.json"
    shard = {"master": {"host": "db", "port": 3306}, "user": "u", "passwd": "p"}
    path.write_text(json.dumps({"pinlaterdb001": shard, "pinlaterdb002": {**shard, "dequeueOnly": False}}))
    assert set_shard_dequeue_only(path, "2") == ["pinlaterdb002"]
    assert set_shard_dequeue_only(path, "1d1") == ["pinlaterdb001"], "shard 1d1 lives on instance 1"
    doc = json.loads(path.read_text())
    assert doc["pinlaterdb001"]["dequeueOnly"] is True and doc["pinlaterdb002"]["dequeueOnly"] is True
    assert set_shard_dequeue_only(path, "pinlaterdb001", False) == ["pinlaterdb001"]
    assert json.loads(path.read_text())["pinlaterdb001"]["dequeueOnly"] is False
    with pytest.raises(KeyError, match="pinlaterdb001, pinlaterdb002"):
        set_shard_dequeue_only(path, "7")


@pytest.mark.redis
def test_marking_a_redis_shard_dequeue_only_reaches_the_running_server(
    tmp_path: Path, start_server: Callable[..., ServerProcess]
) -> None:
    from tests.support.redis_server import RedisServer

    with RedisServer(tmp_path / "redis-1") as one, RedisServer(tmp_path / "redis-2") as two:
        path = tmp_path / "redis.json"
        shards = [
            {"name": name, "shardConfig": {"master": {"host": r.host, "port": r.port}, "dequeueOnly": False}}
            for name, r in (("1", one), ("2", two))
        ]
        path.write_text(json.dumps({"shards": shards}))
        server = start_server("--backend", "redis", "--backend-config", str(path))
        assert set_shard_dequeue_only(path, "2") == ["2"]

        def draining() -> list[str]:
            body = http(server, "/api/queues").json()
            return [s["name"] for s in body["shards"] if s["dequeue_only"]]

        assert wait_for(draining, 10, what="shard 2 to be dequeue-only") == ["2"]
        with pytest.raises(KeyError):
            set_shard_dequeue_only(path, "3")


def test_bodies_that_are_not_json_text_or_numbers_are_bad_requests(admin_server: AdminServer) -> None:
    """Each of these was a 500 with a traceback in the log: JSON nested past Python's stack, a
    charset Python does not know, a number past a float (1e999), a lone surrogate in a text."""
    srv = admin_server.server
    admin_server.jobs.create("q")
    password = json.dumps(ADMIN_PASSWORD)
    huge = b"1" + b"0" * 400  # a float of it overflows
    cases = [
        (b'{"password": "x", "a": ' + b"[" * 20_000 + b"]" * 20_000 + b"}", "application/json", "is not JSON"),
        (b'{"password": "x"}', "application/json; charset=bogus", "is not JSON"),
        (b'{"password": %s, "queue": "q", "limit": 1e999}' % password.encode(), "application/json", "whole number"),
        (b'{"password": %s, "queue": "q", "rate": %s}' % (password.encode(), huge), "application/json", "64 bits"),
        (
            b'{"password": %s, "queue": "q", "name": "n", "interval_ms": 1000, "body": "\\ud800"}' % password.encode(),
            "application/json",
            "lone surrogate",
        ),
    ]
    paths = ("/api/retry", "/api/retry", "/api/retry", "/api/rate", "/api/schedules")
    for path, (body, content_type, reason) in zip(paths, cases, strict=True):
        answer = http(srv, path, body, content_type=content_type)
        assert (answer.status, reason in answer.json()["error"]) == (400, True), (path, answer.text)
    assert not any("Traceback" in line for line in srv.lines)
