"""An operation of the job page says what it will do in the same words under its button, first on
its confirmation page, and in the job's log once done, where the line also names who did it."""

from __future__ import annotations

import pytest
from django.urls import reverse
from django.utils.html import escape

from django_durajobs import JobLog
from django_durajobs.admin.pages import CONFIRMED_FIRST
from tests.factories import JobStepFactory
from tests.job_states import build

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("status", "operation"),
    [
        ("failed", "retry"),
        ("needs_user", "retry"),
        ("queued", "pause"),
        ("running", "pause"),
        ("paused", "resume"),
        ("awaiting_external", "resume"),
        ("queued", "cancel"),
        ("running", "cancel"),
        ("done", "revert"),
    ],
)
def test_the_button_its_confirmation_and_the_log_say_what_it_does_in_the_same_words(
    admin_client, admin_user, status, operation
):
    job = build(status)
    JobStepFactory(job=job, state="done")
    page = admin_client.get(reverse("admin:django_durajobs_job_change", args=[job.pk]))
    sentence = str(dict((offered.name, help) for offered, help in page.context["buttons"])[operation])
    assert escape(sentence) in page.content.decode()  # under the button, not only in a tooltip
    url = reverse("admin:django_durajobs_job_operate", args=[job.pk, operation])
    if operation in CONFIRMED_FIRST:
        confirmation = admin_client.get(url)
        assert str(confirmation.context["consequences"][0]) == sentence
        assert escape(sentence) in confirmation.content.decode()

    assert admin_client.post(url).status_code == 302

    line = JobLog.objects.filter(job=job).order_by("id").last().line
    assert line.endswith(f" {sentence}"), line
    assert admin_user.get_username() in line.removesuffix(sentence)
