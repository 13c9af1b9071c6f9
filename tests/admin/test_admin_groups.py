"""Ordered groups (#17) where the admin side shows them: ``Admin.groups``/``rules``/``scan``/
``lookup`` (the admin API) and the dashboard's queue list, jobs table and lookup, against a real
server (and a real Chromium)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from pinlater.admin import Admin, AdminError
from tests.admin.conftest import AdminServer, start_admin_server
from tests.admin.test_admin_dedup import HOSTILE_KEY
from tests.admin.test_dashboard import browser
from tests.conftest import ADMIN_PASSWORD
from tests.support.pinlater_server import ServerProcess
from tests.support.wait import wait_for

__all__ = ["browser"]  # the fixture, used by name


@pytest.fixture
def admin_server(
    tmp_path: Path,
    start_server: Callable[..., ServerProcess],
    open_client: Callable[[ServerProcess], Any],
    ttypes: ModuleType,
) -> AdminServer:
    """As ``tests/admin/conftest.py``'s, with the monitor (which counts the groups) every 0.2 s."""
    return start_admin_server(tmp_path, start_server, open_client, ttypes, BACKEND_MONITOR_THREAD_DELAY_SECONDS="0.2")


def test_the_admin_api_shows_groups_rules_and_keys(admin_server: AdminServer) -> None:
    jobs = admin_server.jobs
    jobs.create("grouped")
    first, second = jobs.enqueue("grouped", b"one", b"two", groupKey="g")
    [alone] = jobs.enqueue("grouped", b"alone", groupKey="h")
    admin = Admin("127.0.0.1", admin_server.server.admin_port)
    assert admin.rules("grouped") == {"group_concurrency": 1, "max_in_progress": None, "group_jobs_per_second": None}
    assert admin.groups("grouped") == {"all": 2, "blocked": 1}, "g has a job waiting; h has one job"

    scanned = {job["descriptor"]: job["group_key"] for job in admin.scan("grouped", "pending")}
    assert scanned == {first: "g", second: "g", alone: "h"}
    found = admin.lookup(second)
    assert found is not None and found["group_key"] == "g" and found["state"] == "pending"

    config = {"groupConcurrency": 2, "maxInProgress": 10, "groupJobsPerSecond": 2.5}
    admin_server.queue_config.write_text(json.dumps({"queues": [{"name": "grouped", "queueConfig": config}]}))
    expected = {"group_concurrency": 2, "max_in_progress": 10, "group_jobs_per_second": 2.5}
    wait_for(lambda: admin.rules("grouped") == expected, 10, what="the reloaded rules")


def test_the_dashboard_shows_groups_and_group_keys_as_text(admin_server: AdminServer, browser: Any) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    jobs = admin_server.jobs
    jobs.create("dash_groups")
    keyed, _ = jobs.enqueue("dash_groups", b"first", b"second", groupKey=HOSTILE_KEY)
    jobs.dequeue("dash_groups")  # the first runs, the second waits behind it: blocked

    def text(selector: str) -> str:
        return str(browser.find_element(By.CSS_SELECTOR, selector).text)

    browser.get(f"http://127.0.0.1:{admin_server.server.admin_port}/")
    wait_for(lambda: browser.find_element(By.TAG_NAME, "body").get_attribute("data-loaded") == "1", 15, what="load")
    groups_cell = '#queues tr[data-queue="dash_groups"] td.groups'
    wait_for(lambda: text(groups_cell) == "1 (1 blocked)", 15, what="the monitor's count of groups")

    browser.find_element(By.ID, "scan-queue").send_keys("dash_groups")
    Select(browser.find_element(By.ID, "scan-state")).select_by_value("in_progress")
    browser.find_element(By.ID, "scan-submit").click()
    row = f'#jobs tr[data-descriptor="{keyed}"]'
    wait_for(lambda: browser.find_elements(By.CSS_SELECTOR, row), 10, what="the scanned grouped job")
    assert text(f"{row} td.group-key") == HOSTILE_KEY
    browser.find_element(By.CSS_SELECTOR, f"{row} button.lookup-link").click()
    wait_for(lambda: browser.find_element(By.ID, "lookup-result").is_displayed(), 10, what="the lookup")
    terms = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#lookup-fields dt")]
    values = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#lookup-fields dd")]
    assert dict(zip(terms, values, strict=True))["Group key"] == HOSTILE_KEY
    assert browser.execute_script("return window.__pwned") is None, "the key ran as markup"


def test_the_admin_api_edits_the_rules_in_the_queue_config(admin_server: AdminServer) -> None:
    admin_server.jobs.create("ruled")
    admin = Admin("127.0.0.1", admin_server.server.admin_port, password=ADMIN_PASSWORD)
    done = admin.set_rules("ruled", max_in_progress=7, group_concurrency=3)
    assert done["rules"] == {"group_concurrency": 3, "max_in_progress": 7, "group_jobs_per_second": None}
    assert admin.rules("ruled") == done["rules"], "in force at once"
    written = json.loads(admin_server.queue_config.read_text())
    assert written == {"queues": [{"name": "ruled", "queueConfig": {"maxInProgress": 7, "groupConcurrency": 3}}]}

    admin.set_rate("ruled", 50)
    admin.set_rules("ruled", max_in_progress=None, group_concurrency=None)
    written = json.loads(admin_server.queue_config.read_text())
    assert written == {"queues": [{"name": "ruled", "queueConfig": {"maxJobsPerSecond": 50}}]}, "the rate stays"

    with pytest.raises(AdminError) as refused:
        admin.set_rules("ruled", group_concurrency=0)
    assert refused.value.status == 400 and "groupConcurrency must be a whole number" in str(refused.value)
    with pytest.raises(AdminError) as misspelt:
        admin.set_rules("ruled", group_concurrency=2, max_in_progres=5)
    assert misspelt.value.status == 400 and "not a rule: max_in_progres" in str(misspelt.value)
    assert admin.rules("ruled")["group_concurrency"] == 1, "nothing was set"
    with pytest.raises(AdminError) as anonymous:
        Admin("127.0.0.1", admin_server.server.admin_port).set_rules("ruled", max_in_progress=1)
    assert anonymous.value.status in (401, 403)
    assert admin.rules("ruled")["max_in_progress"] is None


def test_an_unknown_queue_config_key_is_warned_of_once_through_admin_edits(admin_server: AdminServer) -> None:
    """An admin edit parsed the file several times, and the server took it at once and again when
    its watch saw the new file: each warned of a misspelt key anew. The server now warns when the
    file's warnings change, not at each taking of it."""
    admin_server.jobs.create("typo")
    path = admin_server.queue_config
    entry = {"name": "typo", "queueConfig": {"maxJobsPerSecond": 9, "maxInProgres": 2}}
    path.write_text(json.dumps({"queues": [entry]}))
    admin = Admin("127.0.0.1", admin_server.server.admin_port, password=ADMIN_PASSWORD)
    wait_for(
        lambda: any("'maxInProgres'" in line for line in admin_server.server.lines), timeout=10, what="the file taken"
    )
    for rate in (10, 11, 12):
        admin.set_rate("typo", rate)
    entry = {"name": "typo", "queueConfig": {"maxJobsPerSecond": 9, "groupConcurency": 2}}
    path.write_text(json.dumps({"queues": [entry]}))
    wait_for(  # (the watch takes files in turn: it has looked at the edited one by then)
        lambda: any("'groupConcurency'" in line for line in admin_server.server.lines), timeout=10, what="a new warning"
    )
    warned = [line for line in admin_server.server.lines if "'maxInProgres'" in line and "not a key" in line]
    assert len(warned) == 1, warned
