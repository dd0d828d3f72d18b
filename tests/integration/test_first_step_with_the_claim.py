"""On PostgreSQL the claim of a job's first run also marks its first declared step running
(``store/checkpoints.py``): a 1-step job costs a claim, a checkpoint and a finish, as a raw
durable loop does.

What must hold everywhere else holds here: the step shows running from the claim (``describe()``
and the admin read the row), a cancel or pause asked for before the claim is seen before the step
starts, a later try or a rerun starts its steps itself, and a run that goes another way than its
declaration, or ends before its first step, leaves that step pending. On the other databases the
run starts the step, with the same rows as the outcome.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from django_durajobs import Job, JobStep, clock, enqueue, store
from django_durajobs.engine.runner import execute
from django_durajobs.registry import job
from django_durajobs.status import Status, StepState
from django_durajobs.store import claiming

pytestmark = pytest.mark.django_db(transaction=True)

STEPS = ["fetch", "store"]


@job("first_step_in_order", steps=STEPS)
def in_order(job, ctx):
    for step_id in STEPS:
        ctx.step(step_id, lambda: None)


@job("first_step_skipped", steps=STEPS)
def skipping_the_first(job, ctx):
    ctx.step("store", lambda: None)


@job("first_step_never_reached", steps=STEPS)
def failing_at_once(job, ctx):
    raise ValueError("refused before any step")


@pytest.fixture
def queue(request):
    """A queue of this test's own, so that claims see only its jobs."""
    return f"first-{request.node.name}"[:100]


def claim_in(queue):
    lease = store.claim("first-step-worker", queues=[queue])
    assert lease is not None
    return lease


def states(job_id):
    return dict(JobStep.objects.filter(job_id=job_id).values_list("step_id", "state"))


def test_the_claim_of_a_first_run_shows_its_first_step_running(db_vendor, queue):
    made, _ = enqueue("first_step_in_order", queue=queue)
    lease = claim_in(queue)

    claimed = Job.objects.get(pk=made.pk)
    if db_vendor == "postgresql":
        assert states(made.pk) == {"fetch": StepState.RUNNING, "store": StepState.PENDING}
        fetch = JobStep.objects.get(job_id=made.pk, step_id="fetch")
        assert fetch.started_at == claimed.started_at
        assert claimed.describe()["current_step"]["id"] == "fetch"
    else:
        assert states(made.pk) == {"fetch": StepState.PENDING, "store": StepState.PENDING}

    assert execute(lease).status == Status.DONE
    assert states(made.pk) == {"fetch": StepState.DONE, "store": StepState.DONE}
    fetch = JobStep.objects.get(job_id=made.pk, step_id="fetch")
    assert claimed.started_at <= fetch.started_at <= fetch.ended_at


def test_the_finish_that_claims_the_next_job_starts_its_first_step_too(db_vendor, queue, monkeypatch):
    monkeypatch.setattr(claiming, "_next_revert_lookup", float("inf"))  # a finish may claim
    first, _ = enqueue("first_step_in_order", queue=queue)
    second, _ = enqueue("first_step_in_order", queue=queue)

    ran = execute(claim_in(queue), then_claim=lambda: True)

    assert ran.next_lease is not None and ran.next_lease.job.pk == second.pk
    expected = StepState.RUNNING if db_vendor == "postgresql" else StepState.PENDING
    assert states(second.pk)["fetch"] == expected
    assert execute(ran.next_lease).status == Status.DONE
    assert set(states(second.pk).values()) == {StepState.DONE}


@pytest.mark.parametrize("request_field", ["cancel_requested", "pause_requested"])
def test_a_job_asked_to_stop_before_its_claim_starts_no_step(queue, request_field):
    made, _ = enqueue("first_step_in_order", queue=queue)
    Job.objects.filter(pk=made.pk).update(**{request_field: True})  # asked as the worker claims it

    lease = claim_in(queue)
    assert states(made.pk) == {"fetch": StepState.PENDING, "store": StepState.PENDING}

    expected = Status.CANCELLED if request_field == "cancel_requested" else Status.PAUSED
    assert execute(lease).status == expected
    assert StepState.RUNNING not in states(made.pk).values()


def test_a_cancel_asked_after_the_claim_is_seen_before_the_first_step_of_a_run_that_starts_late(queue):
    """What the claim read counts for 50 ms on the run's clock, from the claim: a run that starts
    a second later reads the requests again before its first step."""
    made, _ = enqueue("first_step_in_order", queue=queue)
    lease = claim_in(queue)
    Job.objects.get(pk=made.pk).cancel()  # a running job: asked to stop at its next step boundary
    clock.move(1.0)

    assert execute(lease).status == Status.CANCELLED
    assert states(made.pk) == {"fetch": StepState.PENDING, "store": StepState.PENDING}


def test_a_later_try_starts_its_first_step_itself(queue):
    made, _ = enqueue("first_step_in_order", queue=queue)
    earlier = Job.objects.get(pk=made.pk).created_at - timedelta(seconds=1)
    Job.objects.filter(pk=made.pk).update(started_at=earlier)  # as a try before this one did

    lease = claim_in(queue)
    assert states(made.pk)["fetch"] == StepState.PENDING

    assert execute(lease).status == Status.DONE
    assert set(states(made.pk).values()) == {StepState.DONE}


def test_a_rerun_starts_its_first_step_itself(queue):
    made, _ = enqueue("first_step_in_order", queue=queue)
    assert execute(claim_in(queue)).status == Status.DONE
    rerun = Job.objects.get(pk=made.pk).rerun(from_step="fetch")
    Job.objects.filter(pk=rerun.pk).update(queue=queue)

    lease = claim_in(queue)
    assert lease.job.pk == rerun.pk
    assert states(rerun.pk)["fetch"] == StepState.PENDING

    assert execute(lease).status == Status.DONE
    assert set(states(rerun.pk).values()) == {StepState.DONE}


def test_a_run_that_opens_another_step_first_leaves_the_first_pending(queue):
    made, _ = enqueue("first_step_skipped", queue=queue)

    assert execute(claim_in(queue)).status == Status.DONE

    assert states(made.pk) == {"fetch": StepState.PENDING, "store": StepState.DONE}
    assert JobStep.objects.get(job_id=made.pk, step_id="fetch").started_at is None


def test_a_run_that_ends_before_its_first_step_leaves_it_pending(queue):
    made, _ = enqueue("first_step_never_reached", queue=queue)

    ran = execute(claim_in(queue))

    assert ran.status == Status.FAILED
    assert states(made.pk) == {"fetch": StepState.PENDING, "store": StepState.PENDING}
    assert JobStep.objects.get(job_id=made.pk, step_id="fetch").started_at is None
