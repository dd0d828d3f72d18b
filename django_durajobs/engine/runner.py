"""Running one claimed job: call its run (or revert), then turn what happened into its next state."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.utils import timezone

from ..errors import JobError, LeaseLost
from ..models import Job, JobStep
from ..registry import JobKind, get_kind
from ..status import WAITING, Phase, Status, StepState
from ..store import GIVE_ATTEMPT_BACK, Lease, database_trouble
from .context import (
    CancelInterrupt,
    Interrupt,
    JobContext,
    NeedsUserInterrupt,
    RetryLaterInterrupt,
    WaitForChildrenInterrupt,
    WaitInterrupt,
    step_result,
)
from .redact import describe_exception, package_logger, redact
from .retry import backoff

logger = package_logger("django_durajobs")


@dataclass
class Outcome:
    fields: dict[str, Any]
    log_line: str
    steps: list[JobStep] = field(default_factory=list)


def execute(lease: Lease, then_claim: Callable[[], bool] | None = None) -> str | None:
    """Run the leased job to its next state; returns that status, or None if the lease was lost.

    Losing the database is not the job's failure: the error propagates, and the job goes back
    to the queue once the database answers again (its worker releases it, or its lease expires).
    ``then_claim`` is passed on to ``Lease.finish``: the worker's next job may come back as
    ``lease.successor``.
    """
    job = lease.job
    reverting = job.status == Status.REVERTING
    logger.info(
        "Job %s (%s) %s on %s", job.pk, job.kind, "reverting" if reverting else "started", lease.worker_id
    )
    kind = get_kind(job.kind)
    ctx = JobContext(lease, kind, reverting=reverting)
    try:
        outcome = _perform(kind, ctx)
    except LeaseLost as lost:
        logger.warning("Job %s abandoned: %s", job.pk, lost)
        return None
    except JobError as exc:
        error = describe_exception(exc)
        outcome = Outcome(
            {"status": Status.FAILED, "error": error, "error_code": exc.code, "ended_at": timezone.now()},
            error,
        )
    if outcome.fields["status"] not in WAITING:
        outcome.steps += _no_longer_waiting(ctx)
    # Done without a word: the log needs trimming only when this run wrote more than a line, and
    # on the job's first run (as most jobs are done) it gets no line at all.
    said_nothing = outcome.fields["status"] == Status.DONE and not ctx.logged
    log_line = None if said_nothing and ctx.first_run else outcome.log_line
    try:
        lease.finish(outcome.fields, outcome.steps, log_line, trim=not said_nothing, then_claim=then_claim)
    except LeaseLost as lost:
        logger.warning("Job %s abandoned before recording its outcome: %s", job.pk, lost)
        return None
    status = outcome.fields["status"]
    log = logger.error if status == Status.FAILED else logger.info
    log("Job %s (%s) %s: %s", job.pk, job.kind, status, outcome.log_line)
    return status


def _perform(kind: JobKind, ctx: JobContext) -> Outcome:
    job = ctx.job
    function = kind.revert_fn if ctx.reverting else kind.run
    try:
        if function is None:
            raise JobError("job_not_revertible", f"Kind {kind.name!r} has no revert.")
        if job.cancel_requested and not ctx.reverting:  # as read by the claim
            raise CancelInterrupt()
        if ctx.reverting:
            _revert_children_first(ctx)
        value = function(job, ctx)
        return _finished(ctx, value)
    except Interrupt as interrupt:
        return _interrupted(ctx, interrupt)
    except Exception as exc:
        if isinstance(exc, LeaseLost) or database_trouble(exc):
            raise
        return _failed(kind, ctx, exc)


def _revert_children_first(ctx: JobContext) -> None:
    """A parent's revert undoes its done children first, each as a job of its own, then itself."""
    from ..ops import revert_done_children  # ops runs jobs through this module

    if not Job.objects.filter(parent_id=ctx.job.pk).exists():
        return
    revert_done_children(ctx.job)
    ctx.wait_for_children()
    failed = Job.objects.filter(parent_id=ctx.job.pk, status=Status.FAILED, phase=Phase.REVERT)
    failed_ids = ", ".join(str(pk) for pk in failed.values_list("pk", flat=True))
    if failed_ids:
        raise JobError(
            "child_revert_failed",
            f"Child jobs {failed_ids} failed to revert; revert or retry them, then revert this job again.",
        )


def _finished(ctx: JobContext, value: Any) -> Outcome:
    now = timezone.now()
    common = dict(
        ended_at=now,
        error="",
        error_code="",
        wait_reason="",
        eta_at=None,
        next_run_at=None,
        cancel_requested=False,
    )
    if ctx.reverting:
        return Outcome(dict(status=Status.REVERTED, **common), "Reverted.")
    try:
        result = redact(step_result(value))
    except JobError as exc:
        return Outcome(
            dict(status=Status.FAILED, error=str(exc), error_code=exc.code, ended_at=now), str(exc)
        )
    return Outcome(
        dict(status=Status.DONE, result=result, progress=100, resume_action="", resume_data=None, **common),
        "Done.",
    )


