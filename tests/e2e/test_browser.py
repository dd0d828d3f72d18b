"""The admin in a real browser: Debian's Chromium, driven by Playwright, against ``live_server``.

An operator — staff, with the view, operate and revert permissions, not a superuser — logs in,
filters the failed jobs and retries one with the list action, retries one from its page, answers
a job's question with one of its offered buttons, reads a job's steps and log, and sees a partial
family on its parent's page; a running job's summary keeps itself current without a reload and
stops refreshing once the job has ended.

Chromium is ``/usr/bin/chromium`` (``apt-get install chromium``; Playwright never downloads a
browser here). Without it the tests are skipped, except in CI (``CI=true``), where they fail.
Screenshots go to ``tmp_path``; with ``DURAJOBS_SCREENSHOTS=1`` they also replace the ones in
``docs/images/`` that the README shows.
"""

from __future__ import annotations

import os
import re
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.contrib.auth.models import Permission

try:
    from playwright.sync_api import expect, sync_playwright
except ImportError:  # the browser fixture skips (or, in CI, fails) the tests
    expect = sync_playwright = None

from django_durajobs import Job, Status, drain, enqueue, update
from django_durajobs.engine.runner import execute
from django_durajobs.store import claim
from tests.factories import JobFactory
from tests.helpers import REPO_ROOT

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
VIEWPORT = {"width": 1400, "height": 900}
TIMEOUT_MS = 30_000  # every wait for the page is bounded by this: room for a loaded machine
PASSWORD = "correct horse battery staple"
DOCS_IMAGES = REPO_ROOT / "docs" / "images"

pytestmark = pytest.mark.django_db(transaction=True)


def _unavailable(reason: str):
    """Skip on a developer's machine; in CI the browser test must run, so fail instead."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI=true: the browser test must run; .ci/run installs chromium)")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM.exists():
        _unavailable(f"{CHROMIUM} is missing: apt-get install chromium to run the browser test")
    if sync_playwright is None:
        _unavailable("playwright is not installed: pip install -e '.[test]'")
    expect.set_options(timeout=TIMEOUT_MS)
    # Playwright's sync API keeps an asyncio event loop running in this thread (it switches to it
    # with greenlets whenever the test calls the browser), so Django's async_unsafe guard sees a
    # "running loop" and refuses every ORM call of the test thread: the test's own queries, and
    # the database flush of transactional_db. Nothing else runs on that loop while the test's
    # code runs, so a blocking query cannot starve it: allow them, for as long as Playwright runs.
    with pytest.MonkeyPatch.context() as patch, sync_playwright() as playwright:
        patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser, live_server):
    context = browser.new_context(viewport=VIEWPORT, base_url=live_server.url)
    context.set_default_timeout(TIMEOUT_MS)
    page = context.new_page()
    yield page
    context.close()


@pytest.fixture
def operator(django_user_model, settings):
    """Staff who may view, operate and revert jobs; not a superuser."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # a fast log-in
    user = django_user_model.objects.create_user(
        "operator", "ops@example.org", PASSWORD, is_staff=True, first_name="Olga"
    )
    user.user_permissions.set(
        Permission.objects.filter(
            content_type__app_label="django_durajobs", codename__in=["view_job", "operate_job", "revert_job"]
        )
    )
    assert not user.is_superuser
    return user


