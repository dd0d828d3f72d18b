"""Scenario 7, stalls: a worker frozen (SIGSTOP) in the middle of a step, past its lease, then
continued. A live worker recovers the job and finishes it; the frozen one, woken, must change
nothing (its late checkpoint refused, no further step started) and go on working.
"""

from __future__ import annotations

import signal
import time

from django_durajobs import Job, Status, enqueue
from tests.helpers import fail_if_exited, stop_cleanly, wait_for
from tests.proving import crash_points
from tests.proving.oracle import judge, pid_of

LEASE = {"DURAJOBS_LEASE_SECONDS": "2", "DURAJOBS_HEARTBEAT_SECONDS": "0.5"}
#: How many jobs are frozen in turn, short and full.
SIZES = {True: 2, False: 10}


def is_stopped(pid: int) -> bool:
    """The process is stopped by a signal (state ``T`` in /proc)."""
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0] == "T"


def test_stalls(child_env, ledger, runjobs, short, report):
    stalls = {}
    ids = []
    for _ in range(SIZES[short]):
        job, _ = enqueue("prove_steps")
        ids.append(job.pk)
        pid, stopped_at = stall_one(job.pk, child_env, ledger, runjobs)
        stalls[pid] = stopped_at
    violations = judge(ledger.entries(), ids, stalls)
    losses = sum(Job.objects.filter(pk__in=ids).values_list("worker_losses", flat=True))
    report(
        jobs=len(ids),
        kills=0,
        restarts=0,
        stalls=len(stalls),
        worker_losses=losses,
        violations=len(violations),
    )
    assert violations == [], ledger.story(violations)
    assert losses == len(ids)


def stall_one(job_id: int, child_env, ledger, runjobs) -> tuple[int, float]:
    """Freeze a worker inside the job's first step, let a fresh worker finish the job, wake the
    frozen one and stop both; the frozen worker's pid and when it froze."""
    args = ("--poll-interval", "0.2")
    frozen = runjobs(*args, env=child_env, extra_env={**LEASE, crash_points.STALL_ENV: crash_points.IN_STEP})
    wait_for(lambda: is_stopped(frozen.pid) or fail_if_exited([frozen]), timeout=60, message="the stall")
    stopped_at = time.time()
    fresh = runjobs(*args, env=child_env, extra_env=LEASE)
    wait_for(
        lambda: Job.objects.get(pk=job_id).status == Status.DONE or fail_if_exited([fresh]),
        timeout=60,
        message="a live worker to finish the stalled job",
    )
    frozen.send_signal(signal.SIGCONT)
    wait_for(lambda: left_its_run(ledger, frozen.pid) or fail_if_exited([frozen]), timeout=60)
    stop_cleanly([fresh, frozen])  # the woken worker lives on and stops as any other
    return frozen.pid, stopped_at


def left_its_run(ledger, pid: int) -> bool:
    """The woken worker's job function returned or raised (its ``leave`` entry is written)."""
    return any(entry.event == "leave" and pid_of(entry.worker) == pid for entry in ledger.entries())
