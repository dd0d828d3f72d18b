"""The operations on a job: check that its status allows the transition, then apply it.

Every transition is conditional on the status it was decided from, so an operator's click and
a worker's outcome never overwrite each other: the loser re-reads and decides again. Each
operation's decision is a function of its own (``decide_resume``, ``decide_retry``…), shared by
the single-job operation and its bulk form ``apply_to_many``.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import Any

from asgiref.sync import sync_to_async
from django.db.models import QuerySet
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from . import store
from .answers import ANSWERED, UNANSWERED, chosen_label
from .conf import get_setting
from .errors import JobError
from .models import ACTION_ID_MAX_LENGTH, Job
from .redaction import shown_text
from .registry import has_revert, known_kinds
from .status import TERMINAL, Phase, Status
from .store.sql import concrete_field
from .transitions import Event, NotAllowed, Transition, allows, described, sources, transition
from .values import check_message, check_text, short_repr, to_job_id, to_json

JobRef = Job | int
Decision = tuple[dict[str, Any], str]


def get_job(job: JobRef) -> Job:
    """The job's current row; ``JobError("job_not_found")`` when there is none."""
    pk = to_job_id(job)
    found = Job.objects.filter(pk=pk).first()
    if found is None:
        raise JobError("job_not_found", _("Job %(job)s does not exist.") % {"job": pk})
    return found


def _invalid(message: str, **values: Any) -> JobError:
    """An ``invalid_input`` refusal: the translated ``message`` with its placeholders filled in."""
    return JobError("invalid_input", message % values)


def actor_name(by: Any) -> str:
    if by is None:
        return "system"
    if hasattr(by, "get_username"):
        return by.get_username()
    return str(by)


def _transition(job: JobRef, decide: Callable[[Job, datetime], Decision]) -> Job:
    """Apply ``decide(current, now)`` if the status is still the one decided from; retry on a race."""
    for _attempt in range(10):
        current = get_job(job)
        fields, log_line = decide(current, timezone.now())
        if store.change_status(current, fields, log_line):
            break
    else:
        raise JobError("job_busy", _("Job %(job)s kept changing; try again.") % {"job": current.pk})
    if isinstance(job, Job):
        job.refresh_from_db()
        return job
    return get_job(current.pk)


#: Each operation's refusal of a job its status does not allow: its code, and its message.
REFUSAL_CODES = {
    Event.RESUME: "job_not_resumable",
    Event.RETRY: "job_not_retryable",
    Event.PAUSE: "job_not_pausable",
    Event.CANCEL: "job_not_cancellable",
    Event.REVERT: "job_not_revertible",
}
REFUSALS = {
    Event.RESUME: gettext_lazy("Job %(job)s is %(status)s; only %(allowed)s jobs can be resumed."),
    Event.RETRY: gettext_lazy("Job %(job)s is %(status)s; only %(allowed)s jobs can be retried."),
    Event.PAUSE: gettext_lazy("Job %(job)s is %(status)s; only %(allowed)s jobs can be paused."),
    Event.CANCEL: gettext_lazy("Job %(job)s is %(status)s; only %(allowed)s jobs can be cancelled."),
    Event.REVERT: gettext_lazy("Job %(job)s is %(status)s; only %(allowed)s jobs can be reverted."),
}


def _allowed(event: Event, current: Job, also: Event | None = None) -> Transition:
    """The event's transition for ``current`` as read; its ``REFUSALS`` entry when its status refuses it."""
    try:
        return transition(event, current.phase, current.status)
    except NotAllowed:
        allowed = described(event, *filter(None, [also]))
        shown = dict(job=current.pk, status=current.status, allowed=allowed)
        raise JobError(REFUSAL_CODES[event], REFUSALS[event] % shown) from None


# The decisions: what each operation does to a job as read, at ``now`` -----------------------------
# Each reads only the columns in DECISION_COLUMNS, and what it sets is the same for every job it
# allows in one status (a per-row value is an SQL expression), so many jobs change in one UPDATE.

#: What a decision reads of a job: never its subject or results.
DECISION_COLUMNS = ("id", "label", "kind", "status", "phase", "queue", "parent_id", "actions")


def decide_resume(
    current: Job, now: datetime, by: Any, action: str | None = None, data: Any = None
) -> Decision:
    resumed = _allowed(Event.RESUME, current)
    offered = [entry["id"] for entry in current.actions or []]
    shown = dict(job=current.pk, actions=", ".join(offered), action=repr(action), actor=actor_name(by))
    if action is None and offered and current.status == Status.NEEDS_USER:
        message = _("Job %(job)s asks a question; resume it with one of its answers: %(actions)s.")
        raise JobError("invalid_input", message % shown)
    if action is not None and action not in offered:
        if not offered:
            raise _invalid(_("Job %(job)s offers no actions; resume it without one."), **shown)
        raise _invalid(
            _("Job %(job)s offers the actions %(actions)s; %(action)s is not one of them."), **shown
        )
    fields = resumed.values(now, resume_action=action or "", resume_data=data)
    if action:
        return fields, str(ANSWERED % {**shown, "action": repr(chosen_label(current.actions, action))})
    return fields, _("Resumed by %(actor)s.") % shown


