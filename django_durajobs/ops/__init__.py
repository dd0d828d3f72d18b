"""The operations on a job: check that its status allows the transition, then apply it.

``deciding.py`` decides each operation for a job as read; this module applies it to one job, and
``many.py`` to many at once and to a job's children.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from functools import partial
from typing import Any

from asgiref.sync import sync_to_async
from django.utils import timezone
from django.utils.translation import gettext as _

from .. import store
from ..answers import UNANSWERED, chosen_label
from ..conf import get_setting
from ..errors import JobError
from ..models import ACTION_ID_MAX_LENGTH, Job
from ..redaction import shown_text
from ..status import TERMINAL
from ..store.sql import concrete_field
from ..transitions import Trigger, allows, sources, transition
from ..values import check_message, check_text, short_repr, to_json
from .deciding import Decision, JobRef, actor_name, apply_decision, decide, get_job, invalid
from .many import BATCH_SIZE, BulkOutcome, after_cancel, apply_to_many, id_batches, revert_done_children

__all__ = [
    "BATCH_SIZE",
    "BulkOutcome",
    "JobRef",
    "actor_name",
    "apply_to_many",
    "asend_event",
    "cancel",
    "get_job",
    "id_batches",
    "pause",
    "resume",
    "retry",
    "revert",
    "revert_done_children",
    "run_again",
    "send_event",
    "update",
    "wake",
    "wake_due_waits",
]

# The operations on one job ------------------------------------------------------------------------


def resume(job: JobRef, by: Any = None, action: str | None = None, data: Any = None) -> Job:
    """Queue a waiting job again; the re-entered run sees ``ctx.resume_action``/``ctx.resume_data``.

    A question with offered answers is resumed with one of them; a job that offered none, without one.
    """
    if action is not None and (not isinstance(action, str) or not action):
        raise invalid(_("An action must be a non-empty string, not %(value)s."), value=short_repr(action))
    if action is not None:
        check_text(action, _("The action"))
        if len(action) > ACTION_ID_MAX_LENGTH:
            message = _("An action is at most %(limit)s characters long, not %(length)s.")
            raise invalid(message, limit=ACTION_ID_MAX_LENGTH, length=len(action))
    data = to_json(
        data,
        what=_("The resume data"),
        max_bytes=get_setting("MAX_RESUME_DATA_BYTES"),
        setting="MAX_RESUME_DATA_BYTES",
    )
    return apply_decision(job, partial(decide, "resume", by=by, action=action, data=data))


def send_event(name: str, payload: Any = None, *, by: Any = None) -> bool:
    """Send the event ``name``: every job waiting for it gets ``payload``, and so does every later
    wait for it. The first send wins: a later one changes nothing and returns False.

    Inside a transaction it is sent only if the transaction commits; the waiting jobs wake then.

    >>> send_event(f"payment:{order.number}", {"amount": "12.50"}, by="payment provider")
    True
    """
    return store.send_event(name, payload, sent_by=actor_name(by))


async def asend_event(name: str, payload: Any = None, *, by: Any = None) -> bool:
    """``send_event`` for async code."""
    return await sync_to_async(send_event)(name, payload, by=by)


def decide_wake(current: Job, now: datetime) -> Decision:
    """A due timed wait queued again, or a question past its deadline answered with its
    ``on_deadline`` action; ``JobError`` when the job is no longer due."""
    due = current.next_run_at is not None and current.next_run_at <= now
    if due and allows(Trigger.WAKE, current.phase, current.status):
        # Its run logs what it finds (a timed wait checked again is logged once): no line here.
        return transition(Trigger.WAKE, current.phase).values(now), ""
    if due and current.on_deadline and allows(Trigger.DEADLINE, current.phase, current.status):
        action = current.on_deadline
        fields = transition(Trigger.DEADLINE, current.phase).values(now, resume_action=action)
        return fields, str(UNANSWERED % {"action": repr(chosen_label(current.actions, action))})
    raise JobError("job_not_resumable", _("No longer a due timed wait."))


def wake(job_id: int) -> bool:
    """Queue a job whose timed wait is over, or whose question's deadline passed (answered with
    its ``on_deadline`` action); False if it is no longer due (resumed, answered, cancelled…)."""
    try:
        apply_decision(job_id, decide_wake)
    except JobError:
        return False
    return True


#: The statuses a job wakes from by itself when its ``next_run_at`` comes.
WAKES_BY_ITSELF = sources(Trigger.WAKE) | sources(Trigger.DEADLINE)


def wake_due_waits(limit: int = 1000) -> int:
    """Queue every waiting job whose ``resume_at`` has passed, and resolve every question whose
    deadline has; returns how many."""
    due = Job.objects.filter(status__in=WAKES_BY_ITSELF, next_run_at__lte=timezone.now())
    due_ids = due.values_list("pk", flat=True)
    return sum(1 for job_id in list(due_ids[:limit]) if wake(job_id))


def retry(job: JobRef, by: Any = None) -> Job:
    """Queue a failed (or needs-user) job again, allowing it one more attempt."""
    return apply_decision(job, partial(decide, "retry", by=by))


def pause(job: JobRef, by: Any = None) -> Job:
    """Hold a queued or externally waiting job until it is resumed; a running job is asked to
    pause at its next step, its finished steps kept."""
    return apply_decision(job, partial(decide, "pause", by=by))


def cancel(job: JobRef, by: Any = None) -> Job:
    """Cancel at once when queued or waiting; a running job is asked to stop at its next step.

    Its child jobs are cancelled with it: those not started at once, running ones at their next step.
    """
    cancelled = apply_decision(job, partial(decide, "cancel", by=by))
    after_cancel([cancelled], by)
    return cancelled


def revert(job: JobRef, by: Any = None) -> Job:
    """Queue the kind's revert; a worker (or ``drain()``) carries it out."""
    reverting = apply_decision(job, partial(decide, "revert", by=by))
    revert_done_children(reverting, by=by)
    return reverting


