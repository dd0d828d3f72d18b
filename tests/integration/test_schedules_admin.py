"""The schedule list in the admin, through the test client with real staff users and permissions."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse
from django.utils.html import escape

from django_durajobs import Schedule, store
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db

SCRIPT = "<script>alert(1)</script>"


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def client_of(django_user_model, username: str, *codenames: str) -> Client:
    user = django_user_model.objects.create_user(username=username, is_staff=True)
    for codename in codenames:
        user.user_permissions.add(
            Permission.objects.get(content_type__app_label="django_durajobs", codename=codename)
        )
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def viewer(django_user_model):
    return client_of(django_user_model, "vera", "view_schedule", "view_job")


@pytest.fixture
def editor(django_user_model):
    return client_of(django_user_model, "eddie", "view_schedule", "change_schedule", "add_schedule")


def schedule(name="reports", source=Schedule.Source.ADMIN, **fields) -> Schedule:
    row = Schedule(name=name, kind="scheduled_tick", source=source, **{"every_seconds": 3600, **fields})
    store.save_schedule(row)
    return row


LIST = "admin:django_durajobs_schedule_changelist"


def change_url(row) -> str:
    return reverse("admin:django_durajobs_schedule_change", args=[row.pk])


def test_the_list_shows_timing_runs_and_a_link_to_the_jobs_made(viewer):
    row = schedule(subject={"note": SCRIPT})
    made = JobFactory(kind="scheduled_tick", idempotency_key="schedule:reports:2025-01-01T00:00:00Z")
    JobFactory(kind="scheduled_tick", idempotency_key="schedule:other:2025-01-01T00:00:00Z")
    page = viewer.get(reverse(LIST)).content.decode()
    assert "reports" in page and "every 3600 s" in page
    jobs_url = (
        reverse("admin:django_durajobs_job_changelist") + "?idempotency_key__startswith=schedule%3Areports%3A"
    )
    assert escape(jobs_url) in page
    listed = viewer.get(jobs_url)
    assert listed.status_code == 200
    assert list(listed.context["cl"].result_list) == [made]
    assert SCRIPT not in viewer.get(change_url(row)).content.decode()


def test_an_editor_adds_a_schedule_for_a_registered_kind_and_its_next_run_is_worked_out(editor):
    response = editor.post(
        reverse("admin:django_durajobs_schedule_add"),
        {
            "name": "morning",
            "kind": "scheduled_tick",
            "subject": '{"team": "ops"}',
            "cron": "0 7 * * 1-5",
            "every_seconds": "",
            "timezone": "Europe/Berlin",
            "missed": "skip",
            "enabled": "on",
        },
    )
    assert response.status_code == 302
    row = Schedule.objects.get()
    assert (row.kind, row.subject, row.cron, row.source, row.missed) == (
        "scheduled_tick",
        {"team": "ops"},
        "0 7 * * 1-5",
        "admin",
        "skip",
    )
    assert row.next_run_at is not None


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"kind": "nobody_registered_this", "cron": "0 7 * * *"}, "Select a valid choice"),
        ({"cron": "0 25 * * *"}, "is not a cron expression"),
        ({"cron": "", "every_seconds": ""}, "one of a cron expression and every"),
        ({"cron": "", "every_seconds": "0"}, "from 1 to"),
        ({"cron": "0 7 * * *", "timezone": "Mars/Olympus"}, "unknown time zone"),
    ],
)
def test_a_schedule_that_is_not_one_is_refused_with_what_is_wrong(editor, fields, says):
    data = {"name": "bad", "kind": "scheduled_tick", "subject": "{}", "missed": "once", **fields}
    response = editor.post(reverse("admin:django_durajobs_schedule_add"), data)
    assert response.status_code == 200
    assert escape(says) in response.content.decode()
    assert not Schedule.objects.exists()


def test_enable_and_disable_are_actions_for_those_who_may_change_schedules(editor, viewer):
    row = schedule()
    action = {"action": "disable_schedules", "_selected_action": [row.pk]}
    viewer.post(reverse(LIST), action)
    row.refresh_from_db()
    assert row.enabled
    assert "disable_schedules" not in viewer.get(reverse(LIST)).content.decode()
    editor.post(reverse(LIST), action)
    row.refresh_from_db()
    assert not row.enabled
    editor.post(reverse(LIST), {**action, "action": "enable_schedules"})
    row.refresh_from_db()
    assert row.enabled


def test_a_declared_schedule_is_only_enabled_or_disabled_here(editor, django_user_model):
    row = schedule("from_code", source=Schedule.Source.CODE)
    page = editor.get(change_url(row)).content.decode()
    assert 'name="enabled"' in page and 'name="cron"' not in page and 'name="kind"' not in page
    editor.post(change_url(row), {"enabled": "", "cron": "* * * * *"})
    row.refresh_from_db()
    assert (row.enabled, row.cron, row.every_seconds) == (False, "", 3600)
    remover = client_of(django_user_model, "dora", "view_schedule", "delete_schedule")
    assert (
        remover.post(
            reverse("admin:django_durajobs_schedule_delete", args=[row.pk]), {"post": "yes"}
        ).status_code
        == 403
    )
    assert Schedule.objects.filter(pk=row.pk).exists()


def test_an_added_schedule_can_be_deleted_by_those_who_may(viewer, django_user_model):
    row = schedule()
    delete_url = reverse("admin:django_durajobs_schedule_delete", args=[row.pk])
    assert viewer.post(delete_url, {"post": "yes"}).status_code == 403
    remover = client_of(django_user_model, "dora", "view_schedule", "delete_schedule")
    assert remover.post(delete_url, {"post": "yes"}).status_code == 302
    assert not Schedule.objects.exists()


def test_without_permissions_the_list_is_forbidden(django_user_model):
    nobody = client_of(django_user_model, "nobody", "view_job")
    assert nobody.get(reverse(LIST)).status_code == 403
    assert nobody.get(reverse("admin:django_durajobs_schedule_add")).status_code == 403
