"""The state machine of DESIGN.md section 2: every row of the table, every refused transition, steps
(section 3) and the ``job_changed`` signal.

Operations are checked on jobs built directly in each status (``tests.factories.JobFactory``);
the rows a worker drives are checked with real runs through ``drain()`` of the kinds in
``tests/testapp/kinds_states.py``.
"""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
from django.db import transaction
from django.test import override_settings
from django.utils import timezone

import django_durajobs
from django_durajobs import Job, JobError, JobLog, JobStep, Status, drain, enqueue
from django_durajobs.signals import job_changed
from tests.factories import JobFactory
from tests.job_states import ALL_STATUSES, OPERATIONS, build, snapshot
from tests.testapp.kinds_states import recorded

pytestmark = pytest.mark.django_db

WAITING = {
    "awaiting_external",
    "needs_user",
    "paused",
    "awaiting_approval",
    "awaiting_payment",
    "not_ready",
    "needs_setup",
}
EXTERNAL_WAITS = sorted(WAITING - {"needs_user", "paused"})

# DESIGN.md section 2, written out here (not imported from the package) so the tests check it.
ALLOWED_FROM = {
    "resume": WAITING,
    "retry": {"failed", "needs_user"},
    "pause": {"queued", "running", "awaiting_external"},
    "cancel": {"queued", "running"} | WAITING,
    "revert": {"done", "failed", "needs_user"},
}
REFUSAL_CODE = {
    "resume": "job_not_resumable",
    "retry": "job_not_retryable",
    "pause": "job_not_pausable",
    "cancel": "job_not_cancellable",
    "revert": "job_not_revertible",
}


NOW = object()  # "set to the time of the call"

CALL_STYLES = {
    "function(job)": lambda op, job, **kw: getattr(django_durajobs, op)(job, **kw),
    "function(id)": lambda op, job, **kw: getattr(django_durajobs, op)(job.pk, **kw),
    "method": lambda op, job, **kw: getattr(job, op)(**kw),
}


def steps_of(job, phase="run") -> list[tuple[str, str]]:
    return list(
        JobStep.objects.filter(job=job, phase=phase).order_by("position").values_list("step_id", "state")
    )


def make_due(job) -> None:
    """Let time pass: the job's next run (or timed wake-up) is now."""
    Job.objects.filter(pk=job.pk).update(next_run_at=timezone.now() - timedelta(seconds=1))


def assert_between(value, start, end, delay=0) -> None:
    low, high = start + timedelta(seconds=delay), end + timedelta(seconds=delay)
    assert value is not None and low <= value <= high, f"{value} not within [{low}, {high}]"


def expected_change(op: str, before: dict) -> dict:
    """The fields DESIGN.md (sections 2 and 7) says ``op`` sets; all other columns stay as they were."""
    if op == "resume":
        return {
            "status": "queued",
            "next_run_at": NOW,
            "wait_reason": "",
            "user_message": "",
            "actions": None,
            "eta_at": None,
            "resume_action": "",
            "resume_data": None,
        }
    if op == "retry":
        return {
            "status": "queued",
            "next_run_at": NOW,
            "max_attempts": max(before["max_attempts"], before["attempt"] + 1),
            "error": "",
            "error_code": "",
            "ended_at": None,
            "wait_reason": "",
            "user_message": "",
            "actions": None,
        }
    if op == "pause" and before["status"] == "running":
        return {"pause_requested": True}  # stays running; pauses at its next step
    if op == "pause":
        return {"status": "paused", "next_run_at": None}
    if op == "cancel" and before["status"] == "running":
        return {"cancel_requested": True}  # stays running; stops at its next check
    if op == "cancel":
        # A question nobody need answer any more is cleared (the log keeps it).
        return {
            "status": "cancelled",
            "ended_at": NOW,
            "next_run_at": None,
            "user_message": "",
            "actions": None,
        }
    if op == "revert":
        return {
            "status": "reverting",
            "phase": "revert",
            "progress": 0,  # a revert's progress is its own
            "next_run_at": NOW,
            "ended_at": None,
            "error": "",
            "error_code": "",
            "wait_reason": "",
            "user_message": "",
            "actions": None,
            "cancel_requested": False,
        }
    raise AssertionError(op)


# Operations: every status x every operation ------------------------------------------------------


def test_the_written_out_table_covers_every_operation():
    """The operations the tests run through are those of ALLOWED_FROM, no more, no fewer."""
    assert sorted(ALLOWED_FROM) == sorted(REFUSAL_CODE) == OPERATIONS


