"""Settings: one ``DURAJOBS`` dict, looked up once and again whenever it changes
(``override_settings`` and pytest-django's ``settings`` send ``setting_changed``)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver

DEFAULTS: dict[str, Any] = {
    "LEASE_SECONDS": 60,
    "HEARTBEAT_SECONDS": 10,
    "BACKOFF_BASE_SECONDS": 30,
    "BACKOFF_MAX_SECONDS": 3600,
    "MAX_WORKER_LOSSES": 3,
    "LOG_LINES_KEPT": 200,
    "LOG_LINE_MAX_CHARS": 500,
    "MAX_SUBJECT_BYTES": 1_000_000,
    "MAX_RESULT_BYTES": 1_000_000,
    "MAX_RESUME_DATA_BYTES": 100_000,
    "MAX_EVENT_PAYLOAD_BYTES": 100_000,
    "MAX_MESSAGE_CHARS": 2_000,
    "MAX_ACTIONS": 20,
    "MAX_STEPS": 10_000,
    "REDACT_KEYS": (),
    "PREPARED_STATEMENTS": True,
    "SCHEDULES": {},
    "SCHEDULE_GRACE_SECONDS": 60,
    "QUEUE_LIMITS": {},
    "ASYNC_DATABASE_THREADS": 4,
    "METRICS_TOKEN": None,
    "UNKNOWN_TASK_GRACE_SECONDS": 0,
    "ACCESS_POLICY": "django_durajobs.access.AccessPolicy",
    "STREAM_POLL_SECONDS": 0.5,
    "STREAM_HEARTBEAT_SECONDS": 15,
    "STREAM_MAX_SECONDS": 600,
    "STREAMS_PER_USER": 20,
    "STREAM_NOTIFY": False,
    "WSGI_STREAM_RETRY_SECONDS": 2,
    "VERSION_WAIT_SECONDS": 30,
    "FAIR_QUEUES": (),
    "DATABASE": "default",
    "LISTEN_DATABASE": None,
}

#: ``settings.DURAJOBS`` itself (so a change made in place shows), once it was looked up.
_configured: dict[str, Any] | None = None


def get_setting(name: str) -> Any:
    """The value of ``DURAJOBS[name]``, or its documented default."""
    global _configured
    if _configured is None:
        _configured = getattr(settings, "DURAJOBS", {})
    return _configured.get(name, DEFAULTS[name])


def jobs_database() -> str:
    """The alias of the database that holds every row of the app's models (``DATABASE``)."""
    alias: str = get_setting("DATABASE")
    return alias


def listen_database() -> str:
    """The alias of the connection a worker LISTENs on: ``LISTEN_DATABASE``, else the jobs database."""
    alias: str = get_setting("LISTEN_DATABASE") or get_setting("DATABASE")
    return alias


@receiver(setting_changed)
def _look_again(setting: str, **kwargs: Any) -> None:
    global _configured
    if setting == "DURAJOBS":
        _configured = None
