"""Finding jobs by what an operator knows of them: status, kind, queue, parent, subject."""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from typing import Any

from django.db.models import CharField, Count, Func, Q, QuerySet
from django.db.models.fields.json import KeyTransform
from django.utils.translation import gettext as _

from ..errors import JobError
from ..models import Job, JobStep
from ..status import Status, StepState
from ..values import short_repr, to_job_id
from . import sql
from .database import DatabaseNow

#: The most keys a subject filter may compare: each is a condition of the query.
MAX_SUBJECT_KEYS = 20


def find_jobs(
    *,
    statuses: Collection[str] = (),
    kinds: Collection[str] = (),
    queues: Collection[str] = (),
    parent: Job | int | None = None,
    subject: Mapping[str, Any] | None = None,
) -> QuerySet[Job]:
    """The jobs matching every filter given, newest first, with the database's clock annotated
    (``database_now``) so a summary judges their leases without a query of its own.

    ``subject`` is an object the job's subject must contain: each of its keys, nested objects
    key by key, with an equal value (text, number, true, false or null; lists are not compared).
    It is matched key by key with JSON key lookups, which work on SQLite, PostgreSQL and
    MySQL/MariaDB alike (Django has no JSON containment on SQLite); a number never equals text.

    >>> find_jobs(statuses=["failed"], subject={"server": {"name": "web-4"}})
    """
    unknown = sorted(set(statuses) - set(Status.values))
    if unknown:
        raise JobError(
            "invalid_input",
            _("No status %(value)s; one of %(statuses)s.")
            % {"value": short_repr(unknown), "statuses": ", ".join(Status.values)},
        )
    jobs: QuerySet[Job] = Job.objects.annotate(database_now=DatabaseNow())
    if statuses:
        jobs = jobs.filter(status__in=list(statuses))
    if kinds:
        jobs = jobs.filter(kind__in=list(kinds))
    if queues:
        jobs = jobs.filter(queue__in=list(queues))
    if parent is not None:
        jobs = jobs.filter(parent_id=to_job_id(parent, _("The parent")))
    if subject:
        jobs = _containing(jobs, subject)
    return jobs.order_by("-created_at", "-id")


def _containing(jobs: QuerySet[Job], subject: Mapping[str, Any]) -> QuerySet[Job]:
    keys = subject_keys(subject)
    jobs = jobs.alias(**{f"subject_key_{n}": key for n, (key, _value) in enumerate(keys)})
    jobs = jobs.filter(**{f"subject_key_{n}": value for n, (_key, value) in enumerate(keys)})
    if sql.database().vendor == "mysql":
        # MySQL and MariaDB compare a JSON number with a JSON text by their text: 7 = "7".
        for n, (key, value) in enumerate(keys):
            if isinstance(value, (str, int, float)) and not isinstance(value, bool):
                json_type = Func(key, function="JSON_TYPE", output_field=CharField())
                jobs = jobs.alias(**{f"subject_type_{n}": json_type})
                is_text = {f"subject_type_{n}": "STRING"}
                jobs = jobs.filter(**is_text) if isinstance(value, str) else jobs.exclude(**is_text)
    return jobs


def subject_keys(subject: Mapping[str, Any]) -> list[tuple[KeyTransform, Any]]:
    """The keys the job's subject must have to contain ``subject`` (see ``find_jobs``), each as a
    key lookup with the value it must equal (an ``exact`` on a key lookup matches JSON null)."""
    leaves = list(_leaves(subject, ()))
    if len(leaves) > MAX_SUBJECT_KEYS:
        raise JobError(
            "invalid_input",
            _("A subject filter compares at most %(limit)s keys, not %(count)s.")
            % {"limit": MAX_SUBJECT_KEYS, "count": len(leaves)},
        )
    keys = []
    for path, value in leaves:
        expression = KeyTransform(path[0], "subject")
        for key in path[1:]:
            expression = KeyTransform(key, expression)
        keys.append((expression, value))
    return keys


def _leaves(value: Mapping[str, Any], path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], Any]]:
    if not isinstance(value, Mapping) or not value:
        raise JobError(
            "invalid_input",
            _("A subject filter is a non-empty object, not %(value)s.") % {"value": short_repr(value)},
        )
    for key, inner in value.items():
        if not isinstance(key, str) or not key:
            raise JobError(
                "invalid_input",
                _("A subject key is a non-empty text, not %(value)s.") % {"value": short_repr(key)},
            )
        if isinstance(inner, Mapping):
            yield from _leaves(inner, (*path, key))
        elif isinstance(inner, float) and inner.is_integer():
            yield (*path, key), int(inner)  # 7.0 is the number 7 on every database
        elif inner is None or isinstance(inner, (str, int, float, bool)):
            yield (*path, key), inner
        else:
            raise JobError(
                "invalid_input",
                _("A subject filter compares text, numbers, true, false and null, not %(value)s.")
                % {"value": short_repr(inner)},
            )


def step_counts(job_ids: Collection[int]) -> dict[tuple[int, str], tuple[int, int]]:
    """For a page of jobs, in one grouped query: ``(job id, phase) -> (steps done, steps)``, what
    a list's progress follows."""
    rows = (
        JobStep.objects.filter(job_id__in=list(job_ids))
        .values_list("job_id", "phase")
        .annotate(done=Count("id", filter=Q(state=StepState.DONE)), total=Count("id"))
        .order_by()
    )
    return {(job_id, phase): (done, total) for job_id, phase, done, total in rows}
