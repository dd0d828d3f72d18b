"""Scenario 1, SIGKILL chaos: many jobs of five steps (sync, async, some under a concurrency
limit) on a fleet of ``runjobs`` processes with several threads each; a random worker is
SIGKILLed every few seconds and replaced. The oracle (tests/proving/oracle.py) judges the run.
"""

from __future__ import annotations

import os
import random
import signal
import time

from django_durajobs import Job, Status, enqueue_many
from tests.helpers import fail_if_exited, stop_cleanly, wait_for
from tests.proving.oracle import judge, pid_of
from tests.testapp.kinds_proving import LIMIT, STEPS

#: (processes, threads each, jobs, seconds of chaos, seconds between kills), short and full.
SIZES = {
    ("sqlite", True): (2, 2, 150, 15, (1.5, 3.0)),
    ("sqlite", False): (3, 2, 2000, 300, (2.0, 5.0)),
    ("postgresql", True): (3, 3, 300, 20, (1.5, 3.0)),
    ("postgresql", False): (4, 4, 10000, 600, (2.0, 5.0)),
    ("mysql", True): (3, 3, 300, 20, (1.5, 3.0)),
    ("mysql", False): (4, 4, 10000, 600, (2.0, 5.0)),
}
LEASE = {
    "DURAJOBS_LEASE_SECONDS": "2",
    "DURAJOBS_HEARTBEAT_SECONDS": "0.5",
    "DURAJOBS_MAX_WORKER_LOSSES": "50",
}
ASYNC_SHARE = 5  # one job in five is async
KEYS = 4  # jobs with a concurrency key share these keys


def enqueue_jobs(count: int) -> list[int]:
    sync = [{"subject": {"key": f"k{n % KEYS}"} if n % 3 == 0 else {"n": n}} for n in range(count)]
    ids = [job.pk for job, _ in enqueue_many("prove_steps", sync[: count - count // ASYNC_SHARE])]
    ids += [job.pk for job, _ in enqueue_many("prove_async", [{} for _ in range(count // ASYNC_SHARE)])]
    return ids


def busy(fleet):
    holders = Job.objects.filter(status=Status.RUNNING).values_list("locked_by", flat=True)
    pids = {pid_of(worker) for worker in holders if worker}
    return [proc for proc in fleet if proc.pid in pids and proc.poll() is None]


def recovery_seconds(ledger, kills: dict[int, float]) -> float:
    """The longest time from a kill to the next run of a job the killed worker was running."""
    worst = 0.0
    enters: dict[int, list[float]] = {}
    for entry in ledger:
        if entry.event == "enter":
            enters.setdefault(entry.job, []).append(entry.at)
    open_runs: dict[tuple[int, str], float] = {}
    for entry in ledger:
        if entry.event == "enter":
            open_runs[entry.job, entry.worker] = entry.at
        elif entry.event == "leave":
            open_runs.pop((entry.job, entry.worker), None)
    for job_id, worker in open_runs:
        killed_at = kills.get(pid_of(worker))
        later = [at for at in enters[job_id] if killed_at and at > killed_at]
        if later:
            worst = max(worst, min(later) - killed_at)
    return worst


def test_sigkill_chaos(child_env, ledger, runjobs, db_vendor, short, report):
    processes, threads, count, seconds, pause = SIZES[db_vendor, short]
    count = int(os.environ.get("DURAJOBS_PROVE_JOBS", count))  # scripts/prove --jobs
    rng = random.Random()
    ids = enqueue_jobs(count)
    args = ("--concurrency", str(threads), "--poll-interval", "0.2")
    fleet = [runjobs(*args, env=child_env, extra_env=LEASE) for _ in range(processes)]
    kills: dict[int, float] = {}
    started = time.monotonic()
    while time.monotonic() - started < seconds and Job.objects.exclude(status=Status.DONE).exists():
        time.sleep(rng.uniform(*pause))  # the chaos schedule: random moments
        fail_if_exited(fleet)
        victims = busy(fleet)
        if not victims:
            continue
        victim = rng.choice(victims)
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=10)
        kills[victim.pid] = time.time()
        fleet[fleet.index(victim)] = runjobs(*args, env=child_env, extra_env=LEASE)
    wait_for(
        lambda: not Job.objects.exclude(status=Status.DONE).exists() or fail_if_exited(fleet),
        timeout=count / 2 + 60,
        interval=0.5,
        message="every job to end",
    )
    elapsed = time.monotonic() - started
    stop_cleanly(fleet)
    entries = ledger.entries()
    violations = judge(entries, ids, kills, limit=LIMIT)
    report(
        jobs=len(ids),
        steps=len(ids) * len(STEPS),
        kills=len(kills),
        restarts=0,
        seconds=round(elapsed, 1),
        starts=sum(entry.event == "start" for entry in entries),
        worst_recovery_seconds=round(recovery_seconds(entries, kills), 2),
        violations=len(violations),
    )
    assert violations == [], ledger.story(violations)