def test_the_matrix_covers_every_status():
    assert sorted(ALL_STATUSES) == sorted(Status.values)


@pytest.mark.parametrize("style", sorted(CALL_STYLES))
@pytest.mark.parametrize("status", ALL_STATUSES)
@pytest.mark.parametrize("op", OPERATIONS)
def test_operation_from_every_status(op, status, style):
    """Allowed: exactly the documented fields change (plus updated_at) and a log line names the actor.
    Refused: JobError with the operation's code, and the row, steps and log are untouched."""
    job = build(status)
    before = snapshot(job)
    steps_before = list(JobStep.objects.filter(job=job).values())
    log_before = JobLog.objects.filter(job=job).count()

    if status not in ALLOWED_FROM[op]:
        with pytest.raises(JobError) as refused:
            CALL_STYLES[style](op, job, by="alice")
        assert refused.value.code == REFUSAL_CODE[op]
        assert str(refused.value)  # a human message
        assert snapshot(job) == before
        assert list(JobStep.objects.filter(job=job).values()) == steps_before
        assert JobLog.objects.filter(job=job).count() == log_before
        return

    # A question with offered answers is resumed with one of them.
    answer = {"action": job.actions[0]["id"]} if op == "resume" and job.actions else {}
    start = timezone.now()
    returned = CALL_STYLES[style](op, job, by="alice", **answer)
    end = timezone.now()

    after = snapshot(job)
    assert isinstance(returned, Job) and returned.pk == job.pk
    assert {name: getattr(returned, name) for name in after} == after  # the returned job is fresh
    if style != "function(id)":
        assert job.status == after["status"]  # the Job passed in is refreshed too
    expected = {**expected_change(op, before), **{f"resume_{name}": value for name, value in answer.items()}}
    for name, value in expected.items():
        if value is NOW:
            assert_between(after[name], start, end)
        else:
            assert after[name] == value, name
    unchanged = {name for name in before if name not in expected and name != "updated_at"}
    assert {name: after[name] for name in unchanged} == {name: before[name] for name in unchanged}
    assert after["updated_at"] >= before["updated_at"]
    assert list(JobStep.objects.filter(job=job).values()) == steps_before
    log = list(JobLog.objects.filter(job=job).values_list("line", flat=True))
    assert len(log) == log_before + 1 and "alice" in log[-1]


@pytest.mark.parametrize("status", ["done", "failed", "needs_user"])
def test_revert_of_a_kind_without_revert_is_refused(status):
    job = build(status, kind="states_norevert")
    before = snapshot(job)
    with pytest.raises(JobError) as refused:
        job.revert()
    assert refused.value.code == "job_not_revertible"
    assert snapshot(job) == before


@pytest.mark.parametrize("op", OPERATIONS + ["update", "describe"])
def test_unknown_job_is_not_found(op):
    gone = JobFactory()
    gone_pk = gone.pk
    Job.objects.filter(pk=gone_pk).delete()
    call = getattr(django_durajobs, op)
    kwargs = {"progress": 5} if op == "update" else {}
    for ref in (gone_pk, gone, 987654321):
        with pytest.raises(JobError) as missing:
            call(ref, **kwargs)
        assert missing.value.code == "job_not_found"


def test_retry_never_lowers_max_attempts():
    job = JobFactory(status="failed", attempt=2, max_attempts=5)
    job.retry()
    assert (job.status, job.attempt, job.max_attempts) == ("queued", 2, 5)


def test_resume_with_an_action_that_is_not_offered_is_refused():
    job = JobFactory(status="needs_user", actions=[{"id": "approve", "label": "Approve"}])
    before = snapshot(job)
    with pytest.raises(JobError) as refused:
        job.resume(action="format_disk")
    assert refused.value.code == "invalid_input"
    assert snapshot(job) == before


# queued -> running -> done ------------------------------------------------------------------------


def test_claim_makes_it_running_with_one_more_attempt():
    """Inside the run the row is running and ctx.attempt (and job.attempt) count this try."""
    job, _ = enqueue("states_basic")
    assert (job.status, job.attempt) == ("queued", 0)
    start = timezone.now()
    assert drain() == 1
    job.refresh_from_db()
    assert recorded(job, "observed:status=running:attempt=1:job.attempt=1") == 1
    assert job.attempt == 1
    assert start <= job.started_at <= job.ended_at


