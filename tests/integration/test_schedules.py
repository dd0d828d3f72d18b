"""Schedules against a real database: declared ones reach the table, ticks enqueue each moment once.

The clock is moved with time-machine; the workers' part (several processes at once, a worker
stopped for a while) is in tests/test_schedules_fleet.py.
"""

from __future__ import annotations

import logging
from collections import Counter
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
import time_machine
from django.core import checks

from django_durajobs import Job, JobError, Schedule, job, schedules, store
from django_durajobs.checks import check_settings
from django_durajobs.registry import known_kinds, unregister
from django_durajobs.store.scheduling import _tick

pytestmark = pytest.mark.django_db

START = datetime(2025, 1, 6, 12, 0, 0, tzinfo=UTC)


@pytest.fixture
def clock():
    with time_machine.travel(START, tick=False) as traveller:
        yield traveller


@pytest.fixture
def scheduled_kind():
    """Register ``every_minute`` (``schedule=timedelta(minutes=1)``) for one test."""
    kinds = []

    def register(name="every_minute", schedule=timedelta(minutes=1)):
        kinds.append(name)
        return job(name, schedule=schedule)(lambda job, ctx: None)

    yield register
    for name in kinds:
        unregister(name)


def add_schedule(name="ticks", **fields) -> Schedule:
    schedule = Schedule(name=name, kind=fields.pop("kind", "scheduled_tick"), **fields)
    store.save_schedule(schedule)
    return schedule


def keys(name="ticks") -> list[str]:
    return sorted(
        Job.objects.filter(idempotency_key__startswith=f"schedule:{name}:").values_list(
            "idempotency_key", flat=True
        )
    )


# Declared schedules reach the table ------------------------------------------------------------


def test_a_kinds_schedule_is_written_once_and_waits_for_its_first_moment(clock, scheduled_kind):
    scheduled_kind()
    store.sync_schedules()
    store.sync_schedules()
    row = Schedule.objects.get()
    assert (row.name, row.kind, row.every_seconds, row.source, row.enabled) == (
        "every_minute",
        "every_minute",
        60,
        Schedule.Source.CODE,
        True,
    )
    assert row.next_run_at == START + timedelta(minutes=1)


def test_syncing_keeps_an_operators_disabling_and_takes_a_new_timing(clock, scheduled_kind):
    scheduled_kind()
    store.sync_schedules()
    row = Schedule.objects.get()
    store.set_schedules_enabled([row.pk], False)
    unregister("every_minute")
    scheduled_kind(schedule="0 3 * * *")
    clock.shift(timedelta(seconds=30))
    store.sync_schedules()
    row.refresh_from_db()
    assert (row.enabled, row.cron, row.every_seconds) == (False, "0 3 * * *", None)
    assert row.next_run_at == datetime(2025, 1, 7, 3, tzinfo=UTC)


def test_a_schedule_declared_no_more_is_deleted_but_an_operators_stays(clock, scheduled_kind, settings):
    settings.DURAJOBS = {"SCHEDULES": {"reports": {"kind": "scheduled_tick", "cron": "0 7 * * 1"}}}
    scheduled_kind()
    add_schedule("added", every_seconds=60)
    store.sync_schedules()
    assert dict(Schedule.objects.values_list("name", "source")) == {
        "added": "admin",
        "every_minute": "code",
        "reports": "settings",
    }
    unregister("every_minute")
    settings.DURAJOBS = {}
    store.sync_schedules()
    assert list(Schedule.objects.values_list("name", flat=True)) == ["added"]


# Ticks ---------------------------------------------------------------------------------------


def test_a_tick_enqueues_a_due_moment_once_under_its_key(clock):
    schedule = add_schedule(every_seconds=60, subject={"report": "daily"})
    assert store.tick_schedules() == 0
    clock.shift(timedelta(seconds=61))
    assert store.tick_schedules() == 1
    assert store.tick_schedules() == 0
    [made] = Job.objects.all()
    assert (made.kind, made.subject, made.actor_type, made.idempotency_key) == (
        "scheduled_tick",
        {"report": "daily"},
        "system",
        "schedule:ticks:2025-01-06T12:01:00Z",
    )
    schedule.refresh_from_db()
    assert (schedule.last_run_at, schedule.next_run_at, schedule.last_job) == (
        START + timedelta(minutes=1),
        START + timedelta(minutes=2),
        made,
    )


def test_a_worker_that_read_a_moment_another_enqueued_makes_nothing(clock):
    add_schedule(every_seconds=60)
    clock.shift(timedelta(seconds=61))
    stale = Schedule.objects.get()
    assert store.tick_schedules() == 1
    assert _tick(stale, stale.next_run_at + timedelta(seconds=1), timedelta(seconds=60)) == 0
    assert keys() == ["schedule:ticks:2025-01-06T12:01:00Z"]


def test_a_late_tick_enqueues_each_moment_it_passed(clock):
    add_schedule(every_seconds=10)
    clock.shift(timedelta(seconds=45))
    assert store.tick_schedules() == 4
    assert keys() == [f"schedule:ticks:2025-01-06T12:00:{second}Z" for second in (10, 20, 30, 40)]


@pytest.mark.parametrize(
    ("missed", "made"), [("once", ["schedule:ticks:2025-01-06T12:00:10Z"]), ("skip", [])]
)
def test_moments_missed_while_no_worker_ticked_follow_the_policy(clock, missed, made, settings):
    settings.DURAJOBS = {"SCHEDULE_GRACE_SECONDS": 5}
    schedule = add_schedule(every_seconds=10, missed=missed)
    clock.shift(timedelta(minutes=10, seconds=3))
    store.tick_schedules()
    assert keys() == made
    schedule.refresh_from_db()
    assert schedule.next_run_at == START + timedelta(minutes=10, seconds=10)
    clock.shift(timedelta(seconds=8))
    store.tick_schedules()
    assert keys() == [*made, "schedule:ticks:2025-01-06T12:10:10Z"]


