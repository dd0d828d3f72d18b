"""Kinds for tests/integration/test_limits.py and tests/e2e/test_lifecycle.py: runs that send more
than the limits allow, a run that logs a lot, and a step that outlives its lease under ``drain()``.
"""

from __future__ import annotations

import time

from django_durajobs import JobLog, job
from tests.testapp.models import SideEffect


def effect_name(job_id: int, what: str) -> str:
    return f"limits:{job_id}:{what}"


@job("limits_big_step_result", steps=[("produce", "Produce"), ("after", "After")])
def limits_big_step_result(job, ctx):
    ctx.step("produce", lambda: "x" * job.subject["chars"])
    ctx.step("after", lambda: SideEffect.objects.create(name=effect_name(job.pk, "after")) and None)


@job("limits_big_run_result")
def limits_big_run_result(job, ctx):
    return {"blob": "x" * job.subject["chars"]}


@job("limits_many_steps")
def limits_many_steps(job, ctx):
    for number in range(job.subject["steps"]):
        ctx.step(f"step-{number}", lambda number=number: number)


@job("limits_chatty", steps=[("count", "Count the log")])
def limits_chatty(job, ctx):
    """Logs ``subject["lines"]`` lines, then returns how many the job holds while it still runs."""
    for number in range(job.subject["lines"]):
        ctx.log(f"line {number}")
    return ctx.step("count", lambda: JobLog.objects.filter(job_id=job.pk).count())


@job("limits_slow_step", steps=[("slow", "Slow"), ("after", "After")])
def limits_slow_step(job, ctx):
    def slow():
        SideEffect.objects.create(name=effect_name(job.pk, "slow"))
        time.sleep(job.subject["seconds"])

    ctx.step("slow", slow)
    ctx.step("after", lambda: SideEffect.objects.create(name=effect_name(job.pk, "after")) and None)