def test_run_returning_makes_it_done_with_result_and_full_progress():
    job, _ = enqueue("states_basic")
    start = timezone.now()
    drain()
    job.refresh_from_db()
    assert job.status == "done"
    assert job.result == {"first": {"made": ["a", 1]}, "second": 2}  # as JSON reads back
    assert job.progress == 100
    assert_between(job.ended_at, start, timezone.now())
    assert (job.error, job.error_code, job.next_run_at) == ("", "", None)
    assert (job.locked_by, job.lease_token, job.locked_at) == ("", "", None)
    assert steps_of(job) == [("first", "done"), ("second", "done")]
    assert drain() == 0  # done is terminal: nothing runs again


# running -> waiting ------------------------------------------------------------------------------


@pytest.mark.parametrize("status", EXTERNAL_WAITS)
def test_wait_external_parks_in_the_given_status(status):
    """wait_reason and eta_at = resume_at; the try is handed back; the next step shows the wait."""
    job, _ = enqueue("states_wait", subject={"status": status, "resume_in": 600})
    start = timezone.now()
    assert drain() == 1
    end = timezone.now()
    job.refresh_from_db()
    assert job.status == status
    assert job.wait_reason == "DNS record not visible yet"
    assert_between(job.eta_at, start, end, delay=600)
    assert job.next_run_at == job.eta_at
    assert job.attempt == 0
    assert job.ended_at is None
    assert (job.locked_by, job.lease_token) == ("", "")
    # raised outside a step: the next pending step carries the wait
    assert steps_of(job) == [("prepare", "done"), ("finish", "waiting")]
    assert JobStep.objects.get(job=job, step_id="finish").detail == "DNS record not visible yet"
    assert drain() == 0  # not due before resume_at


def test_wait_external_with_a_status_member_and_no_resume_at():
    """Status.AWAITING_PAYMENT (the enum member) works; without resume_at there is no ETA and no wake-up."""
    job, _ = enqueue(
        "states_wait", subject={"status": "awaiting_payment", "enum": True, "reason": "Invoice 7 unpaid"}
    )
    drain()
    job.refresh_from_db()
    assert job.status == Status.AWAITING_PAYMENT
    assert job.wait_reason == "Invoice 7 unpaid"
    assert (job.eta_at, job.next_run_at) == (None, None)
    assert drain() == 0


def test_needs_user_then_resume_with_an_action():
    """Message and actions are shown; the re-entered run sees ctx.resume_action and ctx.resume_data."""
    job, _ = enqueue("states_ask")
    drain()
    job.refresh_from_db()
    assert job.status == "needs_user"
    assert job.user_message == "Overwrite the existing site?"
    assert job.actions == [{"id": "approve", "label": "approve"}, {"id": "reject", "label": "Reject it"}]
    assert (job.attempt, job.next_run_at, job.eta_at) == (0, None, None)
    assert steps_of(job) == [("check", "done"), ("apply", "needs_user")]
    assert JobStep.objects.get(job=job, step_id="apply").detail == "Overwrite the existing site?"
    assert drain() == 0

    job.resume(by="alice", action="reject", data={"note": "keep the old one"})
    assert (job.status, job.resume_action, job.resume_data) == (
        "queued",
        "reject",
        {"note": "keep the old one"},
    )
    assert (job.user_message, job.actions) == ("", None)

    assert drain() == 1
    job.refresh_from_db()
    assert job.status == "done"
    assert job.result == {"action": "reject", "data": {"note": "keep the old one"}}
    assert recorded(job, "resumed:reject") == 1
    assert recorded(job, "step:check") == 1  # finished before the question: not run again
    assert steps_of(job) == [("check", "done"), ("apply", "done")]
    assert (job.resume_action, job.resume_data) == ("", None)


def test_waiting_job_resumed_runs_again_from_its_next_step():
    job, _ = enqueue("states_wait", subject={"resume_in": 3600})
    drain()
    job.refresh_from_db()
    resumed = django_durajobs.resume(job.pk)
    assert (resumed.status, resumed.wait_reason, resumed.eta_at) == ("queued", "", None)
    assert drain() == 1
    job.refresh_from_db()
    assert job.status == "done"
    assert (recorded(job, "step:prepare"), recorded(job, "step:finish"), recorded(job, "entry")) == (1, 1, 2)


def test_timed_wait_wakes_on_drain_when_resume_at_passes():
    job, _ = enqueue("states_wait", subject={"resume_in": 600})
    drain()
    job.refresh_from_db()
    assert job.status == "awaiting_external"
    make_due(job)  # resume_at has passed
    assert drain() == 1  # no resume() call
    job.refresh_from_db()
    assert job.status == "done"
    assert recorded(job, "entry") == 2


def test_timed_wait_already_due_is_woken_within_the_same_drain():
    job, _ = enqueue("states_wait", subject={"resume_in": -1})
    assert drain() == 2
    job.refresh_from_db()
    assert job.status == "done"


