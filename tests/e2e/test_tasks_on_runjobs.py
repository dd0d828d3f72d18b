"""Django's Tasks on real ``runjobs`` processes: tasks that raise ``KeyboardInterrupt`` or
``SystemExit``, a task no worker can import, async tasks met after the worker started, a
``RUNNING`` result read in a tight loop through the start of its try, and a task killed (SIGKILL)
between its checkpointed parts. Read back through the Tasks API (kinds: ``kinds_tasks``)."""

from __future__ import annotations

import pytest

from django_durajobs.tasks.compat import TaskResultStatus
from tests.helpers import exit_code, log_of, sigkill, sigterm, stop_cleanly, wait_for
from tests.testapp import kinds_tasks as tasks
from tests.testapp.gates import go_file, marker_pids, started_markers
from tests.testapp.models import SideEffect

pytestmark = [pytest.mark.slow, pytest.mark.django_versions]

WORKER = ("--poll-interval", "0.1")
FAST_LEASES = {"DURAJOBS_LEASE_SECONDS": "1", "DURAJOBS_HEARTBEAT_SECONDS": "0.3"}


def read(result):
    result.refresh()
    return result


def test_base_exceptions_and_an_unimportable_task_fail_and_the_worker_goes_on(child_env, runjobs):
    interrupted = tasks.failing_keyboard_interrupt.enqueue()
    exited = tasks.failing_system_exit.enqueue()
    missing = tasks.not_deployed.enqueue()
    after = tasks.calculate_meaning_of_life.using(priority=-10).enqueue()
    worker = runjobs("--burst", *WORKER, env=child_env)
    assert exit_code(worker, timeout=60) == 0, log_of(worker)

    for result, exception in ((interrupted, KeyboardInterrupt), (exited, SystemExit)):
        read(result)
        assert result.status == TaskResultStatus.FAILED and result.attempts == 1, log_of(worker)
        [error] = result.errors
        assert error.exception_class is exception
        assert error.traceback.endswith(
            f"{exception.__name__}: This task failed due to {exception.__name__}\n"
        )
    read(missing)
    assert missing.status == TaskResultStatus.FAILED and missing.attempts == 0, log_of(worker)
    [error] = missing.errors
    assert error.exception_class is ModuleNotFoundError
    assert "No module named 'tests.testapp.not_deployed'" in log_of(worker)
    assert read(after).return_value == 42


def test_async_tasks_met_after_the_worker_started_run_on_its_event_loop(child_env, runjobs):
    worker = runjobs(*WORKER, env=child_env)
    wait_for(lambda: "starting" in log_of(worker) or worker.poll() is not None, message="the worker to start")
    added = tasks.async_add.enqueue(20, 22)
    parts = tasks.async_three_parts.enqueue()
    failing = tasks.async_failing.enqueue()
    wait_for(
        lambda: (
            all(read(result).is_finished for result in (added, parts, failing)) or worker.poll() is not None
        ),
        timeout=60,
        message="the async tasks to finish",
    )
    sigterm(worker)  # its log has the failed task's traceback: not a clean stop's check
    assert exit_code(worker, timeout=60) == 0, log_of(worker)
    assert added.return_value == {"sum": 42}, log_of(worker)
    assert parts.return_value == ["one", "two", "three"]
    assert failing.status == TaskResultStatus.FAILED and failing.errors[0].exception_class is ValueError


def test_a_running_result_always_lists_its_worker(child_env, runjobs, tmp_path):
    """Read as fast as the database answers through the start of the try: no RUNNING read lacks a worker."""
    result = tasks.held.enqueue(str(tmp_path))
    worker = runjobs(*WORKER, env=child_env)
    reads = running = 0

    def read_and_check():
        nonlocal reads, running
        read(result)
        reads += 1
        if result.status == TaskResultStatus.RUNNING:
            running += 1
            assert result.worker_ids, f"read {reads}: RUNNING without a worker"

    while not started_markers(tmp_path, int(result.id), "held") and worker.poll() is None:
        read_and_check()
    for _ in range(50):  # held at its gate: running
        read_and_check()
    go_file(tmp_path, int(result.id)).touch()
    while not result.is_finished and worker.poll() is None:  # through its end
        read_and_check()
    wait_for(lambda: read(result).is_finished, timeout=60, message="the task to finish")
    stop_cleanly([worker])
    assert result.status == TaskResultStatus.SUCCESSFUL, log_of(worker)
    assert running >= 50, (reads, running)


@pytest.mark.parametrize("task", [tasks.three_parts, tasks.async_three_parts], ids=["sync", "async"])
def test_a_task_killed_after_two_of_its_three_parts_resumes_at_the_third(task, child_env, runjobs, tmp_path):
    result = task.enqueue(str(tmp_path))
    doomed = runjobs(*WORKER, env=child_env, extra_env=FAST_LEASES)
    wait_for(
        lambda: started_markers(tmp_path, int(result.id), "parts") or doomed.poll() is not None,
        timeout=60,
        message="the task to finish its second part",
    )
    assert marker_pids(tmp_path, int(result.id), "parts") == [doomed.pid], log_of(doomed)
    sigkill(doomed)
    go_file(tmp_path, int(result.id)).touch()
    survivor = runjobs(*WORKER, env=child_env, extra_env=FAST_LEASES)
    wait_for(
        lambda: read(result).is_finished or survivor.poll() is not None,
        timeout=60,
        message="the task to be recovered and finished",
    )
    stop_cleanly([survivor])
    assert result.status == TaskResultStatus.SUCCESSFUL, log_of(survivor)
    assert result.return_value == ["one", "two", "three"]
    assert len(marker_pids(tmp_path, int(result.id), "parts")) == 2  # the function ran again…
    calls = SideEffect.objects.filter(name__startswith=f"part:{result.id}:")
    assert sorted(calls.values_list("name", flat=True)) == [
        f"part:{result.id}:{part}" for part in ("one", "three", "two")
    ]  # …but each part once


def test_a_task_given_up_past_a_steps_timeout_is_failed_with_that_error(child_env, runjobs):
    result = tasks.stuck_in_a_step.enqueue(10)
    worker = runjobs(*WORKER, env=child_env)
    wait_for(lambda: read(result).is_finished or worker.poll() is not None, timeout=60, message="the give-up")
    sigterm(worker)
    assert exit_code(worker, timeout=60) == 0, log_of(worker)
    assert result.status == TaskResultStatus.FAILED
    [error] = result.errors
    assert error.exception_class_path == "django_durajobs.errors.JobError"
    assert "was still running step 'stuck' past its timeout" in error.traceback
    assert result.worker_ids == []  # its step has no record of the worker that gave it up (docs/tasks.md)
