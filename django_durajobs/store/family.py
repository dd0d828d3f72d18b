"""The children's rows: the one place that reads them for a parent, by the rules of ``family.py``
(which are settled, which a retry, a cancel or a revert of their parent takes along). Waking a
parent once its children settled is ``waking.py``'s."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable

from django.db.models import Case, Count, Exists, OuterRef, QuerySet, Value, When

from ..family import CANCELLED_WITH_PARENT, RETRIED, REVERTED_WITH_PARENT, still_open
from ..models import Job
from ..registry import has_revert, known_kinds
from ..transitions import Trigger, sources


def children_counts(parent_ids: Iterable[int]) -> dict[int, Counter[str]]:
    """How many children each parent has in each status, in one grouped query (a parent without
    any is left out)."""
    counts: dict[int, Counter[str]] = defaultdict(Counter)
    for parent_id, status, number in (
        Job.objects.filter(parent_id__in=list(parent_ids))
        .values_list("parent_id", "status")
        .annotate(Count("id"))
        .order_by()
    ):
        counts[parent_id][status] = number
    return dict(counts)


#: What ``children_summary()`` shows of each child, and what a parent's run reads of it.
CHILD_FIELDS = ("id", "label", "status", "phase", "subject", "error", "attempt", "next_run_at")


def children_of(parent_id: int) -> tuple[Job, ...]:
    """A parent's children, oldest first, with ``CHILD_FIELDS`` only."""
    return tuple(Job.objects.filter(parent_id=parent_id).order_by("created_at", "id").only(*CHILD_FIELDS))


def open_children(parent_id: int) -> tuple[int, int]:
    """``(still open, total)`` children of a job."""
    counts = children_counts([parent_id]).get(parent_id, Counter())
    return still_open(counts), sum(counts.values())


def settled_parents() -> QuerySet[Job]:
    """Parents waiting for their children with none open: to wake. Whether a parent has an open
    child is one lookup in ``durajobs_parent_status``, however many of its children settled."""
    open_child = Job.objects.unsettled().filter(parent_id=OuterRef("pk"))
    return Job.objects.filter(waits_for_children=True, status__in=sources(Trigger.CHILDREN_SETTLED)).exclude(
        Exists(open_child)
    )


def forgotten_parents(limit: int) -> list[int]:
    """Parents waiting for their children with none open: their wake-up may have been missed."""
    return list(settled_parents().values_list("pk", flat=True)[:limit])


def children_listed(parent_id: int) -> QuerySet[Job]:
    """A parent's children as its page lists them: those a retry would queue again (they need
    someone) first, then in the order they were created."""
    needs_someone = Case(When(status__in=RETRIED, then=Value(0)), default=Value(1))
    return Job.objects.filter(parent_id=parent_id).order_by(needs_someone, "created_at", "id")


def retried_children(parent_id: int) -> QuerySet[Job]:
    """The children a retry of a parent's failed children queues again."""
    return Job.objects.filter(parent_id=parent_id, status__in=RETRIED)


def cancelled_children(parent_ids: list[int]) -> QuerySet[Job]:
    """The children a cancel of their parents cancels too."""
    return Job.objects.filter(parent_id__in=parent_ids, status__in=CANCELLED_WITH_PARENT)


def reverted_children(parent_ids: list[int]) -> QuerySet[Job]:
    """The children a revert of their parents reverts first: those whose kind has a revert."""
    with_revert = [name for name in known_kinds() if has_revert(name)]
    return Job.objects.filter(parent_id__in=parent_ids, status__in=REVERTED_WITH_PARENT, kind__in=with_revert)