# retry_later -----------------------------------------------------------------------------------------


def test_retry_later_queues_at_now_plus_seconds_without_using_an_attempt():
    """After retry_later the job still has all its attempts: a retryable failure then is retried."""
    job, _ = enqueue(
        "states_scripted", subject={"plan": ["retry_later", "transient", "ok"], "delay": 120}, max_attempts=2
    )
    start = timezone.now()
    drain()
    end = timezone.now()
    job.refresh_from_db()
    assert job.status == "queued"
    assert_between(job.next_run_at, start, end, delay=120)
    assert (job.attempt, job.max_attempts) == (0, 2)
    assert job.wait_reason == "rate limited"
    assert (job.error, job.error_code) == ("", "")
    assert drain() == 0  # not due yet

    make_due(job)
    drain()
    job.refresh_from_db()
    assert (job.status, job.attempt, job.error_code) == ("queued", 1, "transient")  # retried, not failed

    make_due(job)
    drain()
    job.refresh_from_db()
    assert (job.status, job.attempt) == ("done", 2)
    assert [recorded(job, f"attempt:{n}") for n in (1, 2)] == [2, 1]  # the retry_later entry was try 1 too


def test_retry_later_with_one_attempt_then_a_retryable_failure_fails_on_its_only_attempt():
    """max_attempts=1: retry_later hands the try back, so the failure after it is try 1 of 1 and final."""
    job, _ = enqueue(
        "states_scripted", subject={"plan": ["retry_later", "transient"], "delay": 30}, max_attempts=1
    )
    drain()
    job.refresh_from_db()
    assert (job.status, job.attempt, job.max_attempts) == ("queued", 0, 1)
    make_due(job)
    drain()
    job.refresh_from_db()
    assert (job.status, job.attempt, job.max_attempts) == ("failed", 1, 1)
    assert "temporary outage on entry 1" in job.error


# Errors: retryable with attempts left, otherwise failed ----------------------------------------------


def _run_due_and_reload(job):
    start = timezone.now()
    make_due(job)
    drain()
    end = timezone.now()
    job.refresh_from_db()
    return start, end


def test_retryable_error_queues_with_exponential_backoff_and_keeps_the_error():
    job, _ = enqueue("states_scripted", subject={"plan": ["transient", "transient", "ok"]})
    assert job.max_attempts == 3
    start, end = _run_due_and_reload(job)
    assert (job.status, job.attempt) == ("queued", 1)
    assert_between(job.next_run_at, start, end, delay=30)  # base 30 s * 2**0
    assert "temporary outage on entry 0" in job.error  # the error stays visible while it is retried
    assert job.error_code == "transient"
    assert job.ended_at is None

    start, end = _run_due_and_reload(job)
    assert (job.status, job.attempt) == ("queued", 2)
    assert_between(job.next_run_at, start, end, delay=60)  # 30 s * 2**1
    assert "temporary outage on entry 1" in job.error

    _run_due_and_reload(job)
    assert (job.status, job.attempt) == ("done", 3)
    assert (job.error, job.error_code) == ("", "")


@override_settings(DURAJOBS={"BACKOFF_BASE_SECONDS": 7, "BACKOFF_MAX_SECONDS": 10})
def test_backoff_settings_are_honoured():
    job, _ = enqueue("states_scripted", subject={"plan": ["transient"] * 3 + ["ok"]}, max_attempts=4)
    for delay in (7, 10, 10):  # min(10, 7 * 2**(attempt-1))
        start, end = _run_due_and_reload(job)
        assert job.status == "queued"
        assert_between(job.next_run_at, start, end, delay=delay)


@override_settings(DURAJOBS={"BACKOFF_BASE_SECONDS": 100, "BACKOFF_MAX_SECONDS": 1000})
def test_per_kind_backoff_wins_over_settings():
    job, _ = enqueue("states_scripted_kind_backoff", subject={"plan": ["transient"] * 3 + ["ok"]})
    for delay in (5, 8, 8):  # backoff_base=5, backoff_max=8
        start, end = _run_due_and_reload(job)
        assert job.status == "queued"
        assert_between(job.next_run_at, start, end, delay=delay)


def test_retryable_error_without_attempts_left_fails():
    job, _ = enqueue("states_scripted", subject={"plan": ["transient"]}, max_attempts=2)
    _run_due_and_reload(job)
    assert job.status == "queued"
    start, end = _run_due_and_reload(job)
    assert (job.status, job.attempt) == ("failed", 2)
    assert "temporary outage on entry 1" in job.error
    assert job.error_code == "failed"
    assert_between(job.ended_at, start, end)
    assert drain() == 0


