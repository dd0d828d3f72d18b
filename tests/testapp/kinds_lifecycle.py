"""Job kinds for the worker-lifecycle tests (tests/test_lifecycle.py).

- ``lifecycle_blocking``: logs which worker runs it, then a step ``work`` that records who runs
  it (pid, worker id, and the lease token the job carries at that moment), creates a *started*
  marker file and holds until the job's *go* file exists (both under ``subject["dir"]``; the
  hold is bounded, so a worker nobody releases gives up instead of hanging). An atomic step
  ``record`` then writes the job's ``Ledger`` row (unique per job: no job finishes twice).
- ``lifecycle_timed_wait``: its first run waits for ``subject["seconds"]`` with a timed
  ``wait_external``; its second run finishes. Each run writes a ``SideEffect`` row, so a test
  reads when each run began.
- ``lifecycle_quick``: finishes at once, saying who ran it.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta
from pathlib import Path

from django_durajobs import job
from tests.testapp.models import Ledger, SideEffect

HOLD_DEADLINE_SECONDS = 30


def go_file(directory: Path | str, job_id: int) -> Path:
    """When it exists, the ``work`` step of ``lifecycle_blocking`` carries on at once."""
    return Path(directory) / f"{job_id}.go"


def started_markers(directory: Path | str, job_id: int) -> list[Path]:
    """One file per run of the ``work`` step that reached its hold, named ``<job>.started.<pid>``."""
    return sorted(Path(directory).glob(f"{job_id}.started.*"))


def marker_pids(directory: Path | str, job_id: int) -> list[int]:
    return [int(path.name.rsplit(".", 1)[1]) for path in started_markers(directory, job_id)]


def timed_wait_run_name(job_id: int) -> str:
    return f"lifecycle_timed_wait:{job_id}"


def _who(job, ctx) -> dict:
    from django_durajobs import Job

    token = Job.objects.values_list("lease_token", flat=True).get(pk=job.pk)
    return {"pid": os.getpid(), "worker_id": ctx.worker_id, "lease_token": token}


def _hold_until_go(job) -> None:
    directory = Path(job.subject["dir"])
    (directory / f"{job.pk}.started.{os.getpid()}").touch(exist_ok=False)
    go = go_file(directory, job.pk)
    deadline = time.monotonic() + HOLD_DEADLINE_SECONDS
    while not go.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{go} did not appear within {HOLD_DEADLINE_SECONDS} s")
        time.sleep(0.02)


BLOCKING_STEPS = [("work", "Work"), ("record", "Record")]


@job("lifecycle_blocking", title="Lifecycle: blocks until told", steps=BLOCKING_STEPS)
def lifecycle_blocking(job, ctx):
    ctx.log(f"Run on {ctx.worker_id}")

    def work():
        who = _who(job, ctx)
        _hold_until_go(job)
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
