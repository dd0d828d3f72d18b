"""``django_durajobs.testing``: running jobs inline, answering them, moving the clock, asserting steps.

These tests use the helpers the way a project's own tests would: on the test database, inside
the test's transaction (``db``), with the real engine. Kinds: ``tests/testapp/kinds_testing.py``.
"""

from __future__ import annotations

import sys
from datetime import timedelta

import pytest
from django.utils import timezone

from django_durajobs import Job, JobError, Status, describe, drain, enqueue, recover, revert
from django_durajobs.testing import answer, assert_steps_ran, clock, run_job, step_states
from tests.testapp.kinds_testing import runs_of

pytestmark = pytest.mark.django_db


# Retries, timed waits and retry_later: due when the clock moves, not before -------------------


def test_a_backed_off_retry_runs_when_the_clock_reaches_it():
    with clock() as now:
        job, _ = enqueue("testing_flaky", subject={"failures": 2})
        first = run_job(job)
        assert (first.status, first.attempt, first.error_code) == (Status.QUEUED, 1, "transient")
        assert first.next_run_at == now.now() + timedelta(seconds=30)

        now.move(29)
        assert drain() == 0  # not due yet
        assert run_job(job).attempt == 1

        now.move(1)
        second = run_job(job)
        assert (second.status, second.attempt) == (Status.QUEUED, 2)
        assert second.next_run_at == now.now() + timedelta(seconds=60)

        now.move_to(second.next_run_at)
        done = run_job(job)

    assert (done.status, done.attempt, done.result) == (Status.DONE, 3, {"rate": 1.08})
    assert runs_of(job.pk, "fetch") == 3
    assert runs_of(job.pk, "save") == 1
    assert_steps_ran(job, ["fetch", "save"])


def test_a_timed_wait_wakes_when_the_clock_passes_its_resume_at():
    with clock() as now:
        job, _ = enqueue("testing_timed", subject={"minutes": 5})
        waiting = run_job(job)
        assert waiting.status == Status.AWAITING_EXTERNAL
        assert waiting.next_run_at == now.now() + timedelta(minutes=5)
        assert step_states(job) == [("publish", "waiting")]

        now.move(timedelta(minutes=4))
        assert run_job(job).status == Status.AWAITING_EXTERNAL

        now.move(timedelta(minutes=1))
        assert run_job(job).status == Status.DONE
    assert_steps_ran(job, ["publish"])


def test_retry_later_runs_again_once_its_delay_has_passed():
    with clock() as now:
        job, _ = enqueue("testing_later", subject={"seconds": 90})
        later = run_job(job)
        assert (later.status, later.wait_reason, later.attempt) == (Status.QUEUED, "Not yet", 0)
        now.move(90)
        assert run_job(job).status == Status.DONE
    assert runs_of(job.pk, "publish") == 1


def test_what_is_due_follows_the_moved_clock_not_the_database_clock():
    # The database's clock is 400 days ahead of the test's: a retry 30 s away still waits for it.
    with clock(timezone.now() - timedelta(days=400)) as now:
        job, _ = enqueue("testing_flaky", subject={"failures": 1})
        assert run_job(job).status == Status.QUEUED
        assert drain() == 0  # the claim itself finds nothing due
        now.move(30)
        assert run_job(job).status == Status.DONE


def test_moving_the_clock_never_makes_a_lease_look_expired():
    with clock() as now:
        job, _ = enqueue("testing_refund", subject={"order": 1000})
        held = dict(status=Status.RUNNING, locked_by="worker-elsewhere", lease_token="x", locked_at=now.now())
        Job.objects.filter(pk=job.pk).update(**held)
        now.move(timedelta(hours=2))
        assert recover() == 0  # leases are judged by the database's clock, which did not move
        assert describe(job)["stale"] is False
        assert run_job(job).status == Status.RUNNING  # its worker has it: nothing to run here


@pytest.mark.django_db(transaction=True)
def test_the_helpers_work_in_a_test_whose_writes_commit():
    with clock() as now:
        parent, _ = enqueue("testing_parent", subject={"children": [{"value": 1}, {"wait_minutes": 1}]})
        assert run_job(parent).status == Status.AWAITING_EXTERNAL
        now.move(60)
        assert run_job(parent).status == Status.DONE
    assert_steps_ran(parent, ["fan_out", "report"])


def test_a_clock_that_ticks_still_moves_by_what_it_is_told():
    with clock(tick=True) as now:
        job, _ = enqueue("testing_flaky", subject={"failures": 1})
        assert run_job(job).status == Status.QUEUED
        moved_to = now.move(timedelta(seconds=31))
        assert moved_to >= job.created_at + timedelta(seconds=31)
        assert run_job(job).status == Status.DONE


def test_the_clock_starts_where_it_is_told_and_moves_forward_only():
    start = timezone.now() + timedelta(days=400)
    with clock(start) as now:
        assert now.now() == start
        job, _ = enqueue("testing_timed", subject={"minutes": 1})
        assert job.created_at == start
        assert run_job(job).status == Status.AWAITING_EXTERNAL
        with pytest.raises(ValueError, match="forward only"):
            now.move(-1)
        now.move(60)
        assert run_job(job).status == Status.DONE
    assert timezone.now() < start


def test_the_clock_without_time_machine_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "time_machine", None)
    with pytest.raises(ImportError, match=r"django-durajobs\[testing\]"):
        with clock():
            pass


