"""Named events: sending one, and waking the jobs that wait for it.

The race between a job that starts waiting and a sender is closed from both sides, after each
side's own write committed: the sender wakes the waiters it sees once its event is committed,
and a job that parked looks for the event once its wait is committed. Whichever of the two
commits second sees the other's write (each looks with a statement that starts after its own
commit, which on every database reads what committed before it), so one of them wakes the job.
Both wake with an update conditional on the job still waiting for that event, so only one does.
A waiter whose wake-up was lost all the same (the sending process died between its commit and
its wake-up) is found by the workers' periodic ``wake_forgotten_event_waiters``.
"""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Exists, OuterRef, QuerySet
from django.utils import timezone
from django.utils.translation import gettext as _

from ..conf import jobs_database
from ..models import Event, Job
from ..status import Phase, Status
from ..transitions import Trigger, transition
from ..values import to_event_name, to_event_payload
from . import changes  # a cycle (a parked job looks for its event through changes): imported whole

#: Waiting jobs woken together: one conditional update and one log insert per batch.
WAKE_BATCH = 500


def event_wait_reason(name: str) -> str:
    return _("Waiting for event %(name)s") % {"name": name}


def send_event(name: str, payload: Any = None, *, sent_by: str = "") -> bool:
    """Store the event ``name`` with ``payload`` and wake every job waiting for it; False, and
    nothing changed, when the name was sent before (the first send wins).

    Inside a transaction, the event is sent when the transaction commits, and not at all if it
    rolls back; the waiting jobs are woken once it committed (a wake-up that fails then is
    logged, and made later by the workers).
    """
    name = to_event_name(name)
    payload = to_event_payload(payload)
    try:
        with transaction.atomic(using=jobs_database()):
            Event.objects.create(name=name, payload=payload, sent_by=sent_by[:255])
        sent = True
    except IntegrityError:
        if not Event.objects.filter(name=name).exists():
            raise  # not the name taken: something else is wrong
        sent = False
    # A repeated send wakes nobody new, but mends a wake-up its first send did not get to make.
    transaction.on_commit(lambda: wake_waiters(name), robust=True)
    return sent


def sent_event(name: str) -> Event | None:
    """The event ``name``, once its send committed; None until then."""
    return Event.objects.filter(name=name).first()


def waiters(name: str) -> QuerySet[Job]:
    """The jobs waiting for the event ``name``."""
    return Job.objects.filter(waits_for_event=name, status=Status.AWAITING_EXTERNAL, phase=Phase.RUN)


def wake_waiters(name: str) -> int:
    """Queue every job waiting for the event ``name``, a batch at a time; returns how many."""
    woken = 0
    line = _("Event %(name)s was sent; queued again.") % {"name": name}
    while batch := list(waiters(name).only("id", "status", "queue", "parent_id")[:WAKE_BATCH]):
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
