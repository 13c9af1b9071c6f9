"""Job control through the admin HTTP API (issue 18), against a real server on the embedded store:
cancel by descriptor, paged scans, queue depth in the queue list, schedules, and paced redrives.
What the store holds afterwards is checked with the Apache-generated Thrift client."""

from __future__ import annotations

import base64
import socket
import threading
import time
from typing import Any

import pytest

from pinlater.admin import Admin, AdminError, PasswordRefused
from pinlater.redrive import BATCH_SECONDS, MAX_RUNNING, NOTE
from pinlater.server.admin_api import LARGE_POSTS, POST_BYTES
from pinlater.server.admin_jobcontrol import BODY_LISTINGS, LISTING_PART, MAX_SCHEDULE_BODY, SCHEDULE_POST_BYTES
from tests.admin.conftest import FAILED, PENDING, AdminServer, http, start_admin_server
from tests.conftest import ADMIN_PASSWORD
from tests.support.wait import wait_for


@pytest.fixture
def admin(admin_server: AdminServer) -> Admin:
    return Admin("127.0.0.1", admin_server.server.admin_port, password=ADMIN_PASSWORD)


def make_failed(admin_server: AdminServer, queue: str, n: int, priority: int = 1) -> list[str]:
    """``n`` jobs of ``queue`` that ended FAILED (one attempt, acked failed). The queue must have
    no other runnable job."""
    jobs = admin_server.jobs
    descriptors = jobs.enqueue(queue, *[f"job-{i}".encode() for i in range(n)], numAttemptsAllowed=1, priority=priority)
    got = jobs.dequeue(queue, n)
    assert sorted(got) == sorted(descriptors)
    jobs.ack(queue, failed=descriptors, status="boom")
    return descriptors


# -- cancel -------------------------------------------------------------------------------------


def test_cancel_by_descriptor_needs_the_password_and_ends_pending_jobs_failed(
    admin_server: AdminServer, admin: Admin
) -> None:
    jobs = admin_server.jobs
    jobs.create("cancel_q")
    jobs.create("other_q")
    first, second = jobs.enqueue("cancel_q", b"a", b"b")
    (elsewhere,) = jobs.enqueue("other_q", b"c")

    stranger = Admin("127.0.0.1", admin_server.server.admin_port)
    with pytest.raises(PasswordRefused):
        stranger.cancel("cancel_q", [first])
    with pytest.raises(AdminError) as refused:
        admin.cancel("cancel_q", [first, elsewhere])
    assert refused.value.status == 400 and "other_q" in refused.value.message
    with pytest.raises(AdminError) as bad:
        admin.cancel("cancel_q", ["not a descriptor"])
    assert bad.value.status == 400
    assert jobs.count("cancel_q", PENDING) == 2, "a refused cancel changed nothing"

    assert admin.cancel("cancel_q", [first, "cancel_q:s1:p1:999999"]) == 1
    assert admin.cancel("cancel_q", [first]) == 0, "a finished job is left alone"
    job = admin.lookup(first)
    assert job is not None
    assert job["state"] == "failed" and job["attempts_remaining"] == 0 and job["custom_status"].endswith("cancelled")
    assert (jobs.count("cancel_q", PENDING), jobs.count("cancel_q", FAILED)) == (1, 1)
    assert admin.lookup(second)["state"] == "pending"  # type: ignore[index]


# -- scans that page ----------------------------------------------------------------------------


def test_scan_pages_with_the_continuation_until_it_is_null(admin_server: AdminServer, admin: Admin) -> None:
    jobs = admin_server.jobs
    jobs.create("paged")
    now = int(time.time() * 1000)
    made = set()
    for i in range(7):  # distinct run-after times: the scan's order is newest run-after first
        made |= set(jobs.enqueue("paged", f"job-{i}".encode(), runAfterTimestampMillis=now - 60_000 + i * 1000))

    seen: list[str] = []
    pages = 0
    continuation = None
    while True:
        page, continuation = admin.scan_page("paged", "pending", limit=3, continuation=continuation)
        pages += 1
        seen += [job["descriptor"] for job in page]
        assert len(page) <= 3
        if continuation is None:
            break
        assert pages < 10, "the scan never ended"
    assert sorted(seen) == sorted(made) and len(seen) == 7, "every job exactly once"
    assert pages == 3

    resp = admin_server.get("/api/scan?queue=paged&state=pending&limit=3&continuation=1.bogus.x")
    assert resp.status == 400 and "continuation" in resp.json()["error"]
    # A continuation of another query is refused rather than scanning something else.
    _, first = admin.scan_page("paged", "pending", limit=3)
    assert first is not None
    with pytest.raises(AdminError) as other:
        admin.scan_page("paged", "failed", limit=3, continuation=first)
    assert other.value.status == 400


