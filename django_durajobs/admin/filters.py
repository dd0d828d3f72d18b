"""The job list's filters by kind, queue and actor type: their choices come from the code, the
settings and the latest jobs, never from a ``SELECT DISTINCT`` over the job table (a scan of every
job, three times on each render).

The kinds are the registered ones; the queues are ``default``, those the kinds name, those the
settings name (``QUEUE_LIMITS``, ``FAIR_QUEUES``, the ``QUEUES`` of a django-durajobs Tasks
backend); the actor types are the model's. To these come the values of the latest ``RECENT``
jobs (one query for the three filters, through the primary key's index), so a queue named only
where jobs are enqueued, or a kind no longer registered, is offered while it is in use. A value
asked for in the address (``?queue=other``) still filters, and is offered, selected, beside them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.contrib import admin
from django.utils.functional import Promise

from .. import registry
from ..apps import durable_task_backends
from ..conf import get_setting
from ..models import Job

#: How many of the latest jobs the filters read their values from, beside the known ones.
RECENT = 1_000
COLUMNS = ("kind", "queue", "actor_type")


class KnownValuesFilter(admin.AllValuesFieldListFilter):
    """Django's filter by a field's values (the same parameter, links and look), offering the values
    ``known()`` names instead of those a query finds in the table."""

    def __init__(self, field, request, params, model, model_admin, field_path):
        super().__init__(field, request, params, model, model_admin, field_path)
        known = dict(self.known())
        for value in recent_values(request, model_admin)[field_path]:
            known.setdefault(value, value)
        if self.lookup_val:  # what the address asks for, even if nothing names it
            for value in self.lookup_val:
                known.setdefault(value, value)
        self.lookup_choices: Any = sorted(known)  # what Django's choices() and has_output() read
        self.labels = known

    def known(self) -> Iterable[tuple[str, str | Promise]]:
        """(value, what the list shows for it)."""
        raise NotImplementedError

    def choices(self, changelist):
        for choice in super().choices(changelist):
            value = choice["display"]
            if value in self.labels:
                choice = {**choice, "display": str(self.labels[value])}
            yield choice


class KindFilter(KnownValuesFilter):
    def known(self) -> Iterable[tuple[str, str | Promise]]:
        return ((kind, kind) for kind in registry.known_kinds())


class QueueFilter(KnownValuesFilter):
    def known(self) -> Iterable[tuple[str, str | Promise]]:
        return ((queue, queue) for queue in known_queues())


class ActorTypeFilter(KnownValuesFilter):
    def known(self) -> Iterable[tuple[str, str | Promise]]:
        return Job.ActorType.choices


def recent_values(request, model_admin) -> dict[str, set[str]]:
    """The kinds, queues and actor types of the latest ``RECENT`` jobs, read once per request."""
    values = getattr(request, "_durajobs_recent_values", None)
    if values is None:
        latest = model_admin.get_queryset(request).order_by("-pk").values_list(*COLUMNS)[:RECENT]
        values = {column: set() for column in COLUMNS}
        for row in latest:
            for column, value in zip(COLUMNS, row, strict=True):
                if value:
                    values[column].add(value)
        request._durajobs_recent_values = values
    return values


def known_queues() -> set[str]:
    """The queues the code and the settings name."""
    queues = {"default"}
    queues.update(registry.get_kind(name).queue for name in registry.known_kinds())
    queues.update(get_setting("QUEUE_LIMITS") or {})
    queues.update(get_setting("FAIR_QUEUES") or ())
    for backend in durable_task_backends():
        queues.update(backend.get("QUEUES") or ())
    return {queue for queue in queues if isinstance(queue, str) and queue}
