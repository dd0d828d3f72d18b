"""System checks for where the jobs live: ``DURAJOBS["DATABASE"]``, its router, and
``DURAJOBS["LISTEN_DATABASE"]`` (ids ``durajobs.E03x``, ``durajobs.W030``)."""

from __future__ import annotations

from django.conf import settings
from django.core import checks
from django.db import DEFAULT_DB_ALIAS, connections, router

from .models import Job

ROUTER = "django_durajobs.routers.JobsRouter"


@checks.register(checks.Tags.compatibility)
def check_databases(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    configured = getattr(settings, "DURAJOBS", {})
    if not isinstance(configured, dict):
        return []  # durajobs.E001 says so
    jobs = configured.get("DATABASE", DEFAULT_DB_ALIAS)
    listen = configured.get("LISTEN_DATABASE")
    errors = [*_alias_errors("DATABASE", jobs), *_alias_errors("LISTEN_DATABASE", listen, optional=True)]
    if errors:
        return errors
    if listen is not None and connections[listen].vendor != "postgresql":
        errors.append(
            checks.Error(
                f"DURAJOBS['LISTEN_DATABASE'] ({listen!r}) is a {connections[listen].vendor} database; "
                "workers LISTEN on PostgreSQL only.",
                hint="Name a direct (not pooled) connection to the jobs' PostgreSQL, or leave it unset.",
                id="durajobs.E032",
            )
        )
    if jobs != DEFAULT_DB_ALIAS:
        errors += _routing_errors(jobs)
    return errors


def _alias_errors(name: str, alias: object, *, optional: bool = False) -> list[checks.CheckMessage]:
    if (optional and alias is None) or (isinstance(alias, str) and alias in settings.DATABASES):
        return []
    return [
        checks.Error(
            f"DURAJOBS[{name!r}] is {alias!r}, which is not an alias of DATABASES.",
            hint=f"Aliases of DATABASES: {', '.join(sorted(settings.DATABASES))}.",
            id="durajobs.E030" if name == "DATABASE" else "durajobs.E031",
        )
    ]


def _routing_errors(jobs: str) -> list[checks.CheckMessage]:
    """Jobs in a database of their own: the routers must send the app's reads, writes and tables
    there, and its tables nowhere else; and what that costs, said once."""
    routed = (
        router.db_for_read(Job) == jobs
        and router.db_for_write(Job) == jobs
        and router.allow_migrate_model(jobs, Job)
        and not router.allow_migrate_model(DEFAULT_DB_ALIAS, Job)
    )
    messages: list[checks.CheckMessage] = []
    if not routed:
        messages.append(
            checks.Error(
                f"DURAJOBS['DATABASE'] is {jobs!r}, but the database routers do not send the app's "
                "reads, writes and tables there only.",
                hint=f"Add {ROUTER!r} to DATABASE_ROUTERS, before any router that claims every model.",
                id="durajobs.E033",
            )
        )
    messages.append(
        checks.Warning(
            f"Jobs live in the database {jobs!r}, apart from 'default': a step with atomic=True "
            "commits its rows on 'default' first and its checkpoint after (a crash between the "
            "two runs it again), and a job enqueued inside a transaction of 'default' is "
            "committed at once, whatever that transaction does.",
            hint="Enqueue in transaction.on_commit(); make atomic steps safe to repeat. "
            "See docs/databases.md. Silence with SILENCED_SYSTEM_CHECKS = ['durajobs.W030'].",
            id="durajobs.W030",
        )
    )
    return messages