def decide_retry(current: Job, now: datetime, by: Any) -> Decision:
    retried = _allowed(Event.RETRY, current)
    actor = {"actor": actor_name(by)}
    if current.phase == Phase.REVERT:
        return retried.values(now), _("Revert retried by %(actor)s.") % actor
    return retried.values(now), _("Retried by %(actor)s.") % actor


def decide_pause(current: Job, now: datetime, by: Any) -> Decision:
    actor = {"actor": actor_name(by)}
    if allows(Event.REQUEST_PAUSE, current.phase, current.status):
        fields = transition(Event.REQUEST_PAUSE, current.phase).values(now)
        return fields, _("Pause requested by %(actor)s; it pauses at its next step.") % actor
    paused = _allowed(Event.PAUSE, current, also=Event.REQUEST_PAUSE)
    return paused.values(now), _("Paused by %(actor)s.") % actor


def decide_cancel(current: Job, now: datetime, by: Any) -> Decision:
    actor = {"actor": actor_name(by)}
    if allows(Event.REQUEST_CANCEL, current.phase, current.status):
        fields = transition(Event.REQUEST_CANCEL, current.phase).values(now)
        return fields, _("Cancel requested by %(actor)s; it stops at its next step.") % actor
    if current.status == Status.REVERTING:
        message = _("Job %(job)s is reverting; a revert cannot be cancelled.") % {"job": current.pk}
        raise JobError("job_not_cancellable", message)
    cancelled = _allowed(Event.CANCEL, current, also=Event.REQUEST_CANCEL)
    return cancelled.values(now), _("Cancelled by %(actor)s.") % actor


def decide_revert(current: Job, now: datetime, by: Any) -> Decision:
    if not has_revert(current.kind):
        message = _("Job %(job)s (%(kind)s) has no revert.") % {"job": current.pk, "kind": current.kind}
        raise JobError("job_not_revertible", message)
    reverted = _allowed(Event.REVERT, current)
    return reverted.values(now), _("Revert requested by %(actor)s.") % {"actor": actor_name(by)}


# The operations on one job ------------------------------------------------------------------------


def resume(job: JobRef, by: Any = None, action: str | None = None, data: Any = None) -> Job:
    """Queue a waiting job again; the re-entered run sees ``ctx.resume_action``/``ctx.resume_data``.

    A question with offered answers is resumed with one of them; a job that offered none, without one.
    """
    if action is not None and (not isinstance(action, str) or not action):
        raise _invalid(_("An action must be a non-empty string, not %(value)s."), value=short_repr(action))
    if action is not None:
        check_text(action, _("The action"))
        if len(action) > ACTION_ID_MAX_LENGTH:
            message = _("An action is at most %(limit)s characters long, not %(length)s.")
            raise _invalid(message, limit=ACTION_ID_MAX_LENGTH, length=len(action))
    data = to_json(
        data,
        what=_("The resume data"),
        max_bytes=get_setting("MAX_RESUME_DATA_BYTES"),
        setting="MAX_RESUME_DATA_BYTES",
    )
    return _transition(job, partial(decide_resume, by=by, action=action, data=data))


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


def wake(job_id: int) -> bool:
    """Queue a job whose timed wait is over, or whose question's deadline passed (answered with
    its ``on_deadline`` action); False if it is no longer due (resumed, answered, cancelled…)."""

    def decide(current: Job, now: datetime) -> Decision:
        due = current.next_run_at is not None and current.next_run_at <= now
        if due and allows(Event.WAKE, current.phase, current.status):
            # Its run logs what it finds (a timed wait checked again is logged once): no line here.
            return transition(Event.WAKE, current.phase).values(now), ""
        if due and current.on_deadline and allows(Event.DEADLINE, current.phase, current.status):
            action = current.on_deadline
            fields = transition(Event.DEADLINE, current.phase).values(now, resume_action=action)
            return fields, str(UNANSWERED % {"action": repr(chosen_label(current.actions, action))})
        raise JobError("job_not_resumable", _("No longer a due timed wait."))

    try:
        _transition(job_id, decide)
    except JobError:
        return False
    return True


#: The statuses a job wakes from by itself when its ``next_run_at`` comes.
WAKES_BY_ITSELF = sources(Event.WAKE) | sources(Event.DEADLINE)


