"""The admin in Korean in a real browser (``LANGUAGE_CODE = "ko"``): an operator logs in on Django's
Korean login page, reads the job list's statuses and filters in Korean, opens a failed job and
clicks its Korean Retry button; the live console goes on counting in Korean ("방금", "… 전").

The browser, the page and the operator are the English browser test's (tests/e2e/test_browser.py).
"""

from __future__ import annotations

import re

import pytest

from django_durajobs import Status
from tests.e2e import test_browser as browser_test
from tests.e2e.test_browser import PASSWORD, build_jobs, click_to_operate, expect, job_page, row
from tests.integration.test_korean import ko

pytestmark = pytest.mark.django_db(transaction=True)

browser = browser_test.browser
page = browser_test.page
operator = browser_test.operator


def test_an_operator_works_in_korean_from_the_login_to_a_retry(page, operator, settings):
    settings.LANGUAGE_CODE = "ko"
    jobs = build_jobs(operator)
    failed = jobs["failed"]

    page.goto("/admin/login/?next=/admin/")
    page.get_by_label(ko("username")).fill(operator.username)
    page.get_by_label(ko("Password")).fill(PASSWORD)
    page.get_by_role("button", name=ko("Log in")).click()
    page.wait_for_url("**/admin/")
    expect(page.locator("html")).to_have_attribute("lang", "ko")

    page.goto("/admin/django_durajobs/job/")
    expect(row(page, "Back up db-1").locator(".durajobs-badge").first).to_have_text(ko("Failed"))
    expect(row(page, "Deploy shop.example.net").locator(".durajobs-badge").first).to_have_text(
        ko("Needs a decision")
    )
    status_filter = page.locator(f'#changelist-filter details[data-filter-title="{ko("status")}"]')
    status_filter.get_by_role("link", name=ko("Failed"), exact=True).click()
    expect(page).to_have_url(re.compile(r"[?&]status__exact=failed"))
    expect(page.locator("select[name=action] option", has_text=ko("Retry selected jobs"))).to_have_count(1)

    page.goto(job_page(failed))
    live = page.locator("#durajobs-live")
    # "Updated just now", or "Updated 2 s ago" once a loaded machine took seconds to show it
    expect(live).to_contain_text(re.compile(r"(방금|\d+초 전) 업데이트됨"))
    expect(live).not_to_contain_text("Updated")
    retry = page.locator("#durajobs-summary").get_by_role(
        "button", name=ko("Retry", "job operation"), exact=True
    )
    click_to_operate(page, retry, failed, "retry")
    expect(page.locator(".messagelist .success")).to_have_text(
        ko("Job %(id)s queued for another try.") % {"id": failed.pk}
    )
    failed.refresh_from_db()
    assert failed.status == Status.QUEUED

    # The page counts its times on by itself, with the texts of the app's JavaScript catalog: "방금"
    # (just now), then "3초 전" (3 s ago); English here would mean that catalog was not loaded.
    page.wait_for_timeout(2500)
    expect(live.locator("time")).to_have_text(re.compile(r"^(방금|\d+초 전)$"))
    expect(live).not_to_contain_text("ago")
