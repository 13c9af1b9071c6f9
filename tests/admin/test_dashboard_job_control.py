"""The dashboard's job control in a real headless Chromium: the queue list's oldest-ready age and
expired count, the job browser's Next page, Cancel on a looked-up job, a queue's schedules
(create, pause/resume, edit, delete), and redrives (start, progress, Stop), each write behind the
password dialog. What the page shows is asserted, and what the store holds afterwards."""

from __future__ import annotations

import time
from typing import Any

from pinlater.admin import Admin
from tests.admin.conftest import FAILED, PENDING, AdminServer
from tests.admin.test_dashboard import PAYLOAD, browser
from tests.conftest import ADMIN_PASSWORD
from tests.support.wait import wait_for

__all__ = ["browser"]  # the fixture, used by name


class Page:
    def __init__(self, browser: Any, admin_server: AdminServer) -> None:
        from selenium.webdriver.common.by import By

        self.b = browser
        self.by = By
        browser.get(f"http://127.0.0.1:{admin_server.server.admin_port}/")
        wait_for(lambda: self.b.find_element(By.TAG_NAME, "body").get_attribute("data-loaded") == "1", 15)

    def find(self, selector: str) -> Any:
        return self.b.find_element(self.by.CSS_SELECTOR, selector)

    def click(self, selector: str) -> None:
        """Click ``selector``, found afresh until the click lands: the page re-renders a table
        as it refreshes it, so an element found a moment before may be gone by the click
        (StaleElementReferenceException, seen on a loaded machine)."""
        from selenium.common.exceptions import StaleElementReferenceException

        def clicked() -> bool:
            try:
                self.find(selector).click()
            except StaleElementReferenceException:
                return False
            return True

        wait_for(clicked, 10, what=f"a click on {selector}")

    def all(self, selector: str) -> list[Any]:
        return list(self.b.find_elements(self.by.CSS_SELECTOR, selector))

    def text(self, selector: str) -> str:
        return str(self.find(selector).text)

    def fill(self, selector: str, value: str) -> None:
        field = self.find(selector)
        field.clear()
        field.send_keys(value)

    def confirm(self, expect: str, password: str | None = ADMIN_PASSWORD) -> None:
        """Answer the password dialog, which must say ``expect``."""
        wait_for(lambda: self.find("#confirm-dialog").is_displayed(), 5, what="the confirm dialog")
        assert expect in self.text("#confirm-text"), self.text("#confirm-text")
        if password is not None:
            self.find("#confirm-password").send_keys(password)
        self.find("#confirm-ok").click()

    def message(self, expect: str) -> None:
        wait_for(lambda: expect in self.text("#message"), 10, what=f"the message {expect!r}")

    def manage(self, queue: str) -> None:
        self.find(f'tr[data-queue="{queue}"] button.manage').click()
        wait_for(lambda: self.text("#detail-name") == queue, 5, what="the queue detail")


def test_the_queue_list_shows_the_oldest_ready_age_and_expired_count(admin_server: AdminServer, browser: Any) -> None:
    jobs = admin_server.jobs
    jobs.create("aged")
    now = int(time.time() * 1000)
    jobs.enqueue("aged", b"old", runAfterTimestampMillis=now - 2 * 3_600_000 - 5 * 60_000)
    jobs.enqueue("aged", b"expires", expireAtTimestampMillis=now + 200, priority=2)
    wait_for(lambda: int(time.time() * 1000) > now + 200, 5, what="the expiry to pass")
    jobs.dequeue("aged", 10)  # hands out the old job; meets the expired one and ends it FAILED
    jobs.enqueue("aged", b"older", runAfterTimestampMillis=now - 3 * 3_600_000)
    page = Page(browser, admin_server)
    wait_for(lambda: page.text('tr[data-queue="aged"] td.expired') == "1", 15, what="the expired count")
    assert page.text('tr[data-queue="aged"] td.oldest-ready') == "3 h"


def test_the_job_browser_pages_and_a_looked_up_job_can_be_cancelled(admin_server: AdminServer, browser: Any) -> None:
    from selenium.webdriver.support.ui import Select

    jobs = admin_server.jobs
    jobs.create("pages")
    now = int(time.time() * 1000)
    made = [jobs.enqueue("pages", f"job-{i}".encode(), runAfterTimestampMillis=now - 10_000 + i)[0] for i in range(5)]
    page = Page(browser, admin_server)
    page.find("#scan-queue").send_keys("pages")
    Select(page.find("#scan-state")).select_by_value("pending")
    page.fill("#scan-limit", "2")
    page.find("#scan-submit").click()
    seen: list[str] = []
    for number, size in ((1, 2), (2, 2), (3, 1)):
        wait_for(lambda n=number: page.text("#scan-page").startswith(f"page {n}"), 10, what=f"page {number}")
        rows = [r.get_attribute("data-descriptor") for r in page.all("#jobs tbody tr")]
        assert len(rows) == size
        seen += rows
        if number < 3:
            page.find("#scan-next").click()
    assert page.text("#scan-page") == "page 3 (the last)" and not page.find("#scan-next").is_displayed()
    assert sorted(seen) == sorted(made)

    target = made[0]
    page.find(f'#jobs tr[data-descriptor="{target}"] button.lookup-link').click()
    wait_for(lambda: page.find("#lookup-cancel").is_displayed(), 10, what="the cancel button")
    page.find("#lookup-cancel").click()
    page.confirm(f"Cancel job {target}?", password="wrong")
    page.message("Refused (403)")
    assert jobs.count("pages", FAILED) == 0
    page.find("#lookup-cancel").click()
    page.confirm(f"Cancel job {target}?")
    page.message(f"Cancelled {target}.")
    wait_for(lambda: not page.find("#lookup-cancel").is_displayed(), 10, what="the button to go")
    fields = dict(zip(
        [e.text for e in page.all("#lookup-fields dt")], [e.text for e in page.all("#lookup-fields dd")], strict=True
    ))  # fmt: skip
    assert fields["State"] == "FAILED" and fields["Custom status"].endswith("cancelled")
    assert (jobs.count("pages", FAILED), jobs.count("pages", PENDING)) == (1, 4)


