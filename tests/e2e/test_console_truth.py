"""The console tells the truth at a glance, in a real browser (Debian's Chromium, driven by
Playwright as in test_browser), in English and in Korean:

- a job that changes while its page is open changes its heading, the tab's title, the
  breadcrumb, the summary and the steps together, within one refresh, and the change is announced;
- a question answered with the keyboard alone, or a job cancelled, leaves no question in the
  summary nor in the job's row of the list (its log keeps it);
- axe-core finds no serious or critical accessibility violation on the list, a job's page and
  the dashboard (axe-core comes from npm: scripts/install-axe).
"""

from __future__ import annotations

import os
import re

import pytest
from django.utils import translation

from django_durajobs import Status, drain, enqueue
from tests.e2e import test_browser as browser_test
from tests.e2e.test_browser import build_jobs, click_to_operate, expect, job_page, log_in, row
from tests.e2e.test_console_browser import DASHBOARD, LIST, SUBTITLE, poll_now
from tests.helpers import REPO_ROOT

pytestmark = pytest.mark.django_db(transaction=True)

browser = browser_test.browser
page = browser_test.page
operator = browser_test.operator

AXE = REPO_ROOT / "var" / "axe" / "node_modules" / "axe-core" / "axe.min.js"
QUESTION = "example.org already serves a site from another account. Overwrite it with this release?"
LANGUAGES = ["en", "ko"]


@pytest.fixture(params=LANGUAGES)
def language(request, settings):
    settings.LANGUAGE_CODE = request.param
    return request.param


def said(language: str, text: str, context: str | None = None) -> str:
    with translation.override(language):
        return str(translation.pgettext(context, text) if context else translation.gettext(text))


def asking_job(operator):
    job, _ = enqueue(
        "browser_deploy_site",
        subject={"domain": "example.org", "occupied": True},
        label="Deploy example.org",
        created_by=operator,
    )
    drain()
    job.refresh_from_db()
    assert job.status == Status.NEEDS_USER
    return job


def answer_with_the_keyboard(page, label: str) -> None:
    """Tab to the answer's button and press Enter: no mouse."""
    for _press in range(60):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement && document.activeElement.textContent.trim()") == label:
            with page.expect_navigation():
                page.keyboard.press("Enter")
            return
    raise AssertionError(f"no button {label!r} within 60 presses of Tab")


def test_an_answer_leaves_no_question_and_the_done_job_says_so_everywhere(page, operator, language):
    job = asking_job(operator)
    sign_in(page, operator, language)
    page.clock.install()
    listed = page.context.new_page()
    listed.clock.install()
    listed.goto(LIST)
    expect(row(listed, "Deploy example.org").locator(".field-reason")).to_contain_text("example.org already")
    page.goto(job_page(job))
    summary = page.locator("#durajobs-summary")
    expect(summary.locator(".durajobs-question")).to_have_text(QUESTION)

    answer_with_the_keyboard(page, "Overwrite the site")

    expect(summary.locator(".durajobs-question")).to_have_count(0)
    queued = f"#{job.pk}, {said(language, 'Queued')}"
    expect(page.locator(SUBTITLE)).to_contain_text(queued)
    expect(summary.locator(".durajobs-facts")).not_to_contain_text(said(language, "Needs a decision"))
    poll_now(listed)
    expect(row(listed, "Deploy example.org").locator(".field-reason")).not_to_contain_text(
        "example.org already"
    )

    page.evaluate("window.notReloaded = true")
    assert drain() == 1  # the worker runs it to its end while the page is open
    poll_now(page)
    done = f"#{job.pk}, {said(language, 'Done')}"
    expect(page.locator(SUBTITLE)).to_contain_text(done)
    expect(page).to_have_title(re.compile(re.escape(done)))
    expect(page.locator(".breadcrumbs")).to_contain_text(done)
    expect(page.locator(".breadcrumbs")).not_to_contain_text(queued)
    expect(summary.locator(".durajobs-headline .durajobs-badge").first).to_have_text(said(language, "Done"))
    expect(page.locator("#durajobs-announce")).to_contain_text(done)
    done_badges = page.locator("#steps-group tbody tr .durajobs-badge")
    expect(done_badges).to_have_text([said(language, "Done")] * 4)
    expect(page.locator("#log_lines-group")).to_contain_text(QUESTION)  # the log keeps the question
    assert page.evaluate("window.notReloaded === true"), "the page was reloaded"