# -- queue depth --------------------------------------------------------------------------------


def test_queue_list_shows_the_oldest_ready_age_and_expired_jobs(admin_server: AdminServer, admin: Admin) -> None:
    jobs = admin_server.jobs
    jobs.create("deep")
    jobs.create("idle")
    now = int(time.time() * 1000)
    jobs.enqueue("deep", b"old", runAfterTimestampMillis=now - 120_000)
    jobs.enqueue("deep", b"new")
    (soon,) = jobs.enqueue("deep", b"expires", priority=2, expireAtTimestampMillis=now + 300)

    def row(queue: str) -> dict[str, Any]:
        return next(q for q in admin.overview()["queues"] if q["name"] == queue)

    assert row("deep")["oldest_ready_age_ms"] >= 120_000
    assert row("idle")["oldest_ready_age_ms"] is None and row("idle")["expired"] == 0
    assert admin.depth("deep")["oldest_ready_age_ms"] >= 120_000  # the one-queue view, counted now

    # Past its expiry the job is never handed out: it ends FAILED "expired", and is counted.
    wait_for(lambda: int(time.time() * 1000) > now + 300, 5, what="the expiry to pass")
    assert soon not in jobs.dequeue("deep", 10)
    wait_for(lambda: row("deep")["expired"] == 1, 10, what="the expired count in the queue list")
    assert admin.depth("deep")["expired"] == 1
    assert admin.lookup(soon)["custom_status"].endswith("expired")  # type: ignore[index]


# -- schedules ----------------------------------------------------------------------------------


def test_schedules_are_listed_set_paused_resumed_and_deleted_behind_the_password(
    admin_server: AdminServer, admin: Admin
) -> None:
    jobs = admin_server.jobs
    jobs.create("sched")
    assert admin.schedules("sched") == []
    with pytest.raises(PasswordRefused):
        Admin("127.0.0.1", admin_server.server.admin_port).set_schedule("sched", "nightly", cron="0 3 * * *", body="x")

    before = int(time.time() * 1000)
    nightly = admin.set_schedule(
        "sched", "nightly", cron="0 3 * * *", body="build report", priority=2, attempts=3, group_key="g1"
    )
    assert nightly["next_run_ms"] > before and nightly["next_run_ms"] % 60_000 == 0
    assert (nightly["paused"], nightly["priority"], nightly["attempts"], nightly["group_key"]) == (False, 2, 3, "g1")
    admin.set_schedule("sched", "binary", interval_ms=3_600_000, body=b"\x00\xff", paused=True)
    listed = {s["name"]: s for s in admin.schedules("sched")}
    assert list(listed) == ["binary", "nightly"]
    assert listed["binary"]["paused"] is True and listed["binary"]["body_base64"] == "AP8="
    assert listed["binary"]["interval_ms"] == 3_600_000 and listed["binary"]["cron"] is None
    assert listed["nightly"]["body_text"] == "build report" and listed["nightly"]["cron"] == "0 3 * * *"
    # The dashboard's listing leaves the whole bodies out, and asks for one schedule's to edit it.
    brief = admin_server.get("/api/schedules?queue=sched&bodies=0").json()["schedules"]
    assert [(s["name"], s["body_base64"], s["body_text"]) for s in brief] == [
        ("binary", None, "\x00\ufffd"),
        ("nightly", None, "build report"),
    ]
    one = admin_server.get("/api/schedules?queue=sched&name=binary").json()["schedules"]
    assert [(s["name"], s["body_base64"]) for s in one] == [("binary", "AP8=")]
    assert admin_server.get("/api/schedules?queue=sched&name=nope").json()["schedules"] == []

    paused = admin.pause_schedule("sched", "nightly")
    assert paused["paused"] is True
    kept = {k: paused[k] for k in ("cron", "priority", "attempts", "group_key", "body_text")}
    assert kept == {"cron": "0 3 * * *", "priority": 2, "attempts": 3, "group_key": "g1", "body_text": "build report"}
    assert admin.resume_schedule("sched", "nightly")["paused"] is False
    assert {s["name"]: s["paused"] for s in admin.schedules("sched")} == {"binary": True, "nightly": False}

    for bad, words in (
        ({"cron": "every day"}, "cron"),
        ({"cron": "* * * * *", "interval_ms": 60_000}, "exactly one"),
        ({"interval_ms": 10}, "intervalMillis"),
        ({"cron": "* * * * *", "priority": 9}, "priority"),
    ):
        with pytest.raises(AdminError) as refused:
            admin.set_schedule("sched", "bad", body="x", **bad)
        assert refused.value.status == 400 and words in refused.value.message, refused.value.message
    resp = admin_server.post(
        "/api/schedules", {"queue": "sched", "name": "x", "cron": "* * * * *", "password": ADMIN_PASSWORD}
    )
    assert resp.status == 400 and "body" in resp.json()["error"]
    with pytest.raises(AdminError) as missing:
        admin.pause_schedule("sched", "nope")
    assert missing.value.status == 404
    with pytest.raises(AdminError) as no_queue:
        admin.schedules("no_such_queue")
    assert no_queue.value.status == 404

    admin.delete_schedule("sched", "binary")
    assert [s["name"] for s in admin.schedules("sched")] == ["nightly"]
    with pytest.raises(AdminError) as gone:
        admin.delete_schedule("sched", "binary")
    assert gone.value.status == 404


