"""Timeouts and deadlines (DESIGN.md section 9): a try past its timeout fails with
``error_code="timeout"`` (retried when its kind says so), a step stuck in its thread is given up
by its worker, whose other jobs go on; a question past its deadline answers itself.

The stuck-thread case runs a real ``runjobs``; the rest runs with ``drain()``.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from django_durajobs import Job, JobError, JobStep, Status, describe, drain, enqueue, job
from django_durajobs.registry import unregister
from django_durajobs.status import StepState
from tests.testapp.models import SideEffect

pytestmark = pytest.mark.django_db

FAST = ("--poll-interval", "0.1")
#: How far past its deadline a job may end here: "within a second", with room for a loaded machine.
SLACK_SECONDS = 3


def step_of(job, step_id: str) -> JobStep:
    return JobStep.objects.get(job_id=job.pk, phase="run", step_id=step_id)


def log_lines(job) -> list[str]:
    return [entry["line"] for entry in describe(job)["log"]]


# Timeouts ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("timeout", [0, -1, float("nan"), float("inf"), "5", True, timedelta(0)])
def test_a_timeout_that_is_not_a_positive_duration_is_refused_everywhere(timeout):
    with pytest.raises(JobError) as refused:
        enqueue("deadlines_quick", timeout=timeout)
    assert refused.value.code == "invalid_input"
    with pytest.raises(JobError) as refused:
        job("deadlines_refused_kind", timeout=timeout)
    assert refused.value.code == "invalid_input"
    assert not Job.objects.exists()


def test_a_step_s_bad_timeout_fails_the_job_with_invalid_input():
    queued, _ = enqueue(
        "deadlines_stuck_step", subject={"sleep": 0, "dir": "/nonexistent", "step_timeout": -1}
    )
    drain()
    queued.refresh_from_db()
    assert (queued.status, queued.error_code) == (Status.FAILED, "invalid_input")
    assert step_of(queued, "stuck").state == StepState.PENDING


def test_timeouts_are_stored_as_seconds_from_the_kind_or_the_enqueue():
    assert enqueue("deadlines_retried_timeout")[0].timeout == 0.2
    assert enqueue("deadlines_retried_timeout", timeout=timedelta(minutes=2))[0].timeout == 120
    queued = enqueue("deadlines_quick", timeout=1.5)[0]
    assert describe(queued)["timeout"] == 1.5
    assert enqueue("deadlines_quick")[0].timeout is None


@pytest.mark.parametrize(("slow", "first_step"), [("between", StepState.DONE), ("first", StepState.FAILED)])
def test_a_job_past_its_timeout_fails_at_its_next_step_boundary(slow, first_step):
    """Time spent outside steps is seen when the next one would start; a step that returns past
    the job's timeout has timed out itself, and its result is not kept."""
    queued, _ = enqueue("deadlines_two_steps", subject={"sleep": 0.5, "slow": slow}, timeout=0.3)

    drain()

    queued.refresh_from_db()
    assert (queued.status, queued.error_code) == (Status.FAILED, "timeout")
    assert queued.error == f"Job {queued.pk} ran past its timeout of 0.3 s."
    assert step_of(queued, "first").state == first_step
    assert step_of(queued, "second").state == StepState.PENDING
    assert not SideEffect.objects.filter(name=f"{queued.pk}:second").exists()


def test_a_timeout_is_retried_when_the_kind_s_retryable_says_so():
    queued, _ = enqueue("deadlines_retried_timeout")

    drain()  # both tries: the retry is due at once (backoff_base=0)

    queued.refresh_from_db()
    assert (queued.status, queued.error_code, queued.attempt) == (Status.FAILED, "timeout", 2)
    assert any(line.startswith("Try 1 of 2 failed; retrying in 0 s: Job") for line in log_lines(queued))


def test_a_step_that_returns_past_its_own_timeout_is_not_checkpointed(tmp_path):
    """With ``drain()`` the step runs in the calling thread, which nothing can take back: its
    result, late, is refused when it returns."""
    queued, _ = enqueue(
        "deadlines_stuck_step", subject={"sleep": 0.4, "dir": str(tmp_path), "step_timeout": 0.1}
    )

    drain()

    queued.refresh_from_db()
    assert (queued.status, queued.error_code) == (Status.FAILED, "timeout")
    stuck = step_of(queued, "stuck")
    assert (stuck.state, stuck.result) == (StepState.FAILED, None)
    assert stuck.error == "Step 'stuck' ran past its timeout of 0.1 s."
    assert step_of(queued, "after").state == StepState.PENDING


def test_a_question_past_its_deadline_resumes_with_its_default_action():
    queued, _ = enqueue("deadlines_question", subject={"deadline_seconds": 3600, "on_deadline": "skip"})
    before = timezone.now()

    drain()

    asked = describe(queued)
    assert (asked["status"], asked["on_deadline"]) == ("needs_user", "skip")
    deadline = Job.objects.get(pk=queued.pk).next_run_at
    assert before + timedelta(seconds=3600) <= deadline <= timezone.now() + timedelta(seconds=3600)
    assert asked["deadline"] == deadline.isoformat()
    assert drain() == 0  # not due yet

    Job.objects.filter(pk=queued.pk).update(next_run_at=timezone.now() - timedelta(seconds=1))
    drain()

    queued.refresh_from_db()
    assert (queued.status, queued.result, queued.on_deadline) == (Status.DONE, {"chose": "skip"}, "")
    assert "Nobody answered: resolved with 'Skip' by its deadline." in log_lines(queued)


def test_a_question_answered_before_its_deadline_is_not_resolved_again():
    queued, _ = enqueue("deadlines_question", subject={"deadline_seconds": 3600, "on_deadline": "skip"})
    drain()
    queued.resume(action="restore")
    Job.objects.filter(pk=queued.pk).update(next_run_at=timezone.now() - timedelta(seconds=1))

    drain()

    queued.refresh_from_db()
    assert (queued.status, queued.result) == (Status.DONE, {"chose": "restore"})
    assert not any("by its deadline" in line for line in log_lines(queued))


@pytest.mark.parametrize(
    ("subject", "message"),
    [
        ({"deadline_seconds": 60, "on_deadline": "later"}, "on_deadline must be one of the offered actions"),
        ({"deadline_seconds": 60, "on_deadline": None}, "A deadline needs an on_deadline action"),
    ],
)
def test_a_deadline_needs_one_of_the_offered_actions(subject, message):
    queued, _ = enqueue("deadlines_question", subject=subject)
    drain()
    queued.refresh_from_db()
    assert (queued.status, queued.error_code) == (Status.FAILED, "invalid_input")
    assert message in queued.error


@pytest.fixture(autouse=True)
def _forget_refused_kinds():
    yield
    unregister("deadlines_refused_kind")
