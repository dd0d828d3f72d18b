"""Running one claimed job: call its run (or revert), then turn what happened into its next state."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Generic, TypeVar

from django.utils import timezone
from django.utils.translation import gettext as _

from .. import telemetry
from ..errors import EventTimeout, JobError, JobTimeout, LeaseLost, raised_by_the_job
from ..family import failed_reverts
from ..models import Job, JobStep
from ..ops import revert_done_children
from ..redaction import describe_exception, package_logger, redact
from ..registry import JobKind, RunFunction, get_kind
from ..status import WAITING, Phase, Status, StepState
from ..store import database_trouble
from ..transitions import Trigger, transition
from . import retry
from .context import JobContext
from .events import WaitForEventInterrupt, without_timeout
from .interrupts import (
    CancelInterrupt,
    Interrupt,
    NeedsUserInterrupt,
    PauseInterrupt,
    RetryLaterInterrupt,
    WaitForChildrenInterrupt,
    WaitInterrupt,
)
from .open_step import step_result
from .ports import RunStore
from .versions import left_behind
from .waits import wait_checks

logger = package_logger("django_durajobs")

#: The store a run goes through: ``store.Lease`` on the database, or one in memory.
L = TypeVar("L", bound=RunStore)


@dataclass(frozen=True)
class Ran(Generic[L]):
    """What ``execute`` did: the job's new status (None if the lease was lost), and the worker's
    next job when recording the outcome claimed it too."""

    status: str | None
    next_lease: L | None = None


@dataclass
class Outcome:
    fields: dict[str, Any]
    log_line: str
    steps: list[JobStep] = field(default_factory=list)


def execute(lease: L, then_claim: Callable[[], bool] | None = None) -> Ran[L]:
    """Run the leased job to its next state.

    Losing the database is not the job's failure: the error propagates, and the job goes back
    to the queue once the database answers again (its worker releases it, or its lease expires).
    ``then_claim`` is passed on to ``Lease.finish``: the worker's next job may come back in
    ``Ran.next_lease``. ``engine.async_runner.execute_async`` is the same for an async job.
    """
    kind, ctx = begin(lease)
    try:
        outcome = _perform(kind, ctx)
    except LeaseLost as lost:
        return abandoned(ctx, lost)
    except JobError as exc:
        outcome = refused(ctx, exc)
    except BaseException:  # the database is gone: the job goes back to the queue, not this span
        telemetry.end(ctx.span, "abandoned")
        raise
    return record(lease, ctx, outcome, then_claim)


def begin(lease: RunStore) -> tuple[JobKind, JobContext]:
    """The kind of the leased job, and the context its run (or revert) is about to get."""
    job = lease.job
    reverting = job.status == Status.REVERTING
    logger.info(
        "Job %s (%s) %s on %s", job.pk, job.kind, "reverting" if reverting else "started", lease.worker_id
    )
    kind = get_kind(job.kind)
    ctx = JobContext(lease, kind, reverting=reverting)
    ctx.span = telemetry.start_attempt(job, reverting)
    return kind, ctx


def abandoned(ctx: JobContext, lost: LeaseLost) -> Ran[Any]:
    logger.warning("Job %s abandoned: %s", ctx.job.pk, lost)
    telemetry.end(ctx.span, "abandoned")
    return Ran(None)


def refused(ctx: JobContext, exc: JobError) -> Outcome:
    """A run the engine could not even decide an outcome for fails with the error's code."""
    error = describe_exception(exc)
    telemetry.raised(ctx.span, exc)
    return _outcome(ctx, Trigger.FAIL, error, error=error, error_code=exc.code)


def record(
    lease: L, ctx: JobContext, outcome: Outcome, then_claim: Callable[[], bool] | None = None
) -> Ran[L]:
    """Write the run's outcome, fenced by its lease (and, with ``then_claim``, claim the next job)."""
    job = lease.job
    ctx.started_ahead.end()
    written = outcome.steps
    outcome.steps += [step for step in ctx.started_ahead.put_back if not any(step is w for w in written)]
    if outcome.fields["status"] not in WAITING:
        outcome.steps += _no_longer_waiting(ctx)
    if outcome.fields["status"] == Status.DONE and ctx.version != ctx.kind.version:
        outcome.steps += left_behind(ctx)
    # Done without a word: the log needs trimming only when this run wrote more than a line, and
    # on the job's first run (as most jobs are done) it gets no line at all.
    said_nothing = outcome.fields["status"] == Status.DONE and not ctx.logged
    log_line = None if said_nothing and ctx.first_run else outcome.log_line
    try:
        next_lease = lease.finish(
            outcome.fields, outcome.steps, log_line, trim=not said_nothing, then_claim=then_claim
        )
    except LeaseLost as lost:
        logger.warning("Job %s abandoned before recording its outcome: %s", job.pk, lost)
        telemetry.end(ctx.span, "abandoned")
        return Ran(None)
    status = outcome.fields["status"]
    telemetry.end(ctx.span, _outcome_name(status))
    log = logger.error if status == Status.FAILED else logger.info
    log("Job %s (%s) %s: %s", job.pk, job.kind, status, outcome.log_line or outcome.fields.get("wait_reason"))
    return Ran(status, next_lease)


