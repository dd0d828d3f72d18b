"""The Django admin as the operator's console (``django_durajobs/admin.py``), through the test client.

Real staff users with real permissions, real requests through the middleware (sessions, CSRF,
messages), jobs built in each state with ``tests.factories``. A refused operation must be a
message naming the job and why, never an error page; what a browser would post is derived from
the page itself where that matters (the CSRF token, the confirmation form, which form a button
belongs to).
"""

from __future__ import annotations

import re
from datetime import timedelta
from urllib.parse import urlencode

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.messages import constants as message_levels
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone
from django.utils.html import escape

from django_durajobs import Job, JobError, JobLog, describe, ops
from django_durajobs.admin.actions import SKIPPED_BECAUSE, counted
from django_durajobs.admin.pages import CONFIRMED_FIRST
from tests.admin_pages import (
    FormsAsABrowserSeesThem,
    between,
    change_url,
    history_of,
    list_url,
    logged_in,
    messages_of,
    needs_user_job,
    operate_url,
    post_action,
    rows_in,
    shown_ids,
    snapshot,
    staff_user,
    submit,
    summary_part,
    summary_url,
)
from tests.factories import JobFactory, JobStepFactory

pytestmark = pytest.mark.django_db

SCRIPT = "<script>alert(1)</script>"
IMG = "<img src=x onerror=alert(1)>"
OPERATIONS = ("resume", "retry", "pause", "cancel", "revert")


# URLs, users, messages ----------------------------------------------------------------------------


@pytest.fixture
def viewer(django_user_model):
    return staff_user(django_user_model, "vera-viewer", "view_job")


@pytest.fixture
def operator(django_user_model):
    return staff_user(django_user_model, "otto-operator", "view_job", "operate_job")


@pytest.fixture
def reverter(django_user_model):
    return staff_user(django_user_model, "rita-reverter", "view_job", "operate_job", "revert_job")


@pytest.fixture
def viewer_client(viewer):
    return logged_in(viewer)


@pytest.fixture
def operator_client(operator):
    return logged_in(operator)


@pytest.fixture
def reverter_client(reverter):
    return logged_in(reverter)


def refusal_of(operation: str, job, **arguments) -> str:
    """The reason the operation itself gives for refusing this job in its current state."""
    with pytest.raises(JobError) as refused:
        getattr(ops, operation)(job.pk, **arguments)
    return str(refused.value)


# 1. Actions on selected jobs ----------------------------------------------------------------------

# action -> (operation, jobs it applies to, jobs it must refuse); a spec is JobFactory kwargs.
ACTIONS = {
    "resume_jobs": (
        "resume",
        [{"status": "paused"}, {"status": "awaiting_external"}, {"status": "needs_user", "actions": None}],
        # A question with offered answers is answered on its page, never resumed without an answer.
        [{"status": "done"}, {"status": "running"}, {"status": "queued"}, {"status": "needs_user"}],
    ),
    "retry_jobs": (
        "retry",
        [{"status": "failed"}, {"status": "needs_user"}],
        [{"status": "done"}, {"status": "queued"}, {"status": "cancelled"}],
    ),
    "pause_jobs": (
        "pause",
        [{"status": "queued"}, {"status": "awaiting_external"}],
        [{"status": "reverting"}, {"status": "done"}, {"status": "needs_user"}],
    ),
    "cancel_jobs": (
        "cancel",
        [{"status": "queued"}, {"status": "awaiting_external"}, {"status": "paused"}],
        [{"status": "done"}, {"status": "reverting"}, {"status": "failed"}],
    ),
    "revert_jobs": (
        "revert",
        [{"status": "done"}, {"status": "failed"}, {"status": "needs_user"}],
        [{"status": "queued"}, {"status": "running"}, {"kind": "states_norevert", "status": "done"}],
    ),
}
# The status a job is in once the operation is applied.
APPLIED = {
    "resume": "queued",
    "retry": "queued",
    "pause": "paused",
    "cancel": "cancelled",
    "revert": "reverting",
}


def skipped_reasons(operation: str, refused) -> dict[str, int]:
    """How many of the refused jobs the operation itself refuses with each code."""
    codes: dict[str, int] = {}
    for job in refused:
        with pytest.raises(JobError) as refusal:
            getattr(ops, operation)(job.pk)
        codes[refusal.value.code] = codes.get(refusal.value.code, 0) + 1
    return codes


@pytest.mark.parametrize("action", ACTIONS)
def test_action_changes_the_allowed_jobs_and_says_in_one_message_how_many_were_skipped_and_why(
    admin_client, action
):
    """The refused jobs are left alone and counted by the operation's reason; the others still proceed."""
    operation, allowed_specs, refused_specs = ACTIONS[action]
    allowed = [JobFactory(**spec) for spec in allowed_specs]
    refused = [JobFactory(**spec) for spec in refused_specs]
    before = {job.pk: snapshot(job) for job in refused}

    response = post_action(admin_client, action, refused[:1] + allowed + refused[1:])

    assert response.status_code == 302
    for job in allowed:
        job.refresh_from_db()
        assert job.status == APPLIED[operation], job
    for job in refused:
        assert snapshot(job) == before[job.pk]
    (message,) = messages_of(response)
    assert messages_of(response, message_levels.WARNING) == [message]
    assert f"{len(allowed)} jobs." in message
    assert f"{len(refused)} were skipped: " in message
    for code, number in skipped_reasons(operation, refused).items():
        assert counted(SKIPPED_BECAUSE[code], number) in message, (code, message)


@pytest.mark.parametrize("action", ACTIONS)
def test_action_that_applies_to_none_of_the_selection_only_warns(admin_client, action):
    operation, _allowed, refused_specs = ACTIONS[action]
    refused = [JobFactory(**spec) for spec in refused_specs]
    before = [snapshot(job) for job in refused]

    response = post_action(admin_client, action, refused)

    assert response.status_code == 302
    assert [snapshot(job) for job in refused] == before
    (warning,) = messages_of(response)
    assert warning == messages_of(response, message_levels.WARNING)[0]
    assert f"0 jobs. {len(refused)} were skipped" in warning
    assert not LogEntry.objects.exists()