def test_non_retryable_error_fails_at_once_with_redacted_error():
    job, _ = enqueue("states_scripted", subject={"plan": ["fatal", "ok"]})
    start, end = _run_due_and_reload(job)
    assert (job.status, job.attempt, job.max_attempts) == ("failed", 1, 3)
    assert "boom" in job.error and "hunter2" not in job.error
    assert job.error_code == "failed"
    assert_between(job.ended_at, start, end)


def test_error_code_of_a_coded_error_is_kept():
    job, _ = enqueue("states_scripted", subject={"plan": ["coded"]})
    _run_due_and_reload(job)
    assert (job.status, job.error_code) == ("failed", "states_custom")
    assert "a coded, permanent failure" in job.error


def test_job_error_with_retryable_true_is_retried_with_its_code():
    job, _ = enqueue("states_scripted", subject={"plan": ["retryable_joberror", "ok"]})
    _run_due_and_reload(job)
    assert (job.status, job.error_code) == ("queued", "states_flaky")
    _run_due_and_reload(job)
    assert job.status == "done"


@pytest.mark.parametrize(
    ("action", "status"),
    [("timeout", "queued"), ("transient", "queued"), ("fatal", "failed")],
)
def test_kind_retryable_predicate_and_retryable_attribute(action, status):
    """retryable=lambda exc: isinstance(exc, TimeoutError); `.retryable = True` is retryable as well."""
    job, _ = enqueue("states_scripted_predicate", subject={"plan": [action, "ok"]})
    _run_due_and_reload(job)
    assert job.status == status


# retry() -----------------------------------------------------------------------------------------


def test_retry_of_a_failed_job_allows_one_more_attempt_and_runs_it():
    job, _ = enqueue("states_scripted", subject={"plan": ["fatal", "ok"]}, max_attempts=1)
    drain()
    job.refresh_from_db()
    assert (job.status, job.attempt, job.max_attempts) == ("failed", 1, 1)
    start = timezone.now()
    job.retry(by="alice")
    assert (job.status, job.attempt, job.max_attempts) == ("queued", 1, 2)
    assert (job.error, job.error_code, job.ended_at) == ("", "", None)
    assert_between(job.next_run_at, start, timezone.now())
    assert drain() == 1
    job.refresh_from_db()
    assert (job.status, job.attempt, job.result) == ("done", 2, {"entry": 1})


def test_retry_of_a_needs_user_job_asks_again():
    job, _ = enqueue("states_ask")
    drain()
    job.refresh_from_db()
    job.retry()
    assert (job.status, job.attempt, job.max_attempts) == ("queued", 0, 1)
    assert (job.user_message, job.actions) == ("", None)
    drain()
    job.refresh_from_db()
    assert job.status == "needs_user"
    assert recorded(job, "step:check") == 1


# pause() / cancel() --------------------------------------------------------------------------------


def test_paused_queued_job_does_not_run_until_resumed():
    job, _ = enqueue("states_basic")
    job.pause()
    assert (job.status, job.next_run_at) == ("paused", None)
    assert drain() == 0
    job.resume()
    assert drain() == 1
    job.refresh_from_db()
    assert job.status == "done"


def test_paused_wait_with_an_expired_resume_at_does_not_wake():
    """The wait's resume_at passed before any worker woke it; the operator's pause wins."""
    past = timezone.now() - timedelta(minutes=1)
    job = JobFactory(kind="states_wait", status="awaiting_external", next_run_at=past, eta_at=past)
    job.pause()
    assert drain() == 0
    job.refresh_from_db()
    assert job.status == "paused"


def test_paused_timed_wait_does_not_wake():
    """Pausing a timed wait drops its wake-up: drain() leaves it paused."""
    job, _ = enqueue("states_wait", subject={"resume_in": 600})
    drain()
    job.refresh_from_db()
    assert job.next_run_at is not None
    job.pause()
    assert (job.status, job.next_run_at) == ("paused", None)
    assert drain() == 0
    job.refresh_from_db()
    assert job.status == "paused"


@pytest.mark.parametrize("status", ["paused", "needs_user"])
def test_a_job_that_starts_waiting_for_a_person_takes_no_run_at(status):
    """Paused and needs-user jobs wait for a person, never for a time: a run_at is refused."""
    with pytest.raises(JobError) as refused:
        enqueue("states_basic", initial_status=status, run_at=timezone.now() - timedelta(minutes=1))
    assert refused.value.code == "invalid_input"
    assert not Job.objects.exists()