def test_a_cancelled_job_shows_no_question_on_its_page_or_in_the_list(page, operator, language):
    job = asking_job(operator)
    sign_in(page, operator, language)
    page.goto(job_page(job))
    page.locator("#durajobs-summary .durajobs-cancel").click()  # Cancel asks first
    yes = page.locator("input[type=submit]")
    click_to_operate(page, yes, job, "cancel")

    summary = page.locator("#durajobs-summary")
    expect(page.locator(SUBTITLE)).to_contain_text(f"#{job.pk}, {said(language, 'Cancelled')}")
    expect(summary).not_to_contain_text(QUESTION)
    expect(page.locator("#log_lines-group")).to_contain_text(QUESTION)
    page.goto(LIST)
    expect(row(page, "Deploy example.org").locator(".field-reason")).not_to_contain_text(
        "example.org already"
    )


def sign_in(page, operator, language: str) -> None:
    """Log in on the admin's login page, in the site's language."""
    if language == "en":
        log_in(page, operator)
        return
    page.goto("/admin/login/?next=/admin/")
    page.get_by_label(said("ko", "username")).fill(operator.username)
    page.get_by_label(said("ko", "Password")).fill(browser_test.PASSWORD)
    page.get_by_role("button", name=said("ko", "Log in")).click()
    page.wait_for_url("**/admin/")


# Accessibility -------------------------------------------------------------------------------------


def serious_violations(page) -> list[dict]:
    """axe-core's serious and critical violations of the page as it is, each with a few of its nodes."""
    if not AXE.exists():
        reason = f"{AXE} is missing: scripts/install-axe installs axe-core from npm"
        if os.environ.get("CI") == "true":
            pytest.fail(reason + " (CI=true: .ci/run runs it)")
        pytest.skip(reason)
    page.add_script_tag(path=str(AXE))
    return page.evaluate(
        """async () => (await axe.run(document, {resultTypes: ["violations"]})).violations
            .filter(v => ["serious", "critical"].includes(v.impact))
            .map(v => ({id: v.id, help: v.help, nodes: v.nodes.slice(0, 5).map(n => n.html)}))"""
    )


@pytest.mark.parametrize("where", ["list", "job page", "dashboard"])
def test_axe_finds_no_serious_violation(page, operator, language, where):
    jobs = build_jobs(operator)
    sign_in(page, operator, language)
    url = {"list": LIST, "job page": job_page(jobs["question"]), "dashboard": DASHBOARD}[where]
    page.goto(url)
    page.wait_for_load_state("networkidle")
    expect(page.locator("progress:not([aria-label])")).to_have_count(0)  # every progress bar is named
    violations = serious_violations(page)
    assert violations == [], "\n".join(f"{v['id']}: {v['help']}: {v['nodes']}" for v in violations)


# Finding things ------------------------------------------------------------------------------------


def test_the_list_fits_1366_px_without_scrolling_sideways(page, operator):
    build_jobs(operator)
    page.set_viewport_size({"width": 1366, "height": 768})
    log_in(page, operator)
    page.goto(LIST)
    results = page.locator("#changelist .results")
    expect(results.locator("tbody tr").first).to_be_visible()
    overflow = results.evaluate("element => element.scrollWidth - element.clientWidth")
    assert overflow <= 0, f"the list scrolls {overflow} px sideways at 1,366 px"
    for column in ("status_badge", "reason", "progress_bar", "next_run"):  # what an operator needs
        expect(page.locator(f"#result_list thead .column-{column}")).to_be_visible()


def test_the_dashboard_is_linked_from_the_admin_index(page, operator):
    log_in(page, operator)
    page.goto("/admin/")
    page.get_by_role("link", name="Jobs dashboard").click()
    expect(page).to_have_url(re.compile(re.escape(DASHBOARD) + "$"))
