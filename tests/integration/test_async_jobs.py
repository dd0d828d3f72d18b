"""Async jobs run inline (``drain()`` and ``django_durajobs.testing``): ``async def`` runs and
reverts, ``await ctx.step`` with every form of step function, the awaited waiting members, and
the async operations. Kinds: ``tests/testapp/kinds_async.py``. Real workers:
``tests/e2e/test_async_workers.py``."""

from __future__ import annotations

from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync

from django_durajobs import (
    Job,
    JobError,
    Status,
    acancel,
    adescribe,
    aenqueue,
    aenqueue_many,
    aresume,
    aupdate,
    describe,
    drain,
    enqueue,
    revert,
    send_event,
)
from django_durajobs.status import Phase, StepState
from django_durajobs.testing import answer, assert_steps_ran, clock, run_job, step_states
from tests.job_rows import log_lines, step_rows
from tests.testapp.kinds_async import ASYNC_STEPS, async_question, effect_counts

pytestmark = pytest.mark.django_db

FORMS = ("async_function", "sync_function", "returns_coroutine", "coroutine")


def test_an_async_job_runs_its_async_steps_once_each_and_stores_its_result():
    job, _ = enqueue("async_three_steps")

    assert drain() == 1

    job.refresh_from_db()
    assert job.status == Status.DONE
    assert job.result == {"steps": [{"step": step, "job": job.pk} for step in ASYNC_STEPS]}
    assert effect_counts(job.pk, ASYNC_STEPS) == dict.fromkeys(ASYNC_STEPS, 1)
    assert_steps_ran(job, ASYNC_STEPS)


def test_every_form_of_step_function_runs_and_a_finished_step_is_not_run_again_after_a_wait():
    """Resumed after ``await ctx.wait_external``, the run starts again from the top: the four
    finished steps (an async function, a sync one, a lambda returning a coroutine, a coroutine)
    return their stored results without running; only the step after the wait runs."""
    job, _ = enqueue("async_step_forms")

    waiting = run_job(job)
    assert (waiting.status, waiting.wait_reason) == (
        Status.AWAITING_EXTERNAL,
        "Waiting for the upstream build",
    )
    assert step_states(job) == [(form, StepState.DONE) for form in FORMS]

    done = run_job(aresume_now(job))

    assert done.status == Status.DONE
    assert done.result == {"steps": [{"step": step, "job": job.pk} for step in (*FORMS, "after_wait")]}
    assert effect_counts(job.pk, (*FORMS, "after_wait")) == dict.fromkeys((*FORMS, "after_wait"), 1)


def aresume_now(job: Job) -> Job:
    return async_to_sync(aresume)(job, by="ops", data={"build": 42})


def test_an_awaited_question_is_answered_like_a_sync_one():
    job, _ = enqueue("async_question")

    asked = run_job(job)
    assert (asked.status, asked.user_message) == (Status.NEEDS_USER, "Ship the release?")
    assert [action["id"] for action in asked.actions] == ["ship", "hold"]

    done = answer(job, "ship", {"window": "tonight"})
    assert (done.status, done.result) == (Status.DONE, {"chose": "ship", "data": {"window": "tonight"}})


def test_an_awaited_event_wait_parks_the_job_and_the_send_resumes_it_with_the_payload():
    job, _ = enqueue("async_event_waiter", subject={"name": "async:payment:7"})

    waiting = run_job(job)
    assert (waiting.status, waiting.wait_reason) == (
        Status.AWAITING_EXTERNAL,
        "Waiting for event async:payment:7",
    )

    assert send_event("async:payment:7", {"paid": True}) is True
    drain()
    job.refresh_from_db()
    assert (job.status, job.result) == (Status.DONE, {"payload": {"paid": True}})
    assert step_states(job) == [("after", StepState.DONE)]


def test_an_atomic_sync_step_of_an_async_job_rolls_back_with_its_failure():
    failing, _ = enqueue("async_atomic", subject={"fail": True})
    working, _ = enqueue("async_atomic")

    assert run_job(failing).status == Status.FAILED
    assert run_job(working).status == Status.DONE

    assert effect_counts(failing.pk, ["write"]) == {"write": 0}  # its write went with the transaction
    assert "the write's second half failed" in step_rows(failing.pk)["write"].error
    assert effect_counts(working.pk, ["write"]) == {"write": 1}


def test_an_atomic_step_with_an_async_function_is_refused_before_it_runs():
    job, _ = enqueue("async_atomic_coroutine")

    failed = run_job(job)

    assert (failed.status, failed.error_code) == (Status.FAILED, "invalid_input")
    assert "a transaction cannot span awaits" in failed.error
    assert effect_counts(job.pk, ["write"]) == {"write": 0}


def test_a_sync_job_that_passes_an_async_function_to_its_step_fails_with_a_clear_error():
    job, _ = enqueue("sync_calls_async_step")

    failed = run_job(job)

    assert (failed.status, failed.error_code) == (Status.FAILED, "invalid_input")
    assert "only an async job (async def) can await it" in failed.error
    assert effect_counts(job.pk, ["fetch"]) == {"fetch": 0}


