"""Inserting checked jobs with their declared steps: on PostgreSQL in one statement, elsewhere
in one transaction."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Field
from django.utils import timezone
from django.utils.translation import gettext as _

from .. import telemetry
from ..errors import JobError
from ..models import Job, JobStep
from ..registry import JobKind
from ..status import Phase, Status, StepState
from ..values import short_repr
from . import sql
from .changes import NOTIFY_CHANNEL, notify_due


def insert_rows(definition: JobKind, rows: list[dict[str, Any]]) -> list[Job]:
    """Insert jobs (``rows`` of checked fields) with their declared steps, and wake the workers
    of the queues that have a job due now; all in one transaction."""
    if not rows:
        return []
    _check_creators(rows)
    trace_context = telemetry.traceparent()
    for row in rows:
        row["traceparent"] = trace_context
    now = timezone.now()
    due_queues = sorted(
        {row["queue"] for row in rows if row["status"] == Status.QUEUED and row["next_run_at"] <= now}
    )
    db = sql.database()
    if db.vendor == "postgresql" and db.in_atomic_block:
        # A savepoint: an insert that loses the race for an idempotency key must fail alone, not
        # abort the caller's transaction (the lookup of the winner's job runs in it next).
        with transaction.atomic(using=db.alias):
            return _insert_in_one_statement(db, definition, rows, now, due_queues)
    if db.vendor == "postgresql":
        return _insert_in_one_statement(db, definition, rows, now, due_queues)
    jobs = [Job(**row) for row in rows]
    with transaction.atomic():
        if connection.features.can_return_rows_from_bulk_insert:
            Job.objects.bulk_create(jobs, batch_size=1000)
        else:  # MySQL does not hand back the new ids of a multi-row insert
            for job in jobs:
                job.save(force_insert=True)
        declared = list(enumerate(definition.step_rows()))  # the titles read once, not per job
        JobStep.objects.bulk_create(
            (
                JobStep(job=job, phase=Phase.RUN, position=position, step_id=step_id, title=title)
                for job in jobs
                for position, (step_id, title) in declared
            ),
            batch_size=1000,
        )
        for queue in due_queues:
            notify_due(queue)
    return jobs


def _check_creators(rows: list[dict[str, Any]]) -> None:
    """``invalid_input`` when a row's ``created_by_id`` names no user (one query for all rows)."""
    wanted = {row["created_by_id"] for row in rows} - {None}
    if not wanted:
        return
    found = set(get_user_model()._default_manager.filter(pk__in=wanted).values_list("pk", flat=True))
    missing = wanted - found
    if missing:
        raise JobError(
            "invalid_input",
            _("created_by names no existing user: %(value)s.")
            % {"value": short_repr(sorted(missing, key=str))},
        )


#: The columns an enqueue sets job by job (checked in ``enqueuing``); every other one starts at its
#: field's default, the same for every job.
ENQUEUED_COLUMNS = (
    "kind",
    "label",
    "status",
    "subject",
    "queue",
    "priority",
    "max_attempts",
    "timeout",
    "next_run_at",
    "idempotency_key",
    "created_by_id",
    "traceparent",
    "actor_type",
    "group_id",
    "subject_type",
    "subject_id",
    "parent_id",
    "concurrency_key",
)


@dataclass(frozen=True)
class NewJobLayout:
    """PostgreSQL: how ``_insert_in_one_statement`` fills a new job's columns, made once per database."""

    #: The columns no enqueue sets, and what goes into each: its default as an SQL literal, or
    #: a placeholder for the enqueue's time.
    fixed_columns: str
    fixed_values: str
    #: Per column of ENQUEUED_COLUMNS: its name, its type, and its type in an array (no length:
    #: varchar[], not varchar(100)[]; the subject arrives as JSON text).
    columns: dict[str, str]
    casts: dict[str, str]
    array_types: dict[str, str]
    #: A new job's values in field order, and where each field is in it.
    defaults: tuple[Any, ...]
    positions: dict[str, int]

    @classmethod
    def make(cls, db: BaseDatabaseWrapper) -> NewJobLayout:
        fields = [field for field in Job._meta.concrete_fields if not field.primary_key]
        by_attname = {field.attname: field for field in fields}
        varying = [by_attname[attname] for attname in ENQUEUED_COLUMNS]
        fixed = [field for field in fields if field.attname not in ENQUEUED_COLUMNS]
        template = Job()

        def fixed_value(field: Field[Any, Any]) -> str:
            if getattr(field, "auto_now", False) or getattr(field, "auto_now_add", False):
                return f"%s::{field.db_type(db)}"
            return f"{_literal(getattr(template, field.attname))}::{field.db_type(db)}"

        return cls(
            fixed_columns=", ".join(db.ops.quote_name(sql.column(field)) for field in fixed),
            fixed_values=", ".join(fixed_value(field) for field in fixed),
            columns={field.attname: sql.column(field) for field in varying},
            casts={field.attname: _column_type(field, db) for field in varying},
            array_types={
                field.attname: "text" if field.attname == "subject" else _column_type(field, db).split("(")[0]
                for field in varying
            },
            defaults=tuple(getattr(template, field.attname) for field in Job._meta.concrete_fields),
            positions={field.attname: index for index, field in enumerate(Job._meta.concrete_fields)},
        )