def wake_due_waits(limit: int = 1000) -> int:
    """Queue every waiting job whose ``resume_at`` has passed, and resolve every question whose
    deadline has; returns how many."""
    due = Job.objects.filter(status__in=WAKES_BY_ITSELF, next_run_at__lte=timezone.now())
    due_ids = due.values_list("pk", flat=True)
    return sum(1 for job_id in list(due_ids[:limit]) if wake(job_id))


def retry(job: JobRef, by: Any = None) -> Job:
    """Queue a failed (or needs-user) job again, allowing it one more attempt."""
    return _transition(job, partial(decide_retry, by=by))


def pause(job: JobRef, by: Any = None) -> Job:
    """Hold a queued or externally waiting job until it is resumed; a running job is asked to
    pause at its next step, its finished steps kept."""
    return _transition(job, partial(decide_pause, by=by))


def cancel(job: JobRef, by: Any = None) -> Job:
    """Cancel at once when queued or waiting; a running job is asked to stop at its next step.

    Its child jobs are cancelled with it: those not started at once, running ones at their next step.
    """
    cancelled = _transition(job, partial(decide_cancel, by=by))
    _after_cancel([cancelled], by)
    return cancelled


def revert(job: JobRef, by: Any = None) -> Job:
    """Queue the kind's revert; a worker (or ``drain()``) carries it out."""
    reverting = _transition(job, partial(decide_revert, by=by))
    revert_done_children(reverting, by=by)
    return reverting


def revert_done_children(parent: Job, by: Any = None) -> int:
    """Revert a parent's done children that have a revert, each as a job of its own."""
    return _revert_done_children_of([parent.pk], by or _("parent job %(job)s") % {"job": parent.pk})


def _after_cancel(jobs: list[Job], by: Any) -> None:
    """A cancelled job's step that a wait had marked is no longer waiting; its open children are
    cancelled too (those that settled meanwhile, or revert, are left alone)."""
    cancelled = [job.pk for job in jobs if job.status == Status.CANCELLED]
    if cancelled:
        store.unmark_waiting_steps(cancelled)
    children = Job.objects.unfinished().filter(parent_id__in=[job.pk for job in jobs])
    apply_to_many("cancel", children, by=by)


def _revert_done_children_of(parent_ids: list[int], by: Any) -> int:
    with_revert = [name for name in known_kinds() if has_revert(name)]
    children = Job.objects.done().filter(parent_id__in=parent_ids, kind__in=with_revert)
    return apply_to_many("revert", children, by=by).changed


# Many jobs at once ------------------------------------------------------------------------------

DECISIONS: dict[str, Callable[..., Decision]] = {
    "resume": decide_resume,
    "retry": decide_retry,
    "pause": decide_pause,
    "cancel": decide_cancel,
    "revert": decide_revert,
}
SINGLE: dict[str, Callable[..., Job]] = {
    "resume": resume,
    "retry": retry,
    "pause": pause,
    "cancel": cancel,
    "revert": revert,
}

#: Jobs read, decided and changed together by ``apply_to_many``: one transaction each.
BATCH_SIZE = 500


@dataclass
class BulkOutcome:
    """What ``apply_to_many`` did: how many jobs changed, and how many were refused, by ``JobError`` code."""

    changed: int = 0
    refused: Counter[str] = field(default_factory=Counter)
    #: Of the changed jobs, the running ones a cancel only asked to stop at their next step.
    cancel_requested: int = 0
    #: Of the changed jobs, the running ones a pause only asked to pause at their next step.
    pause_requested: int = 0


def id_batches(jobs: QuerySet | Iterable[int], size: int = BATCH_SIZE) -> Iterator[list[int]]:
    """The ids of ``jobs`` in lists of at most ``size``; a queryset is read a batch at a time, by id."""
    if not isinstance(jobs, QuerySet):
        ids = list(dict.fromkeys(jobs))
        yield from (ids[start : start + size] for start in range(0, len(ids), size))
        return
    ordered_ids = jobs.order_by("pk").values_list("pk", flat=True)
    last = None
    while batch := list((ordered_ids if last is None else ordered_ids.filter(pk__gt=last))[:size]):
        yield batch
        last = batch[-1]


