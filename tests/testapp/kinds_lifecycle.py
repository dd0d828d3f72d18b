"""Job kinds for the worker-lifecycle tests (tests/e2e/test_lifecycle.py).

- ``lifecycle_blocking``: logs which worker runs it, then a step ``work`` that records who runs
  it (pid, worker id, and the lease token the job carries at that moment), then holds at the
  gate ``work`` (``tests/testapp/gates.py``, under ``subject["dir"]``). An atomic step
  ``record`` then writes the job's ``Ledger`` row (unique per job: no job finishes twice).
- ``lifecycle_timed_wait``: its first run waits for ``subject["seconds"]`` with a timed
  ``wait_external``; its second run finishes. Each run writes a ``SideEffect`` row, so a test
  reads when each run began.
- ``lifecycle_quick``: finishes at once, saying who ran it.
"""

from __future__ import annotations

import os
from datetime import timedelta

from django_durajobs import job
from tests.testapp.gates import hold_until_go
from tests.testapp.models import Ledger, SideEffect


def timed_wait_run_name(job_id: int) -> str:
    return f"lifecycle_timed_wait:{job_id}"


def _who(job, ctx) -> dict:
    from django_durajobs import Job

    token = Job.objects.values_list("lease_token", flat=True).get(pk=job.pk)
    return {"pid": os.getpid(), "worker_id": ctx.worker_id, "lease_token": token}


BLOCKING_STEPS = [("work", "Work"), ("record", "Record")]


@job("lifecycle_blocking", title="Lifecycle: blocks until told", steps=BLOCKING_STEPS)
def lifecycle_blocking(job, ctx):
    ctx.log(f"Run on {ctx.worker_id}")

    def work():
        who = _who(job, ctx)
        hold_until_go(job, "work")
        return who

    worked = ctx.step("work", work)

    def record():
        Ledger.objects.create(job_id=job.pk, worker_id=ctx.worker_id)
        return {"worker_id": ctx.worker_id}

    ctx.step("record", record, atomic=True)
    return {"work": worked, "finished_by": ctx.worker_id, "pid": os.getpid()}


@job("lifecycle_timed_wait", title="Lifecycle: waits once, by itself")
def lifecycle_timed_wait(job, ctx):
    SideEffect.objects.create(name=timed_wait_run_name(job.pk))
    runs = SideEffect.objects.filter(name=timed_wait_run_name(job.pk)).count()
    if runs == 1:
        ctx.wait_external("Waiting a moment", resume_at=timedelta(seconds=job.subject["seconds"]))
    return {"runs": runs, "worker_id": ctx.worker_id}


@job("lifecycle_quick", title="Lifecycle: quick")
def lifecycle_quick(job, ctx):
    return {"worker_id": ctx.worker_id, "pid": os.getpid()}
