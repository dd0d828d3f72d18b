"""Deleting jobs that ended long ago, a family at a time, in batches of bounded size."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import CASCADE, DO_NOTHING, SET_NULL, Exists, ForeignObjectRel, OuterRef
from django.db.models.deletion import Collector
from django.db.models.signals import post_delete, pre_delete
from django.utils import timezone
from django.utils.translation import gettext as _

from ..errors import JobError
from ..models import Event, Job, JobLimit
from ..status import TERMINAL
from ..values import short_repr
from . import sql

#: The most root jobs one batch reads, decides and deletes together.
MAX_BATCH = 10_000

#: Parent ids within this many times their number of each other are read as one range of the
#: index on the parent.
DENSE = 4

#: Job ids by generation: the roots, their children, the children's children…
Levels = list[list[int]]


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
    by their root. The roots are read ``batch`` at a time, by id, and each batch's families go in
    one transaction of a few statements (a table at a time, not a row at a time): the cost of a
    job and the memory grow with the batch and the size of its families, not with the table. The
    rows of concurrency keys that no unfinished job has go too; a claim makes them again when
    needed. So do the events sent more than ``older_than`` ago (``prune_events``).

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
    db = sql.database()
    for ids in _old_roots(cutoff, _checked_statuses(statuses), kinds, batch):
        with transaction.atomic(using=db.alias):
            levels, blocked = _families(db, ids, cutoff)
            result.kept += len(blocked)
            result.families += len(levels[0])
            if dry_run:
                result.jobs += sum(map(len, levels))
            elif levels[0]:
                result.rows.update(_delete(db, levels))
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


def _families(db: BaseDatabaseWrapper, root_ids: list[int], cutoff: datetime) -> tuple[Levels, set[int]]:
    """The families of ``root_ids`` that go, by depth (the roots first), and the roots that stay:
    those with a member that has not ended before ``cutoff``."""
    root_of = {pk: pk for pk in root_ids}
    blocked: set[int] = set()
    found: Levels = []
    for rows in _descendants(db, root_ids, cutoff):
        found.append([])
        for pk, parent, old in rows:
            root_of[pk] = root = root_of[parent]
            found[-1].append(pk)
            if not old:
                blocked.add(root)
    levels = [[pk for pk in root_ids if pk not in blocked]]
    levels += [[pk for pk in level if root_of[pk] not in blocked] for level in found]
    return levels, blocked


def _descendants(
    db: BaseDatabaseWrapper, parent_ids: list[int], cutoff: datetime | None
) -> Iterator[list[tuple[int, int, bool]]]:
    """The children of ``parent_ids``, then theirs, a generation at a time: ``(id, parent id,
    whether it ended before cutoff)`` each. A statement per generation reads an index on the
    parent; a recursive query would have the planner guess at its size and may scan the table."""
    quote, job = db.ops.quote_name, sql.table(db, Job)
    finished = ", ".join(["%s"] * len(TERMINAL))
    ended = (
        f"CASE WHEN {quote('status')} IN ({finished}) AND {quote('ended_at')} < %s THEN 1 ELSE 0 END"
        if cutoff is not None
        else "1"
    )
    params = [*sorted(TERMINAL), sql.prepared_datetime(db, cutoff)] if cutoff is not None else []
    text = f"SELECT {quote('id')}, {quote('parent_id')}, {ended} FROM {job} WHERE "
    while parent_ids:
        rows = [(pk, parent, bool(old)) for pk, parent, old in _children(db, text, params, parent_ids)]
        if rows:
            yield rows
        parent_ids = [pk for pk, _parent, _old in rows]


def _children(
    db: BaseDatabaseWrapper, text: str, params: list[Any], parent_ids: list[int]
) -> list[tuple[Any, ...]]:
    """The rows ``text`` reads for the children of ``parent_ids``. Ids close together (a batch of
    roots read by id) are one range of the index on the parent, the rows of other parents in it
    left out; others are looked up one by one."""
    low, high = min(parent_ids), max(parent_ids)
    with db.cursor() as cursor:
        if high - low < DENSE * len(parent_ids):
            cursor.execute(f"{text}{db.ops.quote_name('parent_id')} BETWEEN %s AND %s", [*params, low, high])
            wanted = set(parent_ids)
            return [row for row in cursor.fetchall() if row[1] in wanted]
        rows: list[tuple[Any, ...]] = []
        for condition, values in _in(db, "parent_id", parent_ids):
            cursor.execute(text + condition, [*params, *values])
            rows += cursor.fetchall()
        return rows


def _in(db: BaseDatabaseWrapper, column: str, ids: list[int]) -> Iterator[tuple[str, list[Any]]]:
    """``column`` is one of ``ids``: on PostgreSQL one array parameter (``= ANY``), elsewhere an
    ``IN`` list, in as many statements as the database's limit on parameters takes."""
    quoted = db.ops.quote_name(column)
    if db.vendor == "postgresql":
        yield f"{quoted} = ANY(%s)", [ids]
        return
    size = min(db.features.max_query_params or MAX_BATCH, MAX_BATCH) - 10
    for first in range(0, len(ids), size):
        chunk = ids[first : first + size]
        yield f"{quoted} IN ({', '.join(['%s'] * len(chunk))})", chunk