def _outcome_name(status: str) -> str:
    """An attempt's ``durajobs.outcome``: its job's new status, with a try to come called ``retry``
    and every wait ``waiting``."""
    if status == Status.QUEUED:
        return "retry"
    if status in WAITING and status != Status.PAUSED:
        return "waiting"
    return status


def _perform(kind: JobKind, ctx: JobContext) -> Outcome:
    try:
        function = prepare(kind, ctx)
        value = function(ctx.job, ctx)
    except BaseException as raised:
        if not raised_by_the_job(raised):
            raise
        return settle_raised(kind, ctx, raised)
    return settle_value(ctx, value)


def prepare(kind: JobKind, ctx: JobContext) -> RunFunction:
    """The function to call, once what stops a run before it starts has been looked at."""
    job = ctx.job
    function = kind.revert_fn if ctx.reverting else kind.run
    if function is None:
        raise JobError("job_not_revertible", _("Kind %(kind)s has no revert.") % {"kind": repr(kind.name)})
    if job.cancel_requested and not ctx.reverting:  # as read by the claim
        raise CancelInterrupt()
    if job.pause_requested and not ctx.reverting:  # seen before its worker was lost, or it failed
        raise PauseInterrupt()
    if ctx.reverting:
        _revert_children_first(ctx)
    else:
        ctx.check_version()
    return function


def settle_raised(kind: JobKind, ctx: JobContext, raised: BaseException) -> Outcome:
    """The outcome of a run that raised: a wait or a stop, or a failed try; a lost lease or
    database propagates."""
    ctx.started_ahead.end()  # before a wait marks the step it shows on
    if isinstance(raised, Interrupt):
        return _interrupted(ctx, raised)
    if isinstance(raised, LeaseLost) or database_trouble(raised):
        raise raised
    return _failed(kind, ctx, raised)


def _revert_children_first(ctx: JobContext) -> None:
    """A parent's revert undoes its done children first, each as a job of its own, then itself."""
    if not ctx._lease.open_children()[1]:
        return
    revert_done_children(ctx.job)
    ctx.wait_for_children()
    failed_ids = ", ".join(str(pk) for pk in failed_reverts(ctx._lease.children()))
    if failed_ids:
        raise JobError(
            "child_revert_failed",
            _("Child jobs %(jobs)s failed to revert; revert or retry them, then revert this job again.")
            % {"jobs": failed_ids},
        )


def _outcome(
    ctx: JobContext, trigger: Trigger, log_line: str, steps: list[JobStep] | None = None, **given: Any
) -> Outcome:
    """The run's outcome as the transitions table has it for this job's phase."""
    fields = transition(trigger, ctx.phase).values(timezone.now(), **given)
    return Outcome(fields, log_line, steps or [])


def settle_value(ctx: JobContext, value: Any) -> Outcome:
    """The outcome of a run that returned ``value``."""
    if ctx.reverting:
        return _outcome(ctx, Trigger.DONE, _("Reverted."))
    try:
        result = redact(step_result(value))
    except JobError as exc:
        return _outcome(ctx, Trigger.FAIL, str(exc), error=str(exc), error_code=exc.code)
    return _outcome(ctx, Trigger.DONE, _("Done."), result=result)


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
    if isinstance(interrupt, WaitForEventInterrupt):
        return _outcome(
            ctx,
            Trigger.WAIT_FOR_EVENT,
            _("Waiting: %(reason)s") % {"reason": detail},
            _mark_next_pending_step(ctx, interrupt),
            wait_reason=detail,
            waits_for_event=interrupt.name,
            eta_at=interrupt.resume_at,
            next_run_at=interrupt.resume_at,
        )
    if isinstance(interrupt, WaitForChildrenInterrupt):
        steps = [] if ctx.reverting else _mark_next_pending_step(ctx, interrupt)
        return _outcome(
            ctx,
            Trigger.WAIT_FOR_CHILDREN,
            _("Waiting: %(reason)s") % {"reason": detail},
            steps,
            wait_reason=detail,
        )
    if isinstance(interrupt, WaitInterrupt):
        checks = wait_checks(ctx.job.wait_checks, detail, timezone.now())
        return _outcome(
            ctx,
            Trigger.WAIT,
            "" if checks["count"] > 1 else _("Waiting: %(reason)s") % {"reason": detail},
            _mark_next_pending_step(ctx, interrupt),
            status=interrupt.status,
            wait_reason=detail,
            eta_at=interrupt.resume_at,
            next_run_at=interrupt.resume_at,
            wait_checks=checks,
        )
    if isinstance(interrupt, NeedsUserInterrupt):
        return _outcome(
            ctx,
            Trigger.ASK,
            _("Needs a decision: %(question)s") % {"question": detail},
            _mark_next_pending_step(ctx, interrupt),
            user_message=detail,
            actions=interrupt.actions,
            next_run_at=interrupt.deadline,
            on_deadline=interrupt.on_deadline,
        )
    if isinstance(interrupt, RetryLaterInterrupt):
        return _retried_later(ctx, interrupt)
    if isinstance(interrupt, PauseInterrupt):
        return _outcome(ctx, Trigger.PAUSED, _("Paused; resumed, it goes on after its last finished step."))
    return _outcome(ctx, Trigger.CANCELLED, _("Cancelled."))


