"""Job kinds for the tests of workers and their database (tests/integration/test_database.py,
tests/integration/test_query_plans.py, tests/e2e/test_database_workers.py).

``database_two_steps`` runs the steps ``fetch`` and ``store``. Each step writes a ``SideEffect``
row named ``"<job id>:<step>"`` (so a test counts how often a step really ran, across processes)
and then works for ``subject["work_seconds"]`` (default 0), so that a database restart or a
dropped connection lands in the middle of the work.

``subject["hold_at"]`` names a step that, after its effect, holds at the gate of that name
(``tests/testapp/gates.py``, under ``subject["dir"]``), so a test can act while the job is known
to be in that step.
"""

from __future__ import annotations

import time

from django_durajobs import job
from tests.testapp.gates import hold_until_go
from tests.testapp.models import SideEffect

KIND = "database_two_steps"
TWO_STEPS = ("fetch", "store")


def effect_name(job_id: int, step: str) -> str:
    return f"{job_id}:{step}"


def _effect(job, step: str) -> str:
    SideEffect.objects.create(name=effect_name(job.pk, step))
    if step == job.subject.get("hold_at"):
        hold_until_go(job, step)
    work = job.subject.get("work_seconds", 0)
    if work:
        time.sleep(work)  # the step's own work (e.g. a call to another service), not a synchronisation
    return step


@job(KIND, title="Database: two steps", steps=list(TWO_STEPS))
def database_two_steps(job, ctx):
    return [ctx.step(step, lambda step=step: _effect(job, step)) for step in TWO_STEPS]
