"""Status changes made by operations, and what follows every committed change:
``job_changed``, a woken parent, a woken worker."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from django.db import transaction
from django.db.models import Count, F
from django.db.models.functions import Greatest
from django.utils import timezone

from ..conf import get_setting, jobs_database
from ..family import SETTLED
from ..models import Job, JobLog, JobStep
from ..status import StepState
from ..transitions import ATTEMPT_COUNTED, ATTEMPT_GIVEN_BACK, DUE_STATUSES, ONE_MORE_TRY, Marker
from . import sql, waking  # waking: a cycle (a change here may wake a job there)
from .announcing import announce_change
from .log import append_log, clean_log_line, log_each, trim_log

#: The PostgreSQL channel idle workers LISTEN on.
NOTIFY_CHANNEL = "durajobs"
#: How the store writes the transitions' values that depend on the row itself.
ROW_EXPRESSIONS = {
    ATTEMPT_COUNTED: F("attempt") + 1,
    ATTEMPT_GIVEN_BACK: Greatest(F("attempt") - 1, 0),
    ONE_MORE_TRY: Greatest(F("max_attempts"), F("attempt") + 1),
}


def written(fields: dict[str, Any]) -> dict[str, Any]:
    """``fields`` as the store writes them: a transition's row markers become SQL expressions."""
    return {
        name: ROW_EXPRESSIONS[value] if isinstance(value, Marker) else value for name, value in fields.items()
    }


def notify_due(queue: str) -> None:
    """Tell idle PostgreSQL workers a job of ``queue`` is due (delivered when the transaction commits)."""
    db = sql.database()
    if db.vendor == "postgresql":
        with db.cursor() as cursor:
            cursor.execute("SELECT pg_notify(%s, %s)", [NOTIFY_CHANNEL, queue])


def change_status(job: Job, fields: dict[str, Any], log_line: str, **expected: Any) -> bool:
    """Apply ``fields`` if the job still has the status it was read with (and ``expected``
    values), with ``log_line`` unless it is empty; False if it moved on."""
    fields = written(fields)
    with transaction.atomic(using=jobs_database()):
        unchanged = Job.objects.filter(pk=job.pk, status=job.status, **expected)
        changed = unchanged.update(updated_at=timezone.now(), **fields)
        if changed and log_line:
            append_log(job.pk, log_line)
            trim_log(job.pk)
        if changed and fields.get("status") in DUE_STATUSES:
            notify_due(job.queue)
    if changed:
        changed_to(job, job.status, fields.get("status", job.status), fields)
    return bool(changed)


def update_shown_fields(job: Job, values: dict[str, Any]) -> None:
    """Write displayed fields (progress, label…) that leave the status as it is, and announce it."""
    Job.objects.filter(pk=job.pk).update(updated_at=timezone.now(), **values)
    announce_change(job.pk, job.status, job.status, using=jobs_database())


def unmark_waiting_steps(job_ids: list[int]) -> None:
    """Steps a wait had marked (waiting, or needing a decision) go back to pending: their jobs
    no longer wait."""
    JobStep.objects.filter(job_id__in=job_ids, state__in=(StepState.WAITING, StepState.NEEDS_USER)).update(
        state=StepState.PENDING, detail=""
    )


class _MovedOn(Exception):
    """A job of a bulk change was no longer in the status it was decided from."""


def change_status_many(
    jobs: Sequence[Job], status: str, fields: dict[str, Any], log_line: str, **expected: Any
) -> bool:
    """Apply one decision's ``fields`` to ``jobs``, all read in ``status`` (and ``expected``
    values), with one log line each; False, and nothing written, if any of them moved on meanwhile.

    One conditional ``UPDATE`` for them all, their log lines in one insert, and only the logs
    over ``LOG_LINES_KEPT`` trimmed. The jobs (read with ``pk``, ``queue`` and ``parent_id``) get
    the plain values of ``fields`` set.
    """
    ids = [job.pk for job in jobs]
    now = timezone.now()
    line = clean_log_line(log_line)
    fields = written(fields)
    try:
        with transaction.atomic(using=jobs_database()):
            unchanged = Job.objects.filter(pk__in=ids, status=status, **expected)
            if unchanged.update(updated_at=now, **fields) != len(ids):
                raise _MovedOn
            log_each(ids, now, line)
            keep = get_setting("LOG_LINES_KEPT")
            long_logs = (
                JobLog.objects.filter(job_id__in=ids)
                .values("job_id")
                .annotate(lines=Count("id"))
                .filter(lines__gt=keep)
                .values_list("job_id", flat=True)
            )
            for job_id in list(long_logs):
                trim_log(job_id)
            if fields.get("status") in DUE_STATUSES:
                for queue in sorted({job.queue for job in jobs}):
                    notify_due(queue)
    except _MovedOn:
        return False
    for job in jobs:
        for name, value in fields.items():
            if not hasattr(value, "resolve_expression"):
                setattr(job, name, value)
        job.updated_at = now
    changed_many(jobs, status, fields.get("status", status), fields)
    return True


def changed_to(job: Job, previous: str | None, status: str, fields: dict[str, Any] | None = None) -> None:
    """What follows a committed change: ``job_changed``, and waking a parent whose children settled."""
    changed_many((job,), previous, status, fields)


def changed_many(
    jobs: Iterable[Job], previous: str | None, status: str, fields: dict[str, Any] | None = None
) -> None:
    """``changed_to`` for jobs that made one change together: each parent is woken once."""
    parents = set()
    for job in jobs:
        announce_change(job.pk, previous, status, using=jobs_database())
        if job.parent_id and status in SETTLED and status != previous:
            parents.add(job.parent_id)
        if fields and fields.get("waits_for_children"):
            # Children may have settled while this job was deciding to wait: look once more.
            waking.wake_parent(job.pk)
        if fields and fields.get("waits_for_event"):
            # Its event may have been sent while this job was deciding to wait: look once more.
            waking.wake_if_sent(job, fields["waits_for_event"])
    for parent_id in sorted(parents):
        waking.wake_parent(parent_id)
