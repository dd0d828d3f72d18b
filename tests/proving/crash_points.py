"""The crash points: where a worker of the crash-point matrix is made to die (``os._exit``).

``$DURAJOBS_PROVE_CRASH_AT`` names one point; the worker dies there once per job (a marker file in
the ledger's folder says it already did), so the recovery that follows runs to its end.
``$DURAJOBS_PROVE_STALL_AT`` freezes it there instead (SIGSTOP), until the scenario continues it.
Status changes are reached through ``job_changed`` (sent once the change committed), the points
inside a run through the proving kinds (``reached``).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from tests.proving.ledger import LEDGER_ENV

CRASH_ENV = "DURAJOBS_PROVE_CRASH_AT"
CRASH_EXIT_CODE = 77
#: Names a point where the worker freezes itself (SIGSTOP) once per job instead of dying: a stall.
STALL_ENV = "DURAJOBS_PROVE_STALL_AT"

IN_STEP = "in_step"  # a step is marked running, its effect not checkpointed
AFTER_CHECKPOINT = "after_checkpoint"
AFTER_EVENT = "after_event"  # the event was consumed: the wait returned its payload

#: Committed status changes (previous, new) that are crash points, by name.
STATUS_CHANGES = {
    "after_claim": ("queued", "running"),
    "after_done": ("running", "done"),
    "after_retry_scheduled": ("running", "queued"),
    "after_wait_recorded": ("running", "awaiting_external"),
}
#: Every crash point: those inside a run, then the committed status changes.
ALL = (IN_STEP, AFTER_CHECKPOINT, AFTER_EVENT, *STATUS_CHANGES)


def reached(point: str, job_id: int) -> None:
    """Die (or freeze) here if this run was told to, the first time a job passes this point."""
    if point not in (os.environ.get(CRASH_ENV), os.environ.get(STALL_ENV)):
        return
    marker = Path(os.environ[LEDGER_ENV]) / f"crashed-{point}-{job_id}"
    try:
        marker.touch(exist_ok=False)
    except FileExistsError:
        return
    if os.environ.get(STALL_ENV) == point:
        os.kill(os.getpid(), signal.SIGSTOP)  # frozen until the scenario sends SIGCONT
        return
    os._exit(CRASH_EXIT_CODE)


def on_job_changed(sender, job, previous_status, status, **kwargs) -> None:
    """``job_changed`` receiver: a committed change that is the configured crash point kills the worker."""
    point = os.environ.get(CRASH_ENV, "")
    if STATUS_CHANGES.get(point) == (previous_status, status) and job.kind.startswith("prove_"):
        reached(point, job.pk)
