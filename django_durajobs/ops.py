"""The operations on a job: check that its status allows the transition, then apply it.

Every transition is conditional on the status it was decided from, so an operator's click and
a worker's outcome never overwrite each other: the loser re-reads and decides again.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.utils import timezone

from . import store
from .conf import get_setting
from .engine.redact import shown_text
from .engine.values import check_message, check_text, short_repr, to_job_id, to_json
from .errors import JobError
from .models import Job, JobStep
from .registry import get_kind
from .signals import announce_change
from .status import (
    CANCELLABLE_AT_ONCE,
    EXTERNAL_WAITS,
    PAUSABLE,
    RESUMABLE,
    RETRYABLE,
    REVERTIBLE,
    TERMINAL,
    Phase,
    Status,
    StepState,
)

JobRef = Job | int
Decision = tuple[dict[str, Any], str]


def get_job(job: JobRef) -> Job:
    """The job's current row; ``JobError("job_not_found")`` when there is none."""
    pk = to_job_id(job)
    found = Job.objects.filter(pk=pk).first()
    if found is None:
        raise JobError("job_not_found", f"Job {pk} does not exist.")
    return found


def actor_name(by: Any) -> str:
    if by is None:
        return "system"
    if hasattr(by, "get_username"):
        return by.get_username()
    return str(by)


def _transition(job: JobRef, decide: Callable[[Job], Decision]) -> Job:
    """Apply ``decide(current)``'s fields if the status is still the one decided from; retry on a race."""
    for _ in range(10):
        current = get_job(job)
        fields, log_line = decide(current)
        if store.change_status(current, fields, log_line):
            break
    else:
        raise JobError("job_busy", f"Job {current.pk} kept changing; try again.")
    if isinstance(job, Job):
        job.refresh_from_db()
        return job
    return get_job(current.pk)


def _refused(code: str, job: Job, what: str, allowed: str) -> JobError:
    return JobError(code, f"Job {job.pk} is {job.status}; only {allowed} jobs can be {what}.")


def resume(job: JobRef, by: Any = None, action: str | None = None, data: Any = None) -> Job:
    """Queue a waiting job again; the re-entered run sees ``ctx.resume_action``/``ctx.resume_data``."""
    if action is not None and (not isinstance(action, str) or not action):
        raise JobError("invalid_input", f"An action must be a non-empty string, not {short_repr(action)}.")
    if action is not None:
        check_text(action, "The action")
        limit = Job._meta.get_field("resume_action").max_length
        if len(action) > limit:
            raise JobError(
                "invalid_input", f"An action is at most {limit} characters long, not {len(action)}."
            )
    data = to_json(
        data,
        what="The resume data",
        max_bytes=get_setting("MAX_RESUME_DATA_BYTES"),
        setting="MAX_RESUME_DATA_BYTES",
    )

    def decide(current: Job) -> Decision:
        if current.status not in RESUMABLE:
            raise _refused("job_not_resumable", current, "resumed", "waiting")
        offered = [entry["id"] for entry in current.actions or []]
        if action is not None and offered and action not in offered:
            raise JobError(
                "invalid_input",
                f"Job {current.pk} offers the actions {', '.join(offered)}; {action!r} is not one of them.",
            )
        fields = dict(
            status=Status.QUEUED,
            next_run_at=timezone.now(),
            wait_reason="",
            user_message="",
            actions=None,
            eta_at=None,
            waits_for_children=False,
            resume_action=action or "",
            resume_data=data,
        )
        chosen = f" with {action!r}" if action else ""
        return fields, f"Resumed{chosen} by {actor_name(by)}."

    return _transition(job, decide)


def wake(job_id: int) -> bool:
    """Queue a job whose timed wait is over; False if it is no longer due (resumed, cancelled…)."""

    def decide(current: Job) -> Decision:
        due = current.next_run_at is not None and current.next_run_at <= timezone.now()
        if current.status not in EXTERNAL_WAITS or not due:
            raise JobError("job_not_resumable", "No longer a due timed wait.")
        fields = dict(status=Status.QUEUED, next_run_at=timezone.now(), wait_reason="", eta_at=None)
        return fields, "Its wait is over; queued again."

    try:
        _transition(job_id, decide)
    except JobError:
        return False
    return True


def wake_due_waits(limit: int = 1000) -> int:
    """Queue every waiting job whose ``resume_at`` has passed; returns how many."""
    due = Job.objects.filter(status__in=EXTERNAL_WAITS, next_run_at__lte=timezone.now())
    due = due.values_list("pk", flat=True)
    return sum(1 for job_id in list(due[:limit]) if wake(job_id))


def retry(job: JobRef, by: Any = None) -> Job:
    """Queue a failed (or needs-user) job again, allowing it one more attempt."""

    def decide(current: Job) -> Decision:
        if current.status not in RETRYABLE:
            raise _refused("job_not_retryable", current, "retried", "failed or needs-user")
        reverting = current.phase == Phase.REVERT and current.status == Status.FAILED
        fields = dict(
            status=Status.REVERTING if reverting else Status.QUEUED,
            next_run_at=timezone.now(),
            max_attempts=max(current.max_attempts, current.attempt + 1),
            worker_losses=0,
            cancel_requested=False,
            error="",
            error_code="",
            ended_at=None,
            wait_reason="",
            user_message="",
            actions=None,
        )
        return fields, f"{'Revert retried' if reverting else 'Retried'} by {actor_name(by)}."

    return _transition(job, decide)