def long_post_started(port: int) -> socket.socket:
    """A schedule upsert whose long body (past POST_BYTES) has only begun: it waits for, or holds,
    one of the LARGE_POSTS turns."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    head = "POST /api/schedules HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    sock.sendall(f"{head}Content-Length: {2 * POST_BYTES}\r\n\r\n{{".encode())
    return sock


def test_a_long_body_that_waits_past_the_body_timeout_for_its_turn_is_answered_503(
    tmp_path: Any, start_server: Any, open_client: Any, ttypes: Any
) -> None:
    """Trickling peers that take the LARGE_POSTS turns one after another (each holds one for
    ADMIN_BODY_TIMEOUT_SECONDS, 3 s here, from its turn) make a real upload behind them wait for
    a turn at most that long, then answer 503; it had waited for all of them (118 s, near a
    request's cap). Two peers hold the turns from 0 s, two more wait from 1.5 s and take them at
    3 s, the upload waits from 2 s: answered 503 at 5 s, where its turn would come at 6 s."""
    a = start_admin_server(tmp_path, start_server, open_client, ttypes, ADMIN_BODY_TIMEOUT_SECONDS=3)
    a.jobs.create("big")
    port = a.server.admin_port
    trickling = [long_post_started(port) for _ in range(LARGE_POSTS)]
    try:
        time.sleep(1.5)  # (arrivals in this order are the scenario, not a wait for a condition)
        trickling += [long_post_started(port) for _ in range(LARGE_POSTS)]
        time.sleep(0.5)
        started = time.monotonic()
        upload = {"queue": "big", "name": "real", "interval_ms": 60_000, "body": "y" * (2 * POST_BYTES)}
        resp = http(a.server, "/api/schedules", {**upload, "password": ADMIN_PASSWORD})
        waited = time.monotonic() - started
        assert resp.status == 503 and "long bodies are being read" in resp.json()["error"], (resp.status, waited)
        assert 2.5 < waited < 3.9, waited
    finally:
        for sock in trickling:
            sock.close()


def test_a_schedule_body_of_a_mebibyte_is_set_through_the_api_and_long_bodies_wait_their_turn(
    admin_server: AdminServer, admin: Admin
) -> None:
    jobs = admin_server.jobs
    jobs.create("big")
    body = bytes(range(256)) * (MAX_SCHEDULE_BODY // 256)
    admin.set_schedule("big", "whole", interval_ms=3_600_000, body=body)
    (listed,) = admin.schedules("big")
    assert base64.b64decode(listed["body_base64"]) == body
    with pytest.raises(AdminError) as over:
        admin.set_schedule("big", "over", interval_ms=3_600_000, body=body + b"!")
    assert over.value.status == 400 and str(MAX_SCHEDULE_BODY) in over.value.message
    port = admin_server.server.admin_port
    past = admin_server.post("/api/schedules", {"queue": "big", "name": "x", "body": "y" * SCHEDULE_POST_BYTES})
    assert past.status == 413 and str(SCHEDULE_POST_BYTES) in past.json()["error"]
    # Other actions keep the short bound.
    rate = admin_server.post("/api/rate", {"queue": "big", "rate": 1, "pad": "y" * POST_BYTES})
    assert rate.status == 413 and str(POST_BYTES) in rate.json()["error"]

    # Long bodies are read LARGE_POSTS at a time: peers that send a long body slowly hold those
    # turns, not the other actions, and the next long body is read once a turn is given back.
    holders = [long_post_started(port) for _ in range(LARGE_POSTS)]
    waiting = threading.Thread(
        target=admin.set_schedule, args=("big", "next"), kwargs={"interval_ms": 60_000, "body": body}
    )
    waiting.start()
    assert admin.schedules("big")[0]["name"] == "whole"  # a short request is answered meanwhile
    waiting.join(0.5)
    assert waiting.is_alive(), "a long body was read while every turn was held"
    assert "next" not in [s["name"] for s in admin.schedules("big")]
    holders.pop().close()
    waiting.join(30)
    assert not waiting.is_alive()
    assert sorted(s["name"] for s in admin.schedules("big")) == ["next", "whole"]
    for sock in holders:
        sock.close()


def test_listings_with_bodies_are_sent_a_few_at_a_time(
    tmp_path: Any, start_server: Any, open_client: Any, ttypes: Any
) -> None:
    """Peers that ask for a queue's schedules with their bodies (6 MiB here, 16 MB of JSON) and
    read nothing hold BODY_LISTINGS turns, not a reply each in memory (250 of them had taken the
    server to 6.5 GB): the next one waits ADMIN_BODY_TIMEOUT_SECONDS for a turn and is answered
    503, a listing without bodies is answered meanwhile, and once the peers go a turn is free."""
    a = start_admin_server(tmp_path, start_server, open_client, ttypes, ADMIN_BODY_TIMEOUT_SECONDS=1)
    admin = Admin("127.0.0.1", a.server.admin_port, password=ADMIN_PASSWORD)
    a.jobs.create("big")
    body = bytes(range(256)) * (MAX_SCHEDULE_BODY // 256)
    for i in range(6):
        admin.set_schedule("big", f"s{i}", interval_ms=3_600_000, body=body)

    def stalled() -> socket.socket:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # (before connecting: a small window)
        sock.settimeout(30)
        sock.connect(("127.0.0.1", a.server.admin_port))
        sock.sendall(b"GET /api/schedules?queue=big HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert sock.recv(64).startswith(b"HTTP/1.1 200"), "its listing is being sent"
        return sock

    holders = [stalled() for _ in range(BODY_LISTINGS)]
    try:
        started = time.monotonic()
        refused = http(a.server, "/api/schedules?queue=big")
        assert refused.status == 503 and "bodies=0" in refused.json()["error"]
        assert time.monotonic() - started < 20
        light = http(a.server, "/api/schedules?queue=big&bodies=0")
        assert light.status == 200 and len(light.json()["schedules"]) == 6
        one = http(a.server, "/api/schedules?queue=big&name=s0")  # (one schedule's: turns of its own)
        assert one.status == 200 and base64.b64decode(one.json()["schedules"][0]["body_base64"]) == body
        head = http(a.server, "/api/schedules?queue=big", method="HEAD")  # (its turn, as a GET's)
        assert head.status == 503 and head.body == b""
    finally:
        for sock in holders:
            sock.close()
    whole = wait_for(
        lambda: (got := http(a.server, "/api/schedules?queue=big")).status == 200 and got,
        timeout=30,
        what="a turn to be free once the stalled peers went",
    )
    assert [base64.b64decode(s["body_base64"]) for s in whole.json()["schedules"]] == [body] * 6


def test_a_listing_of_more_schedules_than_a_part_is_whole_and_in_order(admin_server: AdminServer, admin: Admin) -> None:
    admin_server.jobs.create("many")
    names = sorted(f"s{i:03d}" for i in range(LISTING_PART + 50))
    for name in names:
        admin.set_schedule("many", name, interval_ms=3_600_000, body=f"job of {name}")
    resp = admin_server.get("/api/schedules?queue=many")
    assert resp.status == 200
    listed = resp.json()
    assert listed["queue"] == "many" and isinstance(listed["now_ms"], int)
    assert [s["name"] for s in listed["schedules"]] == names
    assert [s["body_text"] for s in listed["schedules"]] == [f"job of {name}" for name in names]


def test_an_interval_schedule_set_through_the_api_fires(admin_server: AdminServer, admin: Admin) -> None:
    jobs = admin_server.jobs
    jobs.create("ticks")
    admin.set_schedule("ticks", "every_second", interval_ms=1000, body="tick", custom_status="from a schedule")
    got = wait_for(lambda: jobs.dequeue("ticks", 1), 10, what="the schedule's first job")
    assert list(got.values()) == [b"tick"]


# -- redrives -----------------------------------------------------------------------------------


def redrive_ended(admin: Admin, redrive_id: str) -> dict[str, Any]:
    def ended() -> dict[str, Any] | None:
        r = admin.redrive(redrive_id)
        return r if r["state"] != "running" else None

    return wait_for(ended, 30, interval=0.05, what=f"redrive {redrive_id} to end")


def test_a_redrive_moves_failed_jobs_at_its_rate_up_to_its_limit(admin_server: AdminServer, admin: Admin) -> None:
    admin_server.jobs.create("redrive_q")
    descriptors = make_failed(admin_server, "redrive_q", 40)
    rate, limit = 20.0, 30
    started = admin.start_redrive("redrive_q", rate, limit=limit, attempts=2)
    assert started["state"] == "running" and started["failed_at_start"] == 40 and started["survives_restart"] is False

    listed = admin_server.get("/api/redrives").json()
    assert listed["survives_restart"] is False and listed["note"] == NOTE
    assert [r["id"] for r in listed["redrives"]] == [started["id"]]

    # Progress is visible while it runs: moved grows, never faster than the rate (plus one batch).
    seen = wait_for(lambda: (r := admin.redrive(started["id"]))["moved"] > 0 and r, 10, what="some progress")
    assert seen["moved"] <= rate * seen["elapsed_s"] + rate * BATCH_SECONDS + 1

    done = redrive_ended(admin, started["id"])
    assert (done["state"], done["reason"], done["moved"]) == ("done", "limit reached", limit)
    burst = rate * BATCH_SECONDS
    assert done["elapsed_s"] >= (limit - burst) / rate - 0.05, f"moved {limit} in {done['elapsed_s']} s at {rate}/s"
    assert (done["failed_at_start"], done["failed_now"]) == (40, 10)
    assert (admin_server.jobs.count("redrive_q", FAILED), admin_server.jobs.count("redrive_q", PENDING)) == (10, 30)
    looked_up = [admin.lookup(d) for d in descriptors]
    moved = [j for j in looked_up if j is not None and j["state"] == "pending"]
    assert len(moved) == 30 and {j["attempts_remaining"] for j in moved} == {2}


def test_a_redrive_without_a_limit_ends_when_it_moved_the_jobs_failed_at_its_start(
    admin_server: AdminServer, admin: Admin
) -> None:
    admin_server.jobs.create("drain")
    make_failed(admin_server, "drain", 3, priority=1)
    make_failed(admin_server, "drain", 2, priority=3)
    r = admin.start_redrive("drain", 1000)
    done = redrive_ended(admin, r["id"])
    expected = ("done", "moved the jobs FAILED at its start", 5, 0)
    assert (done["state"], done["reason"], done["moved"], done["failed_now"]) == expected
    assert admin_server.jobs.count("drain", FAILED) == 0


def test_a_redrive_of_one_priority_leaves_the_others(admin_server: AdminServer, admin: Admin) -> None:
    admin_server.jobs.create("prio")
    make_failed(admin_server, "prio", 2, priority=1)
    make_failed(admin_server, "prio", 3, priority=2)
    done = redrive_ended(admin, admin.start_redrive("prio", 1000, priority=2)["id"])
    assert (done["moved"], done["failed_at_start"], done["failed_now"]) == (3, 3, 0)
    assert admin.counts("prio")["failed"] == [2, 0, 0]


def test_redrives_are_bounded_stoppable_and_behind_the_password(admin_server: AdminServer, admin: Admin) -> None:
    jobs = admin_server.jobs
    jobs.create("slow")
    make_failed(admin_server, "slow", 5)
    stranger = Admin("127.0.0.1", admin_server.server.admin_port)
    with pytest.raises(PasswordRefused):
        stranger.start_redrive("slow", 1)
    for kwargs, words in (
        ({"rate": 0}, "rate"),
        ({"rate": 100_001}, "rate"),
        ({"rate": 1, "limit": 0}, "limit"),
        ({"rate": 1, "priority": 4}, "priority"),
        ({"rate": 1, "attempts": 0}, "attempts"),
    ):
        with pytest.raises(AdminError) as bad:
            admin.start_redrive("slow", **kwargs)
        assert bad.value.status == 400 and words in bad.value.message, bad.value.message
    with pytest.raises(AdminError) as no_queue:
        admin.start_redrive("nowhere", 1)
    assert no_queue.value.status == 404
    assert admin.redrives() == [], "nothing refused was started"

    slow = admin.start_redrive("slow", 0.1)  # one job every ten seconds
    with pytest.raises(AdminError) as busy:
        admin.start_redrive("slow", 5)
    assert busy.value.status == 409 and slow["id"] in busy.value.message
    with pytest.raises(PasswordRefused):
        stranger.stop_redrive(slow["id"])
    stopped = admin.stop_redrive(slow["id"])
    assert (stopped["state"], stopped["reason"]) == ("stopped", "stopped by an admin")
    assert stopped["moved"] <= 1 and stopped["moved"] + jobs.count("slow", FAILED) == 5
    assert admin.stop_redrive(slow["id"])["state"] == "stopped", "stopping a finished one answers it as it is"
    with pytest.raises(AdminError) as unknown:
        admin.redrive("0123456789ab")
    assert unknown.value.status == 404 and "restart" in unknown.value.message

    # At most MAX_RUNNING at once, one per queue.
    for i in range(MAX_RUNNING):
        jobs.create(f"many_{i}")
        make_failed(admin_server, f"many_{i}", 1)
        admin.start_redrive(f"many_{i}", 0.1)  # the bucket fills 10 s before its first job
    jobs.create("one_too_many")
    with pytest.raises(AdminError) as full:
        admin.start_redrive("one_too_many", 1)
    assert full.value.status == 409 and str(MAX_RUNNING) in full.value.message
    assert len([r for r in admin.redrives() if r["state"] == "running"]) == MAX_RUNNING
    for r in admin.redrives():
        admin.stop_redrive(r["id"])
    assert admin.start_redrive("one_too_many", 1)["state"] == "running"


def test_a_redrive_of_a_deleted_queue_fails_naming_why(admin_server: AdminServer, admin: Admin) -> None:
    jobs = admin_server.jobs
    jobs.create("doomed")
    make_failed(admin_server, "doomed", 3)
    r = admin.start_redrive("doomed", 0.1)
    jobs.c.deleteQueue(jobs.ctx, "doomed", ADMIN_PASSWORD)
    # Its first batch comes within ten seconds (the bucket holds a job after 1 / rate s).
    failed = wait_for(lambda: (x := admin.redrive(r["id"]))["state"] != "running" and x, 20, what="the failure")
    assert failed["state"] == "failed" and "no longer exists" in failed["reason"]


def test_a_redrive_does_not_survive_a_restart_of_its_server(admin_server: AdminServer) -> None:
    jobs = admin_server.jobs
    jobs.create("restarted")
    make_failed(admin_server, "restarted", 4)
    server = admin_server.server
    admin = Admin("127.0.0.1", server.admin_port, password=ADMIN_PASSWORD)
    r = admin.start_redrive("restarted", 0.1)
    assert r["survives_restart"] is False
    server.terminate()
    assert any(f"redrive {r['id']} of restarted stopped: the server stopped" in line for line in server.lines)
    server.start()
    admin = Admin("127.0.0.1", server.admin_port, password=ADMIN_PASSWORD)
    assert admin.redrives() == []
    with pytest.raises(AdminError) as gone:
        admin.redrive(r["id"])
    assert gone.value.status == 404 and "do not survive a restart" in gone.value.message
    assert admin.counts("restarted")["failed"][0] >= 3, "nothing resumed it"