def test_schedules_are_created_paused_edited_and_deleted_from_the_page(admin_server: AdminServer, browser: Any) -> None:
    jobs = admin_server.jobs
    jobs.create("sched_page")
    admin = Admin("127.0.0.1", admin_server.server.admin_port)
    page = Page(browser, admin_server)
    page.manage("sched_page")
    wait_for(lambda: page.find("#schedules-empty").is_displayed(), 10, what="no schedules yet")

    page.fill("#schedule-name", "nightly")
    page.fill("#schedule-cron", "0 3 * * *")
    page.fill("#schedule-body", PAYLOAD)
    page.fill("#schedule-priority", "2")
    page.find("#schedule-submit").click()
    page.confirm('Create schedule "nightly" of queue sched_page (cron 0 3 * * *)?')
    page.message("Schedule nightly of sched_page saved (next run 20")
    row = 'tr[data-schedule="nightly"]'
    wait_for(lambda: page.all(row), 10, what="the schedule's row")
    assert page.text(f"{row} td.when") == "cron 0 3 * * *" and page.text(f"{row} td.state") == "active"
    assert PAYLOAD in page.text(f"{row} td.status") and "priority 2" in page.text(f"{row} td.status")
    assert browser.execute_script("return window.__pwned") is None, "a payload ran"

    page.click(f"{row} button.schedule-flip")
    page.confirm('Pause schedule "nightly" of queue sched_page?')
    wait_for(lambda: page.text(f"{row} td.state") == "paused", 10, what="paused")
    assert admin.schedules("sched_page")[0]["paused"] is True

    page.click(f"{row} button.schedule-edit")  # (its body fetched then: the listing holds none)
    wait_for(lambda: page.find("#schedule-name").get_attribute("value") == "nightly", 10, what="the form")
    assert page.find("#schedule-body").get_attribute("value") == PAYLOAD
    assert page.find("#schedule-paused").is_selected()
    page.fill("#schedule-cron", "")
    page.fill("#schedule-interval", "60000")
    page.find("#schedule-paused").click()
    page.find("#schedule-submit").click()
    page.confirm('Replace schedule "nightly" of queue sched_page (every 60000 ms)?')
    wait_for(lambda: page.text(f"{row} td.when") == "every 60000 ms", 10, what="the edit")
    (stored,) = admin.schedules("sched_page")
    assert (stored["interval_ms"], stored["cron"], stored["paused"], stored["priority"]) == (60_000, None, False, 2)
    assert stored["body_text"] == PAYLOAD

    page.click(f"{row} button.schedule-delete")
    page.confirm('Delete schedule "nightly" of queue sched_page?')
    wait_for(lambda: not page.all(row), 10, what="the row to go")
    assert admin.schedules("sched_page") == []


def test_a_redrive_is_started_followed_and_stopped_from_the_page(admin_server: AdminServer, browser: Any) -> None:
    jobs = admin_server.jobs
    for queue in ("fast", "slow"):
        jobs.create(queue)
        descriptors = jobs.enqueue(queue, *[f"{queue}-{i}".encode() for i in range(4)], numAttemptsAllowed=1)
        assert sorted(jobs.dequeue(queue, 4)) == sorted(descriptors)
        jobs.ack(queue, failed=descriptors)
    page = Page(browser, admin_server)
    page.manage("fast")
    assert "does not survive a restart" in page.text("#redrive-form")
    page.fill("#redrive-rate", "1000")
    page.find("#redrive-submit").click()
    page.confirm(
        "Move FAILED jobs of queue fast (every priority) back to PENDING at 1000 jobs/s, as many as are FAILED now"
    )
    page.message("Redrive ")
    done = '#redrives tr[data-state="done"]'
    wait_for(lambda: page.all(done), 15, what="the redrive to end")
    assert page.text(f"{done} td.moved") == "4" and page.text(f"{done} td.failed") == "4 / 0"
    assert page.text(f"{done} td.reason") == "moved the jobs FAILED at its start"
    assert "does not survive a restart" in page.text("#redrives-note")
    assert jobs.count("fast", PENDING) == 4

    page.manage("slow")
    page.fill("#redrive-rate", "0.1")
    page.fill("#redrive-limit", "3")
    page.find("#redrive-submit").click()
    page.confirm("at 0.1 jobs/s, at most 3")
    running = '#redrives tr[data-state="running"]'
    wait_for(lambda: page.all(running), 10, what="the running redrive")
    page.find(f"{running} button.redrive-stop").click()
    page.confirm("Stop redrive")
    wait_for(lambda: page.all('#redrives tr[data-state="stopped"]'), 10, what="the stopped redrive")
    assert page.text('#redrives tr[data-state="stopped"] td.reason') == "stopped by an admin"
    assert jobs.count("slow", FAILED) >= 3
