"""The admin's "Rerun from a step" in a real browser (Chromium through Playwright, as
tests/e2e/test_browser.py drives it): an operator ticks a failed job, picks the action, chooses the
step on the page that follows, and the new job runs that step and the ones after it; a step whose
earlier steps never finished is refused with the reason. The rules: tests/integration/test_reruns.py.
"""

from __future__ import annotations

import re

import pytest

from django_durajobs import Job, drain
from tests.e2e.test_browser import browser, log_in, operator, page  # noqa: F401  (fixtures)
from tests.integration.test_reruns import failed_at_three, five_steps  # noqa: F401  (fixtures)

try:
    from playwright.sync_api import expect
except ImportError:  # the browser fixture skips (or, in CI, fails) the test
    expect = None

pytestmark = pytest.mark.django_db(transaction=True)


def rerun_from(tab, job: Job, step: str) -> None:
    tab.goto("/admin/django_durajobs/job/")
    tab.locator(f'input[name="_selected_action"][value="{job.pk}"]').check()
    tab.select_option('select[name="action"]', "rerun_jobs")
    tab.locator('button[name="index"]').click()
    tab.select_option("#id_from_step", step)
    tab.get_by_role("button", name="Rerun").click()


def test_an_operator_reruns_a_failed_job_from_a_step_in_the_browser(page, operator, five_steps):  # noqa: F811
    original = failed_at_three(five_steps)
    log_in(page, operator)

    rerun_from(page, original, "four")  # three never finished
    expect(page.locator(".messagelist")).to_contain_text(
        f"Steps before 'four' did not finish in job {original.pk}: three."
    )
    assert not Job.objects.filter(rerun_of=original).exists()

    rerun_from(page, original, "three")
    again = Job.objects.get(rerun_of=original)
    message = page.locator(".messagelist")
    expect(message).to_contain_text(f"Job {original.pk} runs again from step three as job #{again.pk}.")
    message.get_by_role("link", name=f"#{again.pk}").click()
    expect(page).to_have_url(re.compile(rf"/admin/django_durajobs/job/{again.pk}/change/$"))

    drain()
    assert five_steps["calls"] == ["three", "four", "five"]
    again.refresh_from_db()
    assert again.status == "done"
