"""The console against a real database: the worker registry a worker's heartbeat writes, the
dashboard's counts, the live answers of the list and the job page (bounded, escaped, permission-
checked), Run again, and retrying a parent's failed children."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from django_durajobs import Job, ops, store
from django_durajobs.models import Worker
from django_durajobs.store.overview import THROUGHPUT_MINUTES, overview
from django_durajobs.worker import Worker as RunJobs
from django_durajobs.worker import WorkerOptions
from tests.admin_pages import change_url, logged_in, operate_url, staff_user
from tests.factories import JobFactory
from tests.helpers import wait_for

pytestmark = pytest.mark.django_db


@pytest.fixture
def viewer_client(django_user_model):
    return logged_in(staff_user(django_user_model, "vera-viewer", "view_job"))


DASHBOARD = "admin:django_durajobs_job_dashboard"
LIST_LIVE = "admin:django_durajobs_job_list_live"


def test_a_worker_registers_beats_and_says_it_stopped(transactional_db, settings):
    settings.DURAJOBS = {"HEARTBEAT_SECONDS": 0.2}
    worker = RunJobs(WorkerOptions(concurrency=2, queues=("mail", "default"), poll_interval=0.1))
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        row = wait_for(lambda: Worker.objects.filter(worker_id=worker.worker_id).first())
        first_seen = row.last_seen_at
        assert (row.queues, row.concurrency, row.stopped_at) == (["default", "mail"], 2, None)
        wait_for(lambda: Worker.objects.get(pk=row.pk).last_seen_at > first_seen, message="a heartbeat")
        [seen] = store.workers_seen(timedelta(minutes=1))
        assert (seen.worker_id, seen.stale, seen.running) == (worker.worker_id, False, 0)
    finally:
        worker.stop()
        thread.join(30)
    assert Worker.objects.get(worker_id=worker.worker_id).stopped_at is not None


def test_workers_seen_marks_the_silent_ones_stale_and_counts_the_jobs_they_hold(settings):
    settings.DURAJOBS = {"LEASE_SECONDS": 60}
    store.register_worker("alive@h:1:a", ["default"], 4)
    store.register_worker("silent@h:2:b", [], 1)
    Worker.objects.filter(worker_id="silent@h:2:b").update(last_seen_at=timezone.now() - timedelta(minutes=5))
    for _ in range(3):
        JobFactory(status="running", locked_by="alive@h:1:a", locked_at=timezone.now())
    JobFactory(status="done", locked_by="")

    seen = {worker.worker_id: worker for worker in store.workers_seen(timedelta(hours=1))}

    assert (seen["alive@h:1:a"].stale, seen["alive@h:1:a"].running) == (False, 3)
    assert len(seen["alive@h:1:a"].running_ids) == 3
    assert (seen["silent@h:2:b"].stale, seen["silent@h:2:b"].running) == (True, 0)
    assert [worker.worker_id for worker in store.workers_seen(timedelta(minutes=1))] == ["alive@h:1:a"]


def test_a_worker_forgotten_meanwhile_registers_again_on_its_heartbeat():
    store.worker_alive("back@h:3:c", ["q"], 2)
    assert Worker.objects.get(worker_id="back@h:3:c").queues == ["q"]


def test_the_overview_counts_by_status_and_queue_the_lag_and_the_last_hour():
    now = timezone.now()
    JobFactory(status="queued", queue="mail", next_run_at=now - timedelta(seconds=90))
    JobFactory(status="queued", queue="mail", next_run_at=now + timedelta(hours=1))
    JobFactory(status="running", queue="default")
    JobFactory(status="needs_user", queue="default", user_message="Which one?")
    JobFactory(status="failed", kind="states_basic", ended_at=now - timedelta(minutes=2))
    JobFactory(status="done", ended_at=now - timedelta(minutes=2))
    JobFactory(status="done", ended_at=now - timedelta(hours=3))

    seen = overview()

    assert seen.by_status == {"queued": 2, "running": 1, "needs_user": 1, "failed": 1, "done": 2}
    queues = {counts.queue: counts for counts in seen.queues}
    assert (queues["mail"].due, queues["mail"].scheduled) == (1, 1)
    assert 85 <= queues["mail"].lag_seconds <= 120
    assert (queues["default"].running, queues["default"].waiting) == (1, 1)
    assert len(seen.throughput) == THROUGHPUT_MINUTES
    assert sum(minute.done for minute in seen.throughput) == 1
    assert sum(minute.failed for minute in seen.throughput) == 1
    assert [job.user_message for job in seen.needs_person] == ["Which one?"]
    assert seen.failures_by_kind == [("states_basic", 1)]


def test_the_dashboard_needs_the_view_permission(django_user_model, viewer_client):
    store.register_worker("w1@h:1:a", ["default"], 2)
    nobody = logged_in(staff_user(django_user_model, "nobody"))
    assert nobody.get(reverse(DASHBOARD)).status_code == 403
    page = viewer_client.get(reverse(DASHBOARD))
    assert page.status_code == 200
    assert "w1@h:1:a" in page.content.decode() and "Workers (1 running)" in page.content.decode()
    live = viewer_client.get(reverse("admin:django_durajobs_job_dashboard_live"))
    assert "w1@h:1:a" in live.json()["fragments"]["durajobs-dashboard"]


def test_the_list_s_live_answer_is_bounded_escaped_and_needs_the_view_permission(
    django_user_model, viewer_client
):
    jobs = [JobFactory(status="failed", error=f"<script>alert({n})</script>") for n in range(60)]
    ids = ",".join(str(job.pk) for job in jobs) + ",x,99999999999999999999999," + "7," * 500

    with CaptureQueriesContext(connection) as captured:
        answer = viewer_client.get(reverse(LIST_LIVE), {"ids": ids})

    assert answer.status_code == 200
    rows = answer.json()["rows"]
    assert set(rows) == {str(job.pk) for job in jobs}
    assert "<script>" not in answer.content.decode()
    assert "&lt;script&gt;alert(3)&lt;/script&gt;" in rows[str(jobs[3].pk)]["reason"]
    assert "Failed" in rows[str(jobs[0].pk)]["status_badge"]
    assert len(captured) <= 12
    nobody = logged_in(staff_user(django_user_model, "nobody"))
    assert nobody.get(reverse(LIST_LIVE), {"ids": ids}).status_code == 403


def test_the_list_shows_progress_by_steps_and_a_labelled_family(admin_client):
    parent = JobFactory(
        kind="states_deploy", status="running", step_states={"build": "done", "upload": "running"}
    )
    JobFactory(parent=parent, status="done")
    JobFactory(parent=parent, status="failed")

    answer = admin_client.get(reverse(LIST_LIVE), {"ids": str(parent.pk)}).json()["rows"][str(parent.pk)]

    steps = parent.steps.count()
    assert f'value="{100 // steps}"' in answer["progress_bar"]
    assert "Child jobs: partly failed" in answer["status_badge"]


def test_run_again_enqueues_a_copy_with_a_new_key(admin_client):
    job = JobFactory(status="failed", idempotency_key="deploy-7", label="Deploy 7", subject={"site": 7})

    response = admin_client.post(operate_url(job, "run_again"))

    copy = Job.objects.exclude(pk=job.pk).get()
    assert response.status_code == 302 and response.url == change_url(copy)
    assert (copy.kind, copy.subject, copy.label, copy.status) == (job.kind, {"site": 7}, "Deploy 7", "queued")
    assert copy.idempotency_key.startswith("deploy-7:again:")
    with pytest.raises(ops.JobError) as refused:
        ops.run_again(JobFactory(status="running"))
    assert refused.value.code == "job_not_ended"


def test_a_parent_page_retries_its_failed_children_after_asking(admin_client, viewer_client):
    parent = JobFactory(status="failed")
    failed = [JobFactory(parent=parent, status="failed") for _ in range(2)]
    done = JobFactory(parent=parent, status="done")

    page = admin_client.get(change_url(parent)).content.decode()
    assert "Queues 2 failed child jobs for another try." in page  # the button's help
    asking = admin_client.get(operate_url(parent, "retry_children"))
    assert "Queues 2 failed child jobs for another try." in asking.content.decode()  # not "are queued"
    assert viewer_client.post(operate_url(parent, "retry_children")).status_code == 403

    admin_client.post(operate_url(parent, "retry_children"))

    statuses = dict(Job.objects.filter(parent=parent).values_list("pk", "status"))
    assert statuses == {failed[0].pk: "queued", failed[1].pk: "queued", done.pk: "done"}
    assert Job.objects.get(pk=parent.pk).status == "failed"


def test_revert_is_offered_only_where_something_can_be_undone(admin_client):
    nothing_ran = JobFactory(kind="states_basic", status="failed", declared_steps=False)
    built = JobFactory(kind="states_basic", status="failed", step_states={"first": "done"})

    assert "durajobs-revert" not in admin_client.get(change_url(nothing_ran)).content.decode()
    assert "durajobs-revert" in admin_client.get(change_url(built)).content.decode()


def test_an_answered_question_shows_its_answer_on_the_job_page(admin_client):
    job = JobFactory(
        kind="states_ask",
        status="needs_user",
        user_message="Overwrite?",
        actions=[{"id": "overwrite", "label": "Overwrite"}],
    )
    admin_client.post(operate_url(job, "resume"), {"action": "overwrite"})

    page = admin_client.get(change_url(job)).content.decode()

    assert "Resumed with &#x27;Overwrite&#x27; by admin." in page  # the label the person clicked
