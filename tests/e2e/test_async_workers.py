"""Async jobs on real ``runjobs`` workers: one event loop per worker process, each async job a
task on it. Durability (SIGKILL), concurrency (200 jobs, few threads), heartbeats while a
coroutine blocks the loop, cancel, timeout, graceful stop, and sync and async jobs sharing
``--concurrency``. Kinds: ``tests/testapp/kinds_async.py``."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from django_durajobs import Job, Status, cancel, enqueue, enqueue_many
from django_durajobs.status import StepState
from tests.helpers import fail_if_exited, log_of, sigkill, sigterm, stop_cleanly, wait_for
from tests.job_rows import statuses, step_rows
from tests.testapp.gates import go_file, started_markers
from tests.testapp.kinds_async import ASYNC_STEPS, effect_counts

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

FAST = ("--poll-interval", "0.1")
#: Short leases, so a killed worker's job is recovered within seconds.
SHORT_LEASES = {"DURAJOBS_LEASE_SECONDS": "2", "DURAJOBS_HEARTBEAT_SECONDS": "0.5"}


def status_of(job) -> str:
    return Job.objects.values_list("status", flat=True).get(pk=job.pk)


def threads_of(pid: int) -> int:
    """How many threads the process has now, as the kernel counts them."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise AssertionError(f"no thread count for process {pid}")


def test_an_async_job_killed_mid_step_resumes_after_its_last_finished_step(child_env, runjobs, tmp_path):
    """SIGKILL while the second of three async steps is in flight: another worker recovers the
    job once its lease has expired and finishes it; the first step is not run again, the step in
    flight runs again (at least once), the third once."""
    job, _ = enqueue("async_three_steps", subject={"dir": str(tmp_path), "block_at": "transform"})
    doomed = runjobs("--concurrency", "4", *FAST, env=child_env, extra_env=SHORT_LEASES)
    wait_for(lambda: started_markers(tmp_path, job.pk, "transform") or fail_if_exited([doomed]), timeout=60)
    sigkill(doomed)

    job.refresh_from_db()
    assert job.status == Status.RUNNING and f":{doomed.pid}:" in job.locked_by
    rows = step_rows(job.pk)
    states = [rows[step].state for step in ASYNC_STEPS]
    assert states == [StepState.DONE, StepState.RUNNING, StepState.PENDING]
    fetched = (rows["fetch"].ended_at, rows["fetch"].result)
    assert effect_counts(job.pk, ASYNC_STEPS) == {"fetch": 1, "transform": 1, "store": 0}

    go_file(tmp_path, job.pk).touch()
    rescuer = runjobs("--concurrency", "4", *FAST, env=child_env, extra_env=SHORT_LEASES)
    wait_for(lambda: status_of(job) == Status.DONE or fail_if_exited([rescuer]), timeout=60)

    job.refresh_from_db()
    assert effect_counts(job.pk, ASYNC_STEPS) == {"fetch": 1, "transform": 2, "store": 1}
    assert job.result == {"steps": [{"step": step, "job": job.pk} for step in ASYNC_STEPS]}
    assert (step_rows(job.pk)["fetch"].ended_at, step_rows(job.pk)["fetch"].result) == fetched
    assert (job.worker_losses, job.attempt) == (1, 1)
    stop_cleanly([rescuer])


def test_two_hundred_async_jobs_sleeping_a_second_each_finish_in_seconds_on_few_threads(child_env, runjobs):
    """200 jobs that each await ``asyncio.sleep(1)``, on one worker with ``--concurrency 200``: run one
    after another they would take 200 s; as tasks on one loop they take a few seconds, and the
    worker does not start a thread per job."""
    worker = runjobs("--concurrency", "200", *FAST, env=child_env)
    wait_for(lambda: "starting" in log_of(worker) or fail_if_exited([worker]), timeout=60)
    job_ids = [job.pk for job, _ in enqueue_many("async_sleeper", [{"subject": {"seconds": 1}}] * 200)]

    started = time.monotonic()
    most_threads = 0

    def all_done() -> bool:
        nonlocal most_threads
        most_threads = max(most_threads, threads_of(worker.pid))
        return statuses(job_ids)[Status.DONE] == 200

    wait_for(all_done, timeout=120, interval=0.1)
    elapsed = time.monotonic() - started

    print(f"200 async jobs of 1 s each: {elapsed:.2f} s, at most {most_threads} threads")
    assert elapsed < 20, f"200 one-second async jobs took {elapsed:.1f} s"
    assert most_threads < 30, f"the worker ran {most_threads} threads for 200 async jobs"
    ends = Job.objects.filter(pk__in=job_ids).values_list("started_at", "ended_at")
    assert all((ended - began).total_seconds() >= 1 for began, ended in ends)
    stop_cleanly([worker])


def test_a_coroutine_that_blocks_the_loop_past_its_lease_stalls_no_heartbeat(child_env, runjobs):
    """A coroutine blocks the worker's event loop for 6 s (three leases of 2 s) without awaiting,
    while another async job awaits on the same loop: both leases are renewed all the while (by
    the housekeeping thread), so neither job is taken for lost; both finish on their first try."""
    worker = runjobs("--concurrency", "4", *FAST, env=child_env, extra_env=SHORT_LEASES)
    sleeper, _ = enqueue("async_sleeper", subject={"seconds": 8})
    wait_for(lambda: status_of(sleeper) == Status.RUNNING or fail_if_exited([worker]), timeout=60)
    blocker, _ = enqueue("async_blocker", subject={"seconds": 6})
    wait_for(lambda: step_rows(blocker.pk).get("block") or fail_if_exited([worker]), timeout=60)
    blocked_at = time.monotonic()

    renewals: dict[int, set] = {sleeper.pk: set(), blocker.pk: set()}
    while time.monotonic() - blocked_at < 5:
        for pk, locked_at in Job.objects.filter(pk__in=renewals).values_list("pk", "locked_at"):
            renewals[pk].add(locked_at)
        time.sleep(0.2)

    assert step_rows(blocker.pk)["block"].state == StepState.RUNNING  # still blocking the loop
    for pk, seen in renewals.items():
        assert len(seen) >= 5, f"job {pk}'s lease was renewed {len(seen) - 1} times in 5 s"
    for job in (sleeper, blocker):
        wait_for(lambda job=job: status_of(job) == Status.DONE or fail_if_exited([worker]), timeout=60)
        job.refresh_from_db()
        assert (job.attempt, job.worker_losses) == (1, 0)
    assert "lost" not in log_of(worker)
    stop_cleanly([worker])


