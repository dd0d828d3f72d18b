"""A task's job as Django's ``TaskResult``: its status, return value, errors and workers, read from
the job row and the steps of its tries.

Each try of a task is one step, ``try-<attempt>``. A try that returned keeps
``{"worker_id", "return_value"}`` as its result; one that raised keeps, as its error, the
exception's class path and worker on its first line and the redacted traceback below.
"""

from __future__ import annotations

import traceback
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from django.utils.dateparse import parse_datetime

from ..models import Job, JobStep
from ..redaction import redact_text
from ..status import TERMINAL, Status, StepState
from .compat import Task, TaskError, TaskResult, TaskResultStatus

TRY_STEP_PREFIX = "try-"
#: How much of a traceback is read before it is redacted, at each end: a huge exception message
#: costs no more than a long one.
READ_CHARS = 20_000
#: How much of the redacted traceback a try keeps, at its start and at its end (where the
#: exception is): within what a step's error holds.
KEPT_HEAD_CHARS, KEPT_TAIL_CHARS = 700, 2800
_ON_WORKER = " on worker "

#: Our statuses as Django's: a job waiting for anything (a retry, a person, a resume) is READY,
#: as it will run again; only an ended job is finished.
STATUSES = {
    Status.RUNNING: TaskResultStatus.RUNNING,
    Status.REVERTING: TaskResultStatus.RUNNING,
    Status.DONE: TaskResultStatus.SUCCESSFUL,
    Status.FAILED: TaskResultStatus.FAILED,
    Status.CANCELLED: TaskResultStatus.FAILED,
    Status.REVERTED: TaskResultStatus.FAILED,
}


def task_status(status: str) -> TaskResultStatus:
    return STATUSES.get(Status(status), TaskResultStatus.READY)


def try_step_id(attempt: int) -> str:
    return f"{TRY_STEP_PREFIX}{attempt}"


def class_path(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _cut(text: str, head: int, tail: int) -> str:
    return text if len(text) <= head + tail else f"{text[:head]}\n…\n{text[-tail:]}"


def failure_text(exc: BaseException, worker_id: str) -> str:
    """What a failed try keeps as its step's error."""
    raw = _cut("".join(traceback.format_exception(exc)), READ_CHARS, READ_CHARS)
    kept = _cut(redact_text(raw), KEPT_HEAD_CHARS, KEPT_TAIL_CHARS)
    return f"{class_path(type(exc))}{_ON_WORKER}{worker_id}\n{kept}"


def failed_try(step: JobStep) -> tuple[TaskError, str | None]:
    """A failed try's error and worker. A try given up by its worker (past its timeout) has no
    traceback: its error is the reason."""
    first, _, rest = step.error.partition("\n")
    path, on_worker, worker_id = first.partition(_ON_WORKER)
    if on_worker and path and " " not in path:
        return TaskError(exception_class_path=path, traceback=rest), worker_id
    reason = step.error or step.detail
    return TaskError(exception_class_path="django_durajobs.errors.JobError", traceback=reason), None


def tries_of(job: Job, steps: Iterable[JobStep]) -> tuple[list[TaskError], list[str]]:
    """The errors of a task's failed tries and the workers of its tries, oldest first.

    A try whose worker was lost before it ended counts only once it ran again; the try running
    now is its worker's.
    """
    errors: list[TaskError] = []
    workers: list[str] = []
    for step in sorted(steps, key=lambda step: step.position):
        if not step.step_id.startswith(TRY_STEP_PREFIX):
            continue
        if step.state == StepState.DONE and isinstance(step.result, dict):
            workers.append(str(step.result.get("worker_id", "")))
        elif step.state == StepState.FAILED:
            error, worker_id = failed_try(step)
            errors.append(error)
            if worker_id is not None:
                workers.append(worker_id)
        elif step.state == StepState.RUNNING and job.status == Status.RUNNING and job.locked_by:
            workers.append(job.locked_by)
    if (
        job.status == Status.FAILED
        and job.error
        and len(errors) < job.attempt
        and job.error_code == "worker_lost"
    ):
        errors.append(TaskError(exception_class_path="django_durajobs.errors.JobError", traceback=job.error))
    return errors, workers


def stored_task(task: Task, job: Job) -> Task:
    """The task as it was enqueued: the declared one with the job's queue, priority and options."""
    subject = job.subject if isinstance(job.subject, dict) else {}
    changes: dict[str, Any] = {"priority": job.priority, "queue_name": job.queue}
    changes["backend"] = subject.get("backend", task.backend)
    run_after = subject.get("run_after")
    changes["run_after"] = parse_datetime(run_after) if isinstance(run_after, str) else None
    if hasattr(task, "idempotency_key"):  # a DurableTask
        changes.update(idempotency_key=job.idempotency_key, max_attempts=job.max_attempts)
    if all(getattr(task, name) == value for name, value in changes.items()):
        return task
    return replace(task, **changes)


def task_result(job: Job, task: Task, steps: Iterable[JobStep] = ()) -> TaskResult[Any, Any]:
    """The ``TaskResult`` of a task's job, from the job and its steps."""
    steps = list(steps)
    subject = job.subject if isinstance(job.subject, dict) else {}
    errors, workers = tries_of(job, steps)
    started = [
        step.started_at for step in steps if step.started_at and step.step_id.startswith(TRY_STEP_PREFIX)
    ]
    enqueued = stored_task(task, job)
    result: TaskResult[Any, Any] = TaskResult(
        task=enqueued,
        id=str(job.pk),
        status=task_status(job.status),
        enqueued_at=job.created_at,
        started_at=job.started_at,
        finished_at=job.ended_at if job.status in TERMINAL else None,
        last_attempted_at=max(started) if started else job.started_at,
        args=subject.get("args", []),
        kwargs=subject.get("kwargs", {}),
        backend=enqueued.backend,
        errors=errors,
        worker_ids=workers,
    )
    if job.status == Status.DONE:
        object.__setattr__(result, "_return_value", job.result)
    return result
