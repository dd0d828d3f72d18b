from __future__ import annotations

from importlib import import_module
from types import ModuleType
from typing import Any

from django.apps import AppConfig
from django.conf import settings
from django.utils.module_loading import autodiscover_modules
from django.utils.translation import gettext_lazy as _


class DurajobsConfig(AppConfig):
    name = "django_durajobs"
    verbose_name = _("Durable jobs")
    default_auto_field = "django.db.models.BigAutoField"

    #: ``django_durajobs.facades``, for ``Job``'s and ``JobKind``'s methods (``registry.facades()``).
    facades: ModuleType

    def ready(self) -> None:
        from . import (
            checks,  # noqa: F401  (registers the system checks)
            database_checks,  # noqa: F401  (registers the jobs database's checks)
            facades,
        )

        self.facades = facades

        # Like admin.py: every installed app's jobs.py registers its kinds.
        autodiscover_modules("jobs")
        if uses_durable_tasks():
            import_module("django_durajobs.tasks")  # so that a worker finds tasks by their path
        from .views.listening import connect_notifier

        connect_notifier()  # with DURAJOBS["STREAM_NOTIFY"] on PostgreSQL: NOTIFY each status change


def uses_durable_tasks() -> bool:
    """Whether a backend of the ``TASKS`` setting is ``DurableBackend``."""
    return bool(durable_task_backends())


def durable_task_backends() -> list[dict[str, Any]]:
    """The entries of the ``TASKS`` setting whose backend is ``DurableBackend``."""
    backends = getattr(settings, "TASKS", None)
    if not isinstance(backends, dict):
        return []
    return [
        entry
        for entry in backends.values()
        if isinstance(entry, dict) and str(entry.get("BACKEND", "")).startswith("django_durajobs.tasks")
    ]
