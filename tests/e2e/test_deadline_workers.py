"""Deadlines on a real worker: a step stuck in its thread past its timeout is given up by its
worker, whose other jobs go on, and the late thread's checkpoint is refused."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

from django_durajobs import Job, Status, enqueue
from django_durajobs.status import StepState
from tests.helpers import stop_cleanly, wait_for
from tests.job_rows import step_rows
from tests.testapp.gates import go_file
from tests.testapp.kinds_deadlines import late_marker

pytestmark = pytest.mark.django_db(transaction=True)

FAST = ("--poll-interval", "0.1")
#: How far past its deadline a job may end here: "within a second", with room for a loaded machine.
SLACK_SECONDS = 3


def step_of(job, step_id: str):
    return step_rows(job.pk)[step_id]


def test_a_step_stuck_past_its_timeout_is_given_up_while_the_worker_goes_on(child_env, runjobs, tmp_path):
    """Both job threads of a worker are stuck in steps past their timeout: the worker gives both
    jobs up (failed with ``timeout`` within seconds of the deadline), starts threads in their
    place that finish the other jobs while the stuck ones still sleep, and refuses the late
    threads' checkpoints. The stuck steps sleep until the test lets them go (at most ``sleep``)."""
    step_timeout, sleep = 1.0, 60
    stuck = [
        enqueue(
            "deadlines_stuck_step",
            subject={"sleep": sleep, "dir": str(tmp_path), "step_timeout": step_timeout},
        )[0]
        for _ in range(2)
    ]
    worker = runjobs("--concurrency", "2", *FAST, env=child_env)
    for each in stuck:
        wait_for(lambda each=each: step_of(each, "stuck").state == StepState.RUNNING, timeout=60)
    quick = [enqueue("deadlines_quick")[0] for _ in range(5)]

    for each in stuck:
        wait_for(lambda each=each: Job.objects.get(pk=each.pk).status == Status.FAILED, timeout=30)
    wait_for(
        lambda: Job.objects.filter(pk__in=[j.pk for j in quick], status=Status.DONE).count() == 5, timeout=30
    )
    assert not any(late_marker(tmp_path, each.pk).exists() for each in stuck), (
        "the stuck steps came back first"
    )

    for each in stuck:
        each.refresh_from_db()
        started = step_of(each, "stuck").started_at
        assert each.error_code == "timeout"
        assert "was still running step 'stuck' past its timeout" in each.error
        assert each.ended_at - started <= timedelta(seconds=step_timeout + SLACK_SECONDS)
        assert each.ended_at - started >= timedelta(seconds=step_timeout)

    for each in stuck:  # the late threads come back and try to checkpoint: refused
        go_file(tmp_path, each.pk).touch()
        wait_for(lambda each=each: late_marker(tmp_path, each.pk).exists(), timeout=30)
    time.sleep(1)
    for each in stuck:
        step = step_of(each, "stuck")
        assert (step.state, step.result) == (StepState.FAILED, None)
        assert step_of(each, "after").state == StepState.PENDING
        assert Job.objects.get(pk=each.pk).status == Status.FAILED

    # The worker still takes jobs: the late threads ended, and their places were taken.
    more = enqueue("deadlines_quick")[0]
    wait_for(lambda: Job.objects.get(pk=more.pk).status == Status.DONE, timeout=30)
    stop_cleanly([worker])
    log = worker.log_path.read_text()
    assert log.count("a new thread takes its place") == 2
    assert log.count("abandoned") >= 2


@pytest.mark.parametrize("stuck", ["before", "between"])
def test_a_job_stuck_outside_its_steps_past_its_timeout_leaves_no_step_running(
    child_env, runjobs, tmp_path, stuck
):
    """The claim (before the first step, on PostgreSQL) or the first step's checkpoint (between
    the two) marks the next step running ahead of the run; a job given up before its run opens
    that step puts it back to pending, in the same write that fails the job: no step of a failed
    job shows as running."""
    given_up, _ = enqueue(
        "deadlines_stuck_outside_steps",
        subject={"stuck": stuck, "sleep": 60, "dir": str(tmp_path)},
        timeout=1.0,
    )
    worker = runjobs(*FAST, env=child_env)
    wait_for(lambda: Job.objects.get(pk=given_up.pk).status == Status.FAILED, timeout=60)
    given_up.refresh_from_db()
    assert given_up.error_code == "timeout"
    assert "was still running its run past its timeout" in given_up.error
    states = {step_id: step.state for step_id, step in step_rows(given_up.pk).items()}
    expected_first = StepState.PENDING if stuck == "before" else StepState.DONE
    assert states == {"first": expected_first, "second": StepState.PENDING}
    assert step_of(given_up, "second").started_at is None

    go_file(tmp_path, given_up.pk).touch()  # the late thread comes back: its writes are refused
    wait_for(lambda: late_marker(tmp_path, given_up.pk).exists(), timeout=30)
    time.sleep(1)
    assert {step_id: step.state for step_id, step in step_rows(given_up.pk).items()} == states
    stop_cleanly([worker])
