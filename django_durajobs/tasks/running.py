"""A task as a job: the kind it becomes, how a worker finds it by its dotted path, and one try."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from django.dispatch import Signal
from django.utils import timezone
from django.utils.module_loading import import_string
from django.utils.translation import gettext as _

from ..engine import retry
from ..errors import JobError
from ..redaction import package_logger
from ..registry import JobKind, register_kind
from .compat import (
    InvalidTask,
    Task,
    TaskContext,
    TaskResult,
    TaskResultStatus,
    normalize_json,
    task_finished,
    task_started,
)
from .results import failed_try, failure_text, stored_task, task_result, try_step_id

if TYPE_CHECKING:
    from ..engine.context import JobContext
    from ..models import Job

logger = package_logger("django_durajobs.tasks")

DOTTED_PATH = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+", re.ASCII)


@dataclass(eq=False)
class TaskKind(JobKind):
    """The kind of a task's jobs: named by the task's dotted path, run by ``run_task``."""

    task: Any = None


class TryFailed(JobError):
    """A try's exception, as its step keeps it: class path, worker and redacted traceback."""

    def __init__(self, exc: BaseException, worker_id: str, raised: Exception) -> None:
        super().__init__("task_failed", failure_text(exc, worker_id))
        self.raised = raised


class TaskExited(Exception):
    """A task called ``sys.exit()``: its try failed, and its worker's thread goes on."""


def _kind(task: Task) -> TaskKind:
    return TaskKind(
        name=task.module_path,
        run=run_task,
        title=task.name,
        max_attempts=getattr(task, "max_attempts", 1),
        retryable=getattr(task, "retryable", None),
        queue=task.queue_name,
        priority=task.priority,
        task=task,
    )


def task_kind(task: Task) -> TaskKind:
    """The kind of ``task``'s jobs, registered on first use."""
    try:
        kind = register_kind(_kind(task))
    except ValueError as taken:
        raise InvalidTask(f"The task's dotted path is a job kind's name: {taken}") from None
    assert isinstance(kind, TaskKind)
    return kind


def find_task_kind(name: str) -> TaskKind | None:
    """The kind of the task at the dotted path ``name``, for a worker that meets its job first.

    None when nothing is there to import; ``JobError`` when something is but it is not a task of
    a ``DurableBackend`` (``not_a_task``), or importing it failed (``unknown_job_kind``).
    """
    from .backend import DurableBackend

    if not DOTTED_PATH.fullmatch(name):
        return None
    try:
        found = import_string(name)
    except ImportError:
        return None
    except Exception as exc:
        raise JobError(
            "unknown_job_kind",
            _("Importing the task %(task)s failed: %(type)s: %(error)s")
            % {"task": repr(name), "type": type(exc).__name__, "error": exc},
        ) from exc
    if not isinstance(found, Task):
        raise JobError(
            "not_a_task",
            _("%(task)s is a %(type)s, not a task (@task).")
            % {"task": repr(name), "type": type(found).__name__},
        )
    if found.module_path != name:
        raise JobError(
            "not_a_task",
            _("%(task)s is the task %(path)s under another name.")
            % {"task": repr(name), "path": repr(found.module_path)},
        )
    try:
        backend = found.get_backend()
    except Exception as exc:
        raise JobError(
            "not_a_task",
            _("The backend of task %(task)s is unusable: %(error)s") % {"task": repr(name), "error": exc},
        ) from exc
    if not isinstance(backend, DurableBackend):
        raise JobError(
            "not_a_task",
            _("Task %(task)s runs on %(backend)s, not on DurableBackend.")
            % {"task": repr(name), "backend": type(backend).__name__},
        )
    return _kind(found)


def _send(signal: Signal, result: TaskResult) -> None:
    """Django's task signals, sent so that a failing receiver is logged and the try goes on."""
    from .backend import DurableBackend

    for receiver, outcome in signal.send_robust(sender=DurableBackend, task_result=result):
        if isinstance(outcome, Exception):
            logger.error("Task signal receiver %r failed for task %s", receiver, result.id, exc_info=outcome)


def _ended(running: TaskResult, status: TaskResultStatus, **changes: Any) -> TaskResult:
    value = changes.pop("return_value", None)
    ended = replace(running, status=status, finished_at=timezone.now(), **changes)
    object.__setattr__(ended, "_return_value", value)
    return ended


def run_task(job: Job, ctx: JobContext) -> Any:
    """One try of a task: its step ``try-<attempt>`` calls the function.

    ``task_started`` is sent before the call; ``task_finished`` when the try ends the task (it
    returned, or raised and will not be tried again), just before its worker records that.
    """
    kind = ctx.kind
    assert isinstance(kind, TaskKind)
    task = stored_task(kind.task, job)
    step_id = try_step_id(ctx.attempt)
    running = task_result(job, kind.task, [step for step in ctx.steps.values() if step.step_id != step_id])
    running.worker_ids.append(ctx.worker_id)
    object.__setattr__(running, "last_attempted_at", timezone.now())
    _send(task_started, running)

    def attempt() -> dict[str, Any]:
        context: tuple[TaskContext, ...] = (TaskContext(task_result=running),) if task.takes_context else ()
        try:
            value = task.call(*context, *running.args, **running.kwargs)
            return {"worker_id": ctx.worker_id, "return_value": normalize_json(value)}
        except Exception as exc:
            raise TryFailed(exc, ctx.worker_id, exc) from exc
        except SystemExit as exc:
            raise TryFailed(exc, ctx.worker_id, TaskExited(f"The task exited: {exc!r}")) from exc

    try:
        record = ctx.step(step_id, attempt, title=_("Try %(attempt)s") % {"attempt": ctx.attempt})
    except TryFailed as failed:
        raised = failed.raised
        error, _worker_id = failed_try(ctx.steps[step_id])
    else:
        value = record["return_value"]
        _send(task_finished, _ended(running, TaskResultStatus.SUCCESSFUL, return_value=value))
        return value
    decision = retry.decide(raised, kind, job.attempt, job.max_attempts, timezone.now(), reverting=False)
    if isinstance(decision, retry.FailWith):
        _send(task_finished, _ended(running, TaskResultStatus.FAILED, errors=[*running.errors, error]))
    raise raised
