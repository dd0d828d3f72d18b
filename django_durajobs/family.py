"""Parents and their child jobs: every rule about them, pure (no database), in one place.

Which children count as settled (a parent waiting for them wakes once none is open), what a
family's outcome reads as, which children a parent's retry, cancel or revert takes along, what
a waiting parent's reason says and what it becomes once its children settled. ``store/family.py``
reads and writes the children's rows by these rules, ``store/waking.py`` wakes the parent; the
engine, the operations and the screens ask here rather than name statuses of their own.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from django.utils.translation import ngettext

from .status import TERMINAL, Phase, Status
from .transitions import Transition, Trigger, allows, sources, transition

#: A child in one of these has settled without success: nothing more happens to it unless
#: someone acts, and its family does not read as done.
SETTLED_UNSUCCESSFULLY = frozenset({Status.FAILED, Status.NEEDS_USER, Status.CANCELLED, Status.REVERTED})
#: A child in one of these has settled: its parent no longer waits for it.
SETTLED = SETTLED_UNSUCCESSFULLY | {Status.DONE}
#: A child in one of these is still open: its parent waits for it. Named one by one (every status
#: but the settled ones), so that a parent's open children are found through the index on
#: ``(parent, status)`` without reading its settled ones.
OPEN = frozenset(Status) - SETTLED
#: The children a retry of a parent's failed children queues again (the statuses a retry is
#: allowed from, as the transitions table says); the parent's page lists them first.
RETRIED = sources(Trigger.RETRY)
#: The children a cancel of their parent cancels too: those that have not ended (the cancel
#: itself refuses those its status does not allow, a revert among them).
CANCELLED_WITH_PARENT = frozenset(Status) - TERMINAL
#: The children a revert of their parent reverts first, each as a job of its own (those whose
#: kind has a revert).
REVERTED_WITH_PARENT = frozenset({Status.DONE})


def still_open(counts: Mapping[str, int]) -> int:
    """How many children (``counts``: how many in each status) have not settled."""
    return sum(number for status, number in counts.items() if status not in SETTLED)


def overall(counts: Mapping[str, int]) -> str:
    """How a family is doing: ``none``, ``done``, ``partial``, ``failed`` or ``running``; a partial
    failure never reads as success."""
    total = sum(counts.values())
    done = counts.get(Status.DONE, 0)
    unsuccessful = sum(counts.get(status, 0) for status in SETTLED_UNSUCCESSFULLY)
    if total == 0:
        return "none"
    if done == total:
        return "done"
    if done and unsuccessful:
        return "partial"
    if unsuccessful == total:
        return "failed"
    return "running"


def retried(counts: Mapping[str, int]) -> int:
    """How many of the children a retry of the parent's failed children would queue again."""
    return sum(counts.get(status, 0) for status in RETRIED)


def wait_reason(open_count: int, total: int) -> str:
    """What a parent waiting for its children says it waits for."""
    return ngettext(
        "Waiting for %(open)s of %(total)s child job", "Waiting for %(open)s of %(total)s child jobs", total
    ) % {"open": open_count, "total": total}


class Waiting(Protocol):
    """What the rules read of a job to say what it waits for."""

    @property
    def waits_for_children(self) -> bool: ...
    @property
    def wait_reason(self) -> str: ...


def shown_wait_reason(job: Waiting, counts: Mapping[str, int] | None) -> str:
    """What ``job`` shows it waits for. A parent waiting for its children: how many of them are
    open now, by ``counts`` (how many children in each status, read with the job), not the count
    its row kept as it parked; its children's settles leave its row alone, since keeping the count
    there would cost each settle a count of all its siblings. Any other job: the reason its row
    holds (empty if none)."""
    if job.waits_for_children and counts:
        return wait_reason(still_open(counts), sum(counts.values()))
    return job.wait_reason


def parent_woken(phase: str, status: str, counts: Mapping[str, int]) -> Transition | None:
    """What a parent waiting for its children becomes as one of them settles: the table's
    ``CHILDREN_SETTLED`` once none is open (its run queued again, its revert going on), whatever
    their outcomes; None while one is open, or when its status is not one that wakes."""
    if still_open(counts) or not allows(Trigger.CHILDREN_SETTLED, phase, status):
        return None
    return transition(Trigger.CHILDREN_SETTLED, phase, status)


def settled_line(phase: str, total: int) -> str:
    """The log line of a parent woken once its ``total`` children settled."""
    if phase == Phase.REVERT:
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
    return settled % {"total": total}


class Child(Protocol):
    """What the rules read of a child: its row or an unsaved one alike."""

    @property
    def pk(self) -> Any: ...
    @property
    def status(self) -> str: ...
    @property
    def phase(self) -> str: ...


def failed_reverts(children: Iterable[Child]) -> list[int]:
    """The children whose revert failed: a parent's revert does not go on past them."""
    return [child.pk for child in children if child.status == Status.FAILED and child.phase == Phase.REVERT]
