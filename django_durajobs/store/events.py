"""Named events: sending one, and waking the jobs that wait for it.

The race between a job that starts waiting and a sender is closed from both sides, after each
side's own write committed: the sender wakes the waiters it sees once its event is committed,
and a job that parked looks for the event once its wait is committed. Whichever of the two
commits second sees the other's write (each looks with a statement that starts after its own
commit, which on every database reads what committed before it), so one of them wakes the job.
Both wake with an update conditional on the job still waiting for that event, so only one does.
A waiter whose wake-up was lost all the same (the sending process died between its commit and
its wake-up) is found by the workers' periodic ``wake_forgotten_event_waiters``. The wake-ups
themselves are ``waking.py``'s.
"""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import QuerySet
from django.utils.translation import gettext as _

from ..conf import jobs_database
from ..models import Event, Job
from ..status import Phase, Status
from ..values import to_event_name, to_event_payload
from . import waking  # a cycle (the wake-ups read the waiters here): imported whole


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
    transaction.on_commit(lambda: waking.wake_waiters(name), robust=True)
    return sent


def sent_event(name: str) -> Event | None:
    """The event ``name``, once its send committed; None until then."""
    return Event.objects.filter(name=name).first()


def waiters(name: str) -> QuerySet[Job]:
    """The jobs waiting for the event ``name``."""
    return Job.objects.filter(waits_for_event=name, status=Status.AWAITING_EXTERNAL, phase=Phase.RUN)