def test_a_retryable_error_in_an_async_step_is_retried_after_its_backoff():
    job, _ = enqueue("async_flaky")
    with clock() as now:
        queued = run_job(job)
        assert (queued.status, queued.attempt, queued.error_code) == (Status.QUEUED, 1, "transient")
        assert "upstream timed out" in queued.error

        now.move(timedelta(seconds=30))
        done = run_job(job)

    assert (done.status, done.attempt, done.result) == (Status.DONE, 2, "fetched")
    assert effect_counts(job.pk, ["fetch"]) == {"fetch": 2}


def test_awaited_log_and_progress_are_stored_redacted():
    job, _ = enqueue("async_reporter")

    done = run_job(job)

    assert done.status == Status.DONE
    assert any(line.startswith("Copying 3 files, token=") for line in log_lines(job.pk))
    assert not any("s3cr3t-value" in line for line in log_lines(job.pk))
    assert done.progress == 100  # done; the 40 was written while it ran


def test_an_async_revert_runs_its_own_steps_after_the_run():
    job, _ = enqueue("async_deploy")
    assert run_job(job).status == Status.DONE

    revert(job)
    reverted = run_job(job)

    assert reverted.status == Status.REVERTED
    assert_steps_ran(job, ["restore"], phase=Phase.REVERT)
    assert effect_counts(job.pk, ["deploy", "restore"]) == {"deploy": 1, "restore": 1}


def test_an_async_parent_awaits_its_children_and_gets_their_summary():
    parent, _ = enqueue("async_parent", subject={"children": 3})

    done = run_job(parent)

    assert done.status == Status.DONE
    assert done.result == {"done": 3}
    assert Job.objects.filter(parent_id=parent.pk, status=Status.DONE).count() == 3


def test_a_cancel_asked_from_an_async_step_stops_the_job_at_the_next_step_boundary():
    job, _ = enqueue("async_cancel_itself")

    cancelled = run_job(job)

    assert cancelled.status == Status.CANCELLED
    assert step_states(job) == [("ask", StepState.DONE), ("never", StepState.PENDING)]
    assert effect_counts(job.pk, ["never"]) == {"never": 0}


def test_a_pause_asked_from_an_async_step_pauses_and_resumed_goes_on_after_it():
    job, _ = enqueue("async_pause_itself")

    assert run_job(job).status == Status.PAUSED

    done = run_job(aresume_now(job))
    assert done.status == Status.DONE
    assert effect_counts(job.pk, ["then"]) == {"then": 1}
    assert step_states(job) == [("ask", StepState.DONE), ("then", StepState.DONE)]


def test_an_async_step_that_returns_past_the_jobs_timeout_fails_it_with_timeout():
    job, _ = enqueue("async_slow_step")

    failed = run_job(job)

    assert (failed.status, failed.error_code) == (Status.FAILED, "timeout")
    assert step_rows(job.pk)["slow"].result is None


# The async operations ---------------------------------------------------------------------------


def test_the_async_operations_do_what_the_sync_ones_do():
    job, created = async_to_sync(aenqueue)("async_question", subject={"order": 7}, idempotency_key="order-7")
    again, created_again = async_to_sync(async_question.aenqueue)(idempotency_key="order-7")
    assert (created, created_again, again.pk) == (True, False, job.pk)

    run_job(job)
    shown = async_to_sync(adescribe)(job.pk)
    assert shown == describe(job.pk)
    assert (shown["status"], shown["user_message"]) == (Status.NEEDS_USER, "Ship the release?")

    async_to_sync(aupdate)(job, label="Release 7")
    assert async_to_sync(job.adescribe)()["label"] == "Release 7"
    cancelled = async_to_sync(job.acancel)(by="ops")
    assert cancelled.status == Status.CANCELLED


def test_an_async_operation_refuses_what_the_sync_one_refuses():
    job, _ = enqueue("async_three_steps")
    run_job(job)

    with pytest.raises(JobError) as refused:
        async_to_sync(acancel)(job.pk)
    assert refused.value.code == "job_not_cancellable"
    with pytest.raises(JobError) as invalid:
        async_to_sync(aenqueue)("async_three_steps", subject={"bad": float("nan")})
    assert invalid.value.code == "invalid_input"
    assert Job.objects.count() == 1


def test_aenqueue_many_enqueues_them_all():
    enqueued = async_to_sync(aenqueue_many)("async_three_steps", [{"subject": {"n": n}} for n in range(3)])

    assert [(job.subject, created) for job, created in enqueued] == [({"n": n}, True) for n in range(3)]
    assert drain() == 3
    assert Job.objects.filter(status=Status.DONE).count() == 3


def test_the_twins_are_named_and_documented_as_django_names_its_own():
    assert (aenqueue.__name__, Job.acancel.__name__, Job.acancel.__qualname__) == (
        "aenqueue",
        "acancel",
        "Job.acancel",
    )
    assert aenqueue.__doc__ == enqueue.__doc__
