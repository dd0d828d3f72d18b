"""The one module that writes job rows.

Idempotent enqueue, claiming, the lease a worker holds on a claimed job (every write it makes
is fenced by the lease token), status transitions and recovery. Vendor differences stay here.
"""

from __future__ import annotations

import json
import logging
import os
import random
import socket
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import IntegrityError, InterfaceError, OperationalError, connection, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Count, DateTimeField, Exists, F, Func, Model, OuterRef, Q
from django.db.models.functions import Greatest
from django.utils import timezone

from . import sql
from .conf import get_setting
from .engine.redact import shown_text
from .engine.values import check_text, short_repr, to_job_id, to_json
from .errors import JobError, LeaseLost
from .models import Job, JobLog, JobStep
from .registry import PRIORITY_RANGE, JobKind, get_kind, known_kinds, max_attempts_problem
from .signals import announce_change
from .status import SETTLED, TERMINAL, WAITING, Phase, Status, StepState

logger = logging.getLogger("django_durajobs")

INITIAL_STATUSES = frozenset({Status.QUEUED}) | WAITING
#: A job in one of these, unlocked and past its next_run_at, is due for a worker.
DUE_STATUSES = (Status.QUEUED, Status.REVERTING)
#: A wait, a question, a retry_later or a lost worker hands the try back: attempts count only tries
#: that failed (or are under way), so a job that waits for DNS five times keeps all its retries.
GIVE_ATTEMPT_BACK = Greatest(F("attempt") - 1, 0)


class DatabaseNow(Func):
    """The database server's clock in UTC: leases are judged by one clock, whatever the workers' say."""

    template = "CURRENT_TIMESTAMP"
    output_field = DateTimeField()

    def as_postgresql(self, compiler, connection, **extra):
        return "STATEMENT_TIMESTAMP()", []

    def as_mysql(self, compiler, connection, **extra):
        return "UTC_TIMESTAMP(6)", []

    def as_sqlite(self, compiler, connection, **extra):
        return "STRFTIME('%%Y-%%m-%%d %%H:%%M:%%f', 'NOW')", []


def database_now_sql(db: BaseDatabaseWrapper) -> str:
    """``DatabaseNow()`` as SQL text for this database."""

    def compiled() -> str:
        compiler = Job.objects.none().query.get_compiler(connection=db)
        return compiler.compile(DatabaseNow())[0]

    return sql.kept(db, ("now",), compiled)


