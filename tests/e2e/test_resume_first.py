"""Interrupted work resumes first, with real ``runjobs`` processes and a backlog of jobs not started.

- A worker SIGKILLed in a job's third step: the job runs again within a lease (plus the recovery
  check and one claim) of the kill, long before the backlog drains, and re-runs no finished step.
- A worker stopped gracefully: the jobs it releases are the next ones its peer claims.

The order itself, for every way a job is handed back: ``tests/integration/test_claim_order.py``.
Kinds: ``kinds_durability`` (the interrupted job, held at a gate), ``kinds_resume`` (the backlog).
"""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest
from django.utils import timezone

from django_durajobs import Job, Status, enqueue, enqueue_many
from tests.helpers import fail_if_exited, log_of, sigkill, sigterm, stop_cleanly, wait_for
from tests.testapp.gates import go_file, marker_pids
from tests.testapp.kinds_durability import FIVE_STEPS, effect_counts, effect_name
from tests.testapp.models import SideEffect

LEASE_SECONDS = 2
SHORT_LEASES = {"DURAJOBS_LEASE_SECONDS": str(LEASE_SECONDS), "DURAJOBS_HEARTBEAT_SECONDS": "0.5"}
POLLING = ("--poll-interval", "0.2")
#: How often each step of an interrupted job ran: the one in flight twice, the others once.
THIRD_STEP_RUN_AGAIN = {"first": 1, "second": 1, "middle": 2, "fourth": 1, "last": 1}


def backlog_left() -> int:
    return Job.objects.filter(kind="resume_backlog", status=Status.QUEUED).count()


def enqueue_backlog(count: int, workers) -> None:
    """``count`` jobs due since an hour ago (before the jobs the test interrupts were due, as after a
    catch-up of scheduled work), and wait until a worker is busy with them."""
    enqueue_many("resume_backlog", [{"run_at": timezone.now() - timedelta(hours=1)}] * count)
    backlog_effects = SideEffect.objects.filter(name__startswith="backlog:")
    wait_for(
        lambda: backlog_effects.count() >= 5 or fail_if_exited(workers),
        message="a worker to be busy with the backlog",
    )


def first_rerun(effects: list[str], names: set[str]) -> int:
    """Where the first of ``names`` is written for the second time."""
    seen: Counter[str] = Counter()
    for index, name in enumerate(effects):
        seen[name] += 1
        if name in names and seen[name] == 2:
            return index
    raise AssertionError(f"none of {sorted(names)} ran twice")


def held_at_the_gate(job, step, directory, workers) -> list[int]:
    """The pids of the workers that arrived at ``step``'s gate of ``job``."""
    return wait_for(
        lambda: marker_pids(directory, job.pk, step) or fail_if_exited(workers),
        timeout=60,
        message=f"job {job.pk} to reach its {step} step",
    )


