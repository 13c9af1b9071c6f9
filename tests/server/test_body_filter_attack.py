"""A hostile body filter against a real server, on every backend (each matches bodies in the
server's engine, MySQL too: its REGEXP never runs).

At the parent commit, ``bodyRegexToMatch = "(a+)+$"`` against one body of 28 ``a``s and a ``!``
stalled every client for 20 s (Python's backtracking ``re`` on the event loop's GIL, and on the
embedded store inside the shard's lock), doubling with each ``a``. With 40 ``a``s that is days: a
regression here fails the other client's calls (10 s socket timeout), not a timing assertion.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from tests.conftest import ADMIN_PASSWORD
from tests.server.test_contract import FAILED, PENDING, Api
from tests.support.pinlater_server import ServerProcess
from tests.support.redis_server import RedisServer, write_shard_config
from tests.support.thrift_client import connect
from tests.support.wait import wait_for

from pinlater.admin import Admin

UNKNOWN = 500
ATTACK = b"a" * 40 + b"!"
EVIL = "(a+)+$"

Start = Callable[..., ServerProcess]


@pytest.fixture(
    params=["embedded", pytest.param("redis", marks=pytest.mark.redis), pytest.param("mysql", marks=pytest.mark.mysql)]
)
def start_pinlater(request: pytest.FixtureRequest, start_server: Start, tmp_path: Path) -> Iterator[Start]:
    """Start a server on the backend of the parameter (Redis: one redis-server shard of its own;
    MySQL: one shard in the process-wide MariaDB)."""
    with _starter(request.param, start_server, tmp_path) as start:
        yield start


@contextmanager
def _starter(kind: str, start_server: Start, tmp_path: Path) -> Iterator[Start]:
    with ExitStack() as stack:

        def start(**properties: Any) -> ServerProcess:
            if kind == "embedded":
                return start_server(properties=properties or None)
            config = tmp_path / "backend.json"
            if kind == "mysql":
                from tests.support.mariadb_server import shared_server

                db = shared_server()
                db.drop_queue_databases()
                config.write_text(json.dumps({"m1": db.shard_entry()}))
                return start_server(
                    "--backend", "mysql", "--backend-config", str(config), properties=properties or None
                )
            redis = stack.enter_context(RedisServer(tmp_path / "redis"))
            write_shard_config(config, {"r1": redis})
            return start_server("--backend", "redis", "--backend-config", str(config), properties=properties or None)

        yield start


def api(server: ServerProcess, ttypes: ModuleType, stack: ExitStack) -> Api:
    client, transport = connect("127.0.0.1", server.port, timeout=10)
    stack.callback(transport.close)
    return Api(client, ttypes)


def delete_request(a: Api, queue: str, state: int, regex: str, limit: int = 100) -> Any:
    return a.t.PinLaterDeleteJobsRequest(queueName=queue, jobState=state, bodyRegexToMatch=regex, limit=limit)


def test_a_backtracking_pattern_is_answered_at_once_while_another_client_is_served(
    start_pinlater: Start, ttypes: ModuleType
) -> None:
    server = start_pinlater()
    with ExitStack() as stack:
        setup, attacker, other = (api(server, ttypes, stack) for _ in range(3))
        setup.create("attack")
        setup.create("work")
        jobs = [setup.job(ATTACK), setup.job(b"aaaa"), *(setup.job(b"filler-%d!" % i) for i in range(200))]
        descriptors = setup.enqueue("attack", *jobs)
        plain = descriptors[1]

        rounds = 0
        failures: list[BaseException] = []
        stop = threading.Event()

        def attack() -> None:
            nonlocal rounds
            try:
                while not stop.is_set():
                    assert attacker.count("attack", PENDING, bodyRegexToMatch=EVIL) == 1
                    scanned = attacker.scan("attack", PENDING, bodyRegexToMatch=EVIL, limit=10).scannedJobs
                    assert [job.jobDescriptor for job in scanned] == [plain]
                    assert attacker.c.deleteJobs(attacker.ctx, delete_request(attacker, "attack", FAILED, EVIL)) == 0
                    rounds += 1
            except BaseException as exc:  # reported by the main thread
                failures.append(exc)
                raise

        thread = threading.Thread(target=attack, daemon=True)
        thread.start()
        try:
            # Every round of the other client runs between two rounds of filters, so it is
            # served while the attacker keeps the filters coming.
            for i in range(10):
                seen = rounds
                wait_for(lambda s=seen: rounds > s or bool(failures), 30, what="another round of hostile filters")
                assert not failures, failures
                [descriptor] = other.enqueue("work", other.job(b"job-%d" % i))
                got = other.dequeue("work", limit=1).jobs
                assert list(got) == [descriptor]
                other.ack("work", ok=[descriptor])
                assert "attack" in other.c.getQueueNames(other.ctx)
        finally:
            stop.set()
            thread.join(30)
        assert not thread.is_alive() and not failures, failures
        assert rounds >= 10

        # The delete of a matching pending job takes exactly that one.
        assert attacker.c.deleteJobs(attacker.ctx, delete_request(attacker, "attack", PENDING, EVIL)) == 1
        assert setup.count("attack", PENDING) == 201
        assert plain not in setup.lookup(plain)


def test_patterns_without_a_linear_time_algorithm_are_refused_as_bad_requests(
    start_pinlater: Start, ttypes: ModuleType
) -> None:
    """The same refusal, in the same words, on every backend: on MySQL too, where the database
    would run the pattern itself, the server checks it first."""
    server = start_pinlater()
    with ExitStack() as stack:
        a = api(server, ttypes, stack)
        a.create("refused")
        a.enqueue("refused", a.job(b"abab"))
        calls: list[tuple[Callable[[], Any], str]] = [
            (lambda: a.count("refused", PENDING, bodyRegexToMatch=r"(ab)\1"), "backreferences are not supported"),
            (lambda: a.scan("refused", PENDING, bodyRegexToMatch="a(?=b)"), "look-around"),
            (
                lambda: a.c.deleteJobs(a.ctx, delete_request(a, "refused", PENDING, r"(?<=a)b")),
                "look-around",
            ),
            (lambda: a.count("refused", PENDING, bodyRegexToMatch=r"\w{500}"), "compiled pattern would exceed"),
        ]
        for call, reason in calls:
            with pytest.raises(ttypes.PinLaterException) as info:
                call()
            assert info.value.errorCode == UNKNOWN
            assert info.value.message.startswith("invalid request: bodyRegexToMatch: body regex ")
            assert reason in info.value.message
        assert a.count("refused", PENDING, bodyRegexToMatch="(ab){2}") == 1
    assert not any("Traceback" in line for line in server.lines), "a refused pattern is not a server error"


def test_a_pattern_means_the_same_on_every_backend(start_pinlater: Start, ttypes: ModuleType) -> None:
    """Patterns MySQL's REGEXP refused (a class difference, bytes mode) or answered wrongly (a
    match its backtracking gave up on: "match limit exceeded", a warning, and the row counted as
    not matching) are counted by the server's engine on every backend, in the Thrift API and in
    the admin API alike."""
    server = start_pinlater()
    with ExitStack() as stack:
        a = api(server, ttypes, stack)
        a.create("dialects")
        a.enqueue("dialects", a.job(b"a"), a.job(b"ab"), a.job(ATTACK + b"ab"))
        admin = Admin("127.0.0.1", server.admin_port, password=ADMIN_PASSWORD)
        for pattern, count in (("[a--b]", 3), ("(?-u).", 3), ("(a+)+b", 2), ("^a$", 1)):
            assert a.count("dialects", PENDING, bodyRegexToMatch=pattern) == count, pattern
            assert len(admin.scan("dialects", "pending", body_regex=pattern)) == count, pattern
    assert not any("Traceback" in line for line in server.lines), "a pattern is not a server error"


def test_a_filter_past_its_time_budget_fails_naming_the_budget(start_pinlater: Start, ttypes: ModuleType) -> None:
    server = start_pinlater(BODY_FILTER_TIME_BUDGET_SECONDS="0.000001")
    with ExitStack() as stack:
        a = api(server, ttypes, stack)
        a.create("slow")
        a.enqueue("slow", *(a.job(b"body-%d" % i) for i in range(50)))
        calls: list[Callable[[], Any]] = [
            lambda: a.count("slow", PENDING, bodyRegexToMatch="body"),
            lambda: a.scan("slow", PENDING, bodyRegexToMatch="body"),
            lambda: a.c.deleteJobs(a.ctx, delete_request(a, "slow", PENDING, "body")),
        ]
        for call in calls:
            with pytest.raises(ttypes.PinLaterException) as info:
                call()
            assert info.value.errorCode == UNKNOWN
            assert "time budget of 1e-06 s (BODY_FILTER_TIME_BUDGET_SECONDS)" in info.value.message
        # Nothing was deleted, the shard stays healthy, and unfiltered reads are not budgeted.
        assert a.count("slow", PENDING) == 50
        assert len(a.scan("slow", PENDING, limit=100).scannedJobs) == 50


def test_a_costly_pattern_stops_at_its_budget_inside_a_large_body(start_pinlater: Start, ttypes: ModuleType) -> None:
    """At the parent commit the budget was read only between bodies, and this pattern (every byte
    a new automaton state of up to 8,000 NFA states) spent a minute of a core on one 1 MiB body:
    past the other client's 10 s socket timeout, and whatever the budget said."""
    server = start_pinlater(BODY_FILTER_TIME_BUDGET_SECONDS="1")
    costly = r"a(?-u:[\x00-\xff]){8000}c"
    body = bytes(b"ab"[i.bit_count() % 2] for i in range(1 << 20))
    with ExitStack() as stack:
        a = api(server, ttypes, stack)
        a.create("large")
        [large] = a.enqueue("large", a.job(body))
        calls: list[Callable[[], Any]] = [
            lambda: a.count("large", PENDING, bodyRegexToMatch=costly),
            lambda: a.c.deleteJobs(a.ctx, delete_request(a, "large", PENDING, costly)),
        ]
        for call in calls:
            with pytest.raises(ttypes.PinLaterException) as info:
                call()
            assert info.value.errorCode == UNKNOWN
            assert "time budget of 1 s (BODY_FILTER_TIME_BUDGET_SECONDS)" in info.value.message
        # A pattern as cheap on the same body is answered, and the job is still there.
        assert a.count("large", PENDING, bodyRegexToMatch="a(?-u:[\\x00-\\xff]){8}c") == 0
        assert a.count("large", PENDING, bodyRegexToMatch="ab") == 1
        assert list(a.lookup(large)) == [large]
