"""The states a job moves through (DESIGN.md section 2) and the sets the engine reasons with."""

from __future__ import annotations

from collections.abc import Mapping

from django.db import models
from django.utils.translation import gettext_lazy as _
from django.utils.translation import pgettext_lazy


class Status(models.TextChoices):
    QUEUED = "queued", _("Queued")  # due at next_run_at, waiting for a worker
    RUNNING = "running", _("Running")  # claimed by a worker holding the lease
    DONE = "done", _("Done")
    FAILED = "failed", _("Failed")  # the run (or its revert) raised; error is kept
    CANCELLED = "cancelled", _("Cancelled")
    PAUSED = "paused", _("Paused")  # held by an operator until resumed
    AWAITING_EXTERNAL = "awaiting_external", _("Awaiting external event")
    NEEDS_USER = "needs_user", _("Needs a decision")  # a person must pick one of the offered actions
    AWAITING_APPROVAL = "awaiting_approval", _("Awaiting approval")
    AWAITING_PAYMENT = "awaiting_payment", _("Awaiting payment")
    NOT_READY = "not_ready", _("Not ready")
    NEEDS_SETUP = "needs_setup", _("Needs setup")
    REVERTING = "reverting", _("Reverting")  # the kind's revert is queued or running
    REVERTED = "reverted", _("Reverted")


TERMINAL = frozenset({Status.DONE, Status.FAILED, Status.CANCELLED, Status.REVERTED})
WAITING = frozenset(
    {
        Status.AWAITING_EXTERNAL,
        Status.NEEDS_USER,
        Status.PAUSED,
        Status.AWAITING_APPROVAL,
        Status.AWAITING_PAYMENT,
        Status.NOT_READY,
        Status.NEEDS_SETUP,
    }
)
#: The statuses a run may park itself in with ``ctx.wait_external(status=...)``.
EXTERNAL_WAITS = WAITING - {Status.NEEDS_USER, Status.PAUSED}


class StepState(models.TextChoices):
    PENDING = "pending", _("Pending")
    RUNNING = "running", _("Running")
    DONE = "done", _("Done")
    FAILED = "failed", _("Failed")
    WAITING = "waiting", _("Waiting")
    NEEDS_USER = "needs_user", _("Needs a decision")
    #: Not run: the job continued under a version of its kind without it, or with it added
    #: before the steps it had finished (docs/deploying.md).
    SKIPPED = "skipped", _("Skipped")


class Phase(models.TextChoices):
    """Which procedure of its kind a job is carrying out: its run, or its revert."""

    RUN = "run", pgettext_lazy("job phase", "Run")
    REVERT = "revert", pgettext_lazy("job phase", "Revert")


#: A step in one of these states is in progress or stopped: the first of them by position is its
#: job's current step, before any pending one.
CURRENT_STEP_STATES = (StepState.RUNNING, StepState.WAITING, StepState.NEEDS_USER, StepState.FAILED)


def current_position(first_by_state: Mapping[str, int]) -> int | None:
    """The position of a job's current step, from the first position of each step state in its
    phase: the first step in progress or stopped, else the first still to run."""
    started = [first_by_state[state] for state in CURRENT_STEP_STATES if state in first_by_state]
    return min(started) if started else first_by_state.get(StepState.PENDING)
