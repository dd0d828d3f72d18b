"""Job kinds for the tests of interrupted work resuming first (tests/integration/test_claim_order.py,
tests/e2e/test_resume_first.py).

- ``resume_backlog``: one step that writes a ``SideEffect`` named ``"backlog:<job id>"`` and takes a
  few milliseconds, so a backlog of them takes a worker a known while to drain.
- ``resume_later_once``: its first try asks to be retried later (``ctx.retry_later(0)``); the next
  one writes ``"ran:<label>"`` as ``kinds_fleet.fleet_record`` does.
"""

from __future__ import annotations

import time

from django_durajobs import job
from tests.testapp.models import SideEffect

BACKLOG_STEP_SECONDS = 0.005


def backlog_effect_name(job_id: int) -> str:
    return f"backlog:{job_id}"


def _backlog_step(job_id: int) -> None:
    SideEffect.objects.create(name=backlog_effect_name(job_id))
    time.sleep(BACKLOG_STEP_SECONDS)


@job("resume_backlog", title="Resume: a job of the backlog")
def resume_backlog(job, ctx):
    ctx.step("work", lambda: _backlog_step(job.pk))


@job("resume_later_once", title="Resume: retried later once")
def resume_later_once(job, ctx):
    if not SideEffect.objects.filter(name=f"later:{job.pk}").exists():
        SideEffect.objects.create(name=f"later:{job.pk}")
        ctx.retry_later(0, reason="Asked to be retried later")
    SideEffect.objects.create(name=f"ran:{job.label}")
