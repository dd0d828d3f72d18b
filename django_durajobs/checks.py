"""System checks for the ``DURAJOBS`` setting (ids ``durajobs.E00x`` so users can silence them)."""

from __future__ import annotations

import math

from django.conf import settings
from django.core import checks
from django.db import DatabaseError
from django.utils.module_loading import import_string

from .conf import DEFAULTS
from .errors import JobError
from .limits import limit_problem
from .registry import get_kind, kind_schedules, known_kinds
from .schedules import spec_from_setting

#: E007's hint: its message already holds the command that installs croniter.
CRON_ALTERNATIVE = "Or give the schedule 'every' (seconds) instead of 'cron': that needs nothing more."

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
    "MAX_EVENT_PAYLOAD_BYTES",
    "MAX_MESSAGE_CHARS",
    "MAX_ACTIONS",
    "MAX_STEPS",
    "SCHEDULE_GRACE_SECONDS",
    "STREAM_POLL_SECONDS",
    "STREAM_HEARTBEAT_SECONDS",
    "STREAM_MAX_SECONDS",
    "STREAMS_PER_USER",
    "WSGI_STREAM_RETRY_SECONDS",
    "VERSION_WAIT_SECONDS",
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
    threads = configured.get("ASYNC_DATABASE_THREADS", DEFAULTS["ASYNC_DATABASE_THREADS"])
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        errors.append(
            checks.Error(
                f"DURAJOBS['ASYNC_DATABASE_THREADS'] must be a whole number of 1 or more, not {threads!r}.",
                hint="It is how many threads (and database connections) a worker's async jobs share.",
                id="durajobs.E015",
            )
        )
    token = configured.get("METRICS_TOKEN", DEFAULTS["METRICS_TOKEN"])
    if token is not None and (not isinstance(token, str) or not token):
        errors.append(
            checks.Error(
                "DURAJOBS['METRICS_TOKEN'] must be None or a non-empty string.",
                hint="Prometheus sends it as 'Authorization: Bearer <token>' to the metrics URL.",
                id="durajobs.E025",
            )
        )
    grace = configured.get("UNKNOWN_TASK_GRACE_SECONDS", DEFAULTS["UNKNOWN_TASK_GRACE_SECONDS"])
    if isinstance(grace, bool) or not isinstance(grace, (int, float)) or not 0 <= grace < math.inf:
        errors.append(
            checks.Error(
                f"DURAJOBS['UNKNOWN_TASK_GRACE_SECONDS'] must be a number of 0 or more, not {grace!r}.",
                hint="How long a task no worker can import stays ready before it fails (docs/tasks.md).",
                id="durajobs.E026",
            )
        )
    errors += _access_policy_errors(configured.get("ACCESS_POLICY", DEFAULTS["ACCESS_POLICY"]))
    if not isinstance(configured.get("STREAM_NOTIFY", DEFAULTS["STREAM_NOTIFY"]), bool):
        errors.append(checks.Error("DURAJOBS['STREAM_NOTIFY'] must be True or False.", id="durajobs.E028"))
    errors += _schedule_errors(configured.get("SCHEDULES", DEFAULTS["SCHEDULES"]))
    errors += _queue_limit_errors(configured.get("QUEUE_LIMITS", DEFAULTS["QUEUE_LIMITS"]))
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


def _access_policy_errors(path: object) -> list[checks.CheckMessage]:
    """``DURAJOBS["ACCESS_POLICY"]``: the dotted path of a class with ``visible()`` and ``may()``."""
    hint = "The dotted path of a subclass of django_durajobs.access.AccessPolicy (docs/end-users.md)."
    try:
        policy = import_string(path) if isinstance(path, str) else None
    except ImportError as exc:
        return [
            checks.Error(
                f"DURAJOBS['ACCESS_POLICY'] cannot be imported: {exc}", hint=hint, id="durajobs.E028"
            )
        ]
    if not (
        isinstance(policy, type)
        and callable(getattr(policy, "visible", None))
        and callable(getattr(policy, "may", None))
    ):
        message = f"DURAJOBS['ACCESS_POLICY'] must name a class with visible() and may(), not {path!r}."
        return [checks.Error(message, hint=hint, id="durajobs.E028")]
    return []


