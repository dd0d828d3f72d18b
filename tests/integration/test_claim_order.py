"""The order of the claim: due jobs run by priority, then interrupted work (handed back by a lost or
stopping worker) before work not started, then due time, then age; ``@job`` sets a kind's default
queue and priority, and ``enqueue`` overrides them. Workers restricted to queues are in
``tests/e2e/test_fleet.py``; interrupted work resuming first with real processes in
``tests/e2e/test_resume_first.py``.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from django_durajobs import Job, Status, describe, drain, enqueue, pause, store
from django_durajobs.conf import get_setting
from tests.admin_pages import change_url, list_url
from tests.factories import JobFactory
from tests.testapp.kinds_fleet import (
    URGENT_PRIORITY,
    URGENT_QUEUE,
    fleet_urgent,
    ran_labels,
)


@pytest.mark.django_db
def test_due_jobs_run_by_priority_then_due_time_then_age():
    """Larger priority first; among equals, the earlier ``next_run_at``; then the older job.
    Future-dated jobs wait, whatever their priority."""
    now = timezone.now()
    tie = now - timedelta(seconds=30)
    for label, priority, run_at in [
        ("low-priority-oldest", -5, now - timedelta(seconds=120)),
        ("due-10s-ago", 0, now - timedelta(seconds=10)),
        ("tie-older", 0, tie),
        ("tie-younger", 0, tie),
        ("due-60s-ago-young", 0, now - timedelta(seconds=60)),
        ("high-priority-newest", 10, None),
        ("future", 100, now + timedelta(hours=1)),
    ]:
        enqueue("fleet_record", label=label, priority=priority, run_at=run_at)

    assert drain() == 6
    assert ran_labels() == [
        "high-priority-newest",
        "due-60s-ago-young",
        "tie-older",
        "tie-younger",
        "due-10s-ago",
        "low-priority-oldest",
    ]
    assert Job.objects.get(label="future").status == Status.QUEUED


@pytest.mark.django_db
def test_job_decorator_sets_default_queue_and_priority_and_enqueue_overrides_them():
    """``@job(queue=..., priority=...)`` are the defaults of each enqueue; enqueue can override both."""
    by_default, _ = fleet_urgent.enqueue(label="urgent-default")
    overridden, _ = enqueue("fleet_urgent", label="urgent-overridden", queue="fleet_slow", priority=-20)
    plain, _ = enqueue("fleet_record", label="plain")
    assert (by_default.queue, by_default.priority) == (URGENT_QUEUE, URGENT_PRIORITY)
    assert (overridden.queue, overridden.priority) == ("fleet_slow", -20)
    assert (plain.queue, plain.priority) == ("default", 0)

    assert drain() == 3
    assert ran_labels() == ["urgent-default", "plain", "urgent-overridden"]


# Interrupted work first ------------------------------------------------------------------------

LOST_WORKER = "claim-order-worker"


def expire_leases(leases):
    """As if the worker had stopped heartbeating a lease ago."""
    lease_seconds = get_setting("LEASE_SECONDS")
    Job.objects.filter(pk__in=[lease.job.pk for lease in leases]).update(
        locked_at=F("locked_at") - timedelta(seconds=lease_seconds + 5)
    )
    return store.recover()


def hand_back(how, leases):
    """Give the claimed jobs back the way ``how`` names; how many were."""
    if how == "expired lease":
        return expire_leases(leases)
    if how == "recover(worker_id=...)":
        return store.recover(worker_id=LOST_WORKER)
    if how == "restarting worker":
        prefix = store.worker_prefix("claim-order")
        return store.recover_predecessors(store.new_worker_id("claim-order"), prefix)
    assert how == "graceful stop"
    return sum(store.release(lease.job, "stopping") for lease in leases)


def claim_all(count, worker_id):
    leases = [store.claim(worker_id) for _ in range(count)]
    assert all(leases)
    return leases


HANDBACKS = ["expired lease", "recover(worker_id=...)", "restarting worker", "graceful stop"]


@pytest.mark.parametrize("how", HANDBACKS)
@pytest.mark.django_db
def test_interrupted_work_runs_before_work_of_its_priority_not_started(how):
    """Handed back half done, a job goes before every job of its priority that has not started,
    however long those have been due; among interrupted jobs, in the order each was first due.
    A higher priority still goes first, and a lower one after."""
    now = timezone.now()
    worker_id = store.new_worker_id("claim-order") if how == "restarting worker" else LOST_WORKER
    for label, priority, due in [
        ("interrupted-due-20s-ago", 0, 20),
        ("interrupted-due-30s-ago", 0, 30),
        ("interrupted-low-priority", -5, 40),
    ]:
        enqueue("fleet_record", label=label, priority=priority, run_at=now - timedelta(seconds=due))
    leases = claim_all(3, worker_id)
    first_due = {lease.job.label: lease.job.next_run_at for lease in leases}
    assert hand_back(how, leases) == 3
    for label, priority, due in [
        ("not-started-due-an-hour-ago", 0, 3600),
        ("not-started-urgent", 10, 0),
        ("not-started-low-priority-due-a-day-ago", -5, 86400),
        ("not-started-due-a-minute-ago", 0, 60),
    ]:
        enqueue("fleet_record", label=label, priority=priority, run_at=now - timedelta(seconds=due))

    interrupted = Job.objects.filter(interrupted=True)
    assert {job.label: job.next_run_at for job in interrupted} == first_due  # their due times kept
    assert {job.status for job in interrupted} == {Status.QUEUED}

    assert drain() == 7
    assert ran_labels() == [
        "not-started-urgent",
        "interrupted-due-30s-ago",
        "interrupted-due-20s-ago",
        "not-started-due-an-hour-ago",
        "not-started-due-a-minute-ago",
        "interrupted-low-priority",
        "not-started-low-priority-due-a-day-ago",
    ]
    assert not Job.objects.filter(interrupted=True).exists()  # the mark goes when the job runs


@pytest.mark.django_db
def test_a_released_job_waits_for_nothing_but_a_worker_and_says_so():
    """``describe()`` shows an interrupted job as resuming (after a lost worker, or after its worker
    stopped) until it runs; a reason from its run before is not shown as what it waits for."""
    lost, _ = enqueue("fleet_record", label="lost")
    stopped, _ = enqueue("fleet_record", label="stopped")
    lost_lease, stopped_lease = claim_all(2, LOST_WORKER)
    Job.objects.filter(pk=lost.pk).update(wait_reason="Rate limited by the API")  # from an earlier try
    store.release(lost_lease.job, "lost")
    store.release(stopped_lease.job, "stopping")

    shown = describe(lost)
    assert (shown["status"], shown["interrupted"], shown["stale"]) == (Status.QUEUED, True, False)
    assert shown["wait_reason"] == "Resuming after a lost worker"
    assert shown["eta_unknown_reason"].startswith("Resuming after a lost worker: next for a free worker")
    assert describe(stopped)["wait_reason"] == "Resuming after its worker stopped"

    lease = store.claim("claim-order-next")
    assert lease.job.pk == lost.pk
    shown = describe(lost)
    assert (shown["status"], shown["interrupted"], shown["wait_reason"]) == (Status.RUNNING, False, None)


@pytest.mark.django_db
def test_an_interrupted_job_paused_by_an_operator_keeps_no_place():
    """Paused and resumed, an interrupted job is due again like any resumed job: not before the
    jobs that have not started."""
    enqueue("fleet_record", label="interrupted-then-paused")
    [lease] = claim_all(1, LOST_WORKER)
    store.release(lease.job, "stopping")
    pause(lease.job.pk)
    assert Job.objects.get(pk=lease.job.pk).interrupted is False
    enqueue("fleet_record", label="not-started")
    Job.objects.get(pk=lease.job.pk).resume()

    assert drain() == 2
    assert ran_labels() == ["not-started", "interrupted-then-paused"]


@pytest.mark.django_db
def test_a_job_retried_later_keeps_its_time_behind_older_work():
    """``retry_later`` is not an interruption: the job is due at the time it asked for, behind a job
    due earlier that has not started."""
    retried, _ = enqueue("resume_later_once", label="retried-later")
    assert drain(max_jobs=1) == 1
    retried.refresh_from_db()
    assert (retried.status, retried.interrupted) == (Status.QUEUED, False)
    enqueue("fleet_record", label="due-before-it", run_at=retried.next_run_at - timedelta(seconds=1))

    assert drain() == 2
    assert ran_labels() == ["due-before-it", "retried-later"]


@pytest.mark.django_db
def test_the_admin_shows_an_interrupted_job_as_resuming_until_it_runs(admin_client):
    """The list's "waiting for" column and the job's page say it resumes after a lost worker; once
    a worker has it again, neither does."""
    job, _ = enqueue("fleet_record", label="interrupted")
    [lease] = claim_all(1, LOST_WORKER)
    store.release(lease.job, "lost")

    listing = admin_client.get(list_url()).content.decode()
    page = admin_client.get(change_url(job)).content.decode()
    assert "Resuming after a lost worker" in listing
    assert "Resuming after a lost worker" in page

    assert store.claim("claim-order-next").job.pk == job.pk
    assert "Resuming after" not in admin_client.get(list_url()).content.decode()
    assert "Resuming after" not in admin_client.get(change_url(job)).content.decode()


@pytest.mark.django_db
def test_kinds_no_job_registered_are_found_in_claim_order_interrupted_work_first():
    """A worker looks for the kinds of due jobs it has no ``@job`` for (the Tasks backend's tasks) a
    few at a time: an interrupted job's kind is found before those of older work not started."""
    now = timezone.now()
    for kind, due, interrupted in [
        ("tasks.not_started_long_ago", 3600, False),
        ("tasks.interrupted", 10, True),
        ("tasks.not_started_lately", 60, False),
    ]:
        JobFactory(
            kind=kind, status=Status.QUEUED, next_run_at=now - timedelta(seconds=due), interrupted=interrupted
        )

    assert store.due_kinds_not_in([], most=1) == ["tasks.interrupted"]
    assert store.due_kinds_not_in([], most=3) == [
        "tasks.interrupted",
        "tasks.not_started_long_ago",
        "tasks.not_started_lately",
    ]


@pytest.mark.django_db(transaction=True)
def test_drain_runs_a_due_job_that_another_workers_claim_was_reading():
    """MySQL/MariaDB lock every row a claim reads, in any queue: a claim for other queues holds the
    due job for a moment, and drain() looks again rather than stop with the job still due."""
    job, _ = enqueue("fleet_record", label="read-by-another")
    reading, done = threading.Event(), threading.Event()

    def claim_for_other_queues() -> None:
        try:
            with transaction.atomic():
                assert store.claim("elsewhere", queues=["nothing"]) is None
                reading.set()
                time.sleep(0.02)
        finally:
            connection.close()
            done.set()

    threading.Thread(target=claim_for_other_queues).start()
    assert reading.wait(10)
    assert drain() == 1
    assert done.wait(10)
    job.refresh_from_db()
    assert job.status == Status.DONE
    assert ran_labels() == ["read-by-another"]
