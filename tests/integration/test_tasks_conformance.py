"""Django's Tasks contract, scenario by scenario, against ``DurableBackend``: each task enqueued,
run by ``drain()`` as a worker runs it, and read back through the Tasks API only.

Adapted from Django's ``tests/tasks/`` (``test_tasks.py``, ``test_immediate_backend.py``) and the
django-tasks backport's backend tests, where ``ImmediateBackend`` is the reference; and the
issues a team moving its ``@task`` code here would otherwise meet (docs/tasks.md). Marked
``django_versions``: CI runs it on Django 6 and on 5.2 with the backport. The same scenarios on a
real ``runjobs`` process: tests/e2e/test_tasks_on_runjobs.py.
"""

from __future__ import annotations

import logging
import pickle
from datetime import timedelta
from importlib.util import find_spec

import pytest
from asgiref.sync import async_to_sync
from django.utils import timezone

from django_durajobs import drain
from django_durajobs.registry import unregister
from django_durajobs.tasks.compat import InvalidTask, TaskResultStatus, task_finished
from django_durajobs.tasks.running import task_kind
from tests.testapp import kinds_tasks as tasks
from tests.testapp.models import SideEffect

pytestmark = [pytest.mark.django_db, pytest.mark.django_versions]

#: Django's own logger of the task signals.
TASKS_LOGGER = "django.tasks" if find_spec("django.tasks") else "django_tasks"


def finished(result):
    result.refresh()
    assert result.is_finished, result.status
    return result


def test_a_task_reads_back_its_value_timestamps_worker_and_attempts():
    before = timezone.now()
    result = tasks.calculate_meaning_of_life.enqueue()
    assert drain() == 1
    finished(result)
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == 42
    assert before <= result.enqueued_at <= result.started_at <= result.last_attempted_at <= result.finished_at
    assert result.attempts == 1 and len(result.worker_ids) == 1 and result.errors == []


@pytest.mark.parametrize(
    "task, exception, message",
    [
        (tasks.failing_value_error, ValueError, "This task failed due to ValueError"),
        (tasks.failing_system_exit, SystemExit, "This task failed due to SystemExit"),
        (tasks.failing_keyboard_interrupt, KeyboardInterrupt, "This task failed due to KeyboardInterrupt"),
    ],
)
def test_a_failing_task_is_failed_with_its_exception_and_django_logs_its_traceback(
    task, exception, message, caplog
):
    result = task.enqueue()
    with caplog.at_level(logging.INFO, logger=TASKS_LOGGER):
        assert drain() == 1  # the drain goes on: nothing escapes it
    finished(result)
    assert result.status == TaskResultStatus.FAILED and result.attempts == 1
    [error] = result.errors
    assert error.exception_class is exception
    assert error.traceback.endswith(f"{exception.__name__}: {message}\n"), error.traceback
    [logged] = [
        record for record in caplog.records if record.name == TASKS_LOGGER and "FAILED" in record.getMessage()
    ]
    assert logged.levelno == logging.ERROR and result.id in logged.getMessage()
    assert logged.exc_info is not None and logged.exc_info[1].args == (message,)
    assert drain() == 0  # not picked up again


def test_a_base_exception_follows_the_retry_rules_it_is_not_retryable_by_default():
    result = tasks.failing_keyboard_interrupt.using(max_attempts=2).enqueue()
    drain()
    finished(result)
    assert result.status == TaskResultStatus.FAILED and result.attempts == 1
    assert [error.exception_class for error in result.errors] == [KeyboardInterrupt]


def test_a_long_exception_message_keeps_its_class_its_start_and_its_last_line():
    result = tasks.failing_with_long_message.enqueue(4000)
    drain()
    [error] = finished(result).errors
    last_line = error.traceback.splitlines()[-1]
    assert error.traceback.endswith("x!\n")
    assert "ValueError: xxxx" in error.traceback and len(error.traceback) < 4000
    assert last_line.endswith("x!")


def test_a_deep_traceback_keeps_its_first_frames_and_its_final_line():
    result = tasks.deep_failure.enqueue(300)
    drain()
    [error] = finished(result).errors
    assert error.traceback.startswith("Traceback (most recent call last):")
    assert error.traceback.endswith("ValueError: 300 calls deep\n")


def test_a_chained_exception_keeps_its_cause():
    result = tasks.failing_chained.enqueue()
    drain()
    [error] = finished(result).errors
    assert error.exception_class is RuntimeError
    assert "KeyError: 'the cause'" in error.traceback
    assert "The above exception was the direct cause" in error.traceback
    assert error.traceback.endswith("RuntimeError: the consequence\n")


