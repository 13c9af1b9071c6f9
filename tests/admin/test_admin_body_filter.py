"""The admin API's body filters (``/api/scan`` and ``/api/delete`` with ``regex``): the same
linear-time engine and refusals as the Thrift calls, and the time budget."""

from __future__ import annotations

import threading
import urllib.parse
from collections.abc import Callable
from types import ModuleType
from typing import Any

from tests.admin.conftest import AdminServer, Jobs, http
from tests.conftest import ADMIN_PASSWORD, original_password_hash
from tests.support.pinlater_server import ServerProcess

ATTACK = b"a" * 40 + b"!"


def scan_path(queue: str, regex: str, state: str = "pending") -> str:
    return f"/api/scan?{urllib.parse.urlencode({'queue': queue, 'state': state, 'regex': regex})}"


def test_admin_scan_answers_a_backtracking_pattern_while_the_thrift_side_is_served(admin_server: AdminServer) -> None:
    a = admin_server
    a.jobs.create("evil")
    attack, plain = a.jobs.enqueue("evil", ATTACK, b"aaaa")
    results: list[Any] = []

    def scans() -> None:
        results.extend(a.get(scan_path("evil", "(a+)+$")) for _ in range(5))

    thread = threading.Thread(target=scans, daemon=True)
    thread.start()
    # Thrift calls on the same server meanwhile (each fails at its 10 s socket timeout if stalled).
    for _ in range(5):
        assert a.jobs.count("evil", 0) == 2
    thread.join(60)
    assert not thread.is_alive()
    assert [r.status for r in results] == [200] * 5
    assert all([job["descriptor"] for job in r.json()["jobs"]] == [plain] for r in results)
    assert attack not in {job["descriptor"] for r in results for job in r.json()["jobs"]}
    deleted = a.post(
        "/api/delete", {"queue": "evil", "state": "pending", "regex": "(a+)+$", "password": ADMIN_PASSWORD}
    )
    assert deleted.status == 200, deleted.text
    assert a.jobs.count("evil", 0) == 1


def test_admin_refuses_patterns_the_engine_cannot_take_with_400(admin_server: AdminServer) -> None:
    a = admin_server
    a.jobs.create("refused")
    a.jobs.enqueue("refused", b"abab")
    for regex, reason in [
        (r"(ab)\1", "backreferences are not supported"),
        ("a(?=b)", "look-around"),
        ("(ab", "unclosed group"),
        ("x" * 5000, "at most 4096"),
    ]:
        response = a.get(scan_path("refused", regex))
        assert response.status == 400, response.text
        error = response.json()["error"]
        assert error.startswith("body regex ") and reason in error
        assert len(error) < 300
        delete = a.post(
            "/api/delete", {"queue": "refused", "state": "pending", "regex": regex, "password": ADMIN_PASSWORD}
        )
        assert delete.status == 400 and reason in delete.json()["error"]
    assert a.jobs.count("refused", 0) == 1


def test_admin_scan_past_the_budget_fails_naming_it(
    start_server: Callable[..., ServerProcess], open_client: Callable[[ServerProcess], Any], ttypes: ModuleType
) -> None:
    server = start_server(
        properties={
            "ADMIN_PASSWORD_HASH": original_password_hash(ADMIN_PASSWORD),
            "BODY_FILTER_TIME_BUDGET_SECONDS": "0.000001",
        }
    )
    jobs = Jobs(open_client(server), ttypes)
    jobs.create("slow")
    jobs.enqueue("slow", *(b"body-%d" % i for i in range(50)))
    response = http(server, scan_path("slow", "body"))
    # (a filter too slow for its data fails so again: not 503, which asks for a retry)
    assert response.status == 500
    assert "(BODY_FILTER_TIME_BUDGET_SECONDS)" in response.json()["error"]
    assert response.json()["code"] == 500
    assert len(http(server, "/api/scan?queue=slow&state=pending&limit=100").json()["jobs"]) == 50
