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
from .exact import read_back

TRY_STEP_PREFIX = "try-"
#: How much of a traceback is read before it is redacted, at each end: a huge exception message
#: costs no more than a long one.
READ_CHARS = 20_000
#: How much of the redacted traceback a try keeps: of its frames, the first and the last
#: characters; of its final part (``ValueError: …``, what people read first), the first and the
#: last. Within what a step's error holds.
FRAMES_HEAD_CHARS, FRAMES_TAIL_CHARS = 500, 1000
FINAL_HEAD_CHARS, FINAL_TAIL_CHARS = 1500, 400
_ON_WORKER = " on worker "
JOB_ERROR_PATH = "django_durajobs.errors.JobError"
#: The error code of a task job no worker could import (docs/tasks.md).
UNKNOWN_TASK = "unknown_task"

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


def kept_traceback(exc: BaseException) -> str:
    """The redacted traceback a try keeps: its frames cut in the middle when long, and its final
    part (the exception's class and message) kept from its start to its end, cut in its middle."""
    whole = "".join(traceback.format_exception(exc))
    final = "".join(traceback.format_exception_only(exc))
    frames = whole.removesuffix(final) if whole.endswith(final) else whole
    return _kept(frames, FRAMES_HEAD_CHARS, FRAMES_TAIL_CHARS) + _kept(
        final, FINAL_HEAD_CHARS, FINAL_TAIL_CHARS
    )


def _kept(text: str, head: int, tail: int) -> str:
    """``text`` redacted and cut to ``head`` and ``tail`` characters (read only near its ends)."""
    return _cut(redact_text(_cut(text, READ_CHARS, READ_CHARS)), head, tail)


def failure_text(exc: BaseException, worker_id: str) -> str:
    """What a failed try keeps as its step's error."""
    return f"{class_path(type(exc))}{_ON_WORKER}{worker_id}\n{kept_traceback(exc)}"


def failed_try(step: JobStep) -> tuple[TaskError, str | None]:
    """A failed try's error and worker. A try given up by its worker (past its timeout) has no
    traceback: its error is the reason."""
    return parsed_failure(step.error or step.detail)


def parsed_failure(text: str) -> tuple[TaskError, str | None]:
    """The error and worker of a ``failure_text``; other text is a ``JobError``'s reason."""
    first, _, rest = text.partition("\n")
    path, on_worker, worker_id = first.partition(_ON_WORKER)
    if on_worker and path and " " not in path:
        return TaskError(exception_class_path=path, traceback=rest), worker_id
    return TaskError(exception_class_path=JOB_ERROR_PATH, traceback=text), None


def tries_of(job: Job, steps: Iterable[JobStep]) -> tuple[list[TaskError], list[str]]:
    """The errors of a task's failed tries and the workers of its tries, oldest first.

    A try whose worker was lost before it ended counts only once it ran again; the try running
    now is its worker's from the claim on, before its step is written.
    """
    errors: list[TaskError] = []
    workers: list[str] = []
    ended_now = False
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
        else:
            continue
        ended_now = ended_now or step.step_id == try_step_id(job.attempt)
    if job.status == Status.RUNNING and job.locked_by and not ended_now:
        workers.append(job.locked_by)
    return errors + _errors_of_the_job(job, len(errors)), workers


def _errors_of_the_job(job: Job, tries_failed: int) -> list[TaskError]:
    """What failed (or holds back) the task outside the tries' own records: a worker could not
    import it, or a try ended with no error of its own (its workers were lost too often, or its
    worker gave it up past a step's timeout)."""
    if job.error and job.error_code == UNKNOWN_TASK and job.status in (Status.QUEUED, Status.FAILED):
        return [parsed_failure(job.error)[0]]
    if job.error and tries_failed < job.attempt and job.status in (Status.QUEUED, Status.FAILED):
        return [TaskError(exception_class_path=JOB_ERROR_PATH, traceback=job.error)]
    return []


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
    call = read_back(job.subject)
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
        args=call.get("args", []),
        kwargs=call.get("kwargs", {}),
        backend=enqueued.backend,
        errors=errors,
        worker_ids=workers,
    )
    if job.status == Status.DONE:
        object.__setattr__(result, "_return_value", returned(job, steps))
    return result


def returned(job: Job, steps: list[JobStep]) -> Any:
    """The function's return value as the caller gets it back: from the try that returned, as
    it was stored (the job's result, which the admin and logs show, is redacted)."""
    for step in steps:
        if step.step_id.startswith(TRY_STEP_PREFIX) and step.state == StepState.DONE:
            kept = read_back(step.result)
            if "return_value" in kept:
                return kept["return_value"]
    return job.result
