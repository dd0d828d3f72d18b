"""The live console in a real browser (Debian's Chromium, driven by Playwright, as in test_browser):
the list and a job's page follow a job from queued to running to done without a reload; the
dashboard lists two live ``runjobs`` workers, then one of them stale once it is SIGKILLed; at
1,280 px with the sidebar open the list's reason column is in view, and at 800 px the job's title
and what it waits for; Cancel and Revert ask first.
"""

from __future__ import annotations

import re

import pytest

from django_durajobs import Job, Status, enqueue
from django_durajobs.engine.runner import execute
from django_durajobs.store import claim
from tests.e2e import test_browser as browser_test
from tests.e2e.test_browser import build_jobs, expect, job_page, log_in, row, screenshot
from tests.helpers import fail_if_exited, sigkill, stop_cleanly, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

# The browser test's fixtures: Chromium, a page on the live server, the operator who logs in.
browser = browser_test.browser
page = browser_test.page
operator = browser_test.operator

LIST = "/admin/django_durajobs/job/"
DASHBOARD = "/admin/django_durajobs/job/dashboard/"
# The page's subtitle (the job's number and status); Django 6.1 put it inside .titles.
SUBTITLE = "#content > h2, #content .titles > h2"
COUNT_LIVE_FETCHES = """
(() => {
    const fetch = window.fetch;
    window.liveFetches = 0;
    window.fetch = function (resource, options) {
        if (String(resource).includes("/live/")) window.liveFetches += 1;
        return fetch.call(this, resource, options);
    };
})();
"""


def poll_now(page):
    """The page's next live request now, instead of within 2 s."""
    page.clock.run_for(2_100)


def test_a_job_goes_queued_running_done_on_the_list_and_its_page_without_a_reload(page, operator):
    job, _ = enqueue("browser_backup_database", subject={"host": "db-7"}, label="Back up db-7")
    log_in(page, operator)
    page.add_init_script(COUNT_LIVE_FETCHES)
    page.clock.install()
    listed = page.context.new_page()
    listed.clock.install()
    listed.goto(LIST)
    page.goto(job_page(job))
    for shown in (listed, page):
        shown.evaluate("window.notReloaded = true")
    listed_row = row(listed, "Back up db-7")
    summary = page.locator("#durajobs-summary")
    expect(listed_row.locator(".durajobs-badge")).to_have_text("Queued")
    expect(page.locator(SUBTITLE)).to_contain_text(f"#{job.pk}, Queued")

    lease = claim("console-browser-worker")  # the test holds the job running, as a worker would
    assert lease is not None and lease.job.pk == job.pk
    for shown in (listed, page):
        poll_now(shown)
    expect(listed_row.locator(".durajobs-badge")).to_have_text("Running")
    expect(summary.locator(".durajobs-headline .durajobs-badge").first).to_have_text("Running")
    expect(page.locator(SUBTITLE)).to_contain_text(f"#{job.pk}, Running")
    expect(page.locator(".field-status .readonly")).to_have_text("Running")

    assert execute(lease).status == Status.DONE
    for shown in (listed, page):
        poll_now(shown)
    expect(listed_row.locator(".durajobs-badge")).to_have_text("Done")
    expect(listed_row.locator("progress")).to_have_attribute("value", "100")
    expect(page.locator(SUBTITLE)).to_contain_text(f"#{job.pk}, Done")
    expect(page.locator(".field-status .readonly")).to_have_text("Done")
    expect(summary.locator("progress")).to_have_attribute("value", "100")
    steps = page.locator("#steps-group tbody tr")
    expect(steps).to_have_count(3)
    expect(steps.locator(".durajobs-badge")).to_have_text(["Done", "Done", "Done"])
    expect(summary.get_by_role("button", name="Run again")).to_be_visible()
    expect(page.locator("#durajobs-live")).to_contain_text("Updated")
    for shown in (listed, page):
        assert shown.evaluate("window.notReloaded === true"), "the page was reloaded"

    fetches = page.evaluate("window.liveFetches")
    page.clock.run_for(60_000)  # an ended job's page asks no more
    assert page.evaluate("window.liveFetches") == fetches