def test_action_with_a_job_deleted_since_the_list_was_shown_still_applies_to_the_rest(admin_client):
    kept = JobFactory(status="failed")
    gone = JobFactory(status="failed")
    gone_pk = gone.pk
    admin_client.get(list_url())  # the operator sees both and ticks them...
    gone.delete()  # ...while someone else deletes one

    response = admin_client.post(
        list_url(), {"action": "retry_jobs", "_selected_action": [str(kept.pk), str(gone_pk)], "index": "0"}
    )

    assert response.status_code == 302
    kept.refresh_from_db()
    assert kept.status == "queued"
    assert not Job.objects.filter(pk=gone_pk).exists()


def test_action_whose_whole_selection_was_deleted_is_no_error(admin_client):
    gone = JobFactory(status="failed")
    gone_pk = gone.pk
    gone.delete()

    response = admin_client.post(
        list_url(), {"action": "retry_jobs", "_selected_action": [str(gone_pk)], "index": "0"}
    )

    assert response.status_code == 302
    assert messages_of(response, message_levels.SUCCESS) == []
    assert not LogEntry.objects.exists()


def test_unknown_action_name_changes_nothing_and_is_no_error(admin_client):
    job = JobFactory(status="failed")
    before = snapshot(job)

    response = post_action(admin_client, "explode_jobs", [job])

    assert response.status_code == 302
    assert messages_of(response, message_levels.WARNING)  # Django's "No action selected."
    assert snapshot(job) == before
    assert not LogEntry.objects.exists()


# 2. The buttons on the job page -------------------------------------------------------------------

# operation -> (a job it applies to, the status it ends in, a job whose state refuses it)
BUTTONS = {
    "resume": ({"status": "awaiting_external"}, "queued", {"status": "done"}),
    "retry": ({"status": "failed"}, "queued", {"status": "running"}),
    "pause": ({"status": "queued"}, "paused", {"status": "failed"}),
    "cancel": ({"status": "awaiting_external"}, "cancelled", {"status": "done"}),
    "revert": ({"status": "done"}, "reverting", {"status": "queued"}),
}


def button_class(operation: str) -> str:
    return f'class="button durajobs-{operation}"'


@pytest.mark.parametrize("operation", OPERATIONS)
def test_button_is_offered_and_applies_when_the_state_allows_it(admin_client, operation):
    allowed, ends_in, _refused = BUTTONS[operation]
    job = JobFactory(**allowed)

    page = admin_client.get(change_url(job))
    assert page.status_code == 200
    assert button_class(operation) in page.content.decode()
    if operation in CONFIRMED_FIRST:  # a link to the page that asks first, which changes nothing
        assert f'href="{operate_url(job, operation)}"' in page.content.decode()
        before = snapshot(job)
        asking = admin_client.get(operate_url(job, operation))
        assert asking.status_code == 200 and "Are you sure?" in asking.content.decode()
        assert f'action="{operate_url(job, operation)}"' in asking.content.decode()
        assert snapshot(job) == before
    else:
        assert f'action="{operate_url(job, operation)}"' in page.content.decode()

    response = admin_client.post(operate_url(job, operation))

    assert response.status_code == 302
    assert response.url == change_url(job)
    job.refresh_from_db()
    assert job.status == ends_in
    successes = messages_of(response, message_levels.SUCCESS)
    assert len(successes) == 1 and f"Job {job.pk}" in successes[0]


@pytest.mark.parametrize("operation", OPERATIONS)
def test_button_refused_by_the_state_is_a_message_and_changes_nothing(admin_client, operation):
    """Not offered for that state; posted anyway (a stale page), it is a warning with the reason."""
    _allowed, _ends_in, refused = BUTTONS[operation]
    job = JobFactory(**refused)
    before = snapshot(job)

    page = admin_client.get(change_url(job))
    assert button_class(operation) not in page.content.decode()

    response = admin_client.post(operate_url(job, operation))

    assert response.status_code == 302
    assert response.url == change_url(job)
    assert snapshot(job) == before
    assert messages_of(response, message_levels.WARNING) == [refusal_of(operation, job)]
    assert messages_of(response, message_levels.SUCCESS) == []
    assert not history_of(job).exists()


def test_cancelling_a_running_job_from_its_page_requests_the_cancel(admin_client):
    job = JobFactory(status="running")

    response = admin_client.post(operate_url(job, "cancel"))

    assert response.status_code == 302
    job.refresh_from_db()
    assert (job.status, job.cancel_requested) == ("running", True)
    page = admin_client.get(change_url(job)).content.decode()
    assert button_class("cancel") not in page  # already requested
    assert "cancel requested" in summary_part(page)


def test_cancel_message_of_a_running_job_says_the_cancel_is_only_requested(admin_client):
    job = JobFactory(status="running")

    response = admin_client.post(operate_url(job, "cancel"))

    job.refresh_from_db()
    assert job.status == "running"
    (message,) = messages_of(response, message_levels.SUCCESS)
    assert "request" in message.lower(), message


@pytest.mark.parametrize("operation", OPERATIONS)
def test_view_only_user_is_forbidden_every_operation_and_sees_no_buttons(viewer_client, operation):
    allowed, _ends_in, _refused = BUTTONS[operation]
    job = JobFactory(**allowed)
    before = snapshot(job)

    page = viewer_client.get(change_url(job))
    assert page.status_code == 200
    assert "/operate/" not in page.content.decode()

    response = viewer_client.post(operate_url(job, operation))

    assert response.status_code == 403
    assert snapshot(job) == before
    assert not history_of(job).exists()


