"""The admin's loose ends, through the test client: a question answered only with one of its
answers, a search box that takes anything, deleting a parent whose children still run, actions
on any selection (deletion included), and ids that do not leak to staff who may not see jobs.
"""

from __future__ import annotations

import pytest
from django.contrib.admin.models import DELETION, LogEntry
from django.contrib.messages import constants as message_levels
from django.urls import reverse

from django_durajobs import Job, JobLog, JobStep
from tests.admin_pages import (
    FormsAsABrowserSeesThem,
    change_url,
    history_of,
    list_url,
    logged_in,
    messages_of,
    needs_user_job,
    operate_url,
    post_action,
    shown_ids,
    snapshot,
    staff_user,
    submit,
    summary_url,
)
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db


def delete_url(job_or_id) -> str:
    return reverse("admin:django_durajobs_job_delete", args=[getattr(job_or_id, "pk", job_or_id)])


# A question is answered with one of its answers -----------------------------------------------------


@pytest.mark.parametrize("posted", [{}, {"action": ""}], ids=["no_action", "empty_action"])
def test_posting_resume_without_an_answer_to_a_question_is_a_message_not_a_resume(operator_client, posted):
    job = needs_user_job()
    before = snapshot(job)

    response = operator_client.post(operate_url(job, "resume"), posted)

    assert response.status_code == 302
    assert snapshot(job) == before
    (warning,) = messages_of(response, message_levels.WARNING)
    assert f"Job {job.pk}" in warning and "approve, reject" in warning
    assert messages_of(response, message_levels.SUCCESS) == []
    assert not history_of(job).exists()


def test_resume_action_skips_questions_and_counts_them(operator_client):
    asking = needs_user_job()
    waiting = JobFactory(status="awaiting_external")

    response = post_action(operator_client, "resume_jobs", [asking, waiting])

    assert Job.objects.get(pk=asking.pk).status == "needs_user"
    assert Job.objects.get(pk=waiting.pk).status == "queued"
    (message,) = messages_of(response)
    assert message == "Resumed 1 job. 1 was skipped: 1 asks a question (answer it on its page)."


@pytest.fixture
def operator_client(django_user_model):
    return logged_in(staff_user(django_user_model, "otto-operator", "view_job", "operate_job"))


# The search box takes anything ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "term",
    ["²", "#²", "٤٢", "1" * 5000, str(2**63), str(2**64 + 5), "#" + "9" * 30, "-1", "1e3", "#"],
    ids=[
        "superscript",
        "hash_superscript",
        "arabic_digits",
        "5000_digits",
        "2**63",
        "2**64",
        "hash_30",
        "negative",
        "exponent",
        "hash",
    ],
)
def test_search_for_anything_that_is_not_an_id_answers_and_finds_nothing_by_id(admin_client, term):
    JobFactory(label="Deploy")

    response = admin_client.get(list_url(), {"q": term})

    assert response.status_code == 200
    assert shown_ids(response) == []


def test_search_by_the_largest_id_a_job_can_have_answers(admin_client):
    assert admin_client.get(list_url(), {"q": str(2**63 - 1)}).status_code == 200


def test_search_by_id_finds_the_job_among_others(admin_client):
    jobs = JobFactory.create_batch(3)

    assert shown_ids(admin_client.get(list_url(), {"q": f"#{jobs[1].pk}"})) == [jobs[1].pk]


# Deleting a parent whose children have not ended ------------------------------------------------


@pytest.fixture
def family():
    parent = JobFactory(status="done")
    running = JobFactory(parent=parent, status="running")
    queued = JobFactory(parent=parent, status="queued")
    ended = JobFactory(parent=parent, status="failed")
    return parent, running, queued, ended


def test_deleting_a_parent_whose_children_have_not_ended_says_why_and_deletes_nothing(admin_client, family):
    parent, running, queued, _ended = family

    page = admin_client.get(delete_url(parent))

    assert page.status_code == 200
    content = page.content.decode()
    reason = (
        f"Job {parent.pk} has child jobs that have not ended: {running.pk}, {queued.pk}; "
        "delete it once they end."
    )
    assert reason in content
    assert "permission" not in content
    assert "Yes, I’m sure" not in content
    response = admin_client.post(delete_url(parent), {"post": "yes"})
    assert response.status_code == 200
    assert Job.objects.count() == 4


def test_delete_page_of_a_parent_with_many_open_children_names_a_few(admin_client):
    parent = JobFactory(status="done")
    children = JobFactory.create_batch(13, parent=parent, status="queued", declared_steps=False)

    content = admin_client.get(delete_url(parent)).content.decode()

    shown = ", ".join(str(child.pk) for child in children[:10])
    assert f"has child jobs that have not ended: {shown} and 3 more; delete it once they end." in content


def test_a_parent_whose_children_ended_is_deleted_with_them_and_counted_without_listing_each_row(
    admin_client, family
):
    parent, running, queued, ended = family
    Job.objects.filter(pk__in=[running.pk, queued.pk]).update(status="cancelled")
    JobLog.objects.bulk_create(JobLog(job=ended, line=f"line {n}") for n in range(300))
    JobStep.objects.create(job=parent, position=0, step_id="only", title="Only")

    content = admin_client.get(delete_url(parent)).content.decode()

    assert "Jobs: 4</li>" in content and f"Steps: {JobStep.objects.count()}</li>" in content
    assert "Child jobs: 3</li>" in content and "Log lines: 300</li>" in content
    assert "line 299" not in content  # counted, not listed
    response = admin_client.post(delete_url(parent), {"post": "yes"})
    assert response.status_code == 302
    assert not Job.objects.exists() and not JobLog.objects.exists()


