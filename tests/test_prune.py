"""Pruning: old ended jobs go, with their steps and log; anything still going, or recent, stays."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from django_durajobs import Job, JobLog, JobStep, Status
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db


def ended(days_ago: float, status: str = Status.DONE, **fields) -> Job:
    return JobFactory(status=status, ended_at=timezone.now() - timedelta(days=days_ago), **fields)


def test_prunejobs_deletes_old_ended_jobs_with_their_steps_and_log():
    old = [ended(40, status) for status in (Status.DONE, Status.FAILED, Status.CANCELLED, Status.REVERTED)]
    JobLog.objects.create(job=old[0], line="old")
    recent = ended(5)
    running = JobFactory(status=Status.RUNNING, locked_by="w", lease_token="t", locked_at=timezone.now())
    out = StringIO()

    call_command("prunejobs", "--days", "30", stdout=out)

    assert "Deleted 4 job(s)" in out.getvalue()
    assert not Job.objects.filter(pk__in=[job.pk for job in old]).exists()
    assert not JobStep.objects.filter(job_id__in=[job.pk for job in old]).exists()
    assert not JobLog.objects.filter(job_id=old[0].pk).exists()
    assert set(Job.objects.values_list("pk", flat=True)) == {recent.pk, running.pk}


def test_prunejobs_keeps_a_parent_whose_child_has_not_ended():
    parent = ended(60)
    child = JobFactory(status=Status.QUEUED, parent=parent)
    finished_parent = ended(60)
    ended(60, parent=finished_parent)

    call_command("prunejobs", "--days", "30", stdout=StringIO())

    assert set(Job.objects.values_list("pk", flat=True)) == {parent.pk, child.pk}


def test_prunejobs_dry_run_counts_and_deletes_nothing():
    ended(40)
    ended(41)
    out = StringIO()

    call_command("prunejobs", "--days", "30", "--dry-run", stdout=out)

    assert "Would delete 2 job(s)" in out.getvalue()
    assert Job.objects.count() == 2


def test_prunejobs_refuses_a_negative_age():
    with pytest.raises(CommandError, match="--days cannot be negative"):
        call_command("prunejobs", "--days", "-1")