def _retried_later(ctx: JobContext, interrupt: RetryLaterInterrupt) -> Outcome:
    seconds, detail = f"{interrupt.seconds:g}", interrupt.detail
    if detail:
        line = _("Runs again in %(seconds)s s: %(reason)s.") % {"seconds": seconds, "reason": detail}
    else:
        line = _("Runs again in %(seconds)s s.") % {"seconds": seconds}
    return _outcome(
        ctx,
        Trigger.RETRY_LATER,
        line,
        next_run_at=timezone.now() + timedelta(seconds=interrupt.seconds),
        wait_reason=detail,
    )


def _failed(kind: JobKind, ctx: JobContext, exc: BaseException) -> Outcome:
    job = ctx.job
    # A JobError is a failure the job reported on purpose: its message is enough.
    traceback = None if isinstance(exc, JobError) else exc
    error = describe_exception(exc)
    telemetry.raised(ctx.span, exc)
    # The log's filter redacts the traceback (package_logger); the message is the stored error.
    logger.warning(
        "Job %s (%s) raised in try %s: %s", job.pk, job.kind, job.attempt, error, exc_info=traceback
    )
    outcome = _decided(kind, job, ctx.phase, exc, error)
    if isinstance(exc, EventTimeout):  # uncaught: a retry waits again
        outcome.fields["timed_out_events"] = without_timeout(job.timed_out_events, exc)
    return outcome


def _decided(kind: JobKind, job: Job, phase: Phase, exc: BaseException, error: str) -> Outcome:
    """A failed try's outcome, as ``retry.decide`` has it: queued again after a backoff, or failed."""
    reverting = phase == Phase.REVERT
    decision = retry.decide(exc, kind, job.attempt, job.max_attempts, timezone.now(), reverting=reverting)
    if isinstance(decision, retry.RetryAt):
        fields = transition(Trigger.RETRY_AFTER_ERROR, phase).values(
            timezone.now(), next_run_at=decision.at, error=error, error_code=decision.code
        )
        delay = decision.delay.total_seconds()
        line = _("Try %(attempt)s of %(attempts)s failed; retrying in %(seconds)s s: %(error)s") % {
            "attempt": job.attempt,
            "attempts": job.max_attempts,
            "seconds": f"{delay:g}",
            "error": error,
        }
        return Outcome(fields, line)
    fields = transition(Trigger.FAIL, phase).values(timezone.now(), error=error, error_code=decision.code)
    if reverting:
        return Outcome(fields, _("Revert failed: %(error)s") % {"error": error})
    return Outcome(fields, _("Failed: %(error)s") % {"error": error})


def abandon(lease: RunStore) -> bool:
    """Give up a job whose thread is still running past its deadline (``Lease.deadline``).

    The try fails with ``error_code="timeout"`` (or is retried, as its kind's ``retryable``
    says), its step in flight is marked failed (one marked running ahead of the run and not yet
    opened goes back to pending), and the lease is given up in the same fenced write, so whatever
    the late thread writes afterwards is refused. False when the job was no longer this lease's
    (it finished meanwhile). The steps are written only where they still say running: the
    thread, not stopped, may have finished the one the worker took to be in flight.
    """
    job = lease.job
    # Read before the step in flight: the run sets the step it opens in flight before it is no
    # longer ahead, and starts the next one ahead before the one done is no longer in flight.
    ahead = lease.step_started_ahead
    step_id = lease.timed_step
    if ahead is not None and ahead != step_id:  # between two steps: none is in flight
        step_id = None
    if step_id:
        given_up = _("Job %(job)s was still running step %(step)s past its timeout; its worker gave it up.")
        exc = JobTimeout(given_up % {"job": job.pk, "step": repr(step_id)})
    else:
        given_up = _("Job %(job)s was still running its run past its timeout; its worker gave it up.")
        exc = JobTimeout(given_up % {"job": job.pk})
    phase = Phase.REVERT if job.status == Status.REVERTING else Phase.RUN
    outcome = _decided(get_kind(job.kind), job, phase, exc, str(exc))
    steps = []
    if step_id:
        steps.append(
            JobStep(job_id=job.pk, phase=phase, step_id=step_id, state=StepState.FAILED, detail=str(exc))
        )
    elif ahead is not None:
        steps.append(JobStep(job_id=job.pk, phase=phase, step_id=ahead, state=StepState.PENDING))
    try:
        lease.finish(outcome.fields, steps, outcome.log_line, if_running=True)
    except LeaseLost:
        return False
    logger.error("Job %s (%s) abandoned: %s", job.pk, job.kind, outcome.log_line)
    return True