def _schedule_errors(schedules: object) -> list[checks.CheckMessage]:
    """``DURAJOBS["SCHEDULES"]``: each entry a schedule of a registered kind, under a name of its own."""
    if not isinstance(schedules, dict):
        return [
            checks.Error("DURAJOBS['SCHEDULES'] must be a dict of schedules by name.", id="durajobs.E006")
        ]
    of_kinds = {spec.name for spec in kind_schedules()}
    errors: list[checks.CheckMessage] = []
    for name, entry in schedules.items():
        try:
            spec = spec_from_setting(name, entry)
        except JobError as exc:
            if exc.code == "missing_dependency":
                errors.append(checks.Error(exc.message, hint=CRON_ALTERNATIVE, id="durajobs.E007"))
            else:
                errors.append(checks.Error(exc.message, id="durajobs.E006"))
            continue
        if spec.kind not in known_kinds():
            errors.append(
                checks.Error(
                    f"DURAJOBS['SCHEDULES'][{name!r}] names the job kind {spec.kind!r}, "
                    "which is not registered.",
                    hint="Kinds are registered with @job in an installed app's jobs.py.",
                    id="durajobs.E008",
                )
            )
        if name in of_kinds:
            errors.append(
                checks.Error(
                    f"DURAJOBS['SCHEDULES'][{name!r}] has the name of the schedule of "
                    f"@job({name!r}, schedule=…).",
                    id="durajobs.E009",
                )
            )
    return errors


def _queue_limit_errors(limits: object) -> list[checks.CheckMessage]:
    if not isinstance(limits, dict):
        return [
            checks.Error(
                f"DURAJOBS['QUEUE_LIMITS'] must be a dict of queue names to limits, not {limits!r:.40}.",
                id="durajobs.E010",
            )
        ]
    errors: list[checks.CheckMessage] = []
    for queue, limit in limits.items():
        problem = "is not a queue name" if not isinstance(queue, str) or not queue else limit_problem(limit)
        if problem:
            errors.append(
                checks.Error(
                    f"DURAJOBS['QUEUE_LIMITS'][{queue!r}]: {problem}",
                    hint="Each queue's limit: the most of its jobs that may run at once across all workers.",
                    id="durajobs.E010",
                )
            )
    return errors


@checks.register(checks.Tags.database)
def check_removed_steps(databases=None, **kwargs) -> list[checks.CheckMessage]:
    """``manage.py check --database default``: the declared steps that unfinished jobs have not
    finished yet and that their kind no longer declares (docs/deploying.md)."""
    if not databases:
        return []
    warnings: list[checks.CheckMessage] = []
    for name in known_kinds():
        try:
            removed = _removed_steps(name)
        except DatabaseError:  # before the app's migrations ran (``migrate`` checks first)
            return []
        if removed:
            warnings.append(
                checks.Warning(
                    f"Kind {name!r} no longer declares the steps {', '.join(removed)}, which unfinished "
                    f"jobs have not run yet.",
                    hint="Its jobs follow its on_version_change policy; see docs/deploying.md.",
                    id="durajobs.W002",
                )
            )
    return warnings


def _removed_steps(name: str) -> list[str]:
    """The step ids, not declared by kind ``name`` any more, that its unfinished jobs have pending."""
    from .models import JobStep
    from .status import TERMINAL, Phase, StepState

    not_started = (StepState.PENDING, StepState.WAITING, StepState.NEEDS_USER)  # or marked where it waits
    declared = [step_id for step_id, _title in get_kind(name).steps]
    pending = (
        JobStep.objects.filter(job__kind=name, phase=Phase.RUN, state__in=not_started)
        .exclude(job__status__in=TERMINAL)
        .exclude(step_id__in=declared)
    )
    return sorted(set(pending.values_list("step_id", flat=True)))