@pytest.mark.slow
def test_a_job_whose_worker_was_killed_runs_again_within_a_lease_of_the_kill_whatever_the_backlog(
    child_env, runjobs, tmp_path
):
    """Two workers; one runs the job, the other works through 2,000 jobs due before it. The first is
    SIGKILLed in the job's third step: the other takes the job back within LEASE_SECONDS + 2 s of the
    kill, while most of the backlog still waits, and the job finishes with its first two steps run
    once."""
    workers = [runjobs(*POLLING, env=child_env, extra_env=SHORT_LEASES) for _ in range(2)]
    interrupted, _ = enqueue("durability_five_steps", subject={"dir": str(tmp_path), "block_at": "middle"})
    [holder] = held_at_the_gate(interrupted, "middle", tmp_path, workers)
    [victim] = [proc for proc in workers if proc.pid == holder]
    [survivor] = [proc for proc in workers if proc is not victim]
    enqueue_backlog(2000, [survivor])

    killed_at = timezone.now()
    sigkill(victim)
    go_file(tmp_path, interrupted.pk).touch()  # its next run goes through the third step at once
    middle = effect_name(interrupted.pk, "middle")
    wait_for(
        lambda: SideEffect.objects.filter(name=middle).count() == 2 or fail_if_exited([survivor]),
        timeout=60,
        message="the interrupted job to run its third step again",
    )
    waiting_then = backlog_left()
    ran_again_at = SideEffect.objects.filter(name=middle).latest("id").created_at
    wait_for(
        lambda: Job.objects.get(pk=interrupted.pk).status == Status.DONE or fail_if_exited([survivor]),
        timeout=60,
        message="the interrupted job to finish",
    )
    stop_cleanly([survivor])

    after_the_kill = (ran_again_at - killed_at).total_seconds()
    print(f"\nran again {after_the_kill:.2f} s after the kill, with {waiting_then} of 2000 jobs still queued")
    assert after_the_kill < LEASE_SECONDS + 2, after_the_kill
    assert waiting_then > 1000, waiting_then  # it did not wait for the backlog
    job = Job.objects.get(pk=interrupted.pk)
    assert (job.attempt, job.worker_losses, job.interrupted) == (1, 1, False)
    assert effect_counts(job.pk, FIVE_STEPS) == THIRD_STEP_RUN_AGAIN


@pytest.mark.slow
def test_the_jobs_a_stopping_worker_releases_are_the_next_its_peer_claims(child_env, runjobs, tmp_path):
    """One worker holds two jobs in their third step, another works through a backlog due before
    them. The first stops gracefully (SIGTERM, a short --grace) and releases both: the other worker
    claims them next, one after the other, before any more of the backlog, and re-runs no finished
    step."""
    subject = {"dir": str(tmp_path), "block_at": "middle"}
    released = [enqueue("durability_five_steps", subject=subject)[0] for _ in range(2)]
    stopping = runjobs("--concurrency", "2", "--grace", "0.5", *POLLING, env=child_env)
    for job in released:
        assert held_at_the_gate(job, "middle", tmp_path, [stopping]) == [stopping.pid]
    peer = runjobs(*POLLING, env=child_env)
    enqueue_backlog(1000, [peer])

    sigterm(stopping)
    assert stopping.wait(timeout=60) == 0, log_of(stopping)
    exited_at = timezone.now()  # both releases have committed
    assert log_of(stopping).count("released for another worker") == 2, log_of(stopping)

    # The peer's next claim is a released job, whose third step holds it at the gate: it takes no
    # more of the backlog meanwhile.
    def arrivals():
        return sum(len(marker_pids(tmp_path, job.pk, "middle")) for job in released)

    wait_for(lambda: arrivals() == 3 or fail_if_exited([peer]), message="the peer to take a released job")
    backlog_claimed_since = Job.objects.filter(kind="resume_backlog", started_at__gt=exited_at).count()
    for job in released:
        go_file(tmp_path, job.pk).touch()
    wait_for(
        lambda: (
            Job.objects.filter(pk__in=[job.pk for job in released], status=Status.DONE).count() == 2
            or fail_if_exited([peer])
        ),
        timeout=60,
        message="both released jobs to finish",
    )
    waiting_then = backlog_left()
    stop_cleanly([peer])

    assert backlog_claimed_since == 0, backlog_claimed_since
    # Then the other released job, straight after the first: nothing of the backlog in between.
    effects = list(SideEffect.objects.order_by("id").values_list("name", flat=True))
    resumed = [effect_name(job.pk, step) for job in released for step in ("middle", "fourth", "last")]
    start = first_rerun(effects, {effect_name(job.pk, "middle") for job in released})
    assert sorted(effects[start : start + len(resumed)]) == sorted(resumed), effects[start - 2 : start + 8]
    assert waiting_then > 500, waiting_then
    for job in released:
        job.refresh_from_db()
        assert (job.attempt, job.worker_losses, job.interrupted) == (1, 0, False)
        assert effect_counts(job.pk, FIVE_STEPS) == THIRD_STEP_RUN_AGAIN