def test_a_schedule_enabled_again_does_not_catch_up_on_its_disabled_time(clock):
    schedule = add_schedule(every_seconds=60)
    store.set_schedules_enabled([schedule.pk], False)
    clock.shift(timedelta(hours=5))
    assert store.tick_schedules() == 0
    assert store.set_schedules_enabled([schedule.pk], True) == 1
    assert store.tick_schedules() == 0
    schedule.refresh_from_db()
    assert schedule.next_run_at == START + timedelta(hours=5, minutes=1)


def test_a_schedule_whose_kind_is_not_registered_here_waits_for_a_worker_that_has_it(clock, caplog):
    schedule = add_schedule(every_seconds=60)
    Schedule.objects.filter(pk=schedule.pk).update(kind="not_in_this_process")
    clock.shift(timedelta(seconds=61))
    with caplog.at_level(logging.WARNING, logger="django_durajobs.schedules"):
        assert store.tick_schedules() == 0
        assert store.tick_schedules() == 0
    assert [record.getMessage() for record in caplog.records] == [
        "Schedule ticks enqueues nothing: Unknown job kind 'not_in_this_process'."
    ]
    assert Schedule.objects.get().next_run_at == START + timedelta(minutes=1)


@pytest.mark.parametrize(
    ("start", "end"),
    [
        pytest.param(
            datetime(2025, 3, 27, tzinfo=UTC), datetime(2025, 4, 2, tzinfo=UTC), id="spring forward"
        ),
        pytest.param(datetime(2025, 10, 23, tzinfo=UTC), datetime(2025, 10, 29, tzinfo=UTC), id="fall back"),
    ],
)
def test_a_daily_schedule_runs_once_a_day_across_a_change_of_the_clocks(start, end):
    berlin = ZoneInfo("Europe/Berlin")
    with time_machine.travel(start, tick=False) as traveller:
        add_schedule("nightly", cron="30 2 * * *", timezone="Europe/Berlin")
        while datetime.now(UTC) < end:
            traveller.shift(timedelta(minutes=10))
            store.tick_schedules()
    made = Job.objects.filter(idempotency_key__startswith="schedule:nightly:")
    days = Counter(job.created_at.astimezone(berlin).date() for job in made)
    first_day = start.astimezone(berlin).date()
    assert days == Counter(first_day + timedelta(days=day) for day in range((end - start).days))


# Mistakes are caught early ---------------------------------------------------------------------


def test_a_kind_with_a_bad_schedule_is_refused_when_it_is_decorated():
    with pytest.raises(JobError, match="is not a cron expression"):
        job("bad_cron", schedule="61 * * * *")(lambda job, ctx: None)
    with pytest.raises(JobError, match="from 1 to"):
        job("bad_every", schedule=timedelta(0))(lambda job, ctx: None)
    assert "bad_cron" not in Job.objects.values_list("kind", flat=True)


@pytest.mark.parametrize(
    ("schedules_setting", "ids"),
    [
        pytest.param({"ok": {"kind": "scheduled_tick", "every": 60}}, [], id="fine"),
        pytest.param(["ok"], ["durajobs.E006"], id="not a dict"),
        pytest.param({"bad": {"kind": "scheduled_tick", "every": 0}}, ["durajobs.E006"], id="every 0"),
        pytest.param({"bad": {"kind": "scheduled_tick", "cron": "* *"}}, ["durajobs.E006"], id="bad cron"),
        pytest.param(
            {"bad": {"kind": "scheduled_tick", "every": 60, "tz": "UTC"}}, ["durajobs.E006"], id="key"
        ),
        pytest.param({"bad": {"kind": "nobody_registered_this", "every": 60}}, ["durajobs.E008"], id="kind"),
    ],
)
def test_the_schedules_setting_is_checked(settings, schedules_setting, ids):
    settings.DURAJOBS = {"SCHEDULES": schedules_setting}
    assert [message.id for message in check_settings()] == ids


def test_a_cron_schedule_in_settings_without_croniter_is_a_check_error(settings, monkeypatch):
    monkeypatch.setattr(schedules, "HAS_CRONITER", False)
    settings.DURAJOBS = {"SCHEDULES": {"nightly": {"kind": "scheduled_tick", "cron": "0 3 * * *"}}}
    [error] = check_settings()
    assert (error.id, error.level) == ("durajobs.E007", checks.ERROR)
    assert error.msg == (
        "Schedule 'nightly' is a cron schedule and needs croniter, which is not installed. "
        'Install it with: pip install "django-durajobs[cron]"'
    )


def test_a_settings_schedule_cannot_take_a_kinds_schedule_name(settings, scheduled_kind):
    scheduled_kind()
    settings.DURAJOBS = {"SCHEDULES": {"every_minute": {"kind": "scheduled_tick", "every": 60}}}
    assert [message.id for message in check_settings()] == ["durajobs.E009"]


def test_the_example_project_backs_the_shop_up_every_night():
    from example_project import settings as example_settings

    [(name, entry)] = example_settings.DURAJOBS["SCHEDULES"].items()
    spec = schedules.spec_from_setting(name, entry)
    assert (name, spec.kind, spec.cron, spec.timezone) == (
        "nightly-backup",
        "backup_database",
        "0 3 * * *",
        "Europe/Berlin",
    )
    assert spec.kind in known_kinds()