def apply_to_many(
    operation: str,
    jobs: QuerySet | Iterable[int],
    by: Any = None,
    *,
    after_batch: Callable[[list[Job]], None] | None = None,
    **arguments: Any,
) -> BulkOutcome:
    """Apply an operation (``"resume"``, ``"retry"``, ``"pause"``, ``"cancel"``, ``"revert"``) to
    every job of a queryset or a list of ids, a batch at a time, in bounded memory.

    Each job is decided as the single operation decides it; the allowed ones change in one
    statement per batch and decision, the refused ones are counted by code. A job that changed
    meanwhile is decided again on its own. ``after_batch(jobs)`` gets each batch's changed jobs
    (id, label and status read) once they are committed. ``arguments`` are the operation's own
    (``action``, ``data`` for resume).

    >>> apply_to_many("retry", Job.objects.failed(), by=request.user)
    BulkOutcome(changed=19990, refused=Counter({'job_not_retryable': 10}), ...)
    """
    if operation not in DECISIONS:
        message = _("No operation %(operation)s; one of %(operations)s.")
        raise _invalid(message, operation=repr(operation), operations=", ".join(DECISIONS))
    outcome = BulkOutcome()
    for batch in id_batches(jobs):
        changed = _apply_to_batch(operation, batch, by, arguments, outcome)
        outcome.changed += len(changed)
        if changed and after_batch is not None:
            after_batch(changed)
    return outcome


def _apply_to_batch(
    operation: str, ids: list[int], by: Any, arguments: dict[str, Any], outcome: BulkOutcome
) -> list[Job]:
    """Decide each job of one batch, change the allowed ones (with their cascades), count the
    refused ones in ``outcome``; returns the jobs changed."""
    decide = DECISIONS[operation]
    now = timezone.now()
    jobs = list(Job.objects.filter(pk__in=ids).only(*DECISION_COLUMNS).order_by("pk"))
    if len(jobs) < len(ids):
        outcome.refused["job_not_found"] += len(ids) - len(jobs)  # deleted meanwhile
    # Jobs decided alike from one status change together: (status, log line, fields) -> jobs.
    alike: dict[tuple[str, str, str], tuple[dict[str, Any], list[Job]]] = {}
    for current in jobs:
        try:
            fields, line = decide(current, now, by, **arguments)
        except JobError as refusal:
            outcome.refused[refusal.code] += 1
            continue
        alike.setdefault((current.status, line, repr(sorted(fields.items()))), (fields, []))[1].append(
            current
        )
    changed: list[Job] = []
    together: list[Job] = []
    for (status, line, _fields), (fields, group) in alike.items():
        if store.change_status_many(group, status, fields, line):
            together += group
            continue
        for job in group:  # one of them moved on meanwhile: each decided again on its own
            try:
                fresh = SINGLE[operation](job.pk, by=by, **arguments)
            except JobError as refusal:
                outcome.refused[refusal.code] += 1
                continue
            job.status = fresh.status
            job.cancel_requested, job.pause_requested = fresh.cancel_requested, fresh.pause_requested
            changed.append(job)
    if operation == "cancel" and together:
        _after_cancel(together, by)
    if operation == "revert" and together:
        if by is None:  # each child's log names its parent
            for job in together:
                revert_done_children(job)
        else:
            _revert_done_children_of([job.pk for job in together], by)
    changed += together
    still_running = sum(1 for job in changed if job.status == Status.RUNNING)
    if operation == "cancel":
        outcome.cancel_requested += still_running
    if operation == "pause":
        outcome.pause_requested += still_running
    return changed


# Displayed fields -------------------------------------------------------------------------------

UPDATABLE = frozenset({"progress", "eta_at", "label", "external_ref", "wait_reason", "user_message"})


def _updated_value(name: str, value: Any) -> Any:
    if name == "progress":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 100:
            raise _invalid(
                _("progress must be a number from 0 to 100, not %(value)s."), value=short_repr(value)
            )
        return round(value)
    if name == "eta_at":
        if value is not None and not (isinstance(value, datetime) and timezone.is_aware(value)):
            message = _("eta_at must be a timezone-aware datetime or None, not %(value)s.")
            raise _invalid(message, value=short_repr(value))
        return value
    text = "" if value is None else str(value)
    if name in ("wait_reason", "user_message"):
        return shown_text(check_text(check_message(text, name), name))
    limit = concrete_field(Job, name).max_length
    if limit and len(text) > limit:
        message = _("%(field)s is %(length)s characters long; the limit is %(limit)s.")
        raise _invalid(message, field=name, length=f"{len(text):,}", limit=limit)
    return check_text(text, name)


def update(job: JobRef, **fields: Any) -> Job:
    """Set displayed fields from outside the run (progress pushed by another system, a new label…).

    Never changes the status. Accepts only ``progress, eta_at, label, external_ref,
    wait_reason, user_message``.
    """
    unknown = sorted(set(fields) - UPDATABLE)
    if unknown:
        message = _("update() does not accept %(unknown)s; it accepts %(accepted)s.")
        raise _invalid(message, unknown=", ".join(unknown), accepted=", ".join(sorted(UPDATABLE)))
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