def forget_unused_limit_keys() -> int:
    """Delete the rows of concurrency keys that no unfinished job has; returns how many."""
    in_use = Job.objects.unfinished().filter(concurrency_key=OuterRef("name"))
    deleted, _by_model = JobLimit.objects.filter(scope=JobLimit.Scope.KEY).exclude(Exists(in_use)).delete()
    return deleted


def delete_jobs(job_ids: list[int]) -> dict[str, int]:
    """Delete jobs with their steps, their log and their descendants (read by id alone); returns
    the rows deleted by model label."""
    db = sql.database()
    with transaction.atomic(using=db.alias):
        depth = dict.fromkeys(job_ids, 0)  # a job named here that descends from another goes deeper
        for generation, rows in enumerate(_descendants(db, job_ids, None), start=1):
            depth.update((pk, generation) for pk, _parent, _old in rows)
        levels: Levels = [[] for _ in range(max(depth.values(), default=0) + 1)]
        for pk, generation in depth.items():
            levels[generation].append(pk)
        return _delete(db, levels) if job_ids else {}


def _delete(db: BaseDatabaseWrapper, levels: Levels) -> Counter[str]:
    """Delete the jobs of ``levels`` (each a generation, the parents first) and what points at them,
    a statement per relation: the deepest generation goes first, so no job outlives its parent even
    where foreign keys are checked row by row (MariaDB/MySQL). Where a relation to jobs asks for
    more than a plain delete or ``SET NULL`` (another app's model with rows of its own to delete,
    receivers of delete signals), it is Django's deletion, which reads the rows."""
    ids = [pk for level in levels for pk in level]
    relations = _relations(db.alias)
    if relations is None:
        _total, by_model = Job._base_manager.using(db.alias).filter(pk__in=ids).delete()
        return Counter(by_model)
    deleted: Counter[str] = Counter()
    with db.cursor() as cursor:
        for label, table, column, cascade in relations:
            quoted = db.ops.quote_name(table)
            change = (
                f"DELETE FROM {quoted}"
                if cascade
                else f"UPDATE {quoted} SET {db.ops.quote_name(column)} = NULL"
            )
            for condition, values in _in(db, column, ids):
                cursor.execute(f"{change} WHERE {condition}", values)
                if cascade:
                    deleted[label] += cursor.rowcount
        for level in reversed(levels):
            for condition, values in _in(db, "id", level):
                cursor.execute(f"DELETE FROM {sql.table(db, Job)} WHERE {condition}", values)
                deleted[Job._meta.label] += cursor.rowcount
    return deleted


def _relations(alias: str) -> list[tuple[str, str, str, bool]] | None:
    """The relations to jobs other than a child's to its parent: ``(model label, table, column,
    whether its rows are deleted)`` (``SET NULL`` otherwise), or None when one needs Django's
    deletion."""
    if pre_delete.has_listeners(Job) or post_delete.has_listeners(Job):
        return None
    collector = Collector(using=alias)
    relations = []
    for relation in Job._meta.get_fields(include_hidden=True):  # related_objects leaves out the hidden
        if not isinstance(relation, ForeignObjectRel) or relation.many_to_many:
            continue
        field, on_delete, model = relation.field, relation.on_delete, relation.related_model
        if field.model is Job and field.name == "parent" or on_delete is DO_NOTHING:
            continue
        if not isinstance(model, type) or on_delete not in (CASCADE, SET_NULL):
            return None
        rows = model._base_manager.using(alias).none()
        if on_delete is CASCADE and not collector.can_fast_delete(rows):
            return None
        relations.append((model._meta.label, model._meta.db_table, sql.column(field), on_delete is CASCADE))
    return relations


def prune_events(cutoff: datetime) -> int:
    """Delete the events sent before ``cutoff``, the jobs' own; returns how many.

    Jobs waiting for one of them were woken when it was sent; a wait for its name that starts
    later waits for a new send, as if it had never been sent.
    """
    deleted, _by_model = Event.objects.filter(sent_at__lt=cutoff).delete()
    return deleted
