"""Settings: one ``DURAJOBS`` dict, read on every access so ``override_settings`` works."""

from __future__ import annotations

from typing import Any

from django.conf import settings

DEFAULTS: dict[str, Any] = {
    "LEASE_SECONDS": 60,
    "HEARTBEAT_SECONDS": 10,
    "BACKOFF_BASE_SECONDS": 30,
    "BACKOFF_MAX_SECONDS": 3600,
    "MAX_WORKER_LOSSES": 3,
    "LOG_LINES_KEPT": 200,
    "LOG_LINE_MAX_CHARS": 500,
    "MAX_SUBJECT_BYTES": 1_000_000,
    "REDACT_KEYS": (),
    "PREPARED_STATEMENTS": True,
}


def get_setting(name: str) -> Any:
    """The value of ``DURAJOBS[name]``, or its documented default."""
    return getattr(settings, "DURAJOBS", {}).get(name, DEFAULTS[name])
