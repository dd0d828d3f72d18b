"""Limits: concurrency keys, ``max_running``, ``QUEUE_LIMITS`` and rate limits.

- Declarations and enqueues that cannot be limits are refused before anything is written.
- A job a limit holds back stays ``queued``, its reason shown by ``describe()`` and the admin,
  and starts once the slot frees (on PostgreSQL the finish that frees it wakes the idle workers);
  jobs behind it, however many are held back, are claimed at once.
- Real ``runjobs`` processes: tests/e2e/test_concurrency_limits_fleet.py.

Kinds: ``tests/testapp/kinds_concurrency.py``.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.db import connection
from django.urls import reverse

from django_durajobs import Job, JobError, Status, drain, enqueue, enqueue_many, job, store
from django_durajobs.engine.runner import execute
from django_durajobs.models import JobLimit
from django_durajobs.store import holding
from django_durajobs.worker import Worker, WorkerOptions
from tests.helpers import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

LIMITED_QUEUE = "limits-five"


@pytest.fixture(autouse=True)
def no_other_due_jobs():
    """Claims in these tests see only the jobs each test makes (the table is empty between tests)."""
    assert not Job.objects.exists()


def claim(worker_id="limits-worker"):
    return store.claim(worker_id)


def finish(lease):
    assert execute(lease).status == Status.DONE


# Declarations and enqueues ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "options",
    [
        {"rate_limit": "10"},
        {"rate_limit": "10/d"},
        {"rate_limit": "0/s"},
        {"rate_limit": "100000/h"},
        {"rate_limit": 10},
        {"concurrency_limit": 0},
        {"concurrency_limit": True},
        {"max_running": -1},
        {"max_running": 1.5},
        {"concurrency_key": "server"},
    ],
)
def test_a_kind_whose_limits_are_not_limits_is_refused(options):
    with pytest.raises(ValueError):
        job("limits_refused", **options)


def test_a_key_for_a_kind_without_a_concurrency_limit_is_refused_before_anything_is_written():
    with pytest.raises(JobError) as refused:
        enqueue("limits_plain", concurrency_key="server-1")
    assert refused.value.code == "invalid_input"
    assert "concurrency_limit" in str(refused.value)
    for key in (["a"], 1.5, "x" * 256, "nul\x00"):
        with pytest.raises(JobError) as refused:
            enqueue("limits_pair", concurrency_key=key)
        assert refused.value.code == "invalid_input"
    assert not Job.objects.exists()


def test_the_key_comes_from_the_kind_or_from_the_enqueue():
    by_kind, _ = enqueue("limits_backup", subject={"server": 7})
    given, _ = enqueue("limits_backup", subject={"server": 7}, concurrency_key="rack-2")
    numbered, _ = enqueue("limits_pair", concurrency_key=42)
    unkeyed, _ = enqueue("limits_pair")
    assert [job.concurrency_key for job in (by_kind, given, numbered, unkeyed)] == [
        "server-7",
        "rack-2",
        "42",
        "",
    ]
    with pytest.raises(JobError) as refused:
        enqueue("limits_backup", subject={})  # its key function fails on the subject
    assert refused.value.code == "invalid_input"


# Held back, and started once the slot frees ----------------------------------------------------


def test_a_backup_and_a_restore_of_one_server_never_run_at_once():
    backup, _ = enqueue("limits_backup", subject={"server": 7}, priority=10)
    restore, _ = enqueue("limits_restore", subject={"server": 7}, priority=5)
    other_server, _ = enqueue("limits_restore", subject={"server": 8})

    first = claim()
    assert first.job.pk == backup.pk
    second = claim()
    assert second.job.pk == other_server.pk  # the restore of server 7 is passed over
    assert claim() is None

    restore.refresh_from_db()
    assert restore.status == Status.QUEUED and restore.wait_reason == ""  # nothing written to it
    assert restore.describe()["wait_reason"] == "Held back: 1 of 1 running with key server-7"
    assert other_server.describe()["wait_reason"] is None

    finish(first)
    assert restore.describe()["wait_reason"] is None
    third = claim()
    assert third.job.pk == restore.pk
    finish(second)
    finish(third)


def test_on_postgresql_the_finish_of_a_limited_job_wakes_the_idle_workers(db_vendor):
    """The restore held back by the backup starts as soon as the backup ends, not at the next poll:
    the backup's finish NOTIFYs. The finish of a job no limit applies to sends nothing."""
    if db_vendor != "postgresql":
        pytest.skip("LISTEN/NOTIFY is PostgreSQL's")
    listener = connection.Database.connect(**connection.get_connection_params(), autocommit=True)
    try:
        listener.execute(f"LISTEN {store.NOTIFY_CHANNEL}")
        enqueue("limits_backup", subject={"server": 7})
        enqueue("limits_restore", subject={"server": 7})
        enqueue("limits_plain")
        list(listener.notifies(timeout=0.5))  # the enqueues' own
        leases = {lease.job.kind: lease for lease in (claim(), claim())}
        assert claim() is None  # the restore is held back
        backup, unlimited = leases["limits_backup"], leases["limits_plain"]

        finish(unlimited)
        assert list(listener.notifies(timeout=0.5, stop_after=1)) == []
        finish(backup)
        notes = list(listener.notifies(timeout=10, stop_after=1))
        assert [(note.channel, note.payload) for note in notes] == [(store.NOTIFY_CHANNEL, backup.job.queue)]
    finally:
        listener.close()
    assert claim().job.kind == "limits_restore"


