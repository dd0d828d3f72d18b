"""Job kinds for the runner's scenarios (tests/runner_scenarios.py), run on every store.

A test has something happen at a point of a run with ``AT[(job id, where)]``: an operator's
click between two steps, the clock moving on inside one, another worker taking the job over.
``RUNS`` counts how often each step's function ran, whatever store the run went through.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django_durajobs import EventTimeout, job
from django_durajobs.errors import JobTimeout

AT: dict[tuple[int, str], Callable[[], object]] = {}
RUNS: Counter[tuple[int, str]] = Counter()
#: Jobs whose timed wait finds what it waits for, and that need not run later.
READY: set[int] = set()
#: The context of each job's latest run, for a test that acts on the run as its worker would.
CONTEXTS: dict[int, Any] = {}


def at(job, where: str) -> None:
    """Do what the test asked to happen at ``where`` of this job's run (once)."""
    AT.pop((job.pk, where), lambda: None)()


def _step_work(job, ctx, step_id: str, value: int) -> int:
    """A step's work: counted, done at the point ``step_id``, and failing in the first
    ``subject["fail"][step_id]`` tries."""
    RUNS[job.pk, step_id] += 1
    at(job, step_id)
    if ctx.attempt <= job.subject.get("fail", {}).get(step_id, 0):
        raise ValueError(f"{step_id} broke in try {ctx.attempt}")
    return value


@job(
    "runner_steps",
    steps=[("first", "First"), ("second", "Second")],
    max_attempts=3,
    retryable=lambda exc: isinstance(exc, (ValueError, JobTimeout)),
    backoff_base=30,
    timeout=10,
)
def runner_steps(job, ctx):
    CONTEXTS[job.pk] = ctx
    first = ctx.step("first", lambda: _step_work(job, ctx, "first", 1))
    at(job, "between")
    second = ctx.step(
        "second", lambda: _step_work(job, ctx, "second", first + 1), timeout=job.subject.get("second_timeout")
    )
    return {"sum": first + second}


@runner_steps.revert
def runner_steps_revert(job, ctx):
    ctx.step("undo_second", lambda: _step_work(job, ctx, "undo_second", 2))
    ctx.step("undo_first", lambda: _step_work(job, ctx, "undo_first", 1))


@job("runner_waits", steps=[("before", "Before"), ("after", "After")])
def runner_waits(job, ctx):
    """Waits as ``subject["how"]`` says, after a first step, then finishes with what it got."""
    ctx.step("before", lambda: _step_work(job, ctx, "before", 1))
    how = job.subject["how"]
    if how == "external" and ctx.resume_data is None:
        ctx.wait_external("Waiting for the bank")
    if how == "timed" and job.pk not in READY:
        ctx.wait_external("Checking again in a minute", resume_at=timedelta(minutes=1))
    if how == "question" and not ctx.resume_action:
        ctx.needs_user("Refund the order?", actions=["refund", "keep"])
    got = ctx.resume_action or ctx.resume_data
    if how == "event":
        try:
            got = ctx.wait_for_event(job.subject["event"], timeout=job.subject.get("timeout"))
        except EventTimeout:
            got = "timed out"
    if how == "later" and job.pk not in READY:
        ctx.retry_later(90, "the bank is closed")
    if how == "children":
        ctx.enqueue_child("runner_steps", "only")
        got = ctx.wait_for_children()["overall"]
    return ctx.step("after", lambda: got)