def test_the_return_value_is_what_the_function_returned_and_only_what_is_shown_is_redacted():
    from django_durajobs import Job, describe

    result = tasks.returns_a_secret.enqueue()
    drain()
    assert finished(result).return_value == {"token": "tok_0123456789abcdef", "user": "ann"}
    assert tasks.returns_a_secret.get_result(result.id).return_value["token"] == "tok_0123456789abcdef"
    job = Job.objects.get(pk=result.id)
    assert job.result == {"token": "[REDACTED]", "user": "ann"}  # the admin and describe() show this
    assert "tok_0123456789abcdef" not in str(describe(job))


@pytest.mark.parametrize("value", [1e20, -0.0, 1.5, 10**20, 2.0, 1e-7, "1e20"])
def test_arguments_and_return_values_make_the_json_round_trip(value):
    result = tasks.echo.enqueue(value, [value], key={"nested": value})
    drain()
    finished(result)
    assert result.args == [value, [value]]
    assert result.kwargs == {"key": {"nested": value}}
    returned = result.return_value
    assert returned["types"][0] == type(value).__name__
    assert repr(returned["args"][0]) == repr(value) and returned["kwargs"]["key"]["nested"] == value


def test_a_task_no_worker_can_import_fails_with_the_import_error():
    result = tasks.not_deployed.enqueue()
    unregister(tasks.not_deployed.module_path)  # as a worker of another deploy knows it: not at all
    with pytest.raises(ModuleNotFoundError):
        __import__("tests.testapp.not_deployed")
    drain()
    task_kind(tasks.not_deployed)  # as the web process that enqueued it knows it
    result = tasks.not_deployed.get_result(result.id)
    assert result.status == TaskResultStatus.FAILED and result.is_finished and result.attempts == 0
    [error] = result.errors
    assert error.exception_class is ModuleNotFoundError
    assert error.traceback.endswith("ModuleNotFoundError: No module named 'tests.testapp.not_deployed'\n")


def test_with_a_grace_a_task_no_worker_can_import_stays_ready_with_the_reason(settings, time_machine):
    from django_durajobs import Job, describe

    settings.DURAJOBS = {**getattr(settings, "DURAJOBS", {}), "UNKNOWN_TASK_GRACE_SECONDS": 60}
    result = tasks.not_deployed.enqueue()
    unregister(tasks.not_deployed.module_path)
    drain()
    task_kind(tasks.not_deployed)
    result.refresh()
    assert result.status == TaskResultStatus.READY and result.attempts == 0
    [error] = result.errors
    assert error.exception_class is ModuleNotFoundError
    shown = describe(Job.objects.get(pk=result.id))
    assert "No module named" in shown["wait_reason"]
    assert any("No module named" in line["line"] for line in shown["log"])
    unregister(tasks.not_deployed.module_path)
    drain()
    assert Job.objects.get(pk=result.id).log_lines.count() == 1  # said once, not at every look

    time_machine.move_to(timezone.now() + timedelta(seconds=61))
    drain()
    task_kind(tasks.not_deployed)
    result.refresh()
    assert result.status == TaskResultStatus.FAILED and len(result.errors) == 1


def test_takes_context_gives_the_result_and_attempt():
    result = tasks.context_of_try.enqueue()
    drain()
    assert finished(result).return_value == {"id": result.id, "attempt": 1, "workers": result.worker_ids}


def test_durable_steps_inside_a_task_run_once_across_tries():
    result = tasks.three_parts.enqueue(fail_in="three")
    drain()
    result.refresh()
    assert result.status == TaskResultStatus.READY and len(result.errors) == 1  # waits for its retry
    from django_durajobs import Job

    Job.objects.filter(pk=result.id).update(next_run_at=timezone.now())
    drain()
    assert finished(result).return_value == ["one", "two", "three"] and result.attempts == 2
    names = sorted(
        SideEffect.objects.filter(name__startswith=f"part:{result.id}:").values_list("name", flat=True)
    )
    assert names == [f"part:{result.id}:{part}" for part in ("one", "three", "two")]


def test_a_tasks_step_may_not_take_a_tries_name():
    result = tasks.steps_as_tries.enqueue()
    drain()
    [error] = finished(result).errors
    assert "must not start with 'try-'" in error.traceback


def test_async_tasks_run_and_read_back():
    added = tasks.async_add.enqueue(2, 3)
    failing = tasks.async_failing.enqueue()
    context = tasks.async_context_of_try.enqueue()
    parts = tasks.async_three_parts.enqueue()
    assert drain() == 4
    assert finished(added).return_value == {"sum": 5}
    [error] = finished(failing).errors
    assert error.exception_class is ValueError and error.traceback.endswith(
        "ValueError: This async task failed\n"
    )
    assert finished(context).return_value == {"id": context.id, "attempt": 1}
    assert finished(parts).return_value == ["one", "two", "three"]