def test_a_key_with_a_limit_of_two_runs_two_at_once():
    jobs = [enqueue("limits_pair", concurrency_key="rack-1")[0] for _ in range(3)]
    leases = [claim(), claim()]
    assert {lease.job.pk for lease in leases} == {jobs[0].pk, jobs[1].pk}
    assert claim() is None
    assert jobs[2].describe()["wait_reason"] == "Held back: 2 of 2 running with key rack-1"
    for lease in leases:
        finish(lease)
    assert drain() == 1


def test_max_running_holds_back_the_kind_and_nothing_else():
    limited = [enqueue("limits_two_at_a_time", priority=10)[0] for _ in range(3)]
    plain, _ = enqueue("limits_plain")
    leases = {lease.job.pk: lease for lease in iter(claim, None)}
    assert set(leases) == {limited[0].pk, limited[1].pk, plain.pk}
    assert limited[2].describe()["wait_reason"] == "Held back: 2 of 2 limits_two_at_a_time jobs running"
    finish(leases[limited[0].pk])
    assert claim().job.pk == limited[2].pk


def test_under_limits_interrupted_work_is_claimed_before_older_work_not_started():
    """The claim of jobs under limits orders as the plain claim: priority, then interrupted work,
    then due time. Its worker lost, the job gives its slot back and takes it again first."""
    interrupted, _ = enqueue("limits_two_at_a_time")
    lease = claim("limits-lost-worker")
    assert lease.job.pk == interrupted.pk
    older, _ = enqueue("limits_two_at_a_time", run_at=lease.job.next_run_at - timedelta(hours=1))
    assert store.recover(worker_id="limits-lost-worker") == 1

    resumed = claim()
    assert resumed.job.pk == interrupted.pk
    assert claim().job.pk == older.pk


def test_a_queue_limit_holds_back_jobs_of_any_kind_in_that_queue(settings):
    settings.DURAJOBS = {"QUEUE_LIMITS": {LIMITED_QUEUE: 1}}
    first, _ = enqueue("limits_plain", queue=LIMITED_QUEUE, priority=10)
    second, _ = enqueue("limits_pair", queue=LIMITED_QUEUE, priority=10)
    elsewhere, _ = enqueue("limits_plain")
    leases = {lease.job.pk: lease for lease in iter(claim, None)}
    assert set(leases) == {first.pk, elsewhere.pk}
    held = leases[first.pk]
    assert second.describe()["wait_reason"] == f"Held back: 1 of 1 running in queue {LIMITED_QUEUE}"
    finish(held)
    assert claim().job.pk == second.pk


def test_a_rate_limit_counts_starts_and_a_finish_frees_nothing():
    jobs = [enqueue("limits_rated_hourly")[0] for _ in range(4)]
    assert drain() == 3
    assert Job.objects.get(pk=jobs[3].pk).status == Status.QUEUED
    assert jobs[3].describe()["wait_reason"] == (
        "Held back: limits_rated_hourly jobs started at their rate limit of 3/h"
    )


def test_a_thousand_held_back_jobs_do_not_delay_an_unrelated_due_job():
    holder, _ = enqueue("limits_backup", subject={"server": 1}, priority=100)
    lease = claim()
    assert lease.job.pk == holder.pk
    enqueue_many("limits_backup", [{"subject": {"server": 1}, "priority": 100}] * 1000)
    unrelated, _ = enqueue("limits_plain")
    keyed_elsewhere, _ = enqueue("limits_restore", subject={"server": 2})

    started = time.monotonic()
    claimed = [claim().job.pk, claim().job.pk]
    took = time.monotonic() - started
    assert set(claimed) == {unrelated.pk, keyed_elsewhere.pk}
    assert took < 5, took  # in practice milliseconds; a poll is a second
    assert claim() is None
    assert Job.objects.filter(status=Status.QUEUED).count() == 1000
    assert Job.objects.filter(status=Status.QUEUED).exclude(wait_reason="").count() == 0


def test_a_new_job_is_in_the_lane_of_the_claim_that_takes_it(settings):
    """A job of a limited kind or in a limited queue is enqueued under limits, one by one or in
    bulk; any other is not."""
    settings.DURAJOBS = {"QUEUE_LIMITS": {LIMITED_QUEUE: 1}}
    keyed = enqueue("limits_backup", subject={"server": 1})[0]
    counted = [job for job, _ in enqueue_many("limits_two_at_a_time", [{}] * 3)]
    in_limited_queue = [job for job, _ in enqueue_many("limits_plain", [{"queue": LIMITED_QUEUE}] * 3)]
    plain = enqueue("limits_plain")[0]
    lanes = dict(Job.objects.values_list("pk", "under_limits"))
    assert all(lanes[job.pk] for job in [keyed, *counted, *in_limited_queue])
    assert not lanes[plain.pk]