def log_in(page, user):
    page.goto("/admin/login/?next=/admin/")
    page.get_by_label("Username").fill(user.username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url("**/admin/")


def screenshot(page, tmp_path, name, full_page=False, docs=True) -> Path:
    """Into tmp_path always; with DURAJOBS_SCREENSHOTS=1 also over docs/images/<name> (README's)."""
    taken = tmp_path / name
    page.screenshot(path=taken, full_page=full_page)
    png = taken.read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000, f"{name} is not a real screenshot"
    if docs and os.environ.get("DURAJOBS_SCREENSHOTS") == "1":
        DOCS_IMAGES.mkdir(parents=True, exist_ok=True)
        (DOCS_IMAGES / name).write_bytes(png)
    return taken


def build_jobs(user) -> dict[str, Job]:
    """An operator's morning: done, failed, waiting, asking, partial, scheduled and running jobs."""
    site = dict(subject_type="site", created_by=user)
    enqueue(
        "browser_deploy_site",
        subject={"domain": "example.org"},
        label="Deploy example.org",
        subject_id="example.org",
        **site,
    )
    enqueue(
        "browser_backup_database",
        subject={"host": "db-2"},
        label="Back up db-2",
        subject_type="database",
        subject_id="db-2",
        actor_type="system",
    )
    parent, _ = enqueue(
        "browser_update_module",
        subject={
            "module": "nginx-module-geoip",
            "servers": ["web-1", "web-2", "web-3", "web-4"],
            "failing": ["web-3"],
        },
        label="Update nginx-module-geoip on web-1…web-4",
        created_by=user,
    )
    backup, _ = enqueue(
        "browser_backup_database",
        subject={"host": "db-1", "unreachable": True},
        label="Back up db-1",
        subject_type="database",
        subject_id="db-1",
        actor_type="system",
    )
    order, _ = enqueue(
        "browser_order_hosting",
        subject={"invoice": "INV-2041", "amount": "€12.00"},
        label="Order hosting for Acme Corp",
        subject_type="customer",
        subject_id="acme",
        actor_type="api",
    )
    question, _ = enqueue(
        "browser_deploy_site",
        subject={"domain": "shop.example.net", "occupied": True},
        label="Deploy shop.example.net",
        subject_id="shop.example.net",
        **site,
    )
    enqueue(
        "browser_renew_certificate",
        subject={"domain": "example.org"},
        label="Renew TLS certificate for example.org",
        subject_type="site",
        subject_id="example.org",
        actor_type="system",
        run_at=timedelta(hours=6),
    )
    drain()
    running = JobFactory(
        kind="browser_backup_database",
        label="Back up db-3",
        subject={"host": "db-3"},
        subject_type="database",
        subject_id="db-3",
        actor_type="system",
        status=Status.RUNNING,
        progress=45,
        step_states={"dump": "done", "compress": "running"},
    )
    jobs = {
        "parent": parent,
        "failed": backup,
        "payment": order,
        "question": question,
        "running": running,
    }
    for job in jobs.values():
        job.refresh_from_db()
    # The states the screenshots and the scenario rely on.
    assert jobs["failed"].status == Status.FAILED and "timed out" in jobs["failed"].error
    assert jobs["payment"].status == Status.AWAITING_PAYMENT
    assert jobs["question"].status == Status.NEEDS_USER
    assert jobs["parent"].status == Status.FAILED and jobs["parent"].error_code == "partial"
    return jobs


def row(page, label):
    return page.locator("#result_list tbody tr").filter(has_text=label)


def job_page(job) -> str:
    return f"/admin/django_durajobs/job/{job.pk}/change/"


def click_to_operate(page, button, job, operation):
    """Click a button of a job page: it must POST the operation, which redirects back to the page."""
    with page.expect_response(lambda response: response.request.method == "POST") as posted:
        button.click()
    url, status = posted.value.url, posted.value.status
    expected = f"/admin/django_durajobs/job/{job.pk}/operate/{operation}/"
    assert url.endswith(expected) and status == 302, (
        f"POST {url} answered {status}; expected {expected} -> 302"
    )


def headline_badge(page):
    return page.locator("#durajobs-summary .durajobs-headline .durajobs-badge").first


def test_operator_filters_the_failed_jobs_and_retries_one_from_the_list(page, operator, tmp_path):
    """The list shows each job's state; the status filter and the retry action work for an operator."""
    jobs = build_jobs(operator)
    log_in(page, operator)

    page.locator("#content-main").get_by_role("link", name="Jobs", exact=True).click()
    expect(row(page, "Order hosting for Acme Corp").locator(".durajobs-badge")).to_have_text(
        "Awaiting payment"
    )
    expect(row(page, "Order hosting for Acme Corp")).to_contain_text("Payment of invoice INV-2041")
    expect(row(page, "Back up db-3").locator("progress")).to_have_attribute("value", "45")
    expect(row(page, "Deploy shop.example.net").locator(".durajobs-badge")).to_have_text("Needs a decision")
    page.locator("#toggle-nav-sidebar").click()  # room for the list's columns
    page.evaluate("window.scrollTo(0, 0)")
    screenshot(page, tmp_path, "admin-job-list.png", docs=False)

    status_filter = page.locator('#changelist-filter details[data-filter-title="status"]')
    status_filter.get_by_role("link", name="Failed", exact=True).click()
    expect(page).to_have_url(re.compile(r"[?&]status__exact=failed"))
    failed = page.locator("#result_list tbody tr")
    expect(failed).to_have_count(Job.objects.filter(status=Status.FAILED).count())
    statuses = failed.locator(".durajobs-badge:not(.durajobs-family)")  # not the families' badges
    expect(statuses).to_have_text(["Failed"] * failed.count())
    expect(row(page, "Back up db-1")).to_contain_text("port 5432 timed out after 30")

    row(page, "Back up db-1").locator("input.action-select").check()
    page.locator("select[name=action]").select_option(label="Retry selected jobs")
    page.locator(".actions button[name=index]").click()  # "Go" (Django 5.2) or "Run" (Django 6)
    expect(page.locator(".messagelist .success")).to_have_text("Retried 1 job.")
    expect(row(page, "Back up db-1")).to_have_count(0)  # the list is still filtered on failed
    jobs["failed"].refresh_from_db()
    assert jobs["failed"].status == Status.QUEUED
    assert not jobs["failed"].error

    status_filter.get_by_role("link", name="All", exact=True).click()
    expect(row(page, "Back up db-1").locator(".durajobs-badge")).to_have_text("Queued")


def test_operator_answers_a_question_with_one_of_its_offered_actions(page, operator, tmp_path):
    """A needs-user job's page asks its question with a button per offered action; a click queues
    the job with that action and comes back to the page with a message."""
    jobs = build_jobs(operator)
    question = jobs["question"]
    log_in(page, operator)
    # The page refreshes its summary every 2 s; hold its timers, so the click is on the page as
    # served, whatever the machine's speed (a terminal job's page is never refreshed at all).
    page.clock.install()
    page.clock.pause_at(time.time() + 1)  # wall-clock seconds; the page's clock stops there
    page.goto(job_page(question))
    summary = page.locator("#durajobs-summary")
    expect(summary.locator(".durajobs-question")).to_have_text(
        "shop.example.net already serves a site from another account. Overwrite it with this release?"
    )
    expect(summary.get_by_role("button", name="Keep the existing site")).to_be_visible()
    screenshot(page, tmp_path, "admin-job-page.png", full_page=True, docs=False)

    click_to_operate(page, summary.get_by_role("button", name="Overwrite the site"), question, "resume")
    expect(page.locator(".messagelist .success")).to_have_text(f"Job {question.pk} resumed.")
    expect(page).to_have_url(re.compile(re.escape(job_page(question)) + "$"))
    expect(headline_badge(page)).to_have_text("Queued")
    question.refresh_from_db()
    assert (question.status, question.resume_action) == (Status.QUEUED, "overwrite")


def test_operator_retries_a_failed_job_from_its_page(page, operator):
    """A failed job's page (never refreshed: the job has ended) offers Retry; a click queues the job
    and comes back to the page with a message."""
    failed = build_jobs(operator)["failed"]
    log_in(page, operator)
    page.goto(job_page(failed))
    expect(headline_badge(page)).to_have_text("Failed")
    expect(page.locator("#durajobs-live")).to_have_attribute("data-terminal", "true")

    retry = page.locator("#durajobs-summary").get_by_role("button", name="Retry")
    click_to_operate(page, retry, failed, "retry")
    expect(page.locator(".messagelist .success")).to_have_text(f"Job {failed.pk} queued for another try.")
    expect(headline_badge(page)).to_have_text("Queued")
    failed.refresh_from_db()
    assert failed.status == Status.QUEUED


def test_operator_sees_the_steps_and_the_log_on_a_job_page(page, operator):
    """The job page lists the job's steps with their states and its log, for whoever may view jobs."""
    question = build_jobs(operator)["question"]
    log_in(page, operator)
    page.goto(job_page(question))
    expect(headline_badge(page)).to_have_text("Needs a decision")
    steps = page.locator(".inline-group").filter(has=page.get_by_role("heading", name="Steps"))
    expect(steps.locator("tbody tr").filter(has_text="Build the site")).to_contain_text("Done")
    expect(steps.locator("tbody tr").filter(has_text="Upload files")).to_contain_text(
        "already serves a site from another account"
    )
    log = page.locator(".inline-group").filter(has=page.get_by_role("heading", name="Log"))
    expect(log).to_contain_text("Built shop.example.net-2024.06.1.tar.gz (1284 files).")


def test_parent_of_a_partial_family_shows_the_partial_badge(page, operator, tmp_path):
    """A parent whose children partly failed reads "partial" (never success) and lists them."""
    parent = build_jobs(operator)["parent"]
    log_in(page, operator)
    page.goto(job_page(parent))
    summary = page.locator("#durajobs-summary")
    expect(summary.locator(".durajobs-headline .durajobs-partial")).to_have_text("Child jobs: partly failed")
    expect(summary.locator(".durajobs-error")).to_contain_text("updated on 3 of 4 servers")
    children = page.locator("#children-group")
    expect(children.locator("tbody tr").filter(has_text="web-3").locator(".durajobs-badge")).to_have_text(
        "Failed"
    )
    screenshot(page, tmp_path, "admin-parent-page.png", full_page=True, docs=False)


def test_an_ended_parent_no_longer_shows_a_step_waiting_for_its_children(page, operator):
    """Once the parent has been woken and has failed, its page does not say it still waits."""
    parent = build_jobs(operator)["parent"]
    log_in(page, operator)
    page.goto(job_page(parent))
    summary = page.locator("#durajobs-summary")
    expect(headline_badge(page)).to_have_text("Failed")  # served, and never refreshed: it has ended
    facts = summary.locator(".durajobs-facts").inner_text()
    assert "Waiting for 4 of 4 child jobs" not in facts, facts
    assert summary.locator(".durajobs-facts .durajobs-waiting").count() == 0, facts


COUNT_SUMMARY_FETCHES = """
(() => {
    const fetch = window.fetch;
    window.summaryFetches = 0;
    window.fetch = function (resource, options) {
        if (String(resource).includes("/live/")) window.summaryFetches += 1;
        return fetch.call(this, resource, options);
    };
})();
"""


def test_running_job_summary_refreshes_itself_until_the_job_ends(page, operator):
    """Progress pushed to a running job shows on its open page without a reload; once the job has
    ended, the page says so and stops asking the server."""
    job, _ = enqueue("browser_backup_database", subject={"host": "db-3"}, label="Back up db-3")
    lease = claim("browser-test-worker")  # the test holds the job running, as a worker would
    assert lease is not None and lease.job.pk == job.pk
    log_in(page, operator)
    page.add_init_script(COUNT_SUMMARY_FETCHES)
    page.clock.install()  # time flows as usual; run_for() below jumps ahead
    page.goto(job_page(job))
    summary = page.locator("#durajobs-summary")
    expect(headline_badge(page)).to_have_text("Running")
    expect(page.locator("#durajobs-live")).to_have_attribute("data-terminal", "false")
    expect(summary.locator("progress")).to_have_attribute("value", "0")
    page.evaluate("window.notReloaded = true")

    update(job, progress=60)
    page.clock.run_for(2_000)  # the page's next refresh now, instead of within 2 s
    expect(summary.locator(".durajobs-headline")).to_contain_text("60%")
    expect(summary.locator("progress")).to_have_attribute("value", "60")
    assert page.evaluate("window.notReloaded === true"), "the page was reloaded"

    assert execute(lease).status == Status.DONE
    page.clock.run_for(2_000)
    expect(page.locator("#durajobs-live")).to_have_attribute("data-terminal", "true")
    expect(headline_badge(page)).to_have_text("Done")
    expect(summary.locator(".durajobs-headline")).to_contain_text("100%")
    fetches = page.evaluate("window.summaryFetches")
    assert fetches >= 2  # the counter sees the refreshes
    page.evaluate("window.timerFired = false; setTimeout(() => { window.timerFired = true; }, 30000)")
    page.clock.run_for(60_000)  # a minute of the page's timers, at once
    assert page.evaluate("window.timerFired"), "run_for() did not run the page's timers"
    assert page.evaluate("window.summaryFetches") == fetches, "an ended job's page still refreshes"
    assert page.evaluate("window.notReloaded === true"), "the page was reloaded"