# Questions ------------------------------------------------------------------------------------


def test_answering_a_question_runs_the_job_on_with_the_answer():
    job, _ = enqueue("testing_refund", subject={"order": 1001})
    asking = run_job(job)
    assert (asking.status, asking.user_message) == (Status.NEEDS_USER, "Refund order 1001?")

    done = answer(job, "approve", {"amount": 12})
    assert (done.status, done.result) == (Status.DONE, {"refunded": True})
    assert done.steps.get(step_id="pay").result == {"amount": 12}
    assert runs_of(job.pk, "check") == 1
    assert_steps_ran(job, ["check", "pay"])


def test_an_answer_without_running_only_resumes_the_job():
    job, _ = enqueue("testing_refund", subject={"order": 1002})
    run_job(job)
    resumed = answer(job, "decline", run=False, by="alice")
    assert (resumed.status, resumed.resume_action) == (Status.QUEUED, "decline")
    assert run_job(job).result == {"refunded": False}
    assert_steps_ran(job, ["check"])


def test_an_answer_the_job_does_not_offer_is_refused():
    job, _ = enqueue("testing_refund", subject={"order": 1003})
    run_job(job)
    with pytest.raises(JobError, match="approve, decline") as refused:
        answer(job, "maybe")
    assert refused.value.code == "invalid_input"
    assert Job.objects.get(pk=job.pk).status == Status.NEEDS_USER


# Parents and children -------------------------------------------------------------------------


def test_a_parent_that_waits_for_its_children_runs_them_too():
    parent, _ = enqueue("testing_parent", subject={"children": [{"value": 1}, {"value": 2}, {"value": 3}]})
    done = run_job(parent)
    assert (done.status, done.result) == (Status.DONE, "done")
    children = Job.objects.filter(parent=parent).order_by("pk")
    assert [child.status for child in children] == [Status.DONE] * 3
    assert [child.result for child in children] == [1, 2, 3]
    assert_steps_ran(parent, ["fan_out", "report"])


def test_a_parent_rests_while_a_child_waits_and_runs_on_when_the_clock_wakes_it():
    with clock() as now:
        parent, _ = enqueue("testing_parent", subject={"children": [{}, {"wait_minutes": 10}]})
        waiting = run_job(parent)
        assert (waiting.status, waiting.describe()["wait_reason"]) == (
            Status.AWAITING_EXTERNAL,
            "Waiting for 1 of 2 child jobs",
        )
        assert Job.objects.get(parent=parent, status=Status.AWAITING_EXTERNAL).subject == {"wait_minutes": 10}

        now.move(timedelta(minutes=10))
        assert run_job(parent).status == Status.DONE
    assert list(Job.objects.filter(parent=parent).values_list("status", flat=True)) == [Status.DONE] * 2
    assert runs_of(parent.pk, "report") == 1


def test_a_child_that_asks_counts_as_settled_and_is_answered_on_its_own():
    parent, _ = enqueue("testing_parent", subject={"children": [{}, {"value": 2}]})
    asking, _ = enqueue("testing_refund", subject={"order": 1006}, parent=parent)
    assert run_job(parent).result == "partial"
    assert Job.objects.get(pk=asking.pk).status == Status.NEEDS_USER
    assert answer(asking, "approve").status == Status.DONE


# Failures, reverts and the assertion's message ------------------------------------------------


def test_a_job_that_fails_shows_which_steps_ran():
    job, _ = enqueue("testing_broken")
    failed = run_job(job)
    assert (failed.status, failed.error_code) == (Status.FAILED, "failed")
    assert "The mail server refused the message" in failed.error
    assert step_states(job) == [("prepare", "done"), ("send", "failed")]
    assert_steps_ran(job, ["prepare"])


def test_assert_steps_ran_shows_every_step_when_it_fails():
    job, _ = enqueue("testing_broken")
    run_job(job)
    with pytest.raises(AssertionError) as mismatch:
        assert_steps_ran(job, ["prepare", "send"])
    assert str(mismatch.value) == (
        f"Job {job.pk} (testing_broken, failed): expected the run steps ['prepare', 'send'] to have "
        "run, but ['prepare'] did:\n"
        "  prepare: done\n"
        "  send: failed (ValueError: The mail server refused the message)"
    )


def test_a_revert_runs_inline_and_its_steps_are_asserted_apart():
    job, _ = enqueue("testing_refund", subject={"order": 1004})
    run_job(job)
    answer(job, "approve")
    revert(job)
    assert run_job(job).status == Status.REVERTED
    assert_steps_ran(job, ["take_back"], phase="revert")
    assert_steps_ran(job, ["check", "pay"])
    with pytest.raises(AssertionError, match=r"expected the revert steps \[\]"):
        assert_steps_ran(job, [], phase="revert")


def test_a_job_that_never_rests_stops_after_max_runs():
    job, _ = enqueue("testing_restless")
    with pytest.raises(
        AssertionError, match=rf"Job {job.pk} \(testing_restless\) is still queued after 5 runs"
    ):
        run_job(job, max_runs=5)


def test_a_job_already_at_rest_is_returned_without_running_anything():
    job, _ = enqueue("testing_refund", subject={"order": 1005})
    run_job(job)
    assert run_job(job.pk).status == Status.NEEDS_USER
    assert runs_of(job.pk, "check") == 1
