"""Durability: a worker that dies never loses work and never re-runs a finished step.

Here the rules of ``recover()`` and the lease fencing, in-process, with backdated leases and a
``WorkerCrash`` raised inside a step (kinds: ``kinds_durability``). Real worker processes killed
with SIGKILL in the middle of a step are in ``tests/e2e/test_killed_workers.py``.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import override_settings
from django.utils import timezone

from django_durajobs import Job, JobStep, Status, clock, drain, enqueue, recover, revert
from django_durajobs.engine.runner import execute
from django_durajobs.errors import LeaseLost
from django_durajobs.status import Phase, StepState
from django_durajobs.store import claim, database_now
from tests.job_rows import log_lines, step_rows
from tests.testapp.kinds_durability import (
    STEP_HOOKS,
    THREE_STEPS,
    UNDO_STEPS,
    WorkerCrash,
    effect_counts,
)

DEFAULT_LEASE_SECONDS = 60


# Helpers ---------------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _no_leftover_step_hooks():
    yield
    STEP_HOOKS.clear()


# 1. recover() rules ---------------------------------------------------------------------------


def new_job(queue, **kwargs):
    """A three-step job alone in its queue, so ``claim(queues=[queue])`` takes exactly it."""
    job, _ = enqueue("durability_three_steps", queue=queue, **kwargs)
    return job


def claim_job(job, worker_id):
    lease = claim(worker_id, queues=[job.queue])
    assert lease is not None and lease.job.pk == job.pk
    return lease


def crash_in(job, step):
    """From now on, ``step`` of ``job`` stops its worker (after its effect) as a dying process would."""

    def crash():
        raise WorkerCrash(step)

    STEP_HOOKS[(job.pk, step)] = crash


def run_until_crash(job, worker_id):
    """Claim ``job`` as ``worker_id`` and run it until the crashing step; return the lease."""
    lease = claim_job(job, worker_id)
    with pytest.raises(WorkerCrash):
        execute(lease)
    job.refresh_from_db()
    assert (job.status, job.locked_by) in {(Status.RUNNING, worker_id), (Status.REVERTING, worker_id)}
    return lease


def backdate_lease(job, seconds):
    """Make the job's lease ``seconds`` old on the database clock."""
    Job.objects.filter(pk=job.pk).update(locked_at=database_now() - timedelta(seconds=seconds))


@pytest.mark.django_db
def test_recover_requeues_a_job_whose_lease_expired_and_it_resumes_after_its_last_finished_step():
    """Expired lease: queued again, due now, its try handed back, the in-flight step pending again."""
    job = new_job("durability-expired")
    crash_in(job, "two")
    run_until_crash(job, "worker-a")
    assert {step: row.state for step, row in step_rows(job.pk).items()} == {
        "one": StepState.DONE,
        "two": StepState.RUNNING,
        "three": StepState.PENDING,
    }
    backdate_lease(job, DEFAULT_LEASE_SECONDS + 5)

    assert recover() == 1

    job.refresh_from_db()
    assert job.status == Status.QUEUED
    assert job.attempt == 0
    assert job.worker_losses == 1
    assert (job.locked_by, job.lease_token, job.locked_at) == ("", "", None)
    assert job.next_run_at <= timezone.now()
    rows = step_rows(job.pk)
    assert {step: row.state for step, row in rows.items()} == {
        "one": StepState.DONE,
        "two": StepState.PENDING,
        "three": StepState.PENDING,
    }
    assert rows["one"].result == {"step": "one", "job": job.pk}
    assert "lost" in rows["two"].detail
    assert any("worker-a" in line and "lost" in line for line in log_lines(job.pk))

    del STEP_HOOKS[(job.pk, "two")]
    assert drain() == 1
    job.refresh_from_db()
    assert job.status == Status.DONE
    assert job.attempt == 1
    assert effect_counts(job.pk, THREE_STEPS) == {"one": 1, "two": 2, "three": 1}
    assert job.result == {step: {"step": step, "job": job.pk} for step in THREE_STEPS}


@pytest.mark.django_db
@pytest.mark.parametrize(
    "durajobs, age, recovered",
    [
        ({}, DEFAULT_LEASE_SECONDS - 15, False),
        ({}, DEFAULT_LEASE_SECONDS + 15, True),
        ({"LEASE_SECONDS": 10}, 20, True),
        ({"LEASE_SECONDS": 300}, 200, False),
    ],
)
def test_recover_takes_a_job_only_once_its_lease_is_older_than_lease_seconds(durajobs, age, recovered):
    """A job whose worker heartbeated within LEASE_SECONDS is left alone: its worker may be alive."""
    job = new_job("durability-lease-age")
    lease = claim_job(job, "worker-a")
    backdate_lease(job, age)
    before = Job.objects.values().get(pk=job.pk)

    with override_settings(DURAJOBS=durajobs):
        assert recover() == int(recovered)

    job.refresh_from_db()
    if recovered:
        assert (job.status, job.locked_by, job.worker_losses) == (Status.QUEUED, "", 1)
    else:
        assert Job.objects.values().get(pk=job.pk) == before
        lease.renew()  # still the worker's own


