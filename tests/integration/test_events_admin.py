"""Events in the admin: operators find the jobs waiting for an event by its name, and one with
``operate_job`` sends an event from the admin (the server checks it); an event's payload is shown
redacted and escaped. Committed, as requests are, so a send's wake-up runs."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import ADDITION, LogEntry
from django.urls import reverse

from django_durajobs import Event, Status, drain, enqueue, send_event
from tests.admin_pages import change_url, list_url, logged_in, messages_of, shown_ids, staff_user
from tests.job_rows import fresh

pytestmark = pytest.mark.django_db(transaction=True)

ADD_URL = "admin:django_durajobs_event_add"


def waiting_job(name: str):
    job, _ = enqueue("event_waiter", subject={"name": name})
    drain()
    assert fresh(job).status == Status.AWAITING_EXTERNAL
    return job


@pytest.fixture
def operator(django_user_model):
    return logged_in(staff_user(django_user_model, "olga", "view_job", "operate_job"))


def test_an_operator_sends_an_event_from_the_admin_and_its_waiting_job_wakes(operator):
    job = waiting_job("payment:5")
    page = operator.get(change_url(job)).content.decode()
    send_url = f"{reverse(ADD_URL)}?name=payment%3A5"
    assert f'href="{send_url}"' in page

    form = operator.get(send_url)
    assert 'value="payment:5"' in form.content.decode()
    response = operator.post(reverse(ADD_URL), {"name": "payment:5", "payload": '{"amount": 12}'})

    event = Event.objects.get(name="payment:5")
    assert response.status_code == 302
    assert (event.payload, event.sent_by) == ({"amount": 12}, "olga")
    assert LogEntry.objects.filter(object_id=str(event.pk), action_flag=ADDITION).exists()
    assert fresh(job).status == Status.QUEUED
    drain()
    assert fresh(job).result == {"payload": {"amount": 12}}


def test_sending_a_name_sent_before_says_it_changed_nothing(operator):
    send_event("payment:6", "first")

    response = operator.post(reverse(ADD_URL), {"name": "payment:6", "payload": '"second"'}, follow=True)

    assert any("was sent before" in message for message in messages_of(response))
    assert Event.objects.get(name="payment:6").payload == "first"


@pytest.mark.parametrize(
    ("name", "payload", "error"),
    [
        ("   ", "", "This field is required."),
        ("ok", "NaN", "holds NaN or Infinity"),
        ("ok", "{", "Enter a valid JSON"),
    ],
)
def test_a_send_with_bad_input_is_refused_by_the_form(operator, name, payload, error):
    response = operator.post(reverse(ADD_URL), {"name": name, "payload": payload})

    assert response.status_code == 200
    assert error in response.content.decode()
    assert not Event.objects.exists()


def test_without_operate_job_nobody_sends_an_event(django_user_model):
    job = waiting_job("payment:7")
    viewer = logged_in(staff_user(django_user_model, "vic", "view_job", "view_event"))

    assert viewer.get(reverse(ADD_URL)).status_code == 403
    assert viewer.post(reverse(ADD_URL), {"name": "payment:7", "payload": "1"}).status_code == 403

    assert not Event.objects.exists()
    assert fresh(job).status == Status.AWAITING_EXTERNAL


def test_an_events_payload_is_shown_redacted_and_escaped(operator):
    send_event("signup:1", {"api_key": "sk_live_hidden", "note": "<script>alert(1)</script>"})
    event = Event.objects.get(name="signup:1")

    page = operator.get(reverse("admin:django_durajobs_event_change", args=[event.pk])).content.decode()

    assert "sk_live_hidden" not in page
    assert "<script>alert(1)</script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_the_job_list_finds_the_jobs_waiting_for_an_event_by_its_name(operator):
    first, second = waiting_job("order:1"), waiting_job("order:2")
    enqueue("event_waiter", subject={"name": "order:1"})  # queued: not waiting for it yet

    assert shown_ids(operator.get(list_url(), {"q": "order:1"})) == [first.pk]
    waiting = shown_ids(operator.get(list_url(), {"waits_for_event": "yes"}))
    assert sorted(waiting) == sorted([first.pk, second.pk])