def test_operator_without_revert_permission_is_forbidden_revert_only(operator_client):
    job = JobFactory(status="failed")  # retry and revert both allowed by its state
    before = snapshot(job)

    page = operator_client.get(change_url(job)).content.decode()
    assert button_class("retry") in page
    assert button_class("revert") not in page
    assert operate_url(job, "revert") not in page

    response = operator_client.post(operate_url(job, "revert"))
    assert response.status_code == 403
    assert snapshot(job) == before

    response = operator_client.post(operate_url(job, "retry"))
    assert response.status_code == 302
    job.refresh_from_db()
    assert job.status == "queued"


def test_user_with_revert_permission_gets_the_revert_button_and_reverts(reverter_client):
    job = JobFactory(status="done")

    page = reverter_client.get(change_url(job)).content.decode()
    assert button_class("revert") in page

    response = reverter_client.post(operate_url(job, "revert"))
    assert response.status_code == 302
    job.refresh_from_db()
    assert (job.status, job.phase) == ("reverting", "revert")


def test_unknown_operation_is_404_and_changes_nothing(admin_client):
    job = JobFactory(status="failed")
    before = snapshot(job)

    response = admin_client.post(operate_url(job, "explode"))

    assert response.status_code == 404
    assert snapshot(job) == before


@pytest.mark.parametrize("object_id", ["999999", "not-a-number"])
def test_operation_on_a_missing_job_is_404(admin_client, object_id):
    url = reverse("admin:django_durajobs_job_operate", args=[object_id, "retry"])
    assert admin_client.post(url).status_code == 404


@pytest.mark.parametrize("operation", OPERATIONS)
def test_get_on_an_operation_url_changes_nothing(admin_client, operation):
    """A GET asks first for an operation that cannot be taken back, and is refused for the others."""
    allowed, _ends_in, _refused = BUTTONS[operation]
    job = JobFactory(**allowed)
    before = snapshot(job)

    response = admin_client.get(operate_url(job, operation))

    assert response.status_code == (200 if operation in CONFIRMED_FIRST else 405)
    assert snapshot(job) == before


# Answering a job that needs a person's decision.


def test_needs_user_page_offers_one_answer_per_offered_action(operator_client, viewer_client):
    job = needs_user_job()

    page = operator_client.get(change_url(job)).content.decode()
    summary = summary_part(page)
    assert summary.count(f'action="{operate_url(job, "resume")}"') == 2  # approve, reject: no bare resume
    assert '<input type="hidden" name="action" value="approve">' in summary
    assert '<input type="hidden" name="action" value="reject">' in summary
    assert ">Reject it</button>" in summary

    seen_by_viewer = summary_part(viewer_client.get(change_url(job)).content.decode())
    assert 'name="action"' not in seen_by_viewer
    assert "/operate/" not in seen_by_viewer


@pytest.mark.parametrize(("answer", "label"), [("approve", "Approve"), ("reject", "Reject it")])
def test_answering_an_offered_action_queues_the_job_with_it(operator_client, operator, answer, label):
    job = needs_user_job()

    response = operator_client.post(operate_url(job, "resume"), {"action": answer})

    assert response.status_code == 302
    job.refresh_from_db()
    assert (job.status, job.resume_action, job.user_message, job.actions) == ("queued", answer, "", None)
    (entry,) = history_of(job)
    assert entry.user == operator
    assert answer in entry.get_change_message()
    # The log names the label the operator clicked, and the operator.
    assert (
        JobLog.objects.filter(job=job).order_by("-id").first().line
        == f"Resumed with '{label}' by otto-operator."
    )


def test_answering_an_action_not_offered_is_a_message_and_changes_nothing(operator_client):
    job = needs_user_job()
    before = snapshot(job)

    response = operator_client.post(operate_url(job, "resume"), {"action": "destroy"})

    assert response.status_code == 302
    assert snapshot(job) == before
    assert messages_of(response, message_levels.WARNING) == [refusal_of("resume", job, action="destroy")]
    assert not history_of(job).exists()


def test_view_only_user_cannot_answer(viewer_client):
    job = needs_user_job()
    before = snapshot(job)

    assert viewer_client.post(operate_url(job, "resume"), {"action": "approve"}).status_code == 403
    assert snapshot(job) == before


@pytest.mark.parametrize("action", ["x" * 101, "a\x00b"], ids=["too_long", "nul"])
def test_resume_with_an_unstorable_action_is_refused_with_a_message(admin_client, action):
    job = JobFactory(status="awaiting_external")
    before = snapshot(job)

    response = admin_client.post(operate_url(job, "resume"), {"action": action})

    assert response.status_code == 302
    assert snapshot(job) == before
    assert messages_of(response, message_levels.WARNING)


# Clicking the buttons as a browser does.


@pytest.mark.parametrize("status", ["needs_user", "failed"])
def test_every_button_on_the_job_page_belongs_to_a_form_posting_to_its_operation(admin_client, status):
    job = needs_user_job() if status == "needs_user" else JobFactory(status="failed")
    content = admin_client.get(change_url(job)).content.decode()

    buttons = [
        button
        for button in FormsAsABrowserSeesThem(summary_part(content) + "</div>").buttons
        if "button" in button["attrs"].get("class", "")
    ]
    assert len(buttons) >= 2
    parsed = FormsAsABrowserSeesThem(content)
    owners = {button["text"].strip(): button["form"] for button in parsed.buttons}
    for button in buttons:
        form = owners[button["text"].strip()]
        assert form is not None and "/operate/" in form["attrs"].get("action", ""), button["text"]


def test_clicking_the_first_answer_as_a_browser_does_answers_the_job(operator_client):
    job = needs_user_job()
    content = operator_client.get(change_url(job)).content.decode()

    response = submit(operator_client, change_url(job), content, "Approve")

    assert response.status_code == 302
    job.refresh_from_db()
    assert (job.status, job.resume_action) == ("queued", "approve")


