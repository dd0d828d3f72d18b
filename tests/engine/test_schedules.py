"""Schedules' moments and what a tick makes of them, from values alone: no database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from django_durajobs import schedules
from django_durajobs.errors import JobError
from django_durajobs.schedules import Due, checked_spec, due, spec_from_setting

GRACE = timedelta(seconds=60)


def at(text: str) -> datetime:
    """A moment in UTC, from ``"2025-03-30 01:00"``."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def moments(spec, start: datetime, count: int) -> list[str]:
    found, moment = [], start
    for _ in range(count):
        moment = spec.next_after(moment)
        found.append(moment.strftime("%m-%d %H:%M"))
    return found


def cron(expression: str, zone: str = "UTC", **options):
    return checked_spec(name="nightly", kind="backup", cron=expression, timezone=zone, **options)


def every(seconds, **options):
    return checked_spec(name="often", kind="tick", every=seconds, **options)


# The next moment ---------------------------------------------------------------------------------


def test_a_period_counts_from_the_epoch_so_every_worker_finds_the_same_moments():
    spec = every(timedelta(minutes=15))
    assert spec.next_after(at("2025-01-01 00:07:31")) == at("2025-01-01 00:15")
    assert spec.next_after(at("2025-01-01 00:15")) == at("2025-01-01 00:30")  # strictly after
    assert spec.next_after(at("2025-01-01 00:14:59.999999")) == at("2025-01-01 00:15")


def test_a_cron_moment_is_read_in_its_time_zone():
    spec = cron("30 2 * * *", "Europe/Berlin")
    assert spec.next_after(at("2025-01-10 12:00")) == at("2025-01-11 01:30")  # winter: UTC+1
    assert spec.next_after(at("2025-07-10 12:00")) == at("2025-07-11 00:30")  # summer: UTC+2


def test_without_a_time_zone_a_schedule_follows_time_zone(settings):
    settings.TIME_ZONE = "America/New_York"
    assert cron("0 9 * * *", "").next_after(at("2025-01-10 00:00")) == at("2025-01-10 14:00")


def test_a_daily_run_in_the_hour_spring_skips_runs_once_when_the_clocks_have_jumped():
    spec = cron("30 2 * * *", "Europe/Berlin")
    assert moments(spec, at("2025-03-28 12:00"), 3) == ["03-29 01:30", "03-30 01:00", "03-31 00:30"]


def test_a_daily_run_in_the_hour_autumn_repeats_runs_once():
    spec = cron("30 2 * * *", "Europe/Berlin")
    assert moments(spec, at("2025-10-24 12:00"), 3) == ["10-25 00:30", "10-26 00:30", "10-27 01:30"]
    # Started between the two 02:30s, it waits for the next day's.
    assert spec.next_after(at("2025-10-26 00:45")) == at("2025-10-27 01:30")


@pytest.mark.parametrize("start", ["2025-03-29 23:00", "2025-10-25 23:00"])
def test_an_hourly_schedule_follows_real_time_through_both_changes(start):
    spec = cron("0 * * * *", "Europe/Berlin")
    assert moments(spec, at(start), 5) == [
        at(start).replace(hour=hour, day=at(start).day + 1).strftime("%m-%d %H:%M") for hour in range(5)
    ]


def test_a_key_names_the_schedule_and_its_moment_in_utc():
    spec = cron("30 2 * * *", "Europe/Berlin")
    assert spec.key(spec.next_after(at("2025-01-10 12:00"))) == "schedule:nightly:2025-01-11T01:30:00Z"


# What a tick enqueues --------------------------------------------------------------------------


def test_nothing_is_due_before_the_pending_moment():
    assert due(every(60), at("2025-01-01 00:01"), at("2025-01-01 00:00:30"), GRACE) == Due(
        (), at("2025-01-01 00:01")
    )


def test_a_late_tick_within_the_grace_enqueues_every_moment_it_passed():
    plan = due(every(10), at("2025-01-01 00:00:10"), at("2025-01-01 00:00:35"), GRACE)
    assert plan.moments == tuple(at(f"2025-01-01 00:00:{second}") for second in (10, 20, 30))
    assert plan.next_moment == at("2025-01-01 00:00:40")
    assert not plan.missed


