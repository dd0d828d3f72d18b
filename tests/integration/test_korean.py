"""The package in Korean (``LANGUAGE_CODE = "ko"``): the admin's pages, the live console's texts,
an operation's refusal, what a worker writes on a job and ``manage.py jobs`` all speak it, while
codes, statuses and ``--json`` keys stay the same in every language.

The expected texts are read from the shipped catalog (``ko()``), so a text that lost its
translation fails here as well as in ``scripts/translations --check``; a few are spelled out, so
that a catalog that "translates" into English would fail too.
"""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.urls import reverse
from django.utils import translation
from django.utils.html import escape

from django_durajobs import JobError, JobLog, Status, drain, enqueue, retry
from django_durajobs.admin.pages import answer_of
from django_durajobs.answers import translated_languages
from django_durajobs.transitions import Trigger, described
from tests.admin_pages import change_url, list_url, needs_user_job, operate_url
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db


def ko(english: str, context: str | None = None) -> str:
    """``english`` as the Korean catalog has it; it must have it."""
    with translation.override("ko"):
        korean = translation.pgettext(context, english) if context else translation.gettext(english)
    assert korean != english, f"the Korean catalog does not translate {english!r}"
    return korean


@pytest.fixture
def korean(settings):
    settings.LANGUAGE_CODE = "ko"


def test_the_job_list_shows_korean_labels_statuses_actions_and_filters(korean, admin_client):
    JobFactory(kind="states_basic", label="Back up db-1", status=Status.FAILED)
    JobFactory(kind="states_ask", label="Deploy shop", status=Status.NEEDS_USER)

    page = admin_client.get(list_url()).content.decode()

    assert '<html lang="ko"' in page
    for english in ("Failed", "Needs a decision", "Retry selected jobs", "Resume selected jobs", "status"):
        assert ko(english) in page, english
    assert "실패" in page and "재시도" in page
    assert ko("Log out") in page  # Django's own Korean around ours
    assert ">Failed<" not in page and "Retry selected jobs" not in page


def test_a_job_page_offers_its_buttons_in_korean_and_answers_in_korean(korean, admin_client):
    failed = JobFactory(kind="states_basic", label="Back up db-1", status=Status.FAILED, error="boom")

    page = admin_client.get(change_url(failed)).content.decode()
    assert ko("Retry", "job operation") in page
    live_line = page[page.index('class="durajobs-live-text"') :].split("</span>")[0]
    assert "방금" in live_line and "Updated" not in live_line  # "Updated just now"

    answer = admin_client.post(operate_url(failed, "retry"), follow=True)
    assert ko("Job %(id)s queued for another try.") % {"id": failed.pk} in answer.content.decode()


def test_a_refused_operation_is_explained_in_korean_with_the_same_code():
    done = JobFactory(kind="states_basic", status=Status.DONE)

    with translation.override("ko"), pytest.raises(JobError) as refused:
        retry(done)

    with translation.override("ko"):
        allowed = described(Trigger.RETRY)
    assert refused.value.code == "job_not_retryable"
    assert str(refused.value) == ko("Job %(job)s is %(status)s; only %(allowed)s jobs can be retried.") % {
        "job": done.pk,
        "status": "done",
        "allowed": allowed,
    }
    assert ko("%(statuses)s or %(last)s") % {"statuses": "failed", "last": "needs_user"} == allowed


def test_a_worker_in_korean_writes_korean_on_the_job_and_keeps_its_codes(korean):
    job, _ = enqueue("event_waiter", subject={"name": "payment:7"})

    drain()

    job.refresh_from_db()
    assert job.status == Status.AWAITING_EXTERNAL
    assert job.wait_reason == ko("Waiting for event %(name)s") % {"name": "payment:7"}


def test_manage_py_jobs_prints_korean_tables_and_english_json(korean):
    JobFactory(kind="states_basic", label="Back up db-1", status=Status.FAILED)

    shown = StringIO()
    call_command("jobs", "stats", stdout=shown)
    as_json = StringIO()
    call_command("jobs", "list", "--json", stdout=as_json)

    assert ko("Jobs by queue and status") in shown.getvalue()
    [row] = json.loads(as_json.getvalue())
    assert row["status"] == "failed" and row["label"] == "Back up db-1"


def test_the_live_console_gets_its_korean_texts_from_the_apps_javascript_catalog(korean, admin_client):
    catalog = admin_client.get(reverse("admin:django_durajobs_job_jsi18n"))

    assert catalog.status_code == 200
    text = catalog.content.decode()
    assert "방금" in text or "\\ubc29\\uae08" in text  # "just now", as UTF-8 or as a JSON escape


def test_an_answer_given_in_korean_is_the_chosen_action_in_every_language(korean, admin_client, settings):
    """The answer's log line is written in the operator's language; the job page finds it again
    whatever language it is read in (``answers.answer_line_pattern``, a regex on every database)."""
    job = needs_user_job()
    admin_client.post(operate_url(job, "resume"), {"action": "reject"})
    line = JobLog.objects.filter(job=job).order_by("-id").first().line
    assert line == ko("Resumed with %(action)s by %(actor)s.") % {"action": "'Reject it'", "actor": "admin"}

    assert "ko" in translated_languages()
    for language in ("en-us", "ko"):
        settings.LANGUAGE_CODE = language
        assert escape(line) in answer_of(job), language
