"""Pausing a running job across a real worker's death: a worker SIGKILLed while a pause is pending
loses neither the request nor a step."""

from __future__ import annotations

from collections import Counter

import pytest

from django_durajobs import Job, Status, enqueue, pause, resume
from django_durajobs.status import StepState
from tests.helpers import sigkill, stop_cleanly, wait_for
from tests.job_rows import step_rows
from tests.testapp.gates import go_file, started_markers
from tests.testapp.models import SideEffect

pytestmark = pytest.mark.django_db(transaction=True)

FAST = ("--poll-interval", "0.1")


def runs_of(job):
    """How often each of the job's steps really ran."""
    names = SideEffect.objects.filter(name__startswith=f"{job.pk}:").values_list("name", flat=True)
    return Counter(name.split(":", 1)[1] for name in names)


def test_a_worker_killed_while_a_pause_is_pending_loses_neither_the_request_nor_a_step(
    child_env, runjobs, tmp_path
):
    """SIGKILL in step two with a pause requested: the next worker (the same one, restarted) takes
    the job back and pauses it with step one done; resumed, it runs two and three, and one never again."""
    job, _ = enqueue("durability_three_steps", subject={"block_at": "two", "dir": str(tmp_path)})
    first = runjobs("--worker-id", "pausing", "--concurrency", "1", *FAST, env=child_env)
    wait_for(lambda: started_markers(tmp_path, job.pk, "two"), timeout=60)
    pause(job)
    sigkill(first)

    job.refresh_from_db()
    assert (job.status, job.pause_requested) == (Status.RUNNING, True)
    go_file(tmp_path, job.pk).touch()
    second = runjobs("--worker-id", "pausing", "--concurrency", "1", *FAST, env=child_env)
    wait_for(lambda: Job.objects.get(pk=job.pk).status == Status.PAUSED, timeout=60)

    job.refresh_from_db()
    assert job.pause_requested is False
    assert {step_id: row.state for step_id, row in step_rows(job.pk).items()} == {
        "one": StepState.DONE,
        "two": StepState.PENDING,
        "three": StepState.PENDING,
    }
    assert runs_of(job) == {"one": 1, "two": 1}

    resume(job)
    wait_for(lambda: Job.objects.get(pk=job.pk).status == Status.DONE, timeout=60)
    assert runs_of(job) == {"one": 1, "two": 2, "three": 1}  # the step in flight ran again, once
    stop_cleanly([second])