def test_missed_once_makes_one_job_for_all_the_missed_moments_under_the_first_ones_key():
    plan = due(every(10), at("2025-01-01 00:00:10"), at("2025-01-01 01:00:05"), GRACE)
    assert plan == Due((at("2025-01-01 00:00:10"),), at("2025-01-01 01:00:10"), missed=True)


def test_missed_skip_makes_none_and_waits_for_the_next_future_moment():
    plan = due(every(10, missed="skip"), at("2025-01-01 00:00:10"), at("2025-01-01 01:00:05"), GRACE)
    assert plan == Due((), at("2025-01-01 01:00:10"), missed=True)


# What a schedule may be ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "says"),
    [
        pytest.param(dict(cron="61 * * * *"), "is not a cron expression", id="minute 61"),
        pytest.param(dict(cron="every day"), "is not a cron expression", id="words"),
        pytest.param(dict(cron="0 0 31 2 *"), "has no next moment", id="31 February"),
        pytest.param(dict(every=0), "from 1 to", id="every 0"),
        pytest.param(dict(every=-5), "from 1 to", id="negative"),
        pytest.param(dict(every=1.5), "whole number of seconds", id="a fraction"),
        pytest.param(dict(every=float("inf")), "whole number of seconds", id="infinite"),
        pytest.param(dict(every="60"), "whole number of seconds", id="text"),
        pytest.param(dict(every=True), "whole number of seconds", id="a bool"),
        pytest.param(dict(every=timedelta(milliseconds=10)), "whole number of seconds", id="under a second"),
        pytest.param(dict(), "one of a cron expression and every", id="neither"),
        pytest.param(dict(cron="* * * * *", every=1), "one of a cron expression and every", id="both"),
        pytest.param(dict(every=1, timezone="Mars/Olympus"), "unknown time zone", id="time zone"),
        pytest.param(dict(every=1, timezone=3), "time zone must be a name", id="time zone number"),
        pytest.param(dict(every=1, missed="twice"), "missed must be 'once' or 'skip'", id="missed"),
        pytest.param(dict(every=1, subject={"at": object()}), "subject", id="subject not JSON"),
    ],
)
def test_what_is_not_a_schedule_is_refused_with_what_is_wrong(options, says):
    with pytest.raises(JobError) as refused:
        checked_spec(name="bad", kind="tick", **options)
    assert refused.value.code == "invalid_input"
    assert says in refused.value.message


@pytest.mark.parametrize("name", ["", "  ", None, "x" * 201])
def test_a_schedule_needs_a_name_its_key_can_hold(name):
    with pytest.raises(JobError, match="name"):
        checked_spec(name=name, kind="tick", every=1)


def test_a_cron_schedule_without_croniter_says_what_to_install(monkeypatch):
    monkeypatch.setattr(schedules, "HAS_CRONITER", False)
    with pytest.raises(JobError) as refused:
        cron("*/15 * * * *")
    assert refused.value.code == "missing_dependency"
    assert refused.value.message.endswith('Install it with: pip install "django-durajobs[cron]"')
    assert every(60).next_after(at("2025-01-01 00:00")) == at("2025-01-01 00:01")  # no croniter needed


def test_a_settings_entry_is_checked_key_by_key():
    spec = spec_from_setting(
        "reports", {"kind": "send_report", "cron": "0  7 * * 1", "subject": {"to": "ops"}, "missed": "skip"}
    )
    assert (spec.kind, spec.cron, spec.subject, spec.missed, spec.timezone) == (
        "send_report",
        "0 7 * * 1",
        {"to": "ops"},
        "skip",
        "",
    )
    with pytest.raises(JobError, match="unknown keys \\['cronn'\\]"):
        spec_from_setting("reports", {"kind": "send_report", "cronn": "0 7 * * 1"})
    with pytest.raises(JobError, match="needs the name of a job kind"):
        spec_from_setting("reports", {"every": 60})
    with pytest.raises(JobError, match="must be a dict"):
        spec_from_setting("reports", "0 7 * * 1")