# Displayed fields -------------------------------------------------------------------------------

UPDATABLE = frozenset({"progress", "eta_at", "label", "external_ref", "wait_reason", "user_message"})


def _updated_value(name: str, value: Any) -> Any:
    if name == "progress":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 100:
            raise invalid(
                _("progress must be a number from 0 to 100, not %(value)s."), value=short_repr(value)
            )
        return round(value)
    if name == "eta_at":
        if value is not None and not (isinstance(value, datetime) and timezone.is_aware(value)):
            message = _("eta_at must be a timezone-aware datetime or None, not %(value)s.")
            raise invalid(message, value=short_repr(value))
        return value
    text = "" if value is None else str(value)
    if name in ("wait_reason", "user_message"):
        return shown_text(check_text(check_message(text, name), name))
    limit = concrete_field(Job, name).max_length
    if limit and len(text) > limit:
        message = _("%(field)s is %(length)s characters long; the limit is %(limit)s.")
        raise invalid(message, field=name, length=f"{len(text):,}", limit=limit)
    return check_text(text, name)


def update(job: JobRef, **fields: Any) -> Job:
    """Set displayed fields from outside the run (progress pushed by another system, a new label…).

    Never changes the status. Accepts only ``progress, eta_at, label, external_ref,
    wait_reason, user_message``.
    """
    unknown = sorted(set(fields) - UPDATABLE)
    if unknown:
        message = _("update() does not accept %(unknown)s; it accepts %(accepted)s.")
        raise invalid(message, unknown=", ".join(unknown), accepted=", ".join(sorted(UPDATABLE)))
    values = {name: _updated_value(name, value) for name, value in fields.items()}
    current = get_job(job)
    store.update_shown_fields(current, values)
    if isinstance(job, Job):
        job.refresh_from_db()
        return job
    return get_job(current.pk)


def run_again(job: JobRef, by: Any = None) -> Job:
    """Enqueue a copy of an ended job: its kind, subject, label, queue and place in a family, as
    a new job with attempts of its own. An idempotency key gets a new one beside it (the
    original's key followed by ``:again:`` and a random part), so the copy never folds into it."""
    current = get_job(job)
    if current.status not in TERMINAL:
        message = _("Job %(job)s has not ended; it cannot be run again yet.") % {"job": current.pk}
        raise JobError("job_not_ended", message)
    key = None
    if current.idempotency_key:
        suffix = f":again:{uuid.uuid4().hex[:12]}"
        key = current.idempotency_key[: 255 - len(suffix)] + suffix
    copy, _created = store.enqueue(
        current.kind,
        subject=current.subject,
        idempotency_key=key,
        created_by=by if getattr(by, "pk", None) is not None else None,
        actor_type=current.actor_type,
        group_id=current.group_id or None,
        subject_type=current.subject_type or None,
        subject_id=current.subject_id or None,
        label=current.label,
        parent=current.parent_id,
        queue=current.queue,
        priority=current.priority,
        concurrency_key=current.concurrency_key or None,
        timeout=current.timeout,
    )
    return copy
