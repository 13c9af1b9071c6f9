"""Dedup keys (#17) where the admin side shows jobs: ``Admin.scan``/``lookup`` (the admin API)
and the dashboard's jobs table and lookup, against a real server (and a real Chromium)."""

from __future__ import annotations

from typing import Any

from pinlater.admin import Admin
from tests.admin.conftest import AdminServer
from tests.admin.test_dashboard import browser
from tests.support.wait import wait_for

__all__ = ["browser"]  # the fixture, used by name

#: A key that must show as text, never run.
HOSTILE_KEY = '<img src=x onerror="window.__pwned = 1">'


def test_scan_and_lookup_show_the_dedup_key(admin_server: AdminServer) -> None:
    jobs = admin_server.jobs
    jobs.create("keys")
    [keyed] = jobs.enqueue("keys", b"keyed", dedupKey="invoice-3")
    [plain] = jobs.enqueue("keys", b"plain")
    admin = Admin("127.0.0.1", admin_server.server.admin_port)

    scanned = {job["descriptor"]: job["dedup_key"] for job in admin.scan("keys", "pending")}
    assert scanned == {keyed: "invoice-3", plain: None}
    found = admin.lookup(keyed)
    assert found is not None and found["dedup_key"] == "invoice-3" and found["body_text"] == "keyed"
    plain_found = admin.lookup(plain)
    assert plain_found is not None and plain_found["dedup_key"] is None


def test_the_dashboard_shows_the_dedup_key_as_text(admin_server: AdminServer, browser: Any) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    jobs = admin_server.jobs
    jobs.create("dash_keys")
    [keyed] = jobs.enqueue("dash_keys", b"keyed", dedupKey=HOSTILE_KEY)
    [plain] = jobs.enqueue("dash_keys", b"plain")

    def text(selector: str) -> str:
        return str(browser.find_element(By.CSS_SELECTOR, selector).text)

    browser.get(f"http://127.0.0.1:{admin_server.server.admin_port}/")
    wait_for(lambda: browser.find_element(By.TAG_NAME, "body").get_attribute("data-loaded") == "1", 15, what="load")
    browser.find_element(By.ID, "scan-queue").send_keys("dash_keys")
    Select(browser.find_element(By.ID, "scan-state")).select_by_value("pending")
    browser.find_element(By.ID, "scan-submit").click()
    row = f'#jobs tr[data-descriptor="{keyed}"]'
    wait_for(lambda: browser.find_elements(By.CSS_SELECTOR, row), 10, what="the scanned keyed job")
    assert text(f"{row} td.dedup-key") == HOSTILE_KEY
    assert text(f'#jobs tr[data-descriptor="{plain}"] td.dedup-key') == ""

    browser.find_element(By.CSS_SELECTOR, f"{row} button.lookup-link").click()
    wait_for(lambda: browser.find_element(By.ID, "lookup-result").is_displayed(), 10, what="the lookup")
    terms = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#lookup-fields dt")]
    values = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#lookup-fields dd")]
    assert dict(zip(terms, values, strict=True))["Dedup key"] == HOSTILE_KEY
    assert browser.execute_script("return window.__pwned") is None, "the key ran as markup"
