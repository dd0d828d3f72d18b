"""Scenario 3, PostgreSQL restarted as a crash (``immediate``) at random moments while jobs run
and wait for events, on a private cluster of its own (tests/proving/private_postgres.py, started
by ``scripts/prove``): nothing lost or stuck, every promise of the oracle kept, and the workers
back at work within seconds of the database.
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest
from django.db import InterfaceError, OperationalError, connection

from django_durajobs import Job, Status, enqueue_many, send_event
from tests.helpers import fail_if_exited, stop_cleanly, wait_for
from tests.proving import private_postgres
from tests.proving.oracle import judge

#: (workers, threads each, jobs, restarts, seconds between restarts), short and full.
SIZES = {True: (2, 3, 200, 3, (2.0, 4.0)), False: (4, 4, 3000, 20, (3.0, 8.0))}
LEASE = {
    "DURAJOBS_LEASE_SECONDS": "2",
    "DURAJOBS_HEARTBEAT_SECONDS": "0.5",
    "DURAJOBS_MAX_WORKER_LOSSES": "50",
}
WAITERS = 20


def reconnecting(query):
    """Run ``query``; while the database is down, wait for it and try again on a new connection."""
    deadline = time.monotonic() + 60
    while True:
        try:
            return query()
        except (OperationalError, InterfaceError):
            connection.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def unfinished() -> int:
    return reconnecting(lambda: Job.objects.exclude(status=Status.DONE).count())


def test_postgresql_restarts(child_env, ledger, runjobs, db_vendor, short, report):
    data = os.environ.get(private_postgres.DATA_ENV)
    if db_vendor != "postgresql" or not data:
        pytest.skip("restarts a private PostgreSQL cluster that scripts/prove starts (--database is ignored)")
    workers, threads, count, restarts, pause = SIZES[short]
    rng = random.Random()
    ids = [job.pk for job, _ in enqueue_many("prove_steps", [{"subject": {"n": n}} for n in range(count)])]
    events = [f"prove-restart-{n}" for n in range(WAITERS)]
    ids += [
        job.pk for job, _ in enqueue_many("prove_wait", [{"subject": {"event": name}} for name in events])
    ]
    args = ("--concurrency", str(threads), "--poll-interval", "0.2")
    fleet = [runjobs(*args, env=child_env, extra_env=LEASE) for _ in range(workers)]
    back_after = []
    outages = []
    started = time.monotonic()
    for number in range(restarts):
        time.sleep(rng.uniform(*pause))  # the chaos schedule: random moments
        fail_if_exited(fleet)
        down = time.time()
        private_postgres.restart(Path(data))
        up = time.time()
        outages.append((down, up))
        if number == 0:
            for name in events:
                reconnecting(lambda name=name: send_event(name, {"event": name}))
        back_after.append(wait_for(lambda up=up: first_start_after(ledger, up), timeout=60) - up)
    wait_for(lambda: not unfinished() or fail_if_exited(fleet), timeout=count + 120, interval=0.5)
    elapsed = time.monotonic() - started
    stop_cleanly(fleet)
    violations = judge(ledger.entries(), ids, {}, outages=outages)
    report(
        jobs=len(ids),
        kills=0,
        restarts=restarts,
        seconds=round(elapsed, 1),
        worst_back_seconds=round(max(back_after), 2),
        violations=len(violations),
    )
    assert violations == [], ledger.story(violations)


def first_start_after(ledger, moment: float) -> float | None:
    """When a worker first started a step after ``moment``; None while none did (or none is left)."""
    if not unfinished():
        return moment
    later = [entry.at for entry in ledger.entries() if entry.event == "start" and entry.at > moment]
    return min(later) if later else None
