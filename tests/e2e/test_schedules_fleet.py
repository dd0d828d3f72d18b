"""Schedules ticked by real ``runjobs`` processes: each moment enqueued once, with no leader.

A schedule every second; what the tests read is the idempotency keys of the jobs it made,
``schedule:<name>:<moment>``, one per second.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from django_durajobs import Job, Schedule, store
from tests.helpers import stop_cleanly, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

#: Each second is one moment the workers race for: each worker ticks five times a second.
FLEET_SECONDS = 8
#: Long enough for moments past the grace to be missed while no worker runs.
STOPPED_SECONDS = 5
PREFIX = "schedule:each_second:"
GRACE_SECONDS = 2  # a moment older than this at the first tick after the stop was missed


def every_second(missed: str = "once") -> Schedule:
    schedule = Schedule(name="each_second", kind="scheduled_tick", every_seconds=1, missed=missed)
    store.save_schedule(schedule)
    return schedule


def moments() -> list[datetime]:
    """The moments the jobs were made for, in order."""
    keys = Job.objects.filter(idempotency_key__startswith=PREFIX).values_list("idempotency_key", flat=True)
    return sorted(
        datetime.strptime(key.removeprefix(PREFIX), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC) for key in keys
    )


def moments_after(start: datetime) -> list[datetime]:
    return [moment for moment in moments() if moment > start]


def test_three_workers_enqueue_each_moment_exactly_once(child_env, runjobs):
    schedule = every_second()
    first = schedule.next_run_at
    fleet = [runjobs("--poll-interval", "0.2", env=child_env) for _ in range(3)]
    wait_for(lambda: moments(), timeout=120, message="the first scheduled job")
    time.sleep(FLEET_SECONDS)  # the scenario itself: the fleet runs for a while
    stopped_at = datetime.now(UTC)
    stop_cleanly(fleet)
    made = moments()
    assert made[0] == first  # none missing at the start: the workers' first ticks caught up
    assert made == [first + timedelta(seconds=n) for n in range(len(made))]  # consecutive, none twice
    assert made[-1] >= stopped_at - timedelta(seconds=5)
    assert len(made) >= FLEET_SECONDS


@pytest.mark.parametrize("missed", ["once", "skip"])
def test_moments_missed_while_no_worker_ran_follow_the_policy(child_env, runjobs, missed):
    every_second(missed)
    env = {"DURAJOBS_SCHEDULE_GRACE_SECONDS": str(GRACE_SECONDS)}
    worker = runjobs("--poll-interval", "0.2", env=child_env, extra_env=env)
    wait_for(lambda: len(moments()) >= 3, timeout=120, message="three scheduled jobs")
    stop_cleanly([worker])
    last_before = moments()[-1]
    time.sleep(STOPPED_SECONDS)  # the scenario itself: no worker runs
    worker = runjobs("--poll-interval", "0.2", env=child_env, extra_env=env)
    wait_for(lambda: len(moments_after(last_before)) >= 4, timeout=120, message="jobs after the restart")
    stop_cleanly([worker])
    after = moments_after(last_before)
    catch_up = [moment for moment in after if moment < last_before + timedelta(seconds=STOPPED_SECONDS - 1)]
    assert catch_up == ([last_before + timedelta(seconds=1)] if missed == "once" else [])
    resumed = after[len(catch_up) :]
    assert resumed == [resumed[0] + timedelta(seconds=n) for n in range(len(resumed))]