def test_a_paused_job_with_an_expired_wake_time_does_not_wake():
    """Only the waits a run chooses wake by themselves; paused means held until an operator resumes."""
    job = JobFactory(status="paused", next_run_at=timezone.now() - timedelta(minutes=1))
    assert drain() == 0
    job.refresh_from_db()
    assert job.status == "paused"


def test_paused_timed_wait_shows_no_eta():
    """DESIGN 7: a waiting job's eta_at is its resume_at (None without one); a paused job has none."""
    job, _ = enqueue("states_wait", subject={"resume_in": 600})
    drain()
    job.refresh_from_db()
    job.pause()
    summary = job.describe()
    assert summary["eta_at"] is None
    assert summary["eta_unknown_reason"]


@pytest.mark.parametrize("how", ["queued", "waiting", "timed_wait_due"])
def test_cancel_of_a_queued_or_waiting_job_is_immediate(how):
    if how == "queued":
        job, _ = enqueue("states_basic")
    else:
        job, _ = enqueue("states_wait", subject={"resume_in": 600})
        drain()
    start = timezone.now()
    job.cancel()
    assert job.status == "cancelled"
    assert_between(job.ended_at, start, timezone.now())
    if how == "timed_wait_due":
        make_due(job)
    assert drain() == 0
    job.refresh_from_db()
    assert job.status == "cancelled"


def test_cancel_requested_inside_a_step_stops_at_the_next_step_boundary():
    job, _ = enqueue("states_cancel_at_boundary")
    assert drain() == 1
    job.refresh_from_db()
    assert job.status == "cancelled"
    assert (recorded(job, "step:first"), recorded(job, "step:second"), recorded(job, "step:third")) == (
        1,
        0,
        0,
    )
    assert steps_of(job) == [("first", "done"), ("second", "pending"), ("third", "pending")]
    assert job.cancel_requested is False
    assert job.ended_at is not None and job.result is None


def test_cancel_requested_is_seen_at_check_cancel():
    job, _ = enqueue("states_cancel_at_check")
    drain()
    job.refresh_from_db()
    assert job.status == "cancelled"
    assert (recorded(job, "before_check"), recorded(job, "after_check")) == (1, 0)


@pytest.mark.parametrize("then", ["wait", "needs_user", "retry_later"])
def test_cancel_requested_before_a_wait_outside_a_step_ends_cancelled(then):
    """The operator was told the job stops at its next check; parking it instead breaks that promise."""
    job, _ = enqueue("states_cancel_then_wait", subject={"then": then})
    drain()
    job.refresh_from_db()
    assert (job.status, job.cancel_requested) == ("cancelled", False)
    assert recorded(job, "step:second") == 0


def test_retry_after_a_failure_with_a_pending_cancel_request_runs_the_job():
    job, _ = enqueue("states_cancel_then_wait", subject={"then": "fail_once"})
    drain()
    job.refresh_from_db()
    assert job.status == "failed"
    job.retry()
    drain()
    job.refresh_from_db()
    assert (job.status, job.result, job.cancel_requested) == ("done", "finished", False)
    assert recorded(job, "step:second") == 1


def test_cancel_of_a_running_job_keeps_it_running_until_its_worker_checks():
    job = JobFactory(status="running", locked_by="w", lease_token="t", locked_at=timezone.now())
    job.cancel()
    assert (job.status, job.cancel_requested, job.locked_by, job.lease_token) == ("running", True, "w", "t")
    assert job.ended_at is None


# revert() ------------------------------------------------------------------------------------------


def test_revert_of_a_done_job_runs_its_revert_with_its_own_checkpoints():
    job, _ = enqueue("states_basic")
    drain()
    job.revert()
    assert (job.status, job.phase) == ("reverting", "revert")
    with pytest.raises(JobError) as refused:
        job.cancel()  # reverting cannot be cancelled
    assert refused.value.code == "job_not_cancellable"

    start = timezone.now()
    assert drain() == 1
    job.refresh_from_db()
    assert job.status == "reverted"
    assert_between(job.ended_at, start, timezone.now())
    assert recorded(job, "revert:reverting=True") == 1
    assert steps_of(job, "revert") == [("undo_second", "done"), ("undo_first", "done")]
    assert steps_of(job, "run") == [("first", "done"), ("second", "done")]
    assert (recorded(job, "step:first"), recorded(job, "step:second")) == (1, 1)  # the run is not replayed
    assert drain() == 0