@pytest.mark.slow
def test_the_dashboard_shows_two_live_workers_then_one_stale_after_a_sigkill(
    page, operator, runjobs, child_env, settings
):
    settings.DURAJOBS = {"LEASE_SECONDS": 2, "HEARTBEAT_SECONDS": 0.5}
    fast = {"DURAJOBS_LEASE_SECONDS": "2", "DURAJOBS_HEARTBEAT_SECONDS": "0.5"}
    workers = [
        runjobs("--concurrency", "2", "--queue", "default", env=child_env, extra_env=fast),
        runjobs("--concurrency", "3", env=child_env, extra_env=fast),
    ]
    log_in(page, operator)
    page.goto(DASHBOARD)
    live = page.locator("#durajobs-workers tbody tr.durajobs-worker")

    def two_running():
        fail_if_exited(workers)
        return (
            page.locator("#durajobs-workers tbody tr.durajobs-worker").filter(has_text="running").count() == 2
        )

    wait_for(two_running, timeout=30, interval=0.5, message="two running workers on the dashboard")
    expect(page.locator("#durajobs-workers caption")).to_have_text("Workers (2 running)")
    for worker in workers:
        expect(live.filter(has_text=f"{worker.pid}")).to_have_count(1)
    expect(live.filter(has_text=f"{workers[0].pid}")).to_contain_text("default")

    sigkill(workers[0])
    killed = live.filter(has_text=f"{workers[0].pid}")
    expect(killed).to_have_class(re.compile("durajobs-worker-stale"), timeout=15_000)
    expect(killed).to_contain_text("stale: no heartbeat")
    expect(page.locator("#durajobs-workers caption")).to_have_text("Workers (1 running)")
    expect(live.filter(has_text=f"{workers[1].pid}")).not_to_have_class(re.compile("stale"))
    stop_cleanly(workers[1:])


def test_at_1280_px_with_the_sidebar_open_the_reason_column_is_in_view(page, operator):
    build_jobs(operator)
    log_in(page, operator)
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(LIST)
    expect(page.locator("#nav-sidebar")).to_be_visible()
    reason = row(page, "Order hosting for Acme Corp").locator("td.field-reason")
    expect(reason).to_contain_text("Payment of invoice INV-2041")
    box = reason.bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 1280, box


def test_at_800_px_the_title_and_the_reason_stay_in_view(page, operator, tmp_path):
    jobs = build_jobs(operator)
    log_in(page, operator)
    page.set_viewport_size({"width": 800, "height": 900})
    page.goto(LIST)
    reason = row(page, "Order hosting for Acme Corp").locator("td.field-reason")
    expect(reason).to_contain_text("Payment of invoice INV-2041")
    screenshot(page, tmp_path, "console-list-800.png", docs=False)
    box = reason.bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 800, box

    page.goto(job_page(jobs["payment"]))
    title = page.locator(SUBTITLE)
    tools = page.locator(".object-tools")
    expect(title).to_be_visible()
    title_box, tools_box = title.bounding_box(), tools.bounding_box()
    overlaps = not (
        tools_box["y"] + tools_box["height"] <= title_box["y"]
        or title_box["y"] + title_box["height"] <= tools_box["y"]
        or tools_box["x"] + tools_box["width"] <= title_box["x"]
        or title_box["x"] + title_box["width"] <= tools_box["x"]
    )
    assert not overlaps, (title_box, tools_box)
    expect(page.locator("#durajobs-summary")).to_contain_text("Payment of invoice INV-2041")
    screenshot(page, tmp_path, "console-page-800.png", docs=False)


def test_cancel_and_revert_ask_first_and_say_what_will_happen(page, operator):
    jobs = build_jobs(operator)
    log_in(page, operator)
    payment = jobs["payment"]
    page.goto(job_page(payment))
    page.locator("#durajobs-summary").get_by_role("link", name="Cancel…").click()
    expect(page.locator("h1")).to_have_text("Are you sure?")
    expect(page.locator(".durajobs-consequences")).to_contain_text("It ends now as cancelled")
    page.get_by_role("link", name="No, take me back").click()
    expect(page).to_have_url(re.compile(re.escape(job_page(payment)) + "$"))
    assert Job.objects.get(pk=payment.pk).status == Status.AWAITING_PAYMENT

    page.locator("#durajobs-summary").get_by_role("link", name="Cancel…").click()
    page.get_by_role("button", name="Yes, I’m sure").click()
    expect(page.locator(".messagelist .success")).to_have_text(f"Job {payment.pk} cancelled.")
    assert Job.objects.get(pk=payment.pk).status == Status.CANCELLED

    question = jobs["question"]  # it built its site before asking: something to undo
    page.goto(job_page(question))
    page.locator("#durajobs-summary").get_by_role("link", name="Revert…").click()
    expect(page.locator(".durajobs-consequences")).to_contain_text(
        "Runs its kind's revert, which undoes what its 1 finished step did."
    )
    page.get_by_role("button", name="Yes, I’m sure").click()
    expect(page.locator(".messagelist .success")).to_have_text(f"Job {question.pk} is being reverted.")
    assert Job.objects.get(pk=question.pk).status == Status.REVERTING
