"""Enqueue: every input checked before anything is written, idempotency keys honoured under races.

Over 400 lines: ``enqueue``, ``enqueue_many`` and their race handling share one check of every input
(``_checked_fields``), the seam to split along.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import IntegrityError
from django.db.models import Model
from django.utils import timezone
from django.utils.functional import Promise
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from ..conf import get_setting
from ..errors import JobError
from ..models import Job
from ..registry import PRIORITY_RANGE, JobKind, get_kind, max_attempts_problem
from ..status import WAITING, Status
from ..values import check_text, short_repr, to_job_id, to_json, to_timeout
from .changes import changed_to
from .database import made_despite_deadlocks
from .debouncing import checked_window, enqueue_debounced
from .fairness import fairness_key_of
from .holding import enqueued_under_limits
from .inserting import insert_rows

INITIAL_STATUSES = frozenset({Status.QUEUED}) | WAITING


class _InputNames:
    """What the checks call each input, translated only when a message names it: made once, not
    for every job of an ``enqueue_many``."""

    subject = gettext_lazy("The subject")
    idempotency_key = gettext_lazy("The idempotency key")
    label = gettext_lazy("The label")
    queue = gettext_lazy("The queue")
    timeout = gettext_lazy("The timeout")
    actor_type = gettext_lazy("The actor type")
    group_id = gettext_lazy("The group id")
    subject_type = gettext_lazy("The subject type")
    subject_id = gettext_lazy("The subject id")
    concurrency_key = gettext_lazy("The concurrency key")


def _refuse(message: str) -> JobError:
    return JobError("invalid_input", message)


def _optional_text(value: Any, name: str | Promise, max_length: int = 255) -> str:
    if value is None:
        return ""
    text = str(value)
    if len(text) > max_length:
        raise _refuse(
            _("%(field)s is %(length)s characters long; the limit is %(limit)s.")
            % {"field": name, "length": len(text), "limit": max_length}
        )
    return check_text(text, name)


def _run_at(run_at: datetime | timedelta | None, now: datetime) -> datetime:
    if run_at is None:
        return now
    if isinstance(run_at, timedelta):
        if run_at < timedelta(0):
            raise _refuse(_("run_at cannot be a negative delay (%(delay)s).") % {"delay": run_at})
        try:
            return now + run_at
        except OverflowError:
            raise _refuse(
                _("run_at is a delay past the last date a database stores (%(delay)s).") % {"delay": run_at}
            ) from None
    if not isinstance(run_at, datetime):
        raise _refuse(
            _("run_at must be a datetime or a timedelta, not %(type)s.") % {"type": type(run_at).__name__}
        )
    if timezone.is_naive(run_at):
        raise _refuse(_("run_at must be timezone-aware."))
    return run_at


def _resolve_parent(parent: Job | int | None) -> int | None:
    if parent is None:
        return None
    parent_id = to_job_id(parent, _("The parent"))
    if not Job.objects.filter(pk=parent_id).exists():
        raise JobError("job_not_found", _("Parent job %(job)s does not exist.") % {"job": parent_id})
    return parent_id


@dataclass(frozen=True)
class EnqueueOptions:
    """What an ``enqueue()`` (or one spec of ``enqueue_many()``) asks for, as given: checked by
    ``_checked_fields`` into a job row's fields."""

    subject: Any = None
    idempotency_key: str | None = None
    created_by: Any = None
    actor_type: str = "user"
    group_id: str | None = None
    subject_type: str | None = None
    subject_id: str | int | None = None
    label: str | None = None
    parent: Job | int | None = None
    run_at: datetime | timedelta | None = None
    max_attempts: int | None = None
    initial_status: str | None = None
    queue: str | None = None
    priority: int | None = None
    concurrency_key: str | None = None
    timeout: float | timedelta | None = None


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
    concurrency_key: str | None = None,
    timeout: float | timedelta | None = None,
    debounce: tuple[str, float] | None = None,
    debounce_max_wait: float | None = None,
) -> tuple[Job, bool]:
    """Create a job, or return the one that already has ``idempotency_key``.

    Returns ``(job, created)``. Concurrent calls with one key get one row: the unique index
    decides, and the losers read the winner's row. Everything is checked before anything is
    written, so a refused call (``JobError``) leaves no trace.

    >>> job, created = enqueue("deploy_site", subject={"site_id": 7}, idempotency_key="deploy-7")

    ``debounce=(key, seconds)``: the key's job that has not started yet takes this enqueue's subject
    and runs once the key has been quiet for ``seconds`` (at most ``debounce_max_wait`` seconds
    after its first enqueue); see ``debouncing``.
    """
    debounced = debounce is not None or debounce_max_wait is not None
    others = {"idempotency_key": idempotency_key, "run_at": run_at, "initial_status": initial_status}
    window = checked_window(debounce, debounce_max_wait, others) if debounced else None
    options = EnqueueOptions(
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
        concurrency_key=concurrency_key,
        timeout=timeout,
    )
    definition, fields = _checked_fields(kind, timezone.now(), options)
    if window is not None:
        return enqueue_debounced(fields, window, partial(_insert, definition))
    return _enqueue_checked(definition, fields)


