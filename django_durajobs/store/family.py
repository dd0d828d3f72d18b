"""Parents and children: how many children are open, and waking a parent once they all settled."""

from __future__ import annotations

from django.db.models import Count, Exists, OuterRef
from django.utils import timezone
from django.utils.translation import ngettext

from ..models import Job
from ..status import SETTLED, Phase, Status
from ..transitions import Trigger, allows, sources, transition
from . import changes  # a cycle (every change made there may wake a parent here): imported whole


def open_children(parent_id: int) -> tuple[int, int]:
    """``(still open, total)`` children of a job."""
    counts = dict(
        Job.objects.filter(parent_id=parent_id).values_list("status").annotate(n=Count("id")).order_by()
    )
    total = sum(counts.values())
    return total - sum(n for status, n in counts.items() if status in SETTLED), total


def children_of(parent_id: int) -> list[Job]:
    """A job's children, oldest first, with what a summary of them (and a parent's revert) reads."""
    columns = ("id", "label", "status", "phase", "subject", "error", "attempt", "next_run_at")
    return list(Job.objects.filter(parent_id=parent_id).order_by("created_at", "id").only(*columns))


def children_wait_reason(still_open: int, total: int) -> str:
    return ngettext(
        "Waiting for %(open)s of %(total)s child job", "Waiting for %(open)s of %(total)s child jobs", total
    ) % {"open": still_open, "total": total}


def wake_parent(parent_id: int) -> bool:
    """Wake a parent waiting for its children once none is open; True for the one call that does.

    Each child calls this after its own change committed, so the last one to settle sees the
    others settled; two settling at once may both try, and the update conditional on
    ``waits_for_children`` lets exactly one succeed.
    """
    parent = Job.objects.filter(pk=parent_id, waits_for_children=True).first()
    if parent is None or not allows(Trigger.CHILDREN_SETTLED, parent.phase, parent.status):
        return False
    still_open, total = open_children(parent_id)
    if still_open:
        Job.objects.filter(pk=parent_id, waits_for_children=True).update(
            wait_reason=children_wait_reason(still_open, total)
        )
        return False
    fields = transition(Trigger.CHILDREN_SETTLED, parent.phase, parent.status).values(timezone.now())
    if parent.phase == Phase.REVERT:
        settled = ngettext(
            "The %(total)s child job has settled; its revert goes on.",
            "All %(total)s child jobs have settled; its revert goes on.",
            total,
        )
    else:
        settled = ngettext(
            "The %(total)s child job has settled; queued again.",
            "All %(total)s child jobs have settled; queued again.",
            total,
        )
    line = settled % {"total": total}
    woke = changes.change_status(parent, fields, line, waits_for_children=True)
    if woke and parent.status == Status.REVERTING:
        changes.notify_due(parent.queue)
    return woke


def wake_forgotten_parents(limit: int = 100) -> int:
    """Wake parents whose children all settled but whose wake-up was missed (a settle inside a
    caller's transaction that committed late); workers run this now and then."""
    open_child = Job.objects.unsettled().filter(parent_id=OuterRef("pk"))
    forgotten = Job.objects.filter(
        waits_for_children=True, status__in=sources(Trigger.CHILDREN_SETTLED)
    ).exclude(Exists(open_child))
    return sum(wake_parent(pk) for pk in forgotten.values_list("pk", flat=True)[:limit])
