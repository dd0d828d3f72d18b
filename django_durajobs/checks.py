"""System checks for the ``DURAJOBS`` setting (ids ``durajobs.E00x`` so users can silence them)."""

from __future__ import annotations

from django.conf import settings
from django.core import checks

from .conf import DEFAULTS

POSITIVE_NUMBERS = (
    "LEASE_SECONDS",
    "HEARTBEAT_SECONDS",
    "BACKOFF_BASE_SECONDS",
    "BACKOFF_MAX_SECONDS",
    "MAX_WORKER_LOSSES",
    "LOG_LINES_KEPT",
    "LOG_LINE_MAX_CHARS",
    "MAX_SUBJECT_BYTES",
    "MAX_RESULT_BYTES",
    "MAX_RESUME_DATA_BYTES",
    "MAX_MESSAGE_CHARS",
    "MAX_ACTIONS",
    "MAX_STEPS",
)


@checks.register(checks.Tags.compatibility)
def check_settings(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    configured = getattr(settings, "DURAJOBS", {})
    if not isinstance(configured, dict):
        return [checks.Error("DURAJOBS must be a dict.", id="durajobs.E001")]
    errors: list[checks.CheckMessage] = []
    for name in sorted(set(configured) - set(DEFAULTS)):
        errors.append(
            checks.Error(
                f"DURAJOBS[{name!r}] is not a setting of django-durajobs.",
                hint=f"Known settings: {', '.join(sorted(DEFAULTS))}.",
                id="durajobs.E002",
            )
        )
    for name in POSITIVE_NUMBERS:
        value = configured.get(name, DEFAULTS[name])
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            errors.append(
                checks.Error(
                    f"DURAJOBS[{name!r}] must be a positive number, not {value!r}.", id="durajobs.E003"
                )
            )
    keys = configured.get("REDACT_KEYS", ())
    if isinstance(keys, str) or not all(isinstance(key, str) and key for key in keys):
        errors.append(
            checks.Error("DURAJOBS['REDACT_KEYS'] must be a list of non-empty strings.", id="durajobs.E004")
        )
    prepared = configured.get("PREPARED_STATEMENTS", DEFAULTS["PREPARED_STATEMENTS"])
    if not isinstance(prepared, bool):
        errors.append(
            checks.Error(
                f"DURAJOBS['PREPARED_STATEMENTS'] must be True or False, not {prepared!r}.",
                id="durajobs.E005",
            )
        )
    lease = configured.get("LEASE_SECONDS", DEFAULTS["LEASE_SECONDS"])
    heartbeat = configured.get("HEARTBEAT_SECONDS", DEFAULTS["HEARTBEAT_SECONDS"])
    if not errors and heartbeat * 2 > lease:
        errors.append(
            checks.Warning(
                f"DURAJOBS['HEARTBEAT_SECONDS'] ({heartbeat}) should be at most half of "
                f"LEASE_SECONDS ({lease}).",
                hint="Otherwise one late heartbeat lets another worker take over a healthy job.",
                id="durajobs.W001",
            )
        )
    return errors
