"""The engine's own transitions, applied here alone, each as the transitions table says: a timed
wait woken, a question's deadline passed (``WAKE``, ``DEADLINE``), a parent's children settled
(``CHILDREN_SETTLED``), an event sent (``EVENT_SENT``), a held job given back by its stopping or
lost worker (``RELEASE``, or ``WORKER_LOST`` once it was lost too often).

Each is a conditional write: a job that moved on meanwhile (resumed, answered, cancelled, woken
by the other side of a race) is left alone, so two wake-ups of one job make one change.
"""

from __future__ import annotations

import logging
from collections import Counter
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from .. import family
from ..answers import UNANSWERED, chosen_label
from ..conf import get_setting, jobs_database
from ..models import Event, Job, JobStep
from ..status import Phase, Status, StepState
from ..transitions import WAKES_BY_ITSELF, Trigger, allows, transition
from . import changes, events, sql  # cycles (a change there may wake a job here): imported whole
from .family import children_counts, forgotten_parents, settled_parents
from .log import append_log

logger = logging.getLogger("django_durajobs")

#: Waiting jobs woken together: one conditional update and one log insert per batch.
WAKE_BATCH = 500
#: Reads of a job a timed wake-up makes before it gives up on one that keeps changing.
WAKE_READS = 10


# A timed wait, a question's deadline ------------------------------------------------------------


def timed_wake(current: Job, now: datetime) -> tuple[dict[str, Any], str] | None:
    """The fields and log line of ``current``'s wake-up by its ``next_run_at``; None if not due."""
    if current.next_run_at is None or current.next_run_at > now:
        return None
    if allows(Trigger.WAKE, current.phase, current.status):
        # Its run logs what it finds (a timed wait checked again is logged once): no line here.
        return transition(Trigger.WAKE, current.phase).values(now), ""
    if current.on_deadline and allows(Trigger.DEADLINE, current.phase, current.status):
        action = current.on_deadline
        fields = transition(Trigger.DEADLINE, current.phase).values(now, resume_action=action)
        return fields, str(UNANSWERED % {"action": repr(chosen_label(current.actions, action))})
    return None


def wake(job_id: int) -> bool:
    """Queue a job whose timed wait is over, or whose question's deadline passed (answered with
    its ``on_deadline`` action); False if it is no longer due (resumed, answered, cancelled…)."""
    for _read in range(WAKE_READS):
        current = Job.objects.filter(pk=job_id).first()
        woken = None if current is None else timed_wake(current, timezone.now())
        if current is None or woken is None:
            return False
        if changes.change_status(current, *woken):
            return True
    return False


def wake_due_waits(limit: int = 1000) -> int:
    """Queue up to ``limit`` waiting jobs whose ``resume_at`` has passed, and resolve the questions
    whose deadline has, the longest overdue first; returns how many."""
    db = sql.database()
    due_ids = sql.fetch(db, _due_waits(db), [sql.prepared_datetime(db, timezone.now()), limit])
    return sum(1 for (job_id,) in due_ids if wake(job_id))


def _due_waits(db: BaseDatabaseWrapper) -> sql.Statement:
    """The ids of the due timed waits, read from ``durajobs_timed`` in the order they came due.

    The index holds the waiting jobs alone, so a pass, every poll interval, costs the same beside
    a million jobs waiting for later as beside a hundred. Its statuses are written into the
    statement as the index's condition names them: SQLite reads a partial index only for a
    condition it finds word for word, not one with parameters.
    """

    def make() -> str:
        quote = db.ops.quote_name
        return (
            f"SELECT {quote('id')} FROM {sql.table(db, Job)} WHERE {quote('next_run_at')} <= %s "
            f"AND {sql.status_in(db, WAKES_BY_ITSELF)} "
            f"ORDER BY {quote('next_run_at')}, {quote('id')} LIMIT %s"
        )

    return sql.statement(db, ("due waits",), make)


# A parent's children settled --------------------------------------------------------------------


def wake_parent(parent_id: int) -> bool:
    """Wake a parent waiting for its children once none is open; True for the one call that does.

    Each child calls this after its own change committed, so the last one to settle sees the
    others settled; two settling at once may both try, and the update conditional on
    ``waits_for_children`` lets exactly one succeed. While a child is open this is one indexed
    statement, however many children settled: the parent's row is left as it is (the screens
    count its children as they show it, ``family.shown_wait_reason``); the one that wakes it
    counts them once, for its log line.
    """
    parent = settled_parents().filter(pk=parent_id).first()
    if parent is None:
        return False
    counts = children_counts([parent_id]).get(parent_id, Counter())
    woken = family.parent_woken(parent.phase, parent.status, counts)  # a child may be open again
    if woken is None:
        return False
    line = family.settled_line(parent.phase, sum(counts.values()))
    woke = changes.change_status(parent, woken.values(timezone.now()), line, waits_for_children=True)
    if woke and parent.status == Status.REVERTING:
        changes.notify_due(parent.queue)
    return woke


def wake_forgotten_parents(limit: int = 100) -> int:
    """Wake parents whose children all settled but whose wake-up was missed (a settle inside a
    caller's transaction that committed late); workers run this now and then."""
    return sum(wake_parent(pk) for pk in forgotten_parents(limit))