def _enqueue_checked(definition: JobKind, fields: dict[str, Any]) -> tuple[Job, bool]:
    key = fields["idempotency_key"]
    if key is None:
        return _insert(definition, fields), True
    # InnoDB may make one of two inserts of a key a deadlock's victim: it looks again for the
    # key's job (the other insert's, once that commits).
    return made_despite_deadlocks(lambda _first: _insert_unless_taken(definition, fields, key))


def _insert_unless_taken(definition: JobKind, fields: dict[str, Any], key: str) -> tuple[Job, bool]:
    """The job of ``key`` if there is one (created False), else a new one (created True)."""
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


def enqueue_many(kind: str | JobKind, specs: Iterable[dict[str, Any]]) -> list[tuple[Job, bool]]:
    """Create many jobs of one kind in a few statements; ``specs`` are ``enqueue()`` keyword arguments.

    Returns ``(job, created)`` in the order of ``specs``. Idempotency keys are honoured as by
    ``enqueue()``: a key that exists (or repeats within ``specs``) gives the existing job. Every
    spec is checked before anything is written.

    >>> enqueue_many("send_invoice", [{"subject": {"invoice": n}} for n in range(1000)])
    """
    now = timezone.now()  # jobs enqueued together without a run_at are due together
    checked = [_checked_fields(kind, now, EnqueueOptions(**spec)) for spec in specs]
    if not checked:
        return []
    definition = checked[0][0]
    keys = [
        fields["idempotency_key"] for _definition, fields in checked if fields["idempotency_key"] is not None
    ]
    existing = (
        {job.idempotency_key: job for job in Job.objects.filter(idempotency_key__in=keys)} if keys else {}
    )
    # Each spec's outcome: an existing job, or the index of the row it inserts.
    places: list[Job | int] = []
    first_with_key: dict[str, int] = {}
    rows: list[dict[str, Any]] = []
    for _definition, fields in checked:
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
        inserted = insert_rows(definition, rows)
    except IntegrityError:
        # Another caller took one of the keys meanwhile: one by one, each race-safe.
        return [_enqueue_checked(definition, fields) for _definition, fields in checked]
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
    [job] = insert_rows(definition, [fields])
    changed_to(job, None, job.status)
    return job