def _column_type(field: Field[Any, Any], db: BaseDatabaseWrapper) -> str:
    """A column's type: the stubs allow None, which only a field without a column has."""
    return cast(str, field.db_type(db))


def _literal(value: Any) -> str:
    """A model default as SQL: None, a bool, an int or a plain string (all the job's defaults are)."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str) and "\\" not in value and "%" not in value:
        return "'" + value.replace("'", "''") + "'"
    raise TypeError(f"No literal for the default {value!r}")


def _insert_sql(
    db: BaseDatabaseWrapper, layout: NewJobLayout, arrays: tuple[str, ...], steps: int, notifies: int
) -> str:
    """PostgreSQL: insert jobs, each with ``steps`` declared steps, and send ``notifies`` wake-ups;
    returns the new ids, ascending (the one new id, without arrays).

    The columns in ``arrays`` travel as one array each (``unnest``), one element per job, the
    others as one value for every job; without arrays, the statement inserts one job.
    """
    quote = db.ops.quote_name
    scalars = [attname for attname in ENQUEUED_COLUMNS if attname not in arrays]
    values = [layout.fixed_values] + [f"%s::{layout.casts[attname]}" for attname in scalars]
    varying = ", ".join(quote(layout.columns[attname]) for attname in scalars + list(arrays))
    columns = f"{layout.fixed_columns}, {varying}"
    if arrays:
        values += [f"u.{quote(attname)}" + ("::jsonb" if attname == "subject" else "") for attname in arrays]
        unnested = ", ".join(f"%s::{layout.array_types[attname]}[]" for attname in arrays)
        names = ", ".join(quote(attname) for attname in arrays)
        source = (
            f" FROM unnest({unnested}) WITH ORDINALITY AS u({names}, durajobs_order) ORDER BY durajobs_order"
        )
    else:
        source = ""
    statement = (
        f"WITH new_jobs AS (INSERT INTO {sql.table(db, Job)} ({columns}) "
        f"SELECT {', '.join(values)}{source} RETURNING {quote('id')})"
    )
    if steps:
        declared = ", ".join(["(%s::integer, %s, %s)"] * steps)
        statement += (
            f", new_steps AS (INSERT INTO {sql.table(db, JobStep)} "
            f"(job_id, phase, position, step_id, title, state, detail, error) "
            f"SELECT new_jobs.id, %s, step.position, step.step_id, step.title, %s, '', '' "
            f"FROM new_jobs, (VALUES {declared}) AS step(position, step_id, title))"
        )
    ids = "array_agg(id ORDER BY id)" if arrays else "id"
    return f"{statement} SELECT {ids}{', pg_notify(%s, %s)' * notifies} FROM new_jobs"


def _insert_in_one_statement(
    db: BaseDatabaseWrapper,
    definition: JobKind,
    rows: list[dict[str, Any]],
    now: datetime,
    due_queues: list[str],
) -> list[Job]:
    """PostgreSQL: the jobs, their declared steps and the wake-up NOTIFY in one statement.

    A column that differs between the jobs travels as one array (``unnest``), the jobs inserted
    in order, so the new ids, ascending, are theirs in that order; a column they share travels
    as a single value.
    """
    layout = sql.kept(db, ("new job layout",), lambda: NewJobLayout.make(db))
    texts = [dict(row, subject=json.dumps(row["subject"])) for row in rows]
    first = texts[0]
    arrays = tuple(
        attname
        for attname in ENQUEUED_COLUMNS
        if len(rows) > 1 and (attname == "subject" or any(row[attname] != first[attname] for row in texts))
    )
    shape = (arrays, len(definition.steps), len(due_queues))
    statement = sql.statement(db, ("enqueue", *shape), lambda: _insert_sql(db, layout, *shape))
    params: list[Any] = [now] * layout.fixed_values.count("%s")
    params += [first[attname] for attname in ENQUEUED_COLUMNS if attname not in arrays]
    params += [[row[attname] for row in texts] for attname in arrays]
    if definition.steps:
        params += [Phase.RUN, StepState.PENDING]
        for position, (step_id, title) in enumerate(definition.step_rows()):
            params += [position, step_id, title]
    for queue in due_queues:
        params += [NOTIFY_CHANNEL, queue]
    [(inserted, *_woken)] = sql.fetch(db, statement, params)
    ids = inserted if arrays else [inserted]
    positions = layout.positions
    jobs = []
    for pk, row in zip(ids, rows, strict=True):
        values = list(layout.defaults)
        values[positions["id"]] = pk
        values[positions["created_at"]] = values[positions["updated_at"]] = now
        for attname, value in row.items():
            values[positions[attname]] = value
        jobs.append(Job.from_db(db.alias, positions, values))
    return jobs