@pytest.mark.django_db
def test_recover_leaves_a_fresh_lease_alone():
    """A job whose worker heartbeated just now is not touched; that worker carries on undisturbed."""
    job = new_job("durability-fresh")
    crash_in(job, "two")
    lease = run_until_crash(job, "worker-a")
    before = Job.objects.values().get(pk=job.pk)

    assert recover() == 0

    assert Job.objects.values().get(pk=job.pk) == before
    assert step_rows(job.pk)["two"].state == StepState.RUNNING
    lease.renew()


@pytest.mark.django_db
def test_recover_with_a_worker_id_takes_that_workers_jobs_at_once():
    """A restarting worker reclaims its own jobs without waiting for their leases; others' stay."""
    own = new_job("durability-own")
    other = new_job("durability-other")
    crash_in(own, "one")
    crash_in(other, "one")
    run_until_crash(own, "worker-restarting")
    other_lease = run_until_crash(other, "worker-alive")

    assert recover(worker_id="worker-restarting") == 1

    own.refresh_from_db()
    other.refresh_from_db()
    assert (own.status, own.locked_by, own.worker_losses, own.attempt) == (Status.QUEUED, "", 1, 0)
    assert step_rows(own.pk)["one"].state == StepState.PENDING
    assert (other.status, other.locked_by, other.worker_losses) == (Status.RUNNING, "worker-alive", 0)
    assert step_rows(other.pk)["one"].state == StepState.RUNNING
    other_lease.renew()


@pytest.mark.django_db
def test_recover_returns_a_reverting_job_to_reverting_and_its_revert_resumes():
    """A revert whose worker died is reverting again (not queued); its finished revert steps are kept."""
    job = new_job("durability-revert")
    assert drain() == 1
    revert(job)
    crash_in(job, "undo_two")
    run_until_crash(job, "worker-a")
    backdate_lease(job, DEFAULT_LEASE_SECONDS + 5)

    assert recover() == 1

    job.refresh_from_db()
    assert (job.status, job.phase, job.locked_by) == (Status.REVERTING, Phase.REVERT, "")
    assert job.worker_losses == 1
    assert job.attempt == 1  # a revert has no tries to hand back
    undo = step_rows(job.pk, Phase.REVERT)
    assert {step: row.state for step, row in undo.items()} == {
        "undo_three": StepState.DONE,
        "undo_two": StepState.PENDING,
    }
    assert all(row.state == StepState.DONE for row in step_rows(job.pk).values())  # the run's checkpoints

    del STEP_HOOKS[(job.pk, "undo_two")]
    assert drain() == 1
    job.refresh_from_db()
    assert job.status == Status.REVERTED
    assert effect_counts(job.pk, UNDO_STEPS) == {"undo_three": 1, "undo_two": 2, "undo_one": 1}
    assert effect_counts(job.pk, THREE_STEPS) == {"one": 1, "two": 1, "three": 1}


@pytest.mark.django_db
@pytest.mark.parametrize(
    "durajobs, max_losses", [({}, 3), ({"MAX_WORKER_LOSSES": 1}, 1), ({"MAX_WORKER_LOSSES": 5}, 5)]
)
def test_a_job_that_loses_max_worker_losses_workers_fails_as_worker_lost(durajobs, max_losses):
    """Poison pill: re-queued after each lost worker until the MAX_WORKER_LOSSES-th, then failed."""
    job = new_job("durability-poison")
    crash_in(job, "two")
    with override_settings(DURAJOBS=durajobs):
        for loss in range(1, max_losses + 1):
            run_until_crash(job, f"worker-{loss}")
            backdate_lease(job, DEFAULT_LEASE_SECONDS + 5)
            assert recover() == 1
            job.refresh_from_db()
            assert job.worker_losses == loss
            if loss < max_losses:
                assert (job.status, job.error_code) == (Status.QUEUED, "")

    assert job.status == Status.FAILED
    assert job.error_code == "worker_lost"
    assert str(max_losses) in job.error
    assert job.ended_at is not None
    assert (job.locked_by, job.lease_token) == ("", "")
    assert job.attempt == 1  # the last try failed; the lost ones before it were handed back
    assert effect_counts(job.pk, THREE_STEPS) == {"one": 1, "two": max_losses, "three": 0}
    assert claim("worker-next", queues=[job.queue]) is None
    assert recover() == 0


@pytest.mark.django_db
def test_recover_counts_only_the_jobs_it_took_and_takes_each_once():
    """recover() returns how many jobs it re-queued (running or reverting); a second call finds none."""
    expired_run = new_job("durability-count-run")
    crash_in(expired_run, "one")
    run_until_crash(expired_run, "worker-a")
    backdate_lease(expired_run, DEFAULT_LEASE_SECONDS + 5)

    expired_revert = new_job("durability-count-revert")
    assert drain() == 1
    revert(expired_revert)
    claim_job(expired_revert, "worker-b")
    backdate_lease(expired_revert, DEFAULT_LEASE_SECONDS + 5)

    fresh = new_job("durability-count-fresh")
    claim_job(fresh, "worker-c")
    queued = new_job("durability-count-queued")
    waiting = new_job("durability-count-waiting", initial_status=Status.AWAITING_EXTERNAL)

    assert recover() == 2
    assert recover() == 0

    statuses = dict(Job.objects.values_list("pk", "status"))
    assert statuses == {
        expired_run.pk: Status.QUEUED,
        expired_revert.pk: Status.REVERTING,
        fresh.pk: Status.RUNNING,
        queued.pk: Status.QUEUED,
        waiting.pk: Status.AWAITING_EXTERNAL,
    }


