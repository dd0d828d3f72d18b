"""Job kinds for the fleet tests (tests/e2e/test_fleet.py): many ``runjobs`` processes at once.

- ``fleet_ledger``: a cheap step, then an ``atomic=True`` step that writes the job's one
  ``Ledger`` row (unique per job): a second run of the job would fail on the constraint, a
  missing row means a job was left behind.
- ``fleet_chaos``: several steps, each writes a ``SideEffect`` named ``"<job id>:<step>"`` and
  then takes a few milliseconds, so a worker killed at a random moment is usually in a step.
- ``fleet_poison``: kills the worker process that runs it (``os._exit(1)``), on every try.
- ``fleet_record`` and ``fleet_urgent``: write a ``SideEffect`` named ``"ran:<label>"``, so the
  order of the rows is the order the jobs ran in; ``fleet_urgent`` has its own queue and
  priority defaults.
"""

from __future__ import annotations

import os
import time

from django_durajobs import job
from tests.testapp.models import Ledger, SideEffect

CHAOS_STEPS = ("fetch", "transform", "store", "notify")
CHAOS_STEP_SECONDS = 0.04
URGENT_QUEUE = "fleet_urgent"
URGENT_PRIORITY = 50


def chaos_effect_name(job_id: int, step: str) -> str:
    return f"{job_id}:{step}"


@job("fleet_ledger", title="Fleet: ledger entry", steps=["look", "record"])
def fleet_ledger(job, ctx):
    looked = ctx.step("look", lambda: {"job": job.pk})
    recorded = ctx.step(
        "record",
        lambda: {"ledger": Ledger.objects.create(job_id=job.pk, worker_id=ctx.worker_id).pk},
        atomic=True,
    )
    return {"looked": looked, "recorded": recorded}


def _chaos_step(job_id: int, step: str) -> str:
    SideEffect.objects.create(name=chaos_effect_name(job_id, step))
    time.sleep(CHAOS_STEP_SECONDS)
    return step


@job("fleet_chaos", title="Fleet: several slow steps", steps=list(CHAOS_STEPS))
def fleet_chaos(job, ctx):
    return [ctx.step(step, lambda step=step: _chaos_step(job.pk, step)) for step in CHAOS_STEPS]


def _die(job_id: int) -> None:
    SideEffect.objects.create(name=f"poison:{job_id}")
    if os.environ.get("DURAJOBS_USE_TEST_DB") == "1":
        os._exit(1)  # only in a child process: a test that drains in-process must not lose pytest
    raise RuntimeError("fleet_poison only kills worker processes")


@job("fleet_poison", title="Fleet: kills its worker")
def fleet_poison(job, ctx):
    ctx.step("die", lambda: _die(job.pk))


def _record(job) -> str:
    SideEffect.objects.create(name=f"ran:{job.label}")
    return job.label


@job("fleet_record", title="Fleet: record that it ran")
def fleet_record(job, ctx):
    return ctx.step("record", lambda: _record(job))


@job("fleet_urgent", title="Fleet: urgent by default", queue=URGENT_QUEUE, priority=URGENT_PRIORITY)
def fleet_urgent(job, ctx):
    return ctx.step("record", lambda: _record(job))


def ran_labels() -> list[str]:
    """Labels of the ``fleet_record``/``fleet_urgent`` jobs in the order they ran."""
    names = SideEffect.objects.filter(name__startswith="ran:").order_by("id").values_list("name", flat=True)
    return [name.removeprefix("ran:") for name in names]