def database_now() -> datetime:
    """The database server's current time, as an aware datetime."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {database_now_sql(connection)}", [])
        raw = cursor.fetchone()[0]
    if isinstance(raw, str):
        raw = datetime.fromisoformat(raw)
    return raw if timezone.is_aware(raw) else timezone.make_aware(raw, UTC)


#: PostgreSQL: a condition that makes the statement's commit not wait for the disk (see ``no_flush``).
NO_FLUSH = " AND set_config('synchronous_commit', 'off', true) IS NOT NULL"


def no_flush(db: BaseDatabaseWrapper) -> str:
    """``NO_FLUSH`` where a statement that marks work as taken or under way may use it, else "".

    On PostgreSQL, outside a transaction, a claim and a step marked running commit without
    waiting for the write-ahead log to reach the disk. Only a crash of the database server can
    lose such a commit (the last few hundred milliseconds of them, ``wal_writer_delay`` × 3),
    and losing it puts the job back as it was before: queued, or its step pending. Its worker's
    next write, fenced by the lease token, is then refused, and the job runs again after its last
    finished step, as after a lost worker. Every checkpoint and outcome still waits for the
    disk, and so makes everything committed before it durable too. Inside a transaction the
    setting would cover the caller's own writes: there the statement waits as usual.
    """
    if db.vendor == "postgresql" and not db.in_atomic_block:
        return NO_FLUSH
    return ""


#: Lease tokens need to be unique, not secret (whoever can read them can write the rows they
#: fence): each process draws them from a generator of its own, seeded by the OS, again in a
#: forked child. A token from ``secrets`` costs a system call, and a worker takes one per job.
_tokens = random.Random()
os.register_at_fork(after_in_child=_tokens.seed)


def new_token() -> str:
    return f"{_tokens.getrandbits(128):032x}"


def worker_prefix(name: str | None = None) -> str:
    """What the ids of this worker's incarnations start with.

    Named workers (``runjobs --worker-id NAME``, one name per running process) are ``NAME@``;
    unnamed ones are ``host:pid:`` — a process with our pid on our host is dead, whoever it was.
    """
    return f"{name}@" if name else f"{socket.gethostname()}:{os.getpid()}:"


def new_worker_id(name: str | None = None) -> str:
    """Unique per process incarnation: host, pid and a random part."""
    suffix = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    return f"{name}@{suffix}" if name else suffix


# MySQL client errors that mean the connection is gone: can't connect (2002, 2003), server has
# gone away (2006), lost during query (2013), lost reading (2055), shutdown (1053), killed
# (1927), disconnected for inactivity (4031).
MYSQL_CONNECTION_LOST = frozenset({1053, 1927, 2002, 2003, 2006, 2013, 2055, 4031})


def database_trouble(exc: BaseException) -> bool:
    """True when ``exc`` means the database connection is gone, not that the job went wrong.

    Judged by the driver's error: after a session dies inside ``transaction.atomic()``, Django
    has already opened a fresh connection, so asking the connection would say all is well.
    """
    if isinstance(exc, InterfaceError):
        return True
    if not isinstance(exc, OperationalError):
        return False
    cause = exc.__cause__
    if connection.vendor == "postgresql":
        sqlstate = getattr(cause, "sqlstate", None)
        # No SQLSTATE: the client lost the server. 08: connection exceptions. 57P: the server
        # shut down or terminated the session (57014, a cancelled statement, is the job's own).
        return sqlstate is None or sqlstate.startswith(("08", "57P"))
    if connection.vendor == "mysql":
        code = cause.args[0] if cause is not None and cause.args else None
        return code in MYSQL_CONNECTION_LOST
    try:
        return connection.connection is None or not connection.is_usable()
    except Exception:
        return True


def append_log(
    job_id: int, line: Any, db: BaseDatabaseWrapper | None = None, at: datetime | None = None
) -> None:
    """Store one redacted, shortened log line (unfenced: a worker's lease fences it by other means)."""
    db = db or sql.database()

    def insert() -> str:
        return f"INSERT INTO {sql.table(db, JobLog)} (job_id, at, line) VALUES (%s, %s, %s)"

    params = [job_id, sql.prepared_datetime(db, at or timezone.now()), clean_log_line(line)]
    sql.run(db, sql.statement(db, ("log",), insert), params)


def clean_log_line(line: Any) -> str:
    return shown_text(line, get_setting("LOG_LINE_MAX_CHARS"))


def trim_log(job_id: int) -> None:
    """Keep only the latest ``LOG_LINES_KEPT`` lines of a job."""
    keep = get_setting("LOG_LINES_KEPT")
    oldest_kept = (
        JobLog.objects.filter(job_id=job_id)
        .order_by("-id")
        .values_list("id", flat=True)[keep - 1 : keep]
        .first()
    )
    if oldest_kept is not None:
        JobLog.objects.filter(job_id=job_id, id__lt=oldest_kept).delete()


# Enqueue ---------------------------------------------------------------------------------------


def _refuse(message: str) -> JobError:
    return JobError("invalid_input", message)


def _optional_text(value: Any, name: str, max_length: int = 255) -> str:
    if value is None:
        return ""
    text = str(value)
    if len(text) > max_length:
        raise _refuse(f"{name} is {len(text)} characters long; the limit is {max_length}.")
    return check_text(text, name)


def _run_at(run_at: datetime | timedelta | None, now: datetime) -> datetime:
    if run_at is None:
        return now
    if isinstance(run_at, timedelta):
        if run_at < timedelta(0):
            raise _refuse(f"run_at cannot be a negative delay ({run_at}).")
        try:
            return now + run_at
        except OverflowError:
            raise _refuse(f"run_at is a delay past the last date a database stores ({run_at}).") from None
    if not isinstance(run_at, datetime):
        raise _refuse(f"run_at must be a datetime or a timedelta, not {type(run_at).__name__}.")
    if timezone.is_naive(run_at):
        raise _refuse("run_at must be timezone-aware.")
    return run_at


def _resolve_parent(parent: Job | int | None) -> int | None:
    if parent is None:
        return None
    parent_id = to_job_id(parent, "The parent")
    if not Job.objects.filter(pk=parent_id).exists():
        raise JobError("job_not_found", f"Parent job {parent_id} does not exist.")
    return parent_id


def enqueue(
    kind: str | JobKind,
    *,
    subject: Any = None,
    idempotency_key: str | None = None,
    created_by: Any = None,
    actor_type: str = "user",
    group_id: str | None = None,
    subject_type: str | None = None,
    subject_id: str | int | None = None,
    label: str | None = None,
    parent: Job | int | None = None,
    run_at: datetime | timedelta | None = None,
    max_attempts: int | None = None,
    initial_status: str | None = None,
    queue: str | None = None,
    priority: int | None = None,
) -> tuple[Job, bool]:
    """Create a job, or return the one that already has ``idempotency_key``.

    Returns ``(job, created)``. Concurrent calls with one key get one row: the unique index
    decides, and the losers read the winner's row. Everything is checked before anything is
    written, so a refused call (``JobError``) leaves no trace.

    >>> job, created = enqueue("deploy_site", subject={"site_id": 7}, idempotency_key="deploy-7")
    """
    definition, fields = _checked_fields(
        kind,
        timezone.now(),
        subject=subject,
        idempotency_key=idempotency_key,
        created_by=created_by,
        actor_type=actor_type,
        group_id=group_id,
        subject_type=subject_type,
        subject_id=subject_id,
        label=label,
        parent=parent,
        run_at=run_at,
        max_attempts=max_attempts,
        initial_status=initial_status,
        queue=queue,
        priority=priority,
    )
    return _enqueue_checked(definition, fields)


def _enqueue_checked(definition: JobKind, fields: dict[str, Any]) -> tuple[Job, bool]:
    key = fields["idempotency_key"]
    if key is not None:
        existing = Job.objects.filter(idempotency_key=key).first()
        if existing is not None:
            return _same_kind(existing, definition), False
        try:
            return _insert(definition, fields), True
        except IntegrityError:
            existing = Job.objects.filter(idempotency_key=key).first()
            if existing is None:
                raise
            return _same_kind(existing, definition), False
    return _insert(definition, fields), True


def enqueue_many(kind: str | JobKind, specs: Iterable[dict[str, Any]]) -> list[tuple[Job, bool]]:
    """Create many jobs of one kind in a few statements; ``specs`` are ``enqueue()`` keyword arguments.

    Returns ``(job, created)`` in the order of ``specs``. Idempotency keys are honoured as by
    ``enqueue()``: a key that exists (or repeats within ``specs``) gives the existing job. Every
    spec is checked before anything is written.

    >>> enqueue_many("send_invoice", [{"subject": {"invoice": n}} for n in range(1000)])
    """
    now = timezone.now()  # jobs enqueued together without a run_at are due together
    checked = [_checked_fields(kind, now, **spec) for spec in specs]
    if not checked:
        return []
    definition = checked[0][0]
    keys = [fields["idempotency_key"] for _, fields in checked if fields["idempotency_key"] is not None]
    existing = (
        {job.idempotency_key: job for job in Job.objects.filter(idempotency_key__in=keys)} if keys else {}
    )
    # Each spec's outcome: an existing job, or the index of the row it inserts.
    places: list[Job | int] = []
    first_with_key: dict[str, int] = {}
    rows: list[dict[str, Any]] = []
    for _, fields in checked:
        key = fields["idempotency_key"]
        if key in existing:
            places.append(_same_kind(existing[key], definition))
        elif key is not None and key in first_with_key:
            places.append(first_with_key[key])
        else:
            if key is not None:
                first_with_key[key] = len(rows)
            places.append(len(rows))
            rows.append(fields)
    try:
        inserted = _insert_rows(definition, rows)
    except IntegrityError:
        # Another caller took one of the keys meanwhile: one by one, each race-safe.
        return [_enqueue_checked(definition, fields) for _, fields in checked]
    for job in inserted:
        changed_to(job, None, job.status)
    claimed: set[int] = set()
    outcome: list[tuple[Job, bool]] = []
    for place in places:
        if isinstance(place, Job):
            outcome.append((place, False))
        else:
            outcome.append((inserted[place], place not in claimed))
            claimed.add(place)
    return outcome


def _insert(definition: JobKind, fields: dict[str, Any]) -> Job:
    [job] = _insert_rows(definition, [fields])
    changed_to(job, None, job.status)
    return job


def _insert_rows(definition: JobKind, rows: list[dict[str, Any]]) -> list[Job]:
    """Insert jobs (``rows`` of checked fields) with their declared steps, and wake the workers
    of the queues that have a job due now; all in one transaction."""
    if not rows:
        return []
    _check_creators(rows)
    now = timezone.now()
    due_queues = sorted(
        {row["queue"] for row in rows if row["status"] == Status.QUEUED and row["next_run_at"] <= now}
    )
    db = sql.database()
    if db.vendor == "postgresql":
        return _insert_in_one_statement(db, definition, rows, now, due_queues)
    jobs = [Job(**row) for row in rows]
    with transaction.atomic():
        if connection.features.can_return_rows_from_bulk_insert:
            Job.objects.bulk_create(jobs, batch_size=1000)
        else:  # MySQL does not hand back the new ids of a multi-row insert
            for job in jobs:
                job.save(force_insert=True)
        JobStep.objects.bulk_create(
            (
                JobStep(job=job, phase=Phase.RUN, position=position, step_id=step_id, title=title)
                for job in jobs
                for position, (step_id, title) in enumerate(definition.steps)
            ),
            batch_size=1000,
        )
        for queue in due_queues:
            notify_due(queue)
    return jobs


#: The columns an enqueue sets job by job (``_checked_fields``); every other one starts at its
#: field's default, the same for every job.
ENQUEUED_COLUMNS = (
    "kind",
    "label",
    "status",
    "subject",
    "queue",
    "priority",
    "max_attempts",
    "next_run_at",
    "idempotency_key",
    "created_by_id",
    "actor_type",
    "group_id",
    "subject_type",
    "subject_id",
    "parent_id",
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

        def fixed_value(field) -> str:
            if getattr(field, "auto_now", False) or getattr(field, "auto_now_add", False):
                return f"%s::{field.db_type(db)}"
            return f"{_literal(getattr(template, field.attname))}::{field.db_type(db)}"

        return cls(
            fixed_columns=", ".join(db.ops.quote_name(field.column) for field in fixed),
            fixed_values=", ".join(fixed_value(field) for field in fixed),
            columns={field.attname: field.column for field in varying},
            casts={field.attname: field.db_type(db) for field in varying},
            array_types={
                field.attname: "text" if field.attname == "subject" else field.db_type(db).split("(")[0]
                for field in varying
            },
            defaults=tuple(getattr(template, field.attname) for field in Job._meta.concrete_fields),
            positions={field.attname: index for index, field in enumerate(Job._meta.concrete_fields)},
        )


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
        for position, (step_id, title) in enumerate(definition.steps):
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
        jobs.append(Job.from_db(db.alias, None, values))
    return jobs


def _checked_fields(
    kind: str | JobKind,
    now: datetime,
    *,
    subject: Any = None,
    idempotency_key: str | None = None,
    created_by: Any = None,
    actor_type: str = "user",
    group_id: str | None = None,
    subject_type: str | None = None,
    subject_id: str | int | None = None,
    label: str | None = None,
    parent: Job | int | None = None,
    run_at: datetime | timedelta | None = None,
    max_attempts: int | None = None,
    initial_status: str | None = None,
    queue: str | None = None,
    priority: int | None = None,
) -> tuple[JobKind, dict[str, Any]]:
    """The kind and the row's fields for an enqueue at ``now``.

    ``JobError`` for anything that cannot be stored.
    """
    definition = kind if isinstance(kind, JobKind) else get_kind(kind)
    subject = to_json(
        {} if subject is None else subject, what="The subject", max_bytes=get_setting("MAX_SUBJECT_BYTES")
    )
    if idempotency_key is not None and (not isinstance(idempotency_key, str) or not idempotency_key.strip()):
        raise _refuse(f"An idempotency key must be a non-blank string, not {idempotency_key!r}.")
    key = _optional_text(idempotency_key, "The idempotency key") or None
    if max_attempts is not None and max_attempts_problem(max_attempts):
        raise _refuse(max_attempts_problem(max_attempts))
    if priority is not None and (
        isinstance(priority, bool) or not isinstance(priority, int) or priority not in PRIORITY_RANGE
    ):
        raise _refuse(f"priority must be an integer from -100 to 100, not {priority!r}.")
    status = initial_status or Status.QUEUED
    if status not in INITIAL_STATUSES:
        raise _refuse(f"A job cannot start as {status!r}; it can start queued or in a waiting state.")
    if run_at is not None and status in (Status.PAUSED, Status.NEEDS_USER):
        raise _refuse(f"A job that starts {status} waits for a person; it takes no run_at.")
    fields = dict(
        kind=definition.name,
        label=_optional_text(label, "The label") or definition.title[:255],
        status=status,
        subject=subject,
        queue=_optional_text(queue, "The queue", 100) or definition.queue,
        priority=definition.priority if priority is None else priority,
        max_attempts=max_attempts or definition.max_attempts,
        # A waiting job's next_run_at is when it wakes by itself: only if asked for.
        next_run_at=_run_at(run_at, now) if status == Status.QUEUED or run_at is not None else None,
        idempotency_key=key,
        created_by_id=_creator_id(created_by),
        actor_type=_optional_text(actor_type, "The actor type", 20) or Job.ActorType.USER,
        group_id=_optional_text(group_id, "The group id"),
        subject_type=_optional_text(subject_type, "The subject type", 100),
        subject_id=_optional_text(subject_id, "The subject id"),
        parent_id=_resolve_parent(parent),
    )
    return definition, fields


def _creator_id(created_by: Any) -> Any:
    """The user id ``created_by`` names (a user, or a user's id); ``invalid_input`` for anything
    else. Whether that user exists is checked when the job is inserted (``_check_creators``)."""
    if created_by is None:
        return None
    pk_field = get_user_model()._meta.pk
    value = created_by.pk if isinstance(created_by, Model) else created_by
    try:
        if value is None or isinstance(value, bool | float):
            raise ValidationError("not an id")
        user_id = pk_field.to_python(value)
        if isinstance(user_id, int) and not -(2**63) <= user_id < 2**63:
            raise ValidationError("out of range")
        return user_id
    except ValidationError:
        raise _refuse(
            f"created_by must be a saved user or a user's id, not {short_repr(created_by)}."
        ) from None


def _check_creators(rows: list[dict[str, Any]]) -> None:
    """``invalid_input`` when a row's ``created_by_id`` names no user (one query for all rows)."""
    wanted = {row["created_by_id"] for row in rows} - {None}
    if not wanted:
        return
    found = set(get_user_model()._default_manager.filter(pk__in=wanted).values_list("pk", flat=True))
    missing = wanted - found
    if missing:
        raise _refuse(f"created_by names no existing user: {short_repr(sorted(missing, key=str))}.")


def _same_kind(existing: Job, definition: JobKind) -> Job:
    if existing.kind != definition.name:
        raise _refuse(
            f"The idempotency key {existing.idempotency_key!r} belongs to job {existing.pk} "
            f"of kind {existing.kind!r}, not {definition.name!r}."
        )
    return existing


# Claiming --------------------------------------------------------------------------------------


def claim(worker_id: str, queues: Iterable[str] | None = None) -> Lease | None:
    """Take the most urgent due job (or pending revert) for ``worker_id``; None when nothing is due.

    PostgreSQL and MySQL/MariaDB lock the candidate row with ``SKIP LOCKED`` so concurrent
    workers pass over each other; SQLite, which locks the whole database, uses an update that
    is conditional on the status the candidate was read with.
    """
    db = sql.database()
    queues = tuple(queues or ())
    token = new_token()
    # Pending reverts (an operator asked for them; they are few) are looked for first at most
    # every REVERT_LOOKUP_SECONDS, and whenever nothing is queued. One status at a time, so the
    # database reads "durajobs_due" in claim order and stops at the first row it can lock.
    global _next_revert_lookup
    reverts_first = time.monotonic() >= _next_revert_lookup
    if reverts_first:
        _next_revert_lookup = time.monotonic() + REVERT_LOOKUP_SECONDS
    for status in (Status.REVERTING, Status.QUEUED) if reverts_first else (Status.QUEUED, Status.REVERTING):
        job = _claim_one(db, status, queues, worker_id, token)
        if job is not None:
            break
    else:
        return None
    if job.status == Status.RUNNING:
        changed_to(job, Status.QUEUED, Status.RUNNING)
    return Lease(job, worker_id, token, queues)


REVERT_LOOKUP_SECONDS = 1.0
_next_revert_lookup = 0.0

#: Databases whose UPDATE can return the row it changed: a claim is then one statement.
CLAIM_RETURNING = frozenset({"postgresql", "sqlite"})


def _claim_one(
    db: BaseDatabaseWrapper,
    status: str,
    queues: tuple[str, ...],
    worker_id: str,
    token: str,
    now: datetime | None = None,
) -> Job | None:
    """Claim one job in ``status``; ``now`` is the moment it is claimed at (a finish passes its own)."""
    kinds = known_kinds()
    if not kinds:
        return None
    now = now or timezone.now()
    if db.vendor in CLAIM_RETURNING:
        return _claim_returning(db, status, kinds, queues, worker_id, token, now)
    return _claim_locked(db, status, kinds, queues, worker_id, token, now)


def _claim_returning(
    db: BaseDatabaseWrapper,
    status: str,
    kinds: list[str],
    queues: tuple[str, ...],
    worker_id: str,
    token: str,
    now: datetime,
) -> Job | None:
    """One ``UPDATE … WHERE id = (SELECT … LIMIT 1) RETURNING …`` (on PostgreSQL the subquery locks
    with ``SKIP LOCKED``): the claim, the lock and the read in a single round trip."""
    flush = no_flush(db)
    shape = (status, len(kinds), len(queues), flush)
    statement = sql.statement(db, ("claim", *shape), lambda: _claim_sql(db, *shape))
    rows = sql.fetch(db, statement, _claim_params(db, status, kinds, queues, worker_id, token, now))
    return sql.read_rows(db, Job, rows)[0] if rows else None


def _claim_locked(
    db: BaseDatabaseWrapper,
    status: str,
    kinds: list[str],
    queues: tuple[str, ...],
    worker_id: str,
    token: str,
    now: datetime,
) -> Job | None:
    """MySQL/MariaDB, which cannot return what an UPDATE changed: read the most urgent due job,
    locked (``SKIP LOCKED`` where the server has it), and take it, in one transaction.

    Without ``SKIP LOCKED`` a job another worker took meanwhile is passed over: the take is
    conditional on the job still being unclaimed.
    """
    lock = " FOR UPDATE SKIP LOCKED" if db.features.has_select_for_update_skip_locked else ""
    shape = (status, len(kinds), len(queues))
    pick = sql.statement(
        db,
        ("claim pick", *shape, lock),
        lambda: _pick_sql(db, *shape, what=sql.returned_columns(db, Job), lock=lock),
    )

    def take_sql() -> str:
        quote = db.ops.quote_name
        return (
            f"UPDATE {sql.table(db, Job)} SET {_taking_sql(db, status)} "
            f"WHERE {quote('id')} = %s AND {quote('status')} = %s AND {quote('locked_by')} = ''"
        )

    take = sql.statement(db, ("claim take", status), take_sql)
    prepared_now = sql.prepared_datetime(db, now)
    for _ in range(10):
        with transaction.atomic():
            rows = sql.fetch(db, pick, _pick_params(status, kinds, queues, prepared_now))
            if not rows:
                return None
            [job] = sql.read_rows(db, Job, rows)
            if sql.run(db, take, [*_taking_params(status, worker_id, token, prepared_now), job.pk, status]):
                if status == Status.QUEUED:
                    job.status, job.attempt, job.started_at = (
                        Status.RUNNING,
                        job.attempt + 1,
                        job.started_at or now,
                    )
                job.locked_by, job.lease_token, job.locked_at, job.updated_at = worker_id, token, now, now
                return job
    return None


def _taking_sql(db: BaseDatabaseWrapper, status: str) -> str:
    """What a claim sets: a queued job becomes running and counts a try; either way it is locked."""
    quote = db.ops.quote_name
    taking = (
        f"{quote('status')} = %s, {quote('attempt')} = {quote('attempt')} + 1, "
        f"{quote('started_at')} = COALESCE({quote('started_at')}, %s), "
        if status == Status.QUEUED
        else ""
    )
    return (
        f"{taking}{quote('locked_by')} = %s, {quote('locked_at')} = {database_now_sql(db)}, "
        f"{quote('lease_token')} = %s, {quote('updated_at')} = %s"
    )


def _taking_params(status: str, worker_id: str, token: str, now: Any) -> list[Any]:
    taking = [Status.RUNNING, now] if status == Status.QUEUED else []
    return [*taking, worker_id, token, now]


def _pick_sql(
    db: BaseDatabaseWrapper, status: str, kinds: int, queues: int, what: str, lock: str, only_if: str = ""
) -> str:
    """``SELECT what`` of the most urgent due job in ``status``, read from ``durajobs_due`` in claim order."""
    quote = db.ops.quote_name
    next_run_at = quote("next_run_at")
    in_queues = f" AND {quote('queue')} IN ({', '.join(['%s'] * queues)})" if queues else ""
    return (
        f"SELECT {what} FROM {sql.table(db, Job)} WHERE {quote('status')} = %s AND {quote('locked_by')} = '' "
        f"AND {quote('kind')} IN ({', '.join(['%s'] * kinds)}) AND {next_run_at} <= %s{in_queues}{only_if} "
        f"ORDER BY {quote('priority')} DESC, {next_run_at} ASC, {quote('id')} ASC LIMIT 1{lock}"
    )


def _pick_params(status: str, kinds: list[str], queues: tuple[str, ...], now: Any) -> list[Any]:
    return [status, *kinds, now, *queues]


def _claim_sql(
    db: BaseDatabaseWrapper, status: str, kinds: int, queues: int, flush: str, only_if: str = ""
) -> str:
    """The claim's ``UPDATE … RETURNING``; ``only_if`` is one more condition on the job it picks."""
    quote = db.ops.quote_name
    lock = " FOR UPDATE SKIP LOCKED" if db.vendor == "postgresql" else ""
    pick = _pick_sql(db, status, kinds, queues, what=quote("id"), lock=lock, only_if=only_if)
    return (
        f"UPDATE {sql.table(db, Job)} SET {_taking_sql(db, status)} "
        f"WHERE {quote('id')} = ({pick}) AND {quote('status')} = %s AND {quote('locked_by')} = ''{flush} "
        f"RETURNING {sql.returned_columns(db, Job)}"
    )


def _claim_params(
    db: BaseDatabaseWrapper,
    status: str,
    kinds: list[str],
    queues: tuple[str, ...],
    worker_id: str,
    token: str,
    now: datetime,
) -> list[Any]:
    """The parameters of ``_claim_sql``, in its order."""
    now = sql.prepared_datetime(db, now)
    return [*_taking_params(status, worker_id, token, now), *_pick_params(status, kinds, queues, now), status]


# Recovery and release -------------------------------------------------------------------------

HELD = (Status.RUNNING, Status.REVERTING)


def recover(worker_id: str | None = None) -> int:
    """Re-queue running (or reverting) jobs whose lease expired, and ``worker_id``'s own.

    The lease is judged on the database's clock. A job whose worker is lost for the
    ``MAX_WORKER_LOSSES``-th time fails with ``error_code="worker_lost"`` instead of being
    handed to yet another worker it might crash.
    """
    cutoff = database_now() - timedelta(seconds=get_setting("LEASE_SECONDS"))
    lost = Q(locked_at__lt=cutoff)
    if worker_id:
        lost |= Q(locked_by=worker_id)
    return _release_all(lost, "lost")


def recover_predecessors(worker_id: str, prefix: str) -> int:
    """Re-queue at once the jobs of earlier incarnations of this worker (see ``worker_prefix``).

    A process that starts again under the same name knows its predecessor is dead, so its jobs
    need not wait for their leases to expire.
    """
    return _release_all(Q(locked_by__startswith=prefix) & ~Q(locked_by=worker_id), "lost")


def _release_all(which: Q, why: str) -> int:
    candidates = Job.objects.filter(which, status__in=HELD).exclude(locked_by="")
    fields = ("pk", "status", "phase", "queue", "lease_token", "worker_losses", "locked_by", "parent_id")
    return sum(release(job, why, extra=which) for job in candidates.only(*fields))


def release(job: Job, why: str, extra: Q | None = None) -> int:
    """Give a held job back to the queue (to resume after its last finished step); 1 if it was.

    ``why`` is ``"lost"`` (its worker died or lost its lease: counts towards
    ``MAX_WORKER_LOSSES``) or ``"stopping"`` (its worker is shutting down: counts nothing).
    The update is fenced by the job's lease token as it was read, so a job that changed hands
    meanwhile is left alone.
    """
    now = timezone.now()
    losses = job.worker_losses + (why == "lost")
    unlock = dict(locked_by="", locked_at=None, lease_token="", updated_at=now, worker_losses=losses)
    if why == "lost" and losses >= get_setting("MAX_WORKER_LOSSES"):
        status = Status.FAILED
        fields = dict(
            status=status,
            error=f"The worker running this job was lost {losses} times; it is not handed to another one.",
            error_code="worker_lost",
            ended_at=now,
        )
        line = f"Worker {job.locked_by} lost; the job failed after {losses} lost workers."
    else:
        status = Status.REVERTING if job.phase == Phase.REVERT else Status.QUEUED
        fields = dict(status=status, next_run_at=now)
        if job.phase == Phase.RUN:
            fields["attempt"] = GIVE_ATTEMPT_BACK
        if why == "lost":
            line = f"Worker {job.locked_by} lost; the job resumes after its last finished step."
        else:
            line = f"Worker {job.locked_by} stopped; the job resumes after its last finished step."
    with transaction.atomic():
        fence = Job.objects.filter(pk=job.pk, lease_token=job.lease_token, status__in=HELD)
        if extra is not None:
            fence = fence.filter(extra)
        if not fence.update(**unlock, **fields):
            return 0
        JobStep.objects.filter(job_id=job.pk, state=StepState.RUNNING).update(
            state=StepState.PENDING,
            detail=f"Interrupted: its worker {'was lost' if why == 'lost' else 'stopped'}.",
        )
        append_log(job.pk, line)
        if status != Status.FAILED:
            notify_due(job.queue)
    logger.warning("Job %s: %s", job.pk, line)
    changed_to(job, job.status, status)
    return 1


def heartbeat(leases: Iterable[Lease]) -> list[Lease]:
    """Renew the leases of running jobs; returns those that are no longer ours."""
    lost = []
    for lease in leases:
        if not Job.objects.filter(pk=lease.job.pk, lease_token=lease.token).update(locked_at=DatabaseNow()):
            lost.append(lease)
    return lost


# Pruning ---------------------------------------------------------------------------------------


def prune(older_than: timedelta, *, dry_run: bool = False, batch: int = 1000) -> int:
    """Delete jobs that ended more than ``older_than`` ago, with their steps and log; returns how many.

    A job with a child that has not ended is kept (deleting a parent deletes its children).
    """
    cutoff = timezone.now() - older_than
    open_child = Job.objects.filter(parent_id=OuterRef("pk")).exclude(status__in=TERMINAL)
    old = Job.objects.filter(status__in=TERMINAL, ended_at__lt=cutoff).exclude(Exists(open_child))
    if dry_run:
        return old.count()
    deleted = 0
    while ids := list(old.values_list("pk", flat=True)[:batch]):
        Job.objects.filter(pk__in=ids).delete()
        deleted += len(ids)
    return deleted


# Waking workers --------------------------------------------------------------------------------

NOTIFY_CHANNEL = "durajobs"


def notify_due(queue: str) -> None:
    """Tell idle PostgreSQL workers a job of ``queue`` is due (delivered when the transaction commits)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_notify(%s, %s)", [NOTIFY_CHANNEL, queue])


# Status transitions made by operations ---------------------------------------------------------


def change_status(job: Job, fields: dict[str, Any], log_line: str, **expected: Any) -> bool:
    """Apply ``fields`` if the job still has the status it was read with (and ``expected``
    values); False if it moved on."""
    with transaction.atomic():
        unchanged = Job.objects.filter(pk=job.pk, status=job.status, **expected)
        changed = unchanged.update(updated_at=timezone.now(), **fields)
        if changed:
            append_log(job.pk, log_line)
            trim_log(job.pk)
            if fields.get("status") in DUE_STATUSES:
                notify_due(job.queue)
    if changed:
        changed_to(job, job.status, fields.get("status", job.status), fields)
    return bool(changed)


class _MovedOn(Exception):
    """A job of a bulk change was no longer in the status it was decided from."""


def change_status_many(jobs: Sequence[Job], status: str, fields: dict[str, Any], log_line: str) -> bool:
    """Apply one decision's ``fields`` to ``jobs``, all read in ``status``, with one log line each;
    False, and nothing written, if any of them moved on meanwhile.

    One conditional ``UPDATE`` for them all, their log lines in one insert, and only the logs
    over ``LOG_LINES_KEPT`` trimmed. The jobs (read with ``pk``, ``queue`` and ``parent_id``) get
    the plain values of ``fields`` set.
    """
    ids = [job.pk for job in jobs]
    now = timezone.now()
    line = clean_log_line(log_line)
    try:
        with transaction.atomic():
            if Job.objects.filter(pk__in=ids, status=status).update(updated_at=now, **fields) != len(ids):
                raise _MovedOn
            _log_each(ids, now, line)
            keep = get_setting("LOG_LINES_KEPT")
            long_logs = (
                JobLog.objects.filter(job_id__in=ids)
                .values("job_id")
                .annotate(lines=Count("id"))
                .filter(lines__gt=keep)
                .values_list("job_id", flat=True)
            )
            for job_id in list(long_logs):
                trim_log(job_id)
            if fields.get("status") in DUE_STATUSES:
                for queue in sorted({job.queue for job in jobs}):
                    notify_due(queue)
    except _MovedOn:
        return False
    for job in jobs:
        for name, value in fields.items():
            if not hasattr(value, "resolve_expression"):
                setattr(job, name, value)
        job.updated_at = now
    changed_many(jobs, status, fields.get("status", status), fields)
    return True


def _log_each(ids: list[int], at: datetime, line: str) -> None:
    """One log line for each of the jobs ``ids``, in one ``INSERT … SELECT``."""
    db = sql.database()
    quote = db.ops.quote_name
    statement = (
        f"INSERT INTO {sql.table(db, JobLog)} (job_id, at, line) "
        f"SELECT {quote('id')}, %s, %s FROM {sql.table(db, Job)} "
        f"WHERE {quote('id')} IN ({', '.join(['%s'] * len(ids))})"
    )
    with db.cursor() as cursor:
        cursor.execute(statement, [sql.prepared_datetime(db, at), line, *ids])


def changed_to(job: Job, previous: str | None, status: str, fields: dict[str, Any] | None = None) -> None:
    """What follows a committed change: ``job_changed``, and waking a parent whose children settled."""
    changed_many((job,), previous, status, fields)


def changed_many(
    jobs: Iterable[Job], previous: str | None, status: str, fields: dict[str, Any] | None = None
) -> None:
    """``changed_to`` for jobs that made one change together: each parent is woken once."""
    parents = set()
    for job in jobs:
        announce_change(job.pk, previous, status)
        if job.parent_id and status in SETTLED and status != previous:
            parents.add(job.parent_id)
        if fields and fields.get("waits_for_children"):
            # Children may have settled while this job was deciding to wait: look once more.
            wake_parent(job.pk)
    for parent_id in sorted(parents):
        wake_parent(parent_id)


# Parents and children --------------------------------------------------------------------------


def open_children(parent_id: int) -> tuple[int, int]:
    """``(still open, total)`` children of a job."""
    counts = dict(
        Job.objects.filter(parent_id=parent_id).values_list("status").annotate(n=Count("id")).order_by()
    )
    total = sum(counts.values())
    return total - sum(n for status, n in counts.items() if status in SETTLED), total


def children_wait_reason(still_open: int, total: int) -> str:
    return f"Waiting for {still_open} of {total} child jobs"


def wake_parent(parent_id: int) -> bool:
    """Wake a parent waiting for its children once none is open; True for the one call that does.

    Each child calls this after its own change committed, so the last one to settle sees the
    others settled; two settling at once may both try, and the update conditional on
    ``waits_for_children`` lets exactly one succeed.
    """
    parent = Job.objects.filter(pk=parent_id, waits_for_children=True).first()
    if parent is None or parent.status not in (Status.AWAITING_EXTERNAL, Status.REVERTING):
        return False
    still_open, total = open_children(parent_id)
    if still_open:
        Job.objects.filter(pk=parent_id, waits_for_children=True).update(
            wait_reason=children_wait_reason(still_open, total)
        )
        return False
    fields: dict[str, Any] = dict(waits_for_children=False, wait_reason="", next_run_at=timezone.now())
    if parent.status == Status.AWAITING_EXTERNAL:
        fields.update(status=Status.QUEUED, eta_at=None)
    then = "its revert goes on" if parent.phase == Phase.REVERT else "queued again"
    line = f"All {total} child jobs have settled; {then}."
    woke = change_status(parent, fields, line, waits_for_children=True)
    if woke and parent.status == Status.REVERTING:
        notify_due(parent.queue)
    return woke


def wake_forgotten_parents(limit: int = 100) -> int:
    """Wake parents whose children all settled but whose wake-up was missed (a settle inside a
    caller's transaction that committed late); workers run this now and then."""
    open_child = Job.objects.filter(parent_id=OuterRef("pk")).exclude(status__in=SETTLED)
    forgotten = Job.objects.filter(
        waits_for_children=True, status__in=(Status.AWAITING_EXTERNAL, Status.REVERTING)
    ).exclude(Exists(open_child))
    return sum(wake_parent(pk) for pk in forgotten.values_list("pk", flat=True)[:limit])


# The lease a worker holds ----------------------------------------------------------------------


class StepRowMissing(Exception):
    """A step taken to be in the database is not there: its job's steps must be read again."""


class Lease:
    """A worker's hold on one claimed job. Each write is fenced by the lease token.

    When another worker has taken the job over (this one stalled past its lease) or the job was
    released, the write changes nothing and ``LeaseLost`` is raised: the stale worker abandons
    the job instead of overwriting its new owner's work.
    """

    def __init__(self, job: Job, worker_id: str, token: str, queues: tuple[str, ...] = ()) -> None:
        self.job = job
        self.worker_id = worker_id
        self.token = token
        self.queues = queues  # what it was claimed from; a successor is claimed from them too
        #: The worker's next job, when giving this one up claimed it too (``finish(then_claim=…)``).
        self.successor: Lease | None = None
        #: Its outcome is being recorded, or was: whether the lease was lost is then its job
        #: thread's to tell (a heartbeat meanwhile finds the token already cleared).
        self.finishing = False
        self._renewed = time.monotonic()
        self._lines_untrimmed = 0  # log lines added since the log was last trimmed

    def _lost(self) -> LeaseLost:
        return LeaseLost(f"Job {self.job.pk} is no longer held by {self.worker_id}.")

    def _update_job(self, db: BaseDatabaseWrapper, values: dict[str, Any]) -> tuple[sql.Statement, list[Any]]:
        """The fenced ``UPDATE`` of the job to ``values``, and its parameters."""
        assignments, params = sql.assignments(db, Job, values)

        def update() -> str:
            quote = db.ops.quote_name
            return (
                f"UPDATE {sql.table(db, Job)} SET {assignments.sql} "
                f"WHERE {quote('id')} = %s AND {quote('lease_token')} = %s"
            )

        return sql.statement(db, ("update job", assignments), update), [*params, self.job.id, self.token]

    def _update_step(
        self, db: BaseDatabaseWrapper, step: JobStep, fields: dict[str, Any], *, start: bool = False
    ) -> int:
        """Write ``fields`` to ``step`` if the job is still ours; a start also needs no cancel request
        (and, outside a transaction, need not wait for the disk: see ``no_flush``).

        The step is found by job, phase and step id, so a step taken from its kind's
        declaration (``JobContext.steps``) needs no id. Returns the number of rows changed.
        """
        assignments, params = sql.assignments(db, JobStep, fields)
        flush = no_flush(db) if start else ""

        def update() -> str:
            quote = db.ops.quote_name
            not_cancelled = f" AND {quote('cancel_requested')} = %s" if start else ""
            return (
                f"UPDATE {sql.table(db, JobStep)} SET {assignments.sql} "
                f"WHERE {quote('job_id')} = %s AND {quote('phase')} = %s AND {quote('step_id')} = %s "
                f"AND EXISTS (SELECT 1 FROM {sql.table(db, Job)} "
                f"WHERE {quote('id')} = %s AND {quote('lease_token')} = %s{not_cancelled}){flush}"
            )

        params += [self.job.id, step.phase, step.step_id, self.job.id, self.token]
        if start:
            params.append(False)
        statement = sql.statement(db, ("update step", assignments, start, flush), update)
        return sql.run(db, statement, params)

    def renew(self, **fields: Any) -> None:
        """Heartbeat (and optionally set progress/eta); raises ``LeaseLost`` when no longer ours."""
        db = sql.database()
        update, params = self._update_job(
            db, {"locked_at": DatabaseNow(), "updated_at": timezone.now(), **fields}
        )
        if not sql.run(db, update, params):
            raise self._lost()
        self._renewed = time.monotonic()

    def _renew_if_due(self) -> None:
        """Renew on a checkpoint when no heartbeat thread did lately (``drain()`` has none)."""
        if time.monotonic() - self._renewed >= get_setting("HEARTBEAT_SECONDS"):
            self.renew()

    def start_step(self, step: JobStep, *, create: bool, **fields: Any) -> bool:
        """Mark a step running, fenced; False (and nothing written) if a cancel was requested.

        Raises ``StepRowMissing`` when ``step`` (not to be created) has no row.
        """
        for name, value in fields.items():
            setattr(step, name, value)
        self._renew_if_due()
        if create:
            with transaction.atomic():
                if self.cancel_requested():
                    return False
                step.save(force_insert=True)
            return True
        if self._update_step(sql.database(), step, fields, start=True):
            return True
        if self.cancel_requested():  # raises LeaseLost when that was the reason
            return False
        raise StepRowMissing(step.step_id)

    def cancel_requested(self) -> bool:
        """Whether an operator asked to cancel; raises ``LeaseLost`` when the job is no longer ours."""
        db = sql.database()

        def select() -> str:
            quote = db.ops.quote_name
            return (
                f"SELECT {quote('cancel_requested')} FROM {sql.table(db, Job)} "
                f"WHERE {quote('id')} = %s AND {quote('lease_token')} = %s"
            )

        rows = sql.fetch(db, sql.statement(db, ("cancel requested",), select), [self.job.pk, self.token])
        if not rows:
            raise self._lost()
        return bool(rows[0][0])

    def save_step(self, step: JobStep, **fields: Any) -> None:
        """Checkpoint a step row; one statement, fenced by the lease token."""
        for name, value in fields.items():
            setattr(step, name, value)
        if not self._update_step(sql.database(), step, fields):
            raise self._lost()

    def log(self, line: Any) -> None:
        """Add a line; a run that keeps logging has its log trimmed as it goes, so the job never
        holds more than a tenth over ``LOG_LINES_KEPT`` lines."""
        with transaction.atomic():
            self.renew()
            append_log(self.job.pk, line)
            self._lines_untrimmed += 1
            if self._lines_untrimmed > get_setting("LOG_LINES_KEPT") // 10:
                trim_log(self.job.pk)
                self._lines_untrimmed = 0

    def finish(
        self,
        fields: dict[str, Any],
        steps: Iterable[JobStep] = (),
        log_line: str | None = None,
        trim: bool = True,
        then_claim: Callable[[], bool] | None = None,
    ) -> None:
        """Apply the run's outcome and give the job up, fenced: nothing is written if it is no longer ours.

        When ``then_claim()`` says so, the same statement (or transaction) also claims this
        worker's next queued job, as ``successor``: a worker that keeps busy pays one round trip
        per job for claiming and finishing, not two. Not when pending reverts are due to be
        looked for: ``claim()`` looks for those first.
        """
        self.finishing = True
        db = sql.database()
        now = timezone.now()
        status = fields["status"]
        due_at = fields.get("next_run_at")
        due_now = status in DUE_STATUSES and due_at is not None and due_at <= now
        update, params = self._update_job(
            db, {"locked_by": "", "locked_at": None, "lease_token": "", "updated_at": now, **fields}
        )
        steps = list(steps)
        kinds = known_kinds()
        claiming = bool(then_claim and then_claim() and kinds and time.monotonic() < _next_revert_lookup)
        token = new_token() if claiming else ""
        if db.vendor == "postgresql" and not (steps or trim or due_now):
            # The common case, a job done: its outcome, any log line and the next claim in one statement.
            shape = (update, bool(log_line), *((len(kinds), len(self.queues)) if claiming else ()))
            statement = sql.statement(db, ("finish", *shape), lambda: self._finish_sql(db, *shape))
            if log_line:
                params += [now, clean_log_line(log_line)]
            if claiming:
                params += _claim_params(db, Status.QUEUED, kinds, self.queues, self.worker_id, token, now)
            rows = sql.fetch(db, statement, params)
            if not rows:
                raise self._lost()
            successor = sql.read_rows(db, Job, rows)[0] if claiming and rows[0][0] is not None else None
        else:
            with sql.transaction(db, statements_only=not trim):
                for step in steps:  # while the job is still ours: the update below gives it up
                    self._update_step(db, step, {"state": step.state, "detail": step.detail})
                if not sql.run(db, update, params):
                    raise self._lost()
                if log_line:
                    append_log(self.job.id, log_line, db, now)
                if trim:
                    trim_log(self.job.pk)
                if due_now:
                    notify_due(self.job.queue)
                successor = None
                if claiming:
                    successor = _claim_one(db, Status.QUEUED, self.queues, self.worker_id, token, now)
        if successor is not None:
            self.successor = Lease(successor, self.worker_id, token, self.queues)
        changed_to(self.job, self.job.status, status, fields)
        if successor is not None:
            changed_to(successor, Status.QUEUED, Status.RUNNING)

    @staticmethod
    def _finish_sql(
        db: BaseDatabaseWrapper,
        update: sql.Statement,
        logs: bool = True,
        kinds: int = 0,
        queues: int = 0,
    ) -> str:
        """PostgreSQL: ``update`` (the fenced outcome), with ``logs`` its log line and, with ``kinds``,
        the next claim."""
        quote = db.ops.quote_name
        finished = f"WITH finished AS ({update.text} RETURNING {quote('id')})"
        if logs:
            finished += (
                f", logged AS (INSERT INTO {sql.table(db, JobLog)} (job_id, at, line) "
                f"SELECT id, %s, %s FROM finished)"
            )
        if not kinds:
            return f"{finished} SELECT id FROM finished"
        claim = _claim_sql(
            db, Status.QUEUED, kinds, queues, "", only_if=" AND EXISTS (SELECT 1 FROM finished)"
        )
        return f"{finished}, claimed AS ({claim}) SELECT claimed.* FROM finished LEFT JOIN claimed ON true"
