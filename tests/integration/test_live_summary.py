"""The summary a refreshing screen shows (``engine.describe.live_summary``) says what ``describe()``
says of the job, its current and next step and its latest completed ones, in a few queries
however big the job; and ``describe()`` itself needs no more queries for a big job than a small one.
"""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_durajobs import JobLog, JobStep, describe
from django_durajobs.engine.describe import live_summary
from django_durajobs.store.viewing import RECENT_STEPS
from tests.factories import JobFactory, JobStepFactory

pytestmark = pytest.mark.django_db

# job status, job phase, and its steps as (phase, state) in position order
CASES = {
    "no_steps": ("queued", "run", []),
    "first_pending": ("queued", "run", [("run", "pending")] * 3),
    "running_in_the_middle": (
        "running",
        "run",
        [("run", "done")] * 5 + [("run", "running"), ("run", "pending")],
    ),
    "skipped_step_stays_pending": (
        "running",
        "run",
        [("run", "done"), ("run", "pending"), ("run", "done"), ("run", "running")],
    ),
    "waiting": ("awaiting_external", "run", [("run", "done"), ("run", "waiting"), ("run", "pending")]),
    "asking": ("needs_user", "run", [("run", "done"), ("run", "needs_user")]),
    "failed_then_pending": ("failed", "run", [("run", "done"), ("run", "failed"), ("run", "pending")]),
    "all_done": ("done", "run", [("run", "done")] * 4),
    "reverting": (
        "reverting",
        "revert",
        [("run", "done"), ("run", "done"), ("revert", "done"), ("revert", "running"), ("revert", "pending")],
    ),
}


def job_with(status: str, phase: str, steps: list[tuple[str, str]]):
    job = JobFactory(status=status, phase=phase, declared_steps=False)
    for number, (step_phase, state) in enumerate(steps):
        JobStepFactory(job=job, phase=step_phase, step_id=f"s{number}", state=state, result={"n": number})
    return job


@pytest.mark.parametrize("case", CASES)
def test_live_summary_says_what_describe_says(case):
    job = job_with(*CASES[case])
    full, live = describe(job), live_summary(job)

    shared = set(full) - {"steps", "completed_steps", "log", "children", "result"}
    assert {key: live[key] for key in shared} == {key: full[key] for key in shared}
    assert live["completed_count"] == len(full["completed_steps"])
    assert live["completed_steps"] == full["completed_steps"][-RECENT_STEPS:]


def test_live_summary_counts_children_by_status():
    parent = JobFactory(status="awaiting_external")
    for status in ("done", "done", "failed", "running"):
        JobFactory(parent=parent, status=status)

    children = live_summary(parent)["children"]

    assert children == {
        "total": 4,
        "by_status": {"done": 2, "failed": 1, "running": 1},
        "overall": describe(parent)["children"]["overall"],
    }
    assert live_summary(JobFactory())["children"] is None


def big(steps: int, lines: int, children: int):
    job = JobFactory(status="running", declared_steps=False)
    JobStep.objects.bulk_create(
        JobStep(
            job=job,
            position=n,
            step_id=f"s{n}",
            title=f"Step {n}",
            state="done" if n < steps - 1 else "running",
        )
        for n in range(steps)
    )
    JobLog.objects.bulk_create(JobLog(job=job, line=f"line {n}") for n in range(lines))
    for _ in range(children):
        JobFactory(parent=job, status="done", declared_steps=False)
    return job


def queries(function, job) -> int:
    with CaptureQueriesContext(connection) as captured:
        function(job)
    return len(captured)


@pytest.mark.parametrize("function", [describe, live_summary], ids=["describe", "live_summary"])
def test_queries_do_not_grow_with_the_job(function):
    small, large = big(steps=3, lines=3, children=2), big(steps=600, lines=600, children=60)

    assert queries(function, large) == queries(function, small)
    assert queries(live_summary, large) <= 6