# 2. Fencing: a stale worker's writes change nothing ------------------------------------------------


def take_over(job, worker_id):
    """What happens while ``job``'s worker stalls past its lease: recovered, then claimed by ``worker_id``.
    The stalled worker's monotonic clock passes the stall too."""
    backdate_lease(job, DEFAULT_LEASE_SECONDS + 5)
    clock.move(DEFAULT_LEASE_SECONDS + 5)
    assert recover() == 1
    return claim_job(job, worker_id)


@pytest.mark.django_db
def test_a_stale_lease_cannot_write_after_another_worker_took_the_job():
    """renew, log, start_step, save_step and finish of a lease that lost its job raise LeaseLost and
    write nothing."""
    job = new_job("durability-fenced")
    stale = claim_job(job, "worker-stalled")
    current = take_over(job, "worker-new")
    assert current.token != stale.token
    job_row = Job.objects.values().get(pk=job.pk)
    steps_before = list(JobStep.objects.filter(job_id=job.pk).order_by("id").values())
    logs_before = log_lines(job.pk)
    one = step_rows(job.pk)["one"]

    with pytest.raises(LeaseLost):
        stale.renew(progress=50)
    with pytest.raises(LeaseLost):
        stale.stop_requested()
    with pytest.raises(LeaseLost):
        stale.log("written by the stalled worker")
    with pytest.raises(LeaseLost):
        stale.start_step(one, create=False, state=StepState.RUNNING, started_at=timezone.now())
    with pytest.raises(LeaseLost):
        stale.save_step(one, state=StepState.DONE, result={"from": "stalled"}, ended_at=timezone.now())
    extra = JobStep(job_id=job.pk, phase=Phase.RUN, position=99, step_id="stalled_extra", title="Extra")
    with pytest.raises(LeaseLost):
        stale.start_step(extra, create=True, state=StepState.RUNNING, started_at=timezone.now())
    with pytest.raises(LeaseLost):
        stale.finish(
            {"status": Status.DONE, "result": {"from": "stalled"}, "ended_at": timezone.now()},
            steps=[one],
            log_line="Done by the stalled worker.",
        )

    assert Job.objects.values().get(pk=job.pk) == job_row
    assert list(JobStep.objects.filter(job_id=job.pk).order_by("id").values()) == steps_before
    assert log_lines(job.pk) == logs_before
    current.renew()  # the new owner's lease is intact


@pytest.mark.django_db
def test_executing_a_stale_lease_returns_none_and_leaves_the_new_owner_alone():
    """execute() of a lease that lost its job runs nothing and records no outcome."""
    job = new_job("durability-stale-execute")
    stale = claim_job(job, "worker-stalled")
    current = take_over(job, "worker-new")
    job_row = Job.objects.values().get(pk=job.pk)

    assert execute(stale).status is None

    assert Job.objects.values().get(pk=job.pk) == job_row
    assert effect_counts(job.pk, THREE_STEPS) == {"one": 0, "two": 0, "three": 0}
    assert execute(current).status == Status.DONE
    assert effect_counts(job.pk, THREE_STEPS) == {"one": 1, "two": 1, "three": 1}


@pytest.mark.django_db
def test_a_worker_that_loses_its_job_mid_step_abandons_it_without_a_checkpoint_or_outcome():
    """Stalled past its lease mid-step: its checkpoint and outcome are refused; the new owner finishes."""
    job = new_job("durability-mid-step")
    stale = claim_job(job, "worker-stalled")
    taken = {}

    def stall_past_the_lease():
        del STEP_HOOKS[(job.pk, "two")]
        taken["lease"] = take_over(job, "worker-new")

    STEP_HOOKS[(job.pk, "two")] = stall_past_the_lease

    assert execute(stale).status is None

    job.refresh_from_db()
    current = taken["lease"]
    assert (job.status, job.locked_by, job.lease_token) == (Status.RUNNING, "worker-new", current.token)
    assert job.result is None
    rows = step_rows(job.pk)
    assert (rows["one"].state, rows["two"].state, rows["three"].state) == (
        StepState.DONE,
        StepState.PENDING,
        StepState.PENDING,
    )
    assert rows["two"].result is None

    assert execute(current).status == Status.DONE
    job.refresh_from_db()
    assert effect_counts(job.pk, THREE_STEPS) == {"one": 1, "two": 2, "three": 1}
    assert job.result == {step: {"step": step, "job": job.pk} for step in THREE_STEPS}
    assert (job.worker_losses, job.attempt) == (1, 1)
