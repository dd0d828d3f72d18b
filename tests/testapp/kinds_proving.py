"""Job kinds of the proving ground (tests/proving/): each records what it really does in the
effects ledger (tests/proving/ledger.py), so the oracle judges a run by the jobs' own account.

- ``prove_steps``: ``STEPS`` steps of a few milliseconds; the last is ``atomic=True`` and writes a
  ``SideEffect`` named ``"atomic:<job id>"`` (exactly one must survive). Its jobs may carry a
  ``concurrency_key`` (``subject["key"]``, at most ``LIMIT`` running at once).
- ``prove_async``: the same steps, ``async def``.
- ``prove_retry``: fails its first try (retryable), then runs one step.
- ``prove_wait``: waits for the event ``subject["event"]``, then runs one step.

Each step returns the worker and the try that ran it, so the oracle can tell whose write the
stored checkpoint is. ``$DURAJOBS_PROVE_CRASH_AT`` makes the worker ``os._exit`` once per job at
one commit point (``tests/proving/crash_points.py``).
"""

from __future__ import annotations

import os
import random
import time
from functools import partial

from django_durajobs import job
from django_durajobs.signals import job_changed
from tests.proving import crash_points
from tests.proving.ledger import record
from tests.testapp.models import SideEffect

STEPS = ("fetch", "parse", "enrich", "store", "commit")
ATOMIC_KINDS = ("prove_steps", "prove_async")  # their last step is atomic
LIMIT = 2
STEP_SECONDS = (0.005, 0.03)


def _limit_key(subject):
    return subject.get("key")


def _work(job, ctx, step: str) -> dict:
    record("start", job.pk, step, job.attempt, ctx.worker_id)
    time.sleep(random.uniform(*STEP_SECONDS))
    crash_points.reached(crash_points.IN_STEP, job.pk)
    if step == STEPS[-1]:
        SideEffect.objects.create(name=f"atomic:{job.pk}")
    record("end", job.pk, step, job.attempt, ctx.worker_id)
    return {"worker": ctx.worker_id, "attempt": job.attempt}


def _run_steps(job, ctx) -> list[dict]:
    results = []
    for step in STEPS:
        results.append(ctx.step(step, partial(_work, job, ctx, step), atomic=step == STEPS[-1]))
        crash_points.reached(crash_points.AFTER_CHECKPOINT, job.pk)
    return results


@job(
    "prove_steps",
    title="Proving: five steps",
    steps=list(STEPS),
    concurrency_key=_limit_key,
    concurrency_limit=LIMIT,
)
def prove_steps(job, ctx):
    record("enter", job.pk, "", job.attempt, ctx.worker_id)
    try:
        return _run_steps(job, ctx)
    finally:
        record("leave", job.pk, "", job.attempt, ctx.worker_id)


@job("prove_async", title="Proving: five async steps", steps=list(STEPS))
async def prove_async(job, ctx):
    record("enter", job.pk, "", job.attempt, ctx.worker_id)
    try:
        return [
            await ctx.step(step, partial(_work, job, ctx, step), atomic=step == STEPS[-1]) for step in STEPS
        ]
    finally:
        record("leave", job.pk, "", job.attempt, ctx.worker_id)


class ProveFlake(Exception):
    """The first try of ``prove_retry`` fails with it; the kind retries it."""


def _fail_first_try(job, ctx) -> dict:
    if job.attempt == 1:
        raise ProveFlake("first try fails")
    return _work(job, ctx, "after")


@job(
    "prove_retry",
    title="Proving: fails once",
    max_attempts=3,
    retryable=lambda error: isinstance(error, ProveFlake),
    backoff_base=0.1,
    backoff_max=0.1,
)
def prove_retry(job, ctx):
    return ctx.step("after", partial(_fail_first_try, job, ctx))


@job("prove_wait", title="Proving: waits for an event", steps=["after"])
def prove_wait(job, ctx):
    payload = ctx.wait_for_event(job.subject["event"])
    crash_points.reached(crash_points.AFTER_EVENT, job.pk)
    return ctx.step("after", partial(_work, job, ctx, "after")), payload


if os.environ.get(crash_points.CRASH_ENV):
    job_changed.connect(crash_points.on_job_changed, dispatch_uid="proving-crash-points")