# An event sent -----------------------------------------------------------------------------------


def wake_waiters(name: str) -> int:
    """Queue every job waiting for the event ``name``, a batch at a time; returns how many."""
    woken = 0
    line = _("Event %(name)s was sent; queued again.") % {"name": name}
    while batch := list(events.waiters(name).only("id", "status", "queue", "parent_id")[:WAKE_BATCH]):
        fields = transition(Trigger.EVENT_SENT, Phase.RUN).values(timezone.now())
        if changes.change_status_many(batch, Status.AWAITING_EXTERNAL, fields, line, waits_for_event=name):
            woken += len(batch)
            continue
        # One of them moved on meanwhile (cancelled, woken by its timeout): each on its own.
        woken += sum(
            changes.change_status(job, fields, line, waits_for_event=name, phase=Phase.RUN) for job in batch
        )
    return woken


def wake_if_sent(job: Job, name: str) -> bool:
    """Wake a job that has just parked to wait for ``name``, if the event was sent meanwhile."""
    if not Event.objects.filter(name=name).exists():
        return False
    fields = transition(Trigger.EVENT_SENT, Phase.RUN).values(timezone.now())
    parked = Job(pk=job.pk, status=Status.AWAITING_EXTERNAL, queue=job.queue, parent_id=job.parent_id)
    line = _("Event %(name)s was sent as the job began to wait; queued again.") % {"name": name}
    return changes.change_status(parked, fields, line, waits_for_event=name, phase=Phase.RUN)


def wake_forgotten_event_waiters(limit: int = 100) -> int:
    """Wake jobs waiting for an event that was sent but whose wake-up was lost; workers run this
    now and then."""
    sent = Event.objects.filter(name=OuterRef("waits_for_event"))
    forgotten = Job.objects.filter(status=Status.AWAITING_EXTERNAL, phase=Phase.RUN).exclude(
        waits_for_event=""
    )
    names = forgotten.filter(Exists(sent)).values_list("waits_for_event", flat=True).distinct()
    return sum(wake_waiters(name) for name in list(names.order_by()[:limit]))


# A held job given back ---------------------------------------------------------------------------


def release(job: Job, why: str, extra: Q | None = None) -> int:
    """Give a held job back to the queue (to resume after its last finished step); 1 if it was.

    It keeps its place: the next claim of its priority takes it before any job that has not
    started, whatever the backlog (the transitions table's ``RELEASE``).

    ``why`` is ``"lost"`` (its worker died or lost its lease: counts towards
    ``MAX_WORKER_LOSSES``) or ``"stopping"`` (its worker is shutting down: counts nothing).
    The update is fenced by the job's lease token as it was read, so a job that changed hands
    meanwhile is left alone.
    """
    now = timezone.now()
    losses = job.worker_losses + (why == "lost")
    unlock = dict(locked_by="", locked_at=None, lease_token="", updated_at=now, worker_losses=losses)
    fields, line = _given_back(job, why, losses, now)
    status = fields["status"]
    with transaction.atomic(using=jobs_database()):
        fence = Job.objects.held().filter(pk=job.pk, lease_token=job.lease_token)
        if extra is not None:
            fence = fence.filter(extra)
        if not fence.update(**unlock, **fields):
            return 0
        JobStep.objects.filter(job_id=job.pk, state=StepState.RUNNING).update(
            state=StepState.PENDING,
            detail=_("Interrupted: its worker was lost.")
            if why == "lost"
            else _("Interrupted: its worker stopped."),
        )
        append_log(job.pk, line)
        if status != Status.FAILED:
            changes.notify_due(job.queue)
    logger.warning("Job %s: %s", job.pk, line)
    changes.changed_to(job, job.status, status)
    return 1


def _given_back(job: Job, why: str, losses: int, now: datetime) -> tuple[dict[str, Any], str]:
    """The fields and log line of a held job given back: ``RELEASE``, or ``WORKER_LOST`` once its
    worker was lost ``MAX_WORKER_LOSSES`` times."""
    if why == "lost" and losses >= get_setting("MAX_WORKER_LOSSES"):
        error = ngettext(
            "The worker running this job was lost %(count)s time; it is not handed to another one.",
            "The worker running this job was lost %(count)s times; it is not handed to another one.",
            losses,
        ) % {"count": losses}
        fields = transition(Trigger.WORKER_LOST, job.phase).values(now, error=error)
        line = ngettext(
            "Worker %(worker)s lost; the job failed after %(count)s lost worker.",
            "Worker %(worker)s lost; the job failed after %(count)s lost workers.",
            losses,
        ) % {"worker": job.locked_by, "count": losses}
        return fields, line
    fields = changes.written(transition(Trigger.RELEASE, job.phase).values(now))
    if why == "lost":
        line = _("Worker %(worker)s lost; the job resumes after its last finished step.") % {
            "worker": job.locked_by
        }
    else:
        line = _("Worker %(worker)s stopped; the job resumes after its last finished step.") % {
            "worker": job.locked_by
        }
    return fields, line
