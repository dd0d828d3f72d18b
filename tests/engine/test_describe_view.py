"""``describe()`` as a function of what was read (``describe_view`` of a ``JobView``), on jobs,
steps, log lines and children built by hand and never saved: what a screen shows follows from
those values alone. No database: a query here fails the test."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
from django.test import override_settings

from django_durajobs.engine.describe import describe_view, family_summary, live_summary_view
from django_durajobs.models import Job, JobLog, JobStep
from django_durajobs.status import current_position
from django_durajobs.store import JobView, LiveView

DATABASE_NOW = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
SECRET = "k-123456"


def job(**fields) -> Job:
    return Job(pk=fields.pop("pk", 7), kind=fields.pop("kind", "states_deploy"), **fields)


def steps(*states: str, phase: str = "run", first: int = 0) -> list[JobStep]:
    return [
        JobStep(phase=phase, position=first + n, step_id=f"{phase}{n}", title=f"Step {n}", state=state)
        for n, state in enumerate(states)
    ]


def view(the_job: Job, **loaded) -> dict:
    values = {
        "steps": (),
        "log": (),
        "children": (),
        "database_now": DATABASE_NOW,
        "now": DATABASE_NOW,
        "held_back": None,
        "version_unserved": False,
        **loaded,
    }
    values["steps"] = tuple(values["steps"])
    values["children"] = tuple(values["children"])
    return describe_view(JobView(job=the_job, **values))


# What may be done: the transitions table, the kind's revert ------------------------------------

# status -> (can_cancel, can_retry, can_resume, can_pause, can_revert) of a kind with a revert
CAN = {
    "queued": (True, False, False, True, False),
    "running": (True, False, False, True, False),
    "awaiting_external": (True, False, True, True, False),
    "needs_user": (True, True, True, False, True),
    "paused": (True, False, True, False, False),
    "failed": (False, True, False, False, True),
    "done": (False, False, False, False, True),
    "cancelled": (False, False, False, False, False),
}


@pytest.mark.parametrize("status", CAN)
def test_what_may_be_done_follows_the_status(status):
    shown = view(job(status=status))

    flags = ("can_cancel", "can_retry", "can_resume", "can_pause", "can_revert")
    assert tuple(shown[flag] for flag in flags) == CAN[status]
    assert shown["terminal"] is (status in ("failed", "done", "cancelled"))


def test_a_kind_without_a_revert_cannot_be_reverted():
    assert view(job(kind="states_norevert", status="done"))["can_revert"] is False


def test_a_failed_revert_may_be_retried_but_not_cancelled():
    shown = view(job(status="failed", phase="revert"))
    assert (shown["can_retry"], shown["can_revert"], shown["can_cancel"]) == (True, True, False)


# Steps and progress --------------------------------------------------------------------------------


def test_the_current_step_follows_the_done_ones_and_comes_before_the_next():
    shown = view(job(status="running"), steps=steps("done", "running", "pending"))

    assert shown["current_step"]["id"] == "run1"
    assert shown["current_step"]["state"] == "running"
    assert [step["id"] for step in shown["completed_steps"]] == ["run0"]
    assert shown["next_step"]["id"] == "run2"
    assert shown["progress"] == 33


def test_a_reverting_job_counts_its_revert_steps_and_lists_its_run_steps_first():
    read = [*steps("done", "pending", phase="revert"), *steps("done", "done", "done")]  # the database's order

    shown = view(job(status="reverting", phase="revert"), steps=read)

    assert [step["id"] for step in shown["steps"]] == ["run0", "run1", "run2", "revert0", "revert1"]
    assert shown["current_step"]["id"] == "revert1"
    assert shown["next_step"] is None
    assert shown["progress"] == 50


def test_a_job_without_steps_has_no_current_step():
    shown = view(job(status="queued"))
    assert (shown["current_step"], shown["next_step"], shown["steps"]) == (None, None, [])
    assert shown["progress"] == 0


def test_a_failed_step_reads_as_retrying_while_its_job_waits_for_another_try():
    shown = view(job(status="queued", attempt=1), steps=steps("done", "failed"))
    assert shown["current_step"]["state"] == "retrying"


def test_a_wait_the_job_no_longer_has_reads_as_pending():
    shown = view(job(status="queued"), steps=steps("waiting"))
    assert shown["current_step"]["state"] == "pending"


# Waits and clocks ----------------------------------------------------------------------------------


def test_a_waiting_job_says_why():
    shown = view(job(status="awaiting_external", wait_reason="DNS record not visible"))
    assert shown["wait_reason"] == "DNS record not visible"
    assert shown["eta_unknown_reason"] == "Depends on an outside event: DNS record not visible"


def test_a_limit_that_holds_the_job_back_is_its_wait_reason():
    shown = view(job(status="queued"), held_back="Held back: 2 of 2 running")
    assert shown["wait_reason"] == "Held back: 2 of 2 running"
    assert view(job(status="queued", wait_reason="its own"), held_back="a limit")["wait_reason"] == "its own"


def test_a_scheduled_run_is_worded_from_the_applications_clock():
    later = DATABASE_NOW + timedelta(minutes=5)

    shown = view(job(status="queued", next_run_at=later), now=DATABASE_NOW - timedelta(hours=1))

    assert shown["eta_unknown_reason"].startswith("Scheduled to run again in 1 h (")


@override_settings(DURAJOBS={"LEASE_SECONDS": 60})
def test_a_lease_is_judged_by_the_databases_clock():
    held = job(status="running", locked_by="w1", locked_at=DATABASE_NOW - timedelta(seconds=61))

    assert view(held)["stale"] is True
    assert view(held, database_now=DATABASE_NOW - timedelta(seconds=10), now=DATABASE_NOW)["stale"] is False
    assert view(job(status="paused", locked_at=DATABASE_NOW - timedelta(days=1)))["stale"] is False


def test_an_unserved_version_is_warned_of_until_the_job_ends():
    waiting = job(status="queued", kind_version="v2")

    assert view(waiting, version_unserved=True)["version_warning"] == (
        "No running worker has version v2 of kind states_deploy."
    )
    assert view(waiting)["version_warning"] is None
    assert view(job(status="done", kind_version="v2"), version_unserved=True)["version_warning"] is None


# Secrets -------------------------------------------------------------------------------------------


def test_secrets_in_results_actions_and_childrens_subjects_are_masked():
    step = JobStep(phase="run", position=0, step_id="build", title="Build", state="done")
    step.result = {"path": "/srv/build", "api_key": SECRET}
    asking = job(
        status="needs_user",
        result={"token": SECRET},
        actions=[{"id": "go", "label": "Go", "password": SECRET}],
    )
    child = job(pk=8, status="done", subject={"host": "a", "secret": SECRET})

    shown = view(asking, steps=[step], children=[child])

    assert SECRET not in repr(shown)
    assert shown["steps"][0]["result"]["path"] == "/srv/build"
    assert shown["children"]["children"][0]["subject"]["host"] == "a"


# Log and children ----------------------------------------------------------------------------------


def test_the_log_shows_the_lines_read_in_their_order():
    lines = [JobLog(line=f"line {n}", at=DATABASE_NOW + timedelta(seconds=n)) for n in range(3)]

    shown = view(job(), log=lines)

    assert shown["log"] == [
        {"at": (DATABASE_NOW + timedelta(seconds=n)).isoformat(), "line": f"line {n}"} for n in range(3)
    ]


def test_children_are_shown_only_when_there_are_some():
    children = [
        job(pk=8, status="done", label="a"),
        job(pk=9, status="failed", label="b", error="unreachable"),
        job(pk=10, status="queued", label="c"),
    ]

    assert view(job())["children"] is None
    shown = view(job(status="awaiting_external"), children=children)["children"]

    assert shown == family_summary(children)
    assert (shown["total"], shown["by_status"], shown["overall"]) == (
        3,
        {"done": 1, "failed": 1, "queued": 1},
        "partial",
    )
    assert [(child["id"], child["error"]) for child in shown["children"]] == [
        (8, None),
        (9, "unreachable"),
        (10, None),
    ]


@pytest.mark.parametrize(
    ("statuses", "overall"),
    [
        ((), "none"),
        (("done", "done"), "done"),
        (("done", "failed"), "partial"),
        (("failed", "cancelled"), "failed"),
    ],
)
def test_a_family_that_partly_failed_never_reads_as_done(statuses, overall):
    children = [job(pk=10 + n, status=status) for n, status in enumerate(statuses)]
    assert family_summary(children)["overall"] == overall


# The current step, one rule for describe() and live_summary() ----------------------------------


@pytest.mark.parametrize(
    ("first_by_state", "current"),
    [
        ({"done": 0, "failed": 3, "running": 5, "pending": 4}, 3),  # a stopped step before a later one
        ({"done": 0, "pending": 2}, 2),  # nothing started: the first still to run
        ({"done": 0, "needs_user": 6, "pending": 1}, 6),  # one in progress before any pending one
        ({"done": 0, "skipped": 1}, None),  # every step over
    ],
)
def test_the_current_step_is_the_first_started_one_else_the_first_pending(first_by_state, current):
    assert current_position(first_by_state) == current
    rows = sorted(
        (
            JobStep(phase="run", position=p, step_id=f"s{p}", title=f"S{p}", state=s)
            for s, p in first_by_state.items()
        ),
        key=lambda step: step.position,
    )
    shown = view(job(status="running", phase="run"), steps=rows)["current_step"]
    assert (shown and shown["id"]) == (None if current is None else f"s{current}")


def test_live_summary_view_shows_the_counts_and_the_steps_it_was_given():
    done, current, following = steps("done", "running", "pending")
    children = Counter({"done": 2, "failed": 1})
    live = live_summary_view(
        LiveView(
            job=job(status="running", phase="run"),
            steps_total=40,
            completed=38,
            current=current,
            following=following,
            recent=(done,),
            children=children,
            database_now=DATABASE_NOW,
            now=DATABASE_NOW,
            held_back=None,
            version_unserved=False,
        )
    )
    assert (live["current_step"]["id"], live["next_step"]["id"]) == ("run1", "run2")
    assert [step["id"] for step in live["completed_steps"]] == ["run0"]
    assert (live["completed_count"], live["progress"]) == (38, 95)
    assert live["children"] == {"total": 3, "by_status": {"done": 2, "failed": 1}, "overall": "partial"}
