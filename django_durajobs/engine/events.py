"""``ctx.wait_for_event()``: a job that waits for a named event, and what a timeout leaves behind.

A wait that timed out is recorded on the job (``timed_out_events``: how many of the run's waits
for each name did), so a run re-entered after it went on sees the same waits time out again and
takes the same way; a timeout the run did not catch is forgotten with the failed try, so a retry
waits afresh. The event and the wake-ups are the store's (``store/events.py``).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from ..errors import EventTimeout
from ..redaction import shown_text
from ..status import Status
from ..store import event_wait_reason
from ..values import label, to_event_name, to_timeout
from .interrupts import WaitInterrupt

if TYPE_CHECKING:
    from .context import JobContext
    from .ports import RunStore

EVENT_WAIT_TIMEOUT = gettext_lazy("The timeout of the wait for event %(name)s")


class WaitForEventInterrupt(WaitInterrupt):
    def __init__(self, name: str, resume_at: datetime | None) -> None:
        super().__init__(shown_text(event_wait_reason(name)), resume_at, Status.AWAITING_EXTERNAL)
        self.name = name


def wait_for_event(ctx: JobContext, lease: RunStore, name: str, timeout: float | timedelta | None) -> Any:
    """``ctx.wait_for_event()``, once the run may wait: the payload, ``EventTimeout``, or a wait."""
    name = to_event_name(name)
    seconds = to_timeout(timeout, label(EVENT_WAIT_TIMEOUT, {"name": name}))
    ctx.event_waits[name] += 1
    nth = ctx.event_waits[name]
    timed_out = dict(ctx.job.timed_out_events or {})
    if nth <= timed_out.get(name, 0):
        raise EventTimeout(name, nth)  # as it did when this run first got here
    woken_by_its_timeout = ctx.job.waits_for_event == name
    event = lease.sent_event(name)
    if event is not None:
        if woken_by_its_timeout:  # sent as its timeout woke the job: the event wins
            _no_longer_waiting(ctx, lease, timed_out)
        return event.payload
    if woken_by_its_timeout:
        timed_out[name] = nth
        _no_longer_waiting(ctx, lease, timed_out)
        ctx.log(_("The wait for event %(name)s timed out.") % {"name": name})
        raise EventTimeout(name, nth)
    resume_at = None if seconds is None else timezone.now() + timedelta(seconds=seconds)
    raise WaitForEventInterrupt(name, resume_at)


def without_timeout(timed_out: dict[str, int] | None, timeout: EventTimeout) -> dict[str, int] | None:
    """The job's record of timed-out waits once the run let ``timeout`` end it: the try failed
    at that wait, which a retry makes again."""
    record = dict(timed_out or {})
    if record.get(timeout.event_name) == timeout.nth:
        record[timeout.event_name] = timeout.nth - 1
    return {name: count for name, count in record.items() if count} or None


def _no_longer_waiting(ctx: JobContext, lease: RunStore, timed_out: dict[str, int]) -> None:
    ctx.job.waits_for_event, ctx.job.timed_out_events = "", timed_out or None
    lease.renew(waits_for_event="", timed_out_events=ctx.job.timed_out_events)
