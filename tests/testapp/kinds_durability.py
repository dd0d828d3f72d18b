"""Job kinds for the durability tests (tests/integration/test_durability.py and
tests/e2e/test_killed_workers.py).

Every step writes a ``SideEffect`` row named ``"<job id>:<step>"``, so a test counts how often a
step really ran, across processes. A step can also be made to hold still until the test has
killed its worker:

- ``subject["block_at"]`` names the step that, after its effect, holds at the gate of that
  name (``tests/testapp/gates.py``, under ``subject["dir"]``).
- ``STEP_HOOKS[(job id, step)]`` is called (in-process tests only) after the step's effect: it
  can take the job over from under its worker, or raise ``WorkerCrash`` to stop the worker the
  way a dying process does — with no outcome recorded.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections import Counter
from collections.abc import Callable

from django_durajobs import job
from tests.testapp.gates import hold_until_go
from tests.testapp.models import SideEffect

FIVE_STEPS = ("first", "second", "middle", "fourth", "last")
ATOMIC_STEPS = ("prepare", "write", "publish")
THREE_STEPS = ("one", "two", "three")
UNDO_STEPS = ("undo_three", "undo_two", "undo_one")


STEP_HOOKS: dict[tuple[int, str], Callable[[], None]] = {}


class WorkerCrash(asyncio.CancelledError):
    """Stops a worker in the middle of a step without an outcome, like a process that died.

    A ``CancelledError``, as when a worker cancels an async job's task: the engine lets it
    through (any other exception, ``KeyboardInterrupt`` too, is the job's failure), so the job
    stays running under the worker's lease, with the step in flight.
    """


def effect_name(job_id: int, step: str) -> str:
    return f"{job_id}:{step}"


def _effect(job, step: str) -> dict:
    SideEffect.objects.create(name=effect_name(job.pk, step))
    hook = STEP_HOOKS.get((job.pk, step))
    if hook is not None:
        hook()
    if step == job.subject.get("block_at"):
        hold_until_go(job, step)
    return {"step": step, "job": job.pk}


@job("durability_five_steps", title="Durability: five steps", steps=list(FIVE_STEPS))
def durability_five_steps(job, ctx):
    return {"steps": [ctx.step(step, lambda step=step: _effect(job, step)) for step in FIVE_STEPS]}


@job("durability_atomic_step", title="Durability: an atomic step", steps=list(ATOMIC_STEPS))
def durability_atomic_step(job, ctx):
    prepared = ctx.step("prepare", lambda: _effect(job, "prepare"))
    written = ctx.step("write", lambda: _effect(job, "write"), atomic=True)
    published = ctx.step("publish", lambda: _effect(job, "publish"))
    return {"steps": [prepared, written, published]}


@job("durability_three_steps", title="Durability: three steps", steps=list(THREE_STEPS))
def durability_three_steps(job, ctx):
    return {step: ctx.step(step, lambda step=step: _effect(job, step)) for step in THREE_STEPS}


@durability_three_steps.revert
def undo_durability_three_steps(job, ctx):
    for step in UNDO_STEPS:
        ctx.step(step, lambda step=step: _effect(job, step))


def effect_counts(job_id: int, steps) -> dict[str, int]:
    """How often each of ``steps`` really ran, across processes."""
    names = SideEffect.objects.filter(name__startswith=f"{job_id}:").values_list("name", flat=True)
    counts = Counter(names)
    return {step: counts[effect_name(job_id, step)] for step in steps}


@job(
    "interrupted_by_the_job",
    title="Durability: raises a BaseException",
    max_attempts=2,
    retryable=lambda exc: isinstance(exc, KeyboardInterrupt),
)
def interrupted_by_the_job(job, ctx):
    """Raises the ``BaseException`` its subject names (``KeyboardInterrupt``, ``SystemExit``) in a step."""
    raised = {"KeyboardInterrupt": KeyboardInterrupt, "SystemExit": SystemExit}[job.subject["raise"]]
    ctx.step("first", lambda: "done")
    ctx.step("second", lambda: _raise(raised("raised by the job")))


def _raise(exc: BaseException) -> None:
    raise exc


@job("async_interrupted_by_the_job", title="Durability: async, raises KeyboardInterrupt")
async def async_interrupted_by_the_job(job, ctx):
    await ctx.step("first", lambda: "done")
    raise KeyboardInterrupt("raised by the async job")


@job("interrupted_by_ctrl_c", title="Durability: Ctrl-C while it runs")
def interrupted_by_ctrl_c(job, ctx):
    """Sends its own process SIGINT, as a person pressing Ctrl-C in a shell running ``drain()``."""
    ctx.step("press", lambda: _sigint_and_wait())


def _sigint_and_wait() -> None:
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(5)  # the handler interrupts this
