"""The Tasks backend beyond Django's own scenarios: tries and retries, options Django does not
name, how a worker finds a task it was never told of, refused input, secrets, the admin."""

from __future__ import annotations

import logging
import math

import pytest
from django.urls import reverse
from django.utils import timezone

from django_durajobs import Job, JobError, drain
from django_durajobs.draining import _refused_kinds
from django_durajobs.registry import get_kind, known_kinds, unregister
from django_durajobs.store import due_kinds_not_in
from django_durajobs.tasks import DurableBackend, DurableTask
from django_durajobs.tasks.compat import InvalidTask, TaskResultStatus, task_backends, task_started
from tests.testapp import kinds_tasks as tasks

pytestmark = [pytest.mark.django_db, pytest.mark.django_versions]

NOT_A_TASK = "tests.testapp.kinds_tasks.not_a_task"


def run_again_now(result) -> None:
    """Bring a job's retry forward, as its backoff passing would."""
    Job.objects.filter(pk=result.id).update(next_run_at=Job.objects.get(pk=result.id).created_at)


def test_a_try_that_will_be_retried_is_ready_never_finished():
    result = tasks.fails_twice.enqueue()
    drain()
    result.refresh()
    assert result.status == TaskResultStatus.READY and not result.is_finished
    assert [error.exception_class for error in result.errors] == [tasks.Flaky]
    assert result.attempts == 1
    for _ in range(2):
        run_again_now(result)
        drain()
    result.refresh()
    assert (result.status, result.return_value, result.attempts) == (TaskResultStatus.SUCCESSFUL, 3, 3)
    assert len(result.errors) == 2 and len(set(result.worker_ids)) == 3  # drain() is a new worker each time
    assert Job.objects.get(pk=result.id).attempt == 3


def test_retryable_decides_which_errors_are_tried_again():
    result = tasks.times_out_once_then_fails.enqueue("marker")
    drain()
    result.refresh()
    assert result.status == TaskResultStatus.READY
    run_again_now(result)
    drain()
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert [error.exception_class for error in result.errors] == [TimeoutError, ValueError]


def test_max_attempts_per_enqueue():
    result = tasks.failing_value_error.using(max_attempts=4).enqueue()
    assert result.task.max_attempts == 4
    assert Job.objects.get(pk=result.id).max_attempts == 4
    assert task_backends["default"].get_result(result.id) == result


def test_an_idempotency_key_makes_one_job_and_one_enqueued_signal(django_capture_on_commit_callbacks):
    from django_durajobs.tasks.compat import task_enqueued

    sent = []
    task_enqueued.connect(receiver := lambda sender, task_result, **kw: sent.append(task_result.id))
    try:
        with django_capture_on_commit_callbacks(execute=True):
            first = tasks.add.using(idempotency_key="sum-1-2").enqueue(1, 2)
            again = tasks.add.using(idempotency_key="sum-1-2").enqueue(1, 2)
    finally:
        task_enqueued.disconnect(receiver)
    assert first.id == again.id and sent == [first.id]
    assert Job.objects.count() == 1
    with pytest.raises(JobError, match="belongs to job"):
        tasks.noop.using(idempotency_key="sum-1-2").enqueue()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        pytest.param({"max_attempts": 0}, "max_attempts", id="no tries"),
        pytest.param({"max_attempts": True}, "max_attempts", id="a bool"),
        pytest.param({"idempotency_key": " "}, "idempotency key", id="blank key"),
        pytest.param({"idempotency_key": "k" * 256}, "idempotency key", id="long key"),
    ],
)
def test_options_are_checked_when_the_task_is_made(options, message):
    with pytest.raises(InvalidTask, match=message):
        tasks.noop.using(**options)


def test_a_retryable_that_is_not_a_function_is_refused():
    with pytest.raises(InvalidTask, match="retryable"):
        DurableTask(func=tasks.noop.func, retryable="yes")


def test_a_dotted_path_longer_than_a_kind_holds_is_refused_when_the_task_is_made():
    def func():
        return None

    func.__qualname__ = "f" * 90
    with pytest.raises(InvalidTask, match="characters long"):
        DurableTask(func=func)


def test_arguments_that_are_not_json_are_refused_and_nothing_is_written():
    with pytest.raises(TypeError):
        tasks.noop.enqueue(object())
    with pytest.raises(JobError) as refused:
        tasks.noop.enqueue(math.nan)
    assert refused.value.code == "invalid_input"
    with pytest.raises(JobError, match="invalid_input|bytes"):
        tasks.noop.enqueue("x" * 1_100_000)
    assert not Job.objects.exists()


