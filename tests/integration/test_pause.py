"""Pausing a running job (DESIGN.md section 9): ``pause()`` sets ``pause_requested``, the job
becomes ``paused`` at its next step boundary with its finished steps kept, and ``resume()`` goes
on after them; a worker killed while the request is pending loses neither the request nor a step.
"""

from __future__ import annotations

from collections import Counter

import pytest
from django.contrib.messages import get_messages
from django.urls import reverse

from django_durajobs import Job, JobStep, Status, cancel, describe, drain, enqueue, ops, pause, resume
from django_durajobs.status import StepState
from tests.factories import JobFactory
from tests.testapp.kinds_durability import STEP_HOOKS, THREE_STEPS
from tests.testapp.models import SideEffect

pytestmark = pytest.mark.django_db

FAST = ("--poll-interval", "0.1")


@pytest.fixture(autouse=True)
def _no_leftover_step_hooks():
    yield
    STEP_HOOKS.clear()


def states(job) -> dict[str, str]:
    return dict(JobStep.objects.filter(job_id=job.pk, phase="run").values_list("step_id", "state"))


def runs_of(job) -> Counter[str]:
    """How often each of the job's steps really ran."""
    names = SideEffect.objects.filter(name__startswith=f"{job.pk}:").values_list("name", flat=True)
    return Counter(name.split(":", 1)[1] for name in names)


def test_a_running_job_pauses_at_its_next_step_and_resumes_after_its_finished_steps():
    job, _ = enqueue("durability_three_steps")
    STEP_HOOKS[(job.pk, "one")] = lambda: pause(job.pk, by="alice")

    drain()

    job.refresh_from_db()
    assert (job.status, job.pause_requested, job.attempt) == (Status.PAUSED, False, 0)
    assert states(job) == {"one": StepState.DONE, "two": StepState.PENDING, "three": StepState.PENDING}
    summary = describe(job)
    assert (summary["pause_requested"], summary["can_resume"], summary["can_pause"]) == (False, True, False)
    lines = [entry["line"] for entry in summary["log"]]
    assert "Pause requested by alice. It pauses at its next step; resumed, it goes on from there." in lines
    assert lines[-1] == "Paused; resumed, it goes on after its last finished step."

    resume(job)
    drain()

    job.refresh_from_db()
    assert job.status == Status.DONE
    assert runs_of(job) == {step: 1 for step in THREE_STEPS}


def test_a_pending_pause_shows_in_describe_and_a_second_pause_changes_nothing():
    job = JobFactory(status=Status.RUNNING)
    assert describe(job)["can_pause"] is True

    pause(job)
    pause(job)

    summary = describe(job)
    assert (summary["status"], summary["pause_requested"], summary["can_pause"]) == ("running", True, True)


def test_a_cancel_wins_over_a_pending_pause_and_clears_it():
    job, _ = enqueue("durability_three_steps")

    def pause_then_cancel():
        pause(job.pk)
        cancel(job.pk)

    STEP_HOOKS[(job.pk, "one")] = pause_then_cancel
    drain()

    job.refresh_from_db()
    assert (job.status, job.pause_requested, job.cancel_requested) == (Status.CANCELLED, False, False)


def test_a_job_that_finishes_with_a_pause_pending_is_done_and_the_request_cleared():
    job, _ = enqueue("durability_three_steps")
    STEP_HOOKS[(job.pk, "three")] = lambda: pause(job.pk)  # no step boundary follows

    drain()

    job.refresh_from_db()
    assert (job.status, job.pause_requested) == (Status.DONE, False)


def test_pausing_many_jobs_counts_the_running_ones_as_requested():
    running = JobFactory.create_batch(2, status=Status.RUNNING)
    queued = JobFactory(status=Status.QUEUED)

    outcome = ops.apply_to_many("pause", [job.pk for job in [*running, queued]])

    assert (outcome.changed, outcome.pause_requested) == (3, 2)
    assert set(Job.objects.values_list("status", "pause_requested")) == {
        (Status.RUNNING, True),
        (Status.PAUSED, False),
    }


def test_the_admin_pause_button_of_a_running_job_requests_the_pause(admin_client):
    job = JobFactory(status=Status.RUNNING)
    page = reverse("admin:django_durajobs_job_change", args=[job.pk])
    assert 'class="button durajobs-pause"' in admin_client.get(page).content.decode()

    response = admin_client.post(reverse("admin:django_durajobs_job_operate", args=[job.pk, "pause"]))

    job.refresh_from_db()
    assert (job.status, job.pause_requested) == (Status.RUNNING, True)
    told = [str(message) for message in get_messages(response.wsgi_request)]
    assert told == [f"Pause requested for job {job.pk}; it pauses at its next step."]
    content = admin_client.get(page).content.decode()
    assert 'class="button durajobs-pause"' not in content  # already requested
    assert "pause requested: it pauses at its next step" in content
    listing = admin_client.get(reverse("admin:django_durajobs_job_changelist")).content.decode()
    assert "pause requested" in listing


def test_the_admin_pause_action_tells_which_jobs_only_got_the_request(admin_client):
    running, queued = JobFactory(status=Status.RUNNING), JobFactory(status=Status.QUEUED)

    response = admin_client.post(
        reverse("admin:django_durajobs_job_changelist"),
        {"action": "pause_jobs", "_selected_action": [running.pk, queued.pk]},
    )

    told = [str(message) for message in get_messages(response.wsgi_request)]
    assert told == ["Paused 2 jobs. 1 of them is running: it pauses at its next step."]
