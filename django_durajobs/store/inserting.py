"""Inserting checked jobs with their declared steps: on PostgreSQL in one statement per 1,000
jobs, elsewhere in two; in one transaction."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from django.contrib.auth import get_user_model
from django.db import transaction
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
from .database import warn_if_outside_callers_transaction

#: Jobs per insert statement (on SQLite and MariaDB fewer where the database takes fewer parameters):
#: a statement of bounded size however many jobs an ``enqueue_many`` brings.
ROWS_PER_INSERT = 1000


def insert_rows(definition: JobKind, rows: list[dict[str, Any]]) -> list[Job]:
    """Insert jobs (``rows`` of checked fields) with their declared steps, and wake the workers
    of the queues that have a job due now; all in one transaction."""
    if not rows:
        return []
    _check_creators(rows)
    warn_if_outside_callers_transaction()
    trace_context = telemetry.traceparent()
    for row in rows:
        row["traceparent"] = trace_context
    now = timezone.now()
    due_queues = sorted(
        {row["queue"] for row in rows if row["status"] == Status.QUEUED and row["next_run_at"] <= now}
    )
    db = sql.database()
    if db.vendor == "postgresql" and len(rows) <= ROWS_PER_INSERT and not db.in_atomic_block:
        return _insert_in_one_statement(db, definition, rows, now, due_queues)
    # Inside a caller's transaction this is a savepoint: an insert that loses the race for an
    # idempotency key fails alone, not the caller's transaction (the winner's job is read in it next).
    with transaction.atomic(using=db.alias):
        if db.vendor == "postgresql":  # statements of a bounded size, the wake-ups with the first
            return [
                job
                for first in range(0, len(rows), ROWS_PER_INSERT)
                for job in _insert_in_one_statement(
                    db, definition, rows[first : first + ROWS_PER_INSERT], now, [] if first else due_queues
                )
            ]
        if db.features.can_return_rows_from_bulk_insert:
            jobs = _insert_in_batches(db, definition, rows, now)
        else:  # MySQL hands back neither the new ids of a multi-row insert nor RETURNING rows
            jobs = _insert_one_by_one(definition, rows)
        for queue in due_queues:
            notify_due(queue)
    return jobs


def _insert_one_by_one(definition: JobKind, rows: list[dict[str, Any]]) -> list[Job]:
    jobs = [Job(**row) for row in rows]
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
    "kind_version",
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
    "fairness_key",
    "under_limits",
)


@dataclass(frozen=True)
class NewJobLayout:
    """PostgreSQL: how ``_insert_in_one_statement`` fills a new job's columns, made once per database."""

    #: The columns no enqueue sets, and what goes into each: its default as an SQL literal, or
    #: a placeholder for the enqueue's time.
    fixed_columns: str
    fixed_values: str
    #: The same without PostgreSQL's casts, for the other databases' multi-row inserts.
    plain_fixed_values: str
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
                return "%s"
            return _literal(getattr(template, field.attname))

        return cls(
            fixed_columns=", ".join(db.ops.quote_name(sql.column(field)) for field in fixed),
            fixed_values=", ".join(f"{fixed_value(field)}::{field.db_type(db)}" for field in fixed),
            plain_fixed_values=", ".join(fixed_value(field) for field in fixed),
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
    columns = _columns(rows)
    columns["subject"] = [json.dumps(subject) for subject in columns["subject"]]
    arrays = tuple(
        attname
        for attname, values in columns.items()
        if len(rows) > 1 and (attname == "subject" or not _all_alike(values))
    )
    shape = (arrays, len(definition.steps), len(due_queues))
    statement = sql.statement(db, ("enqueue", *shape), lambda: _insert_sql(db, layout, *shape))
    params: list[Any] = [now] * layout.fixed_values.count("%s")
    params += [columns[attname][0] for attname in ENQUEUED_COLUMNS if attname not in arrays]
    params += [columns[attname] for attname in arrays]
    if definition.steps:
        params += [Phase.RUN, StepState.PENDING]
        for position, (step_id, title) in enumerate(definition.step_rows()):
            params += [position, step_id, title]
    for queue in due_queues:
        params += [NOTIFY_CHANNEL, queue]
    [(inserted, *_woken)] = sql.fetch(db, statement, params)
    return _new_jobs(db, layout, inserted if arrays else [inserted], rows, now)


def _columns(rows: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """The rows' values column by column, in the order of ``ENQUEUED_COLUMNS``."""
    return {attname: [row[attname] for row in rows] for attname in ENQUEUED_COLUMNS}


def _all_alike(values: list[Any]) -> bool:
    """Whether every value equals the first: ``list.count`` compares in C, a thousand jobs at once."""
    return values.count(values[0]) == len(values)


def _new_jobs(
    db: BaseDatabaseWrapper, layout: NewJobLayout, ids: list[int], rows: list[dict[str, Any]], now: datetime
) -> list[Job]:
    """The instances of the jobs just inserted with ``ids`` (in the order of ``rows``), built
    as the ORM reads them but without reading them back."""
    positions = layout.positions
    rows_of_values = []
    for pk, row in zip(ids, rows, strict=True):
        values = list(layout.defaults)
        values[positions["id"]] = pk
        values[positions["created_at"]] = values[positions["updated_at"]] = now
        for attname, value in row.items():
            values[positions[attname]] = value
        rows_of_values.append(values)
    return sql.instances(db, Job, rows_of_values)


def _insert_in_batches(
    db: BaseDatabaseWrapper, definition: JobKind, rows: list[dict[str, Any]], now: datetime
) -> list[Job]:
    """SQLite and MariaDB: the jobs in multi-row inserts (their new ids from ``RETURNING``), and
    their declared steps in as many more; the caller holds the transaction."""
    layout = sql.kept(db, ("new job layout",), lambda: NewJobLayout.make(db))
    declared = list(enumerate(definition.step_rows()))
    moments = layout.plain_fixed_values.count("%s")  # created_at and updated_at
    per_job = max(moments + len(ENQUEUED_COLUMNS), 6 * len(declared))
    size = max(1, min(ROWS_PER_INSERT, _parameter_limit(db) // per_job))
    prepare = sql.preparers(db, Job, ENQUEUED_COLUMNS)
    moment = sql.prepared_datetime(db, now)
    jobs: list[Job] = []
    for first in range(0, len(rows), size):
        batch = rows[first : first + size]
        job_sql = _rows_statement(db, layout, len(batch))
        prepared = [  # a column whose values are all alike is prepared once
            [to_driver(values[0], db)] * len(values)
            if _all_alike(values)
            else [to_driver(value, db) for value in values]
            for to_driver, values in zip(prepare, _columns(batch).values(), strict=True)
        ]
        params: list[Any] = []
        for job_values in zip(*prepared, strict=True):
            params += [moment] * moments
            params += job_values
        ids = sorted(pk for (pk,) in sql.fetch(db, job_sql, params))  # new ids grow in insertion order
        jobs += _new_jobs(db, layout, ids, batch, now)
        if declared:
            _insert_declared_steps(db, ids, declared)
    return jobs


def _insert_declared_steps(db: BaseDatabaseWrapper, ids: list[int], declared: list[tuple[int, Any]]) -> None:
    count = len(ids) * len(declared)
    statement = sql.statement(db, ("enqueue steps", count), lambda: _steps_sql(db, count))
    params: list[Any] = []
    for pk in ids:
        for position, (step_id, title) in declared:
            params += [pk, Phase.RUN, position, step_id, str(title), StepState.PENDING]
    sql.run(db, statement, params)


def _rows_statement(db: BaseDatabaseWrapper, layout: NewJobLayout, count: int) -> sql.Statement:
    return sql.statement(db, ("enqueue rows", count), lambda: _rows_sql(db, layout, count))


def _rows_sql(db: BaseDatabaseWrapper, layout: NewJobLayout, count: int) -> str:
    quote = db.ops.quote_name
    varying = ", ".join(quote(layout.columns[attname]) for attname in ENQUEUED_COLUMNS)
    row = f"({layout.plain_fixed_values}, {', '.join(['%s'] * len(ENQUEUED_COLUMNS))})"
    values = ", ".join([row] * count)
    return (
        f"INSERT INTO {sql.table(db, Job)} ({layout.fixed_columns}, {varying}) VALUES {values} "
        f"RETURNING {quote('id')}"
    )


def _steps_sql(db: BaseDatabaseWrapper, count: int) -> str:
    values = ", ".join(["(%s, %s, %s, %s, %s, %s, '', '')"] * count)
    return (
        f"INSERT INTO {sql.table(db, JobStep)} "
        f"(job_id, phase, position, step_id, title, state, detail, error) VALUES {values}"
    )


def _parameter_limit(db: BaseDatabaseWrapper) -> int:
    """How many parameters one statement takes: SQLite's limit is the library's own."""
    if db.vendor == "sqlite":
        db.ensure_connection()
        return int(db.connection.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER))
    return 65_535