def test_a_worker_finds_a_task_no_one_registered_by_its_dotted_path():
    result = tasks.add.enqueue(20, 22)
    unregister(result.task.module_path)  # a fresh worker process: the task's module was never imported
    assert result.task.module_path not in known_kinds()
    assert due_kinds_not_in(known_kinds()) == [result.task.module_path]
    assert drain() == 1
    result.refresh()
    assert result.return_value == {"sum": 42}


def test_a_job_naming_something_that_is_not_a_task_stays_queued_and_is_reported(caplog):
    _refused_kinds.clear()
    job = Job.objects.create(kind=NOT_A_TASK, label="not a task", next_run_at=timezone.now())
    with caplog.at_level(logging.WARNING, logger="django_durajobs.worker"):
        assert drain() == 0
        assert drain() == 0  # refused once: not imported again
    assert Job.objects.get(pk=job.pk).status == "queued"
    [warning] = [record for record in caplog.records if NOT_A_TASK in record.getMessage()]
    assert "not_a_task" in warning.getMessage()
    _refused_kinds.clear()


@pytest.mark.parametrize(
    ("name", "code"),
    [
        pytest.param(NOT_A_TASK, "not_a_task", id="a function"),
        pytest.param("tests.testapp.kinds_tasks.Flaky", "not_a_task", id="a class"),
        pytest.param("tests.testapp.kinds_tasks.missing", "unknown_job_kind", id="nothing there"),
        pytest.param("no_such_module.task", "unknown_job_kind", id="no module"),
        pytest.param("os.path", "not_a_task", id="a module"),
        pytest.param("../etc/passwd", "unknown_job_kind", id="not a path"),
    ],
)
def test_only_a_task_of_a_durable_backend_becomes_a_kind(name, code):
    with pytest.raises(JobError) as refused:
        get_kind(name)
    assert refused.value.code == code
    assert name not in known_kinds()


def test_a_task_of_another_backend_is_not_run_here(settings):
    settings.TASKS = {
        "default": {"BACKEND": "django_durajobs.tasks.DurableBackend", "QUEUES": ["default", "special"]},
        "other": {"BACKEND": "django_durajobs.tasks.DurableBackend"},
    }
    assert isinstance(task_backends["other"], DurableBackend)
    result = tasks.noop.using(backend="other").enqueue()
    assert Job.objects.get(pk=result.id).subject["backend"] == "other"
    assert task_backends["default"].get_result(result.id).backend == "other"


def test_a_failing_signal_receiver_is_logged_and_the_task_still_runs(caplog):
    def broken(sender, task_result, **kwargs):
        raise RuntimeError("receiver bug")

    task_started.connect(broken)
    try:
        result = tasks.calculate_meaning_of_life.enqueue()
        with caplog.at_level(logging.ERROR, logger="django_durajobs.tasks"):
            drain()
    finally:
        task_started.disconnect(broken)
    result.refresh()
    assert result.return_value == 42
    assert any("receiver" in record.getMessage() for record in caplog.records)


def test_secrets_in_a_failure_are_redacted_in_the_result_the_job_and_its_step():
    result = tasks.leaks_a_secret.enqueue()
    drain()
    result.refresh()
    job = Job.objects.get(pk=result.id)
    stored = [result.errors[0].traceback, job.error, *job.steps.values_list("error", flat=True)]
    assert all("hunter2" not in text and "sk_live_abcdef0123456789" not in text for text in stored)
    assert result.errors[0].exception_class is RuntimeError
    assert "login failed" in result.errors[0].traceback


def test_a_huge_traceback_keeps_its_start_and_its_end():
    result = tasks.deep_failure.enqueue(400)
    drain()
    result.refresh()
    traceback = result.errors[0].traceback
    assert traceback.startswith("Traceback (most recent call last):")
    assert "\n…\n" in traceback and traceback.endswith("ValueError: 400 calls deep\n")
    assert len(traceback) < 4000


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        pytest.param({"OPTIONS": {"poll": 1}}, ["durajobs.E023"], id="options"),
        pytest.param({"QUEUES": ["default", ""]}, ["durajobs.E024"], id="blank queue"),
        pytest.param({"QUEUES": ["q" * 101]}, ["durajobs.E024"], id="long queue"),
        pytest.param({"QUEUES": ["default"]}, [], id="fine"),
    ],
)
def test_the_backends_system_checks(params, expected):
    backend = DurableBackend("checked", params)
    assert [message.id for message in backend.check()] == expected


def test_a_task_job_shows_in_the_admin_by_its_dotted_path(admin_client):
    result = tasks.add.enqueue(1, 2)
    drain()
    page = admin_client.get(reverse("admin:django_durajobs_job_change", args=[result.id])).content.decode()
    assert "tests.testapp.kinds_tasks.add" in page
    assert "Try 1" in page
    listing = admin_client.get(reverse("admin:django_durajobs_job_changelist")).content.decode()
    assert "tests.testapp.kinds_tasks.add" in listing
