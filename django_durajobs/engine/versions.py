"""A job that runs again under another version of its kind (docs/deploying.md).

A job records the version of its kind it started with (``Job.kind_version``). When a run (not a
revert) of a job that has finished a step meets another version, the kind's ``on_version_change``
decides: ``continue`` (steps matched by id), ``wait`` for a worker with the job's version, or
``fail`` with ``error_code="version_changed"``. A job that has finished no step is not bound to
a version yet: it takes the running one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.utils import timezone
from django.utils.translation import gettext as _

from ..conf import get_setting
from ..errors import JobError
from ..models import JobStep
from ..registry import JobKind
from ..status import Phase, StepState
from .context import JobContext
from .interrupts import RetryLaterInterrupt

if TYPE_CHECKING:
    from .ports import RunStore


def check_version(kind: JobKind, ctx: JobContext, lease: RunStore) -> None:
    """Before a run: go on, or raise what the kind's policy says when the job's version differs."""
    job = ctx.job
    if ctx.reverting or job.kind_version == kind.version:
        return
    ctx.go_by_rows()
    if not job.kind_version or not any(step.state == StepState.DONE for step in ctx.steps.values()):
        lease.renew(kind_version=kind.version)
        job.kind_version = ctx.version = kind.version
        return
    names = {"kind": repr(kind.name), "started": repr(job.kind_version), "running": repr(kind.version)}
    if kind.on_version_change == "fail":
        raise JobError(
            "version_changed",
            _(
                "Job of kind %(kind)s started under version %(started)s; this worker runs version "
                "%(running)s, and the kind fails such jobs (on_version_change='fail')."
            )
            % names,
        )
    if kind.on_version_change == "wait":
        raise RetryLaterInterrupt(
            get_setting("VERSION_WAIT_SECONDS"),
            _("Waiting for a worker running version %(started)s of kind %(kind)s.") % names,
        )
    _continue(kind, ctx, lease)


def _continue(kind: JobKind, ctx: JobContext, lease: RunStore) -> None:
    """Go on by step id: a step the job finished is not run again, a declared step added before
    the point the job had reached is skipped, and the job's steps this version removed are named."""
    names = {"started": repr(ctx.job.kind_version), "running": repr(kind.version)}
    ctx.log(_("Continues under version %(running)s of its kind; it started under %(started)s.") % names)
    removed = [step_id for step_id in ctx.steps if step_id not in dict(kind.steps)]
    if removed:
        ctx.log(
            _("Steps no longer in version %(running)s, not run unless its code still calls them: %(steps)s.")
            % {**names, "steps": ", ".join(removed)}
        )
    for step_id in added_before_reached_point(kind, ctx.steps):
        _skip(ctx, lease, step_id)


def added_before_reached_point(kind: JobKind, steps: dict[str, JobStep]) -> list[str]:
    """The kind's declared steps the job does not have that the job is past: one declared before a
    step the job finished, or one in the place of a finished step the version no longer declares
    (taken for its new name)."""
    declared = [step_id for step_id, _title in kind.steps]
    in_order = sorted(steps.values(), key=lambda step: step.position)
    skipped = []
    for index, step_id in enumerate(declared):
        if step_id in steps:
            continue
        later = [steps[after] for after in declared[index + 1 :] if after in steps]
        if any(step.state == StepState.DONE for step in later) or _renames(declared, index, in_order):
            skipped.append(step_id)
    return skipped


def _renames(declared: list[str], index: int, in_order: list[JobStep]) -> bool:
    """Whether the step declared at ``index`` follows a step the job has, whose next step in the
    job is done and no longer declared."""
    before = declared[index - 1] if index else None
    ids = [step.step_id for step in in_order]
    if before not in ids:
        return False
    following = in_order[ids.index(before) + 1 : ids.index(before) + 2]
    return any(step.state == StepState.DONE and step.step_id not in declared for step in following)


def _skip(ctx: JobContext, lease: RunStore, step_id: str) -> None:
    """Record ``step_id`` as skipped, so the run's ``ctx.step`` returns None for it, and say so."""
    step = JobStep(
        job_id=ctx.job.pk,
        phase=Phase.RUN,
        position=max(step.position for step in ctx.steps.values()) + 1,
        step_id=step_id,
        title=str(dict(ctx.kind.steps)[step_id])[:255],
        state=StepState.SKIPPED,
        ended_at=timezone.now(),
        detail=_("Added by version %(running)s before the steps this job had finished; not run.")
        % {"running": repr(ctx.kind.version)},
    )
    lease.start_step(step, create=True)
    ctx.steps[step_id] = step
    ctx.log(_("Step %(step)s skipped: %(detail)s") % {"step": step_id, "detail": step.detail})


def left_behind(ctx: JobContext) -> list[JobStep]:
    """A job that continued under another version and is done: the steps it never ran, which its
    kind's version no longer declares, are skipped (not left pending for ever)."""
    declared = dict(ctx.kind.steps)
    left = [
        step
        for step in ctx.steps.values()
        if step.state == StepState.PENDING and step.step_id not in declared and step.phase == Phase.RUN
    ]
    for step in left:
        step.state = StepState.SKIPPED
        step.detail = _("Not in version %(running)s of its kind.") % {"running": repr(ctx.kind.version)}
    return left
