"""Operations on many jobs at once, a batch at a time, and the cascades of an operation to a
job's children."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from django.db.models import QuerySet
from django.utils import timezone
from django.utils.translation import gettext as _

from .. import store
from ..errors import JobError
from ..models import Job
from ..status import Status
from .deciding import DECISION_COLUMNS, DECISIONS, apply_decision, decide, finished_steps, invalid


def revert_done_children(parent: Job, by: Any = None) -> int:
    """Revert a parent's done children that have a revert, each as a job of its own."""
    return _revert_done_children_of([parent.pk], by or _("parent job %(job)s") % {"job": parent.pk})


def after_cancel(jobs: list[Job], by: Any) -> None:
    """A cancelled job's step that a wait had marked is no longer waiting; its open children are
    cancelled too (those that settled meanwhile, or revert, are left alone)."""
    cancelled = [job.pk for job in jobs if job.status == Status.CANCELLED]
    if cancelled:
        store.unmark_waiting_steps(cancelled)
    apply_to_many("cancel", store.cancelled_children([job.pk for job in jobs]), by=by)


def _revert_done_children_of(parent_ids: list[int], by: Any) -> int:
    return apply_to_many("revert", store.reverted_children(parent_ids), by=by).changed


# Many jobs at once ------------------------------------------------------------------------------

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
        raise invalid(message, operation=repr(operation), operations=", ".join(DECISIONS))
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
    now = timezone.now()
    jobs = list(Job.objects.filter(pk__in=ids).only(*DECISION_COLUMNS).order_by("pk"))
    if len(jobs) < len(ids):
        outcome.refused["job_not_found"] += len(ids) - len(jobs)  # deleted meanwhile
    done = finished_steps(jobs) if operation == "revert" else {}
    # Jobs decided alike from one status change together: (status, log line, fields) -> jobs.
    alike: dict[tuple[str, str, str], tuple[dict[str, Any], list[Job]]] = {}
    for current in jobs:
        try:
            fields, line = decide(operation, current, now, by, done=done.get(current.pk), **arguments)
        except JobError as refusal:
            outcome.refused[refusal.code] += 1
            continue
        alike.setdefault((current.status, line, repr(sorted(fields.items()))), (fields, []))[1].append(
            current
        )
    changed: list[Job] = []
    for (status, line, _fields), (fields, group) in alike.items():
        if store.change_status_many(group, status, fields, line):
            changed += group
            continue
        for job in group:  # one of them moved on meanwhile: each decided again on its own
            try:
                fresh = apply_decision(job.pk, partial(decide, operation, by=by, **arguments))
            except JobError as refusal:
                outcome.refused[refusal.code] += 1
                continue
            job.status = fresh.status
            job.cancel_requested, job.pause_requested = fresh.cancel_requested, fresh.pause_requested
            changed.append(job)
    if operation == "cancel" and changed:
        after_cancel(changed, by)
    if operation == "revert" and changed:
        if by is None:  # each child's log names its parent
            for job in changed:
                revert_done_children(job)
        else:
            _revert_done_children_of([job.pk for job in changed], by)
    still_running = sum(1 for job in changed if job.status == Status.RUNNING)
    if operation == "cancel":
        outcome.cancel_requested += still_running
    if operation == "pause":
        outcome.pause_requested += still_running
    return changed
