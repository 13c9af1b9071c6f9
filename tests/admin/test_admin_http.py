"""The admin port over HTTP, against a real ``pinlater serve``: every reading is checked against
the actions taken through the Thrift port."""

from __future__ import annotations

import gzip
import json
import re
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from pinlater.backends.embedded.store import WriterCounts
from tests.admin.conftest import FAILED, PENDING, AdminServer, http
from tests.conftest import ADMIN_PASSWORD, original_password_hash
from tests.support.pinlater_server import ServerProcess
from tests.support.wait import wait_for


def ostrich_counters(text: str) -> dict[str, int]:
    """The ``counters:`` section of /stats.txt."""
    counters: dict[str, int] = {}
    section = ""
    for line in text.splitlines():
        if not line.startswith(" "):
            section = line.rstrip(":")
            continue
        name, _, value = line.strip().partition(": ")
        if section == "counters":
            counters[name] = int(value)
    return counters


def ostrich_section(text: str, wanted: str) -> dict[str, str]:
    out, section = {}, ""
    for line in text.splitlines():
        if not line.startswith(" "):
            section = line.rstrip(":")
        elif section == wanted:
            name, _, value = line.strip().partition(": ")
            out[name] = value
    return out


def prometheus(admin: AdminServer) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of /metrics, parsed by prometheus-client: (name, labels) -> value."""
    resp = admin.get("/metrics")
    assert resp.status == 200
    assert resp.headers["Content-Type"].startswith("text/plain; version=")
    samples = {}
    for family in text_string_to_metric_families(resp.text):
        for s in family.samples:
            samples[(s.name, frozenset(s.labels.items()))] = s.value
    return samples


def sample(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def test_the_embedded_writer_shows_its_commits_and_checkpoints(admin_server: AdminServer) -> None:
    """The Rust writer's counts (the default embedded store's): each write call after another
    commits once more, and no checkpoint fell back on the writer."""
    a = admin_server
    a.jobs.create("written")
    a.jobs.enqueue("written", b"first")
    before = prometheus(a)
    commits = sample(before, "pinlater_embedded_commits")
    assert commits >= 1, "the enqueue went through the Rust writer"
    for i in range(3):  # one after another: a commit each
        a.jobs.enqueue("written", b"job %d" % i)
    after = prometheus(a)
    assert sample(after, "pinlater_embedded_commits") >= commits + 3
    gauges = a.get("/stats.json").json()["gauges"]
    assert gauges["embedded_commits"] == sample(prometheus(a), "pinlater_embedded_commits")
    for name in WriterCounts._fields:
        assert ("pinlater_embedded_" + name, frozenset()) in after, name
    assert sample(after, "pinlater_embedded_wal_syncs") <= sample(after, "pinlater_embedded_commits")
    assert sample(after, "pinlater_embedded_checkpoint_fallbacks") == 0


def test_enqueue_ten_adds_ten_in_stats_txt_stats_json_and_prometheus(admin_server: AdminServer) -> None:
    a = admin_server
    a.jobs.create("metered")
    before_txt = ostrich_counters(a.get("/stats.txt").text)
    before_json = a.get("/stats.json").json()["counters"]
    before_prom = prometheus(a)

    a.jobs.enqueue("metered", *[b"job %d" % i for i in range(3)])
    made = a.jobs.enqueue("metered", *[b"job %d" % i for i in range(3, 10)])
    dequeued = a.jobs.dequeue("metered", 4)
    assert len(dequeued) == 4
    ok, bad = sorted(dequeued)[:3], sorted(dequeued)[3:]
    a.jobs.ack("metered", ok=ok, failed=bad)
    waiting = [d for d in made if d not in dequeued][:2]
    cancelled = a.post("/api/cancel", {"queue": "metered", "descriptors": waiting, "password": ADMIN_PASSWORD})
    assert cancelled.json()["cancelled"] == 2

    txt = ostrich_counters(a.get("/stats.txt").text)
    assert txt["metered_enqueue"] - before_txt.get("metered_enqueue", 0) == 10
    assert txt["metered_dequeue"] - before_txt.get("metered_dequeue", 0) == 4
    assert txt["metered_ack_succeeded"] == 3 and txt["metered_ack_failed"] == 1

    stats = a.get("/stats.json").json()
    assert stats["counters"]["metered_enqueue"] - before_json.get("metered_enqueue", 0) == 10
    assert stats["counters"]["metered_dequeue"] == 4
    assert stats["metrics"]["enqueue_jobs_msec"]["count"] >= 2
    for gauge in ("requests_in_flight", "connections_open", "shards_healthy", "shards"):
        assert gauge in stats["gauges"], gauge
    assert stats["gauges"]["shards_healthy"] == stats["gauges"]["shards"] == 1
    assert stats["gauges"]["connections_open"] >= 1

    prom = prometheus(a)
    enqueued = sample(prom, "pinlater_jobs_enqueued_total", queue="metered")
    assert enqueued - sample(before_prom, "pinlater_jobs_enqueued_total", queue="metered") == 10
    assert sample(prom, "pinlater_jobs_dequeued_total", queue="metered") == 4
    assert sample(prom, "pinlater_jobs_acked_total", queue="metered", result="succeeded") == 3
    assert sample(prom, "pinlater_jobs_acked_total", queue="metered", result="failed") == 1
    assert sample(prom, "pinlater_jobs_cancelled_total", queue="metered") == 2  # (not a family per queue)
    assert not any(name.startswith("pinlater_metered") for name, _ in prom)
    requests = sample(prom, "pinlater_requests_total", method="enqueue_jobs", outcome="ok")
    assert requests - sample(before_prom, "pinlater_requests_total", method="enqueue_jobs", outcome="ok") == 2
    assert sample(prom, "pinlater_request_duration_seconds_count", method="enqueue_jobs") == requests
    assert sample(prom, "pinlater_request_duration_seconds_bucket", method="enqueue_jobs", le="+Inf") == requests
    assert sample(prom, "pinlater_request_latency_seconds_count", method="enqueue_jobs") == requests
    assert sample(prom, "pinlater_request_latency_seconds", method="enqueue_jobs", quantile="0.99") > 0
    assert sample(prom, "pinlater_shards_healthy") == 1
    assert sample(prom, "pinlater_shard_healthy", shard="1") == 1
    assert ("pinlater_connections_open", frozenset()) in prom
    assert ("pinlater_requests_in_flight", frozenset()) in prom

    # The Ostrich text keeps its shape: timings with count and percentiles.
    timings = ostrich_section(a.get("/stats.txt").text, "metrics")
    assert re.fullmatch(
        r"\(count=\d+, average=[\d.]+, minimum=[\d.]+, maximum=[\d.]+, p50=.*p999=.*\)", timings["enqueue_jobs_msec"]
    )

    # The rate history accounts for every job: rate x seconds summed over its points.
    rates = a.get("/api/rates").json()
    series = rates["queues"]["metered"]
    assert sum(r * s for r, s in zip(series["enqueue"], rates["seconds"], strict=True)) == pytest.approx(10)
    assert sum(r * s for r, s in zip(series["ack_failed"], rates["seconds"], strict=True)) == pytest.approx(1)


def test_a_paused_queue_counts_rate_limited_dequeues(admin_server: AdminServer) -> None:
    a = admin_server
    a.jobs.create("paused_q")
    a.jobs.enqueue("paused_q", b"x")
    resp = a.post("/api/rate", {"queue": "paused_q", "action": "pause", "password": ADMIN_PASSWORD})
    assert resp.status == 200, resp.text
    assert resp.json()["rate"] == {"configured": 0.0, "effective": 0.0, "paused": True}
    with pytest.raises(a.jobs.t.PinLaterException) as info:
        a.jobs.dequeue("paused_q")
    assert info.value.errorCode == a.jobs.t.ErrorCode.DEQUEUE_RATE_LIMITED
    assert ostrich_counters(a.get("/stats.txt").text)["paused_q_dequeue_requests_rate_limited"] == 1
    assert sample(prometheus(a), "pinlater_dequeue_requests_rate_limited_total", queue="paused_q") == 1
    assert sample(prometheus(a), "pinlater_queue_rate_limit_jobs_per_second", queue="paused_q") == 0
    assert a.get("/api/queues").json()["queues"][0]["rate"]["paused"] is True


def test_healthz_and_readyz_on_the_embedded_store(admin_server: AdminServer) -> None:
    assert admin_server.get("/healthz").status == 200
    ready = admin_server.get("/readyz")
    assert ready.status == 200 and ready.text.startswith("ready")


@pytest.mark.redis
def test_readyz_names_the_shard_that_stops_answering(
    tmp_path: Path, start_server: Callable[..., ServerProcess]
) -> None:
    from tests.support.redis_server import RedisServer, write_shard_config

    with RedisServer(tmp_path / "redis-a") as a, RedisServer(tmp_path / "redis-b") as b:
        config = write_shard_config(tmp_path / "redis.json", {"a": a, "b": b})
        server = start_server(
            "--backend", "redis", "--backend-config", str(config), properties={"BACKEND_SOCKET_TIMEOUT_SECONDS": 1}
        )
        assert http(server, "/readyz").status == 200
        b.kill()
        resp = http(server, "/readyz")
        assert resp.status == 503
        assert "b (" in resp.text and "a (" not in resp.text, resp.text
        assert http(server, "/healthz").status == 200, "liveness does not depend on the shards"


def test_queue_counts_by_state_and_priority(admin_server: AdminServer) -> None:
    a = admin_server
    a.jobs.create("counted")
    failed = a.jobs.fail_one("counted", b"doomed")
    a.jobs.enqueue("counted", b"a", b"b", priority=1)
    a.jobs.enqueue("counted", b"c", priority=2)
    a.jobs.enqueue("counted", b"later", priority=3, runAfterTimestampMillis=2**41)
    (claimed,) = a.jobs.dequeue("counted", 1)
    (done,) = a.jobs.dequeue("counted", 1)
    a.jobs.ack("counted", ok=[done])
    body = a.get("/api/queues?queue=counted").json()
    assert body["priorities"] == 3 and body["password_set"] is True
    assert body["rate_config_path"] == str(a.queue_config)
    (q,) = body["queues"]
    assert q["name"] == "counted"
    assert q["counts"] == {
        "pending": [0, 1, 0],
        "pending_future": [0, 0, 1],
        "in_progress": [1, 0, 0],
        "succeeded": [1, 0, 0],
        "failed": [1, 0, 0],
    }
    assert q["rate"] == {"configured": None, "effective": None, "paused": False}
    assert claimed != done != failed
    assert a.get("/api/queues?queue=nope").status == 404


def test_scan_failed_jobs_and_look_one_up_with_its_body_as_text_and_hex(admin_server: AdminServer) -> None:
    a = admin_server
    a.jobs.create("scanned")
    body = b"caf\xc3\xa9 \xff\x00 <b>bold</b>"
    first = a.jobs.fail_one("scanned", b"first")
    second = a.jobs.fail_one("scanned", body, status="<img src=x onerror=alert(1)> exploded")
    jobs = a.get("/api/scan?queue=scanned&state=failed").json()["jobs"]
    assert [j["descriptor"] for j in jobs] == [second, first], "newest first"
    assert jobs[0]["custom_status"] == "<img src=x onerror=alert(1)> exploded"
    assert (jobs[0]["attempts_allowed"], jobs[0]["attempts_remaining"], jobs[0]["state"]) == (1, 0, "failed")
    assert a.get("/api/scan?queue=scanned&state=pending").json()["jobs"] == []
    assert a.get("/api/scan?queue=scanned&state=bogus").status == 400

    job = a.get(f"/api/lookup?descriptor={second}").json()["job"]
    assert job["body_text"] == "café \ufffd\x00 <b>bold</b>"
    assert job["body_hex"] == body.hex(" ")
    assert job["body_size"] == len(body)
    queue, shard, priority, local_id = second.split(":")
    spelled = a.get(f"/api/lookup?descriptor={queue}:{shard}:{priority}:0{local_id}").json()["job"]
    assert (spelled["descriptor"], spelled["body_size"]) == (second, len(body)), "a spelling of its own finds it"
    assert a.get("/api/lookup?descriptor=scanned:s1:p1:999999").status == 404
    assert a.get("/api/lookup?descriptor=not-a-descriptor").status == 400


def test_actions_need_the_admin_password_and_do_what_they_say(admin_server: AdminServer) -> None:
    a = admin_server
    a.jobs.create("acted")
    a.jobs.fail_one("acted", b"one")
    a.jobs.fail_one("acted", b"two")

    for password in (None, "", "wrong"):
        resp = a.post("/api/retry", {"queue": "acted", "password": password})
        assert resp.status == 403 and "password" in resp.json()["error"]
        assert a.post("/api/delete", {"queue": "acted", "state": "failed", "password": password}).status == 403
    assert a.jobs.count("acted", FAILED) == 2, "a refused action does nothing"
    assert http(a.server, "/api/retry", b"queue=acted", content_type="application/x-www-form-urlencoded").status == 415

    resp = a.post("/api/delete", {"queue": "acted", "state": "failed", "regex": "^tw", "password": ADMIN_PASSWORD})
    assert resp.json() == {"queue": "acted", "deleted": 1}
    resp = a.post("/api/retry", {"queue": "acted", "priority": 1, "attempts": 3, "password": ADMIN_PASSWORD})
    assert resp.json() == {"queue": "acted", "retried": 1}
    assert (a.jobs.count("acted", FAILED), a.jobs.count("acted", PENDING)) == (0, 1)
    assert a.post("/api/retry", {"queue": "missing", "password": ADMIN_PASSWORD}).status == 404
    assert a.post("/api/delete", {"queue": "acted", "state": "x", "password": ADMIN_PASSWORD}).status == 400
    assert any("admin retry refused: wrong admin password" in line for line in a.server.lines)
    assert any("admin delete on acted from 127.0.0.1: deleted 1 FAILED jobs" in line for line in a.server.lines)


def test_a_hash_that_is_not_a_sha256_matches_no_password_and_says_so(
    start_server: Callable[..., ServerProcess],
) -> None:
    """The original took any ADMIN_PASSWORD_HASH, so a typo matched nothing, silently; a value
    not text as ASCII made the comparison raise (a 500). Now: refused (403), and logged at start."""
    srv = start_server(properties={"ADMIN_PASSWORD_HASH": "c0ffee-é"})
    for password in ("", "c0ffee-é", ADMIN_PASSWORD):
        assert http(srv, "/api/retry", {"queue": "q", "password": password}).status == 403
    assert any("ADMIN_PASSWORD_HASH is not 64 hex digits" in line for line in srv.lines)


def test_a_peer_guessing_the_password_costs_no_walk_of_its_body_and_few_log_lines(admin_server: AdminServer) -> None:
    """The password is checked before the body is walked (a body that fails the walk's checks is
    refused for its password first), and wrong guesses write a line or two, where each wrote one.
    Past ten wrong ones in a minute an address is answered 429, its bodies unread, for the rest
    of that minute, the right password too: a guesser had no bound but its request rate."""
    a = admin_server
    a.jobs.create("guessed")
    resp = a.post("/api/retry", {"queue": "guessed", "password": ADMIN_PASSWORD, "n": [2**70]})
    assert resp.status == 400 and "past 64 bits" in resp.json()["error"], "the walk still refuses, with the password"
    before = len(a.server.lines)
    answers = []
    for i in range(30):
        resp = a.post("/api/retry", {"queue": "guessed", "password": f"guess-{i}", "n": [2**70] * 100})
        answers.append((resp.status, resp.json()["error"].split(":")[0]))
    assert answers[:10] == [(403, "wrong admin password")] * 10
    assert answers[10:] == [(429, "too many wrong admin passwords from 127.0.0.1")] * 20
    lines = [line for line in list(a.server.lines)[before:] if "wrong admin password" in line]
    assert 1 <= len(lines) <= 3, lines  # (one per 5 s: a slow machine may take longer than that)
    assert a.post("/api/retry", {"queue": "guessed", "password": ADMIN_PASSWORD}).status == 429


def test_guesses_sent_at_once_get_ten_tries_too(admin_server: AdminServer) -> None:
    """Requests in flight together passed the check made before their bodies were read: each is
    checked again right before its password is, so 30 at once still get ten answers of 403."""
    a = admin_server
    a.jobs.create("rushed")
    with ThreadPoolExecutor(30) as pool:
        statuses = list(
            pool.map(lambda i: a.post("/api/retry", {"queue": "rushed", "password": f"g{i}"}).status, range(30))
        )
    assert sorted(statuses) == [403] * 10 + [429] * 20


def test_compressed_action_bodies_are_refused_unread(admin_server: AdminServer) -> None:
    """The admin port inflates no body: a compressed action (here a right one, and a gzip of
    64 MiB of JSON in 64 KB) gets a 415 and does nothing. aiohttp used to inflate a body as it
    came and all the rest of it after refusing it, on the event loop every client shares."""
    a = admin_server
    a.jobs.create("packed")
    a.jobs.fail_one("packed", b"one")
    action = json.dumps({"queue": "packed", "state": "failed", "password": ADMIN_PASSWORD}).encode()
    bomb = zlib.compressobj(wbits=31)  # (gzip)
    packed_bomb = bomb.compress(b'{"queue": "packed", "pad": "') + b"".join(
        bomb.compress(b" " * (1 << 20)) for _ in range(64)
    )
    packed_bomb += bomb.compress(b'"}') + bomb.flush()
    for encoding, body in (("gzip", gzip.compress(action)), ("deflate", zlib.compress(action)), ("gzip", packed_bomb)):
        resp = http(a.server, "/api/delete", body, headers={"Content-Encoding": encoding})
        assert resp.status == 415, (encoding, resp.status, resp.body[:200])
        assert "uncompressed" in resp.json()["error"]
    assert a.jobs.count("packed", FAILED) == 1, "a refused action does nothing"
    resp = http(a.server, "/api/delete", action, headers={"Content-Encoding": "identity"})
    assert resp.json() == {"queue": "packed", "deleted": 1}


def test_rate_changes_rewrite_the_watched_queue_config(admin_server: AdminServer) -> None:
    a = admin_server
    a.jobs.create("limited")
    a.queue_config.write_text(json.dumps({"queues": [{"name": "other", "queueConfig": {"maxJobsPerSecond": 7}}]}))

    def post(**body: Any) -> Any:
        resp = a.post("/api/rate", {"queue": "limited", "password": ADMIN_PASSWORD, **body})
        assert resp.status == 200, resp.text
        return resp.json()["rate"]

    def configured() -> dict[str, float]:
        entries = json.loads(a.queue_config.read_text())["queues"]
        return {e["name"]: e["queueConfig"]["maxJobsPerSecond"] for e in entries}

    assert a.post("/api/rate", {"queue": "limited", "rate": 5, "password": "nope"}).status == 403
    assert configured() == {"other": 7}
    assert post(action="set", rate=5)["configured"] == 5
    assert configured() == {"other": 7, "limited": 5}
    assert post(action="pause") == {"configured": 0, "effective": 0, "paused": True}
    assert configured() == {"other": 7, "limited": 0}
    assert post(action="resume")["configured"] == 5
    assert post(action="unlimit")["configured"] is None
    assert configured() == {"other": 7}
    assert (
        a.post("/api/rate", {"queue": "limited", "action": "set", "rate": -1, "password": ADMIN_PASSWORD}).status == 400
    )


def test_rate_changes_are_refused_without_a_queue_config(
    start_server: Callable[..., ServerProcess],
) -> None:
    server = start_server(properties={"ADMIN_PASSWORD_HASH": original_password_hash(ADMIN_PASSWORD)})
    resp = http(server, "/api/rate", {"queue": "q", "action": "pause", "password": ADMIN_PASSWORD})
    assert resp.status == 409
    assert "QUEUE_CONFIG_FILE_PATH" in resp.json()["error"]
    assert http(server, "/api/queues").json()["rate_config_path"] is None


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.script_text = ""
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._in_script = tag == "script"

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self.script_text += data


def _assets(server: ServerProcess) -> Iterator[tuple[str, str]]:
    for path in ("/", "/static/dashboard.js", "/static/jobcontrol.js", "/static/dashboard.css"):
        resp = http(server, path)
        assert resp.status == 200, path
        yield path, resp.text


def test_dashboard_is_self_contained_with_a_strict_content_security_policy(admin_server: AdminServer) -> None:
    for path in ("/", "/static/dashboard.js", "/api/queues", "/stats.txt"):
        csp = admin_server.get(path).headers["Content-Security-Policy"]
        assert "default-src 'self'" in csp and "script-src 'self'" in csp and "unsafe-inline" not in csp
    assert admin_server.get("/static/../admin.py").status == 404
    assert admin_server.get("/static/nothing.js").status == 404
    for path, text in _assets(admin_server.server):
        assert not re.search(r"(https?:)?//[a-z0-9.-]+\.[a-z]{2,}/", text, re.I), f"{path} loads from elsewhere"
        assert "innerHTML" not in text and "insertAdjacentHTML" not in text and "document.write" not in text
    parser = _Tags()
    parser.feed(admin_server.get("/").text)
    scripts = [attrs for tag, attrs in parser.tags if tag == "script"]
    assert scripts and all(attrs.get("src") for attrs in scripts)
    assert not parser.script_text.strip(), "no inline script"
    handlers = [(tag, name) for tag, attrs in parser.tags for name in attrs if name.startswith("on")]
    assert not handlers, f"inline event handlers: {handlers}"


def test_admin_actions_are_refused_when_no_password_hash_is_set(start_server: Callable[..., ServerProcess]) -> None:
    server = start_server()
    resp = http(server, "/api/retry", {"queue": "q", "password": ""})
    assert resp.status == 403 and "ADMIN_PASSWORD_HASH" in resp.json()["error"]
    wait_for(lambda: http(server, "/api/queues").json()["password_set"] is False, 5)


def _peak_rss_bytes(pid: int) -> int:
    """The process's peak resident set (VmHWM in /proc/PID/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def test_lookups_of_a_big_job_read_its_body_a_few_at_a_time(admin_server: AdminServer) -> None:
    """Each admin lookup reads the whole body to show its first 64 KiB, so they run BODY_LOOKUPS
    at a time: 32 at once of a 12 MiB job raise the server's peak memory by about two bodies
    each (96 MiB here), not by as many as the port takes at once (227 MiB unbounded), and each
    is answered in full."""
    from concurrent.futures import ThreadPoolExecutor

    from pinlater.server.admin_api import BODY_LOOKUPS, BODY_TEXT_LIMIT

    a = admin_server
    a.jobs.create("big")
    body = b"x" * (12 << 20)
    (descriptor,) = a.jobs.enqueue("big", body)
    pid = a.server.pid
    first = a.get(f"/api/lookup?descriptor={descriptor}").json()["job"]  # one alone: the baseline's
    assert (first["body_size"], len(first["body_text"]), first["body_text_truncated"]) == (
        len(body),
        BODY_TEXT_LIMIT,
        True,
    )
    before = _peak_rss_bytes(pid)
    with ThreadPoolExecutor(32) as pool:
        answers = list(pool.map(lambda _: a.get(f"/api/lookup?descriptor={descriptor}"), range(32)))
    assert [r.status for r in answers] == [200] * 32
    assert all(r.json()["job"]["body_size"] == len(body) for r in answers)
    grew = _peak_rss_bytes(pid) - before
    # (a lookup holds about two copies of the body: the store's read and its bytes)
    assert grew < (3 * BODY_LOOKUPS) * len(body), f"peak memory grew {grew >> 20} MiB"