def pause(job: JobRef, by: Any = None) -> Job:
    """Hold a queued or externally waiting job until it is resumed."""

    def decide(current: Job) -> Decision:
        if current.status not in PAUSABLE:
            raise _refused("job_not_pausable", current, "paused", "queued or awaiting_external")
        return dict(status=Status.PAUSED, next_run_at=None, eta_at=None), f"Paused by {actor_name(by)}."

    return _transition(job, decide)


def cancel(job: JobRef, by: Any = None) -> Job:
    """Cancel at once when queued or waiting; a running job is asked to stop at its next step.

    Its child jobs are cancelled with it: those not started at once, running ones at their next step.
    """

    def decide(current: Job) -> Decision:
        if current.status in CANCELLABLE_AT_ONCE:
            fields = dict(
                status=Status.CANCELLED, ended_at=timezone.now(), next_run_at=None, waits_for_children=False
            )
            return fields, f"Cancelled by {actor_name(by)}."
        if current.status == Status.RUNNING:
            return dict(
                cancel_requested=True
            ), f"Cancel requested by {actor_name(by)}; it stops at its next step."
        if current.status == Status.REVERTING:
            raise JobError(
                "job_not_cancellable", f"Job {current.pk} is reverting; a revert cannot be cancelled."
            )
        raise _refused("job_not_cancellable", current, "cancelled", "queued, waiting or running")

    cancelled = _transition(job, decide)
    if cancelled.status == Status.CANCELLED:  # a step a wait had marked is no longer waiting
        JobStep.objects.filter(
            job_id=cancelled.pk, state__in=(StepState.WAITING, StepState.NEEDS_USER)
        ).update(state=StepState.PENDING, detail="")
    for child in Job.objects.filter(parent_id=cancelled.pk).exclude(status__in=TERMINAL):
        try:
            cancel(child, by=by)
        except JobError:
            pass  # reverting, or it settled meanwhile
    return cancelled


def revert(job: JobRef, by: Any = None) -> Job:
    """Queue the kind's revert; a worker (or ``drain()``) carries it out."""

    def decide(current: Job) -> Decision:
        try:
            kind = get_kind(current.kind)
        except JobError:
            kind = None
        if kind is None or not kind.has_revert:
            raise JobError("job_not_revertible", f"Job {current.pk} ({current.kind}) has no revert.")
        if current.status not in REVERTIBLE:
            raise _refused("job_not_revertible", current, "reverted", "done, failed or needs-user")
        fields = dict(
            status=Status.REVERTING,
            phase=Phase.REVERT,
            next_run_at=timezone.now(),
            ended_at=None,
            error="",
            error_code="",
            wait_reason="",
            user_message="",
            actions=None,
            cancel_requested=False,
        )
        return fields, f"Revert requested by {actor_name(by)}."

    reverting = _transition(job, decide)
    revert_done_children(reverting, by=by)
    return reverting


def revert_done_children(parent: Job, by: Any = None) -> int:
    """Revert a parent's done children that have a revert, each as a job of its own."""
    reverted = 0
    for child in Job.objects.filter(parent_id=parent.pk, status=Status.DONE):
        try:
            if get_kind(child.kind).has_revert:
                revert(child, by=by or f"parent job {parent.pk}")
                reverted += 1
        except JobError:
            pass  # an unknown kind, or it changed meanwhile
    return reverted


UPDATABLE = frozenset({"progress", "eta_at", "label", "external_ref", "wait_reason", "user_message"})


def _updated_value(name: str, value: Any) -> Any:
    if name == "progress":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 100:
            raise JobError(
                "invalid_input", f"progress must be a number from 0 to 100, not {short_repr(value)}."
            )
        return round(value)
    if name == "eta_at":
        if value is not None and not (isinstance(value, datetime) and timezone.is_aware(value)):
            raise JobError(
                "invalid_input", f"eta_at must be a timezone-aware datetime or None, not {short_repr(value)}."
            )
        return value
    text = "" if value is None else str(value)
    if name in ("wait_reason", "user_message"):
        return shown_text(check_text(check_message(text, name), name))
    limit = Job._meta.get_field(name).max_length
    if limit and len(text) > limit:
        raise JobError("invalid_input", f"{name} is {len(text):,} characters long; the limit is {limit}.")
    return check_text(text, name)


def update(job: JobRef, **fields: Any) -> Job:
    """Set displayed fields from outside the run (progress pushed by another system, a new label…).

    Never changes the status. Accepts only ``progress, eta_at, label, external_ref,
    wait_reason, user_message``.
    """
    unknown = sorted(set(fields) - UPDATABLE)
    if unknown:
        raise JobError(
            "invalid_input",
            f"update() does not accept {', '.join(unknown)}; it accepts {', '.join(sorted(UPDATABLE))}.",
        )
    values = {name: _updated_value(name, value) for name, value in fields.items()}
    current = get_job(job)
    Job.objects.filter(pk=current.pk).update(updated_at=timezone.now(), **values)
    announce_change(current.pk, current.status, current.status)
    if isinstance(job, Job):
        job.refresh_from_db()
        return job
    return get_job(current.pk)
