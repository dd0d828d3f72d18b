"""Django's documented behaviour of a Tasks backend, against ``DurableBackend``: enqueue, result
lookup, status progression, failure with a traceback, defer, priority, queues.

The scenarios of Django's Tasks documentation and of the django-tasks backport's backend tests
(kinds: ``tests/testapp/kinds_tasks.py``), run by ``drain()`` as a worker would run them.
"""

from __future__ import annotations

from contextlib import contextmanager
from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from django.db import transaction
from django.utils import timezone

from django_durajobs import Job, drain, enqueue
from django_durajobs.tasks import DurableBackend
from django_durajobs.tasks.compat import (
    InvalidTask,
    TaskResultDoesNotExist,
    TaskResultMismatch,
    TaskResultStatus,
    task_backends,
    task_enqueued,
    task_finished,
    task_started,
)
from tests.testapp import kinds_tasks as tasks
from tests.testapp.models import SideEffect

pytestmark = [pytest.mark.django_db, pytest.mark.django_versions]


@contextmanager
def received(signal):
    """The ``(sender, status, attempts)`` of each sending of ``signal`` while inside."""
    seen = []

    def record(sender, task_result, **kwargs):
        seen.append((sender, task_result.status, task_result.attempts))

    signal.connect(record)
    try:
        yield seen
    finally:
        signal.disconnect(record)


def test_the_configured_backend_is_durable_and_says_what_it_supports():
    backend = task_backends["default"]
    assert isinstance(backend, DurableBackend)
    assert backend.alias == "default"
    assert backend.queues == {"default", "special"}
    supports = (backend.supports_defer, backend.supports_get_result, backend.supports_priority)
    assert supports == (True,) * 3
    assert backend.supports_async_task is True
    assert list(backend.check()) == []


def test_enqueue_stores_a_ready_job_and_sends_task_enqueued_after_commit(django_capture_on_commit_callbacks):
    with received(task_enqueued) as enqueued, django_capture_on_commit_callbacks(execute=True):
        with transaction.atomic():
            result = tasks.noop.enqueue(1, two=3)
            assert enqueued == []  # not before the job is there for workers to see
    assert enqueued == [(DurableBackend, TaskResultStatus.READY, 0)]
    assert result.status == TaskResultStatus.READY
    assert not result.is_finished
    assert (result.started_at, result.last_attempted_at, result.finished_at) == (None, None, None)
    with pytest.raises(ValueError, match="Task has not finished yet"):
        result.return_value  # noqa: B018
    assert (result.task, result.args, result.kwargs, result.attempts) == (tasks.noop, [1], {"two": 3}, 0)
    job = Job.objects.get(pk=result.id)
    assert (job.kind, job.label, job.status) == ("tests.testapp.kinds_tasks.noop", "noop", "queued")
    assert job.subject == {"args": [1], "kwargs": {"two": 3}, "backend": "default"}


def test_a_rolled_back_enqueue_leaves_no_job_and_sends_nothing(django_capture_on_commit_callbacks):
    with received(task_enqueued) as enqueued, django_capture_on_commit_callbacks(execute=True):
        with pytest.raises(RuntimeError), transaction.atomic():
            tasks.noop.enqueue()
            raise RuntimeError("the view failed")
    assert enqueued == []
    assert not Job.objects.exists()


def test_aenqueue_and_aget_result():
    result = async_to_sync(tasks.noop_from_bare_decorator.aenqueue)()
    assert result.status == TaskResultStatus.READY
    assert async_to_sync(tasks.noop_from_bare_decorator.aget_result)(result.id) == result
    drain()
    async_to_sync(result.arefresh)()
    assert result.status == TaskResultStatus.SUCCESSFUL


def test_get_result_is_the_enqueued_result_until_it_runs():
    result = tasks.calculate_meaning_of_life.enqueue()
    assert task_backends["default"].get_result(result.id) == result
    assert tasks.calculate_meaning_of_life.get_result(result.id) == result
    drain()
    assert result.status == TaskResultStatus.READY  # a result changes only when refreshed
    result.refresh()
    assert (result.status, result.return_value, result.attempts) == (TaskResultStatus.SUCCESSFUL, 42, 1)
    assert result.enqueued_at <= result.started_at <= result.last_attempted_at <= result.finished_at


@pytest.mark.parametrize("result_id", ["999999", "123abc", "", "-1", "1" * 40])
def test_a_result_that_does_not_exist(result_id):
    with pytest.raises(TaskResultDoesNotExist):
        task_backends["default"].get_result(result_id)


def test_a_job_that_is_not_a_tasks_has_no_task_result():
    job, _ = enqueue("lifecycle_quick")
    with pytest.raises(TaskResultDoesNotExist, match="not a task"):
        task_backends["default"].get_result(str(job.pk))


