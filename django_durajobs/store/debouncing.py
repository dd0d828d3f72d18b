"""``enqueue(..., debounce=(key, seconds))``: one job per key waits, with the last enqueue's subject,
until the key has been quiet for ``seconds`` (or ``debounce_max_wait`` after its first enqueue).

The waiting job holds the idempotency key ``debounce:<kind>:<key>``, so the unique index settles
concurrent enqueues on every database: an enqueue moves the waiting job (its subject and due time)
while no worker has started it; once one has, the started job gives the key up (it becomes
``debounce:<kind>:<key>:<job id>``) and the next enqueue makes a new waiting job.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, OperationalError, transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from ..errors import JobError
from ..models import Job
from ..status import Status
from ..values import short_repr
from .database import deadlock

#: How often an enqueue tries again when another one or a worker changed the key's job meanwhile.
TRIES = 20


@dataclass(frozen=True)
class Window:
    """A debounce: the key, how long it must be quiet, and the longest a job may wait."""

    key: str
    quiet: timedelta
    max_wait: timedelta | None

    def due(self, now: datetime, first: datetime) -> datetime:
        """When a job first enqueued at ``first`` runs, after an enqueue at ``now``."""
        quiet_until = now + self.quiet
        return quiet_until if self.max_wait is None else min(quiet_until, first + self.max_wait)


def checked_window(debounce: Any, max_wait: Any, others: dict[str, Any]) -> Window:
    """The debounce ``(key, seconds)`` and ``debounce_max_wait`` (seconds), or ``invalid_input``;
    ``others`` are the enqueue's arguments that a debounce takes the place of."""
    if not (isinstance(debounce, tuple) and len(debounce) == 2):
        raise _refuse(
            _("debounce must be a (key, seconds) pair, not %(value)s.") % {"value": short_repr(debounce)}
        )
    key, seconds = debounce
    if not isinstance(key, str) or not key.strip() or len(key) > 120:
        raise _refuse(_("A debounce key must be a non-blank string of up to 120 characters."))
    quiet = _seconds(seconds, "debounce")
    wait = None if max_wait is None else _seconds(max_wait, "debounce_max_wait")
    if wait is not None and wait < quiet:
        raise _refuse(_("debounce_max_wait must be at least the debounce's seconds."))
    given = [name for name, value in others.items() if value is not None]
    if given:
        raise _refuse(_("A debounced enqueue takes no %(names)s.") % {"names": ", ".join(given)})
    return Window(key, quiet, wait)


def _seconds(value: Any, name: str) -> timedelta:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 366 * 86400:
        raise _refuse(
            _("%(name)s must be a number of seconds, more than 0 and at most a year, not %(value)s.")
            % {"name": name, "value": short_repr(value)}
        )
    return timedelta(seconds=value)


def _refuse(message: str) -> JobError:
    return JobError("invalid_input", message)


def enqueue_debounced(
    fields: dict[str, Any], window: Window, insert: Callable[[dict[str, Any]], Job]
) -> tuple[Job, bool]:
    """The key's waiting job, moved to this enqueue's subject and due time (created False), or a
    new one (created True)."""
    key = f"debounce:{fields['kind']}:{window.key}"
    for _try in range(TRIES):
        try:
            return _enqueue_once(key, fields, window, insert)
        except _TryAgain:
            continue
        except OperationalError as error:
            if not deadlock(error):
                raise
    raise JobError("job_busy", _("The debounced job %(key)s kept changing; try again.") % {"key": key})


class _TryAgain(Exception):
    """Another enqueue or a worker changed the key's job meanwhile."""


def _enqueue_once(
    key: str, fields: dict[str, Any], window: Window, insert: Callable[[dict[str, Any]], Job]
) -> tuple[Job, bool]:
    """One try: insert the key's job, move it, or take the key from a started job (``_TryAgain``)."""
    now = timezone.now()
    found = Job.objects.filter(idempotency_key=key).first()
    if found is None:
        try:
            with transaction.atomic():  # a savepoint: the caller's transaction survives a lost race
                return insert({**fields, "idempotency_key": key, "next_run_at": now + window.quiet}), True
        except IntegrityError:
            raise _TryAgain from None  # another enqueue made it: move that one
    if found.status == Status.QUEUED and found.started_at is None:
        moved = {"subject": fields["subject"], "concurrency_key": fields["concurrency_key"]}
        moved.update(next_run_at=window.due(now, found.created_at), updated_at=now)
        if Job.objects.filter(pk=found.pk, status=Status.QUEUED, started_at__isnull=True).update(**moved):
            for name, value in moved.items():
                setattr(found, name, value)
            return found, False
        raise _TryAgain  # a worker took it meanwhile
    # It has started (or ended): it keeps a key of its own, and the next enqueue waits anew.
    Job.objects.filter(pk=found.pk, idempotency_key=key).exclude(
        status=Status.QUEUED, started_at__isnull=True
    ).update(idempotency_key=f"{key}:{found.pk}")
    raise _TryAgain
