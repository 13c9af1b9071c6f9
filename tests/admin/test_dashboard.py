"""The dashboard in a real headless Chromium (Debian's ``chromium`` + ``chromium-driver``, via Selenium).

What the page shows is asserted (queue row, counts, messages, the body shown as text), the page
is driven the way an operator would (Manage, Retry, the password dialog), and a screenshot is
saved under the test's tmp_path and copied to /tmp/dashboard.png.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.admin.conftest import FAILED, PENDING, AdminServer
from tests.conftest import ADMIN_PASSWORD
from tests.support.wait import wait_for

CHROMIUM = os.environ.get("PINLATER_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("PINLATER_CHROMEDRIVER", "/usr/bin/chromedriver")
SCREENSHOT_COPY = Path("/tmp/dashboard.png")
#: Sets a global if it ever runs: in a job body and in a custom status.
PAYLOAD = '<script>window.__pwned = "script"</script><img src=x onerror="window.__pwned = \'img\'">'


@pytest.fixture
def browser() -> Iterator[Any]:
    """A headless Chromium; fails (never skips) when it or its driver is missing."""
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not os.access(p, os.X_OK)]
    if missing:
        pytest.fail(
            f"{', '.join(missing)} not found: the dashboard test needs Debian's chromium and chromium-driver "
            "(apt-get install chromium chromium-driver, done by scripts/install-deps)",
            pytrace=False,
        )
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.fail("selenium is not installed: pip install -e '.[test]'", pytrace=False)
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1400,2000",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def test_dashboard_lists_counts_browses_and_retries_with_the_password(
    admin_server: AdminServer, browser: Any, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    jobs = admin_server.jobs
    jobs.create("dash_queue")
    jobs.create("dash_other")
    jobs.create("constructor")  # idle, so not in the rates: its lookup there met Object's member, and threw
    hostile = jobs.fail_one("dash_queue", PAYLOAD.encode() + b" \xff\xfe end", status=PAYLOAD)
    jobs.enqueue("dash_queue", b"one", b"two", priority=1)
    jobs.enqueue("dash_queue", b"three", priority=2)
    jobs.enqueue("dash_other", b"x")

    def text(selector: str) -> str:
        return str(browser.find_element(By.CSS_SELECTOR, selector).text)

    def count(queue: str, state: str) -> str:
        return text(f'tr[data-queue="{queue}"] td[data-state="{state}"] .total')

    browser.get(f"http://127.0.0.1:{admin_server.server.admin_port}/")
    wait_for(lambda: browser.find_element(By.TAG_NAME, "body").get_attribute("data-loaded") == "1", 15, what="load")

    # Every queue is listed with its counts by state and priority, and its rate limit.
    names = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#queues tbody td.name")]
    assert names == ["constructor", "dash_other", "dash_queue"]
    assert (count("dash_queue", "pending"), count("dash_queue", "failed")) == ("3", "1")
    assert count("dash_queue", "in_progress") == "0" and count("dash_other", "pending") == "1"
    assert text('tr[data-queue="dash_queue"] td[data-state="pending"] .by-priority') == "p1 2 · p2 1 · p3 0"
    assert text('tr[data-queue="dash_queue"] td.rate') == "unlimited"
    assert "1/1 shards healthy" in text("#server-summary")

    # The failed-jobs browser shows the custom status as text, and the lookup shows the body as text and hex.
    browser.find_element(By.ID, "scan-queue").send_keys("dash_queue")
    browser.find_element(By.ID, "scan-submit").click()
    row = f'#jobs tr[data-descriptor="{hostile}"]'
    wait_for(lambda: browser.find_elements(By.CSS_SELECTOR, row), 10, what="the scanned failed job")
    assert text(f"{row} td.status") == PAYLOAD
    assert text(f"{row} td.attempts") == "0 / 1"
    browser.find_element(By.CSS_SELECTOR, f"{row} button.lookup-link").click()
    wait_for(lambda: browser.find_element(By.ID, "lookup-result").is_displayed(), 10, what="the lookup")
    assert text("#lookup-body-text") == PAYLOAD + " \ufffd\ufffd end"
    assert text("#lookup-body-hex").startswith("3c 73 63 72 69 70 74 3e")  # "<script>"
    assert browser.find_elements(By.CSS_SELECTOR, "main img, main script") == []
    assert browser.execute_script("return window.__pwned") is None, "a payload ran"

    # Retry without the password: refused, nothing done.
    browser.find_element(By.CSS_SELECTOR, 'tr[data-queue="dash_queue"] button.manage').click()
    wait_for(lambda: text("#detail-name") == "dash_queue", 5, what="the queue detail")
    browser.find_element(By.ID, "retry-submit").click()
    wait_for(lambda: browser.find_element(By.ID, "confirm-dialog").is_displayed(), 5, what="the confirm dialog")
    assert "Retry up to 1000 FAILED jobs of queue dash_queue" in text("#confirm-text")
    browser.find_element(By.ID, "confirm-ok").click()
    wait_for(lambda: "Refused (403)" in text("#message"), 10, what="the refusal")
    assert "wrong admin password" in text("#message")
    assert jobs.count("dash_queue", FAILED) == 1
    assert count("dash_queue", "failed") == "1"

    # With the password: done, and the page shows the new counts.
    browser.find_element(By.ID, "retry-submit").click()
    wait_for(lambda: browser.find_element(By.ID, "confirm-dialog").is_displayed(), 5, what="the confirm dialog")
    browser.find_element(By.ID, "confirm-password").send_keys(ADMIN_PASSWORD)
    browser.find_element(By.ID, "confirm-ok").click()
    wait_for(lambda: "Retried 1 failed job(s) of dash_queue." in text("#message"), 10, what="the retry")
    assert browser.find_element(By.ID, "confirm-password").get_attribute("value") == "", "not kept in the page"
    wait_for(lambda: count("dash_queue", "failed") == "0" and count("dash_queue", "pending") == "4", 10)
    assert (jobs.count("dash_queue", FAILED), jobs.count("dash_queue", PENDING)) == (0, 4)

    # Pause from the page: the rate column says so.
    browser.find_element(By.ID, "rate-pause").click()
    wait_for(lambda: browser.find_element(By.ID, "confirm-dialog").is_displayed(), 5, what="the confirm dialog")
    assert "Pause queue dash_queue" in text("#confirm-text")
    browser.find_element(By.ID, "confirm-password").send_keys(ADMIN_PASSWORD)
    browser.find_element(By.ID, "confirm-ok").click()
    wait_for(lambda: text('tr[data-queue="dash_queue"] td.rate') == "paused", 10, what="the paused queue")

    assert browser.execute_script("return window.__pwned") is None, "a payload ran"
    csp_errors = [e for e in browser.get_log("browser") if "Content Security Policy" in e.get("message", "")]
    assert not csp_errors, f"the page broke its own Content-Security-Policy: {csp_errors}"

    browser.execute_script("window.scrollTo(0, 0)")
    shot = tmp_path / "dashboard.png"
    assert browser.save_screenshot(str(shot)), "screenshot failed"
    assert shot.stat().st_size > 10_000
    shutil.copyfile(shot, SCREENSHOT_COPY)
