"""Durability with real worker processes: a worker killed with SIGKILL in the middle of a step.

A worker (``tests/child_run.py``) is killed while a step is in flight; a fresh process recovers
the job once its lease expired and finishes it, having lost no work and re-run no finished step
(kinds: ``kinds_durability``). The rules of ``recover()`` are in
``tests/integration/test_durability.py``.
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.test import override_settings

from django_durajobs import Job, Status, describe, enqueue
from django_durajobs.status import StepState
from django_durajobs.store import database_now
from tests.helpers import log_of, sigkill, wait_for
from tests.job_rows import log_lines, step_rows
from tests.testapp.gates import go_file, started_markers
from tests.testapp.kinds_durability import (
    ATOMIC_STEPS,
    FIVE_STEPS,
    effect_counts,
)

CHILD_LEASE_SECONDS = 1
#: What ``tests/child_run.py`` prints: how many jobs it recovered and ran.
CHILD_RUN_COUNTS = re.compile(r"^(?:recovered|ran)=\d+$", re.MULTILINE)


def wait_until_in_flight(proc, directory, job_id, step):
    """Wait for the worker's *started* marker of ``step``; fail early, with its output, if it exited."""
    wait_for(
        lambda: started_markers(directory, job_id, step) or proc.poll() is not None,
        timeout=30,
        message=f"step {step} to start",
    )
    assert proc.poll() is None, f"the worker exited before step {step} started: {log_of(proc)}"


def wait_until_lease_expired(job_id, lease_seconds):
    """Poll the database clock (the one ``recover()`` judges by) until the job's lease has expired."""

    def expired():
        locked_at = Job.objects.values_list("locked_at", flat=True).get(pk=job_id)
        return database_now() - locked_at > timedelta(seconds=lease_seconds)

    wait_for(expired, timeout=30, interval=0.1, message="the dead worker's lease to expire")


def recover_in_fresh_process(spawn, env, directory, job_id):
    """Let a blocking step carry on this time, and run ``recover()`` + ``drain()`` in a new worker process."""
    go_file(directory, job_id).touch()
    proc = spawn("tests.child_run", "recover", env=env)
    proc.wait(timeout=60)
    assert proc.returncode == 0, log_of(proc)
    return CHILD_RUN_COUNTS.findall(log_of(proc))


def kill_while_in_flight(spawn, env, directory, job, step):
    """Start a worker, wait until ``step`` is in flight, SIGKILL it; return its pid."""
    proc = spawn("tests.child_run", "drain", env=env)
    wait_until_in_flight(proc, directory, job.pk, step)
    sigkill(proc)
    return proc.pid


def assert_held_by_dead_worker(job, pid):
    job.refresh_from_db()
    assert job.status == Status.RUNNING
    assert job.locked_by.startswith("drain@") and f":{pid}:" in job.locked_by
    assert job.lease_token
    return job.locked_by


def assert_recovered_from(job, dead_worker):
    job.refresh_from_db()
    assert job.worker_losses == 1
    assert job.attempt == 1  # the lost worker's try was handed back; only the finishing try counts
    assert (job.locked_by, job.lease_token, job.locked_at) == ("", "", None)
    lost_lines = [line for line in log_lines(job.pk) if dead_worker in line]
    assert len(lost_lines) == 1 and "lost" in lost_lines[0]