def test_clicking_a_later_button_as_a_browser_does_applies_it(admin_client):
    """The buttons after the first sit in forms of their own that post to their operation."""
    job = JobFactory(status="failed")  # buttons: Retry, Run again
    content = admin_client.get(change_url(job)).content.decode()

    response = submit(admin_client, change_url(job), content, "Run again")

    assert response.status_code == 302
    copy = Job.objects.exclude(pk=job.pk).get()
    assert response.url == change_url(copy)
    assert (copy.kind, copy.status, copy.label) == (job.kind, "queued", job.label)


# The actions in the list, by permission.


def offered_actions(response) -> set[str]:
    return set(re.findall(r'<option value="(\w+_jobs)"', response.content.decode()))


def test_actions_offered_in_the_list_follow_the_permissions(admin_client, operator_client, viewer_client):
    JobFactory(status="failed")

    rerun = {"rerun_jobs"}  # one job at a time, from a step: tests/integration/test_reruns.py
    assert offered_actions(admin_client.get(list_url())) == set(ACTIONS) | rerun
    assert offered_actions(operator_client.get(list_url())) == set(ACTIONS) - {"revert_jobs"} | rerun
    viewer_page = viewer_client.get(list_url())
    assert viewer_page.status_code == 200
    assert offered_actions(viewer_page) == set()
    assert 'name="action"' not in viewer_page.content.decode()


@pytest.mark.parametrize("action", ACTIONS)
def test_forged_action_post_of_a_view_only_user_changes_nothing(viewer_client, action):
    _operation, allowed_specs, _refused = ACTIONS[action]
    jobs = [JobFactory(**spec) for spec in allowed_specs]
    before = [snapshot(job) for job in jobs]

    response = post_action(viewer_client, action, jobs)

    assert response.status_code in (200, 302)
    assert [snapshot(job) for job in jobs] == before
    assert not LogEntry.objects.exists()


def test_forged_revert_action_of_an_operator_without_revert_permission_changes_nothing(operator_client):
    jobs = [JobFactory(status="done"), JobFactory(status="failed")]
    before = [snapshot(job) for job in jobs]

    response = post_action(operator_client, "revert_jobs", jobs)

    assert response.status_code in (200, 302)
    assert [snapshot(job) for job in jobs] == before
    assert not LogEntry.objects.exists()


def test_operator_can_use_the_operate_actions(operator_client):
    jobs = [JobFactory(status="failed"), JobFactory(status="failed")]

    response = post_action(operator_client, "retry_jobs", jobs)

    assert response.status_code == 302
    assert set(Job.objects.values_list("status", flat=True)) == {"queued"}


# 3. CSRF ------------------------------------------------------------------------------------------


def csrf_token_of(content: str) -> str:
    tokens = set(re.findall(r'name="csrfmiddlewaretoken" value="([^"]+)"', content))
    assert len(tokens) == 1, tokens
    return tokens.pop()


def test_button_post_without_csrf_token_is_403_and_with_the_pages_token_works(operator):
    client = logged_in(operator, enforce_csrf_checks=True)
    job = JobFactory(status="failed")
    before = snapshot(job)

    page = client.get(change_url(job))
    assert client.post(operate_url(job, "retry")).status_code == 403
    assert snapshot(job) == before

    token = csrf_token_of(summary_part(page.content.decode()))
    response = client.post(operate_url(job, "retry"), {"csrfmiddlewaretoken": token})

    assert response.status_code == 302
    job.refresh_from_db()
    assert job.status == "queued"


def test_action_post_without_csrf_token_is_403_and_with_the_pages_token_works(operator):
    client = logged_in(operator, enforce_csrf_checks=True)
    job = JobFactory(status="queued")
    before = snapshot(job)

    page = client.get(list_url())
    assert post_action(client, "pause_jobs", [job]).status_code == 403
    assert snapshot(job) == before

    response = post_action(
        client, "pause_jobs", [job], csrfmiddlewaretoken=csrf_token_of(page.content.decode())
    )

    assert response.status_code == 302
    job.refresh_from_db()
    assert job.status == "paused"


def test_answer_post_without_csrf_token_is_403(operator):
    client = logged_in(operator, enforce_csrf_checks=True)
    job = needs_user_job()
    before = snapshot(job)
    client.get(change_url(job))

    assert client.post(operate_url(job, "resume"), {"action": "approve"}).status_code == 403
    assert snapshot(job) == before


# 4. Escaping and secrets --------------------------------------------------------------------------


def hostile(field: str) -> str:
    return f"{field} {SCRIPT} {IMG}"


def test_hostile_text_is_shown_escaped_everywhere(admin_client):
    parent = JobFactory(
        kind="states_ask",
        status="needs_user",
        label=hostile("label"),
        subject={"note": hostile("subject")},
        subject_type="site",
        subject_id=hostile("subject_id"),
        external_ref=hostile("external_ref"),
        wait_reason=hostile("wait_reason"),
        user_message=hostile("user_message"),
        error=hostile("error"),
        actions=[
            {"id": "go", "label": hostile("action_label"), "description": hostile("action_description")}
        ],
        declared_steps=False,
    )
    JobStepFactory(
        job=parent,
        step_id="s1",
        title=hostile("step_title"),
        state="done",
        result={"html": hostile("step_result")},
    )
    JobStepFactory(job=parent, step_id="s2", title="Second", state="failed", error=hostile("step_error"))
    JobStepFactory(job=parent, step_id="s3", title="Third", state="running", detail=hostile("step_detail"))
    JobLog.objects.create(job=parent, line=hostile("log_line"))
    JobFactory(parent=parent, status="failed", label=hostile("child_label"), error=hostile("child_error"))

    summary = admin_client.get(summary_url(parent))
    pages = {
        "list": admin_client.get(list_url(), {"has_parent": "all"}),
        "job": admin_client.get(change_url(parent)),
        "summary": summary,
    }
    expected = {
        "list": ["label", "subject_id", "wait_reason", "child_label", "child_error"],
        "job": [
            "label",
            "subject",
            "subject_id",
            "external_ref",
            "wait_reason",
            "user_message",
            "error",
            "action_label",
            "action_description",
            "step_title",
            "step_result",
            "step_error",
            "step_detail",
            "log_line",
            "child_label",
        ],
        "summary": [
            "wait_reason",
            "user_message",
            "error",
            "action_label",
            "action_description",
            "step_title",
        ],
    }
    for name, response in pages.items():
        assert response.status_code == 200, name
        content = response.content.decode()
        assert SCRIPT not in content, name
        assert IMG not in content, name
        assert "<img src=x" not in content, name
        for field in expected[name]:
            assert escape(hostile(field)) in content, (name, field)
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in content


