"""Job kinds for the timeout and deadline tests (tests/test_deadlines.py).

A stuck step sleeps ``subject["sleep"]`` seconds, or less if the test lets it go first (the job's
go file, ``tests.testapp.gates.go_file``), and then leaves a *late* marker file under
``subject["dir"]`` (a file, not a row: the test reads it whatever became of the job), so a test
knows when the abandoned thread came back and tried to checkpoint.
"""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

from django_durajobs import job
from tests.testapp.gates import go_file
from tests.testapp.models import SideEffect


def late_marker(directory: Path | str, job_id: int) -> Path:
    return Path(directory) / f"{job_id}.late"


def _sleep_then_mark(job) -> str:
    go = go_file(job.subject["dir"], job.pk)
    until = time.monotonic() + job.subject["sleep"]
    while time.monotonic() < until and not go.exists():
        time.sleep(0.02)
    late_marker(job.subject["dir"], job.pk).touch()
    return "finished late"


@job("deadlines_stuck_step", steps=["before", "stuck", "after"])
def deadlines_stuck_step(job, ctx):
    ctx.step("before", lambda: "before")
    ctx.step("stuck", lambda: _sleep_then_mark(job), timeout=job.subject.get("step_timeout"))
    return ctx.step("after", lambda: "after")


@job("deadlines_stuck_outside_steps", steps=["first", "second"])
def deadlines_stuck_outside_steps(job, ctx):
    """Stuck outside any step: before the first (``subject["stuck"] == "before"``) or between the two."""
    if job.subject["stuck"] == "before":
        _sleep_then_mark(job)
    first = ctx.step("first", lambda: "first")
    if job.subject["stuck"] == "between":
        _sleep_then_mark(job)
    return [first, ctx.step("second", lambda: "second")]


@job("deadlines_quick")
def deadlines_quick(job, ctx):
    return ctx.step("only", lambda: "quick")


@job("deadlines_two_steps", steps=["first", "second"])
def deadlines_two_steps(job, ctx):
    """Each step records that it ran; ``subject["sleep"]`` seconds pass inside the first step or
    between the two (``subject["slow"]``: ``"first"`` or ``"between"``)."""

    def record(step: str) -> str:
        SideEffect.objects.create(name=f"{job.pk}:{step}")
        if job.subject["slow"] == step:
            time.sleep(job.subject["sleep"])
        return step

    first = ctx.step("first", lambda: record("first"))
    if job.subject["slow"] == "between":
        time.sleep(job.subject["sleep"])
    return [first, ctx.step("second", lambda: record("second"))]


@job(
    "deadlines_retried_timeout",
    timeout=0.2,
    max_attempts=2,
    retryable=lambda exc: isinstance(exc, TimeoutError),
    backoff_base=0,
)
def deadlines_retried_timeout(job, ctx):
    ctx.step("slow", lambda: time.sleep(0.4))
    return ctx.step("never", lambda: "unreachable")


@job("deadlines_question")
def deadlines_question(job, ctx):
    """Asks once, with a deadline of ``subject["deadline_seconds"]`` and ``subject["on_deadline"]``."""
    if ctx.resume_action is None:
        ctx.needs_user(
            "Restore the backup over the live database?",
            actions=[{"id": "restore", "label": "Restore"}, {"id": "skip", "label": "Skip"}],
            deadline=timedelta(seconds=job.subject["deadline_seconds"]),
            on_deadline=job.subject["on_deadline"],
        )
    return {"chose": ctx.resume_action}