def test_a_cancelled_async_job_stops_at_its_next_step_boundary(child_env, runjobs, tmp_path):
    job, _ = enqueue("async_three_steps", subject={"dir": str(tmp_path), "block_at": "fetch"})
    worker = runjobs("--concurrency", "2", *FAST, env=child_env)
    wait_for(lambda: started_markers(tmp_path, job.pk, "fetch") or fail_if_exited([worker]), timeout=60)

    assert cancel(job).cancel_requested
    go_file(tmp_path, job.pk).touch()
    wait_for(lambda: status_of(job) == Status.CANCELLED or fail_if_exited([worker]), timeout=60)

    assert effect_counts(job.pk, ASYNC_STEPS) == {"fetch": 1, "transform": 0, "store": 0}
    assert step_rows(job.pk)["fetch"].state == StepState.DONE
    stop_cleanly([worker])


def test_an_async_job_past_its_timeout_is_given_up_and_its_task_cancelled(child_env, runjobs):
    """A job with a 0.5 s timeout awaits a 30 s step: its worker fails it with ``timeout`` within
    seconds and cancels its task; the loop goes on with the next job."""
    slow, _ = enqueue("async_slow_step", subject={"seconds": 30})
    worker = runjobs("--concurrency", "2", *FAST, env=child_env)
    wait_for(lambda: status_of(slow) == Status.FAILED or fail_if_exited([worker]), timeout=30)

    slow.refresh_from_db()
    assert slow.error_code == "timeout"
    assert (slow.ended_at - slow.started_at).total_seconds() < 5
    assert step_rows(slow.pk)["slow"].state == StepState.FAILED
    wait_for(lambda: "its task was cancelled" in log_of(worker), timeout=10)

    after, _ = enqueue("async_sleeper", subject={"seconds": 0})
    wait_for(lambda: status_of(after) == Status.DONE or fail_if_exited([worker]), timeout=30)
    stop_cleanly([worker])


def test_a_stopping_worker_lets_an_async_job_finish_within_its_grace_and_releases_one_past_it(
    child_env, runjobs, tmp_path
):
    """SIGTERM: the job that finishes within ``--grace`` ends done; the one held at its gate is
    released as queued, and another worker finishes it after its last finished step."""
    quick, _ = enqueue("async_sleeper", subject={"seconds": 1.5})
    held, _ = enqueue("async_three_steps", subject={"dir": str(tmp_path), "block_at": "transform"})
    worker = runjobs("--concurrency", "4", "--grace", "4", *FAST, env=child_env)
    wait_for(lambda: started_markers(tmp_path, held.pk, "transform") or fail_if_exited([worker]), timeout=60)
    wait_for(lambda: status_of(quick) == Status.RUNNING, timeout=30)

    sigterm(worker)
    assert worker.wait(timeout=30) == 0, log_of(worker)
    assert "Traceback" not in log_of(worker), log_of(worker)

    assert status_of(quick) == Status.DONE
    held.refresh_from_db()
    assert (held.status, held.locked_by) == (Status.QUEUED, "")
    assert effect_counts(held.pk, ASYNC_STEPS) == {"fetch": 1, "transform": 1, "store": 0}

    go_file(tmp_path, held.pk).touch()
    successor = runjobs("--concurrency", "4", *FAST, env=child_env)
    wait_for(lambda: status_of(held) == Status.DONE or fail_if_exited([successor]), timeout=60)
    assert effect_counts(held.pk, ASYNC_STEPS) == {"fetch": 1, "transform": 2, "store": 1}
    stop_cleanly([successor])


def test_sync_and_async_jobs_together_never_exceed_the_workers_concurrency(child_env, runjobs, tmp_path):
    """``--concurrency 3`` with two sync and two async jobs held at their gates: three run, one
    waits for a slot; let go, all four finish."""
    gates = [("async_three_steps", "fetch"), ("durability_three_steps", "one")] * 2
    jobs = [enqueue(kind, subject={"dir": str(tmp_path), "block_at": step})[0] for kind, step in gates]
    job_ids = [job.pk for job in jobs]
    worker = runjobs("--concurrency", "3", *FAST, env=child_env)

    def at_gates() -> int:
        steps = [step for _, step in gates]
        return sum(bool(started_markers(tmp_path, job.pk, at)) for job, at in zip(jobs, steps, strict=True))

    wait_for(lambda: at_gates() == 3 or fail_if_exited([worker]), timeout=60)
    time.sleep(1)  # room for a fourth to start, were it allowed to
    assert at_gates() == 3
    assert statuses(job_ids) == {Status.RUNNING: 3, Status.QUEUED: 1}

    for job in jobs:
        go_file(tmp_path, job.pk).touch()
    wait_for(lambda: statuses(job_ids) == {Status.DONE: 4} or fail_if_exited([worker]), timeout=60)
    stop_cleanly([worker])