def test_secrets_in_subject_and_step_result_are_never_shown(admin_client):
    job = JobFactory(
        status="failed",
        subject={"site": "example.com", "password": "hunter2"},
        result={"api_key": "k-abcdef123"},
        declared_steps=False,
    )
    JobStepFactory(job=job, step_id="login", state="done", result={"token": "s3cr3t-value", "user": "deploy"})
    child = JobFactory(parent=job, subject={"password": "hunter2"})

    for response in (
        admin_client.get(change_url(job)),
        admin_client.get(summary_url(job)),
        admin_client.get(list_url()),
        admin_client.get(change_url(child)),
    ):
        assert response.status_code == 200
        content = response.content.decode()
        assert "s3cr3t-value" not in content
        assert "hunter2" not in content
        assert "k-abcdef123" not in content

    page = admin_client.get(change_url(job)).content.decode()
    shown_subject = between(page, "field-shown_subject", "</pre>")
    assert "&quot;password&quot;: &quot;[REDACTED]&quot;" in shown_subject
    assert "example.com" in shown_subject  # the rest of the subject is still shown
    steps = between(page, 'id="steps-group"', 'id="log_lines-group"')
    assert "&quot;token&quot;: &quot;[REDACTED]&quot;" in steps
    assert "deploy" in steps


# 5. Query counts ----------------------------------------------------------------------------------


def tempting_jobs(django_user_model, count: int) -> None:
    """Jobs with everything a careless list would fetch per row: creators, parents, steps, log."""
    previous = None
    for number in range(count):
        user = django_user_model.objects.create_user(username=f"creator-{count}-{number}")
        job = JobFactory(
            created_by=user,
            parent=previous if number % 2 else None,
            status=["failed", "queued", "awaiting_external", "done", "needs_user"][number % 5],
            subject_type="site",
            subject_id=f"site-{number}",
        )
        JobLog.objects.create(job=job, line=f"line {number}")
        previous = job


def queries_for(client, url: str) -> int:
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url)
    assert response.status_code == 200
    return len(captured)


def test_list_page_query_count_does_not_grow_with_the_number_of_jobs(admin_client, django_user_model):
    everything = f"{list_url()}?has_parent=all"
    tempting_jobs(django_user_model, 5)
    few = queries_for(admin_client, everything)
    tempting_jobs(django_user_model, 45)
    assert Job.objects.count() == 50
    many = queries_for(admin_client, everything)
    assert len(admin_client.get(everything).context["cl"].result_list) == 50

    assert many == few


def family(children: int, steps: int):
    parent = JobFactory(kind="states_deploy", status="awaiting_external", declared_steps=False)
    for number in range(steps):
        JobStepFactory(job=parent, step_id=f"s{number}", state="done", result={"n": number})
        JobLog.objects.create(job=parent, line=f"line {number}")
    for number in range(children):
        JobFactory(parent=parent, status=["done", "failed", "running"][number % 3], declared_steps=False)
    return parent


def test_job_page_query_count_does_not_grow_with_children_and_steps(admin_client):
    small = family(children=3, steps=2)
    large = family(children=30, steps=20)

    small_queries = queries_for(admin_client, change_url(small))
    large_page = admin_client.get(change_url(large)).content.decode()
    large_queries = queries_for(admin_client, change_url(large))

    assert [rows_in(large_page, name) for name in ("children", "steps", "log_lines")] == [30, 20, 20]
    assert large_queries == small_queries
    assert queries_for(admin_client, summary_url(large)) == queries_for(admin_client, summary_url(small))


# 6. Admin history ---------------------------------------------------------------------------------


@pytest.fixture
def alice(django_user_model):
    return django_user_model.objects.create_superuser(
        username="alice-ops", email="alice@example.com", password=None
    )


def assert_recorded(job, user, operation: str, log_words: str) -> None:
    (entry,) = history_of(job)
    assert entry.user == user
    assert entry.action_flag == CHANGE
    assert entry.object_id == str(job.pk)
    assert operation in entry.get_change_message()
    last_line = JobLog.objects.filter(job=job).order_by("-id").first().line
    assert log_words in last_line and f"by {user.get_username()}" in last_line, last_line


# operation -> words of the job's own log line
LOG_WORDS = {
    "resume": "Resumed",
    "retry": "Retried",
    "pause": "Paused",
    "cancel": "Cancelled",
    "revert": "Revert",
}


@pytest.mark.parametrize("operation", OPERATIONS)
def test_button_operation_is_recorded_in_admin_history_and_job_log(alice, operation):
    allowed, _ends_in, _refused = BUTTONS[operation]
    job = JobFactory(**allowed)

    assert logged_in(alice).post(operate_url(job, operation)).status_code == 302

    assert_recorded(job, alice, operation, LOG_WORDS[operation])


