"""What the console shows of times and progress, from values alone: no database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone, translation

from django_durajobs.engine.moments import exact, in_words, relative, span
from django_durajobs.engine.progress import progress_of
from django_durajobs.status import Status

NOW = datetime(2026, 12, 1, 18, 6, 14, 500_000, tzinfo=UTC)


@pytest.mark.parametrize(
    ("offset", "shown"),
    [
        (0, "just now"),
        (0.4, "just now"),
        (-0.9, "just now"),
        (8, "in 8 s"),
        (8.9, "in 8 s"),
        (-5, "5 s ago"),
        (59, "in 59 s"),
        (60, "in 1 min"),
        (-3 * 60 - 59, "3 min ago"),
        (-3600, "1 h ago"),
        (47 * 3600, "in 47 h"),
        (-2 * 86400, "2 d ago"),
        (-30 * 86400, "30 d ago"),
    ],
)
def test_relative_times_say_how_far_in_the_largest_whole_unit(offset, shown):
    with translation.override("en"):
        assert relative(NOW + timedelta(seconds=offset), NOW) == shown


def test_the_backoffs_the_readme_asks_to_watch_are_told_apart():
    with translation.override("en"):
        assert [relative(NOW + timedelta(seconds=s), NOW) for s in (5, 10)] == ["in 5 s", "in 10 s"]
        assert span(10) != span(5)


def test_the_exact_time_has_seconds_and_is_in_the_current_time_zone():
    with translation.override("en"), timezone.override("Europe/Berlin"):
        assert exact(NOW) == "Dec. 1, 2026, 19:06:14 CET"
    with translation.override("en"), timezone.override("America/New_York"):
        assert exact(datetime(2026, 7, 1, 12, 0, 1, tzinfo=UTC)) == "July 1, 2026, 08:00:01 EDT"


def test_in_words_gives_the_relative_time_then_the_exact_one():
    with translation.override("en"), timezone.override("UTC"):
        assert in_words(NOW + timedelta(seconds=8), NOW) == "in 8 s (Dec. 1, 2026, 18:06:22 UTC)"


# The status, the progress the job reported (0: none), its phase's done and total steps -> shown.
PROGRESS = [
    (Status.QUEUED, 0, 0, 3, 0),
    (Status.QUEUED, 0, 0, 0, 0),
    (Status.RUNNING, 0, 2, 3, 66),
    (Status.RUNNING, 0, 3, 3, 100),
    (Status.RUNNING, 10, 2, 3, 10),  # its own report replaces the steps' count
    (Status.RUNNING, 250, 0, 3, 100),
    (Status.DONE, 0, 0, 0, 100),
    (Status.DONE, 100, 3, 3, 100),
    (Status.FAILED, 0, 1, 4, 25),
    (Status.CANCELLED, 0, 1, 2, 50),
    (Status.PAUSED, 40, 1, 2, 40),
    (Status.AWAITING_EXTERNAL, 0, 2, 4, 50),
    (Status.NEEDS_USER, 0, 1, 3, 33),
    (Status.AWAITING_APPROVAL, 0, 0, 2, 0),
    (Status.AWAITING_PAYMENT, 0, 1, 3, 33),
    (Status.NOT_READY, 0, 0, 1, 0),
    (Status.NEEDS_SETUP, 0, 0, 1, 0),
    # A revert counts its own steps, from 0 (the revert's transition resets the reported progress).
    (Status.REVERTING, 0, 0, 2, 0),
    (Status.REVERTING, 0, 1, 2, 50),
    (Status.REVERTED, 0, 2, 2, 100),
]


def test_every_status_has_a_progress_case():
    assert {case[0] for case in PROGRESS} == set(Status)


@pytest.mark.parametrize(("status", "reported", "done", "total", "shown"), PROGRESS)
def test_progress_follows_the_steps_unless_the_job_reports_its_own(status, reported, done, total, shown):
    assert progress_of(status, reported, done, total) == shown
