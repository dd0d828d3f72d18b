"""The claim under limits behind more held-back jobs than its window reads (``store/limited_pick.py``):
it still takes the job the plain pick would, the most urgent one no limit holds back, whatever
holds the others back (a full key, a full kind, a full queue, a key at its throttle), within a
worker's queues, and never one not due yet; with no limit full, behind more jobs without limits
than its window reads, too. On every database (MariaDB/MySQL keep the plain pick,
which must agree).

How much such a claim reads: tests/integration/test_query_plans.py.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from django_durajobs import Job, Status, enqueue, enqueue_many, store
from django_durajobs.store.claiming import ClaimRequest
from django_durajobs.store.holding import current_limits
from django_durajobs.store.limited_pick import WINDOW
from django_durajobs.store.limiting import claim_limited

pytestmark = pytest.mark.django_db(transaction=True)

#: More jobs held back ahead of the others than the window reads.
BEHIND = WINDOW + 20
LIMITED_QUEUE = "limited-pick"


@pytest.fixture(autouse=True)
def no_other_jobs():
    assert not Job.objects.exists()


def claim(queues=None):
    return store.claim("limited-pick-worker", queues=queues)


def held_back_behind(kind: str, holders: int = 1, **options) -> None:
    """``holders`` jobs of ``kind`` claimed (running), then ``BEHIND`` more due before any other
    job (priority 100, due an hour ago), which those hold back."""
    for _ in range(holders):
        held = enqueue(kind, priority=100, **options)[0]
        assert claim().job.pk == held.pk
    waiting = [job for job, _ in enqueue_many(kind, [{"priority": 100, **options}] * BEHIND)]
    Job.objects.filter(pk__in=[job.pk for job in waiting]).update(
        next_run_at=timezone.now() - timedelta(hours=1)
    )


def test_behind_a_full_keys_backlog_the_most_urgent_free_key_goes_first():
    held_back_behind("limits_backup", subject={"server": 1})
    later = enqueue("limits_restore", subject={"server": 2})[0]
    sooner = enqueue("limits_backup", subject={"server": 3}, priority=5)[0]

    assert claim().job.pk == sooner.pk
    assert claim().job.pk == later.pk
    assert claim() is None


def test_behind_a_full_kinds_backlog_a_job_of_another_kind_is_taken():
    held_back_behind("limits_two_at_a_time", holders=2)
    other = enqueue("limits_backup", subject={"server": 1})[0]

    assert claim().job.pk == other.pk
    assert claim() is None


def test_behind_a_full_queues_backlog_a_job_of_another_queue_is_taken(settings):
    settings.DURAJOBS = {"QUEUE_LIMITS": {LIMITED_QUEUE: 1}}
    held_back_behind("limits_plain", queue=LIMITED_QUEUE)
    other = enqueue("limits_backup", subject={"server": 1})[0]

    assert claim().job.pk == other.pk
    assert claim() is None


def test_behind_a_key_at_its_throttle_another_keys_job_is_taken():
    held_back_behind("throttled_hourly", holders=2, subject={"customer": "busy"})
    other = enqueue("throttled_hourly", subject={"customer": "quiet"})[0]

    assert claim().job.pk == other.pk
    assert claim() is None


def test_a_worker_of_some_queues_takes_a_job_of_its_queues_alone():
    held_back_behind("limits_backup", subject={"server": 1}, queue="own")
    enqueue("limits_backup", subject={"server": 2}, queue="elsewhere", priority=50)
    own = enqueue("limits_backup", subject={"server": 3}, queue="own")[0]

    assert claim(queues=["own"]).job.pk == own.pk
    assert claim(queues=["own"]) is None


def test_a_lanes_job_not_due_yet_is_passed_over_for_its_due_one():
    held_back_behind("limits_backup", subject={"server": 1})
    not_yet = enqueue("limits_backup", subject={"server": 2}, priority=100)[0]
    Job.objects.filter(pk=not_yet.pk).update(next_run_at=timezone.now() + timedelta(hours=1))
    due = enqueue("limits_backup", subject={"server": 2})[0]

    assert claim().job.pk == due.pk
    assert claim() is None


def test_a_job_queued_before_a_release_limited_its_kind_is_taken_from_the_plain_lane():
    held_back_behind("limits_backup", subject={"server": 1})
    before = enqueue("limits_restore", subject={"server": 2})[0]
    Job.objects.filter(pk=before.pk).update(under_limits=False)  # as a release without the limit left it

    assert claim().job.pk == before.pk
    assert claim() is None


def test_once_the_key_frees_its_backlog_is_taken_in_order():
    held_back_behind("limits_backup", subject={"server": 1})
    [holder] = Job.objects.filter(status=Status.RUNNING)
    Job.objects.filter(pk=holder.pk).update(status=Status.DONE, locked_by="", ended_at=timezone.now())
    first_due = Job.objects.filter(status=Status.QUEUED).order_by("next_run_at", "id").first()

    assert claim().job.pk == first_due.pk
    assert claim() is None


def test_with_every_limit_free_the_look_finds_a_job_behind_more_jobs_without_limits_than_its_window():
    """No limit is full, and more due jobs of a kind without limits than the window reads come
    first: the look under limits (``claim_limited``, a worker's once a second) still finds the job
    under limits behind them, and among two, the more urgent. The plain claim takes the others."""
    plain = [job for job, _ in enqueue_many("limits_plain", [{}] * BEHIND)]
    Job.objects.filter(pk__in=[job.pk for job in plain]).update(
        next_run_at=timezone.now() - timedelta(hours=1)
    )
    later = enqueue("limits_restore", subject={"server": 1})[0]
    sooner = enqueue("limits_backup", subject={"server": 2}, priority=5)[0]
    request = ClaimRequest("limited-pick-worker", "limited-pick-token")

    for expected in (sooner, later):
        found = claim_limited(connection, Status.QUEUED, request, current_limits())
        assert found is not None and found.pk == expected.pk
    assert claim_limited(connection, Status.QUEUED, request, current_limits()) is None
    assert claim().job.kind == "limits_plain"
