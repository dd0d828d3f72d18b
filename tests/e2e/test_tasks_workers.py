"""A ``@task`` run by real ``runjobs`` processes: killed mid-run with SIGKILL, it is recovered and
finished by another worker, which finds the task by its dotted path (kinds: ``kinds_tasks``)."""

from __future__ import annotations

import pytest

from django_durajobs import Job
from django_durajobs.tasks.compat import TaskResultStatus
from tests.helpers import log_of, sigkill, stop_cleanly, wait_for
from tests.testapp import kinds_tasks as tasks
from tests.testapp.gates import go_file, marker_pids, started_markers
from tests.testapp.models import SideEffect

LEASE_SECONDS = "1"
WORKER = ("--poll-interval", "0.2")

pytestmark = pytest.mark.django_versions


@pytest.mark.slow
def test_a_task_whose_worker_is_killed_mid_run_is_recovered_and_finished(child_env, runjobs, tmp_path):
    env = {"DURAJOBS_LEASE_SECONDS": LEASE_SECONDS, "DURAJOBS_HEARTBEAT_SECONDS": "0.3"}
    result = tasks.held.enqueue(str(tmp_path))
    doomed = runjobs(*WORKER, env=child_env, extra_env=env)
    wait_for(
        lambda: started_markers(tmp_path, int(result.id), "held") or doomed.poll() is not None,
        timeout=60,
        message="the task to start",
    )
    assert doomed.poll() is None, log_of(doomed)
    assert marker_pids(tmp_path, int(result.id), "held") == [doomed.pid]
    result.refresh()
    assert result.status == TaskResultStatus.RUNNING
    [dead_worker] = result.worker_ids
    assert f":{doomed.pid}:" in dead_worker

    sigkill(doomed)
    go_file(tmp_path, int(result.id)).touch()  # the next call runs through
    survivor = runjobs(*WORKER, env=child_env, extra_env=env)
    wait_for(
        lambda: Job.objects.get(pk=result.id).status == "done" or survivor.poll() is not None,
        timeout=60,
        message="the recovered task to finish",
    )
    stop_cleanly([survivor])

    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL, log_of(survivor)
    [worker] = result.worker_ids
    assert worker != dead_worker and f":{survivor.pid}:" in worker
    # The lost try was handed back: the call that finished is the task's first counted try.
    assert result.attempts == 1 and result.errors == []
    assert result.return_value == {"workers": [worker], "attempt": 1}
    assert SideEffect.objects.filter(name=f"held:{result.id}").count() == 2  # at least once: it ran again
    job = Job.objects.get(pk=result.id)
    assert job.worker_losses == 1 and job.kind == "tests.testapp.kinds_tasks.held"
    assert any(
        dead_worker in line and "lost" in line for line in job.log_lines.values_list("line", flat=True)
    )