@pytest.mark.parametrize("action", ACTIONS)
def test_action_is_recorded_per_job_in_admin_history_and_job_log(alice, action):
    operation, allowed_specs, refused_specs = ACTIONS[action]
    allowed = [JobFactory(**spec) for spec in allowed_specs]
    refused = JobFactory(**refused_specs[0])

    assert post_action(logged_in(alice), action, [*allowed, refused]).status_code == 302

    for job in allowed:
        assert_recorded(job, alice, operation, LOG_WORDS[operation])
    assert not history_of(refused).exists()


def test_answer_is_recorded_with_the_chosen_action(alice):
    job = needs_user_job()

    logged_in(alice).post(operate_url(job, "resume"), {"action": "reject"})

    assert_recorded(job, alice, "resume", "Resumed")
    assert "reject" in history_of(job).get().get_change_message()
    # The job's log names the label the person clicked, and who clicked it.
    assert (
        JobLog.objects.filter(job=job).order_by("-id").first().line
        == "Resumed with 'Reject it' by alice-ops."
    )


# 7. Confirmation of large actions -----------------------------------------------------------------


def test_action_over_100_jobs_asks_for_confirmation_then_applies(admin_client):
    jobs = JobFactory.create_batch(101, status="failed", declared_steps=False)

    response = post_action(admin_client, "retry_jobs", jobs)

    assert response.status_code == 200
    content = response.content.decode()
    assert "101 jobs" in content
    assert set(Job.objects.values_list("status", flat=True)) == {"failed"}
    assert not LogEntry.objects.exists()

    confirm = [
        form for form in FormsAsABrowserSeesThem(content).forms if form["attrs"].get("method") == "post"
    ]
    confirm = [form for form in confirm if any(i.get("name") == "confirmed" for i in form["inputs"])]
    assert len(confirm) == 1
    fields = confirm[0]["inputs"]
    selected = {field["value"] for field in fields if field.get("name") == "_selected_action"}
    assert selected == {str(job.pk) for job in jobs}

    response = submit(admin_client, list_url(), content, "Yes, Retry 101 jobs")

    assert response.status_code == 302
    assert set(Job.objects.values_list("status", flat=True)) == {"queued"}
    assert LogEntry.objects.count() == 101
    assert any("101 jobs" in message for message in messages_of(response, message_levels.SUCCESS))


def test_action_over_exactly_100_jobs_applies_at_once(admin_client):
    jobs = JobFactory.create_batch(100, status="queued", declared_steps=False)

    response = post_action(admin_client, "pause_jobs", jobs)

    assert response.status_code == 302
    assert set(Job.objects.values_list("status", flat=True)) == {"paused"}


def test_confirmation_page_of_a_forbidden_action_is_not_shown(operator_client):
    jobs = JobFactory.create_batch(101, status="done", declared_steps=False)

    response = post_action(operator_client, "revert_jobs", jobs, confirmed="yes")

    assert response.status_code in (200, 302)
    assert set(Job.objects.values_list("status", flat=True)) == {"done"}


# 8. No adding, no editing raw fields --------------------------------------------------------------


def test_jobs_cannot_be_added_from_the_admin(admin_client):
    add_url = reverse("admin:django_durajobs_job_add")
    JobFactory()

    assert admin_client.get(add_url).status_code == 403
    assert (
        admin_client.post(add_url, {"kind": "states_basic", "label": "x", "status": "queued"}).status_code
        == 403
    )
    assert Job.objects.count() == 1
    assert add_url not in admin_client.get(list_url()).content.decode()


def test_job_page_has_no_editable_job_fields_and_no_save_button(admin_client):
    job = JobFactory(status="failed")

    content = admin_client.get(change_url(job)).content.decode()

    for field in Job._meta.concrete_fields:
        assert f'name="{field.name}"' not in content, field.name
        assert f'name="{field.attname}"' not in content, field.attname
    assert "<textarea" not in content
    assert "<select" not in content
    for button in ("_save", "_continue", "_addanother", "_saveasnew"):
        assert f'name="{button}"' not in content


def test_post_to_the_job_page_does_not_change_the_job(admin_client):
    job = JobFactory(status="failed")
    before = snapshot(job)

    response = admin_client.post(
        change_url(job),
        {"status": "done", "label": "edited", "max_attempts": "9", "error": "", "_save": "Save"},
    )

    assert response.status_code == 403
    assert snapshot(job) == before


# 9. The job page and its summary ------------------------------------------------------------------


def live_summary_of(response) -> str:
    """The summary's HTML in the job page's live answer."""
    return response.json()["fragments"]["durajobs-summary"]


def summary_facts(job) -> list[str]:
    """What the summary must show, as describe() tells it."""
    summary = describe(job)
    facts = [f"{summary['attempt']} of {summary['max_attempts']}"]
    if summary["current_step"]:
        facts.append(escape(summary["current_step"]["title"]))
    facts += [escape(step["title"]) for step in summary["completed_steps"]]
    if summary["next_step"]:
        facts.append(escape(summary["next_step"]["title"]))
    if summary["eta_at"]:
        facts.append(f'<time datetime="{summary["eta_at"]}"')
    else:
        facts.append(escape(summary["eta_unknown_reason"]))
    if summary["next_run_at"] and not summary["terminal"]:
        facts.append(f'<time datetime="{summary["next_run_at"]}"')
    facts += [escape(summary[key]) for key in ("wait_reason", "user_message", "error") if summary[key]]
    return facts


def deploy_job(status: str, **extra):
    return JobFactory(kind="states_deploy", status=status, **extra)