def test_async_enqueue_and_get_result():
    result = async_to_sync(tasks.async_add.aenqueue)(1, 1)
    drain()
    assert async_to_sync(tasks.async_add.aget_result)(result.id).return_value == {"sum": 2}


def test_task_finished_is_sent_while_the_exception_is_handled():
    seen = []

    def record(sender, task_result, **kwargs):
        import sys

        seen.append((task_result.status, sys.exc_info()[0]))

    task_finished.connect(record)
    try:
        tasks.failing_value_error.enqueue()
        tasks.calculate_meaning_of_life.enqueue()
        drain()
    finally:
        task_finished.disconnect(record)
    assert sorted(seen, key=str) == sorted(
        [(TaskResultStatus.FAILED, ValueError), (TaskResultStatus.SUCCESSFUL, None)], key=str
    )


def test_results_and_tasks_pickle():
    result = tasks.add.enqueue(1, 2)
    drain()
    finished(result)
    again = pickle.loads(pickle.dumps(result))
    assert (again.id, again.status, again.return_value, again.task) == (
        result.id,
        result.status,
        {"sum": 3},
        tasks.add,
    )
    assert pickle.loads(pickle.dumps(tasks.add)) == tasks.add
    changed = tasks.add.using(priority=5, idempotency_key="k")
    assert pickle.loads(pickle.dumps(changed)) == changed


def test_priorities_then_run_after(time_machine):
    later = tasks.counted.using(run_after=timezone.now() + timedelta(minutes=5)).enqueue("later")
    low = tasks.counted.using(priority=-10).enqueue("low")
    high = tasks.counted.using(priority=10).enqueue("high")
    assert drain(max_jobs=1) == 1
    assert finished(high).status == TaskResultStatus.SUCCESSFUL
    low.refresh()
    assert low.status == TaskResultStatus.READY
    drain()
    later.refresh()
    assert later.status == TaskResultStatus.READY
    time_machine.move_to(timezone.now() + timedelta(minutes=6))
    drain()
    assert finished(later).started_at >= later.task.run_after


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"priority": 101}, "priority must be a whole number between -100 and 100"),
        ({"priority": 1.5}, "priority must be a whole number between -100 and 100"),
        ({"queue_name": "nowhere"}, "Queue 'nowhere' is not valid for backend"),
        ({"max_attempts": 0}, "max_attempts must be an integer from 1 to 1,000,000"),
        ({"idempotency_key": " "}, "An idempotency key must be a non-blank string"),
    ],
)
def test_using_validates_at_once(changes, message):
    with pytest.raises(InvalidTask, match=message):
        tasks.noop.using(**changes)


def test_using_an_unknown_backend_is_refused():
    with pytest.raises(Exception, match="The connection 'missing' doesn't exist") as raised:
        tasks.noop.using(backend="missing")
    assert type(raised.value).__name__ in ("InvalidTaskBackend", "InvalidTaskBackendError")


def test_django_logs_enqueued_running_and_successful(caplog, django_capture_on_commit_callbacks):
    with (
        caplog.at_level(logging.DEBUG, logger=TASKS_LOGGER),
        django_capture_on_commit_callbacks(execute=True),
    ):
        result = tasks.noop.enqueue()
    with caplog.at_level(logging.DEBUG, logger=TASKS_LOGGER):
        drain()
    lines = [record.getMessage() for record in caplog.records if record.name == TASKS_LOGGER]
    assert len(lines) == 3, lines
    assert "enqueued" in lines[0] and result.id in lines[0]
    assert "state=RUNNING" in lines[1] and result.id in lines[1]
    assert "state=SUCCESSFUL" in lines[2] and result.id in lines[2]


def test_the_admin_shows_a_tasks_durable_steps_and_why_it_cannot_start(admin_client):
    from django_durajobs import Job
    from tests.admin_pages import change_url

    parts = tasks.three_parts.enqueue()
    missing = tasks.not_deployed.enqueue()
    unregister(tasks.not_deployed.module_path)
    drain()
    page = admin_client.get(change_url(Job.objects.get(pk=parts.id))).content.decode()
    assert all(title in page for title in ("Try 1", "One", "Two", "Three"))
    page = admin_client.get(change_url(Job.objects.get(pk=missing.id))).content.decode()
    assert "No module named &#x27;tests.testapp.not_deployed&#x27;" in page