def _checked_fields(
    kind: str | JobKind, now: datetime, options: EnqueueOptions
) -> tuple[JobKind, dict[str, Any]]:
    """The kind and the row's fields for an enqueue at ``now``.

    ``JobError`` for anything that cannot be stored.
    """
    definition = kind if isinstance(kind, JobKind) else get_kind(kind)
    subject = to_json(
        {} if options.subject is None else options.subject,
        what=_InputNames.subject,
        max_bytes=get_setting("MAX_SUBJECT_BYTES"),
    )
    if options.idempotency_key is not None and (
        not isinstance(options.idempotency_key, str) or not options.idempotency_key.strip()
    ):
        raise _refuse(
            _("An idempotency key must be a non-blank string, not %(value)s.")
            % {"value": repr(options.idempotency_key)}
        )
    key = _optional_text(options.idempotency_key, _InputNames.idempotency_key) or None
    if options.max_attempts is not None and (problem := max_attempts_problem(options.max_attempts)):
        raise _refuse(problem)
    if options.priority is not None and (
        isinstance(options.priority, bool)
        or not isinstance(options.priority, int)
        or options.priority not in PRIORITY_RANGE
    ):
        raise _refuse(
            _("priority must be an integer from -100 to 100, not %(value)s.")
            % {"value": repr(options.priority)}
        )
    status = options.initial_status or Status.QUEUED
    if status not in INITIAL_STATUSES:
        raise _refuse(
            _("A job cannot start as %(status)s; it can start queued or in a waiting state.")
            % {"status": repr(status)}
        )
    if options.run_at is not None and status in (Status.PAUSED, Status.NEEDS_USER):
        raise _refuse(
            _("A job that starts %(status)s waits for a person; it takes no run_at.") % {"status": status}
        )
    fields = dict(
        kind=definition.name,
        kind_version=definition.version,
        label=_optional_text(options.label, _InputNames.label) or str(definition.title)[:255],
        status=status,
        subject=subject,
        queue=_optional_text(options.queue, _InputNames.queue, 100) or definition.queue,
        priority=definition.priority if options.priority is None else options.priority,
        max_attempts=options.max_attempts or definition.max_attempts,
        timeout=definition.timeout
        if options.timeout is None
        else to_timeout(options.timeout, _InputNames.timeout),
        # A waiting job's next_run_at is when it wakes by itself: only if asked for.
        next_run_at=_run_at(options.run_at, now)
        if status == Status.QUEUED or options.run_at is not None
        else None,
        idempotency_key=key,
        created_by_id=_creator_id(options.created_by),
        actor_type=_optional_text(options.actor_type, _InputNames.actor_type, 20) or Job.ActorType.USER,
        group_id=_optional_text(options.group_id, _InputNames.group_id),
        subject_type=_optional_text(options.subject_type, _InputNames.subject_type, 100),
        subject_id=_optional_text(options.subject_id, _InputNames.subject_id),
        parent_id=_resolve_parent(options.parent),
        concurrency_key=_concurrency_key(definition, subject, options.concurrency_key),
    )
    fields["fairness_key"] = fairness_key_of(
        definition.name, fields["queue"], _fairness_key(definition, subject)
    )
    fields["under_limits"] = enqueued_under_limits(definition.name, fields["queue"])
    return definition, fields


def _fairness_key(definition: JobKind, subject: Any) -> str:
    """The kind's ``fairness_key(subject)`` as text ("" for none); ``invalid_input`` if it fails."""
    if definition.fairness_key is None:
        return ""
    try:
        key = definition.fairness_key(subject)
    except Exception as exc:
        raise _refuse(
            _("The fairness_key function of kind %(kind)s failed on the subject: %(type)s: %(error)s")
            % {"kind": repr(definition.name), "type": type(exc).__name__, "error": exc}
        ) from exc
    return "" if key is None else _optional_text(str(key), _("The fairness key"))


def _concurrency_key(definition: JobKind, subject: Any, given: Any) -> str:
    """The job's concurrency key: the one given, else its kind's ``concurrency_key(subject)``; ""
    for none. A kind takes keys only if it declares a concurrency limit or a key function: the
    limit of a key is its kind's."""
    key_function = definition.key_function  # the concurrency key's, or the throttle's
    if given is None and key_function is not None:
        try:
            given = key_function(subject)
        except Exception as exc:
            raise _refuse(
                _("The concurrency_key function of kind %(kind)s failed on the subject: %(type)s: %(error)s")
                % {"kind": repr(definition.name), "type": type(exc).__name__, "error": exc}
            ) from exc
    if given is None or given == "":
        return ""
    if isinstance(given, bool) or not isinstance(given, str | int):
        raise _refuse(
            _("A concurrency key must be a string or an integer, not %(value)s.")
            % {"value": short_repr(given)}
        )
    if not (definition.takes_keys or definition.throttle):
        raise _refuse(
            _(
                "Kind %(kind)s has no concurrency limit; declare @job(concurrency_limit=…) "
                "to enqueue its jobs with a concurrency key."
            )
            % {"kind": repr(definition.name)}
        )
    return _optional_text(given, _InputNames.concurrency_key)


def _creator_id(created_by: Any) -> Any:
    """The user id ``created_by`` names (a user, or a user's id); ``invalid_input`` for anything
    else. Whether that user exists is checked when the job is inserted (``insert_rows``)."""
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
            _("created_by must be a saved user or a user's id, not %(value)s.")
            % {"value": short_repr(created_by)}
        ) from None


def _same_kind(existing: Job, definition: JobKind) -> Job:
    if existing.kind != definition.name:
        raise _refuse(
            _("The idempotency key %(key)s belongs to job %(job)s of kind %(kind)s, not %(expected)s.")
            % {
                "key": repr(existing.idempotency_key),
                "job": existing.pk,
                "kind": repr(existing.kind),
                "expected": repr(definition.name),
            }
        )
    return existing