SUMMARY_CASES = {
    "running": lambda: deploy_job(
        "running",
        attempt=2,
        max_attempts=3,
        step_states={"build": "done", "upload": "running"},
        eta_at=timezone.now() + timedelta(minutes=5),
    ),
    "timed_wait": lambda: deploy_job(
        "awaiting_external",
        wait_reason="DNS record not visible yet",
        next_run_at=timezone.now() + timedelta(minutes=10),
        step_states={"build": "done", "upload": "waiting"},
    ),
    "needs_user": lambda: deploy_job(
        "needs_user",
        user_message="Overwrite the existing site?",
        step_states={"build": "done", "upload": "needs_user"},
    ),
    "failed": lambda: deploy_job(
        "failed",
        attempt=3,
        max_attempts=3,
        error="RuntimeError: upload refused",
        error_code="failed",
        step_states={"build": "done", "upload": "failed"},
    ),
    "queued_later": lambda: deploy_job("queued", next_run_at=timezone.now() + timedelta(hours=1)),
}


@pytest.mark.parametrize("case", SUMMARY_CASES)
def test_job_page_and_fragment_show_the_describe_summary(admin_client, case):
    job = SUMMARY_CASES[case]()

    page_summary = summary_part(admin_client.get(change_url(job)).content.decode())
    fragment = admin_client.get(summary_url(job))

    assert fragment.status_code == 200
    for facts_shown in (page_summary, live_summary_of(fragment)):
        for fact in summary_facts(job):
            assert fact in facts_shown, (case, fact)


def test_summary_shows_the_steps_in_their_roles(admin_client):
    """Current, completed and next step are the right ones, not just present."""
    job = deploy_job("running", attempt=2, max_attempts=3, step_states={"build": "done", "upload": "running"})

    content = live_summary_of(admin_client.get(summary_url(job)))

    facts = dict(re.findall(r"<dt>(.*?)</dt>\s*<dd[^>]*>(.*?)</dd>", content, re.S))
    assert facts["Current step"].startswith("Upload files")
    assert facts["Completed steps"] == "Build"
    assert facts["Next step"] == "Switch traffic"
    assert facts["Tries used"] == "2 of 3"
    assert "Error" not in facts  # a running job shows no error


def test_job_page_shows_steps_and_log_inlines_newest_log_line_last(admin_client):
    job = deploy_job("running", step_states={"build": "done", "upload": "running"})
    for line in ("first line", "second line", "third line"):
        JobLog.objects.create(job=job, line=line)

    content = admin_client.get(change_url(job)).content.decode()

    steps = between(content, 'id="steps-group"', 'id="log_lines-group"')
    positions = [steps.index(title) for title in ("Build", "Upload files", "Switch traffic")]
    assert positions == sorted(positions)
    log = between(content, 'id="log_lines-group"')
    positions = [log.index(line) for line in ("first line", "second line", "third line")]
    assert positions == sorted(positions)
    assert 'id="children-group"' not in content  # a job without children has no children inline


def test_view_only_user_sees_the_steps_and_the_log(viewer_client):
    job = deploy_job("running", step_states={"build": "done", "upload": "running"})
    JobLog.objects.create(job=job, line="the visible log line")

    content = viewer_client.get(change_url(job)).content.decode()

    assert 'id="steps-group"' in content
    assert "Switch traffic" in between(content, 'id="steps-group"')
    assert "the visible log line" in content


def test_parent_page_shows_the_family_summary_and_links_each_child(admin_client):
    parent = JobFactory(kind="states_deploy", status="awaiting_external")
    children = [
        JobFactory(parent=parent, status="done", label="child one"),
        JobFactory(parent=parent, status="done", label="child two"),
        JobFactory(parent=parent, status="failed", label="child three"),
    ]

    content = admin_client.get(change_url(parent)).content.decode()

    summary = summary_part(content)
    assert (
        '<span class="durajobs-badge durajobs-family durajobs-partial">Child jobs: partly failed</span>'
        in summary
    )
    assert "3:" in summary and "Done: 2" in summary and "Failed: 1" in summary
    inline = between(content, 'id="children-group"')
    for child in children:
        assert f'<a href="{change_url(child)}">#{child.pk} {child.label}</a>' in inline
    child_page = admin_client.get(change_url(children[0])).content.decode()
    assert f'<a href="{change_url(parent)}">#{parent.pk}</a>' in child_page
    assert 'id="children-group"' not in child_page


def test_family_that_fully_succeeded_is_not_marked_partial(admin_client):
    parent = JobFactory(status="done")
    JobFactory(parent=parent, status="done")
    JobFactory(parent=parent, status="done")

    summary = summary_part(admin_client.get(change_url(parent)).content.decode())

    assert "durajobs-partial" not in summary
    assert '<span class="durajobs-badge durajobs-family durajobs-done">Child jobs: all done</span>' in summary


@pytest.mark.parametrize(
    "status, terminal",
    [
        ("queued", "false"),
        ("running", "false"),
        ("awaiting_external", "false"),
        ("needs_user", "false"),
        ("paused", "false"),
        ("reverting", "false"),
        ("done", "true"),
        ("failed", "true"),
        ("cancelled", "true"),
        ("reverted", "true"),
    ],
)
def test_summary_fragment_says_whether_the_job_has_ended(admin_client, status, terminal):
    job = JobFactory(status=status)

    response = admin_client.get(summary_url(job))

    assert response.status_code == 200
    assert response.json()["terminal"] is (terminal == "true")
    content = live_summary_of(response)
    assert f'data-terminal="{terminal}"' in content
    assert "<html" not in content  # a fragment, not a page
    page = admin_client.get(change_url(job)).content.decode()
    assert f'data-live-url="{summary_url(job)}" data-terminal="{terminal}"' in page


def test_summary_fragment_needs_view_permission(django_user_model, viewer_client):
    job = JobFactory(status="running")
    no_permission = logged_in(staff_user(django_user_model, "nobody-staff"))

    assert no_permission.get(summary_url(job)).status_code == 403
    assert viewer_client.get(summary_url(job)).status_code == 200
    anonymous = Client().get(summary_url(job))
    assert anonymous.status_code == 302 and reverse("admin:login") in anonymous.url
    assert viewer_client.post(summary_url(job)).status_code == 405


