"""Job kinds for the tests of workers and their database (tests/test_database.py).

``database_two_steps`` runs the steps ``fetch`` and ``store``. Each step writes a ``SideEffect``
row named ``"<job id>:<step>"`` (so a test counts how often a step really ran, across processes)
and then works for ``subject["work_seconds"]`` (default 0), so that a database restart or a
dropped connection lands in the middle of the work.

``subject["hold_at"]`` names a step that, after its effect, creates a *started* marker file and
then waits for the job's *go* file (both under ``subject["dir"]``), so a test can act while the
job is known to be in that step. Files, not rows: a row would need the very connection the test
is about to drop. The wait is bounded, so a forgotten job gives up instead of hanging.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

from django_durajobs import job
from tests.testapp.models import SideEffect

TWO_STEPS = ("fetch", "store")

HOLD_DEADLINE_SECONDS = 30


def effect_name(job_id: int, step: str) -> str:
    return f"{job_id}:{step}"


def started_markers(directory: Path | str, job_id: int, step: str) -> list[Path]:
    """One file per run of ``step`` that reached its hold."""
    return sorted(Path(directory).glob(f"{job_id}-{step}.started.*"))


def go_file(directory: Path | str, job_id: int) -> Path:
    """When it exists, a holding step carries on at once."""
    return Path(directory) / f"{job_id}.go"


def _hold_until_go(job, step: str) -> None:
    directory = job.subject["dir"]
    (Path(directory) / f"{job.pk}-{step}.started.{uuid.uuid4().hex}").touch(exist_ok=False)
    go = go_file(directory, job.pk)
    deadline = time.monotonic() + HOLD_DEADLINE_SECONDS
    while not go.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{go} did not appear within {HOLD_DEADLINE_SECONDS} s")
        time.sleep(0.02)


def _effect(job, step: str) -> str:
    SideEffect.objects.create(name=effect_name(job.pk, step))
    if step == job.subject.get("hold_at"):
        _hold_until_go(job, step)
    work = job.subject.get("work_seconds", 0)
    if work:
        time.sleep(work)  # the step's own work (e.g. a call to another service), not a synchronisation
    return step


@job("database_two_steps", title="Database: two steps", steps=list(TWO_STEPS))
def database_two_steps(job, ctx):
    return [ctx.step(step, lambda step=step: _effect(job, step)) for step in TWO_STEPS]
