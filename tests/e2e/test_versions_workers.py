"""A rolling deploy: two ``runjobs`` processes with two versions of a kind share one database.

Jobs started under version 1 wait for an event while the deploy replaces the version 1 worker by
a version 2 one; jobs started since run under version 2. Once the events are sent, each job's
second step runs on a worker of the version it started with: the version 2 worker hands the
version 1 jobs on (``on_version_change="wait"``) until a version 1 worker is back. Kind:
``tests/testapp/kinds_versions.py``; the policies in one process: ``tests/integration/test_versions.py``.
"""

from __future__ import annotations

import pytest

from django_durajobs import Job, Status, describe, enqueue, send_event
from tests.helpers import fail_if_exited, log_of, stop_cleanly, wait_for

JOBS = 4
FAST = {"DURAJOBS_VERSION_WAIT_SECONDS": "0.5"}


def worker(runjobs, child_env, version: str):
    env = {**FAST, "DURAJOBS_TEST_KIND_VERSION": version}
    proc = runjobs("--concurrency", "2", "--poll-interval", "0.1", env=child_env, extra_env=env)
    wait_for(lambda: fail_if_exited([proc]) or "starting" in log_of(proc), message=f"worker v{version}")
    return proc


def waiting(ids: list[int], version: str, workers) -> bool:
    fail_if_exited(workers)
    jobs = Job.objects.filter(pk__in=ids, status=Status.AWAITING_EXTERNAL, kind_version=version)
    return jobs.count() == len(ids)


@pytest.mark.slow
def test_each_job_runs_on_a_worker_with_the_version_it_started_with(child_env, runjobs):
    old = worker(runjobs, child_env, "1")
    started_old = [enqueue("rolling_deploy")[0].pk for _ in range(JOBS)]
    wait_for(lambda: waiting(started_old, "1", [old]), message="the jobs to start under version 1")

    stop_cleanly([old])  # the deploy: version 2 replaces version 1
    new = worker(runjobs, child_env, "2")
    started_new = [enqueue("rolling_deploy")[0].pk for _ in range(JOBS)]
    wait_for(lambda: waiting(started_new, "2", [new]), message="the new jobs to start under version 2")

    for pk in started_old + started_new:
        send_event(f"rolling:{pk}")

    def handed_on():
        fail_if_exited([new])
        reason = "Waiting for a worker running version '1' of kind 'rolling_deploy'."
        return (
            Job.objects.filter(pk__in=started_old, status=Status.QUEUED, wait_reason=reason).count() == JOBS
        )

    wait_for(handed_on, message="the version 2 worker to hand the version 1 jobs on")
    done_new = Job.objects.filter(pk__in=started_new, status=Status.DONE)
    wait_for(lambda: done_new.count() == JOBS, message="the version 2 jobs to be done")
    assert describe(started_old[0])["version_warning"] == (
        "No running worker has version 1 of kind rolling_deploy."
    )

    back = worker(runjobs, child_env, "1")  # both versions run side by side now
    done = Job.objects.filter(pk__in=started_old + started_new, status=Status.DONE)
    wait_for(lambda: fail_if_exited([new, back]) or done.count() == 2 * JOBS, timeout=60, message="all done")
    stop_cleanly([new, back])

    for pk in started_old:
        result = Job.objects.get(pk=pk).result
        assert result["first"] == {"version": "1", "pid": old.pid}
        assert result["second"] == {"version": "1", "pid": back.pid}
    for pk in started_new:
        job = Job.objects.get(pk=pk)
        assert job.kind_version == "2"
        assert job.result == {
            "first": {"version": "2", "pid": new.pid},
            "second": {"version": "2", "pid": new.pid},
        }
