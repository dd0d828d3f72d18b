"""describe(job): the screen summary of DESIGN.md sections 6 and 7, for a job in every state.

Jobs are built directly in each state with ``tests.factories``; the ``can_*`` flags are checked
against what the operations really allow on an identical fresh job.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest
from django.test import override_settings
from django.utils import timezone

import django_durajobs
from django_durajobs import Job, JobError, JobLog, JobStep, describe, drain, enqueue
from tests.factories import JobFactory, JobStepFactory

pytestmark = pytest.mark.django_db

DESIGN_KEYS = {
    "id", "kind", "label", "status", "progress", "attempt", "max_attempts", "next_run_at", "eta_at",
    "eta_unknown_reason", "created_at", "updated_at", "started_at", "ended_at", "current_step",
    "completed_steps", "next_step", "steps", "wait_reason", "user_message", "actions", "error",
    "error_code", "cancel_requested", "can_cancel", "can_retry", "can_resume", "can_revert", "terminal",
    "stale", "log", "children",
}  # fmt: skip
STEP_KEYS = {"id", "title", "state", "started_at", "ended_at", "detail", "error", "result"}
DATETIME_KEYS = ("next_run_at", "eta_at", "created_at", "updated_at", "started_at", "ended_at")
EXTERNAL_WAITS = ["awaiting_external", "awaiting_approval", "awaiting_payment", "not_ready", "needs_setup"]
TERMINAL = {"done", "failed", "cancelled", "reverted"}
ANY = object()

ALL_DONE = {"build": "done", "upload": "done", "switch": "done"}


def _with_revert_steps(job, states):
    for step_id, state in states:
        JobStepFactory(job=job, phase="revert", step_id=step_id, state=state)
    return job


# state name -> (how to build it, current step id, completed step ids, next step id)
STATES = {
    "queued": (lambda: JobFactory(kind="states_deploy"), "build", [], "upload"),
    "running": (
        lambda: JobFactory(
            kind="states_deploy", status="running", step_states={"build": "done", "upload": "running"}
        ),
        "upload",
        ["build"],
        "switch",
    ),
    **{
        status: (
            lambda status=status: JobFactory(
                kind="states_deploy", status=status, step_states={"build": "done", "upload": "waiting"}
            ),
            "upload",
            ["build"],
            "switch",
        )
        for status in EXTERNAL_WAITS
    },
    "needs_user": (
        lambda: JobFactory(
            kind="states_deploy", status="needs_user", step_states={"build": "done", "upload": "needs_user"}
        ),
        "upload",
        ["build"],
        "switch",
    ),
    "paused": (
        lambda: JobFactory(kind="states_deploy", status="paused", step_states={"build": "done"}),
        "upload",
        ["build"],
        "switch",
    ),
    "done": (
        lambda: JobFactory(kind="states_deploy", status="done", step_states=ALL_DONE),
        None,
        ["build", "upload", "switch"],
        None,
    ),
    "failed": (
        lambda: JobFactory(
            kind="states_deploy",
            status="failed",
            error="OSError: disk full",
            error_code="disk_full",
            step_states={"build": "done", "upload": "failed"},
        ),
        "upload",
        ["build"],
        "switch",
    ),
    "cancelled": (
        lambda: JobFactory(kind="states_deploy", status="cancelled", step_states={"build": "done"}),
        ANY,
        ["build"],
        ANY,
    ),
    # A revert shows its own steps (phase "revert"); they are created as the revert meets them.
    "reverting": (
        lambda: _with_revert_steps(
            JobFactory(kind="states_deploy", status="reverting", step_states=ALL_DONE),
            [("undo_switch", "done"), ("undo_upload", "running")],
        ),
        "undo_upload",
        ["undo_switch"],
        None,
    ),
    "reverted": (
        lambda: _with_revert_steps(
            JobFactory(kind="states_deploy", status="reverted", step_states=ALL_DONE),
            [("undo_switch", "done"), ("undo_upload", "done"), ("undo_build", "done")],
        ),
        None,
        ["undo_switch", "undo_upload", "undo_build"],
        None,
    ),
}


def _step_id(summary):
    return None if summary is None else summary["id"]


@pytest.mark.parametrize("state", sorted(STATES))
def test_describe_in_every_state(state):
    build, current, completed, following = STATES[state]
    job = build()
    summary = describe(job)

    assert DESIGN_KEYS <= set(summary)
    assert json.loads(json.dumps(summary)) == summary  # JSON-serialisable as it is
    assert summary["id"] == job.pk and summary["kind"] == "states_deploy" and summary["status"] == state
    assert summary["label"] == "States: deploy site"
    assert summary["terminal"] is (state in TERMINAL)
    # datetimes as ISO 8601 strings of the stored values
    for key in DATETIME_KEYS:
        stored = getattr(job, key)
        assert summary[key] == (stored.isoformat() if stored else None), key
        if summary[key] is not None:
            assert datetime.fromisoformat(summary[key]).tzinfo is not None
    # retry info
    assert (summary["attempt"], summary["max_attempts"]) == (job.attempt, job.max_attempts)
    # an ETA, or why there is none: never both missing
    assert (summary["eta_at"] is None) != (summary["eta_unknown_reason"] is None)
    assert summary["eta_unknown_reason"]
    # steps
    if current is not ANY:
        assert _step_id(summary["current_step"]) == current
    if following is not ANY:
        assert _step_id(summary["next_step"]) == following
    assert [step["id"] for step in summary["completed_steps"]] == completed
    assert all(step["state"] == "done" for step in summary["completed_steps"])
    for step in (
        summary["steps"] + summary["completed_steps"] + [summary["current_step"], summary["next_step"]]
    ):
        if step is not None:
            assert STEP_KEYS <= set(step)
    assert [step["id"] for step in summary["steps"]][:3] == ["build", "upload", "switch"]
    assert summary["children"] is None
    assert summary["stale"] is False


@pytest.mark.parametrize("state", sorted(STATES))
@pytest.mark.parametrize("op", ["cancel", "retry", "resume", "revert", "pause"])
def test_can_flags_match_what_the_operations_allow(state, op):
    """can_x is True iff calling x on an identical job succeeds."""
    build = STATES[state][0]
    flag = describe(build())[f"can_{op}"]
    fresh = build()
    # A question with offered answers is resumed with one of them.
    answer = {"action": fresh.actions[0]["id"]} if op == "resume" and fresh.actions else {}
    try:
        getattr(django_durajobs, op)(fresh, **answer)
    except JobError:
        allowed = False
    else:
        allowed = True
    assert flag is allowed


@pytest.mark.parametrize("status", ["done", "failed", "needs_user"])
def test_can_revert_is_false_for_a_kind_without_revert(status):
    job = JobFactory(kind="states_norevert", status=status)
    assert describe(job)["can_revert"] is False
    with pytest.raises(JobError):
        job.revert()


@pytest.mark.parametrize("status", EXTERNAL_WAITS)
def test_waiting_job_shows_its_reason_and_resume_at_as_eta(status):
    resume_at = timezone.now() + timedelta(minutes=10)
    job = JobFactory(status=status, wait_reason="Invoice 7 unpaid", next_run_at=resume_at, eta_at=resume_at)
    summary = describe(job.pk)
    assert summary["wait_reason"] == "Invoice 7 unpaid"
    assert summary["eta_at"] == summary["next_run_at"] == resume_at.isoformat()
    assert summary["eta_unknown_reason"] is None


def test_failed_job_shows_error_and_code():
    job = JobFactory(status="failed", error="OSError: disk full", error_code="disk_full")
    summary = job.describe()
    assert (summary["error"], summary["error_code"]) == ("OSError: disk full", "disk_full")
    assert summary["ended_at"] == job.ended_at.isoformat()


def test_scheduled_retry_shows_attempts_and_next_run():
    job, _ = enqueue("states_scripted", subject={"plan": ["transient", "ok"]})
    drain()
    summary = describe(job)
    job.refresh_from_db()
    assert (summary["status"], summary["attempt"], summary["max_attempts"]) == ("queued", 1, 3)
    assert summary["next_run_at"] == job.next_run_at.isoformat()
    assert "temporary outage" in summary["error"]
    assert summary["eta_unknown_reason"]  # scheduled in the future, no ETA reported


def test_needs_user_job_from_a_real_run():
    job, _ = enqueue("states_ask")
    drain()
    summary = describe(job)
    assert summary["status"] == "needs_user"
    assert summary["user_message"] == "Overwrite the existing site?"
    assert summary["actions"] == [
        {"id": "approve", "label": "approve"},
        {"id": "reject", "label": "Reject it"},
    ]
    assert summary["current_step"]["id"] == "apply"
    assert summary["current_step"]["state"] == "needs_user"
    assert summary["current_step"]["detail"] == "Overwrite the existing site?"
    assert [step["id"] for step in summary["completed_steps"]] == ["check"]
    assert (summary["can_resume"], summary["can_retry"], summary["can_revert"], summary["can_cancel"]) == (
        True,
        True,
        True,
        True,
    )


def test_done_job_from_a_real_run_shows_redacted_step_results():
    """Step results are stored intact (replay) but shown redacted."""
    job, _ = enqueue("states_deploy")
    drain()
    summary = describe(job)
    assert summary["status"] == "done" and summary["progress"] == 100
    build = summary["completed_steps"][0]
    assert build["id"] == "build" and build["title"] == "Build"
    assert build["result"]["path"] == "/srv/build"
    assert "k-123456" not in json.dumps(summary)
    assert JobStep.objects.get(job=job, step_id="build").result["api_key"] == "k-123456"


# stale -------------------------------------------------------------------------------------------------


def test_stale_when_a_running_jobs_lease_expired():
    old = timezone.now() - timedelta(seconds=90)
    assert describe(JobFactory(status="running", locked_at=old))["stale"] is True
    assert describe(JobFactory(status="running", locked_at=timezone.now()))["stale"] is False


def test_stale_follows_lease_seconds():
    job = JobFactory(status="running", locked_at=timezone.now() - timedelta(seconds=90))
    with override_settings(DURAJOBS={"LEASE_SECONDS": 120}):
        assert describe(job)["stale"] is False
    with override_settings(DURAJOBS={"LEASE_SECONDS": 30}):
        assert describe(job)["stale"] is True


@pytest.mark.parametrize("status", ["queued", "done", "failed", "awaiting_external"])
def test_not_running_is_never_stale(status):
    job = JobFactory(status=status, locked_at=timezone.now() - timedelta(hours=1))
    assert describe(job)["stale"] is False


# log -----------------------------------------------------------------------------------------------------


@override_settings(DURAJOBS={"LOG_LINES_KEPT": 5})
def test_log_shows_the_latest_lines_oldest_first():
    job, _ = enqueue("states_busy", subject={"lines": 8})
    drain()
    log = describe(job)["log"]
    assert [entry["line"] for entry in log] == ["line 4", "line 5", "line 6", "line 7", "Done."]
    assert all(datetime.fromisoformat(entry["at"]).tzinfo is not None for entry in log)
    assert JobLog.objects.filter(job=job).count() == 5  # only the latest are kept


def test_a_job_done_at_once_without_a_word_leaves_no_log_line():
    job, _ = enqueue("states_basic")
    drain()
    job.refresh_from_db()
    assert job.status == "done"
    assert describe(job)["log"] == []
    assert not JobLog.objects.filter(job=job).exists()


def test_done_ends_the_log_of_a_job_that_ran_before():
    job, _ = enqueue("states_scripted", subject={"plan": ["retry_later", "ok"], "delay": 0})
    drain()
    assert [entry["line"] for entry in describe(job)["log"]] == ["Runs again in 0 s: rate limited.", "Done."]


def test_log_is_capped_at_log_lines_kept_even_before_trimming():
    job = JobFactory()
    JobLog.objects.bulk_create(JobLog(job=job, line=f"entry {n}") for n in range(8))
    with override_settings(DURAJOBS={"LOG_LINES_KEPT": 3}):
        assert [entry["line"] for entry in describe(job)["log"]] == ["entry 5", "entry 6", "entry 7"]
    assert [entry["line"] for entry in describe(job)["log"]] == [f"entry {n}" for n in range(8)]


# children -------------------------------------------------------------------------------------------------


def test_children_summary_only_for_a_job_with_children():
    parent = JobFactory(kind="states_deploy", status="awaiting_external")
    assert describe(parent)["children"] is None
    first, _ = enqueue("states_basic", parent=parent, label="server a")
    second, _ = enqueue("states_basic", parent=parent.pk, label="server b")
    Job.objects.filter(pk=second.pk).update(status="failed", error="unreachable")
    children = describe(parent)["children"]
    assert children["total"] == 2
    assert children["by_status"] == {"queued": 1, "failed": 1}
    assert children["overall"] == "running"
    assert [(child["id"], child["label"], child["status"]) for child in children["children"]] == [
        (first.pk, "server a", "queued"),
        (second.pk, "server b", "failed"),
    ]
    assert describe(first)["children"] is None