@pytest.mark.parametrize("asks", [False, True], ids=["wait_external", "needs_user"])
def test_a_revert_that_tries_to_wait_or_ask_fails_and_says_why(asks):
    """A revert has no waiting state of its own (its resume would run the job's run): it fails and
    can be reverted again."""
    job, _ = enqueue("states_revert_waits", subject={"asks": asks})
    drain()
    job.revert()
    drain()
    job.refresh_from_db()
    assert (job.status, job.phase, job.error_code) == ("failed", "revert", "invalid_input")
    assert job.error.startswith("A revert cannot wait")
    assert job.revert().status == "reverting"


def test_revert_of_a_failed_job():
    job = JobFactory(status="failed", error="boom", step_states={"first": "done", "second": "failed"})
    job.revert()
    drain()
    job.refresh_from_db()
    assert (job.status, job.error) == ("reverted", "")
    assert steps_of(job, "revert") == [("undo_second", "done"), ("undo_first", "done")]


def test_revert_of_a_needs_user_job():
    job, _ = enqueue("states_ask")
    drain()
    job.revert()
    assert (job.user_message, job.actions) == ("", None)
    drain()
    job.refresh_from_db()
    assert job.status == "reverted"
    assert recorded(job, "step:undo_check") == 1


def test_failed_revert_fails_the_job_and_a_second_revert_skips_finished_revert_steps():
    job, _ = enqueue("states_revert_fails_once")
    drain()
    job.revert()
    drain()
    job.refresh_from_db()
    assert (job.status, job.phase) == ("failed", "revert")
    assert "the old release is gone" in job.error
    assert job.error_code == "revert_failed"
    assert steps_of(job, "revert") == [("undo_a", "done"), ("undo_b", "failed")]

    job.revert()  # a job whose revert failed may be reverted again
    assert job.status == "reverting"
    drain()
    job.refresh_from_db()
    assert job.status == "reverted"
    assert (recorded(job, "step:undo_a"), recorded(job, "step:undo_b")) == (1, 2)
    assert steps_of(job, "revert") == [("undo_a", "done"), ("undo_b", "done")]


def test_retry_of_a_failed_revert_runs_the_revert_again():
    job, _ = enqueue("states_revert_fails_once")
    drain()
    job.revert()
    drain()
    job.retry()
    assert (job.status, job.phase, job.error) == ("reverting", "revert", "")
    drain()
    job.refresh_from_db()
    assert job.status == "reverted"
    assert recorded(job, "step:work") == 1


def test_same_step_id_in_run_and_revert_are_separate_checkpoints():
    """Inside revert, ctx.step never returns the run's result for the same step id."""
    job, _ = enqueue("states_same_step_id")
    drain()
    job.refresh_from_db()
    assert job.result == "from-run"
    job.revert()
    drain()
    job.refresh_from_db()
    assert job.status == "reverted"
    assert recorded(job, "revert-saw:from-revert") == 1
    rows = sorted(JobStep.objects.filter(job=job).values_list("phase", "step_id", "result"))
    assert rows == [("revert", "shared", "from-revert"), ("run", "shared", "from-run")]


# Steps -----------------------------------------------------------------------------------------------


def test_finished_steps_never_run_again_across_re_entries():
    job, _ = enqueue("states_wait", subject={"waits": 3, "resume_in": -1})
    assert drain() == 4
    job.refresh_from_db()
    assert job.status == "done"
    assert (recorded(job, "entry"), recorded(job, "step:prepare"), recorded(job, "step:finish")) == (4, 1, 1)


def test_undeclared_steps_are_appended_in_the_order_met():
    job, _ = enqueue("states_undeclared")
    assert steps_of(job) == [("declared", "pending")]
    drain()
    rows = list(
        JobStep.objects.filter(job=job, phase="run")
        .order_by("position")
        .values_list("position", "step_id", "title")
    )
    # A step met without a title is named after its id, readably (never a bare id on a screen).
    assert rows == [(0, "declared", "Declared"), (1, "extra_one", "Extra one"), (2, "extra_two", "Extra two")]
    assert [state for _, state in steps_of(job)] == ["done", "done", "done"]


# job_changed ------------------------------------------------------------------------------------------


@pytest.fixture
def changes():
    """(job id, previous_status, status, the sent job's status) for every job_changed sent."""
    seen = []

    def receiver(sender, job, previous_status, status, **kwargs):
        seen.append((job.pk, previous_status, status, job.status))

    job_changed.connect(receiver, sender=Job, weak=False)
    yield seen
    job_changed.disconnect(receiver, sender=Job)


def transitions(seen, job):
    return [(previous, status) for pk, previous, status, _ in seen if pk == job.pk]