def test_a_task_asked_for_another_tasks_result_refuses():
    result = tasks.noop.enqueue()
    with pytest.raises(TaskResultMismatch, match="Task does not match"):
        tasks.calculate_meaning_of_life.get_result(result.id)


def test_status_goes_ready_running_successful_with_the_signals_on_the_way():
    result = tasks.context_of_try.enqueue()
    with received(task_started) as started, received(task_finished) as finished:
        drain()
    assert started == [(DurableBackend, TaskResultStatus.RUNNING, 1)]
    assert finished == [(DurableBackend, TaskResultStatus.SUCCESSFUL, 1)]
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    [worker] = result.worker_ids
    # takes_context: the context's result is this one, its attempt is the job's
    assert result.return_value == {"id": result.id, "attempt": 1, "workers": [worker]}
    assert Job.objects.get(pk=result.id).attempt == 1


def test_a_failing_task_is_failed_with_its_exception_class_and_traceback():
    result = tasks.failing_value_error.enqueue()
    with received(task_finished) as finished:
        drain()
    assert finished == [(DurableBackend, TaskResultStatus.FAILED, 1)]
    result.refresh()
    assert result.status == TaskResultStatus.FAILED and result.is_finished
    with pytest.raises(ValueError, match="Task failed"):
        result.return_value  # noqa: B018
    [error] = result.errors
    assert error.exception_class is ValueError
    assert error.traceback.startswith("Traceback (most recent call last):")
    assert error.traceback.endswith("ValueError: This task failed due to ValueError\n")
    assert result.enqueued_at <= result.started_at <= result.finished_at
    job = Job.objects.get(pk=result.id)
    assert (job.status, job.error) == ("failed", "ValueError: This task failed due to ValueError")


def test_a_complex_exception_keeps_its_text():
    result = tasks.complex_exception.enqueue()
    drain()
    result.refresh()
    assert result.errors[0].exception_class is ValueError
    assert 'ValueError(ValueError("This task failed"))' in result.errors[0].traceback


def test_a_task_that_exits_fails_and_the_worker_goes_on():
    result = tasks.failing_system_exit.enqueue()
    after = tasks.noop.enqueue()
    assert drain() == 2
    result.refresh()
    after.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.errors[0].exception_class is SystemExit
    assert after.status == TaskResultStatus.SUCCESSFUL


def test_a_return_value_that_is_not_json_fails_the_task():
    result = tasks.complex_return_value.enqueue()
    drain()
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.errors[0].exception_class is TypeError
    assert result._return_value is None


def test_defer_runs_the_task_no_sooner_than_run_after(time_machine):
    run_after = timezone.now() + timedelta(minutes=5)
    result = tasks.calculate_meaning_of_life.using(run_after=run_after).enqueue()
    assert result.task.run_after == run_after
    assert drain() == 0
    time_machine.move_to(run_after + timedelta(seconds=1))
    assert drain() == 1
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.started_at >= run_after
    assert task_backends["default"].get_result(result.id).task.run_after == run_after


def test_run_after_must_be_aware():
    with pytest.raises(InvalidTask, match="aware"):
        tasks.noop.using(run_after=timezone.now().replace(tzinfo=None))


def test_higher_priority_runs_first_whatever_the_order_of_enqueue():
    for name, priority in (("low", -10), ("plain", 0), ("high", 50), ("top", 100)):
        tasks.counted.using(priority=priority).enqueue(name)
    assert drain() == 4
    assert list(SideEffect.objects.order_by("id").values_list("name", flat=True)) == [
        "top:1",
        "high:1",
        "plain:1",
        "low:1",
    ]


@pytest.mark.parametrize("priority", [-101, 101, 1.5])
def test_a_priority_out_of_range_is_invalid(priority):
    with pytest.raises(InvalidTask, match="priority"):
        tasks.noop.using(priority=priority)


def test_queue_names_are_validated_against_queues():
    special = tasks.noop.using(queue_name="special").enqueue()
    assert Job.objects.get(pk=special.id).queue == "special"
    assert tasks.on_special_queue.enqueue().task.queue_name == "special"
    with pytest.raises(InvalidTask, match="Queue 'unknown' is not valid for backend"):
        tasks.noop.using(queue_name="unknown")


def test_an_enqueue_validates_the_task_as_the_settings_are_now(settings):
    settings.TASKS = {"default": {"BACKEND": "django_durajobs.tasks.DurableBackend", "QUEUES": ["other"]}}
    with pytest.raises(InvalidTask, match="Queue 'default' is not valid for backend"):
        task_backends["default"].enqueue(tasks.noop, [], {})
    assert not Job.objects.exists()


def test_queues_empty_accepts_any_queue(settings):
    settings.TASKS = {"default": {"BACKEND": "django_durajobs.tasks.DurableBackend", "QUEUES": []}}
    result = tasks.noop.using(queue_name="anything").enqueue()
    assert Job.objects.get(pk=result.id).queue == "anything"