def test_a_job_a_lifted_limit_left_in_the_limited_lane_is_moved_and_claimed(settings):
    """A queue limit lifted (or a process of the release before enqueued the job under it): the
    claim of the jobs no limit applies to does not look in the limited lane, so the recovery pass
    moves the job to the plain lane, where it is claimed."""
    settings.DURAJOBS = {"QUEUE_LIMITS": {LIMITED_QUEUE: 1}}
    stranded = enqueue("limits_plain", queue=LIMITED_QUEUE)[0]
    assert stranded.under_limits
    elsewhere = enqueue("limits_two_at_a_time")[0]  # a limited kind: stays in its lane
    settings.DURAJOBS = {}
    assert claim() is not None  # the limited kind's job
    assert claim() is None  # the stranded one: in no claim's sight
    assert store.lift_stale_lanes() == 1
    assert store.lift_stale_lanes() == 0
    assert claim().job.pk == stranded.pk
    assert Job.objects.get(pk=elsewhere.pk).under_limits


def test_a_worker_moves_a_job_left_in_the_limited_lane_and_runs_it():
    """The recovery pass is the worker's own: it runs as the worker starts."""
    stranded = enqueue("limits_plain")[0]
    Job.objects.filter(pk=stranded.pk).update(under_limits=True)  # as a release that limited its kind
    worker = Worker(WorkerOptions(concurrency=1, poll_interval=0.05))
    thread = threading.Thread(target=worker.run, name="test-lanes")  # no signal handlers here
    thread.start()
    try:
        wait_for(lambda: Job.objects.get(pk=stranded.pk).status == Status.DONE)
    finally:
        worker.stop()
        thread.join(30)
    assert not thread.is_alive() and not worker.crashed
    assert not Job.objects.get(pk=stranded.pk).under_limits


def test_the_admin_shows_why_a_job_is_held_back(admin_client):
    enqueue("limits_backup", subject={"server": 3})
    held_back, _ = enqueue("limits_restore", subject={"server": 3})
    claim()
    listing = admin_client.get(reverse("admin:django_durajobs_job_changelist"))
    assert "Held back: 1 of 1 running with key server-3" in listing.content.decode()
    page = admin_client.get(reverse("admin:django_durajobs_job_change", args=[held_back.pk]))
    assert "Held back: 1 of 1 running with key server-3" in page.content.decode()


def test_pruning_forgets_the_rows_of_keys_no_unfinished_job_has():
    enqueue("limits_backup", subject={"server": 1})
    enqueue("limits_backup", subject={"server": 2})
    assert drain() == 2
    still_queued, _ = enqueue("limits_backup", subject={"server": 2})
    assert set(JobLimit.objects.values_list("name", flat=True)) == {"server-1", "server-2"}
    store.prune(timedelta(days=30))
    assert list(JobLimit.objects.values_list("name", flat=True)) == ["server-2"]
    assert drain() == 1


def test_without_limits_a_claim_is_the_one_statement_claim(monkeypatch):
    """A deployment with no limit at all claims as if limits did not exist."""
    monkeypatch.setattr(holding, "current_limits", lambda: None)
    monkeypatch.setattr(store.lease, "current_limits", lambda: None)
    calls = []
    monkeypatch.setattr(store.lease, "claim_under_limits", lambda *args: calls.append(args))
    enqueue("limits_plain")
    finish(claim())
    assert calls == []


def racing_claims(racers: int = 4) -> list[str]:
    """The keys of the jobs ``racers`` claims, each in a thread of its own, released at once, took."""
    from concurrent.futures import ThreadPoolExecutor

    from django.db import connections

    barrier = threading.Barrier(racers)

    def claim_in_thread(number):
        try:
            barrier.wait(timeout=10)
            lease = claim(f"racing-{number}")
            return None if lease is None else lease.job.concurrency_key
        finally:
            connections.close_all()

    with ThreadPoolExecutor(racers) as pool:
        return [key for key in pool.map(claim_in_thread, range(racers)) if key is not None]


def test_claims_racing_for_a_new_key_take_no_more_than_its_limit():
    """Workers that meet a key no claim has seen make its limit row in their claims' transactions:
    the first holds it, the others wait for it and count again, so the limit holds from the start."""
    for server in range(3):
        enqueue_many("limits_backup", [{"subject": {"server": f"race-{server}"}} for _ in range(4)])
        assert racing_claims() == [f"server-race-{server}"]
        Job.objects.all().delete()


def test_claims_racing_for_a_key_whose_row_exists_take_no_more_than_its_limit():
    """The key's row made by an earlier claim: each racing claim locks it before it counts (on
    PostgreSQL the insert that meets it locks it), so one takes a job and the others hold back."""
    enqueue("limits_backup", subject={"server": "known"})
    finish(claim())
    assert JobLimit.objects.filter(name="server-known").exists()
    for _round in range(5):
        enqueue_many("limits_backup", [{"subject": {"server": "known"}} for _ in range(4)])
        assert racing_claims() == ["server-known"]
        Job.objects.all().delete()