def test_deleting_the_selection_keeps_what_may_not_go_and_says_so_once(admin_client, family):
    parent, running, queued, ended = family
    finished = JobFactory(status="done")
    unfinished = JobFactory(status="awaiting_external")
    other_parent = JobFactory(status="cancelled")
    ended_child = JobFactory(parent=other_parent, status="done")

    confirmation = post_action(admin_client, "delete_selected", [parent, finished, unfinished, other_parent])
    assert confirmation.status_code == 200
    response = submit(admin_client, list_url(), confirmation.content.decode(), "Yes, Delete 4 jobs")

    assert response.status_code == 302
    assert set(Job.objects.values_list("pk", flat=True)) == {
        parent.pk,
        running.pk,
        queued.pk,
        ended.pk,
        unfinished.pk,
    }
    assert not Job.objects.filter(pk=ended_child.pk).exists()
    assert messages_of(response) == [
        "Deleted 2 jobs. 2 were kept: 1 has child jobs that have not ended, 1 has not ended."
    ]
    deleted = LogEntry.objects.filter(action_flag=DELETION)
    assert set(deleted.values_list("object_id", flat=True)) == {str(finished.pk), str(other_parent.pk)}


def test_deleting_every_job_selected_across_pages_carries_the_filter_not_the_ids(admin_client):
    JobFactory.create_batch(120, status="done", queue="old", declared_steps=False)
    kept = JobFactory(status="done", queue="new")
    url = f"{list_url()}?queue=old"
    ticked = [str(row.pk) for row in admin_client.get(url).context["cl"].result_list]

    confirmation = admin_client.post(
        url, {"action": "delete_selected", "_selected_action": ticked, "select_across": "1", "index": "0"}
    )
    content = confirmation.content.decode()
    (form,) = [f for f in FormsAsABrowserSeesThem(content).forms if f["attrs"].get("action") == url]
    assert len([field for field in form["inputs"] if field.get("name") == "_selected_action"]) == 50
    response = submit(admin_client, url, content, "Yes, Delete 120 jobs")

    assert response.status_code == 302
    assert list(Job.objects.values_list("pk", flat=True)) == [kept.pk]
    assert messages_of(response) == ["Deleted 120 jobs."]


def test_delete_action_needs_the_delete_permission(operator_client):
    job = JobFactory(status="done")

    response = post_action(operator_client, "delete_selected", [job], confirmed="yes")

    assert response.status_code in (200, 302)
    assert Job.objects.filter(pk=job.pk).exists()


# Ids do not leak to staff who may not see jobs ---------------------------------------------------


def custom_views(job_id):
    """(method, url) of every view of a job: the admin's own and the ones durajobs adds."""
    return [
        ("get", reverse("admin:django_durajobs_job_change", args=[job_id])),
        ("get", reverse("admin:django_durajobs_job_history", args=[job_id])),
        ("get", reverse("admin:django_durajobs_job_live", args=[job_id])),
        ("get", reverse("admin:django_durajobs_job_log", args=[job_id])),
        ("post", reverse("admin:django_durajobs_job_operate", args=[job_id, "retry"])),
        ("post", reverse("admin:django_durajobs_job_operate", args=[job_id, "explode"])),
        ("get", delete_url(job_id)),
    ]


def test_staff_without_view_permission_get_403_for_existing_and_missing_jobs_alike(django_user_model):
    job = JobFactory(status="failed")
    before = snapshot(job)
    operator_without_view = logged_in(staff_user(django_user_model, "no-view", "operate_job", "delete_job"))
    nobody = logged_in(staff_user(django_user_model, "nobody-staff"))

    for client in (operator_without_view, nobody):
        for (method, existing), (_method, missing) in zip(
            custom_views(job.pk), custom_views(10**9), strict=True
        ):
            answers = [getattr(client, method)(url).status_code for url in (existing, missing)]
            assert answers == [403, 403], (existing, answers)
    assert snapshot(job) == before


@pytest.mark.parametrize(
    "missing", [10**9, 10**30, "abc", "²"], ids=["unused", "huge", "text", "superscript"]
)
@pytest.mark.parametrize("view", ["live", "log", "operate"])
def test_a_viewer_gets_404_for_a_missing_job(django_user_model, view, missing):
    viewer = logged_in(staff_user(django_user_model, "vera-viewer", "view_job", "operate_job"))
    if view == "operate":
        url = reverse("admin:django_durajobs_job_operate", args=[missing, "retry"])
        assert viewer.post(url).status_code == 404
    else:
        url = reverse(f"admin:django_durajobs_job_{view}", args=[missing])
        assert viewer.get(url).status_code == 404
    assert viewer.get(summary_url(JobFactory())).status_code == 200


def test_staff_without_view_permission_cannot_act_on_a_job_they_guessed(django_user_model):
    job = JobFactory(status="failed")
    before = snapshot(job)
    operator_without_view = logged_in(staff_user(django_user_model, "no-view", "operate_job"))

    assert operator_without_view.post(operate_url(job, "retry")).status_code == 403
    assert operator_without_view.get(change_url(job)).status_code == 403
    assert snapshot(job) == before