def _no_longer_waiting(ctx: JobContext) -> list[JobStep]:
    """Steps an earlier wait marked (outside a step) go back to pending once the run stops waiting."""
    stale = [
        step
        for step in ctx.steps_marked_by_an_earlier_run()
        if step.state in (StepState.WAITING, StepState.NEEDS_USER) and step is not ctx.interrupted_step
    ]
    for step in stale:
        step.state, step.detail = StepState.PENDING, ""
    return stale


def _mark_next_pending_step(ctx: JobContext, interrupt: Interrupt) -> list[JobStep]:
    """A wait raised outside a step shows on the next unfinished step, so a screen has a current step."""
    if ctx.interrupted_step is not None:
        return []
    unfinished = (StepState.PENDING, StepState.WAITING, StepState.NEEDS_USER)
    steps = sorted(ctx.steps.values(), key=lambda step: step.position)
    following = next((step for step in steps if step.state in unfinished), None)
    if following is None:
        return []
    following.state = interrupt.step_state
    following.detail = interrupt.detail
    return [following]


def _interrupted(ctx: JobContext, interrupt: Interrupt) -> Outcome:
    detail = interrupt.detail
    give_back = {} if ctx.reverting else {"attempt": GIVE_ATTEMPT_BACK}
    for_children = isinstance(interrupt, WaitForChildrenInterrupt)
    if for_children and ctx.reverting:
        fields = dict(status=Status.REVERTING, next_run_at=None, wait_reason=detail, waits_for_children=True)
        return Outcome(fields, f"Waiting: {detail}")
    if isinstance(interrupt, WaitInterrupt):
        fields = dict(
            waits_for_children=for_children,
            status=interrupt.status,
            wait_reason=detail,
            eta_at=interrupt.resume_at,
            next_run_at=interrupt.resume_at,
            resume_action="",
            resume_data=None,
            **give_back,
        )
        return Outcome(fields, f"Waiting: {detail}", _mark_next_pending_step(ctx, interrupt))
    if isinstance(interrupt, NeedsUserInterrupt):
        fields = dict(
            status=Status.NEEDS_USER,
            user_message=detail,
            actions=interrupt.actions,
            next_run_at=None,
            eta_at=None,
            resume_action="",
            resume_data=None,
            **give_back,
        )
        return Outcome(fields, f"Needs a decision: {detail}", _mark_next_pending_step(ctx, interrupt))
    if isinstance(interrupt, RetryLaterInterrupt):
        status = Status.REVERTING if ctx.reverting else Status.QUEUED
        run_at = timezone.now() + timedelta(seconds=interrupt.seconds)
        fields = dict(status=status, next_run_at=run_at, wait_reason=detail, **give_back)
        return Outcome(fields, f"Runs again in {interrupt.seconds:g} s{': ' + detail if detail else ''}.")
    if isinstance(interrupt, CancelInterrupt):
        fields = dict(
            status=Status.CANCELLED, ended_at=timezone.now(), cancel_requested=False, next_run_at=None
        )
        return Outcome(fields, "Cancelled.")
    raise TypeError(f"Unknown interrupt {interrupt!r}")


def _failed(kind: JobKind, ctx: JobContext, exc: Exception) -> Outcome:
    job = ctx.job
    # A JobError is a failure the job reported on purpose: its message is enough.
    traceback = None if isinstance(exc, JobError) else exc
    error = describe_exception(exc)
    # The log's filter redacts the traceback (package_logger); the message is the stored error.
    logger.warning(
        "Job %s (%s) raised in try %s: %s", job.pk, job.kind, job.attempt, error, exc_info=traceback
    )
    code = exc.code if isinstance(getattr(exc, "code", None), str) and exc.code else None
    now = timezone.now()
    if not ctx.reverting and kind.is_retryable(exc) and job.attempt < job.max_attempts:
        delay = backoff(kind, job.attempt)
        fields = dict(
            status=Status.QUEUED, next_run_at=now + delay, error=error, error_code=code or "transient"
        )
        return Outcome(
            fields,
            f"Try {job.attempt} of {job.max_attempts} failed; "
            f"retrying in {delay.total_seconds():g} s: {error}",
        )
    fields = dict(
        status=Status.FAILED,
        error=error,
        error_code=code or ("revert_failed" if ctx.reverting else "failed"),
        ended_at=now,
        next_run_at=None,
        wait_reason="",
        cancel_requested=False,
    )
    return Outcome(fields, f"{'Revert failed' if ctx.reverting else 'Failed'}: {error}")