def test_job_page_needs_view_permission(django_user_model):
    job = JobFactory(status="running")
    no_permission = logged_in(staff_user(django_user_model, "nobody-staff"))

    assert no_permission.get(change_url(job)).status_code == 403
    assert no_permission.get(list_url()).status_code == 403
    assert no_permission.post(operate_url(job, "cancel")).status_code == 403


# 10. The list page --------------------------------------------------------------------------------


def test_list_is_newest_first(admin_client):
    now = timezone.now()
    oldest = JobFactory(label="oldest")
    newest = JobFactory(label="newest")
    middle = JobFactory(label="middle")
    for job, age in ((oldest, 3), (newest, 1), (middle, 2)):
        Job.objects.filter(pk=job.pk).update(created_at=now - timedelta(minutes=age))

    assert shown_ids(admin_client.get(list_url())) == [newest.pk, middle.pk, oldest.pk]


@pytest.fixture
def assorted():
    parent = JobFactory(kind="states_basic", status="done", queue="default", actor_type="user", label="alpha")
    return {
        "parent": parent,
        "failed_child": JobFactory(
            kind="states_norevert",
            status="failed",
            queue="bulk",
            actor_type="system",
            parent=parent,
            label="bravo",
        ),
        "waiting": JobFactory(
            kind="states_ask", status="needs_user", queue="bulk", actor_type="api", label="charlie"
        ),
        "queued_child": JobFactory(
            kind="states_basic", status="queued", queue="default", parent=parent, label="delta"
        ),
    }


@pytest.mark.parametrize(
    "query, expected",
    [
        ({"status__exact": "failed"}, {"failed_child"}),
        ({"status__exact": "needs_user"}, {"waiting"}),
        ({"kind": "states_basic"}, {"parent", "queued_child"}),
        ({"kind": "states_ask"}, {"waiting"}),
        ({"queue": "bulk"}, {"failed_child", "waiting"}),
        ({"actor_type": "api"}, {"waiting"}),
        ({"actor_type": "system"}, {"failed_child"}),
        ({"has_parent": "yes"}, {"failed_child", "queued_child"}),
        ({"has_parent": "no"}, {"parent", "waiting"}),
        ({"has_parent": "all"}, {"parent", "failed_child", "waiting", "queued_child"}),
        ({"queue": "default", "has_parent": "yes"}, {"queued_child"}),
        ({"queue": "default", "has_parent": "no"}, {"parent"}),
        # The top level by default; another filter (above) or a search shows child jobs too.
        ({}, {"parent", "waiting"}),
    ],
)
def test_list_filters(admin_client, assorted, query, expected):
    """Each filter is offered as a link on the list page, and following it shows just those jobs."""
    if len(query) == 1:
        assert f'href="?{urlencode(query)}"' in admin_client.get(list_url()).content.decode()

    response = admin_client.get(list_url(), query)

    assert response.status_code == 200
    assert set(shown_ids(response)) == {assorted[name].pk for name in expected}


@pytest.fixture
def searchable():
    return {
        "deploy": JobFactory(
            label="Deploy marketing site",
            idempotency_key="deploy-key-abc",
            subject_type="site",
            subject_id="site-xyz",
            external_ref="ticket-qrs",
        ),
        "backup": JobFactory(
            label="Nightly backup",
            idempotency_key="backup-key-def",
            subject_type="site",
            subject_id="site-uvw",
            external_ref="ticket-tuv",
        ),
    }


@pytest.mark.parametrize(
    "term, expected",
    [
        ("deploy mark", "deploy"),
        ("NIGHTLY", "backup"),
        (" Nightly backup ", "backup"),
        ("deploy-key-abc", "deploy"),
        ("site site-uvw", "backup"),
    ],
)
def test_list_search_by_label_and_references(admin_client, searchable, term, expected):
    """The label's beginning in any case, an idempotency key, a subject as the list shows it."""
    assert shown_ids(admin_client.get(list_url(), {"q": term})) == [searchable[expected].pk]


@pytest.mark.parametrize("template", ["{}", "#{}", " #{} "])
def test_list_search_by_id(admin_client, searchable, template):
    wanted = searchable["backup"]

    assert shown_ids(admin_client.get(list_url(), {"q": template.format(wanted.pk)})) == [wanted.pk]


@pytest.mark.parametrize(
    "term",
    [
        "deploy-key",
        "site site-",
        "site-uvw",
        "marketing",
        "ticket-qrs",
        "Deploy-key-abc",
        "99999999999999999999999",
        "#",
    ],
)
def test_list_search_references_match_exactly_and_odd_terms_are_no_error(admin_client, searchable, term):
    """Keys and subjects match whole values (a subject with its type), a label its beginning, so
    that every search reads an index: the middle of a label, a subject id alone and an external
    reference find nothing; nor do a huge number or a bare #."""
    response = admin_client.get(list_url(), {"q": term})

    assert response.status_code == 200
    assert shown_ids(response) == []


def test_list_shows_the_columns_an_operator_needs(admin_client, django_user_model):
    creator = django_user_model.objects.create_user(username="creator-carla")
    job = JobFactory(
        kind="states_deploy",
        label="Deploy marketing site",
        status="awaiting_external",
        wait_reason="DNS record not visible yet",
        subject_type="site",
        subject_id="site-xyz",
        attempt=1,
        max_attempts=3,
        progress=40,
        created_by=creator,
    )

    content = admin_client.get(list_url()).content.decode()

    row = between(content, f'href="{change_url(job)}"', "</tr>")
    for shown in (
        "Deploy marketing site",
        "states_deploy",
        "durajobs-badge durajobs-awaiting_external",
        'value="40"',
        "1 / 3",
        "DNS record not visible yet",
        "site site-xyz",
        "creator-carla",
    ):
        assert shown in row, shown
