"""A ``KeyboardInterrupt`` or ``SystemExit`` raised by a job's own code fails its try by the usual
rules (recorded, counted, retried or failed) instead of leaving the job to be picked up again for
ever; a worker's cancelling of an async job's task is still not the job's failure
(kinds: ``kinds_durability``)."""

from __future__ import annotations

import signal

import pytest

from django_durajobs import Job, drain, enqueue, retry

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "raised, status, error_code",
    [("KeyboardInterrupt", "queued", "transient"), ("SystemExit", "failed", "failed")],
)
def test_a_base_exception_in_a_step_fails_the_try_and_is_retried_as_its_kind_says(raised, status, error_code):
    """The kind retries ``KeyboardInterrupt`` (its ``retryable``), not ``SystemExit``."""
    job, _ = enqueue("interrupted_by_the_job", subject={"raise": raised})
    assert drain() == 1
    job.refresh_from_db()
    assert (job.status, job.attempt, job.error_code) == (status, 1, error_code)
    assert job.error == f"{raised}: raised by the job"
    steps = {step.step_id: step for step in job.steps.all()}
    assert steps["first"].state == "done"
    assert steps["second"].state == "failed" and steps["second"].error == f"{raised}: raised by the job"
    assert drain() == 0  # not picked up again before its backoff (or at all)


def test_a_job_that_keeps_raising_keyboard_interrupt_ends_failed_after_its_tries():
    job, _ = enqueue("interrupted_by_the_job", subject={"raise": "KeyboardInterrupt"})
    drain()
    Job.objects.filter(pk=job.pk).update(next_run_at=job.created_at)  # its backoff is over
    assert drain() == 1
    job.refresh_from_db()
    assert (job.status, job.attempt, job.error_code) == ("failed", 2, "failed")
    assert job.steps.get(step_id="first").state == "done"
    retry(job)  # an operator's retry runs it once more
    assert drain() == 1
    job.refresh_from_db()
    assert (job.status, job.attempt) == ("failed", 3)


def test_an_async_job_raising_keyboard_interrupt_fails():
    job, _ = enqueue("async_interrupted_by_the_job")
    assert drain() == 1
    job.refresh_from_db()
    assert (job.status, job.attempt, job.error) == ("failed", 1, "KeyboardInterrupt: raised by the async job")
    assert drain() == 0


def test_ctrl_c_during_drain_fails_the_running_job_and_stops_drain():
    pressed, _ = enqueue("interrupted_by_ctrl_c")
    waiting, _ = enqueue("interrupted_by_ctrl_c", priority=-10)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a shell
    try:
        with pytest.raises(KeyboardInterrupt, match="interrupted after 1 job"):
            drain()
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, previous)
    pressed.refresh_from_db()
    waiting.refresh_from_db()
    assert (pressed.status, pressed.error) == ("failed", "KeyboardInterrupt")
    assert waiting.status == "queued"  # drain() stopped there