def test_malformed_requests_write_a_short_line_per_five_seconds(admin_server: AdminServer) -> None:
    """aiohttp logs every malformed request with its traceback, which echoes the request's bytes:
    a peer sending 8 KB headers wrote 19 MB of log a second. Now one cut line per 5 s, with a
    count of the others."""
    import socket

    srv = admin_server.server
    before = len(srv.lines)
    bad = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: " + b"1" * 8000 + b"x\r\n\r\n"
    for _ in range(40):
        with socket.create_connection(("127.0.0.1", srv.admin_port), timeout=10) as sock:
            sock.sendall(bad)
            answer = sock.recv(4096)
            assert answer.startswith(b"HTTP/1.") and b" 400 " in answer[:20], answer[:200]
    assert admin_server.get("/healthz").status == 200
    lines = list(srv.lines)[before:]
    assert 1 <= len(lines) <= 3, lines  # (one per 5 s: a slow machine may take longer than that)
    assert all(len(line) < 600 for line in lines), lines
    assert "1" * 400 not in "".join(lines)


def test_the_malformed_request_filter_passes_the_servers_own_faults_whole() -> None:
    """Only records of what a peer causes are throttled and cut; a fault of the server's goes
    out whole, traceback and all, however many malformed requests came just before."""
    import logging
    import sys

    from aiohttp.http_exceptions import BadHttpMessage

    from pinlater.logthrottle import ThrottleFilter

    throttle = ThrottleFilter((BadHttpMessage,))

    def record(exc: BaseException) -> logging.LogRecord:
        try:
            raise exc
        except BaseException:
            info = sys.exc_info()
        return logging.LogRecord("aiohttp.server", logging.ERROR, __file__, 1, "Error handling request", None, info)

    first = record(BadHttpMessage("x" * 5000))
    assert throttle.filter(first) and first.exc_info is None and len(first.getMessage()) < 400
    assert not throttle.filter(record(BadHttpMessage("again")))  # within 5 s: counted, not written
    fault = record(RuntimeError("a bug of ours"))
    assert throttle.filter(fault) and fault.exc_info is not None and fault.getMessage() == "Error handling request"


