"""Events sent by many processes while many worker processes start waiting for them.

100 jobs wait for 100 names while four sender processes send those names at a varying pace, as
the ``runjobs`` workers reach the waits: every job resumes with its payload (no lost wake-up, with
the workers' periodic sweep for lost wake-ups out of reach), and none resumes twice. On MariaDB
the workers and senders run at read committed and at its default, repeatable read. Kinds:
``tests/testapp/kinds_events.py``; the rules in one process: ``tests/integration/test_events.py``.
"""

from __future__ import annotations

import pytest

from django_durajobs import Job, JobLog, Status, enqueue_many
from tests.helpers import fail_if_exited, log_of, stop_cleanly, wait_for
from tests.testapp.kinds_events import recorded
from tests.testapp.models import Ledger

#: Heartbeats, and so the sweep for lost wake-ups, far apart: only the two sides of the race wake.
NO_SWEEP = {"DURAJOBS_HEARTBEAT_SECONDS": "3600", "DURAJOBS_LEASE_SECONDS": "7200"}
WORKER_PROCESSES = {"postgresql": 4, "mysql": 4, "sqlite": 2}
JOBS = 100
SENDERS = 4

ISOLATION_LEVELS = {"mysql": ("read committed", "repeatable read")}


@pytest.mark.slow
@pytest.mark.parametrize("isolation", ["read committed", "repeatable read"])
def test_a_hundred_waits_and_sends_racing_across_processes_each_wake_exactly_once(
    child_env, db_vendor, runjobs, spawn, isolation, tmp_path
):
    if isolation not in ISOLATION_LEVELS.get(db_vendor, ("read committed",)):
        pytest.skip(f"{db_vendor} has no isolation level to choose")
    env = {**NO_SWEEP, "DURAJOBS_TEST_MYSQL_ISOLATION": isolation}
    fleet = [
        runjobs("--concurrency", "2", "--poll-interval", "0.1", env=child_env, extra_env=env)
        for _ in range(WORKER_PROCESSES[db_vendor])
    ]
    go = tmp_path / "go"
    share = JOBS // SENDERS
    senders = [
        spawn(
            "tests.send_events", "race", str(first), str(first + share), str(go), env=child_env, extra_env=env
        )
        for first in range(0, JOBS, share)
    ]
    everyone = [*fleet, *senders]

    def all_started():
        fail_if_exited(everyone)
        return all("starting" in log_of(proc) for proc in fleet) and all(
            "ready" in log_of(proc) for proc in senders
        )

    # Several Django processes start at once: on a loaded two-core machine that took over 30 s.
    wait_for(all_started, timeout=120, message="the workers and the senders to start")
    # The jobs become due together as the senders start: the workers reach the waits while the
    # names are being sent.
    specs = [{"subject": {"name": f"race:{number}"}} for number in range(JOBS)]
    jobs = [job for job, _ in enqueue_many("event_racer", specs)]
    go.touch()
    ids = [job.pk for job in jobs]

    def all_done():
        fail_if_exited(fleet)
        assert not Job.objects.filter(pk__in=ids, status=Status.FAILED).exists(), log_of(fleet[0])
        return Job.objects.filter(pk__in=ids, status=Status.DONE).count() == JOBS

    wait_for(all_done, timeout=120, interval=0.2, message=f"{JOBS} jobs to be done")
    for sender in senders:
        assert sender.wait(timeout=30) == 0, log_of(sender)
    assert sum(int(log_of(sender).split("sent=")[1]) for sender in senders) == JOBS

    by_sender = by_itself = 0
    for number, job in enumerate(jobs):
        job = Job.objects.get(pk=job.pk)
        assert job.result == {"payload": {"i": number}}, number
        wakes = JobLog.objects.filter(job_id=job.pk, line__startswith=f"Event race:{number} was sent")
        lines = list(wakes.values_list("line", flat=True))
        runs = recorded(job.pk, "run")
        assert (runs, len(lines)) in ((1, 0), (2, 1)), (number, runs, lines)
        by_itself += sum("as the job began to wait" in line for line in lines)
        by_sender += sum("as the job began to wait" not in line for line in lines)
    assert Ledger.objects.filter(job_id__in=ids).count() == JOBS
    stop_cleanly(fleet)
    print(
        f"{db_vendor} {isolation}: {JOBS - by_sender - by_itself} found their event sent, "
        f"{by_sender} were woken by the sender, {by_itself} woke themselves as they began to wait"
    )
