"""Schedule rows: declared ones written at a worker's start, and the tick that enqueues due moments.

There is no leader. Every worker ticks; the one whose conditional update moves a schedule's
``next_run_at`` on enqueues its moments, in the same transaction, and each job's idempotency
key (``schedule:<name>:<moment>``) makes a second enqueue of a moment return the first job.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from ..conf import get_setting, jobs_database
from ..errors import JobError
from ..models import Job, Schedule
from ..redaction import package_logger
from ..registry import kind_schedules
from ..schedules import ScheduleSpec, checked_spec, due, spec_from_setting
from .enqueuing import enqueue

logger = package_logger("django_durajobs.schedules")

#: The columns a schedule's definition fills; the others are the operator's and the tick's.
DEFINITION = ("kind", "subject", "cron", "every_seconds", "timezone", "missed")
#: When these change, the next moment is worked out again.
TIMING = ("cron", "every_seconds", "timezone")

#: (schedule, problem) pairs already logged by this process, so a tick says each once.
_reported: set[tuple[str, str]] = set()


def row_spec(row: Schedule) -> ScheduleSpec:
    """The schedule a row holds, checked as a declared one is (``JobError`` if it is not one)."""
    return checked_spec(
        name=row.name,
        kind=row.kind,
        cron=row.cron or None,
        every=row.every_seconds,
        subject=row.subject,
        timezone=row.timezone,
        missed=row.missed,
    )


def declared_schedules() -> dict[str, tuple[ScheduleSpec, str]]:
    """Each schedule of ``@job(schedule=…)`` and ``DURAJOBS["SCHEDULES"]``, with where it comes from."""
    declared: dict[str, tuple[ScheduleSpec, str]] = {
        spec.name: (spec, Schedule.Source.CODE) for spec in kind_schedules()
    }
    for name, entry in get_setting("SCHEDULES").items():
        declared[name] = (spec_from_setting(name, entry), Schedule.Source.SETTINGS)
    return declared


def sync_schedules(now: datetime | None = None) -> None:
    """Write the declared schedules into the table, as often as called (every worker, at its start).

    A new one waits for its first moment after ``now``; a changed one takes its new definition,
    and its next moment again if its timing changed; whether it is enabled is the operator's and
    stays. Rows of declared schedules that are declared no more are deleted.
    """
    now = now or timezone.now()
    declared = declared_schedules()
    rows = {
        row.name: row
        for row in Schedule.objects.filter(Q(name__in=list(declared)) | ~Q(source=Schedule.Source.ADMIN))
    }
    for name, (spec, source) in declared.items():
        values = _definition(spec)
        row = rows.get(name)
        if row is None:
            try:
                with transaction.atomic(using=jobs_database()):
                    Schedule.objects.create(
                        name=name, source=source, next_run_at=spec.next_after(now), **values
                    )
            except IntegrityError:
                pass  # another worker, starting at the same time, wrote it
            continue
        changed = {field: value for field, value in values.items() if getattr(row, field) != value}
        if row.source != source:
            changed["source"] = source
        if any(field in changed for field in TIMING):
            changed["next_run_at"] = spec.next_after(now)
        if changed:
            Schedule.objects.filter(pk=row.pk).update(**changed, updated_at=now)
    gone = [
        row.pk for name, row in rows.items() if name not in declared and row.source != Schedule.Source.ADMIN
    ]
    if gone:
        Schedule.objects.filter(pk__in=gone).delete()


def _definition(spec: ScheduleSpec) -> dict[str, object]:
    return dict(
        kind=spec.kind,
        subject=spec.subject,
        cron=spec.cron,
        every_seconds=spec.every,
        timezone=spec.timezone,
        missed=spec.missed,
    )


def tick_schedules(now: datetime | None = None) -> int:
    """Enqueue the moments of every due, enabled schedule; returns how many jobs were created.

    One indexed query when nothing is due. A schedule that cannot enqueue (its kind is not
    registered in this process, its cron needs croniter) is logged and left for a worker that can.
    """
    now = now or timezone.now()
    grace = timedelta(seconds=get_setting("SCHEDULE_GRACE_SECONDS"))
    created = 0
    for row in Schedule.objects.filter(enabled=True, next_run_at__lte=now).order_by("next_run_at"):
        try:
            created += _tick(row, now, grace)
        except JobError as exc:
            if (row.name, exc.message) not in _reported:
                _reported.add((row.name, exc.message))
                logger.warning("Schedule %s enqueues nothing: %s", row.name, exc.message)
    return created


def _tick(row: Schedule, now: datetime, grace: timedelta) -> int:
    if row.next_run_at is None:  # a tick reads only schedules with a next run
        return 0
    spec = row_spec(row)
    plan = due(spec, row.next_run_at, now, grace)
    moved = dict(next_run_at=plan.next_moment)
    if plan.moments:
        moved["last_run_at"] = plan.moments[-1]
    with transaction.atomic(using=jobs_database()):
        # The row lock decides: a worker that read the same next_run_at updates nothing.
        if not Schedule.objects.filter(pk=row.pk, enabled=True, next_run_at=row.next_run_at).update(**moved):
            return 0
        created, last_job = 0, None
        for moment in plan.moments:
            last_job, new = enqueue(
                spec.kind,
                subject=spec.subject,
                idempotency_key=spec.key(moment),
                actor_type=Job.ActorType.SYSTEM,
            )
            created += new
        if last_job is not None:
            Schedule.objects.filter(pk=row.pk).update(last_job=last_job)
    if plan.missed:
        logger.info(
            "Schedule %s missed its moments from %s: %s",
            spec.name,
            row.next_run_at,
            "one run for them all" if plan.moments else "skipped",
        )
    return created


def save_schedule(schedule: Schedule, now: datetime | None = None) -> None:
    """Write a schedule an operator added or changed (``JobError`` if it is not a schedule).

    Its next moment is worked out from ``now`` when it is new, when its timing changed and when
    it is enabled again: the moments it spent disabled are not missed ones.
    """
    now = now or timezone.now()
    spec = row_spec(schedule)
    before = Schedule.objects.filter(pk=schedule.pk).first() if schedule.pk else None
    if before is None:
        schedule.next_run_at = spec.next_after(now)
        schedule.save()
        return
    fields = [*DEFINITION, "enabled", "updated_at"]
    if any(getattr(before, field) != getattr(schedule, field) for field in TIMING) or (
        schedule.enabled and not before.enabled
    ):
        schedule.next_run_at = spec.next_after(now)
        fields.append("next_run_at")
    schedule.save(update_fields=fields)


def set_schedules_enabled(ids: Iterable[int], enabled: bool, now: datetime | None = None) -> int:
    """Enable or disable schedules; returns how many changed. An enabled one waits for its next
    moment after ``now``. ``JobError`` names the first that cannot be enabled (left disabled)."""
    now = now or timezone.now()
    rows = Schedule.objects.filter(pk__in=list(ids), enabled=not enabled)
    if not enabled:
        return rows.update(enabled=False, updated_at=now)
    changed = 0
    for row in rows:
        next_moment = row_spec(row).next_after(now)
        changed += Schedule.objects.filter(pk=row.pk, enabled=False).update(
            enabled=True, next_run_at=next_moment, updated_at=now
        )
    return changed


def delete_schedules(ids: Iterable[int]) -> int:
    """Delete schedules (the jobs they made stay); returns how many."""
    return Schedule.objects.filter(pk__in=list(ids)).delete()[1].get(Schedule._meta.label, 0)
