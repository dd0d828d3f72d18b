"""``DurableBackend``: Django's Tasks, stored as jobs that ``manage.py runjobs`` runs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, cast

from django.core import checks
from django.db import transaction
from django.utils.module_loading import import_string

from ..conf import jobs_database
from ..errors import JobError
from ..registry import MAX_ATTEMPTS_LIMIT, NAME_MAX_LENGTH, max_attempts_problem
from ..status import Phase
from ..values import to_job_id
from .compat import (
    BaseTaskBackend,
    InvalidTask,
    Task,
    TaskResult,
    TaskResultDoesNotExist,
    normalize_json,
    task_enqueued,
)

if TYPE_CHECKING:
    from ..models import Job

#: The most characters of a queue name (as the job's column holds them).
QUEUE_MAX_LENGTH = 100
IDEMPOTENCY_KEY_MAX_LENGTH = 255


@dataclass(frozen=True, slots=True, kw_only=True)
class DurableTask(Task):
    """A task with the options of a job that Django's ``Task`` does not name.

    ``@task(max_attempts=3, retryable=lambda exc: isinstance(exc, TimeoutError))`` and
    ``send_invoice.using(idempotency_key=f"invoice-{invoice.pk}").enqueue(invoice.pk)``.
    """

    #: Tries allowed; a failed try is tried again (after a backoff) while the exception is
    #: ``retryable`` (or has ``retryable = True``), as for ``@job``.
    max_attempts: int = 1
    retryable: Callable[[BaseException], bool] | None = None
    #: Enqueues with one key make one job: later ones get its result.
    idempotency_key: str | None = None

    def __reduce__(self) -> tuple[Callable[..., DurableTask], tuple[str, dict[str, Any]]]:
        """Pickled as its dotted path and its fields, on Django 6 and on the backport alike."""
        options = {item.name: getattr(self, item.name) for item in fields(self) if item.name != "func"}
        return _unpickled, (self.module_path, options)

    def using(
        self,
        *,
        priority: int | None = None,
        queue_name: str | None = None,
        run_after: datetime | None = None,
        backend: str | None = None,
        max_attempts: int | None = None,
        idempotency_key: str | None = None,
    ) -> DurableTask:
        """``Task.using()``, with ``max_attempts`` and ``idempotency_key`` besides."""
        # Task.using by name: a dataclass with slots is a new class, which zero-argument super() misses.
        changed: Task[Any, Any] = Task.using(
            self, priority=priority, queue_name=queue_name, run_after=run_after, backend=backend
        )
        ours: dict[str, Any] = {
            name: value
            for name, value in (("max_attempts", max_attempts), ("idempotency_key", idempotency_key))
            if value is not None
        }
        return cast(DurableTask, replace(changed, **ours) if ours else changed)


def _unpickled(path: str, options: dict[str, Any]) -> DurableTask:
    declared = import_string(path)
    if not isinstance(declared, DurableTask):
        raise ValueError(f"{path!r} is not a task of DurableBackend.")
    return replace(declared, **options)


class DurableBackend(BaseTaskBackend):
    """Tasks enqueued here are jobs: checkpointed, retried, recovered when their worker dies, and
    shown in the admin with the task's dotted path as their kind.

    ``TASKS = {"default": {"BACKEND": "django_durajobs.tasks.DurableBackend"}}``
    """

    task_class = DurableTask
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def validate_task(self, task: Task) -> None:
        super().validate_task(task)
        path = task.module_path
        if len(path) > NAME_MAX_LENGTH:
            raise InvalidTask(
                f"The task's dotted path {path[:40]!r}… is {len(path)} characters long; the job "
                f"kind it becomes holds {NAME_MAX_LENGTH}."
            )
        if len(task.queue_name) > QUEUE_MAX_LENGTH:
            raise InvalidTask(f"A queue name holds at most {QUEUE_MAX_LENGTH} characters.")
        if not isinstance(task, DurableTask):
            return
        if max_attempts_problem(task.max_attempts):
            raise InvalidTask(f"max_attempts must be an integer from 1 to {MAX_ATTEMPTS_LIMIT:,}.")
        if task.retryable is not None and not callable(task.retryable):
            raise InvalidTask("retryable must be a function of the exception, or None.")
        key = task.idempotency_key
        if key is not None and (
            not isinstance(key, str) or not key.strip() or len(key) > IDEMPOTENCY_KEY_MAX_LENGTH
        ):
            raise InvalidTask(
                "An idempotency key must be a non-blank string of at most "
                f"{IDEMPOTENCY_KEY_MAX_LENGTH} characters."
            )

    def enqueue(self, task: Task, args: Any, kwargs: Any) -> TaskResult:
        """Store the task as a job; ``task_enqueued`` is sent once the transaction commits.

        An enqueue with the idempotency key of an earlier one returns that one's result and
        sends nothing. Arguments must be JSON (``TypeError`` otherwise, as Django has it);
        ``JobError("invalid_input")`` for what no job may hold (NaN, too large).
        """
        from ..store import enqueue
        from .exact import storable
        from .results import task_result
        from .running import task_kind

        self.validate_task(task)
        call = {"args": normalize_json(list(args)), "kwargs": normalize_json(dict(kwargs))}
        # The backend's alias also tells a worker that cannot import the task that it is a task's.
        subject: dict[str, Any] = {**storable(call), "backend": task.backend}
        if task.run_after is not None:
            subject["run_after"] = task.run_after.isoformat()
        job, created = enqueue(
            task_kind(task),
            subject=subject,
            run_at=task.run_after,
            queue=task.queue_name,
            priority=task.priority,
            max_attempts=getattr(task, "max_attempts", 1),
            idempotency_key=getattr(task, "idempotency_key", None),
        )
        result = task_result(job, task) if created else read_result(job, task)
        if created:
            transaction.on_commit(
                lambda: task_enqueued.send(type(self), task_result=result), using=jobs_database()
            )
        return result

    def get_result(self, result_id: str) -> TaskResult:
        """The result of the task job ``result_id`` (its job's id), as it is now."""
        from ..models import Job
        from ..registry import get_kind
        from .running import TaskKind

        try:
            job = Job.objects.filter(pk=to_job_id(result_id, "A task result's id")).first()
        except JobError:
            job = None
        if job is None:
            raise TaskResultDoesNotExist(f"No task result {result_id!r}.")
        try:
            kind = get_kind(job.kind)
        except JobError as exc:
            raise TaskResultDoesNotExist(f"Job {job.pk} is not a task's: {exc.message}") from None
        if not isinstance(kind, TaskKind):
            raise TaskResultDoesNotExist(f"Job {job.pk} is a {job.kind!r} job, not a task's.")
        return read_result(job, kind.task)

    def check(self, **kwargs: Any) -> list[checks.CheckMessage]:
        from .checks import backend_errors

        return backend_errors(self)


def read_result(job: Job, task: Task) -> TaskResult:
    """The result of ``task``'s job, with the steps of its tries read (one query)."""
    from ..models import JobStep
    from .results import TRY_STEP_PREFIX, task_result

    steps = JobStep.objects.filter(job_id=job.pk, phase=Phase.RUN, step_id__startswith=TRY_STEP_PREFIX)
    return task_result(job, task, steps)
