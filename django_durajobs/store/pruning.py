"""Deleting jobs that ended long ago, a family at a time, in batches of bounded size."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models import Exists, OuterRef
from django.utils import timezone
from django.utils.translation import gettext as _

from ..errors import JobError
from ..models import Event, Job, JobLimit
from ..status import TERMINAL
from ..values import short_repr
from . import sql

#: The most root jobs one batch reads, decides and deletes together.
MAX_BATCH = 10_000


@dataclass
class PruneResult:
    """What ``prune()`` deleted (or, on a dry run, would delete)."""

    #: Families deleted: each is a root job (one without a parent) with all its descendants.
    families: int = 0
    #: Job rows deleted: the roots and their descendants.
    jobs: int = 0
    #: Old finished roots kept because a member of their family has not ended, or ended recently.
    kept: int = 0
    #: Every row deleted, by model label (``"django_durajobs.JobStep"``…); empty on a dry run.
    rows: Counter[str] = field(default_factory=Counter)


def prune(
    older_than: timedelta,
    *,
    statuses: Collection[str] | None = None,
    kinds: Collection[str] | None = None,
    dry_run: bool = False,
    batch: int = 1000,
) -> PruneResult:
    """Delete the families of jobs that ended more than ``older_than`` ago, with their steps and log.

    A family (a root job and its descendants, at any depth) goes whole or not at all: only when
    every member has ended more than ``older_than`` ago. So a job with a child that has not ended
    is kept, and a child is never deleted while its parent stays, which keeps the parent's
    ``children_summary()`` true. ``statuses`` (finished ones only) and ``kinds`` choose families
    by their root. The roots are read ``batch`` at a time, by id; memory grows with the batch and
    the size of its families, not with the table. The rows of concurrency keys that no
    unfinished job has go too; a claim makes them again when needed. So do the events sent more
    than ``older_than`` ago (``prune_events``).

    >>> prune(timedelta(days=30), statuses=["done"])
    PruneResult(families=99000, jobs=100000, kept=2, rows=Counter({'django_durajobs.Job': 100000, ...}))
    """
    cutoff = timezone.now() - _checked_age(older_than)
    if not 1 <= batch <= MAX_BATCH:
        raise JobError(
            "invalid_input",
            _("batch must be from 1 to %(limit)s, not %(value)s.")
            % {"limit": f"{MAX_BATCH:,}", "value": short_repr(batch)},
        )
    result = PruneResult()
    for ids in _old_roots(cutoff, _checked_statuses(statuses), kinds, batch):
        members = family_members(ids, cutoff)
        deletable = [pk for pk in ids if members.get(pk, (0, False))[1] is False]
        result.kept += len(ids) - len(deletable)
        result.families += len(deletable)
        if dry_run:
            result.jobs += sum(1 + members.get(pk, (0, False))[0] for pk in deletable)
        elif deletable:
            result.rows.update(delete_jobs(deletable))
    if not dry_run:
        result.jobs = result.rows[Job._meta.label]
        forget_unused_limit_keys()
        result.rows[Event._meta.label] += prune_events(cutoff)
    return result


def _checked_age(older_than: timedelta) -> timedelta:
    if not isinstance(older_than, timedelta) or older_than < timedelta(0):
        raise JobError(
            "invalid_input",
            _("older_than must be a timedelta of zero or more, not %(value)s.")
            % {"value": short_repr(older_than)},
        )
    return older_than


def _checked_statuses(statuses: Collection[str] | None) -> frozenset[str]:
    if statuses is None:
        return frozenset(TERMINAL)
    chosen = frozenset(statuses)
    unfinished = sorted(chosen - TERMINAL)
    if unfinished or not chosen:
        raise JobError(
            "invalid_input",
            _("Only finished jobs are pruned: statuses are some of %(statuses)s, not %(value)s.")
            % {"statuses": ", ".join(sorted(TERMINAL)), "value": short_repr(unfinished or list(chosen))},
        )
    return chosen


def _old_roots(
    cutoff: datetime, statuses: frozenset[str], kinds: Collection[str] | None, size: int
) -> Iterator[list[int]]:
    """The ids of root jobs in ``statuses`` (and ``kinds``) that ended before ``cutoff``, ``size``
    at a time, by id: each read starts after the last id of the one before, so the whole table is
    walked once however many batches there are."""
    roots = Job.objects.filter(parent_id__isnull=True, status__in=statuses, ended_at__lt=cutoff)
    if kinds is not None:
        roots = roots.filter(kind__in=list(kinds))
    ordered = roots.order_by("pk").values_list("pk", flat=True)
    last = 0
    while ids := list(ordered.filter(pk__gt=last)[:size]):
        yield ids
        last = ids[-1]


def family_members(root_ids: list[int], cutoff: datetime) -> dict[int, tuple[int, bool]]:
    """For each of ``root_ids`` with descendants: ``(how many, whether one has not ended before
    cutoff)``, at any depth, in one recursive query (``WITH RECURSIVE``: every supported database)."""
    if not root_ids:
        return {}
    db = sql.database()
    job, quote = sql.table(db, Job), db.ops.quote_name
    pk, parent, ended, status = (quote(name) for name in ("id", "parent_id", "ended_at", "status"))
    finished = ", ".join(["%s"] * len(TERMINAL))
    text = (
        f"WITH RECURSIVE member (root_id, id) AS ("
        f" SELECT {parent}, {pk} FROM {job} WHERE {parent} IN ({', '.join(['%s'] * len(root_ids))})"
        f" UNION ALL SELECT member.root_id, {job}.{pk} FROM {job} JOIN member ON {job}.{parent} = member.id)"
        f" SELECT member.root_id, COUNT(*), SUM(CASE WHEN {job}.{status} IN ({finished})"
        f" AND {job}.{ended} < %s THEN 0 ELSE 1 END)"
        f" FROM member JOIN {job} ON {job}.{pk} = member.id GROUP BY member.root_id"
    )
    params = [*root_ids, *sorted(TERMINAL), sql.prepared_datetime(db, cutoff)]
    with db.cursor() as cursor:
        cursor.execute(text, params)
        return {root: (int(count), bool(blocking)) for root, count, blocking in cursor.fetchall()}


def forget_unused_limit_keys() -> int:
    """Delete the rows of concurrency keys that no unfinished job has; returns how many."""
    in_use = Job.objects.unfinished().filter(concurrency_key=OuterRef("name"))
    deleted, _by_model = JobLimit.objects.filter(scope=JobLimit.Scope.KEY).exclude(Exists(in_use)).delete()
    return deleted


def delete_jobs(job_ids: list[int]) -> dict[str, int]:
    """Delete jobs with their steps, their log and their children (read by id alone); returns the
    rows deleted by model label."""
    _total, by_model = Job.objects.filter(pk__in=job_ids).only("id").delete()
    return by_model


def prune_events(cutoff: datetime) -> int:
    """Delete the events sent before ``cutoff``, the jobs' own; returns how many.

    Jobs waiting for one of them were woken when it was sent; a wait for its name that starts
    later waits for a new send, as if it had never been sent.
    """
    deleted, _by_model = Event.objects.filter(sent_at__lt=cutoff).delete()
    return deleted
