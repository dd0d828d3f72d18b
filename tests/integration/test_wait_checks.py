"""A timed wait that its run checks again and again: logged once, counted in ``describe()``.

The kind ``states_wait`` waits on each of its first ``waits`` runs with the same reason and a
``resume_at`` a minute on; the clock is moved to each wake-up, so a check happens on every run.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from django_durajobs import Job, Status, describe, enqueue
from django_durajobs.testing import clock, run_job
from tests.admin_pages import change_url

pytestmark = pytest.mark.django_db

RECHECK_SECONDS = 60


def log_lines(job) -> list[str]:
    return [entry["line"] for entry in describe(job)["log"]]


def checked(job, times: int, now) -> Job:
    """Run the job ``times`` times, moving the clock to each of its wake-ups."""
    job = run_job(job)
    for _check in range(times - 1):
        now.move_to(job.next_run_at)
        job = run_job(job)
    return job


def test_a_wait_checked_twenty_times_leaves_a_handful_of_log_lines_and_counts_its_checks():
    job, _ = enqueue("states_wait", subject={"waits": 21, "resume_in": RECHECK_SECONDS})
    with clock() as now:
        job = checked(job, 20, now)
        summary = describe(job)
        assert summary["status"] == Status.AWAITING_EXTERNAL
        assert summary["wait_checks"] == {
            "count": 20,
            "last_at": now.now().isoformat(),
            "next_at": (now.now() + timedelta(seconds=RECHECK_SECONDS)).isoformat(),
        }
        assert log_lines(job) == ["Waiting: DNS record not visible yet"]

        now.move_to(job.next_run_at)
        checked(job, 2, now)  # the 21st check still waits; the 22nd run finishes
    summary = describe(job)
    assert summary["status"] == Status.DONE
    assert summary["wait_checks"] is None
    assert len(summary["log"]) <= 5
    assert log_lines(job) == ["Waiting: DNS record not visible yet", "Done."]


def test_a_check_that_finds_a_new_reason_logs_it_and_counts_from_one_again():
    subject = {"waits": 5, "resume_in": RECHECK_SECONDS, "reason": "0 of 3 resolvers"}
    job, _ = enqueue("states_wait", subject=subject)
    with clock() as now:
        job = checked(job, 3, now)
        Job.objects.filter(pk=job.pk).update(subject={**subject, "reason": "2 of 3 resolvers"})
        now.move_to(job.next_run_at)
        run_job(job)
        assert describe(job)["wait_checks"]["count"] == 1
    assert log_lines(job) == ["Waiting: 0 of 3 resolvers", "Waiting: 2 of 3 resolvers"]


def test_a_job_no_longer_waiting_shows_no_checks():
    job, _ = enqueue("states_wait", subject={"waits": 3, "resume_in": RECHECK_SECONDS})
    with clock() as now:
        job = checked(job, 2, now)
        job.cancel()
    assert describe(job)["wait_checks"] is None


def test_the_job_page_shows_the_checks_and_the_log_shows_the_wait_once(admin_client):
    job, _ = enqueue("states_wait", subject={"waits": 5, "resume_in": RECHECK_SECONDS})
    with clock() as now:
        checked(job, 4, now)
        page = admin_client.get(change_url(job)).content.decode()
    assert "4 checks" in page
    assert page.count("Waiting: DNS record not visible yet") == 1  # its log line, once