@pytest.mark.slow
@pytest.mark.parametrize("in_flight", ["first", "middle", "last"])
def test_a_killed_worker_loses_no_work_and_repeats_no_finished_step(in_flight, child_env, spawn, tmp_path):
    """SIGKILL mid-step: a fresh process resumes after the last finished step and finishes the job."""
    env = {**child_env, "DURAJOBS_LEASE_SECONDS": str(CHILD_LEASE_SECONDS)}
    job, _ = enqueue("durability_five_steps", subject={"dir": str(tmp_path), "block_at": in_flight})
    before = FIVE_STEPS[: FIVE_STEPS.index(in_flight)]
    after = FIVE_STEPS[FIVE_STEPS.index(in_flight) + 1 :]

    pid = kill_while_in_flight(spawn, env, tmp_path, job, in_flight)

    dead_worker = assert_held_by_dead_worker(job, pid)
    rows = step_rows(job.pk)
    assert {step: rows[step].state for step in FIVE_STEPS} == {
        **{step: StepState.DONE for step in before},
        in_flight: StepState.RUNNING,
        **{step: StepState.PENDING for step in after},
    }
    checkpoints = {step: (rows[step].ended_at, rows[step].result) for step in before}
    # Not atomic: the in-flight step's effect was committed before the kill.
    assert effect_counts(job.pk, FIVE_STEPS) == {
        **dict.fromkeys(before, 1),
        in_flight: 1,
        **dict.fromkeys(after, 0),
    }

    wait_until_lease_expired(job.pk, CHILD_LEASE_SECONDS)
    with override_settings(DURAJOBS={"LEASE_SECONDS": CHILD_LEASE_SECONDS}):
        assert describe(job.pk)["stale"] is True

    assert recover_in_fresh_process(spawn, env, tmp_path, job.pk) == ["recovered=1", "ran=1"]

    # Finished steps ran exactly once; the step in flight ran again (at-least-once for that one step).
    assert effect_counts(job.pk, FIVE_STEPS) == {
        **dict.fromkeys(before, 1),
        in_flight: 2,
        **dict.fromkeys(after, 1),
    }
    assert len(started_markers(tmp_path, job.pk, in_flight)) == 2
    rows = step_rows(job.pk)
    # The checkpoints of the finished steps were never rewritten.
    assert {step: (rows[step].ended_at, rows[step].result) for step in before} == checkpoints
    summary = describe(job.pk)
    expected_results = [{"step": step, "job": job.pk} for step in FIVE_STEPS]
    assert summary["status"] == Status.DONE
    assert summary["result"] == {"steps": expected_results}
    assert [step["id"] for step in summary["completed_steps"]] == list(FIVE_STEPS)
    assert [step["result"] for step in summary["steps"]] == expected_results
    assert_recovered_from(job, dead_worker)


@pytest.mark.slow
def test_an_atomic_step_killed_inside_leaves_nothing_and_then_happens_exactly_once(
    child_env, spawn, tmp_path
):
    """Killed after an atomic step's write, before its checkpoint: neither survives; the rerun writes once."""
    env = {**child_env, "DURAJOBS_LEASE_SECONDS": str(CHILD_LEASE_SECONDS)}
    job, _ = enqueue("durability_atomic_step", subject={"dir": str(tmp_path), "block_at": "write"})

    pid = kill_while_in_flight(spawn, env, tmp_path, job, "write")

    dead_worker = assert_held_by_dead_worker(job, pid)
    # The kill rolled back the step's transaction: its write and its checkpoint are both gone.
    assert effect_counts(job.pk, ATOMIC_STEPS) == {"prepare": 1, "write": 0, "publish": 0}
    write = step_rows(job.pk)["write"]
    assert write.state != StepState.DONE
    assert write.result is None and write.ended_at is None

    wait_until_lease_expired(job.pk, CHILD_LEASE_SECONDS)
    assert recover_in_fresh_process(spawn, env, tmp_path, job.pk) == ["recovered=1", "ran=1"]

    assert effect_counts(job.pk, ATOMIC_STEPS) == {"prepare": 1, "write": 1, "publish": 1}
    assert len(started_markers(tmp_path, job.pk, "write")) == 2  # it did run twice
    summary = describe(job.pk)
    assert summary["status"] == Status.DONE
    assert [(step["id"], step["state"]) for step in summary["steps"]] == [
        (step, StepState.DONE) for step in ATOMIC_STEPS
    ]
    assert summary["result"] == {"steps": [{"step": step, "job": job.pk} for step in ATOMIC_STEPS]}
    assert_recovered_from(job, dead_worker)