def test_scan_pages_are_made_a_few_at_a_time_off_the_loop(admin_server: AdminServer) -> None:
    """A page of 1,000 jobs with 5,000-character statuses is 5 MB of JSON, and its jobs' dicts
    more (about 11 ms of work): made SCAN_PAGES at a time on a worker thread, 24 asked at once are
    all answered whole and alike, the server's peak memory grows by a few pages, not 24, and the
    Thrift port's calls go on meanwhile."""
    from concurrent.futures import ThreadPoolExecutor

    from pinlater.server.admin_api import SCAN_PAGES

    a = admin_server
    a.jobs.create("wide")
    status = "s" * 5000
    for _ in range(10):
        a.jobs.enqueue("wide", *[b"x"] * 100, customStatus=status)
    one = a.get("/api/scan?queue=wide&state=pending&limit=1000")
    page = len(one.body)
    assert one.status == 200 and len(one.json()["jobs"]) == 1000 and page > 5_000_000
    pid = a.server.pid
    before = _peak_rss_bytes(pid)
    with ThreadPoolExecutor(24) as pool:
        answers = list(pool.map(lambda _: a.get("/api/scan?queue=wide&state=pending&limit=1000"), range(24)))
        assert a.jobs.enqueue("wide", b"meanwhile"), "the Thrift port is served meanwhile"
    assert [r.status for r in answers] == [200] * 24
    assert all(r.body == one.body for r in answers)
    grew = _peak_rss_bytes(pid) - before
    assert grew < 6 * SCAN_PAGES * page, f"peak memory grew {grew >> 20} MiB for pages of {page >> 20} MiB"
