"""``rerun(job, from_step=…)``: run a finished job again from one of its steps, as a new job.

The new job (its ``rerun_of`` is the original) starts with the checkpoints of the steps before
``from_step``, so those are not called again; ``from_step`` and everything after it run under the
kind's current code. The original stays as it was, for the record. Refused (``JobError``) where
the steps before it cannot be trusted: a revert ran, one of them never finished, or the kind says
its jobs cannot be rerun.
"""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext as _

from . import store
from .errors import JobError
from .models import Job, JobStep
from .ops import JobRef, actor_name, get_job
from .registry import get_kind
from .status import Phase, StepState
from .transitions import RERUNNABLE


def rerun(job: JobRef, from_step: str, by: Any = None) -> Job:
    """A new job that reuses the original's steps before ``from_step`` and runs it and the rest."""
    original = get_job(job)
    reused = steps_before(original, from_step)
    who = actor_name(by)
    names = {"job": original.pk, "step": from_step, "by": who}
    fields = dict(
        subject=original.subject,
        label=original.label,
        queue=original.queue,
        priority=original.priority,
        timeout=original.timeout,
        group_id=original.group_id,
        subject_type=original.subject_type,
        subject_id=original.subject_id,
        created_by=by if hasattr(by, "get_username") else None,
        actor_type=Job.ActorType.USER if hasattr(by, "get_username") else Job.ActorType.SYSTEM,
    )

    def lines(new: int) -> tuple[str, str]:
        return (
            _("Rerun from step %(step)s as job %(new)s, by %(by)s.") % {**names, "new": new},
            _("Rerun of job %(job)s from step %(step)s, by %(by)s.") % names,
        )

    return store.insert_rerun(original, reused, fields, lines)


def steps_before(original: Job, from_step: str) -> list[JobStep]:
    """The original's run steps before ``from_step``, all done; ``JobError`` when it may not be rerun."""
    kind = get_kind(original.kind)
    refused = _refusal(original, kind.rerunnable)
    if refused:
        raise JobError("job_not_rerunnable", refused)
    steps = list(JobStep.objects.filter(job=original, phase=Phase.RUN).order_by("position"))
    if JobStep.objects.filter(job=original, phase=Phase.REVERT, state=StepState.DONE).exists():
        raise JobError(
            "job_not_rerunnable",
            _("Job %(job)s was reverted (a revert step ran): its steps' results no longer hold.")
            % {"job": original.pk},
        )
    run = [step.step_id for step in steps]
    if from_step not in run:
        raise JobError(
            "invalid_input",
            _("Job %(job)s has no step %(step)s; its steps are %(steps)s.")
            % {"job": original.pk, "step": repr(from_step), "steps": ", ".join(run) or "—"},
        )
    before = steps[: run.index(from_step)]
    unfinished = [step.step_id for step in before if step.state != StepState.DONE]
    if unfinished:
        raise JobError(
            "job_not_rerunnable",
            _("Steps before %(step)s did not finish in job %(job)s: %(steps)s.")
            % {"job": original.pk, "step": repr(from_step), "steps": ", ".join(unfinished)},
        )
    return before


def _refusal(original: Job, rerunnable: bool) -> str | None:
    if not rerunnable:
        return _("Kind %(kind)s says its jobs cannot be rerun.") % {"kind": repr(original.kind)}
    if original.phase != Phase.RUN or original.status not in RERUNNABLE:
        return _("Job %(job)s is %(status)s; only a done, failed or cancelled job can be rerun.") % {
            "job": original.pk,
            "status": original.status,
        }
    return None