@pytest.mark.django_db(transaction=True)
def test_job_changed_is_sent_after_commit(changes):
    with transaction.atomic():
        job, _ = enqueue("states_basic")
        job.pause()
        assert changes == []
    assert transitions(changes, job) == [(None, "queued"), ("queued", "paused")]


@pytest.mark.django_db(transaction=True)
def test_job_changed_is_not_sent_for_a_rolled_back_change(changes):
    with pytest.raises(RuntimeError), transaction.atomic():
        enqueue("states_basic")
        raise RuntimeError("roll back")
    assert changes == []
    assert not Job.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_job_changed_on_every_status_change_of_a_run(changes):
    job, _ = enqueue("states_ask")
    drain()
    job.resume(action="approve")
    drain()
    assert transitions(changes, job) == [
        (None, "queued"),
        ("queued", "running"),
        ("running", "needs_user"),
        ("needs_user", "queued"),
        ("queued", "running"),
        ("running", "done"),
    ]


@pytest.mark.django_db(transaction=True)
def test_job_changed_on_operations_and_reverts(changes):
    job, _ = enqueue("states_basic")
    job.pause()
    job.resume()
    drain()
    job.revert()
    drain()
    other, _ = enqueue("states_wait")
    drain()
    other.cancel()
    assert transitions(changes, job) == [
        (None, "queued"),
        ("queued", "paused"),
        ("paused", "queued"),
        ("queued", "running"),
        ("running", "done"),
        ("done", "reverting"),
        ("reverting", "reverted"),
    ]
    assert transitions(changes, other) == [
        (None, "queued"),
        ("queued", "running"),
        ("running", "awaiting_external"),
        ("awaiting_external", "cancelled"),
    ]


@pytest.mark.django_db(transaction=True)
def test_job_changed_on_retryable_failure_and_retry(changes):
    job, _ = enqueue("states_scripted", subject={"plan": ["transient", "fatal", "ok"]}, max_attempts=2)
    drain()
    make_due(job)
    drain()
    job.retry()
    assert transitions(changes, job) == [
        (None, "queued"),
        ("queued", "running"),
        ("running", "queued"),
        ("queued", "running"),
        ("running", "failed"),
        ("failed", "queued"),
    ]


@pytest.mark.django_db(transaction=True)
def test_job_changed_on_update_has_previous_equal_to_status(changes):
    job, _ = enqueue("states_basic")
    changes.clear()
    job.update(progress=30, label="Deploy example.com")
    assert transitions(changes, job) == [("queued", "queued")]
    assert job.status == "queued"


@pytest.mark.django_db(transaction=True)
def test_job_changed_not_sent_for_steps_log_progress_or_eta(changes):
    job, _ = enqueue("states_busy", subject={"lines": 3})
    changes.clear()
    drain()
    assert transitions(changes, job) == [("queued", "running"), ("running", "done")]
    assert recorded(job, "step:work") == 1
    assert JobLog.objects.filter(job=job, line__startswith="line ").count() == 3


@pytest.mark.django_db(transaction=True)
def test_a_failing_receiver_is_logged_and_breaks_nothing(changes, caplog):
    def broken(sender, **kwargs):
        raise RuntimeError("receiver bug")

    job_changed.connect(broken, sender=Job, weak=False)
    try:
        with caplog.at_level(logging.ERROR, logger="django_durajobs"):
            job, _ = enqueue("states_basic")
            drain()
    finally:
        job_changed.disconnect(broken, sender=Job)
    job.refresh_from_db()
    assert job.status == "done"
    assert transitions(changes, job) == [(None, "queued"), ("queued", "running"), ("running", "done")]
    assert any("receiver bug" in str(record.exc_info[1]) for record in caplog.records if record.exc_info)


# The factories build rows the engine treats like its own ------------------------------------------------


def test_factory_built_jobs_are_taken_up_by_the_engine_like_real_ones():
    """A queued one runs, a pending revert is reverted, a running one (leased) is left to its worker."""
    queued = JobFactory()
    reverting = JobFactory(status="reverting", step_states={"first": "done", "second": "done"})
    running = JobFactory(status="running", locked_at=timezone.now())
    assert drain() == 2
    for job in (queued, reverting, running):
        job.refresh_from_db()
    assert (queued.status, queued.attempt, queued.result) == (
        "done",
        1,
        {"first": {"made": ["a", 1]}, "second": 2},
    )
    assert reverting.status == "reverted"
    assert steps_of(reverting, "revert") == [("undo_second", "done"), ("undo_first", "done")]
    assert running.status == "running"
