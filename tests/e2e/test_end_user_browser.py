"""The job widget in a real browser, on the example project's "my deploys" page: a customer (no
staff, no permissions) signs in, watches their deploy go from queued to a question, answers it
with one of its offered buttons, and sees it done; the same in Korean, answered by keyboard.

The browser and its page are the admin's browser test's (tests/e2e/test_browser.py): Debian's
Chromium, skipped without it except in CI. ``live_server`` is WSGI, so the widget's stream is
polled (an answer every ``WSGI_STREAM_RETRY_SECONDS``), as a project under WSGI sees it.
"""

from __future__ import annotations

import re

import pytest

from django_durajobs import Status, drain, enqueue
from tests.e2e import test_browser as browser_test
from tests.e2e.test_browser import PASSWORD, expect, screenshot
from tests.integration.test_korean import ko

pytestmark = pytest.mark.django_db(transaction=True)

browser = browser_test.browser
page = browser_test.page


@pytest.fixture
def customer(django_user_model, settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # a fast log-in
    settings.ROOT_URLCONF = "example_project.urls"
    settings.DURAJOBS = {"WSGI_STREAM_RETRY_SECONDS": 0.5}
    return django_user_model.objects.create_user("customer", "customer@example.org", PASSWORD)


def sign_in(page, user, texts=str) -> None:
    page.goto("/my-deploys/")
    page.get_by_label(re.compile(texts("username"), re.IGNORECASE)).fill(user.username)
    page.get_by_label(texts("Password")).fill(PASSWORD)
    page.get_by_role("button", name=texts("Sign in")).click()
    page.wait_for_url("**/my-deploys/")


def deploy(customer):
    job, _created = enqueue(
        "browser_deploy_site",
        subject={"domain": "shop.example", "occupied": True},
        label="Deploy shop.example",
        created_by=customer,
    )
    return job


def test_a_customer_watches_their_deploy_and_answers_its_question(page, customer, tmp_path):
    job = deploy(customer)
    sign_in(page, customer)
    widget = page.get_by_role("region", name="Deploy shop.example")
    expect(widget.locator(".durajobs-status")).to_have_text("Queued")
    drain()
    expect(widget.locator(".durajobs-status")).to_have_text("Needs a decision")
    expect(widget.get_by_role("group", name="Your answer is needed")).to_contain_text("already serves a site")
    expect(widget.get_by_role("list", name="Steps").get_by_role("listitem")).to_have_count(4)
    page.wait_for_timeout(1_500)  # a few polls with nothing new: no "connection lost"
    expect(widget.get_by_role("alert")).to_have_count(0)
    screenshot(page, tmp_path, "end-user-widget.png")
    widget.get_by_role("button", name="Overwrite the site").click()
    expect(widget.locator(".durajobs-status")).to_have_text("Queued")
    drain()
    expect(widget.locator(".durajobs-status")).to_have_text("Done")
    expect(widget.get_by_role("progressbar", name="Progress")).to_have_attribute("aria-valuenow", "100")
    expect(widget.get_by_role("button")).to_have_count(0)
    job.refresh_from_db()
    answered = job.log_lines.filter(line__contains="Overwrite the site").values_list("line", flat=True)
    assert job.status == Status.DONE and any("customer" in line for line in answered)


def test_the_widget_speaks_korean_and_answers_by_keyboard(page, customer, settings):
    settings.LANGUAGE_CODE = "ko"
    deploy(customer)
    drain()
    sign_in(page, customer, texts=ko)
    widget = page.get_by_role("region", name="Deploy shop.example")
    expect(widget.locator(".durajobs-status")).to_have_text(ko("Needs a decision"))
    expect(widget.get_by_role("progressbar", name=ko("Progress"))).to_be_visible()
    expect(widget.get_by_role("button", name=ko("Cancel the job"))).to_be_visible()
    widget.get_by_role("button", name="Keep the existing site").focus()
    page.wait_for_timeout(2_500)  # an update or two while it has the focus: the button stays, focused
    page.keyboard.press("Enter")
    expect(widget.locator(".durajobs-status")).to_have_text(ko("Queued"))
    drain()
    expect(widget.locator(".durajobs-status")).to_have_text(ko("Done"))
    expect(widget.locator(".durajobs-timing")).to_have_text(re.compile(".+"))
